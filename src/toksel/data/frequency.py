"""Token statistics: counts per label, the average signed frequency alpha_s, the posterior difference.

alpha_s = (1/n) sum_k y_k (1/T_k) sum_i 1{x_i^k = s}, with y in {-1, +1} (the paper's definition). With this
normalisation one GD step from the Gaussian initialisation moves E_s^T v by eta0 alpha_s / 2 (Lemma 4.1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from toksel.data.corpus import PackedSplit

# Token types (the paper's): by the sign of alpha_s; "completely" = occurs with one label only.
COMPLETELY_NEGATIVE, NEGATIVE, IRRELEVANT, POSITIVE, COMPLETELY_POSITIVE = -2, -1, 0, 1, 2
TYPE_NAMES = {
    COMPLETELY_NEGATIVE: "completely negative", NEGATIVE: "negative", IRRELEVANT: "irrelevant",
    POSITIVE: "positive", COMPLETELY_POSITIVE: "completely positive",
}


@dataclass(frozen=True)
class TokenStatistics:
    count_positive: np.ndarray  # occurrences in label-1 sequences
    count_negative: np.ndarray  # occurrences in label-0 sequences
    alpha: np.ndarray
    posterior_difference: np.ndarray  # P(1|s) - P(0|s); NaN for tokens that never occur
    token_type: np.ndarray


def average_signed_frequency(split: PackedSplit) -> np.ndarray:
    """alpha_s, exact: signed counts are summed as integers per sequence length before dividing by T.

    So a token that occurs equally often with both labels (in sequences of equal length) gets exactly 0.
    """
    rows = split.bag_rows
    lengths = split.lengths[rows]
    signed = (2 * split.labels[rows] - 1) * split.bag_counts
    # One integer sum per (length, token) pair, then the float division.
    keys, inverse = np.unique(lengths * split.vocab_size + split.bag_tokens, return_inverse=True)
    signed_per_key = np.bincount(inverse, weights=signed).round().astype(np.int64)
    key_length, key_token = np.divmod(keys, split.vocab_size)
    alpha = np.bincount(key_token, weights=signed_per_key / key_length, minlength=split.vocab_size)
    return alpha / split.n


def label_counts(split: PackedSplit) -> tuple[np.ndarray, np.ndarray]:
    is_positive = split.labels[split.bag_rows] == 1

    def occurrences(mask: np.ndarray) -> np.ndarray:
        counts = np.bincount(split.bag_tokens[mask], weights=split.bag_counts[mask], minlength=split.vocab_size)
        return counts.astype(np.int64)

    return occurrences(is_positive), occurrences(~is_positive)


def posterior_difference(counts: np.ndarray) -> np.ndarray:
    """P(K-1|s) - P(0|s), the last class against the first, estimated from the (K, |S|) occurrences per class:
    (c_{K-1} - c_0) / sum_k c_k, in [-1, 1]; P(1|s) - P(0|s) for two classes; NaN for tokens that never occur."""
    total = counts.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, (counts[-1] - counts[0]) / total, np.nan)


def token_types(alpha: np.ndarray, count_positive: np.ndarray, count_negative: np.ndarray) -> np.ndarray:
    types = np.sign(alpha).astype(np.int64)
    types[(count_positive > 0) & (count_negative == 0)] = COMPLETELY_POSITIVE
    types[(count_negative > 0) & (count_positive == 0)] = COMPLETELY_NEGATIVE
    return types


def class_signed_frequency(split: PackedSplit, num_classes: int, presence: bool = False) -> np.ndarray:
    """(K, |S|): alpha_s^(k) = (1/n) sum_X (c_{X,s} / T_X) (1{y_X = k} - 1/K), the class-k signed frequency of
    the rebuttal's multi-class one-step formula. For K = 2, alpha^(1) = alpha / 2.

    presence: 1{s in X} in place of c_{X,s} / T_X, a document frequency: the scale of the rebuttal's
    multi-class tables (+-0.03), where the one-step formula's 1/T puts the class-k frequency near +-0.003.
    """
    rows = split.bag_rows
    share = np.ones(len(rows)) if presence else split.bag_counts / split.lengths[rows]
    return np.stack([
        np.bincount(split.bag_tokens, weights=share * ((split.labels[rows] == k) - 1 / num_classes),
                    minlength=split.vocab_size) / split.n
        for k in range(num_classes)
    ])


def class_counts(split: PackedSplit, num_classes: int) -> np.ndarray:
    """(K, |S|): occurrences of each token in the sequences of each class."""
    labels = split.labels[split.bag_rows]
    return np.stack([np.bincount(split.bag_tokens[labels == k], weights=split.bag_counts[labels == k],
                                 minlength=split.vocab_size) for k in range(num_classes)]).astype(np.int64)


def token_statistics(split: PackedSplit) -> TokenStatistics:
    count_positive, count_negative = label_counts(split)
    alpha = average_signed_frequency(split)
    return TokenStatistics(
        count_positive=count_positive, count_negative=count_negative, alpha=alpha,
        posterior_difference=posterior_difference(np.stack([count_negative, count_positive])),
        token_type=token_types(alpha, count_positive, count_negative),
    )


def assumption1_fraction(split: PackedSplit, statistics: TokenStatistics) -> float:
    """Fraction of sequences meeting Assumption 1: exactly one occurrence of a completely positive or
    completely negative token, and alpha_s = 0 for every other token of the sequence."""
    completely = np.isin(statistics.token_type, (COMPLETELY_POSITIVE, COMPLETELY_NEGATIVE))[split.bag_tokens]
    irrelevant = (statistics.alpha == 0)[split.bag_tokens]
    rows = split.bag_rows
    relevant_occurrences = np.bincount(rows, weights=split.bag_counts * completely, minlength=split.n)
    other_tokens = np.bincount(rows, weights=~completely & ~irrelevant, minlength=split.n)
    return float(np.mean((relevant_occurrences == 1) & (other_tokens == 0)))
