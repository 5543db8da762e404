"""keep_freed_memory: glibc malloc settings applied once per process."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from vgcsim.traces.training import allocator


@pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only"
)
def test_glibc_accepts_the_settings_once():
    # In a fresh interpreter, so the result does not depend on what other tests ran.
    code = (
        "from vgcsim.traces.training import allocator as a; "
        "print(a.keep_freed_memory(), a.keep_freed_memory(), a._applied)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True", "True"]


def test_elsewhere_it_does_nothing(monkeypatch):
    monkeypatch.setattr(allocator, "_applied", None)
    monkeypatch.setattr(allocator.platform, "libc_ver", lambda: ("musl", "1.2"))
    assert allocator.keep_freed_memory() is False
    assert allocator.keep_freed_memory() is False  # remembered, not retried
