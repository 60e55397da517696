"""The vocabulary: tokens of the training split, filtered by count; everything else maps to <unk> (id 0)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

UNKNOWN = "<unk>"


@dataclass(frozen=True)
class Vocabulary:
    words: list[str]  # id -> token; id 0 is <unk>

    @property
    def size(self) -> int:
        return len(self.words)

    def encode(self, token_lists: list[list[str]], max_len: int | None = None) -> list[np.ndarray]:
        """Token ids of each sequence, truncated to its first max_len tokens."""
        index = {word: i for i, word in enumerate(self.words)}
        return [np.fromiter((index.get(token, 0) for token in tokens[:max_len]), dtype=np.int64)
                for tokens in token_lists]


def build_vocabulary(token_lists: list[list[str]], min_count: int = 1, max_vocab: int = 0) -> Vocabulary:
    """Tokens seen at least min_count times, the max_vocab most frequent (0: all), by count then alphabet."""
    counts = Counter(token for tokens in token_lists for token in tokens)
    kept = sorted((word for word, count in counts.items() if count >= min_count and word != UNKNOWN),
                  key=lambda word: (-counts[word], word))
    if max_vocab:
        kept = kept[:max_vocab]
    return Vocabulary([UNKNOWN, *kept])
