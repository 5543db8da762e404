"""Provenance written into every trace and result header: package versions, git commit, machine.

Torch-free: callers that ran torch add its version themselves (``package_versions("torch")``
only imports modules that are already loaded or cheap to import).
"""

from __future__ import annotations

import importlib
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

_BASE_PACKAGES = ("numpy", "pandas", "pyarrow")


def git_commit() -> str | None:
    """The commit of the checkout vgcsim runs from, or None (not a git checkout, no git)."""
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=here,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return (out.stdout.strip() or None) if out.returncode == 0 else None


def vgcsim_version() -> str:
    """This package's version (for the layers that may not import the package root)."""
    from vgcsim.core.version import __version__

    return __version__


def package_versions(*extra: str) -> dict[str, str]:
    """Versions of vgcsim, Python, numpy, pandas, pyarrow and the ``extra`` packages."""
    versions = {"vgcsim": vgcsim_version(), "python": platform.python_version()}
    for name in (*_BASE_PACKAGES, *extra):
        versions[name] = str(getattr(importlib.import_module(name), "__version__", "unknown"))
    return versions


def cpu_model(cpuinfo: str | Path = "/proc/cpuinfo") -> str:
    """The CPU's model name: the first ``model name`` line of ``cpuinfo`` (Linux), else
    ``platform.processor()`` or ``platform.machine()``. Two machines with the same
    architecture can round floats differently (torch picks kernels by CPU), so a recording
    names its CPU, not only ``x86_64``."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip() == "model name" and value.strip():
                    return value.strip()
    except OSError:
        pass
    return _processor()


def _processor() -> str:
    """The architecture as the platform names it (``platform.processor()`` is empty on
    some Linux systems; ``platform.machine()`` is not)."""
    return platform.processor() or platform.machine()


def machine_info(**extra: Any) -> dict[str, Any]:
    """Platform, processor, CPU model and count (plus ``extra`` fields such as torch
    threads)."""
    return {
        "platform": platform.platform(),
        "processor": _processor(),
        "cpu_model": cpu_model(),
        "cpus": os.cpu_count(),
        **extra,
    }
