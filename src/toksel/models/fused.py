"""The full-batch loss of the one-layer model and its gradients in token scores and values, in one pass.

For a = E p and b = E v, this returns L and the vectors dL/da and dL/db (one entry per token). The chain rule
does the rest: dL/dp = E^T dL/da, dL/dE = dL/da p^T + dL/db v^T. It computes what `one_layer.loss` and
autograd compute, with the same numerics (per-row max shift, the difference form f = b_r + sum q_s (b_s - b_r)),
but fused into one compiled loop over the CSR entries instead of some thirty tensor passes: the full-batch
theory stages (one step, gradient flow) run on it. `tests/test_fused.py` holds the two paths together.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from toksel.data.corpus import PackedSplit


@dataclass(frozen=True)
class FusedBags:
    """A packed split in the layout the compiled loop reads."""

    indptr: np.ndarray  # (n + 1,) int64
    tokens: np.ndarray  # (nnz,) int32
    counts: np.ndarray  # (nnz,) float64
    y: np.ndarray  # (n,) float64 in {-1, +1}
    vocab_size: int

    @classmethod
    def from_split(cls, split: PackedSplit) -> FusedBags:
        return cls(split.bag_indptr.astype(np.int64), split.bag_tokens.astype(np.int32),
                   split.bag_counts.astype(np.float64), (2 * split.labels - 1).astype(np.float64),
                   split.vocab_size)


def loss_and_token_gradients(scores: np.ndarray, values: np.ndarray,
                             bags: FusedBags) -> tuple[float, np.ndarray, np.ndarray]:
    """(L, dL/da, dL/db) for token scores a = E p and token values b = E v (float64)."""
    chunks = numba.get_num_threads()
    grad_a = np.zeros((chunks, bags.vocab_size))
    grad_b = np.zeros((chunks, bags.vocab_size))
    losses = np.zeros(chunks)
    scores = np.ascontiguousarray(scores, dtype=np.float64)
    # One exp per token instead of one per entry: exp(a_s - max a) is shared by every sequence; safe (no
    # underflow, full relative precision) while the scores span less than SHARED_EXP_SPREAD.
    shared = scores.max() - scores.min() < SHARED_EXP_SPREAD
    token_exp = np.exp(scores - scores.max()) if shared else np.empty(0)
    _kernel(scores, np.ascontiguousarray(values, dtype=np.float64), token_exp, shared,
            bags.indptr, bags.tokens, bags.counts, bags.y, grad_a, grad_b, losses)
    n = len(bags.y)
    return float(losses.sum() / n), grad_a.sum(axis=0), grad_b.sum(axis=0)


SHARED_EXP_SPREAD = 600.0  # exp(-600) = 3e-261, far above the smallest normal float64 (2e-308)


@numba.njit(parallel=True, fastmath=False, cache=True)
def _kernel(a, b, token_exp, shared, indptr, tokens, counts, y, grad_a, grad_b, losses):  # pragma: no cover
    n = len(y)
    chunks = grad_a.shape[0]
    for chunk in numba.prange(chunks):
        for row in range(chunk * n // chunks, (chunk + 1) * n // chunks):
            start, stop = indptr[row], indptr[row + 1]
            top = -np.inf
            for j in range(start, stop):
                top = max(top, a[tokens[j]])
            # b_r: mean value of the top-scoring tokens (the reference of the difference form)
            reference, ties = 0.0, 0.0
            for j in range(start, stop):
                if a[tokens[j]] == top:
                    reference += b[tokens[j]]
                    ties += 1.0
            reference /= ties
            z, d = 0.0, 0.0
            for j in range(start, stop):
                w = counts[j] * (token_exp[tokens[j]] if shared else np.exp(a[tokens[j]] - top))
                z += w
                d += w * (b[tokens[j]] - reference)
            f_minus_reference = d / z
            margin = y[row] * (reference + f_minus_reference)
            # softplus(-margin) and sigmoid(-margin), both stable
            if margin > 0:
                losses[chunk] += np.log1p(np.exp(-margin))
                sigmoid = np.exp(-margin) / (1.0 + np.exp(-margin))
            else:
                losses[chunk] += -margin + np.log1p(np.exp(margin))
                sigmoid = 1.0 / (1.0 + np.exp(margin))
            g = -y[row] * sigmoid / n  # dL/df for this sequence
            for j in range(start, stop):
                s = tokens[j]
                q = counts[j] * (token_exp[s] if shared else np.exp(a[s] - top)) / z
                grad_a[chunk, s] += g * q * ((b[s] - reference) - f_minus_reference)
                grad_b[chunk, s] += g * q
