"""Trace rows gathered column by column: `MessageRun` (abcast.trace.rows: the rows of one
batch of messages, described once) and `EventColumns` (rows and runs appended to flat
column buffers, turned into one Arrow table of EVENT_SCHEMA at a time).

A real node at saturation records a few hundred thousand rows a second, nearly all of
them in runs: the `send` rows of a batch leaving, the `deliver` rows of a batch delivered.
Such a run is one origin's consecutive messages at one node, recorded at one moment, so
it is described by its first row and its sizes; `EventColumns.add_run` keeps it as a few
appends to per-run buffers (the sizes to a per-row one), whatever its length, and
`take()` spreads the per-run values over the rows with one vectorised gather per column,
never touching a row in Python (the buffers are handed to Arrow as they are; strings are
dictionary codes; a column of one value is copied, not gathered).

Rules: a run's row i (from 0) is message `first_seq + i`, at `t_ns + i`, with index
`first_index + i` and size `sizes[i]`; every row of it shares run_id, node, kind, origin,
group, view_id and deps, and has no peer and no members. `EventColumns` gives exactly the
table `abcast.trace.rows.events_to_table` gives for the same rows in the same order (the
tests compare the two). Not thread-safe: one owner at a time.
"""

from __future__ import annotations

from array import array
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc

from abcast.trace.rows import EventRow, MessageRun
from abcast.trace.schema import EVENT_SCHEMA

_ONE: Final = b"\x01"
_ZERO: Final = b"\x00"
_MAP_TYPE: Final = EVENT_SCHEMA.field("deps").type
_LIST_TYPE: Final = EVENT_SCHEMA.field("members").type


class _Strings:
    """A string column as dictionary codes (None is a value like any other)."""

    __slots__ = ("codes", "index", "values")

    def __init__(self) -> None:
        self.codes: dict[str | None, int] = {}
        self.values: list[str | None] = []
        self.index = array("i")

    def code(self, value: str | None) -> int:
        code = self.codes.get(value)
        if code is None:
            code = self.codes[value] = len(self.values)
            self.values.append(value)
        return code

    def add(self, value: str | None) -> None:
        self.index.append(self.code(value))

    def arrow(self) -> pa.Array:
        index = self.index
        codes = pa.Array.from_buffers(pa.int32(), len(index), [None, pa.py_buffer(index)])
        return pa.array(self.values, pa.string()).take(codes)

    def repeats(self, length: int) -> bool:
        """Whether the column is one value that `length` rows of it can copy (run_id,
        node; group, peer mostly): its bytes must stay within int32 offsets."""
        if len(self.values) != 1:
            return False
        value = self.values[0]
        return value is None or 4 * len(value) * length < 2**31


class _Ints:
    """An integer column (array typecode `typecode`) and its validity, a byte per row."""

    __slots__ = ("arrow_type", "valid", "values")

    def __init__(self, typecode: str, arrow_type: pa.DataType) -> None:
        self.values = array(typecode)
        self.valid = bytearray()
        self.arrow_type = arrow_type

    def add(self, value: int | None) -> None:
        if value is None:
            self.values.append(0)
            self.valid += _ZERO
        else:
            self.values.append(value)
            self.valid += _ONE

    def extend(self, values: list[int]) -> None:
        self.values.fromlist(values)
        self.valid += _ONE * len(values)

    def arrow(self) -> pa.Array:
        values, length = self.values, len(self.values)
        bitmap = None if _ZERO not in self.valid else _bits(self.valid).buffers()[1]
        return pa.Array.from_buffers(self.arrow_type, length, [bitmap, pa.py_buffer(values)],
                                     null_count=-1)


_POSITIONS: dict[str, pa.Array] = {}
_ARROW_INT: Final = {"q": pa.int64(), "i": pa.int32()}


def _positions(length: int, typecode: str = "q") -> pa.Array:
    """0, 1, …, length - 1 as int64 ("q") or int32 ("i"), made once at the largest
    length asked for."""
    made = _POSITIONS.get(typecode)
    if made is None or len(made) < length:
        size = max(length, 2 * len(made) if made is not None else 0, 1024)
        made = _POSITIONS[typecode] = pa.Array.from_buffers(
            _ARROW_INT[typecode], size, [None, pa.py_buffer(array(typecode, range(size)))])
    return made.slice(0, length)


def _repeated(value: str | None, length: int) -> pa.Array:
    """`value` `length` times as a string array, its bytes copied, not gathered."""
    if value is None:
        return pa.nulls(length, pa.string())
    data = value.encode()
    offsets = pc.multiply(_positions(length + 1, "i"), pa.scalar(len(data), pa.int32()))
    return pa.Array.from_buffers(pa.string(), length,
                                 [None, offsets.buffers()[1], pa.py_buffer(data * length)])


def _bits(flags: bytearray) -> pa.BooleanArray:
    """A byte per row (0 or 1) as a boolean array."""
    as_bytes = pa.Array.from_buffers(pa.uint8(), len(flags), [None, pa.py_buffer(flags)])
    return pc.cast(as_bytes, pa.bool_())


