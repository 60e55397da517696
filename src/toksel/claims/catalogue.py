"""Every claim the report judges, once: where it comes from, the paper's value, what we measure, how it is
compared, which parameter holds its threshold, its negative control and the bug that would make that control
pass, the calibration family its verdict rule belongs to, and where the lemma behind it applies.

A claim is measured once per seed from the metrics of that seed's runs (`Statistic`). Its control is the same
statistic on a near miss, a run in which everything is as in the claim but the claimed effect: by convention the
run's own `control_<metric>` (the same step or training on labels that carry no signal, the same flow with a
bounded |p_t|, ...), or other runs where a claim names them. The stages that hold the runs write `Measurement`s
(claims.json); `assess` turns one into an interval and a verdict for the claim and for its control, with the
threshold read from the config. Nothing else decides a verdict.

Kinds: a `presence` claim holds when the effect beats its null; a `size` claim when our value matches the
number the paper gives, within a factor (`within`); a `description` is shown, not judged (the rebuttal's "less
evident"). Origins: the paper's claims (the paper and its rebuttal) and ours are counted apart. A claim whose
lemma needs what a dataset lacks (two classes, embeddings of full rank, Assumption 1) is measured there but shown
as exploratory, not counted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import reduce
from typing import Any

from toksel.claims.paper import REBUTTAL_ACCURACY, REBUTTAL_GAP
from toksel.claims.verdict import (
    Interval,
    PValues,
    given_interval,
    judge,
    judge_size,
    judge_within,
    p_values,
    seed_interval,
)

CONTROL_PREFIX = "control_"  # a run's control value of metric m is its metric control_<m>
NEXT_SEED = "_next"  # a run of the next seed (cyclically), for an A/A control: "trained_next"


@dataclass(frozen=True)
class Statistic:
    """How one seed's value of a claim is read: `metric` of each of `runs`, combined."""

    # The seed's runs it reads, by name: "step" and "flow" (the one_step and gradient_flow stages), an embedding
    # arm ("trained", "untrained", "one_step"), an ablation variant ("two_layer", ...), "<run>_next" the same run
    # of the next seed.
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


# Where a statistic is computed: the stage that writes the runs its judge reads (evaluate reads two stages' runs:
# the one step's and the flow's), and the function that computes the metric (tests/test_verdict.py checks each).
COMPUTING_STAGE = {"compare": "train", "ablation_report": "ablation", "phase_diagram": "phase_diagram",
                   "step": "one_step", "flow": "gradient_flow", "pair_report": "pair", "margins": "margins"}
COMPUTED_BY = {
    **dict.fromkeys(("pearson_r", "slope_rel_error"), "theory.one_step.alignment_metrics"),
    "log_growth": "theory.convergence.log_growth",
    "selection_fraction": "theory.selection.selection_fraction",
    "cos_max_margin_important": "theory.convergence.analyse_trajectory",
    "test_accuracy": "training.classifier.ClassifierModule.test_step",
    **dict.fromkeys(("bin_spread_v", "bin_std_v", "bin_spread_p", "bin_std_p"), "theory.token_curves.spreads"),
    **dict.fromkeys(("spearman_v_alpha_corrected", "u_rise_corrected", "v_rise_positive_corrected",
                     "v_rise_negative_corrected"), "theory.token_curves.token_curves"),
    **dict.fromkeys(("low_edge_factor", "high_edge_factor", "one_step_error_slope_deviation"),
                    "pipelines.phase_diagram.seed_values"),
    **dict.fromkeys(("pair_alignment", "pair_polarity"), "theory.one_step.pair_alignment"),
    "pair_accuracy": "pipelines.ablation.pair_accuracy",
    **dict.fromkeys(("own_preference", "own_cosine"), "theory.margins.margin_metrics"),
    "own_cosine_limit": "theory.margins.convergence_metrics",
}


# What a lemma may need of a dataset, and how the report words a dataset that lacks it.
REQUIREMENTS = {
    "binary": "two classes",
    "full_rank": "embeddings of full rank, d >= the number of tokens",
    "assumption1": "Assumption 1 (one relevant token per sequence)",
}


