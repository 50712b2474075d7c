"""The in-memory checks cost O(rows) whatever the seqs: a trace may jump from seq 1 to
2**62 (or hold the bigint extremes), and a check that walked the seqs between would
build that range (FIFO_ORDER's holes did: one Violation per missing seq, which no memory
holds). The checks run in a child process under a 1 GiB address-space cap, so a
regression fails with MemoryError there instead of taking the machine's memory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from abcast.testing import FIFO_ORDER
from abcast.trace.schema import GUARANTEES

_CAP = 1 << 30

_CHILD = """
import json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({cap}, {cap}))
from abcast.testing import check_events, check_fifo, count_by_code
from abcast.trace.rows import EventRow
R, big, low, top = "wide", 2**62, -2**63, 2**63 - 1
rows = [
    EventRow(R, "n1", "send", "n1", 1, "g", 1, None),
    EventRow(R, "n1", "send", "n1", big, "g", 2, None, deps={{"n2": big}}),
    EventRow(R, "n1", "deliver", "n1", 1, "g", 3, 1),
    EventRow(R, "n1", "deliver", "n1", big, "g", 4, 2),
    EventRow(R, "n2", "deliver", "n1", 1, "g", 5, 1),
    EventRow(R, "n2", "deliver", "n1", big, "g", 6, 2),
    EventRow(R, "n2", "deliver", "n3", low, "g", 7, 3),
    EventRow(R, "n2", "deliver", "n3", top, "g", 8, 4),
    EventRow(R, "n3", "view", None, None, "g", 9, None, view_id=1, members=("n3",)),
    EventRow(R, "n3", "view", None, None, "g", 10, None, view_id=top, members=("n2", "n3")),
    EventRow(R, "n3", "deliver", "n1", big, "g", 11, 1, view_id=top),
]
out = {{g: count_by_code(check_events(rows, [g])) for g in {guarantees!r}}}
holes = [[list(v.nodes), [list(m) for m in v.messages], v.detail] for v in check_fifo(rows)]
print(json.dumps({{"counts": out, "holes": holes}}))
"""


def test_checks_of_a_trace_with_seq_jumps_past_2_62_stay_within_1_gib() -> None:
    src = str(Path(__file__).resolve().parents[2] / "src")
    child = subprocess.run(
        [sys.executable, "-c", _CHILD.format(cap=_CAP, guarantees=GUARANTEES)],
        check=False, capture_output=True, text=True, timeout=120,
        env={"PYTHONPATH": src, "PATH": "/usr/bin:/bin"})
    assert child.returncode == 0, child.stderr[-2000:]
    found = json.loads(child.stdout)
    assert set(found["counts"]) == set(GUARANTEES)
    # n1's and n2's gap n1#2..2**62-1 is one hole each; n2's n3#-2**63..2**63-1 one more
    # (its seqs above 0: 1..2**63-2); n3 delivered one seq of n1 only: no gap.
    assert found["counts"]["fifo"] == {FIFO_ORDER: 3}
    holes = [(nodes, messages) for nodes, messages, _ in found["holes"]]
    assert holes == [
        (["n1"], [["g", "n1", 2], ["g", "n1", 2**62 - 1]]),
        (["n2"], [["g", "n1", 2], ["g", "n1", 2**62 - 1]]),
        (["n2"], [["g", "n3", 1], ["g", "n3", 2**63 - 2]])]
    assert f"({2**62 - 2} seqs)" in found["holes"][0][2]
