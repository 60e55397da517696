"""The packed corpus as a LightningDataModule: minibatches of bags, cut from the CSR.

The train split is divided (seeded) into train and validation rows; the test split is kept whole. max_train and
max_test cut either to a seeded subset first (0: all rows). `label_seed` replaces the labels of the train split
by shuffled ones (PackedSplit.with_shuffled_labels, before it is divided into train and validation rows): the
negative controls' data, on which a model learns labels that say nothing of its inputs, and is then scored on
the true labels of the test split, as the claim's own model is. A batch is a dict of tensors: rows renumbered
0 .. n-1, token ids, counts, labels.

Each epoch's order of the training rows is drawn from (seed, epoch), the epoch the trainer is in: a fit resumed
at epoch k sees the batches the uninterrupted fit saw there. Under DDP every process draws the same batches and
trains on its strided share of each: the averaged gradient is the whole batch's when the batch divides evenly
among the processes.

The batches are built where the model is (BagBatches): an epoch's bags are cut on the host in one vectorised pass
and moved to the fit's device at once, and each batch is then a slice of them. On a GPU a step then waits for no
host work and no copy; a step's batch is the same as one cut alone, so the numbers do not depend on where it runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import Sampler

from toksel.data.corpus import PackedSplit
from toksel.training.device import resident_device


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


EVALUATED = ("val", "test")  # the splits every fit and every epoch's log read whole, the same batches each time


class EpochOrder(Sampler[int]):
    """Positions 0 .. n-1 in an order drawn from (seed, the current epoch)."""

    def __init__(self, n: int, seed: int, epoch: Callable[[], int]) -> None:
        self.n, self.seed, self.epoch = n, seed, epoch

    def permutation(self) -> np.ndarray:
        return np.random.default_rng((self.seed, self.epoch())).permutation(self.n)

    def __iter__(self) -> Iterator[int]:
        return iter(self.permutation().tolist())

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
        self._fixed: dict[tuple[str, str], BagBatches] = {}  # the evaluated splits' batches, by split and device

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

    def device(self) -> torch.device:
        """Where the fit runs (the CPU outside one): the batches are built there."""
        return self.trainer.strategy.root_device if self.trainer is not None else torch.device("cpu")

    def batches(self, name: str, shuffle: bool = False) -> list[np.ndarray]:
        """The split's rows in batches: in the epoch's order (shuffle), else in order."""
        rows = self.rows(name)[1]
        order = rows[EpochOrder(len(rows), self.seed, self.epoch).permutation()] if shuffle else rows
        return [order[start:start + self.batch_size] for start in range(0, len(order), self.batch_size)]

    def loader(self, name: str, shuffle: bool = False, shared: bool = False,
               device: torch.device | None = None) -> BagBatches:
        """Batches of the split `name` (shuffle: in the epoch's order; shared: only this DDP process's share of
        each) built on `device` (the fit's when None). The validation and test batches never change: cut once per
        device, for every fit and every pass of this data."""
        (split, rows), device = self.rows(name), self.device() if device is None else device
        fixed = not shuffle and not shared
        if fixed and name in EVALUATED and (name, str(device)) in self._fixed:
            return self._fixed[name, str(device)]

        def epoch() -> list[np.ndarray]:
            return [self.share(chosen) if shared else chosen for chosen in self.batches(name, shuffle)]

        count = -(-len(rows) // self.batch_size)
        batches = BagBatches(split, epoch, count, self.dtype, device, once=fixed)
        if fixed and name in EVALUATED:
            self._fixed[name, str(device)] = batches
        return batches

    def train_dataloader(self) -> BagBatches:
        return self.loader("train", shuffle=True, shared=True)

    def val_dataloader(self) -> BagBatches:
        return self.loader("val")

    def test_dataloader(self) -> BagBatches:
        return self.loader("test")


class BagBatches:
    """An epoch's batches of bags (`epoch()`: the rows of each batch), cut on the host in one pass and moved to
    `device` at once when they fit there (training/device.py; else each batch goes as Lightning moves it); a
    batch is then slices of them. `once`: the batches do not change between epochs (validation, test): cut once."""

    def __init__(self, split: PackedSplit, epoch: Callable[[], list[np.ndarray]], count: int, dtype: torch.dtype,
                 device: torch.device, once: bool = False) -> None:
        self.split, self.epoch, self.count, self.dtype = split, epoch, count, dtype
        self.device, self.once = device, once
        self._cut: list[dict[str, torch.Tensor]] | None = None

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        # Cut at the first batch asked for, not when the iterator is made: Lightning makes it before a resumed fit
        # restores its epoch, which draws the order (a sampler is as lazy).
        if self._cut is None or not self.once:
            self._cut = self._cut_epoch()
        yield from self._cut

    def _cut_epoch(self) -> list[dict[str, torch.Tensor]]:
        chosen = self.epoch()
        whole = batch_of_rows(self.split, np.concatenate(chosen), self.dtype)
        nbytes = sum(tensor.numel() * tensor.element_size() for tensor in whole.values())
        whole = {name: tensor.to(resident_device(self.device, nbytes)) for name, tensor in whole.items()}
        lengths = np.diff(self.split.bag_indptr)
        batches, row, entry = [], 0, 0
        for rows in chosen:
            entries = int(lengths[rows].sum())
            batches.append({"rows": whole["rows"][entry:entry + entries] - row,  # numbered 0 .. n-1 in each batch
                            "tokens": whole["tokens"][entry:entry + entries],
                            "counts": whole["counts"][entry:entry + entries],
                            "labels": whole["labels"][row:row + len(rows)]})
            row, entry = row + len(rows), entry + entries
        return batches
