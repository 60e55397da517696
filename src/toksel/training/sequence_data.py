"""Padded batches of ordered token ids, for the models with positions (models/sequence.py).

A batch is X (n, T) token ids, `mask` (n, T) True on real tokens, and the labels; T is the longest sequence
of the batch. Padding costs compute and memory in every layer, so the training batches can be bucketed by
length: the rows are shuffled, cut into pools of `pool` batches, each pool sorted by length and cut into
batches, and the batches shuffled again. Each epoch still visits every row once, in a seeded order.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, Sampler

from toksel.data.corpus import PackedSplit
from toksel.training.data import PackedDataModule

PAD = 0  # the id in pad positions; masked out of every softmax, so any id would do


def padded_batch(split: PackedSplit, rows: np.ndarray) -> dict[str, torch.Tensor]:
    lengths = split.lengths[rows]
    longest = int(lengths.max())
    mask = np.arange(longest)[None, :] < lengths[:, None]
    X = np.full((len(rows), longest), PAD, dtype=np.int64)
    X[mask] = np.concatenate([split.seq_tokens[split.seq_indptr[row]:split.seq_indptr[row + 1]] for row in rows])
    return {"X": torch.from_numpy(X), "mask": torch.from_numpy(mask), "labels": torch.from_numpy(split.labels[rows])}


def padding_fraction(lengths: np.ndarray, batches: list[np.ndarray]) -> float:
    """Share of the padded slots that are padding, over the given batches of row indices."""
    slots = sum(len(batch) * lengths[batch].max() for batch in batches)
    return float(1 - sum(lengths[batch].sum() for batch in batches) / slots)


class LengthBuckets(Sampler[list[int]]):
    """Batches of row positions (0 .. len(lengths) - 1) of similar length; a new seeded order each epoch."""

    def __init__(self, lengths: np.ndarray, batch_size: int, seed: int, pool: int = 50) -> None:
        self.lengths, self.batch_size, self.seed, self.pool = lengths, batch_size, seed, pool
        self.epoch = 0

    def batches(self) -> list[np.ndarray]:
        rng = np.random.default_rng((self.seed, self.epoch))
        order = rng.permutation(len(self.lengths))
        pool_size = self.batch_size * self.pool
        batches = []
        for start in range(0, len(order), pool_size):
            pool = order[start:start + pool_size]
            pool = pool[np.argsort(self.lengths[pool], kind="stable")]
            batches += [pool[i:i + self.batch_size] for i in range(0, len(pool), self.batch_size)]
        return [batches[i] for i in rng.permutation(len(batches))]

    def __iter__(self) -> Iterator[list[int]]:
        batches = self.batches()
        self.epoch += 1
        return iter([batch.tolist() for batch in batches])

    def __len__(self) -> int:
        return -(-len(self.lengths) // self.batch_size)


class SequenceDataModule(PackedDataModule):
    """The packed corpus's train / validation / test rows (PackedDataModule), as padded batches; the training
    batches bucketed by length unless `bucketed` is False."""

    def __init__(self, directory: Path, batch_size: int, val_fraction: float, seed: int, bucketed: bool = True) -> None:
        super().__init__(directory, batch_size, val_fraction, seed)
        self.bucketed = bucketed

    def _loader(self, name: str, shuffle: bool) -> DataLoader:
        split, rows = self.rows(name)

        def collate(positions: list[int]) -> dict[str, torch.Tensor]:
            return padded_batch(split, rows[np.asarray(positions)])

        if shuffle and self.bucketed:
            sampler = LengthBuckets(split.lengths[rows], self.batch_size, self.seed)
            return DataLoader(range(len(rows)), batch_sampler=sampler, collate_fn=collate)
        generator = torch.Generator().manual_seed(self.seed)
        return DataLoader(range(len(rows)), batch_size=self.batch_size, shuffle=shuffle, generator=generator,
                          collate_fn=collate)
