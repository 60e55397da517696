"""Theorem 4.3: the hard-margin direction for a given token selection.

    p_mm = argmin |p|^2  s.t.  p^T (E_s - E_s') >= 1  for all X, s in S_X, s' in X \\ S_X.

A least-distance problem (min |x| s.t. G x >= h), solved exactly by Lawson and Hanson's reduction to non-negative
least squares (Solving Least Squares Problems, 1974, ch. 23): u = argmin_{u >= 0} |[G^T; h^T] u - e|, e the last unit
vector; the residual r then gives x = -r[:-1] / r[-1], and a zero residual means no x is feasible. An active-set
method with finite termination, in the span of the embeddings (at most min(|S|, d) coordinates): a few
milliseconds where an interior-point solve through a modelling layer took seconds. Each (s, s') pair enters once,
however many sequences share it. tests/test_max_margin.py holds it against cvxpy's CLARABEL.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from toksel.data.corpus import PackedSplit


@dataclass(frozen=True)
class MaxMarginSolution:
    status: str  # cvxpy status: "optimal", "infeasible", ...
    direction: np.ndarray | None  # p_mm, None unless solved
    differences: np.ndarray  # (m, d) rows E_s - E_s'

    @property
    def solved(self) -> bool:
        return self.direction is not None

    @property
    def norm(self) -> float:
        return float(np.linalg.norm(self.direction)) if self.solved else float("nan")


def constraint_pairs(selected: np.ndarray, split: PackedSplit) -> np.ndarray:
    """Unique (s, s') token pairs with s selected and s' not, in the same sequence. Shape (m, 2)."""
    rows, tokens = split.bag_rows, split.bag_tokens
    winners, losers = np.flatnonzero(selected), np.flatnonzero(~selected)
    # Each winning entry against every losing entry of its row (rows are sorted, so a row's losers are a run).
    start = np.searchsorted(rows[losers], rows[winners], side="left")
    counts = np.searchsorted(rows[losers], rows[winners], side="right") - start
    if not counts.sum():
        return np.empty((0, 2), dtype=np.int64)
    offsets = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    against = losers[np.repeat(start, counts) + offsets]
    pairs = np.stack([tokens[np.repeat(winners, counts)], tokens[against]], axis=1).astype(np.int64)
    return np.unique(pairs, axis=0)


def least_distance(G: np.ndarray, h: np.ndarray) -> tuple[str, np.ndarray | None]:
    """min |x| s.t. G x >= h, by non-negative least squares: ("optimal", x) or ("infeasible", None)."""
    from scipy.optimize import nnls

    stacked = np.vstack([G.T, h[None, :]])
    target = np.zeros(len(stacked))
    target[-1] = 1.0
    u, _ = nnls(stacked, target, maxiter=50 * stacked.shape[1])
    residual = stacked @ u - target
    if abs(residual[-1]) < 1e-12 * max(1.0, float(np.abs(stacked).max())):
        return "infeasible", None
    return "optimal", -residual[:-1] / residual[-1]


def solve_max_margin(E: np.ndarray, pairs: np.ndarray) -> MaxMarginSolution:
    differences = E[pairs[:, 0]] - E[pairs[:, 1]]
    if len(pairs) == 0:
        return MaxMarginSolution("no constraints", None, differences)
    # The minimiser lies in the row space of the differences, inside span{E_s}: solve in an orthonormal
    # basis Q of that span (at most min(|S|, d) coordinates, not d), p = Q z, |p| = |z|.
    basis = np.linalg.qr(E.T)[0]
    status, z = least_distance(differences @ basis, np.ones(len(pairs)))
    return MaxMarginSolution(status, None if z is None else basis @ z, differences)


def normalized_margin(p: np.ndarray, differences: np.ndarray) -> float:
    """min over constraints of p^T (E_s - E_s') / |p|; equals 1 / |p_mm| at the max-margin direction."""
    return float((differences @ p).min() / np.linalg.norm(p))


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def solve_lq_max_margin(E: np.ndarray, pairs: np.ndarray, q: float) -> MaxMarginSolution:
    """The l_q hard-margin direction, argmin |p|_q s.t. p^T (E_s - E_s') >= 1 for every pair, by cvxpy's CLARABEL (a
    conic interior-point solver: |p|_q as power cones; q = inf, a linear programme); for q = 2 the least-distance
    solve above is exact and faster. Unlike the l_2 minimiser it need not lie in the span of the embeddings, so it
    is solved in all d coordinates. The constraints are posed on the scores z = E p of the tokens the pairs name
    (z_s - z_s' >= 1, two entries a row): a dense (m, d) matrix of differences made each interior-point step 40
    times slower (18 s against 0.45 s at m = 1,576, d = 1,024)."""
    import cvxpy as cp  # here: a second to import, and only this solve needs it
    from scipy.sparse import csr_matrix

    differences = E[pairs[:, 0]] - E[pairs[:, 1]]
    if len(pairs) == 0:
        return MaxMarginSolution("no constraints", None, differences)
    tokens, where = np.unique(pairs, return_inverse=True)
    where = where.reshape(pairs.shape)
    rows = np.arange(len(pairs))
    pick = csr_matrix((np.r_[np.ones(len(pairs)), -np.ones(len(pairs))], (np.r_[rows, rows], where.T.ravel())),
                      shape=(len(pairs), len(tokens)))
    p, scores = cp.Variable(E.shape[1]), cp.Variable(len(tokens))
    problem = cp.Problem(cp.Minimize(cp.norm(p, q)), [pick @ scores >= 1, scores == E[tokens] @ p])
    problem.solve(solver=cp.CLARABEL)
    solved = problem.status == "optimal" and p.value is not None
    return MaxMarginSolution(problem.status, np.asarray(p.value) if solved else None, differences)
