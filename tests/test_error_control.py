"""Each verdict's p-value, the equivalence test of a size, the error control across the report and which rows
count, fed known values."""

import dataclasses

import numpy as np
import pytest
from scipy import stats

from tests.helpers import ROOT
from toksel.claims.catalogue import BY_ID, Measurement, assess, measure
from toksel.claims.multiplicity import benjamini_yekutieli, holm
from toksel.claims.verdict import judge_size, p_values, seed_interval
from toksel.runtime.config import load_config
from toksel.summaries.counting import count, reason_not_counted


@pytest.fixture(scope="module")
def config():
    return load_config([], ROOT / "params.yaml")


def test_a_presence_p_value_is_the_one_sided_t_test_and_holds_exactly_where_the_interval_does():
    values = [0.61, 0.55, 0.7, 0.58]
    found = p_values(seed_interval(values), ">=", 0.5)
    assert found.holds == pytest.approx(stats.ttest_1samp(values, 0.5, alternative="greater").pvalue)
    assert found.fails == pytest.approx(stats.ttest_1samp(values, 0.5, alternative="less").pvalue)
    interval = seed_interval(values)
    for threshold in np.linspace(0.4, 0.7, 31):  # holds at 2.5 % one-sided exactly where the 95 % interval is above
        assert (p_values(interval, ">=", threshold).holds <= 0.025) == (interval.low >= threshold)
    below = p_values(seed_interval(values), "<=", 0.5)
    assert below.holds == pytest.approx(found.fails) and below.fails == pytest.approx(found.holds)
    assert p_values(seed_interval([1.0, 1.0, 1.0]), ">=", 1.0).holds == 0.0  # agreeing seeds on the threshold hold
    assert p_values(seed_interval([0.7]), ">=", 0.5) is None  # one seed: nothing to test with


def test_a_size_is_an_equivalence_test_its_90_percent_interval_inside_the_band():
    band = (0.115, 0.46)
    near = [0.14, 0.16, 0.18]  # the 95 % interval crosses 0.115, the 90 % one does not
    wide, narrow = seed_interval(near), seed_interval(near, 0.90)
    assert wide.low < band[0] <= narrow.low
    assert judge_size(near, 0.05, "within", band=band) == "holds"
    tost = p_values(wide, "within", band=band).holds
    lower = stats.ttest_1samp(near, band[0], alternative="greater").pvalue
    upper = stats.ttest_1samp(near, band[1], alternative="less").pvalue
    assert tost == pytest.approx(max(lower, upper)) and tost <= 0.05
    assert judge_size([0.02, 0.03, 0.025], 0.05, "within", band=band) == "fails"
    assert judge_size([0.05, 0.2, 0.12], 0.05, "within", band=band) == "inconclusive"
    assert judge_size([0.004, 0.002, 0.003], 0.05, "<=", 0.05) == "holds"  # a size read as a bound


def test_holm_and_benjamini_yekutieli_adjust_as_their_definitions_say():
    p = [0.01, 0.04, 0.03, 0.005]
    # Holm: sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1, then running maxima.
    assert holm(p) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    harmonic = 1 + 1 / 2 + 1 / 3 + 1 / 4  # BY: BH's m p / k times c(m), running minima from the top
    assert benjamini_yekutieli(p) == pytest.approx(np.array([0.02, 0.04, 0.04, 0.02]) * harmonic)
    assert len(holm([])) == 0


def _accuracy(config, gap: float, spread: float, bound: int = 0) -> "Assessment":  # noqa: F821
    claim = BY_ID["accuracy_gap"]
    runs = {seed: {"trained": {"test_accuracy": 0.8 + gap + spread * (seed - 1), "control_test_accuracy": 0.5,
                               "budget_bound": float(seed < bound)},
                   "untrained": {"test_accuracy": 0.8, "control_test_accuracy": 0.5 + 0.01 * seed}}
            for seed in range(3)}
    return assess(claim, measure(claim, "imdb", runs), config)


CALIBRATED = [{"family": "accuracy_gap", "data": "imdb", "calibrated": True, "reason": ""}]


