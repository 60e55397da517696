"""Gradient flow on p with E frozen: |p_t| grows, the loss falls, the important tokens get selected."""

import numpy as np
import pytest

from tests.test_one_step import _class_biased_split
from toksel.data.frequency import class_signed_frequency
from toksel.data.synthetic import SyntheticVocabulary, generate_assumption1
from toksel.models.fused import FusedBags
from toksel.models.one_layer import initialise
from toksel.theory.convergence import GROWTH_CAP, analyse_trajectory, p_norm_growth
from toksel.theory.gradient_flow import run_gradient_flow
from toksel.theory.one_step import one_gradient_step_on_embeddings

VOCAB = SyntheticVocabulary(n_positive=4, n_negative=4, n_irrelevant=24)


def _one_step_case():
    split = generate_assumption1(VOCAB, 80, 6, np.random.default_rng(0))
    init = initialise(VOCAB.size, d=256, seed=0)
    p0, v = init.p.numpy(), init.v.numpy()
    bags = FusedBags.from_split(split)
    E1 = one_gradient_step_on_embeddings(init.E.numpy(), p0, v, bags, eta0=40.0)
    return split, bags, (p0, v), E1


def test_plain_gd_selects_and_approaches_max_margin():
    split, bags, init, E1 = _one_step_case()
    trajectory = run_gradient_flow(E1, *init, bags, steps=3000, lr=100.0, log_every=100)
    report = analyse_trajectory(trajectory, E1, split, VOCAB.groups() != 0, tol=1e-4)
    metrics = report.final_metrics()
    assert metrics["loss_decreasing_fraction"] == 1.0 and metrics["p_norm_increasing_fraction"] == 1.0
    assert metrics["selection_fraction"] == 1.0
    assert report.max_margin.status == "optimal"
    cos = report.history["cos_max_margin"]
    assert cos[-1] > 0.95 and cos[-1] > cos[len(cos) // 2] > cos[1]
    assert 0 < metrics["margin_ratio"] <= 1 + 1e-6  # no direction beats the max-margin one


def test_normalized_gd_converges_in_direction_without_nan():
    split, bags, init, E1 = _one_step_case()
    trajectory = run_gradient_flow(E1, *init, bags, steps=3000, lr=0.2, normalized=True, log_every=100)
    assert np.isfinite(trajectory.p).all()
    report = analyse_trajectory(trajectory, E1, split, VOCAB.groups() != 0, tol=1e-4)
    assert report.final_metrics()["cos_max_margin"] > 0.999


def test_logs_first_every_kth_and_last_step():
    _, bags, init, E1 = _one_step_case()
    trajectory = run_gradient_flow(E1, *init, bags, steps=25, lr=1.0, log_every=10)
    assert trajectory.steps.tolist() == [0, 10, 20, 25]
    assert np.array_equal(trajectory.p[0], init[0])


def test_without_the_qp_the_direction_metrics_are_absent_not_invented():
    split, bags, init, E1 = _one_step_case()
    trajectory = run_gradient_flow(E1, *init, bags, steps=50, lr=100.0, log_every=10)
    report = analyse_trajectory(trajectory, E1, split, VOCAB.groups() != 0, tol=1e-4, max_margin=False)
    assert report.max_margin.status == "not requested" and report.n_constraints == 0
    assert np.isnan(report.history["cos_max_margin"]).all()
    assert np.isnan(report.final_metrics()["margin_ratio"])
    assert report.history["selection_fraction"][-1] >= 0


def test_multiclass_flow_lowers_the_cross_entropy_and_favours_the_important_tokens():
    split = _class_biased_split(num_classes=4)
    init = initialise(split.vocab_size, d=256, seed=0, num_classes=4)
    bags = FusedBags.from_split(split, num_classes=4)
    p0, V = init.p.numpy(), init.v.numpy()
    E1 = one_gradient_step_on_embeddings(init.E.numpy(), p0, V, bags, eta0=200.0)
    trajectory = run_gradient_flow(E1, p0, V, bags, steps=400, lr=10.0, log_every=20)
    assert np.all(np.diff(trajectory.loss) < 0) and np.all(np.diff(trajectory.p_norm) > 0)
    importance = np.abs(class_signed_frequency(split, 4)).max(axis=0)
    scores = E1 @ trajectory.p[-1]
    important, least = importance >= np.quantile(importance, 0.9), importance <= np.quantile(importance, 0.1)
    assert scores[important].mean() > scores[least].mean() + 1.0, (scores[important].mean(), scores[least].mean())


def test_the_growth_of_p_norm_tells_log_growth_from_a_bounded_norm():
    steps = np.arange(0, 20_001, 100)
    t = np.maximum(steps, 1)
    assert p_norm_growth(steps, 3 * np.log(t) + 1) == pytest.approx(1.0, abs=0.01)  # |p_t| ~ log t
    assert p_norm_growth(steps, 10 - 2000 / (t + 100)) == pytest.approx(0.5, abs=0.02)  # bounded, like 1/t
    assert p_norm_growth(steps, 10 - 5 * np.exp(-t / 300)) == 0.0  # settled
    assert p_norm_growth(steps, 10 + 1e-5 * t / 20_000) == 0.0  # a creep far below log growth is no growth
    assert p_norm_growth(steps, np.where(t < 10_000, 10 - t / 10_000, 9 + (t - 10_000) / 1000)) == GROWTH_CAP
    assert np.isnan(p_norm_growth(np.array([0, 1]), np.array([1.0, 2.0])))  # too short to tell


def test_small_passes_run_on_one_thread_and_match_the_threaded_path(monkeypatch):
    import numba

    from toksel.models import threads

    assert threads.threads_for(6_832, 100 * 1024) == 1  # the synthetic data
    assert threads.threads_for(127_957, 4_431 * 2048) == numba.config.NUMBA_NUM_THREADS  # 4-class Yelp
    _, bags, (p0, v), E1 = _one_step_case()
    before = numba.get_num_threads()
    one = run_gradient_flow(E1, p0, v, bags, steps=200, lr=100.0, log_every=50)
    assert numba.get_num_threads() == before  # restored after the flow
    with threads.pass_threads(10**9, 10**9):  # a large problem: every thread, even here
        assert numba.get_num_threads() == numba.config.NUMBA_NUM_THREADS
    # Every thread on the same problem: the partial sums split differently, a rounding-level change only.
    monkeypatch.setattr(threads, "SMALL_ENTRIES", 0)
    threaded = run_gradient_flow(E1, p0, v, bags, steps=200, lr=100.0, log_every=50)
    np.testing.assert_allclose(threaded.p, one.p, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(threaded.loss, one.loss, rtol=1e-9)