@dataclass(frozen=True)
class Regime:
    """What a dataset offers a lemma: its classes, d, its vocabulary (tokens that occur in training) and whether it
    satisfies Assumption 1. The measuring stage records it with its measurements."""

    classes: int
    d: int
    vocabulary: int
    assumption1: bool

    def unmet(self, requires: Sequence[str]) -> list[str]:
        """The requirements this dataset lacks, each with its numbers."""
        lacking = {"binary": (self.classes == 2, f"{self.classes} classes"),
                   "full_rank": (self.d >= self.vocabulary, f"d/V = {self.d}/{self.vocabulary:,} = "
                                                            f"{self.d / self.vocabulary:.2f} < 1"),
                   "assumption1": (self.assumption1, "not Assumption-1 data")}
        return [f"needs {REQUIREMENTS[need]}: {lacking[need][1]}" for need in requires if not lacking[need][0]]


@dataclass(frozen=True)
class Claim:
    id: str  # stable name, also the metric names' stem in the report's metrics
    source: str  # where it comes from: "Lemma 4.1", "Rebuttal", "Figure 3", "Ours", ...
    statement: str  # the claim in words
    scope: str  # which data it is measured on: see SCOPES
    paper: str  # the paper's value, in words
    statistic: Statistic
    measures: str  # what the statistic is, in words
    comparison: str  # ">=" or "<=": the side of the threshold on which it holds; "within": a band around paper_value;
    # "within_margin": within minus to plus the threshold (an equivalence to 0)
    threshold: str  # dotted config key of the threshold (for "within": of the factor that sets the band)
    control: str  # the negative control, in words
    control_statistic: Statistic | None = None  # None: the same statistic on control_<metric>
    producer: str = ""  # the stage that judges it: reads its statistic per seed, writes the verdict (computed_by: where
    # the statistic itself is computed)
    family: str = ""  # its calibration family (toksel.calibration): the verdict rule's power and false positives
    kind: str = "presence"  # presence | size | description | consistency (a proof implies it: judged, not counted)
    origin: str = "paper"  # paper (the paper and its rebuttal) | ours
    requires: tuple[str, ...] = ()  # what its lemma needs of the data (REQUIREMENTS); elsewhere: exploratory
    paper_value: float | None = None  # a size claim's number
    bug: str = ""  # a plausible bug that would make the control pass
    # The threshold is the null's own value (a gap of 0): a control without the effect straddles it, so the
    # control behaves when it does not hold, where every other control must fail.
    null_at_threshold: bool = False
    protocol: str = ""  # how the runs it reads were trained, where there is more than one way ("": the stage's one)
    settings: tuple[str, ...] = ()  # the params.yaml keys that set its protocol or its test's level (the ledger)
    inferred: tuple[str, ...] = ()  # what we infer its lemma needs, beyond what the paper states: shown, not applied
    settled: str = ""  # the per-seed metric that says its statistic has stopped moving ("": it reads a final value)

    def value(self, runs: Mapping[str, Mapping[str, Any]]) -> float | None:
        return self.statistic.of(runs)

    @property
    def computed_by(self) -> tuple[str, str]:
        """The stage that computes its statistic, and the function that does (its dotted name under toksel, or a
        pipeline's): where a report row leads in the code."""
        reads_step = self.producer == "evaluate" or self.statistic.runs == ("step",)
        judge = self.statistic.runs[0] if reads_step else self.producer
        return COMPUTING_STAGE[judge], COMPUTED_BY[self.statistic.metric]

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
    "pair": "pair.dataset (a negator flips a sentiment token)",
    "margins": "margins.dataset (Assumption-1 data; p by each optimiser, E frozen after the step)",
}
CORRECTED = ("noise-corrected: over the same correlation of the training split's own statistic with the held-out "
             "one, about 1 for a score that follows the training statistic")
SHUFFLED = "the same training on shuffled training labels, scored on the true test labels"
SHUFFLE_BUG = ("a shuffle that hands each class its own labels back, or held-out statistics taken from the training "
               "split")
NULL_STEP = "the same step on labels that carry no signal (shuffled), regressed on the true alpha_s"
NULL_FLOW = "the same flow with E frozen after a step on labels that carry no signal (shuffled)"
SIZE_SETTINGS = ("report.size_alpha",)  # a size claim's equivalence test: its level sets the interval it reads
CONVERGED = "tuned lr, trained to convergence"  # the training claims' protocol (claims/measurements.py)
TRAINING = ("train.lr_grid", "train.converged_candidates", "train.max_epochs", "train.patience")  # sets that protocol
FLOW_SETTINGS = ("gradient_flow.horizon", "gradient_flow.tolerance")  # how far and how finely a flow is followed
TRAINED, UNTRAINED = REBUTTAL_ACCURACY["trained"], REBUTTAL_ACCURACY["untrained"]  # the rebuttal's test accuracies
A_A = "A/A: the same ratio between the trained arms of two seeds (the next seed's), which differ in nothing claimed"


