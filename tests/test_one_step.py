"""Lemma 4.1 on a tiny case: the update along v has slope eta0/2 in alpha_s; for K classes, along v_k,
slope eta0 in the class-k signed frequency (the rebuttal)."""

import numpy as np
import pytest
import torch

from toksel.data.corpus import PackedSplit
from toksel.data.frequency import average_signed_frequency, class_signed_frequency
from toksel.data.synthetic import SyntheticVocabulary, generate_assumption1, generate_independent
from toksel.models.fused import FusedBags
from toksel.models.initial import initialise
from toksel.models.one_layer import Bags, loss
from toksel.theory.one_step import alignment_metrics, one_gradient_step_on_embeddings, theory_slope

VOCAB = SyntheticVocabulary(n_positive=6, n_negative=6, n_irrelevant=28)


def _init(d, seed):
    init = initialise(VOCAB.size, d, seed)
    return init.E.numpy(), init.p.numpy(), init.v.numpy()


@pytest.mark.parametrize("mode", ["assumption1", "independent"])
def test_one_step_slope_is_eta0_over_2(mode):
    rng = np.random.default_rng(0)
    split = (generate_assumption1(VOCAB, 200, 8, rng) if mode == "assumption1"
             else generate_independent(VOCAB, 200, 8, 0.6, rng))
    E0, p0, v = _init(d=2048, seed=0)
    eta0 = 20.0
    E1 = one_gradient_step_on_embeddings(E0, p0, v, FusedBags.from_split(split), eta0)
    metrics = alignment_metrics(E0, E1, v, average_signed_frequency(split), theory_slope(eta0, 2),
                                np.arange(VOCAB.size))
    assert metrics["slope_theory"] == 10.0
    assert metrics["slope_rel_error"] < 0.05, metrics
    assert metrics["pearson_r"] > 0.99, metrics
    assert metrics["orthogonal_ratio"] < 0.2, metrics


def test_one_step_moves_only_E_by_minus_eta0_times_the_gradient():
    split = generate_assumption1(VOCAB, 20, 5, np.random.default_rng(1))
    init = initialise(VOCAB.size, d=32, seed=1)
    E1 = one_gradient_step_on_embeddings(init.E.numpy(), init.p.numpy(), init.v.numpy(),
                                         FusedBags.from_split(split), eta0=3.0)
    E = init.E.clone().requires_grad_(True)
    (gradient,) = torch.autograd.grad(loss(E, init.p, init.v, Bags.from_split(split)), E)
    np.testing.assert_allclose(E1, (init.E - 3.0 * gradient).numpy(), rtol=0, atol=1e-13)


def test_slope_check_fails_when_the_step_is_not_small_against_the_init():
    """The check can fail: with a huge eta0 and a tiny d the rank-1 picture breaks."""
    split = generate_assumption1(VOCAB, 200, 8, np.random.default_rng(0))
    E0, p0, v = _init(d=8, seed=0)
    E1 = one_gradient_step_on_embeddings(E0, p0, v, FusedBags.from_split(split), eta0=1e4)
    metrics = alignment_metrics(E0, E1, v, average_signed_frequency(split), theory_slope(1e4, 2),
                                np.arange(VOCAB.size))
    assert metrics["slope_rel_error"] > 0.05 or metrics["pearson_r"] < 0.99


def _class_biased_split(num_classes, n=400, vocab=48, T=8, seed=0):
    """Each class favours its own block of tokens: every class-k signed frequency spreads on both sides of 0."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, num_classes, size=n)
    block = vocab // num_classes
    sequences = []
    for label in labels:
        weights = np.ones(vocab)
        weights[label * block:(label + 1) * block] += 2.0 * rng.random(block)
        sequences.append(rng.choice(vocab, size=T, p=weights / weights.sum()))
    return PackedSplit.from_sequences(sequences, labels, vocab)


def test_multiclass_one_step_slope_is_eta0_in_the_class_signed_frequency():
    split = _class_biased_split(num_classes=4)
    init = initialise(split.vocab_size, 2048, seed=0, num_classes=4)
    E0, p0, V = init.E.numpy(), init.p.numpy(), init.v.numpy()
    E1 = one_gradient_step_on_embeddings(E0, p0, V, FusedBags.from_split(split, num_classes=4), eta0=20.0)
    metrics = alignment_metrics(E0, E1, V, class_signed_frequency(split, 4), theory_slope(20.0, 4),
                                np.arange(split.vocab_size))
    assert metrics["slope_theory"] == 20.0
    for k in range(4):
        assert abs(metrics[f"slope_class_{k}"] / 20.0 - 1) < 0.05, metrics
        assert metrics[f"pearson_r_class_{k}"] > 0.99, metrics
    assert metrics["slope_rel_error"] == max(metrics[f"slope_rel_error_class_{k}"] for k in range(4))
    assert metrics["orthogonal_ratio"] < 0.2, metrics
    # The check can fail: regressed on the wrong class's frequency, the slope is off.
    shuffled = alignment_metrics(E0, E1, V, class_signed_frequency(split, 4)[[1, 2, 3, 0]], 20.0,
                                 np.arange(split.vocab_size))
    assert shuffled["slope_rel_error"] > 0.5
