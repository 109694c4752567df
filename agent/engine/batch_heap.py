"""Batch commands keep freed memory for reuse instead of handing it back to the kernel.

Why: a replay works in chunks whose numpy temporaries are megabytes each. glibc serves such
blocks with fresh ``mmap`` pages (or trims them off the heap when freed), so every chunk
page-faults the same memory in again: on a 3-day 64-GPU trace that was a fifth of the replay's
time (``bench/replay_speed.py``: reader 8.0 → 6.6 s). Raising glibc's mmap and trim thresholds
makes freed blocks reusable; the peak RSS is unchanged (it is the chunk's size either way), the
process just does not shrink until it exits. Only for commands that run and end (``replay``),
never for the long-running agent, whose memory should go back when a burst is over.

Elsewhere than glibc (musl, macOS) this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util

# mallopt parameters (glibc malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
# Blocks up to this size come from the heap and stay there once freed: above any one chunk's
# arrays (~150 MB for 65 536 rows of a 64-GPU trace). A libc that refuses the value (mallopt
# returns 0) leaves its defaults: slower, never wrong.
_KEEP_BYTES = 1 << 30


def keep_freed_memory() -> bool:
    """Ask glibc to keep freed blocks for reuse; True when it agreed (False elsewhere)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, _KEEP_BYTES)) and bool(mallopt(_M_TRIM_THRESHOLD, _KEEP_BYTES))
