"""The two products with E in every gradient-flow step, a = E p and E^T g, on the compiled loop's threads.

Both read all of E (|S| x d float64: 120 MB for full IMDB at d = 2048), so they are bound by memory bandwidth,
which one thread does not saturate. Multi-threaded BLAS would, but its threads spin after each call and then
compete with the fused pass's threads; running the products on numba's own thread pool avoids that.
"""

from __future__ import annotations

import numba
import numpy as np


def scores(E: np.ndarray, p: np.ndarray) -> np.ndarray:
    """E p, one row of E per thread at a time."""
    return _matvec(np.ascontiguousarray(E), np.ascontiguousarray(p, dtype=np.float64))


def transposed_product(E: np.ndarray, g: np.ndarray) -> np.ndarray:
    """E^T g: each thread sums its block of rows, then the blocks' sums are added."""
    partial = np.zeros((numba.get_num_threads(), E.shape[1]))
    _rmatvec(np.ascontiguousarray(E), np.ascontiguousarray(g, dtype=np.float64), partial)
    return partial.sum(axis=0)


# fastmath lets LLVM vectorise the dot products by reordering their sums: a rounding-level change.
@numba.njit(parallel=True, fastmath=True, cache=True, nogil=True)
def _matvec(E, x):  # pragma: no cover (compiled)
    out = np.empty(E.shape[0])
    for i in numba.prange(E.shape[0]):
        total = 0.0
        for j in range(E.shape[1]):
            total += E[i, j] * x[j]
        out[i] = total
    return out


@numba.njit(parallel=True, fastmath=True, cache=True, nogil=True)
def _rmatvec(E, g, partial):  # pragma: no cover (compiled)
    rows, d = E.shape
    blocks = partial.shape[0]
    for block in numba.prange(blocks):
        start, stop = block * rows // blocks, (block + 1) * rows // blocks
        # Four rows of E per sweep of the block's sum: a quarter of the loads and stores of the sum (2x faster).
        i = start
        while i + 4 <= stop:
            g0, g1, g2, g3 = g[i], g[i + 1], g[i + 2], g[i + 3]
            for j in range(d):
                partial[block, j] += g0 * E[i, j] + g1 * E[i + 1, j] + g2 * E[i + 2, j] + g3 * E[i + 3, j]
            i += 4
        for row in range(i, stop):
            for j in range(d):
                partial[block, j] += g[row] * E[row, j]
