"""Keep freed tensor memory in the process instead of handing it back to the OS every step.

CPU tensors come from the C library's ``malloc``. With glibc's defaults, blocks above a
dynamic threshold (128 KiB rising to at most 32 MiB) are mapped fresh with ``mmap`` and
unmapped on free, and free memory at the top of the heap is trimmed back to the OS. A
training step allocates and frees the same multi-megabyte activations every step, so every
step touches fresh pages and pays a page fault for each 4 KiB of them. Measured on the
compression benchmark's CNN (``python benchmarks/compression.py --json --allocator default``
against the default ``--allocator keep``, docs/compression.md gives the figures): the
plain forward+backward barely changes, while the variance step, which allocates more
temporaries, spends a large share of its time in page faults.

:func:`keep_freed_memory` sets two ``mallopt`` parameters for the rest of the process:
``M_MMAP_THRESHOLD`` = 32 MiB (blocks below it come from the heap, and stop being unmapped)
and ``M_TOP_PAD`` = 256 MiB (the heap grows in large steps and keeps that much when
trimming). The cost is memory: the process keeps its peak heap resident. Elsewhere (musl,
macOS, Windows) it does nothing and says so.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import platform

log = logging.getLogger(__name__)

#: glibc ``mallopt`` parameter numbers (malloc.h).
M_TOP_PAD = -2
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 * 2**20
TOP_PAD_BYTES = 256 * 2**20

ALLOCATOR_MODES = ("keep", "default")

_applied: bool | None = None


def keep_freed_memory() -> bool:
    """Apply the settings above once per process; True when glibc accepted them."""
    global _applied
    if _applied is not None:
        return _applied
    _applied = False
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        log.debug("allocator: not glibc; malloc settings left alone")
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        ok = libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1
        ok = libc.mallopt(M_TOP_PAD, TOP_PAD_BYTES) == 1 and ok
    except (OSError, AttributeError) as err:
        log.debug("allocator: mallopt unavailable (%s)", err)
        return False
    _applied = ok
    return ok
