"""Gradient flow on p with E frozen: |p_t| grows, the loss falls, the important tokens get selected; the steps
follow the flow, and the checks of both can come out either way."""

import math

import numpy as np
import pytest

from tests.test_one_step import _class_biased_split
from toksel.calibration.families import crossing_along, growth_reach
from toksel.data.frequency import class_signed_frequency
from toksel.data.synthetic import SyntheticVocabulary, generate_assumption1
from toksel.models.fused import FusedBags
from toksel.models.initial import initialise
from toksel.theory.convergence import agreement, analyse_trajectory, bound_ratio, growth_settledness, log_growth
from toksel.theory.gradient_flow import Integration, halved, record_times, run_gradient_flow
from toksel.theory.one_step import one_gradient_step_on_embeddings

VOCAB = SyntheticVocabulary(n_positive=4, n_negative=4, n_irrelevant=24)
IMPORTANT = VOCAB.groups() != 0


def _one_step_case(eta0=40.0):
    split = generate_assumption1(VOCAB, 80, 6, np.random.default_rng(0))
    init = initialise(VOCAB.size, d=256, seed=0)
    p0, v = init.p.numpy(), init.v.numpy()
    bags = FusedBags.from_split(split)
    E1 = one_gradient_step_on_embeddings(init.E.numpy(), p0, v, bags, eta0=eta0)
    return split, bags, (p0, v), E1


