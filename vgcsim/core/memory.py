"""What this machine can hold: the memory available now, and a refusal of sizes that cannot fit.

Commands that build large tables (``vgcsim trace synth``) estimate the bytes they will need
before allocating or writing anything and refuse, with the estimate, what exceeds the memory
the OS can give them (:func:`check_fits`).
"""

from __future__ import annotations

import os

from vgcsim.core.errors import ConfigError

__all__ = ["available_memory_bytes", "check_fits"]


def available_memory_bytes() -> int | None:
    """Memory the OS can give this process now (MemAvailable on Linux, else physical), and
    no more than what its address-space limit (``ulimit -v``) leaves."""
    have = _os_available_bytes()
    room = _address_space_left_bytes()
    if room is not None:
        have = room if have is None else min(have, room)
    return have


def _address_space_left_bytes() -> int | None:
    """RLIMIT_AS minus the address space this process maps now; None without a limit."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft == resource.RLIM_INFINITY:
            return None
        with open("/proc/self/status", encoding="ascii") as fh:
            return _room_below(soft, fh.read())
    except (ImportError, OSError, ValueError, IndexError):
        return None


def _room_below(soft_limit_bytes: int, status_text: str) -> int | None:
    """``soft_limit_bytes`` minus the ``VmSize`` of a ``/proc/PID/status`` text, never below
    0; None where the text has no ``VmSize`` line."""
    mapped = _proc_field_bytes(status_text, "VmSize")
    return None if mapped is None else max(0, soft_limit_bytes - mapped)


def _os_available_bytes(meminfo_path: str = "/proc/meminfo") -> int | None:
    """MemAvailable of ``meminfo_path``; where it cannot be read, the physical memory."""
    try:
        with open(meminfo_path, encoding="ascii") as fh:
            have = _proc_field_bytes(fh.read(), "MemAvailable")
        if have is not None:
            return have
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return None


def _proc_field_bytes(text: str, key: str) -> int | None:
    """The ``key:`` line of a ``/proc`` text (``/proc/meminfo``, ``/proc/PID/status``: a value
    in kB) in bytes; None without one."""
    for line in text.splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1]) * 1024
    return None


def check_fits(need_bytes: int, what: str, hint: str) -> None:
    """ConfigError naming ``what``, the estimate and the memory available when ``need_bytes``
    exceeds it (nothing is checked where the OS does not say)."""
    have = available_memory_bytes()
    if have is not None and need_bytes > have:
        raise ConfigError(
            f"{what} needs about {need_bytes / 2**30:,.1f} GiB of memory, more than the "
            f"{have / 2**30:,.1f} GiB available; {hint}"
        )
