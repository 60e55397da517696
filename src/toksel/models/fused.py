"""The full-batch loss of the one-layer model and its gradients in token scores and values, in one pass.

For a = E p and b = E v (or B = E V, one column per class), this returns L and the vectors dL/da and dL/db
(one entry per token). The chain rule does the rest: dL/dp = E^T dL/da, dL/dE = dL/da p^T + dL/db v^T. It
computes what `one_layer.loss` and autograd compute, with the same numerics (per-row max shift, the difference
form f = b_r + sum q_s (b_s - b_r)), but fused into one compiled loop over the CSR entries instead of some thirty
tensor passes: the full-batch theory stages (one step, gradient flow) run on it. Two classes: one output
vector and the logistic loss, as in the paper; K > 2 classes: K output vectors and the cross-entropy.
`tests/test_fused.py` holds the two paths together.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numba
import numpy as np

from toksel.data.corpus import PackedSplit
from toksel.runtime.errors import ToksError


@dataclass(frozen=True)
class FusedBags:
    """A packed split in the layout the compiled loop reads."""

    indptr: np.ndarray  # (n + 1,) int64
    tokens: np.ndarray  # (nnz,) int32
    counts: np.ndarray  # (nnz,) float64
    labels: np.ndarray  # (n,) int64 in 0 .. num_classes - 1
    vocab_size: int
    num_classes: int

    @functools.cached_property
    def longest_row(self) -> int:  # read at every step of a flow: computed once
        return int(np.diff(self.indptr).max())

    @property
    def num_outputs(self) -> int:
        """Columns of the value matrix: one (logistic loss) for two classes, K (cross-entropy) otherwise."""
        return 1 if self.num_classes == 2 else self.num_classes

    @classmethod
    def from_split(cls, split: PackedSplit, num_classes: int = 2) -> FusedBags:
        if split.labels.min() < 0 or split.labels.max() >= num_classes:
            raise ToksError(f"the labels reach {split.labels.max()}, outside 0 .. {num_classes - 1} of a "
                            f"{num_classes}-class model")
        return cls(split.bag_indptr.astype(np.int64), split.bag_tokens.astype(np.int32),
                   split.bag_counts.astype(np.float64), split.labels.astype(np.int64), split.vocab_size,
                   num_classes)


def loss_and_token_gradients(scores: np.ndarray, values: np.ndarray, bags: FusedBags,
                             with_values: bool = True) -> tuple[float, np.ndarray, np.ndarray | None]:
    """(L, dL/da, dL/db) for token scores a = E p and token values b = E v (float64).

    values: (|S|,) for two classes, (|S|, K) for K > 2; dL/db has its shape. with_values=False skips dL/db
    (None), which gradient flow on p does not need.
    """
    expected = (bags.vocab_size,) if bags.num_classes == 2 else (bags.vocab_size, bags.num_classes)
    if values.shape != expected:
        raise ValueError(f"token values of shape {values.shape} for a {bags.num_classes}-class model: "
                         f"expected {expected}")
    chunks = numba.get_num_threads()
    grad_a = np.zeros((chunks, bags.vocab_size))
    grad_b = np.zeros((chunks if with_values else 1, bags.vocab_size, bags.num_outputs))
    losses = np.zeros(chunks)
    scores = np.ascontiguousarray(scores, dtype=np.float64)
    # One exp per token instead of one per entry: exp(a_s - max a) is shared by every sequence; safe (no
    # underflow, full relative precision) while the scores span less than SHARED_EXP_SPREAD.
    shared = scores.max() - scores.min() < SHARED_EXP_SPREAD
    token_exp = np.exp(scores - scores.max()) if shared else np.empty(0)
    # Flat, token-major: with the column count a compile-time constant, b[s * outputs + j] is plain indexing.
    flat_values = np.ascontiguousarray(values, dtype=np.float64).reshape(-1)
    _kernel(bags.num_outputs)(scores, flat_values, token_exp, shared, with_values, bags.longest_row, bags.indptr,
                              bags.tokens, bags.counts, bags.labels, grad_a, grad_b, losses)
    n = len(bags.labels)
    grad_values = grad_b.sum(axis=0).reshape(values.shape) if with_values else None
    return float(losses.sum() / n), grad_a.sum(axis=0), grad_values


SHARED_EXP_SPREAD = 600.0  # exp(-600) = 3e-261, far above the smallest normal float64 (2e-308)


@functools.cache
def _kernel(outputs: int):
    """The compiled pass for `outputs` value columns. The count is a compile-time constant, so the loops over
    the columns unroll: with it a runtime value, the one-column (binary) pass ran 2.2x slower."""

    @numba.njit(parallel=True, fastmath=False, cache=True, nogil=True)
    def kernel(a, b, token_exp, shared, with_values, longest, indptr, tokens, counts, labels, grad_a, grad_b,
               losses):  # pragma: no cover (compiled)
        n = len(labels)
        chunks = grad_a.shape[0]
        for chunk in numba.prange(chunks):
            # Each row's scores, weights and values (column by column), gathered once into contiguous buffers.
            row_a, row_w, row_g = np.empty(longest), np.empty(longest), np.empty(longest)
            row_b = np.empty(outputs * longest)
            reference, f_minus_reference, dloss_df = np.empty(outputs), np.empty(outputs), np.empty(outputs)
            for row in range(chunk * n // chunks, (chunk + 1) * n // chunks):
                start, length = indptr[row], indptr[row + 1] - indptr[row]
                top, z, r = -np.inf, 0.0, 0
                for k in range(length):
                    s = tokens[start + k]
                    row_a[k] = a[s]
                    for j in range(outputs):
                        row_b[j * longest + k] = b[s * outputs + j]
                    if row_a[k] >= top:  # r: the last of the top-scoring tokens
                        top, r = row_a[k], k
                    if shared:  # the weights need no row maximum: sum them on the way
                        row_w[k] = counts[start + k] * token_exp[s]
                        z += row_w[k]
                if not shared:
                    for k in range(length):
                        row_w[k] = counts[start + k] * np.exp(row_a[k] - top)
                        z += row_w[k]
                # Per output: f - b_r = sum_k q_k (b_k - b_r), in the difference form with r a top-scoring token:
                # once the softmax saturates on r, every term stays exact. Scalar sums: no dependency through
                # memory.
                for j in range(outputs):
                    column = j * longest
                    reference[j] = row_b[column + r]
                    total = 0.0
                    for k in range(length):
                        total += row_w[k] * (row_b[column + k] - reference[j])
                    f_minus_reference[j] = total / z
                if outputs == 1:
                    losses[chunk] += _logistic(reference[0] + f_minus_reference[0], labels[row], dloss_df)
                else:
                    losses[chunk] += _cross_entropy(reference, f_minus_reference, labels[row], dloss_df)
                # dL/da_k = (1/n) q_k sum_j dL/df_j ((b_kj - b_rj) - (f_j - b_rj)), summed column by column
                per_weight = 1.0 / (z * n)  # q_k / n = row_w[k] * per_weight: one division per row
                if outputs == 1:  # one column: straight into dL/da, no buffer
                    slope, shift, offset = dloss_df[0], reference[0], f_minus_reference[0]
                    for k in range(length):
                        term = slope * ((row_b[k] - shift) - offset)
                        grad_a[chunk, tokens[start + k]] += term * row_w[k] * per_weight
                else:
                    for j in range(outputs):
                        column, slope, shift, offset = j * longest, dloss_df[j], reference[j], f_minus_reference[j]
                        for k in range(length):
                            term = slope * ((row_b[column + k] - shift) - offset)
                            row_g[k] = term if j == 0 else row_g[k] + term
                    for k in range(length):
                        grad_a[chunk, tokens[start + k]] += row_g[k] * row_w[k] * per_weight
                if with_values:
                    for j in range(outputs):
                        slope = dloss_df[j] * per_weight
                        for k in range(length):
                            grad_b[chunk, tokens[start + k], j] += slope * row_w[k]

    return kernel


@numba.njit(fastmath=False, cache=True)
def _logistic(f, label, dloss_df):  # pragma: no cover (compiled)
    """The row's logistic loss softplus(-y f), y = +-1; writes dL/df = -y sigmoid(-y f). Both stable."""
    y = 2.0 * label - 1.0
    margin = y * f
    if margin > 0:
        loss = np.log1p(np.exp(-margin))
        sigmoid = np.exp(-margin) / (1.0 + np.exp(-margin))
    else:
        loss = -margin + np.log1p(np.exp(margin))
        sigmoid = 1.0 / (1.0 + np.exp(margin))
    dloss_df[0] = -y * sigmoid
    return loss


@numba.njit(fastmath=False, cache=True)
def _cross_entropy(reference, f_minus_reference, label, dloss_df):  # pragma: no cover (compiled)
    """The row's cross-entropy for the logits f = reference + f_minus_reference; writes dL/df."""
    logits = reference + f_minus_reference
    unnormalised = np.exp(logits - logits.max())
    total = unnormalised.sum()
    others = 0.0
    for j in range(len(logits)):
        if j != label:
            others += unnormalised[j]
    dloss_df[:] = unnormalised / total  # softmax
    # dL/df_y = softmax_y - 1 = -(the other classes' softmax), and L = log(1 + others) while y is the top
    # class: neither cancels once the prediction is confident.
    dloss_df[label] = -others / total
    if unnormalised[label] == 1.0:
        return np.log1p(others)
    return np.log(total) - (logits[label] - logits.max())
