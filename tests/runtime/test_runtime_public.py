"""The public names of `abcast`: all resolve, and importing a core module stays cheap."""

from __future__ import annotations

import subprocess
import sys

import pytest

import abcast

pytestmark = pytest.mark.timeout(30)


def test_every_public_name_resolves_to_what_it_claims() -> None:
    for name in abcast.__all__:
        assert getattr(abcast, name) is not None
    assert abcast.Group.__module__ == "abcast.runtime.group"
    assert abcast.Delivery.__name__ == "Deliver"
    assert set(abcast.__all__) <= set(dir(abcast))
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = abcast.Nope


def test_importing_a_core_module_does_not_load_the_runtime() -> None:
    code = "import sys, abcast.ids; print(sorted(m for m in sys.modules if m.startswith(("
    code += "'abcast.runtime', 'abcast.transport', 'pyarrow'))))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True, timeout=30).stdout
    assert out.strip() == "[]"


#: what tracing needs and a node without it must not load (~90 MiB of RSS)
_TRACE_ONLY = ("pyarrow", "numpy", "pandas")

_UNTRACED_NODE = """
import asyncio, sys
import abcast.cli, abcast.evaluation.worker  # what `abcast node` imports
from abcast import Group, Node

async def main():
    async with Node("tcp://127.0.0.1:0", node="n1") as node:
        got = asyncio.get_running_loop().create_future()
        group = Group("g", ordering="sequencer", host=node, peers={},
                      on_deliver=lambda d: got.done() or got.set_result(d.payload))
        await group.open()
        await group.broadcast(b"hello")
        assert await asyncio.wait_for(got, 10) == b"hello"
        await group.close()

asyncio.run(main())
print(sorted(m for m in sys.modules if m.split(".")[0] in %r))
"""


def test_a_node_that_does_not_trace_never_loads_pyarrow() -> None:
    # A fresh interpreter: the node's command-line modules, then a group opened,
    # a message broadcast and delivered, the group closed, with no recorder.
    out = subprocess.run([sys.executable, "-c", _UNTRACED_NODE % (_TRACE_ONLY,)], check=True,
                         capture_output=True, text=True, timeout=30).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_tracing_still_finds_every_trace_name() -> None:
    # The trace package loads its names on first use (the rest of the test above).
    code = ("import sys, abcast.trace as t; assert 'pyarrow' not in sys.modules; "
            "assert all(getattr(t, n) is not None for n in t.__all__); "
            "print(t.EVENT_COLUMNS[0], 'pyarrow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True, timeout=30).stdout
    assert out.split() == ["run_id", "True"]
