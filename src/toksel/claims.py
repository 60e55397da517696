"""Every claim the report judges, once: where it comes from, the paper's value, what we measure, how it is
compared, which parameter holds its threshold, and its negative control.

A claim is measured once per seed from the metrics of that seed's runs (`Statistic`). Its control is the same
statistic on a run in which the claim must not hold: by convention the run's own `control_<metric>` (the
same training with the labels shuffled, the same step skipped, ...), or other runs where a claim names them.
The stages that hold the runs write `Measurement`s (claims.json); `assess` turns one into an interval and a
verdict for the claim and for its control, with the threshold read from the config. Nothing else decides a
verdict.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import reduce
from typing import Any

from toksel.verdict import Interval, given_interval, judge, seed_interval

CONTROL_PREFIX = "control_"  # a run's control value of metric m is its metric control_<m>


@dataclass(frozen=True)
class Statistic:
    """How one seed's value of a claim is read: `metric` of each of `runs`, combined."""

    # The seed's runs it reads, by name: "step" and "flow" (the one_step and gradient_flow stages), an embedding
    # arm ("trained", "untrained", "one_step"), an ablation variant ("two_layer", ...).
    runs: tuple[str, ...]
    metric: str  # the key in each run's metrics
    combine: str = "value"  # value (one run) | difference (first - second) | ratio (first / second)

    def of(self, runs: Mapping[str, Mapping[str, Any]], metric: str | None = None) -> float | None:
        """The value on one seed's runs; None if a run or its metric is missing or not finite."""
        values = [_number(runs.get(name, {}).get(metric or self.metric)) for name in self.runs]
        if any(value is None for value in values):
            return None
        if self.combine == "value":
            return values[0]
        if self.combine == "difference":
            return values[0] - values[1]
        return None if values[1] == 0 else _number(values[0] / values[1])


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


@dataclass(frozen=True)
class Claim:
    id: str  # stable name, also the metric names' stem in the report's metrics
    source: str  # where it comes from: "Lemma 4.1", "Rebuttal", "Figure 3", "Ours", ...
    statement: str  # the claim in words
    scope: str  # which data it is judged on: see SCOPES
    paper: str  # the paper's value, in words
    statistic: Statistic
    measures: str  # what the statistic is, in words
    comparison: str  # ">=" or "<=": the side of the threshold on which the claim holds
    threshold: str  # dotted config key of the threshold
    control: str  # the negative control, in words
    control_statistic: Statistic | None = None  # None: the same statistic on control_<metric>
    producer: str = ""  # the stage that writes its measurements

    def value(self, runs: Mapping[str, Mapping[str, Any]]) -> float | None:
        return self.statistic.of(runs)

    def control_value(self, runs: Mapping[str, Mapping[str, Any]]) -> float | None:
        if self.control_statistic is not None:
            return self.control_statistic.of(runs)
        return self.statistic.of(runs, CONTROL_PREFIX + self.statistic.metric)


SCOPES = {
    "every": "every dataset",
    "assumption1": "the Assumption-1 synthetic datasets",
    "binary_real": "the two-class text datasets of train.datasets",
    "multiclass": "ablation.multiclass",
    "ablation": "ablation.datasets",
    "phase": "phase.dataset (the eta0 x d grid)",
}
SPEARMAN_REASON = "per-token rank correlation on held-out token statistics"
SHUFFLED = "the same training with the labels shuffled (train and test)"
NULL_STEP = "the same step on labels that carry no signal (shuffled), regressed on the true alpha_s"
NULL_FLOW = "the same flow with E frozen after a step on labels that carry no signal (shuffled)"


def u_shaped(claim_id: str, source: str, claim: str, scope: str, paper: str, run: str, score: str,
             producer: str) -> Claim:
    """A score rises away from posterior difference 0 on both sides (a U or V), judged on the side that rises
    less; its control is the same training on shuffled labels."""
    return Claim(claim_id, source, claim, scope, paper, Statistic((run,), "u_rise"),
                 f"the smaller, over the two sides of 0, of the Spearman of {score} with |posterior difference| "
                 f"({SPEARMAN_REASON})", ">=", "report.min_token_spearman", SHUFFLED, producer=producer)


