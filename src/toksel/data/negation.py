"""Negated reviews: a negator right before a strong sentiment word (params.yaml `negation`, which gives the rule's
reasons).

A negator is a word of the list, or any word ending in "n't" where the list names "n't" (the word tokenizer keeps
don't, isn't whole). A strong sentiment word is a word (it holds a letter) whose posterior difference on the training
split, |P(+|s) - P(-|s)|, is at least min_polarity from at least min_count occurrences there, and no negator itself.
A review is negated when a negator stands at most `window` tokens before a strong word, both within the tokens a
model reads (its first max_len).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from toksel.data.corpus import PackedSplit
from toksel.data.token_table import TokenTable

CONTRACTION = "n't"
LETTER = re.compile(r"[^\W\d_]")  # a word holds a letter; punctuation and numbers are no sentiment words


@dataclass(frozen=True)
class Rule:
    negators: tuple[str, ...]
    window: int
    min_polarity: float
    min_count: int


def negator_words(words: Sequence[str], negators: Sequence[str]) -> dict[str, list[int]]:
    """Each negator of the list -> the token ids it stands for (several for "n't", none for a word outside the
    vocabulary)."""
    return {negator: [token for token, word in enumerate(words)
                      if word == negator or (negator == CONTRACTION and word.endswith(CONTRACTION))]
            for negator in negators}


def negator_mask(words: Sequence[str], negators: Sequence[str]) -> np.ndarray:
    """Bool (|S|,): the tokens that negate."""
    mask = np.zeros(len(words), dtype=bool)
    for tokens in negator_words(words, negators).values():
        mask[tokens] = True
    return mask


def strong_mask(tokens: TokenTable, rule: Rule) -> np.ndarray:
    """Bool (|S|,): the strong sentiment words (two classes: the posterior difference is P(1|s) - P(0|s))."""
    polarity = np.abs(np.nan_to_num(tokens.column("posterior_difference")))
    count = tokens.per_class("count").sum(axis=0)
    words = tokens.words
    is_word = np.array([bool(LETTER.search(word)) for word in words], dtype=bool)
    return (polarity >= rule.min_polarity) & (count >= rule.min_count) & is_word & ~negator_mask(words, rule.negators)


def negations(split: PackedSplit, negator: np.ndarray, strong: np.ndarray, window: int,
              max_len: int | None = None) -> np.ndarray:
    """(m, 2) positions in split.seq_tokens: each negator and a strong word at most `window` tokens after it in
    the same review, both among its first max_len tokens (None: all); in order."""
    tokens, starts = split.seq_tokens, split.seq_indptr
    before = np.flatnonzero(negator[tokens])
    row = np.searchsorted(starts, before, side="right") - 1
    ends = starts[row + 1] if max_len is None else np.minimum(starts[row + 1], starts[row] + max_len)
    found = []
    for gap in range(1, window + 1):
        after = before + gap
        hits = after < ends  # the same review, within what is read
        hits[hits] = strong[tokens[after[hits]]]
        found.append(np.stack([before[hits], after[hits]], axis=1))
    pairs = np.concatenate(found)
    return pairs[np.lexsort((pairs[:, 1], pairs[:, 0]))]


def negated_rows(split: PackedSplit, pairs: np.ndarray) -> np.ndarray:
    """Bool (n,): the reviews that hold one of the `pairs` (negations())."""
    marked = np.zeros(split.n, dtype=bool)
    marked[np.searchsorted(split.seq_indptr, pairs[:, 0], side="right") - 1] = True
    return marked


def _standing(value: float, among: np.ndarray) -> tuple[float, float]:
    """z of `value` among the values `among`, and the percentage of them below it."""
    return float((value - among.mean()) / among.std()), float(100 * np.mean(among < value))


def negator_readings(tokens: TokenTable, scores: np.ndarray, values: np.ndarray,
                     negators: Sequence[str]) -> list[dict[str, object]]:
    """Per negator, how a one-layer model reads it: its training occurrences, alpha_s, E_s^T v and E_s^T p, and the
    last two's standing among the tokens with statistics (z, percentile). A negator of several words ("n't") is
    read as if they were one token: alpha_s summed (it is linear in the counts), E_s^T v and E_s^T p averaged over
    their occurrences."""
    counts = tokens.per_class("count").sum(axis=0)
    alpha, among = tokens.column("alpha"), tokens.occurring()
    found = []
    for negator, ids in negator_words(tokens.words, negators).items():
        weights = counts[ids].astype(float)
        row: dict[str, object] = {"negator": negator, "words": [tokens.words[i] for i in ids],
                                  "count": float(weights.sum()),
                                  "alpha": float(alpha[ids].sum()) if ids else float("nan")}
        for name, column in (("value", values), ("score", scores)):
            mean = float(np.average(column[ids], weights=weights)) if weights.sum() > 0 else float("nan")
            z, percentile = _standing(mean, column[among]) if np.isfinite(mean) else (float("nan"),) * 2
            row |= {name: mean, f"{name}_z": z, f"{name}_percentile": percentile}
        found.append(row)
    return found
