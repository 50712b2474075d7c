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
