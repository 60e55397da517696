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


# The training step's products (float32 or float64, one output vector v): E read or written once for both
# vectors, on numba's threads. torch's E @ p runs at about half the bandwidth of two threads here, and autograd
# reads E once per vector and writes dE as two outer products it then adds.
def pair_scores(E: np.ndarray, p: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(E p, E v) in one pass over E."""
    return _pair_matvec(E, p, v)


def pair_transposed(E: np.ndarray, g: np.ndarray, h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(E^T g, E^T h) in one pass over E."""
    partial = np.zeros((2, numba.get_num_threads(), E.shape[1]), dtype=E.dtype)
    _pair_rmatvec(E, g, h, partial)
    return partial[0].sum(axis=0), partial[1].sum(axis=0)


def pair_outer(g: np.ndarray, p: np.ndarray, h: np.ndarray, v: np.ndarray) -> np.ndarray:
    """g p^T + h v^T, written once."""
    return _pair_outer(g, p, h, v)


@numba.njit(parallel=True, fastmath=True, cache=True, nogil=True)
def _pair_matvec(E, p, v):  # pragma: no cover (compiled)
    a, b = np.empty(E.shape[0], E.dtype), np.empty(E.shape[0], E.dtype)
    for i in numba.prange(E.shape[0]):
        sa = sb = E.dtype.type(0)
        for j in range(E.shape[1]):
            sa += E[i, j] * p[j]
            sb += E[i, j] * v[j]
        a[i], b[i] = sa, sb
    return a, b


@numba.njit(parallel=True, fastmath=True, cache=True, nogil=True)
def _pair_rmatvec(E, g, h, partial):  # pragma: no cover (compiled)
    rows, d = E.shape
    blocks = partial.shape[1]
    for block in numba.prange(blocks):
        for i in range(block * rows // blocks, (block + 1) * rows // blocks):
            gi, hi = g[i], h[i]
            for j in range(d):
                partial[0, block, j] += gi * E[i, j]
                partial[1, block, j] += hi * E[i, j]


@numba.njit(parallel=True, fastmath=True, cache=True, nogil=True)
def _pair_outer(g, p, h, v):  # pragma: no cover (compiled)
    out = np.empty((g.shape[0], p.shape[0]), p.dtype)
    for i in numba.prange(g.shape[0]):
        gi, hi = g[i], h[i]
        for j in range(p.shape[0]):
            out[i, j] = gi * p[j] + hi * v[j]
    return out
