"""The benchmarks' two paths compute the same loss and gradients (on small data, through the same code)."""

import numpy as np

from benchmarks.dense import bag_gradients, dense_gradients, length_batches
from toksel.data.corpus import PackedSplit
from toksel.models.fused import FusedBags
from toksel.models.one_layer import initialise


def test_batches_by_length_cover_every_row_once_within_the_budget():
    lengths = np.random.default_rng(0).integers(1, 50, size=200)
    batches = length_batches(lengths, positions=120)
    assert np.array_equal(np.sort(np.concatenate(batches)), np.arange(200))
    assert all(len(rows) * lengths[rows].max() <= 120 or len(rows) == 1 for rows in batches)


def test_the_dense_reference_and_the_bag_of_tokens_path_agree_on_sequences_of_unequal_length():
    rng = np.random.default_rng(1)
    sequences = [rng.integers(0, 30, size=rng.integers(1, 40)) for _ in range(64)]
    split = PackedSplit.from_sequences(sequences, rng.integers(0, 2, size=64), vocab_size=30)
    init = initialise(30, 16, seed=2)
    E, p, v = (x.numpy() for x in (init.E, init.p, init.v))
    p = 5 * p  # a peaked softmax, so the mask and the shift matter
    dense = dense_gradients(E, p, v, split)
    assert dense.relative_difference(bag_gradients(E, p, v, FusedBags.from_split(split))) < 1e-12
    assert dense.relative_difference(bag_gradients(E, p, -v, FusedBags.from_split(split))) > 1e-3  # it can fail
