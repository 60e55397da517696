"""The packed corpus as a LightningDataModule: minibatches of bags, cut from the CSR without copying the split.

The train split is divided (seeded) into train and validation rows; the test split is kept whole. max_train and
max_test cut either to a seeded subset first (0: all rows). `label_seed` replaces the labels of the train split
by shuffled ones (PackedSplit.with_shuffled_labels, before it is divided into train and validation rows): the
negative controls' data, on which a model learns labels that say nothing of its inputs, and is then scored on
the true labels of the test split, as the claim's own model is. A batch is a dict of tensors (what Lightning moves
to the device): rows renumbered 0 .. n-1, token ids, counts, labels.

Each epoch's order of the training rows is drawn from (seed, epoch), the epoch the trainer is in: a fit resumed
at epoch k sees the batches the uninterrupted fit saw there. Under DDP every process draws the same batches and
trains on its strided share of each: the averaged gradient is the whole batch's when the batch divides evenly
among the processes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Sampler

from toksel.data.corpus import PackedSplit


def batch_of_rows(split: PackedSplit, rows: np.ndarray, dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """The bags of `rows` of `split` as one batch."""
    starts, stops = split.bag_indptr[rows], split.bag_indptr[rows + 1]
    lengths = stops - starts
    # Entry positions of every chosen row, in order: start of its row + offset within it.
    offsets = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    entries = np.repeat(starts, lengths) + offsets
    return {
        "rows": torch.from_numpy(np.repeat(np.arange(len(rows)), lengths)),
        "tokens": torch.from_numpy(split.bag_tokens[entries]),
        "counts": torch.from_numpy(split.bag_counts[entries]).to(dtype),
        "labels": torch.from_numpy(split.labels[rows]),
    }


class EpochOrder(Sampler[int]):
    """Positions 0 .. n-1 in an order drawn from (seed, the current epoch)."""

    def __init__(self, n: int, seed: int, epoch: Callable[[], int]) -> None:
        self.n, self.seed, self.epoch = n, seed, epoch

    def __iter__(self) -> Iterator[int]:
        return iter(np.random.default_rng((self.seed, self.epoch())).permutation(self.n).tolist())

    def __len__(self) -> int:
        return self.n


class PackedDataModule(pl.LightningDataModule):
    def __init__(self, directory: Path, batch_size: int, val_fraction: float, seed: int,
                 dtype: torch.dtype = torch.float32, max_train: int = 0, max_test: int = 0,
                 label_seed: tuple[int, ...] | None = None) -> None:
        super().__init__()
        self.directory, self.batch_size, self.val_fraction, self.seed, self.dtype = (
            directory, batch_size, val_fraction, seed, dtype)
        self.max_train, self.max_test, self.label_seed = max_train, max_test, label_seed
        self.splits: dict[str, tuple[PackedSplit, np.ndarray]] = {}

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        train = PackedSplit.load(self.directory / "train.npz")
        test = PackedSplit.load(self.directory / "test.npz")
        if self.label_seed is not None:
            train = train.with_shuffled_labels(self.label_seed)
        order = np.random.default_rng(self.seed).permutation(train.n)[:self.max_train or None]
        held_out = max(1, round(self.val_fraction * len(order)))
        test_rows = np.random.default_rng(self.seed).permutation(test.n)[:self.max_test] if self.max_test else None
        self.splits = {
            "train": (train, np.sort(order[held_out:])),
            "val": (train, np.sort(order[:held_out])),
            "test": (test, np.arange(test.n) if test_rows is None else np.sort(test_rows)),
        }

    def rows(self, name: str) -> tuple[PackedSplit, np.ndarray]:
        self.setup()
        return self.splits[name]

    def share(self, chosen: np.ndarray) -> np.ndarray:
        """This process's rows of a training batch under DDP: every world_size-th; a batch smaller than the
        number of processes goes whole to each (the average of equal gradients is still the batch's)."""
        world = self.trainer.world_size if self.trainer is not None else 1
        if world == 1 or len(chosen) < world:
            return chosen
        return chosen[self.trainer.global_rank::world]

    def epoch(self) -> int:
        """The epoch the trainer is in (0 outside a fit): it seeds the order of that epoch's batches."""
        return self.trainer.current_epoch if self.trainer is not None else 0

    def loader(self, name: str, shuffle: bool = False, shared: bool = False) -> DataLoader:
        """Batches of the split `name` (shuffle: in the epoch's order); shared: only this DDP process's share of
        each."""
        split, rows = self.rows(name)

        def collate(chosen: list[int]) -> dict[str, torch.Tensor]:
            chosen = np.asarray(chosen)
            return batch_of_rows(split, self.share(chosen) if shared else chosen, self.dtype)

        order = EpochOrder(len(rows), self.seed, self.epoch) if shuffle else None
        return DataLoader(rows, batch_size=self.batch_size, sampler=order, collate_fn=collate)

    def train_dataloader(self) -> DataLoader:
        return self.loader("train", shuffle=True, shared=True)

    def val_dataloader(self) -> DataLoader:
        return self.loader("val")

    def test_dataloader(self) -> DataLoader:
        return self.loader("test")
