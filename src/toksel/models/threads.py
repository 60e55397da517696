"""How many of numba's threads a full-batch pass gets, chosen by the size of the problem.

A pass over a small problem (the synthetic data: 7k entries, E 100 x 1024) lasts tens of microseconds, so the
threads spend it mostly meeting at the barrier. On a quiet machine two threads still win (0.067 against 0.104 ms a
gradient-flow step), but when another process holds a core, one thread waits for a descheduled partner: 0.13 to
0.56 ms against 0.105 on one thread. Small passes therefore run on one thread; large ones (real data: 128k to 3.3M
entries, E 4k to 7k x 2048) on all of them, where two threads take 4.7 against 7.4 ms. "All of them" is the count
set where the pass runs: a unit of work fanned out (runtime/fanout.py) has one, so that its sums round alike
wherever it runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numba

SMALL_ENTRIES = 50_000  # (sequence, token) entries of the split
SMALL_MATRIX = 2_000_000  # |S| x d of E: 16 MB of float64, a pass over it well under a millisecond


def threads_for(entries: int, matrix_size: int) -> int:
    """One thread for a small pass, else every thread this thread may use (numba's count is per thread)."""
    if entries < SMALL_ENTRIES and matrix_size < SMALL_MATRIX:
        return 1
    return numba.get_num_threads()


@contextmanager
def pass_threads(entries: int, matrix_size: int) -> Iterator[int]:
    """Run the passes inside on threads_for(...) threads; numba's previous count is restored afterwards."""
    before = numba.get_num_threads()
    numba.set_num_threads(threads_for(entries, matrix_size))
    try:
        yield numba.get_num_threads()
    finally:
        numba.set_num_threads(before)