def tighter_curves(vector: str, paper: str) -> Claim:
    """The rebuttal's spread comparison for E_s^T v or E_s^T p: one step then frozen gives tighter binned curves
    than full training, measured by the scale-free spread of each."""
    return Claim(f"spread_ratio_{vector}", "Rebuttal",
                 f"one step then frozen gives tighter E_s^T {vector} curves than full training", "binary_real", paper,
                 Statistic(("trained", "one_step"), f"bin_spread_{vector}", "ratio"),
                 f"mean per-bin std over the std of all the tokens' E_s^T {vector} (free of the scale of {vector}), "
                 "full training over one step then frozen", ">=", "report.min_spread_ratio", SHUFFLED,
                 producer="compare")


def rises_with_alpha(claim_id: str, source: str, claim: str, scope: str, paper: str, run: str,
                     producer: str) -> Claim:
    """E_s^T v rises with the token's signed frequency alpha_s; its control is the same training on shuffled
    labels."""
    return Claim(claim_id, source, claim, scope, paper, Statistic((run,), "spearman_v_alpha"),
                 f"Spearman of E_s^T v with alpha_s ({SPEARMAN_REASON})", ">=", "report.min_token_spearman",
                 SHUFFLED, producer=producer)

CLAIMS: tuple[Claim, ...] = (
    # The theory, on every dataset: the one step and gradient flow on p.
    Claim("lemma41_slope", "Lemma 4.1", "one step on E moves E_s^T v by eta0 alpha_s / 2", "every",
          "slope eta0/2 (eta0 for K classes)", Statistic(("step",), "slope_rel_error"),
          "|slope - theory| / theory of the update along v on alpha_s (worst class)", "<=",
          "evaluate.max_slope_rel_error", NULL_STEP, producer="evaluate"),
    Claim("lemma41_linear", "Lemma 4.1", "the update along v is linear in alpha_s", "every", "linear in alpha_s",
          Statistic(("step",), "pearson_r"), "Pearson r of the update along v with alpha_s (worst class)", ">=",
          "evaluate.min_pearson_r", NULL_STEP, producer="evaluate"),
    Claim("lemma42_growth", "Lemma 4.2", "|p_t| grows without bound under gradient flow on p", "every",
          "|p_t| -> infinity", Statistic(("flow",), "log_growth"),
          "the slope of |p_t| against log t over the second half of the flow, t in [T/2, T], over its average slope "
          "since the flow started to move (about 1 for log t growth, 0 for a bounded |p_t| that has settled)", ">=",
          "evaluate.min_log_growth", "the same flow over the same horizon on the loss plus a weak L2 penalty on p "
          "(gradient_flow.control_penalty / T), whose |p_t| is bounded", producer="evaluate"),
    Claim("lemma44_selection", "Lemma 4.4", "p_t selects the important token of every sequence", "assumption1",
          "every sequence", Statistic(("flow",), "selection_fraction"),
          "fraction of sequences whose important tokens are all selected", ">=",
          "evaluate.min_selection_fraction", NULL_FLOW, producer="evaluate"),
    Claim("theorem43_direction", "Theorem 4.3", "p_t / |p_t| converges to the max-margin direction that selects "
          "the important tokens", "assumption1", "cos -> 1",
          Statistic(("flow",), "cos_max_margin_important"),
          "cos(p_T, p_mm), p_mm the max-margin direction separating each sequence's important tokens from the rest",
          ">=", "evaluate.min_cos_max_margin", NULL_FLOW, producer="evaluate"),
    # Full training of the one-layer model on real data, the three embedding arms under one protocol.
    Claim("accuracy_gap", "Rebuttal", "trained embeddings beat random frozen ones", "binary_real",
          "test accuracy about 0.95 against 0.72 (gap 0.23)",
          Statistic(("trained", "untrained"), "test_accuracy", "difference"),
          "test accuracy, trained minus untrained (E frozen at E0), each arm at its tuned learning rate", ">=",
          "report.min_accuracy_gap", SHUFFLED, producer="compare"),
    tighter_curves("v", "per-bin std about 8 times smaller"),
    tighter_curves("p", "per-bin std about 6 times smaller"),
    rises_with_alpha("v_increasing", "Figure 3", "E_s^T v increases with the token's posterior difference",
                     "binary_real", "monotone increasing", "trained", "compare"),
    u_shaped("p_u_shape", "Figures 1, 3", "E_s^T p is U-shaped: it rises away from posterior difference 0 on both "
             "sides", "binary_real", "U-shaped, lowest near 0", "trained", "E_s^T p", "compare"),
    Claim("multiclass_v_increasing", "Rebuttal, 4 classes", "E_s^T v_k increases with the class-k signed "
          "frequency, for every class", "multiclass", "increasing, with a jump in sign at 0",
          Statistic(("trained",), "spearman_v_alpha"),
          f"the smallest over the classes of the Spearman of E_s^T v_k with alpha_s^(k) ({SPEARMAN_REASON})", ">=",
          "report.min_token_spearman", SHUFFLED, producer="compare"),
    # The rebuttal's architecture ablations (models with positions).
    u_shaped("two_layer_u_shape", "Figure 1", "the two-layer model's <cls> score E_s^T p is U-shaped", "ablation",
             "U-shaped, lowest near 0", "two_layer", "E_s^T p", "ablation_report"),
    u_shaped("kq_p_u_shape", "Rebuttal table, 2 layers + W_KQ", "p^T W_KQ^(2) E_s is U-shaped", "ablation",
             "U-shaped, lowest (-3.92) at x = 0.01", "two_layer_kq", "p^T W_KQ^(2) E_s", "ablation_report"),
    rises_with_alpha("kq_v_increasing", "Rebuttal table, 2 layers + W_KQ",
                     "E_s^T v increases with the posterior difference", "ablation", "increasing, as in Figure 1",
                     "two_layer_kq", "ablation_report"),
    u_shaped("mlp_p_v_shape", "Rebuttal table, MLP head", "E_s^T p is V-shaped", "ablation",
             "V-shaped, lowest (0.59) at x = 0.01", "mlp", "E_s^T p", "ablation_report"),
    Claim("mlp_v_positive_side", "Rebuttal table, MLP head", "E_s^T v increases on the positive side (residual "
          "MLP, whose E_s^T v reads E_s)", "ablation", "increasing for x > 0",
          Statistic(("mlp_residual",), "v_rise_positive"),
          f"Spearman of E_s^T v with the posterior difference over the tokens with x > 0 ({SPEARMAN_REASON})", ">=",
          "report.min_token_spearman", SHUFFLED,
          producer="ablation_report"),
    Claim("mlp_v_negative_side", "Rebuttal table, MLP head", "E_s^T v is not monotone on the negative side "
          "(residual MLP)", "ablation", "not monotone for x < 0",
          Statistic(("mlp_residual",), "v_rise_negative"),
          f"Spearman of E_s^T v with the posterior difference over the tokens with x < 0 ({SPEARMAN_REASON}); "
          "not monotone: below the rise the other claims ask for", "<=", "report.min_token_spearman",
          "a model whose E_s^T v rises on both sides: the one-layer model (train, trained embeddings)",
          control_statistic=Statistic(("one_layer_trained",), "v_rise_negative"), producer="ablation_report"),
    # Beyond the paper: the eta0 x d phase diagram (one seed; intervals from the grid and the fit).
    Claim("phase_lower_edge", "Ours", "the lower edge of the eta0 window of selection is eta0 |alpha| / 2 = "
          "1/sqrt(d)", "phase", "the scale argument (eta0 'large enough')", Statistic(("phase",), "low_edge_factor"),
          "the largest factor, over d, between a measured edge and the argument's (interval: the grid's brackets)",
          "<=", "report.max_edge_factor", "the same edges against the neighbouring law eta0 |alpha| / 2 = 1/d",
          producer="phase_diagram"),
    Claim("phase_upper_edge", "Ours", "the upper edge of the eta0 window of selection is eta0 |alpha| / 2 = 1",
          "phase", "the scale argument", Statistic(("phase",), "high_edge_factor"),
          "the largest factor, over d, between a measured edge and the argument's (interval: the grid's brackets)",
          "<=", "report.max_edge_factor", "the same edges against the neighbouring law eta0 |alpha| / 2 = "
          "1/sqrt(d)", producer="phase_diagram"),
    Claim("phase_error_slope", "Ours", "the one-step error (update orthogonal to v) falls like 1/sqrt(d)", "phase",
          "log-log slope -1/2", Statistic(("phase",), "one_step_error_slope_deviation"),
          "|log-log slope + 1/2| (interval: the fit's 95 % confidence interval of the slope)", "<=",
          "report.max_slope_deviation", "the same fit to the update along v, which does not fall with d",
          producer="phase_diagram"),
)
BY_ID = {claim.id: claim for claim in CLAIMS}


