"""Packed corpus: each split as a CSR bag-of-tokens plus the ordered token ids.

A sequence X is stored twice: as its bag (distinct token ids with their counts, what the one-layer model
needs) and as its ordered ids (for models with positions). Both are CSR: row pointers into flat arrays.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from toksel.runtime.errors import ToksError
from toksel.runtime.io import damaged, read_npz, write_npz


@dataclass(frozen=True)
class PackedSplit:
    bag_indptr: np.ndarray  # (n + 1,) int64: row pointers into bag_tokens / bag_counts
    bag_tokens: np.ndarray  # (nnz,) int64: distinct token ids of each sequence
    bag_counts: np.ndarray  # (nnz,) int64: how often each occurs in its sequence
    seq_indptr: np.ndarray  # (n + 1,) int64: row pointers into seq_tokens
    seq_tokens: np.ndarray  # (sum T_k,) int64: token ids in order
    labels: np.ndarray  # (n,) int64 in {0, ..., K-1}
    vocab_size: int

    @property
    def n(self) -> int:
        return len(self.labels)

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.seq_indptr)

    @property
    def bag_rows(self) -> np.ndarray:
        """Row index of every stored (sequence, token) entry."""
        return np.repeat(np.arange(self.n), np.diff(self.bag_indptr))

    def rows(self, indices: np.ndarray) -> PackedSplit:
        """The split's rows `indices`, in that order, a row as often as it is named (a bootstrap resample)."""
        def gather(indptr: np.ndarray, *flat: np.ndarray) -> tuple[np.ndarray, ...]:
            lengths = np.diff(indptr)[indices]
            starts = np.repeat(indptr[:-1][indices], lengths)
            offsets = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
            return (np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
                    *(array[starts + offsets] for array in flat))

        bag_indptr, bag_tokens, bag_counts = gather(self.bag_indptr, self.bag_tokens, self.bag_counts)
        seq_indptr, seq_tokens = gather(self.seq_indptr, self.seq_tokens)
        return PackedSplit(bag_indptr, bag_tokens, bag_counts, seq_indptr, seq_tokens, self.labels[indices],
                           self.vocab_size)

    @classmethod
    def from_sequences(cls, sequences: list[np.ndarray], labels: np.ndarray, vocab_size: int) -> PackedSplit:
        lengths = np.array([len(s) for s in sequences], dtype=np.int64)
        if len(sequences) == 0 or (lengths == 0).any():
            raise ToksError("a split is empty or holds an empty sequence: check the data source")
        seq_indptr = np.concatenate([[0], np.cumsum(lengths)])
        seq_tokens = np.concatenate(sequences).astype(np.int64)
        # Each sequence's bag, its distinct tokens in order with their counts, for all sequences at once: the
        # positions sorted by (sequence, token), a bag entry where either changes.
        sequence_of = np.repeat(np.arange(len(sequences)), lengths)
        order = np.lexsort((seq_tokens, sequence_of))
        tokens, owners = seq_tokens[order], sequence_of[order]
        starts = np.flatnonzero(np.concatenate([[True], (tokens[1:] != tokens[:-1]) | (owners[1:] != owners[:-1])]))
        bag_lengths = np.bincount(owners[starts], minlength=len(sequences))
        return cls(
            bag_indptr=np.concatenate([[0], np.cumsum(bag_lengths)]).astype(np.int64),
            bag_tokens=tokens[starts],
            bag_counts=np.diff(np.append(starts, len(tokens))).astype(np.int64),
            seq_indptr=seq_indptr.astype(np.int64),
            seq_tokens=seq_tokens,
            labels=np.asarray(labels, dtype=np.int64),
            vocab_size=int(vocab_size),
        )

    def with_shuffled_labels(self, seed: int | tuple[int, ...]) -> PackedSplit:
        """The same sequences with labels that say nothing of the true ones (seeded): the negative controls' data.

        Each true class's rows get the labels in the proportions of the whole split, in a random order, so the
        class sizes stay (up to rounding) and every link between a token and a label goes (alpha_s near 0 for
        every token). A plain permutation would keep a trace of the truth: it agrees with the true labels on
        50 % +- 1/(2 sqrt(n)) of the rows, a signal a model learns (0.50 to 0.53 test accuracy in our runs).
        """
        rng = np.random.default_rng(seed)
        classes, sizes = np.unique(self.labels, return_counts=True)
        shuffled = np.empty_like(self.labels)
        for label in classes:
            rows = np.flatnonzero(self.labels == label)
            wanted = len(rows) * sizes / self.n  # each label's share of this class's rows
            counts = np.floor(wanted).astype(np.int64)
            extra = rng.choice(len(classes), size=len(rows) - counts.sum(), replace=False,
                               p=(wanted - counts) / (wanted - counts).sum()) if counts.sum() < len(rows) else []
            counts[extra] += 1
            shuffled[rng.permutation(rows)] = np.repeat(classes, counts)
        return dataclasses.replace(self, labels=shuffled)

    def with_signal(self, share: float, seed: int | tuple[int, ...]) -> PackedSplit:
        """Labels that keep a `share` of their signal: each row keeps its true label with probability `share`, else
        takes its shuffled one (with_shuffled_labels(seed)): 1 is the data, 0 its shuffled control, 1/2 half the
        signal (the calibration's planted effects)."""
        if share >= 1:
            return self
        shuffled = self.with_shuffled_labels(seed)
        kept = np.random.default_rng(np.random.SeedSequence(seed).spawn(1)[0]).random(self.n) < share
        return dataclasses.replace(self, labels=np.where(kept, self.labels, shuffled.labels))

    def dense_sequences(self) -> np.ndarray:
        """(n, T) token ids; only for equal-length splits (the dense reference model)."""
        lengths = self.lengths
        if (lengths != lengths[0]).any():
            raise ValueError("dense_sequences needs sequences of equal length")
        return self.seq_tokens.reshape(self.n, int(lengths[0]))

    def save(self, path: Path) -> None:
        arrays = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}
        write_npz(path, **arrays)

    @classmethod
    def load(cls, path: Path) -> PackedSplit:
        fields = read_npz(path, producer="prepare")
        missing = {field.name for field in dataclasses.fields(cls)} - set(fields)
        if missing:
            raise damaged(path, KeyError(", ".join(sorted(missing))), "prepare")
        fields["vocab_size"] = int(fields["vocab_size"])
        return cls(**fields)
