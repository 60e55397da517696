"""Padded batches of ordered token ids, for the models with positions (models/sequence.py).

A batch is X (n, T) token ids, `mask` (n, T) True on real tokens, and the labels; T is the longest sequence
of the batch, each sequence cut to its first `max_len` tokens when that is set. Padding costs compute and
memory in every layer, so the training batches can be bucketed by length: the rows are shuffled, cut into
pools of `pool` batches, each pool sorted by length and cut into batches, and the batches shuffled again.
Each epoch still visits every row once, in a seeded order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, Sampler

from toksel.data.corpus import PackedSplit
from toksel.training.data import EpochOrder, PackedDataModule

PAD = 0  # the id in pad positions; masked out of every softmax, so any id would do


def kept_lengths(split: PackedSplit, max_len: int | None = None) -> np.ndarray:
    """Each sequence's length after the cut to max_len (None: no cut)."""
    return split.lengths if max_len is None else np.minimum(split.lengths, max_len)


def kept_tokens(split: PackedSplit, rows: np.ndarray, max_len: int | None = None) -> np.ndarray:
    """The token ids of `rows`, each cut to max_len, one after the other."""
    lengths = kept_lengths(split, max_len)[rows]
    starts = split.seq_indptr[rows]
    return np.concatenate([split.seq_tokens[start:start + length] for start, length in zip(starts, lengths,
                                                                                            strict=True)])


def padded_batch(split: PackedSplit, rows: np.ndarray, max_len: int | None = None) -> dict[str, torch.Tensor]:
    lengths = kept_lengths(split, max_len)[rows]
    longest = int(lengths.max())
    mask = np.arange(longest)[None, :] < lengths[:, None]
    X = np.full((len(rows), longest), PAD, dtype=np.int64)
    X[mask] = kept_tokens(split, rows, max_len)
    return {"X": torch.from_numpy(X), "mask": torch.from_numpy(mask), "labels": torch.from_numpy(split.labels[rows])}


def padding_fraction(lengths: np.ndarray, batches: list[np.ndarray]) -> float:
    """Share of the padded slots that are padding, over the given batches of row indices."""
    slots = sum(len(batch) * lengths[batch].max() for batch in batches)
    return float(1 - sum(lengths[batch].sum() for batch in batches) / slots)


class LengthBuckets(Sampler[list[int]]):
    """Batches of row positions (0 .. len(lengths) - 1) of similar length, in an order drawn from (seed, the
    current epoch)."""

    def __init__(self, lengths: np.ndarray, batch_size: int, seed: int, epoch: Callable[[], int],
                 pool: int = 50) -> None:
        self.lengths, self.batch_size, self.seed, self.epoch, self.pool = lengths, batch_size, seed, epoch, pool

    def batches(self) -> list[np.ndarray]:
        rng = np.random.default_rng((self.seed, self.epoch()))
        order = rng.permutation(len(self.lengths))
        pool_size = self.batch_size * self.pool
        batches = []
        for start in range(0, len(order), pool_size):
            pool = order[start:start + pool_size]
            pool = pool[np.argsort(self.lengths[pool], kind="stable")]
            batches += [pool[i:i + self.batch_size] for i in range(0, len(pool), self.batch_size)]
        return [batches[i] for i in rng.permutation(len(batches))]

    def __iter__(self) -> Iterator[list[int]]:
        return iter([batch.tolist() for batch in self.batches()])

    def __len__(self) -> int:
        return -(-len(self.lengths) // self.batch_size)


class SequenceDataModule(PackedDataModule):
    """The packed corpus's train / validation / test rows (PackedDataModule), as padded batches cut to max_len;
    the training batches bucketed by length unless `bucketed` is False."""

    def __init__(self, directory: Path, batch_size: int, val_fraction: float, seed: int, bucketed: bool = True,
                 max_len: int | None = None, max_train: int = 0, max_test: int = 0,
                 label_seed: tuple[int, ...] | None = None) -> None:
        super().__init__(directory, batch_size, val_fraction, seed, max_train=max_train, max_test=max_test,
                         label_seed=label_seed)
        self.bucketed, self.max_len = bucketed, max_len

    def trained_tokens(self) -> np.ndarray:
        """Bool (|S|,): the tokens the training batches contain (within their first max_len positions)."""
        split, rows = self.rows("train")
        seen = np.zeros(split.vocab_size, dtype=bool)
        seen[kept_tokens(split, rows, self.max_len)] = True
        return seen

    def training_batches_padding(self) -> float:
        """Share of padding in the first epoch's training batches: one pass over a fresh training loader."""
        pads = slots = 0
        for batch in self.loader("train", shuffle=True):
            pads, slots = pads + int((~batch["mask"]).sum()), slots + batch["mask"].numel()
        return pads / slots

    def loader(self, name: str, shuffle: bool = False, shared: bool = False,
               device: torch.device | None = None) -> DataLoader:
        """Padded batches of the split `name`, made on the host (a pass moves each batch to its device)."""
        split, rows = self.rows(name)

        def collate(positions: list[int]) -> dict[str, torch.Tensor]:
            positions = np.asarray(positions)
            return padded_batch(split, rows[self.share(positions) if shared else positions], self.max_len)

        if shuffle and self.bucketed:
            sampler = LengthBuckets(kept_lengths(split, self.max_len)[rows], self.batch_size, self.seed, self.epoch)
            return DataLoader(range(len(rows)), batch_sampler=sampler, collate_fn=collate)
        order = EpochOrder(len(rows), self.seed, self.epoch) if shuffle else None
        return DataLoader(range(len(rows)), batch_size=self.batch_size, sampler=order, collate_fn=collate)
