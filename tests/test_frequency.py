import numpy as np

from toksel.data.corpus import PackedSplit
from toksel.data.frequency import average_signed_frequency, token_statistics


def _random_split(rng, n=60, vocab=15):
    sequences = [rng.integers(0, vocab, size=rng.integers(2, 12)) for _ in range(n)]
    return PackedSplit.from_sequences(sequences, rng.integers(0, 2, size=n), vocab), sequences


def test_alpha_matches_its_definition_on_variable_lengths():
    rng = np.random.default_rng(0)
    split, sequences = _random_split(rng)
    expected = np.zeros(split.vocab_size)
    for sequence, label in zip(sequences, split.labels, strict=True):
        for token in sequence:  # alpha_s = (1/n) sum_k y_k (1/T_k) sum_i 1{x_i = s}
            expected[token] += (2 * label - 1) / len(sequence)
    np.testing.assert_allclose(average_signed_frequency(split), expected / split.n, rtol=1e-12, atol=1e-15)


def test_counts_and_posterior_difference():
    split = PackedSplit.from_sequences([np.array([0, 0, 1]), np.array([1, 2]), np.array([0, 2, 2])],
                                       np.array([1, 0, 0]), vocab_size=4)
    stats = token_statistics(split)
    assert stats.count_positive.tolist() == [2, 1, 0, 0]
    assert stats.count_negative.tolist() == [1, 1, 3, 0]
    np.testing.assert_allclose(stats.posterior_difference[:3], [1 / 3, 0, -1])
    assert np.isnan(stats.posterior_difference[3])  # never occurs
    # Token 1: once in each class, but alpha weighs by 1/T_k: (1/3 - 1/2) / 3 < 0.
    assert stats.token_type.tolist() == [1, -1, -2, 0]