def test_the_flow_selects_and_approaches_max_margin():
    split, bags, init, E1 = _one_step_case()
    trajectory = run_gradient_flow(E1, *init, bags, Integration(1e5, 1e-3))
    report = analyse_trajectory(trajectory, E1, split, IMPORTANT, tol=1e-4)
    metrics = report.final_metrics()
    assert metrics["loss_decreasing_fraction"] == 1.0 and metrics["p_norm_increasing_fraction"] == 1.0
    assert metrics["selection_fraction"] == 1.0
    assert report.max_margin.status == "optimal"
    cos = report.history["cos_max_margin_selected"]
    assert cos[-1] > 0.95 and cos[-1] > cos[len(cos) // 2] > cos[1]
    assert 0 < metrics["margin_ratio"] <= 1 + 1e-6  # no direction beats the max-margin one
    assert trajectory.steps < 1000  # flow time 1e5 in a few hundred steps


def test_records_land_on_their_flow_times_and_start_at_p0():
    _, bags, init, E1 = _one_step_case()
    trajectory = run_gradient_flow(E1, *init, bags, Integration(500.0, 1e-3))
    assert np.array_equal(trajectory.times, record_times(500.0))
    assert trajectory.times[0] == 0 and trajectory.times[-1] == 500.0 and trajectory.times[-4] == 250.0
    assert np.array_equal(trajectory.p[0], init[0])
    assert sum(trajectory.step_sizes) == pytest.approx(500.0)  # every step's eta adds up to the flow time


def test_halving_every_step_agrees_with_a_careful_run_and_not_with_a_careless_one():
    split, bags, init, E1 = _one_step_case(eta0=400.0)  # a stiffer flow: its steps must stay short

    def gaps(tolerance):
        run = run_gradient_flow(E1, *init, bags, Integration(1e4, tolerance))
        finer = halved(E1, *init, bags, run)
        assert np.array_equal(finer.times, run.times) and finer.steps == 2 * run.steps
        return agreement(run, finer, 1.0, 1.0)

    careful, careless = gaps(1e-3), gaps(0.1)
    assert careful.faithful(0.02), careful
    assert not careless.faithful(0.02), careless  # the check can fail: large steps leave the flow


def test_without_the_qp_the_direction_metrics_are_absent_not_invented():
    split, bags, init, E1 = _one_step_case()
    trajectory = run_gradient_flow(E1, *init, bags, Integration(100.0, 1e-3))
    report = analyse_trajectory(trajectory, E1, split, IMPORTANT, tol=1e-4, max_margin=False)
    assert report.max_margin.status == "not requested" and report.n_constraints == 0
    assert np.isnan(report.history["cos_max_margin_selected"]).all()
    assert np.isnan(report.final_metrics()["margin_ratio"])
    assert report.history["selection_fraction"][-1] >= 0


def test_multiclass_flow_lowers_the_cross_entropy_and_favours_the_important_tokens():
    split = _class_biased_split(num_classes=4)
    init = initialise(split.vocab_size, d=256, seed=0, num_classes=4)
    bags = FusedBags.from_split(split, num_classes=4)
    p0, V = init.p.numpy(), init.v.numpy()
    E1 = one_gradient_step_on_embeddings(init.E.numpy(), p0, V, bags, eta0=200.0)
    trajectory = run_gradient_flow(E1, p0, V, bags, Integration(4000.0, 1e-3))
    assert np.all(np.diff(trajectory.loss) <= 0) and trajectory.p_norm[-1] > 2 * trajectory.p_norm[0]
    importance = np.abs(class_signed_frequency(split, 4)).max(axis=0)
    scores = E1 @ trajectory.p[-1]
    important, least = importance >= np.quantile(importance, 0.9), importance <= np.quantile(importance, 0.1)
    assert scores[important].mean() > scores[least].mean() + 1.0, (scores[important].mean(), scores[least].mean())


def test_log_growth_tells_log_growth_from_a_bounded_norm():
    t = record_times(1e6)
    assert log_growth(t, 1 + 3 * np.log1p(t / 10)) == pytest.approx(1.0, abs=0.1)  # |p_t| ~ log t after a start
    assert log_growth(t, 10 - 9 * np.exp(-t / 1e4)) == pytest.approx(0.0, abs=1e-6)  # settled long before T
    assert log_growth(t, 10 - 9 / (1 + t / 1e3)) < 0.05  # bounded, approaching its limit like 1/t
    assert log_growth(t, 1 + 1e-3 * t) > 1.5  # still in its linear start: faster than log t
    assert log_growth(t, np.full_like(t, 3.0)) == 0.0  # never moved
    assert log_growth(t, 3 - t / 1e6) == 0.0  # a fall is no growth


def test_the_penalised_flow_is_bounded_and_fails_the_growth_check():
    _, bags, init, E1 = _one_step_case()
    free = run_gradient_flow(E1, *init, bags, Integration(1e6, 1e-3))
    bounded = run_gradient_flow(E1, *init, bags, Integration(1e6, 1e-3), penalty=1.0 / 1e6)
    assert log_growth(free.times, free.p_norm) > 0.5 > log_growth(bounded.times, bounded.p_norm)
    assert bounded.p_norm[-1] < free.p_norm[-1]


def _penalised_flows(seed, penalties, horizon=1e6):
    """(penalty lambda T, log_growth, bound ratio) of the flow on draw `seed` with each penalty lambda = penalty / T."""
    split = generate_assumption1(VOCAB, 80, 6, np.random.default_rng(seed))
    init = initialise(VOCAB.size, d=256, seed=seed)
    p0, v = init.p.numpy(), init.v.numpy()
    bags = FusedBags.from_split(split)
    E1 = one_gradient_step_on_embeddings(init.E.numpy(), p0, v, bags, eta0=40.0)
    found = []
    for penalty in penalties:
        run = run_gradient_flow(E1, p0, v, bags, Integration(horizon, 1e-3), penalty=penalty / horizon)
        found.append((penalty, log_growth(run.times, run.p_norm),
                      bound_ratio(E1, v, bags, penalty / horizon, run.p[-1])))
    return found


def test_a_bounded_flow_within_the_growth_rules_stated_reach_is_not_called_unbounded():
    # The reach as the calibration states it: the bound over |p_T| where the rule's power along the penalised
    # rungs reaches 0.8 (here one draw, so each rung's rate is 0 or 1).
    ladder = (0.25, 0.1, 0.05, 0.03, 0.003)
    measured = _penalised_flows(0, ladder)
    curve = [{"effect": penalty, "rate": float(growth >= 0.5), "low": float(growth >= 0.5),
              "high": float(growth >= 0.5)} for penalty, growth, _ in measured]
    crossing = crossing_along(ladder, curve)
    reach = growth_reach(crossing, {penalty: ratio for penalty, _, ratio in measured})["bound_ratio"]
    assert reach > 1.0 and reach < 1.2  # log-t growth is slow: a bound a few per cent beyond |p_T| reads as growth
    # Other draws, bounded by construction: those whose bound lies within the reach are not called unbounded, and
    # one bounded far beyond it is (what the rule cannot see), so the check could have come out either way.
    for seed in (1, 2):
        planted = _penalised_flows(seed, (1.0, 0.25, 0.1, 0.001))
        within = [(growth, ratio) for _, growth, ratio in planted if ratio < reach]
        beyond = [(growth, ratio) for _, growth, ratio in planted if ratio > 1.2 * reach]
        assert within and all(growth < 0.5 for growth, _ in within)
        assert beyond and all(growth >= 0.5 for growth, _ in beyond)
    # At the synthetic datasets' own horizon the loss's gradient and the penalty are tiny (1e-10, 1e-13): the bound
    # is still found, beyond |p_T| and nearer to it the larger the penalty.
    far = _penalised_flows(0, (0.25, 0.05, 0.003), horizon=1e10)
    assert all(math.isfinite(ratio) for _, _, ratio in far)
    assert far[0][2] < 1.01 < far[1][2] < far[2][2]


def test_small_passes_run_on_one_thread_and_match_the_threaded_path(monkeypatch):
    import numba

    from toksel.models import threads

    assert threads.threads_for(6_832, 100 * 1024) == 1  # the synthetic data
    assert threads.threads_for(127_957, 4_431 * 2048) == numba.config.NUMBA_NUM_THREADS  # 4-class Yelp
    _, bags, (p0, v), E1 = _one_step_case()
    before = numba.get_num_threads()
    one = run_gradient_flow(E1, p0, v, bags, Integration(1000.0, 1e-3))
    assert numba.get_num_threads() == before  # restored after the flow
    with threads.pass_threads(10**9, 10**9):  # a large problem: every thread, even here
        assert numba.get_num_threads() == numba.config.NUMBA_NUM_THREADS
    # Every thread on the same problem: the partial sums split differently, a rounding-level change only.
    monkeypatch.setattr(threads, "SMALL_ENTRIES", 0)
    threaded = run_gradient_flow(E1, p0, v, bags, Integration(1000.0, 1e-3))
    np.testing.assert_allclose(threaded.p, one.p, rtol=1e-7, atol=1e-10)
    np.testing.assert_allclose(threaded.loss, one.loss, rtol=1e-9)


def _stiff_case():
    """The synthetic case with each E_s's component along v made 31 times larger: the loss is steep along v, as on
    real data after a one-step update with a large eta0, and gradient steps must stay short."""
    _, bags, (p0, v), E1 = _one_step_case()
    return bags, (p0, v), E1 + 30 * np.outer(E1 @ v, v) / (v @ v)


def test_the_hessian_product_is_the_derivative_of_the_gradient():
    from toksel.theory.flow_field import FlowField
    from toksel.theory.stiff_flow import Hessian

    rng = np.random.default_rng(0)
    _, bags2, (p0, v), E1 = _one_step_case()
    split = _class_biased_split(num_classes=4)
    init = initialise(split.vocab_size, d=64, seed=0, num_classes=4)
    bags4 = FusedBags.from_split(split, num_classes=4)
    E4 = one_gradient_step_on_embeddings(init.E.numpy(), init.p.numpy(), init.v.numpy(), bags4, eta0=200.0)
    for E, p, V, bags in ((E1, 20 * p0, v, bags2), (E4, 5 * init.p.numpy(), init.v.numpy(), bags4)):
        field, hessian = FlowField(E, V, bags, 0.1), Hessian(E, E @ V, bags, p, 0.1)
        u = rng.standard_normal(len(p))
        step = 1e-5 * np.linalg.norm(p) / np.linalg.norm(u)
        central = (field(p + step * u)[1] - field(p - step * u)[1]) / (2 * step)
        np.testing.assert_allclose(hessian(u), central, rtol=1e-6, atol=1e-9 * np.abs(central).max())
        w = rng.standard_normal(len(p))
        assert w @ hessian(u) == pytest.approx(u @ hessian(w), rel=1e-10)  # symmetric


def test_the_implicit_method_follows_the_same_flow_as_gradient_steps():
    _, bags, init, E1 = _one_step_case(eta0=400.0)
    explicit = run_gradient_flow(E1, *init, bags, Integration(1e4, 1e-3))
    implicit = run_gradient_flow(E1, *init, bags, Integration(1e4, 1e-3, "implicit"))
    assert implicit.method == "implicit" and explicit.method == "explicit"
    assert np.array_equal(implicit.times, explicit.times) and sum(implicit.step_sizes) == pytest.approx(1e4)
    assert agreement(explicit, implicit, 1.0, 1.0).faithful(0.02)
    assert implicit.rebuilds[0] == 0 and explicit.rebuilds == () and explicit.evaluations > explicit.steps


@pytest.mark.parametrize("method", ["implicit", "implicit-krylov"])
def test_on_a_stiff_flow_the_implicit_methods_take_far_fewer_steps_and_their_halved_runs_agree(method):
    bags, init, E = _stiff_case()
    explicit = run_gradient_flow(E, *init, bags, Integration(1e4, 1e-3))
    implicit = run_gradient_flow(E, *init, bags, Integration(1e4, 1e-3, method))
    assert implicit.steps < explicit.steps / 10, (implicit.steps, explicit.steps)  # about 200 against 4,400
    assert agreement(explicit, implicit, 1.0, 1.0).faithful(0.02)
    finer = halved(E, *init, bags, implicit)
    assert finer.method == method and finer.steps == 2 * implicit.steps
    assert {2 * step for step in implicit.rebuilds} <= set(finer.rebuilds)  # W built at the same flow times
    assert agreement(implicit, finer, 1.0, 1.0).faithful(0.02)


def test_the_implicit_methods_halved_check_can_fail():
    _, bags, init, E1 = _one_step_case(eta0=400.0)
    careless = run_gradient_flow(E1, *init, bags, Integration(1e4, 0.3, "implicit"))
    assert not agreement(careless, halved(E1, *init, bags, careless), 1.0, 1.0).faithful(0.02)


def test_an_unknown_method_is_refused():
    from toksel.runtime.errors import ToksError

    _, bags, init, E1 = _one_step_case()
    with pytest.raises(ToksError, match="unknown method"):
        run_gradient_flow(E1, *init, bags, Integration(10.0, 1e-3, "implicit-euler"))


def test_settledness_tells_a_settled_statistic_from_a_transient():
    t = record_times(1e6)
    log_t = growth_settledness(t, 1 + 3 * np.log1p(t / 10))
    assert log_t.settled and log_t.last == pytest.approx(log_t.previous, abs=0.02)
    assert log_t.last == log_growth(t, 1 + 3 * np.log1p(t / 10))  # the same statistic, read on two doublings
    converged = growth_settledness(t, 10 - 9 / (1 + t / 1e3))  # a finite limit, approached like 1/t
    assert converged.settled and abs(converged.last) < 0.05
    assert growth_settledness(t, 10 - 9 * np.exp(-t / 1e4)).settled
    accelerating = growth_settledness(t, 1 + 1e-3 * t)  # still in its linear start
    assert not accelerating.settled and accelerating.last > accelerating.previous + 0.1
    power = growth_settledness(t, (1 + t) ** 0.3)  # faster than log t for ever: its reading keeps rising
    assert not power.settled
    late = growth_settledness(t, 1 + 3 * np.log1p(t / 3e5))  # starts to move in the last two doublings
    assert not late.settled
    assert growth_settledness(t, np.full_like(t, 3.0)).settled  # never moved: no growth, and that is final


def test_the_implicit_penalised_flow_is_bounded_as_the_explicit_one_is():
    _, bags, init, E1 = _one_step_case()
    explicit = run_gradient_flow(E1, *init, bags, Integration(1e6, 1e-3), penalty=1e-6)
    implicit = run_gradient_flow(E1, *init, bags, Integration(1e6, 1e-3, "implicit"), penalty=1e-6)
    assert log_growth(implicit.times, implicit.p_norm) < 0.5
    assert implicit.p_norm[-1] == pytest.approx(explicit.p_norm[-1], rel=0.02)


def test_a_flow_tells_its_observer_every_step_it_keeps():
    _, bags, init, E1 = _one_step_case()
    seen: list[tuple[float, float, int]] = []
    trajectory = run_gradient_flow(E1, *init, bags, Integration(500.0, 1e-3), observe=lambda *told: seen.append(told))
    assert [steps for _, _, steps in seen] == list(range(1, trajectory.steps + 1))
    assert np.allclose(np.cumsum([step for _, step, _ in seen]), [t for t, _, _ in seen])
    assert seen[-1][0] == 500.0


def test_a_flow_the_step_cap_stops_is_kept_as_far_as_it_went_or_refused(monkeypatch):
    from toksel.theory import gradient_flow

    _, bags, init, E1 = _one_step_case()
    whole = run_gradient_flow(E1, *init, bags, Integration(1e5, 1e-3))
    monkeypatch.setattr(gradient_flow, "MAX_STEPS", whole.steps // 2)
    with pytest.raises(gradient_flow.StepCapReached, match="steps reached flow time"):
        run_gradient_flow(E1, *init, bags, Integration(1e5, 1e-3))
    stopped = run_gradient_flow(E1, *init, bags, Integration(1e5, 1e-3, stop_at_cap=True))
    assert len(whole.times) > len(stopped.times) > 1 and stopped.times[-1] < 1e5  # cut short, past its start
    assert np.array_equal(stopped.times, whole.times[: len(stopped.times)])
    assert np.allclose(stopped.p, whole.p[: len(stopped.times)])  # the same flow, cut short
    finer = halved(E1, *init, bags, stopped)
    assert np.array_equal(finer.times, stopped.times)  # the twin replays as far as the run went
