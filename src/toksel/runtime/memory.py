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
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

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


CGROUP_ROOT = Path("/sys/fs/cgroup")  # where the cgroup filesystems are mounted
MEMBERSHIP = Path("/proc/self/cgroup")  # this process's cgroups, one line per hierarchy
NO_LIMIT = 2**60  # cgroup v1 writes "no limit" as a huge number (2^63 rounded down to a page)
V2 = ("memory.max", "memory.current")  # a cgroup v2 folder's limit and usage
V1 = ("memory.limit_in_bytes", "memory.usage_in_bytes")  # the same in v1's memory hierarchy


def available_bytes() -> int:
    """The memory a new allocation can have: the least of what the kernel calls available, what this process's
    cgroups still allow, and what the address-space limit (`ulimit -v`) leaves."""
    bounds = [psutil.virtual_memory().available, cgroup_left()]
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        bounds.append(max(soft - psutil.Process().memory_info().vms, 0))
    return min(bound for bound in bounds if bound is not None)


def cgroup_left(root: Path | None = None, membership: Path | None = None) -> int | None:
    """What the tightest memory limit of this process's cgroup and its ancestors still allows (limit less usage),
    read from the cgroup filesystems under `root` (CGROUP_ROOT; v2 and v1) for the cgroups that `membership`
    (MEMBERSHIP) names; None where no limit is set.

    A limit binds every cgroup below it, so a session's own cgroup under a container's counts as much as the
    container's; where the process's own folder is not visible (a container without a cgroup namespace sees its
    own cgroup at the root), the folders that are still count."""
    try:
        lines = (membership or MEMBERSHIP).read_text().splitlines()
    except OSError:
        lines = []
    left = [_left(*cgroup) for cgroup in _memory_cgroups(root or CGROUP_ROOT, lines)]
    return min((bytes_left for bytes_left in left if bytes_left is not None), default=None)


def _memory_cgroups(root: Path, lines: list[str]) -> Iterator[tuple[Path, str, str]]:
    """The folders of the memory cgroups that `lines` (/proc/self/cgroup's) name, and their ancestors up to the
    mount, each with its limit's and usage's file names; the mounts' roots where `lines` names none."""
    named = []
    for line in lines:
        number, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if number == "0" and not controllers:  # v2: the one unified hierarchy
            named.append((root, path, V2))
        elif "memory" in controllers.split(","):  # v1: the memory controller's own hierarchy
            named.append((root / "memory", path, V1))
    for mount, path, files in named or [(root, "/", V2), (root / "memory", "/", V1)]:
        parts = [part for part in PurePosixPath(path).parts if part != "/"]
        if ".." in parts:  # a cgroup outside this namespace's view: the mount's own limit is what shows
            parts = []
        for depth in range(len(parts), -1, -1):
            yield mount.joinpath(*parts[:depth]), *files


def _left(folder: Path, limit: str, usage: str) -> int | None:
    """The folder's limit less its usage; None for no limit or files that are not there."""
    try:
        cap = (folder / limit).read_text().strip()
        if cap == "max" or int(cap) >= NO_LIMIT:
            return None
        return max(int(cap) - int((folder / usage).read_text().strip()), 0)
    except (OSError, ValueError):
        return None


def require_memory(needed: int, what: str, fix: str) -> None:
    """One line, before anything is allocated, when `needed` bytes exceed the memory available."""
    if needed > (available := available_bytes()):
        raise ToksError(f"{what} would need {needed / 2**30:,.1f} GiB, more than the {available / 2**30:,.1f} GiB "
                        f"available: {fix}")