def _trained(producer: str) -> dict[str, Any]:
    """The protocol of a claim read on the train stage's arms (compare); the ablations train one way."""
    return {"protocol": CONVERGED, "settings": TRAINING} if producer == "compare" else {}


def u_shaped(claim_id: str, source: str, claim: str, scope: str, paper: str, run: str, score: str,
             producer: str) -> Claim:
    """A score rises away from posterior difference 0 on both sides (a U or V), judged on the side that rises
    less, noise-corrected; its control is the same training on shuffled training labels."""
    return Claim(claim_id, source, claim, scope, paper, Statistic((run,), "u_rise_corrected"),
                 f"the smaller, over the two sides of 0, of the Spearman of {score} with |posterior difference| "
                 f"(held-out; {CORRECTED})", ">=", "report.min_rank_agreement", SHUFFLED, producer=producer,
                 family="u_shape", bug=SHUFFLE_BUG, **_trained(producer))


def rises_with_alpha(claim_id: str, source: str, claim: str, scope: str, paper: str, run: str,
                     producer: str) -> Claim:
    """E_s^T v rises with the token's signed frequency alpha_s, noise-corrected; its control is the same training
    on shuffled training labels."""
    return Claim(claim_id, source, claim, scope, paper, Statistic((run,), "spearman_v_alpha_corrected"),
                 f"Spearman of E_s^T v with alpha_s (held-out; {CORRECTED}); K classes: the smallest over the "
                 "classes", ">=", "report.min_rank_agreement", SHUFFLED, producer=producer, family="rank",
                 bug=SHUFFLE_BUG, **_trained(producer))


def tighter_curves(vector: str, paper: str, factor: float) -> tuple[Claim, Claim]:
    """The rebuttal's spread comparison for E_s^T v or E_s^T p: one step then frozen gives tighter binned curves
    than full training. Presence: the scale-free spread (per-bin std over the std of all the scores), which |p|
    and |v| cannot move; size: the raw per-bin std ratio the rebuttal gave, which they do move."""
    spread = f"mean per-bin std of E_s^T {vector} around its binned curve"
    presence = Claim(f"spread_ratio_{vector}", "Rebuttal",
                     f"one step then frozen gives tighter E_s^T {vector} curves than full training", "binary_real",
                     paper, Statistic(("trained", "one_step"), f"bin_spread_{vector}", "ratio"),
                     f"{spread} over the std of all the tokens' scores (free of the scale of {vector}), full training "
                     "over one step then frozen", ">=", "report.min_spread_ratio", A_A,
                     Statistic(("trained", "trained" + NEXT_SEED), f"bin_spread_{vector}", "ratio"), "compare",
                     family=f"spread_{vector}",
                     bug="one arm's curve binned by the training split's statistics, which it fit",
                     protocol=CONVERGED, settings=TRAINING)
    size = Claim(f"spread_ratio_{vector}_size", "Rebuttal",
                 f"the per-bin std of E_s^T {vector} is about {factor:g} times smaller after one step then frozen",
                 "binary_real", paper, Statistic(("trained", "one_step"), f"bin_std_{vector}", "ratio"),
                 f"{spread} (raw, as the rebuttal gave it: it moves with |{vector}|), full training over one step "
                 "then frozen", "within", "report.size_factor", A_A,
                 Statistic(("trained", "trained" + NEXT_SEED), f"bin_std_{vector}", "ratio"), "compare",
                 family=f"spread_size_{vector}", kind="size", paper_value=factor,
                 bug="two runs of different length compared raw: |v| and |p| grow with the epochs",
                 protocol=CONVERGED, settings=TRAINING + SIZE_SETTINGS)
    return presence, size


EDGE = "the geometric middle of the grid's bracket; each seed its own grid and mean |alpha_s|"
LEMMA41_BUG = "alpha_s taken from the labels the step used (a shuffle that reached the token statistics)"
FLOW_BUG = "the control's flow started from the E1 of the true step (a stale embeddings file)"

