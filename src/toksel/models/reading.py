"""How the one-layer model reads a sequence (or every sequence of a split at once): the attention of <cls> over its
tokens and what it predicts.

The model enters a sequence X only through each token's score E_s^T p and value E_s^T v (v_k for K classes):
the attention weight of position i is softmax_i(E_{x_i}^T p), the output f = sum_i weight_i E_{x_i}^T v. So the
two per-token columns, kept with a trained model (model.npz: `scores`, `values`), are all a reading needs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from toksel.data.corpus import PackedSplit


@dataclass(frozen=True)
class Reading:
    weights: np.ndarray  # (T,) attention weight of each position, summing to 1
    output: np.ndarray  # f: a scalar for two classes (the logit of class 1), (K,) logits for K classes
    probabilities: np.ndarray  # (K,): P(class k | X)

    @property
    def predicted(self) -> int:
        return int(np.argmax(self.probabilities))


def read_sequence(scores: np.ndarray, values: np.ndarray, ids: np.ndarray) -> Reading:
    """The reading of the sequence of token ids `ids` by a model with per-token `scores` (|S|,) and `values`
    (|S|,) for two classes (logistic: P(1) = sigmoid(f)) or (|S|, K) for K (softmax of f)."""
    if len(ids) == 0:
        raise ValueError("an empty sequence has no reading")
    logits = scores[ids]
    weights = np.exp(logits - logits.max())
    weights /= weights.sum()
    output = weights @ values[ids]
    if values.ndim == 1:
        positive = 1.0 / (1.0 + np.exp(-output))
        probabilities = np.array([1.0 - positive, positive])
    else:
        exponentials = np.exp(output - output.max())
        probabilities = exponentials / exponentials.sum()
    return Reading(weights, np.asarray(output), probabilities)


def bag_outputs(scores: np.ndarray, values: np.ndarray, split: PackedSplit) -> np.ndarray:
    """f of every sequence of `split` (n,) for two classes: read_sequence's output, all at once. The attention
    runs over positions, so a token that occurs c times weighs c exp(E_s^T p), as in the bag of tokens."""
    if values.ndim != 1:
        raise ValueError("bag_outputs reads a model of two classes (one value per token)")
    starts = split.seq_indptr[:-1]
    logits = scores[split.seq_tokens]
    weights = np.exp(logits - np.repeat(np.maximum.reduceat(logits, starts), split.lengths))
    return np.add.reduceat(weights * values[split.seq_tokens], starts) / np.add.reduceat(weights, starts)
