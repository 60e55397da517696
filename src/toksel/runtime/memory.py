"""Memory: refuse up front what cannot fit, and keep freed memory in the process instead of handing it back to the
operating system.

glibc's malloc returns every block above its mmap threshold (at most 32 MiB by default) to the kernel when it
is freed, and trims the heap above its trim threshold. A training step frees and reallocates gradients and
temporaries of the size of E (60 MB on IMDB) every time, so each step faulted in about 230 MB of fresh pages:
a third of its time. With both thresholds raised, the freed blocks are reused.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from pathlib import Path

from toksel.runtime.errors import ToksError

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt's parameter numbers (malloc.h)
LARGEST = 2**31 - 1  # mallopt takes an int


def keep_freed_memory() -> bool:
    """Raise glibc's trim and mmap thresholds to 2 GiB; False where there is no glibc (macOS, musl)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.mallopt(M_MMAP_THRESHOLD, LARGEST)) and bool(libc.mallopt(M_TRIM_THRESHOLD, LARGEST))
    except (OSError, AttributeError):
        return False


def available_bytes() -> int | None:
    """The memory the kernel says a new allocation can have (MemAvailable), or None where it does not say."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def require_memory(needed: int, what: str, fix: str) -> None:
    """One line, before anything is allocated, when `needed` bytes exceed the memory available."""
    available = available_bytes()
    if available is not None and needed > available:
        raise ToksError(f"{what} would need {needed / 2**30:,.1f} GiB, more than the {available / 2**30:,.1f} GiB "
                        f"available: {fix}")
