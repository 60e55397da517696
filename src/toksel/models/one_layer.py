"""The one-layer model f(X) = softmax(p^T E_X^T) E_X v, in its bag-of-tokens form.

Two classes: one output vector v and the logistic loss (the paper). K > 2 classes: K output vectors, the columns
of V (d, K), giving K logits softmax(p^T E_X^T) E_X V, and the cross-entropy (the rebuttal's multi-class model).

There are no positions, so only the counts c_{X,s} of each token matter:

    f(X) = sum_s c_{X,s} exp(a_s) b_s / sum_s c_{X,s} exp(a_s),   a = E p,  b = E v.

A full batch costs O(nnz + |S| d) instead of O(n T d). Each row's scores are shifted by their maximum before
exp, so f stays exact (no overflow, no NaN) however large |p| grows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from toksel.data.corpus import PackedSplit
from toksel.models import products


@dataclass(frozen=True)
class Bags:
    """A packed split as torch tensors: one entry per (sequence, distinct token)."""

    rows: torch.Tensor  # (nnz,) sequence index of each entry
    tokens: torch.Tensor  # (nnz,) token id
    counts: torch.Tensor  # (nnz,) c_{X,s}, float
    labels: torch.Tensor  # (n,) labels in 0 .. K-1, long
    n: int

    @classmethod
    def from_split(cls, split: PackedSplit, dtype: torch.dtype = torch.float64) -> Bags:
        return cls(
            rows=torch.from_numpy(split.bag_rows),
            tokens=torch.from_numpy(split.bag_tokens),
            counts=torch.from_numpy(split.bag_counts).to(dtype),
            labels=torch.from_numpy(split.labels),
            n=split.n,
        )

    @classmethod
    def from_batch(cls, batch: Mapping[str, torch.Tensor]) -> Bags:
        """A minibatch as the data module yields it (rows numbered 0 .. n-1): rows, tokens, counts, labels."""
        labels = batch["labels"]
        return cls(rows=batch["rows"], tokens=batch["tokens"], counts=batch["counts"], labels=labels, n=len(labels))

    def row_sum(self, values: torch.Tensor) -> torch.Tensor:
        """Sum over each sequence's entries; values (nnz,) or (nnz, K)."""
        return values.new_zeros((self.n, *values.shape[1:])).index_add(0, self.rows, values)

    def row_max(self, values: torch.Tensor) -> torch.Tensor:
        return values.new_zeros(self.n).scatter_reduce(0, self.rows, values, "amax", include_self=False)


def _shifted(entry_scores: torch.Tensor, bags: Bags) -> torch.Tensor:
    """Each entry's score minus its row's maximum: <= 0, and exactly 0 at the row's top tokens.

    The shift cancels in the softmax; detaching it keeps the gradient that of the unshifted softmax.
    """
    return entry_scores - bags.row_max(entry_scores.detach())[bags.rows]


def _softmax(shifted: torch.Tensor, bags: Bags) -> torch.Tensor:
    unnormalised = bags.counts * torch.exp(shifted)
    return unnormalised / bags.row_sum(unnormalised)[bags.rows]


def attention_weights(scores: torch.Tensor, bags: Bags) -> torch.Tensor:
    """q per entry: the softmax mass of each (sequence, token) entry, its token's positions together."""
    return _softmax(_shifted(scores[bags.tokens], bags), bags)


