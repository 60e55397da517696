"""Which margin an optimiser on p picks: the statistics the claims read, the discrete optimisers, the known answers
of the two families, and the margins stage on tiny data."""

import json
import math

import numpy as np
import pytest

from pipelines import margins, one_step, prepare
from tests.test_mirror_flow import _problem
from toksel.calibration.margins import MarginRegime, margin_statistics
from toksel.params import SyntheticConfig
from toksel.theory.flow_field import FlowField
from toksel.theory.gradient_flow import record_times
from toksel.theory.margins import (
    L2,
    Path,
    adam,
    convergence_metrics,
    cosine_limit,
    flow_name,
    hard_margin_directions,
    margin_metrics,
    preference,
    sign_descent,
    unselected_share,
)
from toksel.theory.max_margin import cosine


def test_preference_is_the_worst_optimisers_lead_of_its_own_norm_over_the_others():
    cosines = {("a", 2.0): 0.99, ("a", 4.0): 0.90, ("b", 2.0): 0.95, ("b", 4.0): 0.97}
    assert preference(cosines, {"a": 2.0, "b": 4.0}) == pytest.approx(0.02)  # b's 0.97 - 0.95, a's lead is 0.09
    cosines["b", 2.0] = 0.98  # b now ends nearer the other norm's solution: the claim's statistic turns negative
    assert preference(cosines, {"a": 2.0, "b": 4.0}) == pytest.approx(-0.01)


def test_the_metrics_read_each_end_against_each_solution_and_their_controls_read_gradient_flow():
    axes = np.eye(3)
    solutions = {2.0: axes[0], 4.0: axes[1]}
    ends = {"gradient": axes[0] + 0.1 * axes[1], "mirror_l4": axes[1] + 0.2 * axes[0]}
    found = margin_metrics(ends, {"gradient": 2.0, "mirror_l4": 4.0}, solutions)
    assert found["cos_mirror_l4_l4"] == pytest.approx(1 / math.hypot(1, 0.2))
    assert found["own_preference"] == pytest.approx((1 - 0.2) / math.hypot(1, 0.2))  # the mirror flow's lead
    assert found["own_cosine"] == pytest.approx(1 / math.hypot(1, 0.2))
    assert found["control_own_preference"] < 0  # gradient flow's end in the l_4 optimiser's place
    assert found["control_own_cosine"] == pytest.approx(0.2 / math.hypot(1, 0.2))
    assert found["solutions_cosine"] == pytest.approx(0.0)


def test_sign_descent_ends_nearest_the_l_inf_margin_and_adam_moves_off_the_l_2_one():
    """On the tiny Assumption-1 problem: steepest descent in l_inf ends at the l_inf hard-margin direction (the
    linear-model result, seen here for attention); the solver's l_inf direction meets every constraint at 1."""
    E1, p0, v, bags, differences, pairs = _problem()
    solutions = hard_margin_directions(E1, pairs, (L2, 4.0, math.inf))
    assert np.isclose(np.linalg.norm(solutions[math.inf]), 1.0)
    field = FlowField(E1, v, bags, 0.0)
    signed = sign_descent(field, p0, 1000, 0.05)  # 0.987 of the l_inf direction; 0.95 of the l_4 one
    nearest = {q: cosine(signed, solution) for q, solution in solutions.items()}
    assert max(nearest, key=nearest.get) == math.inf and nearest[math.inf] > 0.97, nearest
    moved = adam(field, p0, 1000, 0.05)
    assert cosine(moved, solutions[L2]) < cosine(signed, solutions[math.inf]), "Adam is no l_2 optimiser here"
    with pytest.raises(Exception, match="hard-margin problem is"):  # an infeasible selection: said, not a crash
        hard_margin_directions(E1, np.stack([pairs[0], pairs[0][::-1]]), (4.0,))


SYNTHETIC = SyntheticConfig(mode="assumption1", n_positive=4, n_negative=4, n_irrelevant=16, seq_len=6, n_train=160,
                            n_test=40, delta=0.8, pair_share=0.0, label_noise=0.0)


def test_the_known_answers_run_from_a_blind_optimiser_to_the_mirror_flows():
    """Planted 0 puts gradient flow's end in every optimiser's place: no optimiser leads with its own norm, and the
    l_q optimisers sit far from their solutions; planted 1 is the flows themselves, which converge to their own."""
    regime = MarginRegime(SYNTHETIC, 64, 60.0, (1.5,), 1e8, 1e-3, 2, 7)  # l_4's flow: the slow one
    blind, flows = margin_statistics(regime, 0.0, 0), margin_statistics(regime, 1.0, 0)
    for seed in range(2):
        assert blind[seed]["own_preference"] < 0 < flows[seed]["own_preference"]
        assert blind[seed]["own_cosine"] < 0.99 < flows[seed]["own_cosine"] + 0.02  # t = 1e8: 0.976 for l_1.5
        assert flows[seed]["cos_gradient_l2"] == blind[seed]["cos_gradient_l2"]  # the same draw at every rung
    assert margin_statistics(regime, 1.0, 1)[0]["cos_gradient_l2"] != flows[0]["cos_gradient_l2"]  # a fresh draw


TINY = ["dataset=synthetic", "base.seeds=[0,1]", "data.synthetic.n_positive=4", "data.synthetic.n_negative=4",
        "data.synthetic.n_irrelevant=16", "data.synthetic.seq_len=6", "data.synthetic.n_train=160",
        "data.synthetic.n_test=40", "model.d=64", "one_step.eta0=60", "margins.horizon=1e8",
        "margins.discrete_steps=100", "margins.potentials=[1.5]"]