OPTIMISERS = "gradient flow and the l_q mirror flows of margins.potentials (q = 1.5, 4)"
MARGIN_SETTINGS = ("margins.potentials", "margins.horizon", "margins.tolerance")
MARGIN_CLAIMS: tuple[Claim, ...] = (
    # Beyond the paper: which margin an optimiser on p picks (Julistiono, Tarzanagh and Azizan 2024).
    Claim("margin_own_norm", "Ours", f"each optimiser on p ({OPTIMISERS}) ends nearer its own norm's hard-margin "
          "direction than any other norm's", "margins", "the l_q mirror flow converges in direction to the l_q "
          "hard-margin solution (Julistiono et al. 2024); gradient flow to the l_2 one (Theorem 4.3)",
          Statistic(("margins",), "own_preference"),
          "the smallest, over the optimisers, of the cosine of its end with its own norm's solution minus the "
          "largest with another norm's", ">=", "margins.min_preference",
          "gradient flow's end read in every optimiser's place (an optimiser blind to the geometry)",
          producer="margins", family="margin_preference", origin="ours",
          bug="the mirror flows' potential dropped on the way to the integrator (every optimiser a gradient flow) "
              "while the solutions keep their norms",
          settings=MARGIN_SETTINGS),
    # A trend, not a cosine crossed at a chosen horizon: where the cosine is heading as log t grows.
    Claim("margin_converged", "Ours", f"each optimiser on p ({OPTIMISERS}) heads to within 8 degrees of its own "
          "norm's hard-margin direction: the trend of its cosine over the flow, carried to t -> infinity",
          "margins", "cos -> 1, logarithmically slowly", Statistic(("margins",), "own_cosine_limit"),
          "the smallest, over the optimisers, of the limit of the cosine with its own norm's solution: 1 - a, from "
          "the fit 1 - cos(p_t) = a + b / log t over the flow's records, t in [T / 2^20, T]", ">=",
          "margins.min_cosine", "the same limit of an optimiser's cosine with another norm's solution (the largest)",
          producer="margins", family="margin_convergence", origin="ours", settled="own_cosine_limit_settled",
          bug="one solution for every norm (q ignored by the solver)", settings=MARGIN_SETTINGS),
)