def _per_entry(weights: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """(nnz,) weights shaped to multiply (nnz,) or (nnz, K) values."""
    return weights.reshape(-1, *[1] * (values.dim() - 1))


def attention_output(scores: torch.Tensor, values: torch.Tensor, bags: Bags) -> torch.Tensor:
    """f(X) for every sequence, from token scores a = E p and token values b = E v ((|S|,) -> (n,)), or
    B = E V ((|S|, K) -> (n, K)).

    Computed as f = b_r + sum_s q_s (b_s - b_r), with r a top-scoring token of X (an identity, as the q_s sum
    to 1). When the softmax saturates on r, the gradient is a sum of tiny terms; in this form each is exact,
    while sum_s q_s b_s would bury them under the rounding error of f (about 1e-17 |b|).
    """
    shifted, entry_values = _shifted(scores[bags.tokens], bags), values[bags.tokens]
    top = (shifted.detach() == 0).to(values.dtype)
    # Mean value of the top-scoring tokens; detached, since df/db_r = 1 - sum_s q_s = 0 exactly.
    reference = bags.row_sum(entry_values.detach() * _per_entry(top, entry_values))
    reference = reference / _per_entry(bags.row_sum(top), reference)
    attention = _per_entry(_softmax(shifted, bags), entry_values)
    return reference + bags.row_sum(attention * (entry_values - reference[bags.rows]))


class _TokenProducts(torch.autograd.Function):
    """(E p, E v) for a training step on the CPU (float32 or float64, one output vector v), E read or written
    once per product: E p and E v in one pass, E^T g_a and E^T g_b in one, dE = g_a p^T + g_b v^T written once
    (models/products.py). Autograd makes six passes over E-sized arrays for what these do in three, and a step
    is bound by such passes (E is 60 MB on IMDB)."""

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, E: torch.Tensor, p: torch.Tensor,
                v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ctx.save_for_backward(E, p, v)
        scores, values = products.pair_scores(E.detach().numpy(), p.detach().numpy(), v.detach().numpy())
        return torch.from_numpy(scores), torch.from_numpy(values)

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad_scores: torch.Tensor,
                 grad_values: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        E, p, v = ctx.saved_tensors
        g, h = grad_scores.contiguous().numpy(), grad_values.contiguous().numpy()
        grad_E = grad_p = grad_v = None
        if ctx.needs_input_grad[0]:
            grad_E = torch.from_numpy(products.pair_outer(g, p.detach().numpy(), h, v.detach().numpy()))
        if ctx.needs_input_grad[1] or ctx.needs_input_grad[2]:
            grad_p, grad_v = map(torch.from_numpy, products.pair_transposed(E.detach().numpy(), g, h))
        return grad_E, grad_p, grad_v


def token_products(E: torch.Tensor, p: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The token scores a = E p and values b = E v (B = E V): the only way E enters the output."""
    compiled = (E.device.type == "cpu" and E.dtype in (torch.float32, torch.float64) and p.dtype == v.dtype == E.dtype
                and v.dim() == 1 and E.is_contiguous() and not torch.is_autocast_enabled("cpu"))
    return _TokenProducts.apply(E, p.contiguous(), v.contiguous()) if compiled else (E @ p, E @ v)


def forward(E: torch.Tensor, p: torch.Tensor, v: torch.Tensor, bags: Bags) -> torch.Tensor:
    return attention_output(*token_products(E, p, v), bags)


def logistic_loss(f: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean of log(1 + exp(-y f)), computed stably."""
    return torch.nn.functional.softplus(-y * f).mean()


def classification_loss(f: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The logistic loss for one output per sequence (y = 2 label - 1), the cross-entropy for K."""
    if f.dim() == 1:
        return logistic_loss(f, (2 * labels - 1).to(f.dtype))
    return torch.nn.functional.cross_entropy(f, labels)


def predicted_labels(f: torch.Tensor) -> torch.Tensor:
    """The class each output predicts: f > 0 for one output, the largest logit for K."""
    return (f > 0).long() if f.dim() == 1 else f.argmax(dim=1)


def loss(E: torch.Tensor, p: torch.Tensor, v: torch.Tensor, bags: Bags) -> torch.Tensor:
    return classification_loss(forward(E, p, v, bags), bags.labels)


def dense_forward(E: torch.Tensor, p: torch.Tensor, v: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
    """Reference: softmax(p^T E_X^T) E_X v with E_X gathered as an (n, T, d) array. Tests only."""
    E_X = E[X]
    attention = torch.softmax(E_X @ p, dim=1)
    return torch.einsum("nt,nt...->n...", attention, E_X @ v)
