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
from toksel.errors import ToksError


@dataclass(frozen=True)
class FusedBags:
    """A packed split in the layout the compiled loop reads."""

    indptr: np.ndarray  # (n + 1,) int64
    tokens: np.ndarray  # (nnz,) int32
    counts: np.ndarray  # (nnz,) float64
    y: np.ndarray  # (n,) float64 in {-1, +1}
    vocab_size: int

    @property
    def longest_row(self) -> int:
        return int(np.diff(self.indptr).max())

    @classmethod
    def from_split(cls, split: PackedSplit) -> FusedBags:
        if split.labels.max() > 1:
            raise ToksError(f"the one-layer model here is binary, but the labels reach {split.labels.max()}: "
                            "multi-class data can be prepared, not yet trained")
        return cls(split.bag_indptr.astype(np.int64), split.bag_tokens.astype(np.int32),
                   split.bag_counts.astype(np.float64), (2 * split.labels - 1).astype(np.float64),
                   split.vocab_size)


def loss_and_token_gradients(scores: np.ndarray, values: np.ndarray, bags: FusedBags,
                             with_values: bool = True) -> tuple[float, np.ndarray, np.ndarray | None]:
    """(L, dL/da, dL/db) for token scores a = E p and token values b = E v (float64).

    with_values=False skips dL/db (None), which gradient flow on p does not need.
    """
    chunks = numba.get_num_threads()
    grad_a = np.zeros((chunks, bags.vocab_size))
    grad_b = np.zeros((chunks if with_values else 1, bags.vocab_size))
    losses = np.zeros(chunks)
    scores = np.ascontiguousarray(scores, dtype=np.float64)
    # One exp per token instead of one per entry: exp(a_s - max a) is shared by every sequence; safe (no
    # underflow, full relative precision) while the scores span less than SHARED_EXP_SPREAD.
    shared = scores.max() - scores.min() < SHARED_EXP_SPREAD
    token_exp = np.exp(scores - scores.max()) if shared else np.empty(0)
    _kernel(scores, np.ascontiguousarray(values, dtype=np.float64), token_exp, shared, with_values,
            bags.longest_row, bags.indptr, bags.tokens, bags.counts, bags.y, grad_a, grad_b, losses)
    n = len(bags.y)
    return float(losses.sum() / n), grad_a.sum(axis=0), grad_b.sum(axis=0) if with_values else None


SHARED_EXP_SPREAD = 600.0  # exp(-600) = 3e-261, far above the smallest normal float64 (2e-308)


@numba.njit(parallel=True, fastmath=False, cache=True)
def _kernel(a, b, token_exp, shared, with_values, longest, indptr, tokens, counts, y, grad_a, grad_b,
            losses):  # pragma: no cover (compiled)
    n = len(y)
    chunks = grad_a.shape[0]
    for chunk in numba.prange(chunks):
        # Each row's scores, values and weights, gathered once into contiguous buffers.
        row_a, row_b, row_w = np.empty(longest), np.empty(longest), np.empty(longest)
        for row in range(chunk * n // chunks, (chunk + 1) * n // chunks):
            start, length = indptr[row], indptr[row + 1] - indptr[row]
            top = -np.inf
            for k in range(length):
                s = tokens[start + k]
                row_a[k], row_b[k] = a[s], b[s]
                if shared:
                    row_w[k] = counts[start + k] * token_exp[s]
                top = max(top, row_a[k])
            # b_r: mean value of the top-scoring tokens (the reference of the difference form)
            reference, ties = 0.0, 0.0
            for k in range(length):
                if row_a[k] == top:
                    reference += row_b[k]
                    ties += 1.0
            reference /= ties
            z, d = 0.0, 0.0
            for k in range(length):
                if not shared:
                    row_w[k] = counts[start + k] * np.exp(row_a[k] - top)
                z += row_w[k]
                d += row_w[k] * (row_b[k] - reference)
            f_minus_reference = d / z
            margin = y[row] * (reference + f_minus_reference)
            # softplus(-margin) and sigmoid(-margin), both stable
            if margin > 0:
                losses[chunk] += np.log1p(np.exp(-margin))
                sigmoid = np.exp(-margin) / (1.0 + np.exp(-margin))
            else:
                losses[chunk] += -margin + np.log1p(np.exp(margin))
                sigmoid = 1.0 / (1.0 + np.exp(margin))
            g = -y[row] * sigmoid / n / z  # dL/df for this sequence, over z: q_k = row_w[k] / z
            for k in range(length):
                s = tokens[start + k]
                grad_a[chunk, s] += g * row_w[k] * ((row_b[k] - reference) - f_minus_reference)
                if with_values:
                    grad_b[chunk, s] += g * row_w[k]