PAIR_CONTROL = "the same generator with the pair made first-order (not flips nothing: pair.control)"
PAIR_BUG = "the control's data drawn in the pair mode too (its mode ignored), or the runs of one dataset read twice"
PAIR_SETTINGS = ("pair.dataset", "pair.control")
PAIR_CLAIMS: tuple[Claim, ...] = (
    # Beyond the paper: a label carried by a pair of tokens, which first-order statistics cannot see.
    # An equivalence test on a signed statistic: a largest |update| over the tokens is never near 0 on average.
    Claim("pair_step_blind", "Ours", "one step on E does not align the pair's good and bad (alpha_s = 0) with v "
          "in opposite directions, as it would tokens of opposite first-order signal", "pair",
          "Lemma 4.1 with alpha_s = 0: an update along v of 0 up to O(1/sqrt(d))",
          Statistic(("step",), "pair_polarity"),
          "(update along v of good - that of bad) / 2, over eta0/2 times the first-order tokens' tenth percentile "
          "of |alpha_s| (1: as much as the weakest tenth of them); signed, so that its mean over seeds can be 0",
          "within_margin", "pair.max_alignment",
          PAIR_CONTROL + ", where good and bad carry alpha_s", Statistic(("step_control",), "pair_polarity"),
          producer="pair_report", family="pair_alignment", origin="ours", kind="size", bug=PAIR_BUG,
          settings=("one_step.eta0", *PAIR_SETTINGS)),
    # The cap is derived (docs/paper-notes.md): every one-layer model obeys it on complete quadruples, so the row
    # checks the derivation and the code against each other, a bug's catch, and is not counted as a finding.
    Claim("pair_one_layer_capped", "Ours", "the one-layer model cannot read the pair: it does not get past the "
          "cap of 3/4 on the pair sequences", "pair", "at most 3 of each quadruple: 3/4 (derived)",
          Statistic(("one_layer",), "pair_accuracy"),
          "test accuracy on the sequences that carry the pair, the one-layer model trained end to end", "<=",
          "pair.past_cap", PAIR_CONTROL + ", which the one-layer model can fit",
          Statistic(("one_layer_control",), "pair_accuracy"), producer="pair_report", family="pair_cap",
          kind="consistency", origin="ours", bug=PAIR_BUG,
          settings=("train.lr", "train.max_epochs", *PAIR_SETTINGS)),
    Claim("pair_mlp_past_cap", "Ours", "a model that mixes its tokens non-linearly (the MLP head) reads the pair: "
          "past the cap", "pair", "above 3/4", Statistic(("mlp",), "pair_accuracy"),
          "test accuracy on the sequences that carry the pair, the MLP-head model trained end to end", ">=",
          "pair.past_cap", "the same MLP trained on shuffled labels and scored on the true ones: labels without "
          "the pair's signal (not the one-layer model, which provably cannot pass, so could not fail to fail)",
          producer="pair_report", family="pair_past_cap", origin="ours",
          bug="the pair sequences' labels leaking into the inputs (a label token left in), or the test rows trained on",
          settings=("train.lr", "train.max_epochs", *PAIR_SETTINGS)),
)
CLAIMS: tuple[Claim, ...] = (
    # The theory, on every dataset: the one step and gradient flow on p.
    Claim("lemma41_linear", "Lemma 4.1", "one step on E moves E_s^T v in proportion to alpha_s", "every",
          "linear in alpha_s", Statistic(("step",), "pearson_r"),
          "Pearson r of the update along v with alpha_s (worst class)", ">=", "evaluate.min_pearson_r", NULL_STEP,
          producer="evaluate", family="one_step", bug=LEMMA41_BUG, settings=("one_step.eta0",)),
    Claim("lemma41_slope", "Lemma 4.1", "the update along v is eta0 alpha_s / 2", "every",
          "slope eta0/2 (eta0 for K classes)", Statistic(("step",), "slope_rel_error"),
          "|slope - theory| / theory of the update along v on alpha_s (worst class)", "<=",
          "evaluate.max_slope_rel_error", NULL_STEP, producer="evaluate", family="one_step_size", kind="size",
          bug=LEMMA41_BUG, settings=("one_step.eta0", *SIZE_SETTINGS)),
    # Lemma 4.2 is about t -> infinity; a flow to T shows only that |p_t| still grows as log t at its end, which a
    # flow bounded beyond |p_T| shows too: the calibration's penalised rungs give the rule's reach, the nearest
    # bound over |p_T| it still tells from growth, and the report shows it beside the crossing.
    Claim("lemma42_growth", "Lemma 4.2", "|p_t| keeps growing as log t to the end of the flow (what a flow to a "
          "finite horizon shows of |p_t| -> infinity)", "every",
          "|p_t| -> infinity", Statistic(("flow",), "log_growth"),
          "the slope of |p_t| against log t over the second half of the flow, t in [T/2, T], over its average slope "
          "since the flow started to move (about 1 for log t growth, 0 for a bounded |p_t| that has settled)", ">=",
          "evaluate.min_log_growth", "the same flow over the same horizon on the loss plus a weak L2 penalty on p "
          "(gradient_flow.control_penalty / T), whose |p_t| is bounded", producer="evaluate", family="growth",
          requires=("binary",), inferred=("full_rank",), settled="log_growth_settled", settings=FLOW_SETTINGS,
          bug="growth read over the whole flow, or its first half, where the bounded flow rises too"),
    Claim("lemma44_selection", "Lemma 4.4", "p_t selects the important token of every sequence", "assumption1",
          "every sequence", Statistic(("flow",), "selection_fraction"),
          "fraction of sequences whose important tokens are all selected", ">=",
          "evaluate.min_selection_fraction", NULL_FLOW, producer="evaluate", family="selection",
          requires=("binary", "assumption1"), bug=FLOW_BUG, settings=FLOW_SETTINGS),
    Claim("theorem43_direction", "Theorem 4.3", "p_t / |p_t| converges to the max-margin direction that selects "
          "the important tokens", "assumption1", "cos -> 1",
          Statistic(("flow",), "cos_max_margin_important"),
          "cos(p_T, p_mm), p_mm the max-margin direction separating each sequence's important tokens from the rest",
          ">=", "evaluate.min_cos_max_margin", NULL_FLOW, producer="evaluate", family="direction",
          requires=("binary", "assumption1"), bug=FLOW_BUG, settings=FLOW_SETTINGS),
    # Full training of the one-layer model on real data, the three embedding arms each at its own best rate and
    # trained until its validation loss stopped improving (a comparison of arms means something only at convergence).
    Claim("accuracy_gap", "Rebuttal", "trained embeddings beat random frozen ones", "binary_real",
          f"test accuracy about {TRAINED:g} against {UNTRAINED:g}",
          Statistic(("trained", "untrained"), "test_accuracy", "difference"),
          "test accuracy, trained minus untrained (E frozen at E0), each at its own best rate, trained to "
          "convergence", ">=",
          "report.min_accuracy_gap", SHUFFLED, producer="compare", family="accuracy_gap", bug=SHUFFLE_BUG,
          null_at_threshold=True, protocol=CONVERGED, settings=TRAINING),
    Claim("accuracy_gap_size", "Rebuttal",
          f"trained embeddings beat random frozen ones by about {REBUTTAL_GAP:g} in accuracy", "binary_real",
          f"gap {TRAINED:g} - {UNTRAINED:g} = {REBUTTAL_GAP:g}",
          Statistic(("trained", "untrained"), "test_accuracy", "difference"),
          "test accuracy, trained minus untrained (E frozen at E0), each at its own best rate, trained to convergence",
          "within", "report.size_factor",
          SHUFFLED, producer="compare", family="accuracy_gap_size", kind="size", paper_value=REBUTTAL_GAP,
          bug=SHUFFLE_BUG, protocol=CONVERGED, settings=TRAINING + SIZE_SETTINGS),
    *tighter_curves("v", "per-bin std about 8 times smaller", 8.0),
    *tighter_curves("p", "per-bin std about 6 times smaller", 6.0),
    rises_with_alpha("v_increasing", "Figure 3", "E_s^T v increases with the token's posterior difference",
                     "binary_real", "monotone increasing", "trained", "compare"),
    u_shaped("p_u_shape", "Figures 1, 3", "E_s^T p is U-shaped: it rises away from posterior difference 0 on both "
             "sides", "binary_real", "U-shaped, lowest near 0", "trained", "E_s^T p", "compare"),
    rises_with_alpha("multiclass_v_increasing", "Rebuttal, 4 classes", "E_s^T v_k increases with the class-k "
                     "signed frequency, for every class", "multiclass", "increasing, with a jump in sign at 0",
                     "trained", "compare"),
    # The rebuttal's architecture ablations (models with positions).
    u_shaped("two_layer_u_shape", "Figure 1", "the two-layer model's <cls> score E_s^T p is U-shaped", "ablation",
             "U-shaped, lowest near 0", "two_layer", "E_s^T p", "ablation_report"),
    u_shaped("kq_p_u_shape", "Rebuttal table, 2 layers + W_KQ", "p^T W_KQ^(2) E_s is U-shaped", "ablation",
             "U-shaped, lowest (-3.92) at x = 0.01", "two_layer_kq", "p^T W_KQ^(2) E_s", "ablation_report"),
    rises_with_alpha("kq_v_increasing", "Rebuttal table, 2 layers + W_KQ",
                     "E_s^T v increases with the posterior difference", "ablation", "increasing, as in Figure 1",
                     "two_layer_kq", "ablation_report"),
    u_shaped("mlp_p_v_shape", "Rebuttal table, MLP head", "E_s^T p is V-shaped (residual MLP, the variant whose "
             "E_s^T v the side claims read)", "ablation", "V-shaped, lowest (0.59) at x = 0.01", "mlp_residual",
             "E_s^T p", "ablation_report"),
    Claim("mlp_v_positive_side", "Rebuttal table, MLP head", "E_s^T v increases on the positive side (residual "
          "MLP, whose E_s^T v reads E_s)", "ablation", "increasing for x > 0",
          Statistic(("mlp_residual",), "v_rise_positive_corrected"),
          f"Spearman of E_s^T v with the posterior difference over the tokens with x > 0 (held-out; {CORRECTED})",
          ">=", "report.min_rank_agreement", SHUFFLED, producer="ablation_report", family="side_rise",
          bug=SHUFFLE_BUG),
    Claim("mlp_v_negative_side", "Rebuttal table, MLP head", "monotonicity of E_s^T v is \"less evident\" on the "
          "negative side (residual MLP)", "ablation", "described, not measured: \"less evident\"",
          Statistic(("mlp_residual",), "v_rise_negative_corrected"),
          f"Spearman of E_s^T v with the posterior difference over the tokens with x < 0 (held-out; {CORRECTED})",
          ">=", "report.min_rank_agreement", "the one-layer model's trained arm, for comparison",
          control_statistic=Statistic(("one_layer_trained",), "v_rise_negative_corrected"),
          producer="ablation_report", kind="description"),
    # Beyond the paper: the eta0 x d phase diagram (intervals from the grid's brackets and the fit).
    Claim("phase_lower_edge", "Ours", "the lower edge of the eta0 window of selection is eta0 |alpha| / 2 = "
          "1/sqrt(d)", "phase", "the scale argument (eta0 'large enough')", Statistic(("phase",), "low_edge_factor"),
          f"the largest factor, over d, between a measured edge and the argument's ({EDGE})", "<=",
          "report.max_edge_factor", "the same edges against the neighbouring law eta0 |alpha| / 2 = 1/d",
          producer="phase_diagram", family="phase_edge", origin="ours",
          bug="an edge compared with the law it was measured to fit (the same law on both sides)"),
    Claim("phase_upper_edge", "Ours", "the upper edge of the eta0 window of selection is eta0 |alpha| / 2 = 1",
          "phase", "the scale argument", Statistic(("phase",), "high_edge_factor"),
          f"the largest factor, over d, between a measured edge and the argument's ({EDGE})", "<=",
          "report.max_edge_factor", "the same edges against the neighbouring law eta0 |alpha| / 2 = 1/sqrt(d)",
          producer="phase_diagram", family="phase_edge", origin="ours",
          bug="an edge compared with the law it was measured to fit (the same law on both sides)"),
    Claim("phase_error_slope", "Ours", "the one-step error (update orthogonal to v) falls like 1/sqrt(d)", "phase",
          "log-log slope -1/2", Statistic(("phase",), "one_step_error_slope_deviation"),
          "|log-log slope + 1/2| of each seed's grid", "<=",
          "report.max_slope_deviation", "the same fit to the update along v, which does not fall with d",
          producer="phase_diagram", family="error_slope", origin="ours",
          bug="the fit's two sides swapped: the update along v divided by the orthogonal one"),
    *PAIR_CLAIMS,
    *MARGIN_CLAIMS,
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
    regime: dict[str, Any] | None = None  # the dataset's Regime, where the claim's lemma asks something of it
    budget_bound: list[int] | None = None  # per seed: how many of the fits it reads the epoch budget stopped
    settled: list[bool | None] | None = None  # per seed: whether its statistic had stopped moving (Claim.settled)

    @property
    def bound_fits(self) -> int:
        return sum(self.budget_bound or [])

    def as_record(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Measurement:
        fields = dict(record)
        for key in ("bounds", "control_bounds"):
            fields[key] = None if fields.get(key) is None else tuple(fields[key])
        return cls(**fields)


def measure(claim: Claim, data: str, runs_by_seed: Mapping[int, Mapping[str, Mapping[str, Any]]],
            detail: str = "", protocol: str = "", regime: Regime | None = None) -> Measurement:
    """The claim's value and its control's on each seed's runs (seed -> run name -> metrics). A run name ending
    in NEXT_SEED reads the same run of the next seed (the last seed's next is the first)."""
    seeds = sorted(runs_by_seed)
    following = dict(zip(seeds, seeds[1:] + seeds[:1], strict=True))

    def with_next(seed: int) -> dict[str, Mapping[str, Any]]:
        runs = dict(runs_by_seed[seed])
        return runs | {name + NEXT_SEED: metrics for name, metrics in runs_by_seed[following[seed]].items()}

    def bound(seed: int) -> int:
        runs = with_next(seed)
        return sum(runs.get(name, {}).get("budget_bound") == 1 for name in claim.statistic.runs)

    def settled(seed: int) -> bool | None:  # None: no run on this seed (a flow on real data runs fewer seeds)
        found = runs_by_seed[seed].get(claim.statistic.runs[0], {}).get(claim.settled)
        return None if found is None else found == 1

    return Measurement(claim.id, data, seeds, [claim.value(with_next(seed)) for seed in seeds],
                       [claim.control_value(with_next(seed)) for seed in seeds], detail, protocol=protocol,
                       regime=None if regime is None else asdict(regime), budget_bound=[bound(seed) for seed in seeds],
                       settled=[settled(seed) for seed in seeds] if claim.settled else None)


def claim_metrics(assessed: Sequence[Assessment]) -> dict[str, float | None]:
    """The metrics a stage records of its assessed claims: per claim (suffixed by the protocol when not its own)
    the mean, the interval's ends, 1 if it holds, and the control's mean; then how many hold of how many judged."""
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
    main = [item for item in assessed if item.judged and not item.measurement.protocol]
    return metrics | {"claims_held": float(sum(item.verdict == "holds" for item in main)),
                      "claims_total": float(len(main))}


VERDICT_COUNTS = (("held", "holds"), ("failed", "fails"), ("inconclusive", "inconclusive"))


def verdict_counts(assessed: Sequence[Assessment], prefix: str = "") -> dict[str, float]:
    """How many of the judged claims (under their own protocol) hold, fail and are inconclusive: what a checking
    stage gives DVC as its metrics (verdicts.json), a few keys that read the same in every stage's row."""
    main = [item for item in assessed if item.judged and not item.measurement.protocol]
    return {prefix + name: float(sum(item.verdict == verdict for item in main)) for name, verdict in VERDICT_COUNTS}


def in_scope(claim: Claim, dataset: str, data: Any, config: Any) -> bool:
    """Whether `claim` is measured on `dataset`, whose data section is `data`; config: the stage's (it names the
    datasets of the training runs, the ablations and the phase diagram). Measured is not judged: see Regime."""
    real = data.source != "synthetic" and dataset in config.train.datasets  # text: from the Hub or a file
    return {
        "every": True,
        "assumption1": data.source == "synthetic" and data.synthetic.mode == "assumption1",
        "binary_real": real and data.num_classes == 2,
        "multiclass": real and dataset == config.ablation.multiclass and data.num_classes > 2,
        "ablation": dataset in config.ablation.datasets,
        "phase": dataset == config.phase.dataset,
        "pair": dataset == config.pair.dataset,
        "margins": dataset == config.margins.dataset,
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
    verdict: str = "not run"  # holds | fails | inconclusive | not computed | exploratory | described | not run
    control_interval: Interval | None = None
    control_verdict: str = "not run"
    unmet: tuple[str, ...] = ()  # what the dataset lacks that the claim's lemma needs (then: exploratory)
    judged_verdict: str = ""  # what the rule says even where the claim is exploratory
    extra: dict[str, Any] = field(default_factory=dict)
    p: PValues | None = None  # the p-values of its verdict's tests (toksel.claims.verdict.p_values)
    own_verdict: str = ""  # where `verdict` is the one under the error control: the verdict by its own rule

    @property
    def judged(self) -> bool:
        """Measured, in scope, a claim (not a description) whose statistic had settled: it is judged."""
        return self.measurement is not None and self.verdict not in ("exploratory", "described", "transient")

    @property
    def inferred(self) -> tuple[str, ...]:
        """What the dataset lacks of what we infer the claim's lemma needs (shown beside the verdict, not applied)."""
        if self.measurement is None or not self.measurement.regime:
            return ()
        return tuple(Regime(**self.measurement.regime).unmet(self.claim.inferred))

    @property
    def control_behaved(self) -> bool | None:
        """Whether the control did what a near miss without the effect must: fail the check (True), not hold it
        (False); None where it did neither (inconclusive, not computed, described, not run). Where the threshold
        is the null's own value, a control that straddles it behaves too."""
        if self.control_verdict == "inconclusive" and self.claim.null_at_threshold:
            return True
        return {"fails": True, "holds": False}.get(self.control_verdict)

    @property
    def band(self) -> tuple[float, float] | None:
        """A size claim's band: the paper's value divided and multiplied by the factor; an equivalence to 0
        (within_margin): minus to plus the threshold."""
        if self.claim.comparison == "within_margin":
            return -self.threshold, self.threshold
        if self.claim.comparison != "within" or self.claim.paper_value is None:
            return None
        return self.claim.paper_value / self.threshold, self.claim.paper_value * self.threshold

    @property
    def threshold_text(self) -> str:
        if self.band is not None:
            return f"within [{self.band[0]:.3g}, {self.band[1]:.3g}]"
        return f"{self.claim.comparison} {self.threshold:g}"


def assess(claim: Claim, measurement: Measurement | None, config: Any) -> Assessment:
    """The claim's interval and verdict against its threshold, and its control's; a description is shown with its
    interval, not judged; a claim on data its lemma does not cover is judged but shown as exploratory."""
    threshold = config_value(config, claim.threshold)
    if measurement is None:
        return Assessment(claim, None, threshold)

    def interval(values: Sequence[float | None], bounds: tuple | None) -> Interval:
        return seed_interval(values) if bounds is None else given_interval(*bounds, measurement.method)

    ours = interval(measurement.values, measurement.bounds)
    control = interval(measurement.control, measurement.control_bounds)
    base = Assessment(claim, measurement, threshold)
    if claim.kind == "description":
        return Assessment(claim, measurement, threshold, ours, "described", control, "described")

    def verdict(of: Interval, values: list[float | None], bounds: tuple | None) -> str:
        if claim.kind == "size" and bounds is None:  # an equivalence test: its 90 % interval
            return judge_size(values, config.report.size_alpha, claim.comparison, threshold, base.band)
        return judge(of, claim.comparison, threshold) if base.band is None else judge_within(of, *base.band)

    unmet = tuple(Regime(**measurement.regime).unmet(claim.requires)) if measurement.regime else ()
    judged = verdict(ours, measurement.values, measurement.bounds)
    moving = measurement.settled is not None and False in measurement.settled
    shown = "exploratory" if unmet else "transient" if moving else judged
    return Assessment(claim, measurement, threshold, ours, shown, control,
                      verdict(control, measurement.control, measurement.control_bounds), unmet, judged,
                      p=p_values(ours, claim.comparison, threshold, base.band))
