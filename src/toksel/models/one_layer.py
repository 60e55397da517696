"""The one-layer model f(X) = softmax(p^T E_X^T) E_X v, in its bag-of-tokens form.

There are no positions, so only the counts c_{X,s} of each token matter:

    f(X) = sum_s c_{X,s} exp(a_s) b_s / sum_s c_{X,s} exp(a_s),   a = E p,  b = E v.

A full batch costs O(nnz + |S| d) instead of O(n T d). Each row's scores are shifted by their maximum before
exp, so f stays exact (no overflow, no NaN) however large |p| grows.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from toksel.data.corpus import PackedSplit


@dataclass(frozen=True)
class Bags:
    """A packed split as torch tensors: one entry per (sequence, distinct token)."""

    rows: torch.Tensor  # (nnz,) sequence index of each entry
    tokens: torch.Tensor  # (nnz,) token id
    counts: torch.Tensor  # (nnz,) c_{X,s}, float
    y: torch.Tensor  # (n,) labels in {-1, +1}, float
    n: int

    @classmethod
    def from_split(cls, split: PackedSplit, dtype: torch.dtype = torch.float64) -> Bags:
        return cls(
            rows=torch.from_numpy(split.bag_rows),
            tokens=torch.from_numpy(split.bag_tokens),
            counts=torch.from_numpy(split.bag_counts).to(dtype),
            y=torch.from_numpy(2 * split.labels - 1).to(dtype),
            n=split.n,
        )

    def row_sum(self, values: torch.Tensor) -> torch.Tensor:
        return values.new_zeros(self.n).index_add(0, self.rows, values)

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


def attention_output(scores: torch.Tensor, values: torch.Tensor, bags: Bags) -> torch.Tensor:
    """f(X) for every sequence, from token scores a = E p and token values b = E v.

    Computed as f = b_r + sum_s q_s (b_s - b_r), with r a top-scoring token of X (an identity, as the q_s sum
    to 1). When the softmax saturates on r, the gradient is a sum of tiny terms; in this form each is exact,
    while sum_s q_s b_s would bury them under the rounding error of f (about 1e-17 |b|).
    """
    shifted, entry_values = _shifted(scores[bags.tokens], bags), values[bags.tokens]
    top = (shifted.detach() == 0).to(values.dtype)
    # Mean value of the top-scoring tokens; detached, since df/db_r = 1 - sum_s q_s = 0 exactly.
    reference = bags.row_sum(entry_values.detach() * top) / bags.row_sum(top)
    return reference + bags.row_sum(_softmax(shifted, bags) * (entry_values - reference[bags.rows]))


def forward(E: torch.Tensor, p: torch.Tensor, v: torch.Tensor, bags: Bags) -> torch.Tensor:
    return attention_output(E @ p, E @ v, bags)


def logistic_loss(f: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean of log(1 + exp(-y f)), computed stably."""
    return torch.nn.functional.softplus(-y * f).mean()


def loss(E: torch.Tensor, p: torch.Tensor, v: torch.Tensor, bags: Bags) -> torch.Tensor:
    return logistic_loss(forward(E, p, v, bags), bags.y)


def dense_forward(E: torch.Tensor, p: torch.Tensor, v: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
    """Reference: softmax(p^T E_X^T) E_X v with E_X gathered as an (n, T, d) array. Tests only."""
    E_X = E[X]
    attention = torch.softmax(E_X @ p, dim=1)
    return (attention * (E_X @ v)).sum(dim=1)


@dataclass(frozen=True)
class Initialisation:
    E: torch.Tensor  # (|S|, d), rows ~ N(0, I/d)
    p: torch.Tensor  # (d,) ~ N(0, I/d)
    v: torch.Tensor  # (d,) a fixed unit vector: a Gaussian draw, normalised


def initialise(vocab_size: int, d: int, seed: int, dtype: torch.dtype = torch.float64) -> Initialisation:
    generator = torch.Generator().manual_seed(seed)
    E = torch.randn(vocab_size, d, generator=generator, dtype=dtype) / d**0.5
    p = torch.randn(d, generator=generator, dtype=dtype) / d**0.5
    v = torch.randn(d, generator=generator, dtype=dtype)
    return Initialisation(E=E, p=p, v=v / v.norm())
