"""Synthetic sentiment data: positive, negative and irrelevant tokens (a stand-in for the paper's Eq. (15)).

Token ids: positive tokens first, then negative, then irrelevant. Labels are 1 (positive) and 0 (negative).

- `assumption1`: every sequence holds exactly one relevant token (completely positive if the label is 1,
  completely negative if 0) at a uniformly random position; its other T - 1 tokens are irrelevant. Sequences
  come in (+, -) pairs that share one multiset of irrelevant tokens, so each irrelevant token occurs equally
  often with both labels and its average signed frequency alpha_s is exactly 0 (paper's Assumption 1).
- `independent`: labels are balanced; each position independently takes a uniform irrelevant token with
  probability delta, else a uniform token from the label's own set. Assumption 1 generally fails.
- `pair`: a share `pair_share` of the sequences carries a pair instead of a relevant token: a sentiment token,
  `good` or `bad`, with or without the negator `not`, which flips it: {good} positive, {not, good} negative,
  {bad} negative, {not, bad} positive. They come in quadruples that share their irrelevant tokens (T - 2 of
  them, and one more where `not` is absent), so that `not`, `good`, `bad` and every irrelevant token have alpha_s
  exactly 0: the label rides on the pair alone, which first-order statistics cannot see. The other sequences are
  the assumption1 mode's, each label flipped with probability `label_noise`: without that noise the data are
  separable, and a model that reads the pair drives its validation loss down for as long as it trains.
- `pair_first_order`: the same, but `not` flips nothing ({good} and {not, good} positive, {bad} and {not, bad}
  negative): `good` and `bad` carry first-order signal, `not` still none. The pair mode's control.

A model whose output is a convex combination of its tokens' scores (the one-layer model) gets at most three of a
quadruple right in the pair mode, whatever its parameters (docs/paper-notes.md derives it): 3/4 on its pair
sequences.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from toksel.data.corpus import PackedSplit
from toksel.runtime.memory import require_memory

# What a draw costs at its peak, measured with tracemalloc on prepare's whole run (both splits, the token table):
BYTES_PER_ENTRY = 64  # a token of a sequence: the independent mode's four int64 arrays and mask of n x T, the packed
                      # split (60 measured at T = 100)
BYTES_PER_SEQUENCE = 200  # a sequence's own arrays and list entries beyond its tokens (140 measured at T = 2)
BYTES_PER_TOKEN = 400  # a token of the vocabulary: its ids, statistics and row of the token table (383 measured)

POSITIVE, NEGATIVE, IRRELEVANT = 1, -1, 0
PAIR_WORDS = ("not", "good", "bad")  # the pair modes' three tokens, after the irrelevant ones
# The labels of a quadruple's {good}, {not, good}, {bad}, {not, bad} in each pair mode.
PAIR_LABELS = {"pair": (1, 0, 0, 1), "pair_first_order": (1, 1, 0, 0)}
PAIR_CAP = 0.75  # the most a one-layer model gets of the pair mode's pair sequences: three of each quadruple


@dataclass(frozen=True)
class SyntheticVocabulary:
    n_positive: int
    n_negative: int
    n_irrelevant: int
    pair: bool = False  # the pair modes' three tokens `not`, `good`, `bad` follow the irrelevant ones

    @property
    def size(self) -> int:
        return self.n_positive + self.n_negative + self.n_irrelevant + len(self.pair_tokens)

    @property
    def positive(self) -> np.ndarray:
        return np.arange(self.n_positive)

    @property
    def negative(self) -> np.ndarray:
        return self.n_positive + np.arange(self.n_negative)

    @property
    def irrelevant(self) -> np.ndarray:
        return self.n_positive + self.n_negative + np.arange(self.n_irrelevant)

    @property
    def pair_tokens(self) -> np.ndarray:
        """The ids of `not`, `good`, `bad` (none outside the pair modes)."""
        start = self.n_positive + self.n_negative + self.n_irrelevant
        return start + np.arange(len(PAIR_WORDS) if self.pair else 0)

    def groups(self, mode: str = "assumption1") -> np.ndarray:
        """The generator's group of each token, the sign of the label it carries alone: +1 positive, -1 negative,
        0 irrelevant; the pair tokens 0, but `good` +1 and `bad` -1 where `not` flips nothing."""
        pair = (IRRELEVANT, POSITIVE, NEGATIVE) if mode == "pair_first_order" else (IRRELEVANT,) * 3
        return np.concatenate([
            np.full(self.n_positive, POSITIVE), np.full(self.n_negative, NEGATIVE),
            np.full(self.n_irrelevant, IRRELEVANT), np.array(pair[:len(self.pair_tokens)], dtype=int),
        ])

    def words(self) -> list[str]:
        """pos3, neg12, irr57, then not, good, bad."""
        prefix = {POSITIVE: "pos", NEGATIVE: "neg", IRRELEVANT: "irr"}
        first = [f"{prefix[group]}{i}" for i, group in enumerate(self.groups()[:self.size - len(self.pair_tokens)])]
        return first + list(PAIR_WORDS[:len(self.pair_tokens)])


def pair_rows(split: PackedSplit, vocab: SyntheticVocabulary) -> np.ndarray:
    """The rows of a split that carry a pair (a `good` or a `bad`)."""
    sentiment = vocab.pair_tokens[1:]
    owners = np.repeat(np.arange(split.n), split.lengths)
    return np.unique(owners[np.isin(split.seq_tokens, sentiment)])


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


def generate_pair(vocab: SyntheticVocabulary, n: int, seq_len: int, share: float, labels: tuple[int, ...],
                  rng: np.random.Generator, label_noise: float = 0.0, first_order: int = 0) -> PackedSplit:
    """n sequences (n even): round(share n / 4) quadruples {good}, {not, good}, {bad}, {not, bad} labelled
    `labels` (the first `first_order` of them the pair_first_order mode's way: a planted first-order signal of the
    pair, for the known answers), each quadruple on one multiset of irrelevant tokens, and assumption1 sequences for
    the rest, each label of these flipped with probability label_noise."""
    not_, good, bad = vocab.pair_tokens
    quadruples = round(share * n / 4)
    single = n - 4 * quadruples  # sequences with one relevant token
    sequences, found = [], []
    if single:
        rest = generate_assumption1(vocab, single, seq_len, rng)
        sequences += [rest.seq_tokens[start:end] for start, end in zip(rest.seq_indptr[:-1], rest.seq_indptr[1:],
                                                                        strict=True)]
        flipped = rng.random(single) < label_noise
        found += list(np.where(flipped, 1 - rest.labels, rest.labels))
    for quadruple in range(quadruples):
        irrelevant = rng.choice(vocab.irrelevant, size=seq_len - 1)  # the last one stands where `not` may
        own = PAIR_LABELS["pair_first_order"] if quadruple < first_order else labels
        for (sentiment, negated), label in zip(((good, False), (good, True), (bad, False), (bad, True)), own,
                                               strict=True):
            tokens = np.concatenate([[sentiment, not_ if negated else irrelevant[-1]], irrelevant[:-1]])
            sequences.append(rng.permutation(tokens))
            found.append(label)
    order = rng.permutation(len(found))
    return PackedSplit.from_sequences([sequences[i] for i in order], np.array(found)[order], vocab.size)


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
    mode: str, vocab: SyntheticVocabulary, n: int, seq_len: int, delta: float, rng: np.random.Generator,
    pair_share: float = 0.0, label_noise: float = 0.0,
) -> PackedSplit:
    require_draw_memory(vocab, n, seq_len)
    if mode == "assumption1":
        return generate_assumption1(vocab, n, seq_len, rng)
    if mode in PAIR_LABELS:
        return generate_pair(vocab, n, seq_len, pair_share, PAIR_LABELS[mode], rng, label_noise)
    return generate_independent(vocab, n, seq_len, delta, rng)


def require_draw_memory(vocab: SyntheticVocabulary, n: int, seq_len: int) -> None:
    """One line, before anything is drawn, when n sequences of seq_len tokens over `vocab` (and its token table)
    would need more memory than is available: every size key of the generator counts."""
    needed = n * (BYTES_PER_SEQUENCE + BYTES_PER_ENTRY * seq_len) + BYTES_PER_TOKEN * vocab.size
    require_memory(needed, f"{n:,} synthetic sequences of {seq_len:,} tokens over a vocabulary of {vocab.size:,}",
                   "lower data.synthetic.n_train, n_test or seq_len, or the token sets' sizes n_positive, n_negative "
                   "and n_irrelevant")


def vocabulary(mode: str, n_positive: int, n_negative: int, n_irrelevant: int) -> SyntheticVocabulary:
    """The generator's tokens in `mode`: the pair modes add `not`, `good` and `bad`."""
    return SyntheticVocabulary(n_positive, n_negative, n_irrelevant, pair=mode in PAIR_LABELS)
