import numpy as np
import pytest

from toksel.data.frequency import (
    COMPLETELY_NEGATIVE,
    COMPLETELY_POSITIVE,
    IRRELEVANT,
    assumption1_fraction,
    token_statistics,
)
from toksel.data.synthetic import SyntheticVocabulary, generate_assumption1, generate_independent

VOCAB = SyntheticVocabulary(n_positive=5, n_negative=6, n_irrelevant=30)


def _sequences(split):
    return [split.seq_tokens[a:b] for a, b in zip(split.seq_indptr[:-1], split.seq_indptr[1:], strict=True)]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_assumption1_one_relevant_token_per_sequence_of_the_right_sign(seed):
    split = generate_assumption1(VOCAB, n=200, seq_len=9, rng=np.random.default_rng(seed))
    assert split.n == 200 and split.labels.mean() == 0.5 and (split.lengths == 9).all()
    for sequence, label in zip(_sequences(split), split.labels, strict=True):
        positive = np.isin(sequence, VOCAB.positive).sum()
        negative = np.isin(sequence, VOCAB.negative).sum()
        assert (positive, negative) == ((1, 0) if label == 1 else (0, 1))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_assumption1_alpha_is_exactly_zero_for_irrelevant_tokens(seed):
    split = generate_assumption1(VOCAB, n=300, seq_len=7, rng=np.random.default_rng(seed))
    stats = token_statistics(split)
    occurs = stats.count_positive + stats.count_negative > 0
    assert (stats.alpha[VOCAB.irrelevant] == 0.0).all()  # exactly, not approximately
    assert (stats.count_positive[VOCAB.irrelevant] == stats.count_negative[VOCAB.irrelevant]).all()
    assert (stats.token_type[VOCAB.irrelevant] == IRRELEVANT).all()
    assert (stats.alpha[VOCAB.positive][occurs[VOCAB.positive]] > 0).all()
    assert (stats.alpha[VOCAB.negative][occurs[VOCAB.negative]] < 0).all()
    assert (stats.token_type[VOCAB.positive][occurs[VOCAB.positive]] == COMPLETELY_POSITIVE).all()
    assert (stats.token_type[VOCAB.negative][occurs[VOCAB.negative]] == COMPLETELY_NEGATIVE).all()
    # Posterior difference is +1 / -1 for completely positive / negative tokens, 0 for irrelevant ones.
    assert (stats.posterior_difference[VOCAB.irrelevant][occurs[VOCAB.irrelevant]] == 0).all()
    assert (stats.posterior_difference[VOCAB.positive][occurs[VOCAB.positive]] == 1).all()


def test_independent_mode_draws_from_the_labels_own_set():
    rng = np.random.default_rng(0)
    split = generate_independent(VOCAB, n=400, seq_len=10, delta=0.0, rng=rng)
    assert split.labels.mean() == 0.5
    for sequence, label in zip(_sequences(split), split.labels, strict=True):
        assert np.isin(sequence, VOCAB.positive if label == 1 else VOCAB.negative).all()
    only_irrelevant = generate_independent(VOCAB, n=50, seq_len=10, delta=1.0, rng=rng)
    assert np.isin(only_irrelevant.seq_tokens, VOCAB.irrelevant).all()


def test_independent_mode_irrelevant_fraction_matches_delta():
    split = generate_independent(VOCAB, n=2000, seq_len=20, delta=0.7, rng=np.random.default_rng(3))
    fraction = np.isin(split.seq_tokens, VOCAB.irrelevant).mean()
    assert abs(fraction - 0.7) < 0.01


def test_generator_is_deterministic_in_its_seed():
    a = generate_assumption1(VOCAB, 40, 5, np.random.default_rng(11))
    b = generate_assumption1(VOCAB, 40, 5, np.random.default_rng(11))
    c = generate_assumption1(VOCAB, 40, 5, np.random.default_rng(12))
    assert np.array_equal(a.seq_tokens, b.seq_tokens) and not np.array_equal(a.seq_tokens, c.seq_tokens)


def test_bag_of_tokens_matches_the_ordered_sequences():
    split = generate_independent(VOCAB, n=30, seq_len=8, delta=0.5, rng=np.random.default_rng(1))
    for row, sequence in enumerate(_sequences(split)):
        start, stop = split.bag_indptr[row], split.bag_indptr[row + 1]
        tokens, counts = np.unique(sequence, return_counts=True)
        assert np.array_equal(split.bag_tokens[start:stop], tokens)
        assert np.array_equal(split.bag_counts[start:stop], counts)


def test_assumption1_fraction_tells_the_two_modes_apart():
    rng = np.random.default_rng(4)
    paired = generate_assumption1(VOCAB, 200, 8, rng)
    assert assumption1_fraction(paired, token_statistics(paired)) == 1.0
    independent = generate_independent(VOCAB, 200, 8, 0.8, rng)
    assert assumption1_fraction(independent, token_statistics(independent)) < 0.5
