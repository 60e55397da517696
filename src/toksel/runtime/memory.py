"""Memory: refuse up front what cannot fit, and keep freed memory in the process.

glibc returns every freed block above its mmap threshold to the kernel and trims the heap above its trim threshold.
A training step frees and reallocates gradients the size of E (60 MB on IMDB) every time, so each step faulted in
about 230 MB of fresh pages, a third of its time; with both thresholds raised the freed blocks are reused.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import resource
import sys
from pathlib import Path

import psutil

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


def available_bytes() -> int:
    """The memory a new allocation can have: the least of what the kernel calls available, what the container's
    cgroup still allows, and what the address-space limit (`ulimit -v`) leaves."""
    bounds = [psutil.virtual_memory().available, _cgroup_left()]
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        bounds.append(max(soft - psutil.Process().memory_info().vms, 0))
    return min(bound for bound in bounds if bound is not None)


def _cgroup_left() -> int | None:
    """cgroup v2's memory.max less memory.current (v1: limit_in_bytes less usage_in_bytes); None without a limit."""
    v1 = Path("/sys/fs/cgroup/memory")
    for limit, usage in ((Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory.current")),
                         (v1 / "memory.limit_in_bytes", v1 / "memory.usage_in_bytes")):
        try:
            cap = limit.read_text().strip()
            if cap == "max" or int(cap) >= 2**60:  # v1 writes "no limit" as a huge number
                return None
            return max(int(cap) - int(usage.read_text().strip()), 0)
        except (OSError, ValueError):
            continue
    return None


def require_memory(needed: int, what: str, fix: str) -> None:
    """One line, before anything is allocated, when `needed` bytes exceed the memory available."""
    if needed > (available := available_bytes()):
        raise ToksError(f"{what} would need {needed / 2**30:,.1f} GiB, more than the {available / 2**30:,.1f} GiB "
                        f"available: {fix}")