def test_the_margins_stage_judges_its_two_claims_on_tiny_data(project):
    assert prepare.main(TINY) == 0 and one_step.main(TINY) == 0 and margins.main(TINY) == 0
    measured = {item["claim"]: item for item in json.loads((project / "results/margins/claims.json").read_text())}
    assert set(measured) == {"margin_own_norm", "margin_converged"}
    for item in measured.values():
        assert item["seeds"] == [0, 1] and None not in item["values"] and None not in item["control"]
    assert all(value > 0 > control for value, control in zip(measured["margin_own_norm"]["values"],
                                                              measured["margin_own_norm"]["control"], strict=True))
    seed = json.loads((project / "results/margins/seeds/seed0/metrics.json").read_text())
    assert seed["flows_faithful"] == 1.0 and seed["halved_angle_max"] < 0.02
    assert {f"cos_{name}_linf" for name in (flow_name(L2), "mirror_l1.5", "sign", "adam")} <= set(seed)
    assert (project / "results/margins/margins.png").stat().st_size > 10_000
    assert "| sign |" in (project / "results/margins/summary.md").read_text()


def test_a_draw_whose_flow_does_not_select_the_important_tokens_is_not_computed_and_the_stage_ends_well(project):
    """eta0 far below its window (0.5 here, against 60 above): gradient flow's end leaves important tokens
    unselected, the mirror flows are not followed, and the claims say `not computed` instead of failing the stage."""
    outside = [*TINY, "one_step.eta0=0.5"]
    assert prepare.main(outside) == 0 and one_step.main(outside) == 0 and margins.main(outside) == 0
    seed = json.loads((project / "results/margins/seeds/seed0/metrics.json").read_text())
    assert seed["followed"] == 0.0 and "own_preference" not in seed
    measured = json.loads((project / "results/margins/claims.json").read_text())
    assert all(item["values"] == [None, None] for item in measured)
    summary = (project / "results/margins/summary.md").read_text()
    assert "Not computed on seed(s) 0, 1" in summary and "| not computed |" in summary
    assert (project / "results/margins/margins.png").stat().st_size > 10_000


def test_a_flow_that_reaches_the_step_cap_is_not_computed_with_the_key_that_sets_its_horizon(project, monkeypatch,
                                                                                              capsys):
    from toksel.theory import gradient_flow

    assert prepare.main(TINY) == 0 and one_step.main(TINY) == 0
    monkeypatch.setattr(gradient_flow, "MAX_STEPS", 5)  # the flows to 1e8 take a few hundred steps
    assert margins.main(TINY) == 0
    assert "5 steps reached flow time" in capsys.readouterr().err
    assert json.loads((project / "results/margins/seeds/seed1/metrics.json").read_text())["followed"] == 0.0


def test_unselected_share_counts_the_pairs_p_does_not_rank_apart():
    E = np.array([[1.0, 0.0], [0.0, 1.0], [2.0, 0.0]])
    pairs = np.array([[0, 1], [0, 2]])  # token 0 important against tokens 1 and 2
    assert unselected_share(E, np.array([-1.0, -2.0]), pairs) == 0.0
    assert unselected_share(E, np.array([1.0, 0.0]), pairs) == 0.5  # token 2 outranks it
    assert unselected_share(E, np.array([0.0, 1.0]), pairs) == 1.0  # a tie (with token 2) is no selection


def test_the_cosines_trend_tells_a_flow_converging_slowly_from_one_heading_elsewhere():
    """Directions planted along the records of a flow to 1e16: one closing in on s like 1 / log t (still at cos
    0.99 at the horizon) reads a limit of about 1, above the threshold 0.99; one heading to s2 (cos 0.93 with s) reads
    about 0.93 though it too is still rising; a path that turns late is not settled."""
    times = record_times(1e16)[1:]
    s, across = np.eye(3)[0], np.eye(3)[1]
    s2 = 0.93 * s + math.sqrt(1 - 0.93**2) * across

    def path(target):  # off target by an angle sqrt(0.8 / log t), towards a third axis: 1 - cos about 0.4 / log t
        angle = np.sqrt(0.8 / np.log(times))[:, None]
        return Path.of(times, np.cos(angle) * target + np.sin(angle) * np.eye(3)[2])

    assert cosine(path(s).directions[-1], s) < 0.99  # the end itself: short of the threshold, as slow flows are
    assert cosine_limit(path(s), s) == pytest.approx(1.0, abs=2e-3)
    assert cosine_limit(path(s2), s) == pytest.approx(0.93, abs=5e-3)
    assert cosine_limit(path(s2), s2) > 0.99
    assert cosine_limit(path(s), s, 0) == pytest.approx(cosine_limit(path(s), s, 1), abs=0.01)
    late_turn = Path.of(times, np.where((times < 1e13)[:, None], s2, s) + 0.01 * np.eye(3)[2])
    assert abs(cosine_limit(late_turn, s, 0) - cosine_limit(late_turn, s, 1)) > 0.01
    metrics = convergence_metrics({"gradient": path(s), "mirror_l1.5": late_turn}, {"gradient": 2.0,
                                  "mirror_l1.5": 1.5}, {2.0: s, 1.5: s})
    assert metrics["own_cosine_limit_settled"] == 0.0 and metrics["own_cosine_limit_moved"] > 0.01
