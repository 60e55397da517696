"""Synthetic sentiment data: positive, negative and irrelevant tokens (a stand-in for the paper's Eq. (15)).

Token ids: positive tokens first, then negative, then irrelevant. Labels are 1 (positive) and 0 (negative).

- `assumption1`: every sequence holds exactly one relevant token (completely positive if the label is 1,
  completely negative if 0) at a uniformly random position; its other T - 1 tokens are irrelevant. Sequences
  come in (+, -) pairs that share one multiset of irrelevant tokens, so each irrelevant token occurs equally
  often with both labels and its average signed frequency alpha_s is exactly 0 (paper's Assumption 1).
- `independent`: labels are balanced; each position independently takes a uniform irrelevant token with
  probability delta, else a uniform token from the label's own set. Assumption 1 generally fails.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from toksel.data.corpus import PackedSplit
from toksel.runtime.memory import require_memory

BYTES_PER_ENTRY = 48  # the independent mode's draws: four int64 arrays and a mask of n x T, and the packed split

POSITIVE, NEGATIVE, IRRELEVANT = 1, -1, 0


@dataclass(frozen=True)
class SyntheticVocabulary:
    n_positive: int
    n_negative: int
    n_irrelevant: int

    @property
    def size(self) -> int:
        return self.n_positive + self.n_negative + self.n_irrelevant

    @property
    def positive(self) -> np.ndarray:
        return np.arange(self.n_positive)

    @property
    def negative(self) -> np.ndarray:
        return self.n_positive + np.arange(self.n_negative)

    @property
    def irrelevant(self) -> np.ndarray:
        return self.n_positive + self.n_negative + np.arange(self.n_irrelevant)

    def groups(self) -> np.ndarray:
        """The generator's group of each token: +1 positive, -1 negative, 0 irrelevant."""
        return np.concatenate([
            np.full(self.n_positive, POSITIVE), np.full(self.n_negative, NEGATIVE),
            np.full(self.n_irrelevant, IRRELEVANT),
        ])


def generate_assumption1(vocab: SyntheticVocabulary, n: int, seq_len: int, rng: np.random.Generator) -> PackedSplit:
    """n sequences (n even) in (+, -) pairs sharing their irrelevant multiset."""
    sequences, labels = [], []
    for _ in range(n // 2):
        irrelevant = rng.choice(vocab.irrelevant, size=seq_len - 1)
        for label, relevant_set in ((1, vocab.positive), (0, vocab.negative)):
            others = rng.permutation(irrelevant)
            position = rng.integers(seq_len)
            relevant = rng.choice(relevant_set)
            sequences.append(np.concatenate([others[:position], [relevant], others[position:]]))
            labels.append(label)
    order = rng.permutation(len(labels))
    return PackedSplit.from_sequences([sequences[i] for i in order], np.array(labels)[order], vocab.size)


def generate_independent(
    vocab: SyntheticVocabulary, n: int, seq_len: int, delta: float, rng: np.random.Generator
) -> PackedSplit:
    """n sequences; each position irrelevant with probability delta, else from the label's own set."""
    labels = rng.permutation(np.arange(n) % 2)
    is_irrelevant = rng.random((n, seq_len)) < delta
    irrelevant = rng.choice(vocab.irrelevant, size=(n, seq_len))
    positive = rng.choice(vocab.positive, size=(n, seq_len))
    negative = rng.choice(vocab.negative, size=(n, seq_len))
    relevant = np.where(labels[:, None] == 1, positive, negative)
    tokens = np.where(is_irrelevant, irrelevant, relevant)
    return PackedSplit.from_sequences(list(tokens), labels, vocab.size)


def generate(
    mode: str, vocab: SyntheticVocabulary, n: int, seq_len: int, delta: float, rng: np.random.Generator
) -> PackedSplit:
    require_memory(BYTES_PER_ENTRY * n * seq_len, f"{n:,} synthetic sequences of {seq_len:,} tokens",
                   "lower data.synthetic.n_train, n_test or seq_len")
    if mode == "assumption1":
        return generate_assumption1(vocab, n, seq_len, rng)
    return generate_independent(vocab, n, seq_len, delta, rng)