class _Nested:
    """A map (deps) or list (members) column: offsets, validity, and the flattened
    entries: string keys/values and, for a map, int64 items."""

    __slots__ = ("items", "keys", "offsets", "valid")

    def __init__(self) -> None:
        self.offsets = array("i", (0,))
        self.valid = bytearray()
        self.keys = _Strings()
        self.items = array("q")

    def null(self) -> None:
        self.offsets.append(self.offsets[-1])
        self.valid += _ZERO

    def add_map(self, deps: dict[str, int]) -> None:
        pairs = sorted(deps.items())  # sorted keys: the same row always gives the same bytes
        for key, value in pairs:
            self.keys.add(key)
            self.items.append(value)
        self.offsets.append(self.offsets[-1] + len(pairs))
        self.valid += _ONE

    def add_list(self, values: tuple[str, ...] | list[str]) -> None:
        for value in values:
            self.keys.add(value)
        self.offsets.append(self.offsets[-1] + len(values))
        self.valid += _ONE

    def _parts(self) -> tuple[pa.Array, pa.Array | None]:
        offsets = pa.Array.from_buffers(pa.int32(), len(self.offsets),
                                        [None, pa.py_buffer(self.offsets)])
        mask = pc.invert(_bits(self.valid)) if _ZERO in self.valid else None
        return offsets, mask

    def map_arrow(self) -> pa.Array:
        offsets, mask = self._parts()
        items = pa.Array.from_buffers(pa.int64(), len(self.items),
                                      [None, pa.py_buffer(self.items)])
        return pa.MapArray.from_arrays(offsets, self.keys.arrow(), items, type=_MAP_TYPE,
                                       mask=mask)

    def list_arrow(self) -> pa.Array:
        offsets, mask = self._parts()
        return pa.ListArray.from_arrays(offsets, self.keys.arrow(), type=_LIST_TYPE, mask=mask)


class EventColumns:
    """Rows of EVENT_SCHEMA gathered column by column; `take()` hands them over as one
    table and starts empty again.

    Everything but `size` is kept once per run (a single row is a run of one): a run
    costs a few appends whatever its length, and `take()` spreads the per-run values over
    the rows in one vectorised gather per column (counting columns keep value minus the
    run's first position, so adding the row positions back counts them up)."""

    __slots__ = ("_deps", "_group", "_index", "_kind", "_members", "_node", "_origin",
                 "_peer", "_run_id", "_seq", "_size", "_starts", "_t_ns", "_view_id", "rows")

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self.rows = 0
        self._starts = array("i", (0,))  # each run's first row; the last: the row count
        self._run_id, self._node, self._kind = _Strings(), _Strings(), _Strings()
        self._origin, self._group, self._peer = _Strings(), _Strings(), _Strings()
        self._seq, self._t_ns = _Ints("q", pa.int64()), _Ints("q", pa.int64())
        self._index, self._view_id = _Ints("q", pa.int64()), _Ints("q", pa.int64())
        self._size = _Ints("i", pa.int32())  # per row
        self._deps, self._members = _Nested(), _Nested()

    def __len__(self) -> int:
        return self.rows

    def add(self, row: EventRow) -> None:
        """One row, whatever its kind."""
        position = self.rows
        self.rows += 1
        self._starts.append(self.rows)
        self._run_id.add(row.run_id)
        self._node.add(row.node)
        self._kind.add(row.kind)
        self._origin.add(row.origin)
        self._seq.add(None if row.seq is None else row.seq - position)
        self._group.add(row.group)
        self._t_ns.add(row.t_ns - position)
        self._index.add(None if row.index is None else row.index - position)
        self._size.add(row.size)
        self._view_id.add(row.view_id)
        if row.deps is None:
            self._deps.null()
        else:
            self._deps.add_map(row.deps)
        self._peer.add(row.peer)
        if row.members is None:
            self._members.null()
        else:
            self._members.add_list(row.members)

    def add_run(self, run: MessageRun) -> None:
        """A run's rows (module rules), in a few appends whatever its length."""
        count = len(run.sizes)
        if not count:
            return
        position = self.rows
        self.rows += count
        self._starts.append(self.rows)
        self._run_id.add(run.run_id)
        self._node.add(run.node)
        self._kind.add(run.kind)
        self._origin.add(run.origin)
        self._seq.add(run.first_seq - position)
        self._group.add(run.group)
        self._t_ns.add(run.t_ns - position)
        self._index.add(run.first_index - position)
        self._size.extend(run.sizes)
        self._view_id.add(run.view_id)
        if run.deps is None:
            self._deps.null()
        else:
            self._deps.add_map(run.deps)
        self._peer.add(None)
        self._members.null()

    def take(self) -> pa.Table:
        """The rows gathered so far as a table of exactly EVENT_SCHEMA; the columns start
        empty again (the buffers handed to Arrow are never appended to again: an array
        exporting its buffer cannot grow)."""
        rows, starts = self.rows, self._starts
        runs = pa.ListArray.from_arrays(
            pa.Array.from_buffers(pa.int32(), len(starts), [None, pa.py_buffer(starts)]),
            pa.nulls(rows))
        run_of_row = pc.list_parent_indices(runs)
        positions = _positions(rows)

        def spread(per_run: pa.Array) -> pa.Array:
            if per_run.null_count == len(per_run):  # members, mostly: no gather
                return pa.nulls(rows, per_run.type)
            return per_run.take(run_of_row)

        def strings(column: _Strings) -> pa.Array:
            if column.repeats(rows):
                return _repeated(column.values[0], rows)
            return spread(column.arrow())

        def counting(column: _Ints) -> pa.Array:
            return pc.add(spread(column.arrow()), positions)

        arrays = [
            strings(self._run_id), strings(self._node), strings(self._kind),
            strings(self._origin), counting(self._seq), strings(self._group),
            counting(self._t_ns), counting(self._index), self._size.arrow(),
            spread(self._view_id.arrow()), spread(self._deps.map_arrow()),
            strings(self._peer), spread(self._members.list_arrow()),
        ]
        self._reset()
        return pa.Table.from_arrays(arrays, schema=EVENT_SCHEMA)
