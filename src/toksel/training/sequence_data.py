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
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Sampler

from toksel.data.corpus import PackedSplit

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


class SequenceDataModule(pl.LightningDataModule):
    """Train (bucketed or shuffled), validation (a seeded share of train) and test, as padded batches."""

    def __init__(self, directory: Path, batch_size: int, val_fraction: float, seed: int, bucketed: bool = True) -> None:
        super().__init__()
        self.directory, self.batch_size, self.val_fraction, self.seed, self.bucketed = (
            directory, batch_size, val_fraction, seed, bucketed)
        self.splits: dict[str, tuple[PackedSplit, np.ndarray]] = {}

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        train = PackedSplit.load(self.directory / "train.npz")
        test = PackedSplit.load(self.directory / "test.npz")
        order = np.random.default_rng(self.seed).permutation(train.n)
        held_out = max(1, round(self.val_fraction * train.n))
        self.splits = {"train": (train, np.sort(order[held_out:])), "val": (train, np.sort(order[:held_out])),
                       "test": (test, np.arange(test.n))}

    def _loader(self, name: str) -> DataLoader:
        self.setup()
        split, rows = self.splits[name]

        def collate(positions: list[int]) -> dict[str, torch.Tensor]:
            return padded_batch(split, rows[np.asarray(positions)])

        if name == "train" and self.bucketed:
            sampler = LengthBuckets(split.lengths[rows], self.batch_size, self.seed)
            return DataLoader(range(len(rows)), batch_sampler=sampler, collate_fn=collate)
        generator = torch.Generator().manual_seed(self.seed)
        return DataLoader(range(len(rows)), batch_size=self.batch_size, shuffle=name == "train",
                          generator=generator, collate_fn=collate)

    def train_dataloader(self) -> DataLoader:
        return self._loader("train")

    def val_dataloader(self) -> DataLoader:
        return self._loader("val")

    def test_dataloader(self) -> DataLoader:
        return self._loader("test")