@dataclass(frozen=True)
class Measurement:
    """A claim measured on one dataset: its value and its control's, per seed (or with a given interval)."""

    claim: str  # Claim.id
    data: str  # the dataset (and run) it is measured on
    seeds: list[int]
    values: list[float | None]
    control: list[float | None]
    detail: str = ""  # what was measured, in a few words and numbers
    # An interval the method gives itself instead of the seeds' (estimate, low, high), and the method's name.
    bounds: tuple[float | None, float | None, float | None] | None = None
    control_bounds: tuple[float | None, float | None, float | None] | None = None
    method: str = ""
    protocol: str = ""  # "": the claim's own protocol; else the variant it was measured under (sensitivity)

    def as_record(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Measurement:
        fields = dict(record)
        for key in ("bounds", "control_bounds"):
            fields[key] = None if fields.get(key) is None else tuple(fields[key])
        return cls(**fields)


def measure(claim: Claim, data: str, runs_by_seed: Mapping[int, Mapping[str, Mapping[str, Any]]],
            detail: str = "", protocol: str = "") -> Measurement:
    """The claim's value and its control's on each seed's runs (seed -> run name -> metrics)."""
    seeds = sorted(runs_by_seed)
    return Measurement(claim.id, data, seeds, [claim.value(runs_by_seed[seed]) for seed in seeds],
                       [claim.control_value(runs_by_seed[seed]) for seed in seeds], detail, protocol=protocol)


def claim_metrics(assessed: Sequence[Assessment]) -> dict[str, float | None]:
    """The metrics a stage records of its assessed claims: per claim (suffixed by the protocol when not its own)
    the mean, the interval's ends, 1 if it holds, and the control's mean; then how many hold of how many."""
    def finite(value: float) -> float | None:
        return value if math.isfinite(value) else None

    metrics: dict[str, float | None] = {}
    for item in assessed:
        protocol = item.measurement.protocol.replace(" ", "_") if item.measurement else ""
        name = item.claim.id + (f"_{protocol}" if protocol else "")
        interval, control = item.interval, item.control_interval
        metrics |= {name: finite(interval.mean), f"{name}_low": finite(interval.low),
                    f"{name}_high": finite(interval.high), f"{name}_holds": float(item.verdict == "holds"),
                    f"control_{name}": finite(control.mean)}
    main = [item for item in assessed if item.measurement is not None and not item.measurement.protocol]
    return metrics | {"claims_held": float(sum(item.verdict == "holds" for item in main)),
                      "claims_total": float(len(main))}


def in_scope(claim: Claim, dataset: str, data: Any, config: Any) -> bool:
    """Whether `claim` is judged on `dataset`, whose data section is `data`; config: the stage's (it names the
    datasets of the training runs, the ablations and the phase diagram)."""
    real = data.source == "hub" and dataset in config.train.datasets
    return {
        "every": True,
        "assumption1": data.source == "synthetic" and data.synthetic.mode == "assumption1",
        "binary_real": real and data.num_classes == 2,
        "multiclass": real and dataset == config.ablation.multiclass and data.num_classes > 2,
        "ablation": dataset in config.ablation.datasets,
        "phase": dataset == config.phase.dataset,
    }[claim.scope]


def config_value(config: Any, key: str) -> float:
    """The value of a dotted key (`report.min_accuracy_gap`) of the config."""
    return float(reduce(getattr, key.split("."), config))


@dataclass(frozen=True)
class Assessment:
    claim: Claim
    measurement: Measurement | None  # None: the stage that measures it has not run
    threshold: float
    interval: Interval | None = None
    verdict: str = "not run"
    control_interval: Interval | None = None
    control_verdict: str = "not run"
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def control_fails(self) -> bool:
        return self.control_verdict == "fails"


def assess(claim: Claim, measurement: Measurement | None, config: Any) -> Assessment:
    """The claim's interval and verdict against its threshold, and its control's."""
    threshold = config_value(config, claim.threshold)
    if measurement is None:
        return Assessment(claim, None, threshold)

    def interval(values: Sequence[float | None], bounds: tuple | None) -> Interval:
        return seed_interval(values) if bounds is None else given_interval(*bounds, measurement.method)

    ours = interval(measurement.values, measurement.bounds)
    control = interval(measurement.control, measurement.control_bounds)
    return Assessment(claim, measurement, threshold, ours, judge(ours, claim.comparison, threshold), control,
                      judge(control, claim.comparison, threshold))
