"""Padded batches hold their sequences in order; length buckets cut the padding and still visit every row."""

import numpy as np
import pytest

from toksel.data.corpus import PackedSplit
from toksel.training.sequence_data import PAD, LengthBuckets, SequenceDataModule, padded_batch, padding_fraction


def _split(n=400, seed=0):
    rng = np.random.default_rng(seed)
    sequences = [rng.integers(1, 30, size=rng.integers(1, 200)) for _ in range(n)]
    return PackedSplit.from_sequences(sequences, rng.integers(0, 2, size=n), 30), sequences


def test_a_padded_batch_holds_each_sequence_in_order_then_pads():
    split, sequences = _split(n=10)
    rows = np.array([3, 0, 7])
    batch = padded_batch(split, rows)
    assert batch["X"].shape == (3, max(len(sequences[row]) for row in rows))
    for position, row in enumerate(rows):
        length = len(sequences[row])
        assert batch["X"][position, :length].tolist() == sequences[row].tolist()
        assert batch["mask"][position].sum() == length and not batch["mask"][position, length:].any()
        assert (batch["X"][position, length:] == PAD).all()
    assert batch["labels"].tolist() == split.labels[rows].tolist()


def test_length_buckets_visit_every_row_once_with_far_less_padding():
    split, _ = _split()
    lengths = split.lengths
    epoch = [0]
    sampler = LengthBuckets(lengths, batch_size=16, seed=0, epoch=lambda: epoch[0], pool=10)
    first = list(sampler)
    epoch[0] = 1
    second = list(sampler)
    for batches in (first, second):
        assert sorted(row for batch in batches for row in batch) == list(range(split.n))
    assert first != second  # a new order each epoch
    # The order is the epoch's own: a new sampler (a resumed fit's) at epoch 0 draws the same batches.
    assert LengthBuckets(lengths, 16, seed=0, epoch=lambda: 0, pool=10).batches()[0].tolist() == first[0]
    random_batches = np.array_split(np.random.default_rng(0).permutation(split.n), len(first))
    bucketed = padding_fraction(lengths, [np.array(batch) for batch in first])
    unsorted = padding_fraction(lengths, random_batches)
    assert unsorted > 0.4 and bucketed < unsorted / 4, (unsorted, bucketed)


def test_the_data_module_yields_padded_bucketed_training_batches(tmp_path):
    split, _ = _split(n=120)
    split.save(tmp_path / "train.npz")
    split.save(tmp_path / "test.npz")
    data = SequenceDataModule(tmp_path, batch_size=8, val_fraction=0.25, seed=0)
    train_rows = data.rows("train")[1]
    seen = [batch for batch in data.train_dataloader()]
    assert sum(len(batch["labels"]) for batch in seen) == len(train_rows) == 90
    assert all(batch["X"].shape == batch["mask"].shape for batch in seen)
    assert sum(len(batch["labels"]) for batch in data.val_dataloader()) == 30


@pytest.mark.parametrize("bucketed", [True, False])
def test_the_reported_padding_is_that_of_the_first_epochs_batches(tmp_path, bucketed):
    split, _ = _split(n=120)
    split.save(tmp_path / "train.npz")
    split.save(tmp_path / "test.npz")
    data = SequenceDataModule(tmp_path, batch_size=8, val_fraction=0.25, seed=0, bucketed=bucketed)
    reported = data.training_batches_padding()
    masks = [batch["mask"] for batch in data.train_dataloader()]
    assert reported == pytest.approx(sum(int((~mask).sum()) for mask in masks) / sum(mask.numel() for mask in masks))


def test_max_len_keeps_each_sequences_first_tokens_and_caps_the_rows(tmp_path):
    split, sequences = _split(n=40)
    split.save(tmp_path / "train.npz")
    split.save(tmp_path / "test.npz")
    data = SequenceDataModule(tmp_path, batch_size=4, val_fraction=0.25, seed=0, max_len=3, max_train=20, max_test=8)
    assert len(data.rows("train")[1]) == 15 and len(data.rows("val")[1]) == 5 and len(data.rows("test")[1]) == 8
    rows = data.rows("test")[1]
    batch = next(iter(data.test_dataloader()))
    for i, row in enumerate(rows[:4]):
        kept = sequences[row][:3]
        assert batch["X"][i, :len(kept)].tolist() == list(kept) and int(batch["mask"][i].sum()) == len(kept)
    assert batch["X"].shape[1] <= 3