def test_a_row_counts_only_where_its_rule_is_calibrated_its_control_behaves_and_no_fit_hit_its_budget(config):
    item = _accuracy(config, 0.05, 0.005)
    assert item.verdict == "holds" and item.control_verdict == "inconclusive" and item.control_behaved
    assert reason_not_counted(item, "imdb", CALIBRATED) == ""
    assert "not calibrated on yelp" in reason_not_counted(item, "yelp", CALIBRATED)
    uncalibrated = [{**CALIBRATED[0], "calibrated": False, "reason": "power 0.31 < 0.8"}]
    assert "uncalibrated on imdb: power 0.31" in reason_not_counted(item, "imdb", uncalibrated)
    bound = _accuracy(config, 0.05, 0.005, bound=2)
    assert bound.measurement.budget_bound == [1, 1, 0]
    assert reason_not_counted(bound, "imdb", CALIBRATED).startswith("it rests on 2 fits the epoch budget stopped")
    # A control that straddles must fail where the threshold is not the null's own value.
    linear = BY_ID["lemma41_linear"]
    runs = {seed: {"step": {"pearson_r": 0.999, "control_pearson_r": 0.99 + 0.01 * (seed - 1)}} for seed in range(3)}
    straddling = assess(linear, measure(linear, "imdb", runs), config)
    assert straddling.control_verdict == "inconclusive" and straddling.control_behaved is None
    assert "its control is inconclusive" in reason_not_counted(straddling, "imdb",
                                                               [{**CALIBRATED[0], "family": "one_step"}])
    # A claim a proof implies is a consistency check: judged and shown, never counted as a finding.
    implied = dataclasses.replace(item, claim=dataclasses.replace(item.claim, kind="consistency"))
    assert reason_not_counted(implied, "imdb", CALIBRATED).startswith("a consistency check: a proof implies it")
    assert BY_ID["pair_one_layer_capped"].kind == "consistency"


def test_the_error_control_turns_a_marginal_hold_inconclusive_among_many_claims(config):
    strong, marginal = _accuracy(config, 0.2, 0.005), _accuracy(config, 0.03, 0.009)
    assert strong.verdict == marginal.verdict == "holds"
    alone = count([("imdb", marginal)], CALIBRATED, 0.05)[0]
    assert alone.counted and alone.controlled == "holds"  # one claim: Holm's is its own p-value
    many = count([("imdb", marginal)] * 31, CALIBRATED, 0.05)  # 31 such holds: chance makes some of them
    assert all(item.adjusted == pytest.approx(31 * marginal.p.holds) and item.controlled == "inconclusive"
               for item in many)
    among_strong = count([("imdb", marginal)] + [("imdb", strong)] * 30, CALIBRATED, 0.05)  # the step-down's last
    assert [item.controlled for item in among_strong] == ["holds"] * 31
    failing = _accuracy(config, -0.1, 0.005)
    assert count([("imdb", failing)], CALIBRATED, 0.05)[0].controlled == "fails"


def test_a_description_or_an_exploratory_row_is_not_counted(config):
    description = BY_ID["mlp_v_negative_side"]
    runs = {seed: {"mlp_residual": {"v_rise_negative_corrected": value}} for seed, value in enumerate((0.8, 0.7))}
    item = assess(description, measure(description, "yelp", runs), config)
    assert reason_not_counted(item, "yelp", []) == "described"
    missing = dataclasses.replace(item, measurement=None)
    assert reason_not_counted(missing, "yelp", []) == "not run"
    assert Measurement.from_record(item.measurement.as_record()) == item.measurement


def test_a_flow_is_transient_only_on_the_seeds_it_ran_and_still_moved(config):
    """A flow on real data runs fewer seeds than the theory: a seed without its run is neither settled nor moving."""
    claim = BY_ID["lemma42_growth"]

    def flows(*settled: int | None) -> dict:
        return {seed: {} if flag is None else {"flow": {"log_growth": 1.0 + 0.01 * seed, "log_growth_settled": flag,
                                                        "control_log_growth": 0.05 + 0.01 * seed}}
                for seed, flag in enumerate(settled)}

    settled = measure(claim, "synthetic", flows(1, 1, 1, None, None))
    assert settled.settled == [True, True, True, None, None]
    assert assess(claim, settled, config).verdict != "transient"
    moving = measure(claim, "synthetic", flows(1, 0, 1, None, None))
    assert assess(claim, moving, config).verdict == "transient"
