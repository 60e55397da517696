"""Every claim family's verdict rule against known answers, as an operating characteristic per dataset.

A family is the claims that share a statistic and a verdict rule. For each it names one of its claims (whose
rule, threshold and comparison are the family's), the statistic the known answers produce, where they come from,
and a ladder of planted effects fixed here, before any rate was seen, to bracket the rule's threshold: from the
null (the effect absent) past the paper's size. On each dataset its claims are judged on, the rule's holding rate
is measured at every rung (toksel.calibration.operating), in that dataset's regime: its own data, d, eta0 and
flows for the theory, its own token statistics and their sampling noise for the training claims.

A family is calibrated on a dataset when its power at the paper's size (or, where the paper gives no number, at
the family's reference effect) is at least 0.8 and its false-positive rate at the null at most 0.1; a rule blind
at the paper's size does not count there. Each rate is drawn to a Wilson half-width of calibration.precision where
a replicate is cheap (planted statistics, the one step on small synthetic data), calibration.costly_precision
where it follows flows or passes over a text corpus (`precision`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from toksel.calibration.curves import TokenPopulation, accuracy_gaps, curve_statistics, spread_statistics
from toksel.calibration.margins import MarginRegime, margin_unit
from toksel.calibration.operating import (
    POWER,
    DrawMany,
    Precision,
    loop,
    operating_curve,
    power_crossing,
    rate_at,
)
from toksel.calibration.pair import PairRegime, pair_step_unit, planted_accuracies
from toksel.calibration.theory import FlowRegime, Recent, StepRegime, flow_unit, step_unit
from toksel.claims.catalogue import BY_ID, Claim, config_value
from toksel.claims.measurements import curve_settings
from toksel.claims.paper import REBUTTAL_GAP as PAPER_GAP
from toksel.params import Config
from toksel.runtime.fanout import map_units

MAX_FALSE_POSITIVES = 0.1
SHARES = (0.0, 0.5, 0.8, 0.9, 0.94, 0.97, 0.99, 1.0)  # the one step's: its rules sit near all of the signal
FLOW_SHARES = (0.0, 0.5, 0.75, 0.9, 1.0)  # a flow replicate costs seconds: five rungs, the null and past the edge
# lambda T: 0.25 is Lemma 4.2's control, 0 the flow itself; 0.1 and 0.05 place the crossing, where the rule's reach
# (the nearest bound it still tells from growth) is read.
PENALTIES = (0.25, 0.1, 0.05, 0.03, 0.003, 0.0)
FIDELITIES = (0.0, 0.2, 0.35, 0.5, 0.65, 0.8, 0.95)  # the planted model's correlation with what it learnt
# Where the paper gives no number (a curve that rises, a U): a planted model that follows what it learnt with
# correlation 0.8, a clear trend whose noise-corrected statistic reads about 0.8, half again the threshold 0.5.
REFERENCE_FIDELITY = 0.8


@dataclass(frozen=True)
class Family:
    name: str
    claim: str  # the claim whose rule the family shares
    statistic: str  # the key of the known answers' statistics it reads
    known_answers: str  # what is planted, in words
    source: str  # one_step | flow | curves | spread | accuracy
    ladder: tuple[float, ...]  # the planted effects, in `unit`
    unit: str
    reference: float  # where its power is read: the paper's size, or the reference effect where it gives none
    null: float  # where its false-positive rate is read: the effect absent, or a size the check must not pass
    paper: bool = True  # whether `reference` is the paper's own size

    @property
    def flows(self) -> bool:
        return self.source in ("flow", "margins")


STEP = ("the one step on the dataset's own training split (each seed's draw), its labels keeping a share of their "
        "signal, from initialisations drawn at its d; regressed on the true alpha_s")
FLOW = ("fresh draws of the dataset's own generator at its d, eta0, horizon and tolerance: the one step on labels "
        "keeping a share of their signal, then the flow on the true labels")
CURVES = ("the dataset's tokens redrawn per seed (their training and held-out counts from their own posteriors); a "
          "planted model that follows the statistic it learnt from its training draw with a correlation (the ladder)")


PAIR_STEP = ("fresh draws of the pair dataset's generator with some quadruples labelled the first-order way (good "
             "and bad then carry alpha_s), the one step at its d and eta0; the rung is the alignment that planted "
             "signal gives good and bad, met to within one quadruple (calibration/pair.py)")
PAIR_PLANTED = ("planted models: each seed's accuracy on the pair dataset's test pair sequences drawn around the rung "
                "with the seed-to-seed spread of the pair stage's runs, counted over those sequences")
# The claims hold at the low end of these (the ladders run down, as the penalties do): about each threshold, from
# the claim's own case past the case it must not pass.
MARGIN_ANSWERS = ("fresh draws of margins.dataset's generator at its d and eta0, the one step, then the stage's "
                  "flows and solutions; each mirror optimiser's end planted a share of the way from gradient flow's "
                  "end to its own flow's (calibration/margins.py)")
# The blind optimiser (0), a quarter and three quarters of the way, the mirror flow itself (1): rungs off the
# midpoint, where the mix sits about as near one norm's solution as the other's and a rate would take 95 replicates.
MARGIN_SHARES = (0.0, 0.25, 0.75, 1.0)
PAIR_ALIGNMENTS = (2.0, 1.5, 1.0, 0.75, 0.5, 0.25, 0.0)
PAIR_ACCURACIES = (0.5, 0.75, 0.8, 0.85, 0.875, 0.9, 0.95, 1.0)  # chance, the cap, about 0.875, reading the pair


def _spread(vector: str, size: float) -> tuple[Family, Family]:
    ladder = (1.0, 1.5, 2.0, size / 2, size, 2 * size)
    answers = ("two planted arms on one draw of the dataset's tokens, the first as close to what it learnt as the real "
               "trained arm (its noise-corrected rank statistics), the second's scatter k times smaller; k = 1 is an "
               "A/A pair")
    return (Family(f"spread_{vector}", f"spread_ratio_{vector}", f"bin_spread_{vector}", answers, "spread", ladder,
                   "k, times tighter", size, 1.0),
            Family(f"spread_size_{vector}", f"spread_ratio_{vector}_size", f"bin_std_{vector}", answers, "spread",
                   ladder, "k, times tighter", size, size / 2))


FAMILIES: tuple[Family, ...] = (
    Family("one_step", "lemma41_linear", "pearson_r", STEP, "one_step", SHARES, "share of the labels' signal", 1.0,
           0.0),
    # A size check must not pass a slope 10 % off, twice its 5 % tolerance.
    Family("one_step_size", "lemma41_slope", "slope_rel_error", STEP, "one_step", SHARES,
           "share of the labels' signal", 1.0, 0.9),
    Family("growth", "lemma42_growth", "log_growth", FLOW + "; on the loss plus lambda/2 |p|^2, lambda = penalty / "
           "horizon, a flow with a finite minimiser (bounded by construction); 0: the flow itself", "flow",
           PENALTIES, "penalty lambda T", 0.0, 0.25),
    Family("selection", "lemma44_selection", "selection_fraction", FLOW, "flow", FLOW_SHARES,
           "share of the labels' signal in the step", 1.0, 0.0),
    Family("direction", "theorem43_direction", "cos_max_margin_important", FLOW, "flow", FLOW_SHARES,
           "share of the labels' signal in the step", 1.0, 0.0),
    Family("rank", "v_increasing", "spearman_v_alpha_corrected", CURVES + "; its E_s^T v follows alpha_s", "curves",
           FIDELITIES, "fidelity", REFERENCE_FIDELITY, 0.0, paper=False),
    Family("side_rise", "mlp_v_positive_side", "posterior_v_rise_positive_corrected", CURVES + "; its E_s^T v "
           "follows the posterior difference, the x of the rebuttal's table", "curves", FIDELITIES, "fidelity",
           REFERENCE_FIDELITY, 0.0, paper=False),
    Family("u_shape", "p_u_shape", "u_rise_corrected", CURVES + "; its E_s^T p follows |posterior difference|",
           "curves", FIDELITIES, "fidelity", REFERENCE_FIDELITY, 0.0, paper=False),
    *_spread("v", 8.0),
    *_spread("p", 6.0),
    Family("accuracy_gap", "accuracy_gap", "gap", "the trained arm's test accuracy minus the untrained "
           "one's per seed, a planted gap (0: A/A) plus the between-seed spread of our runs' gaps, Student t noise "
           "(4 degrees of freedom)", "accuracy",
           (0.0, 0.01, 0.02, 0.05, 0.1, PAPER_GAP), "gap", PAPER_GAP, 0.0),
    Family("accuracy_gap_size", "accuracy_gap_size", "gap", "as accuracy_gap; its null: half the paper's gap",
           "accuracy", (PAPER_GAP / 4, PAPER_GAP / 2, 0.17, PAPER_GAP, 0.35, 2 * PAPER_GAP), "gap", PAPER_GAP,
           PAPER_GAP / 2),
    # Ours, on the pair dataset: its own case (0), and a pair as strong as the weakest tenth of the first-order
    # tokens (1), which the check must not call blind.
    Family("pair_alignment", "pair_step_blind", "pair_polarity", PAIR_STEP, "pair_step", PAIR_ALIGNMENTS,
           "planted alignment of good and bad (the statistic's unit)", 0.0, 1.0, paper=False),
    # The one-layer model at its cap (3/4) must read as capped; a model that reads the pair (1) must not.
    Family("pair_cap", "pair_one_layer_capped", "pair_accuracy", PAIR_PLANTED, "pair_accuracy",
           PAIR_ACCURACIES[::-1], "accuracy on the pair sequences", 0.75, 1.0, paper=False),
    Family("pair_past_cap", "pair_mlp_past_cap", "pair_accuracy", PAIR_PLANTED, "pair_accuracy", PAIR_ACCURACIES,
           "accuracy on the pair sequences", 1.0, 0.75, paper=False),
    # Ours, on margins.dataset: the mirror flows themselves (1) must read as picking their own norms' margins and
    # as converged; an optimiser blind to the geometry (0) must not.
    Family("margin_preference", "margin_own_norm", "own_preference", MARGIN_ANSWERS, "margins", MARGIN_SHARES,
           "share of the way from gradient flow's end to the mirror flow's", 1.0, 0.0, paper=False),
    Family("margin_convergence", "margin_converged", "own_cosine_limit", MARGIN_ANSWERS, "margins", MARGIN_SHARES,
           "share of the way from gradient flow's end to the mirror flow's", 1.0, 0.0, paper=False),
)
BY_NAME = {family.name: family for family in FAMILIES}
# The families whose verdicts read a method's own interval, not a spread over seeds: shown as uncalibrated.
UNCALIBRATED = {
    "phase_edge": ("no known answer but the law under test: a window with planted edges would need the scale "
                   "argument the claim checks; the threshold, a factor 4, is two steps of the grid's factor 2"),
    "error_slope": ("no known answer but the law under test: the one step's error at each d is what the claim "
                    "reads, with nothing to plant in it"),
}
NO_GROWTH_ANSWER = ("no known answer: whether the flow on p grows without bound on data with d < V is what the "
                    "claim asks; only a bounded flow (the null) can be planted there")

Unit = tuple[float, ...]  # what one draw of known answers is: a (share, replicate), a (share, penalty, replicate)


class Answers:
    """One source of known answers on one dataset, drawn by unit (each unit's every seed) through the fan-out, each
    unit once: the families that read the same draws share them (the one step's two; the flow's three, growth's
    rung without a penalty being the flow after the full step)."""

    def __init__(self, work: Callable[[Unit], Sequence[dict[str, Any]]], config: Config,
                 progress: Callable[[], None]) -> None:
        self.work, self.config, self.progress = work, config, progress
        self._drawn: dict[Unit, Sequence[dict[str, Any]]] = {}

    @staticmethod
    def unit(family: Family, effect: float, replicate: int) -> Unit:
        if family.source in ("one_step", "pair_step", "margins"):
            return effect, replicate
        return (1.0, effect, replicate) if family.name == "growth" else (effect, 0.0, replicate)

    def means(self, family: Family, statistic: str) -> dict[float, float]:
        """The mean of another statistic of the family's draws at each rung, over every seed drawn there."""
        found = {}
        for effect in family.ladder:
            values = [seed.get(statistic) for unit, seeds in self._drawn.items() for seed in seeds
                      if unit == self.unit(family, effect, unit[-1])]
            finite = [value for value in values if value is not None and math.isfinite(value)]
            if finite:
                found[effect] = sum(finite) / len(finite)
        return found

    def for_family(self, family: Family) -> DrawMany:
        def draw(pairs: Sequence[tuple[float, int]]) -> list[Sequence[float | None]]:
            units = [self.unit(family, *pair) for pair in pairs]
            # A replicate's rungs side by side (their data are the same draw), in chunks of units, not a task each:
            # a unit of the one step on small data takes milliseconds, which a process's task would cost again.
            missing = sorted(dict.fromkeys(item for item in units if item not in self._drawn),
                             key=lambda item: item[-1])
            chunks = [tuple(missing[start:start + CHUNK]) for start in range(0, len(missing), CHUNK)]
            found = map_units(functools.partial(_each, self.work), chunks, self.config.compute, "processes",
                              self.progress)
            self._drawn |= dict(zip(missing, (result for chunk in found for result in chunk), strict=True))
            return [[seed.get(family.statistic) for seed in self._drawn[item]] for item in units]

        return draw


CHUNK = 8  # units of known answers per task of the fan-out


def _each(work: Callable[[Unit], Sequence[dict[str, Any]]], units: Sequence[Unit]) -> list[Sequence[dict[str, Any]]]:
    return [work(unit) for unit in units]


def precision(config: Config, costly: bool) -> Precision:
    """How precisely a rate is drawn: calibration.precision where a replicate is cheap (planted statistics, the one
    step on small synthetic data), calibration.costly_precision where it follows flows or passes over a text corpus
    (IMDB's 3.3 million entries, five times a replicate)."""
    settings = config.calibration
    if costly:
        return Precision(settings.costly_precision, settings.max_costly_replicates)
    return Precision(settings.precision, settings.max_replicates)


def step_answers(regime: StepRegime, config: Config, progress: Callable[[], None]) -> Answers:
    return Answers(functools.partial(step_unit, regime), config, progress)


def flow_answers(regime: FlowRegime, config: Config, progress: Callable[[], None]) -> Answers:
    return Answers(functools.partial(flow_unit, regime), config, progress)


def margin_answers(regime: MarginRegime, config: Config, progress: Callable[[], None]) -> Answers:
    return Answers(functools.partial(margin_unit, regime), config, progress)


def pair_step_answers(regime: PairRegime, config: Config, progress: Callable[[], None]) -> Answers:
    return Answers(functools.partial(pair_step_unit, regime), config, progress)


class PlantedAccuracies:
    """The pair accuracies' known answers: cheap draws, made in this process; the same normal draws at every rung of
    a replicate (common random numbers)."""

    def __init__(self, regime: PairRegime, config: Config) -> None:
        self.regime, self.seed = regime, config.calibration.seed

    def for_family(self, family: Family) -> DrawMany:
        return loop(lambda accuracy, replicate: planted_accuracies(
            self.regime, accuracy, np.random.default_rng((self.seed, self.regime.salt, replicate))))


DRAWS_KEPT = 256  # draws of a dataset's token table kept for the rungs still to read them (a few MB each)
SPREAD_REPLICATES = 32  # replicates at the reference that estimate the planted between-seed spread


class PlantedAnswers:
    """The training families' known answers on one dataset's token statistics, or accuracy gaps with the
    spread of its runs': cheap draws, made in this process from their own seeded generators."""

    def __init__(self, population: TokenPopulation | None, fidelity: tuple[float, float], config: Config, seeds: int,
                 salt: int) -> None:
        self.population, self.config, self.seeds, self.salt = population, config, seeds, salt
        self.fidelity = fidelity  # the real trained arm's, (p's, v's): the scatter the spread's arms start from
        self.settings = curve_settings(config.train)  # the claims' own binning and choice of tokens
        self._drawn: dict[tuple, dict[str, float]] = {}
        self._data = Recent(DRAWS_KEPT)

    def _rng(self, *key: float) -> np.random.Generator:
        return np.random.default_rng((self.config.calibration.seed, self.salt, *(round(1000 * k) for k in key)))

    def _statistics(self, source: str, effect: float, replicate: int, seed: int) -> dict[str, float]:
        key = (source, effect, replicate, seed)
        if key not in self._drawn:
            # The same draw of the data and the same noise at every rung (common random numbers): the rungs
            # differ by their effect alone, and a draw is made once.
            drawn = self._data.get((replicate, seed),
                                   lambda: self.population.draw(1.0, self._rng(1, replicate, seed)))
            rng = self._rng(len(source), replicate, seed)
            if source == "spread":
                self._drawn[key] = spread_statistics(drawn, effect, self.fidelity, self.settings, rng)
            else:
                self._drawn[key] = curve_statistics(drawn, effect, self.settings, rng)
        return self._drawn[key]

    def _seeds(self, family: Family, effect: float, replicate: int) -> list[float]:
        return [self._statistics(family.source, effect, replicate, seed)[family.statistic]
                for seed in range(self.seeds)]

    def planted_spread(self, family: Family) -> float:
        """The between-seed standard deviation of the family's statistic at its reference, as planted (the token
        draws' own noise): the root mean within-replicate variance over SPREAD_REPLICATES replicates; 0 for the
        accuracy gap, whose planted gaps carry no noise but the seeds' own."""
        if family.source == "accuracy":
            return 0.0
        variances = []
        for replicate in range(SPREAD_REPLICATES):
            finite = [value for value in self._seeds(family, family.reference, replicate) if math.isfinite(value)]
            if len(finite) > 1:
                variances.append(float(np.var(finite, ddof=1)))
        return math.sqrt(sum(variances) / len(variances)) if variances else 0.0

    def for_family(self, family: Family, added: float = 0.0) -> DrawMany:
        """The family's draws; `added`: the standard deviation of a seed's own noise put on each seed's statistic
        (the same at every rung of a replicate), so that the planted between-seed spread matches a real row's."""
        if family.source == "accuracy":
            return loop(lambda gap, replicate: accuracy_gaps(gap, added, self.seeds, self._rng(0, replicate)))

        def draw(effect: float, replicate: int) -> list[float]:
            values = self._seeds(family, effect, replicate)
            if not added:
                return values
            noise = self._rng(len(family.source), 7, replicate).standard_normal(len(values))
            return [value + added * extra for value, extra in zip(values, noise, strict=True)]

        return loop(draw)


def crossing_along(ladder: Sequence[float], curve: Sequence[dict[str, Any]]) -> dict[str, float | None]:
    """power_crossing along a ladder whose effect grows as it runs up or, like a penalty, as it runs down: on a
    ladder that runs down, the crossing on its own scale with its bracket read low to high."""
    if tuple(ladder) == tuple(sorted(ladder)):
        return power_crossing(curve)
    negated = power_crossing([point | {"effect": -point["effect"]} for point in curve])
    back = {key: None if value is None else -value for key, value in negated.items()}
    return {"effect": back["effect"], "low": back["high"], "high": back["low"]}


def growth_reach(crossing: dict[str, float | None], ratios: dict[float, float]) -> dict[str, Any]:
    """The growth rule's reach: the bound over |p_T| of the penalised flow at the penalty where the rule's power
    reaches 0.8 (linear between the two rungs around it). A flow bounded further out than this from its end reads
    as growth at least 4 times in 5, so a holding verdict says only that any bound lies about that far out or
    beyond; one bounded nearer is called growing less often. None where the crossing or the rungs' ratios are
    missing."""
    effect = crossing.get("effect")
    rungs = sorted(ratios.items())
    listed = [{"penalty": penalty, "bound_ratio": ratio} for penalty, ratio in rungs]
    below = [(penalty, ratio) for penalty, ratio in rungs if penalty <= (effect or 0) and penalty > 0]
    above = [(penalty, ratio) for penalty, ratio in rungs if effect is not None and penalty >= effect]
    if effect is None or not below or not above:
        return {"penalty": effect, "bound_ratio": None, "rungs": listed}
    (low, at_low), (high, at_high) = below[-1], above[0]
    share = 0.0 if high == low else (effect - low) / (high - low)
    return {"penalty": effect, "bound_ratio": at_low + share * (at_high - at_low), "rungs": listed}


def row(family: Family, where: str, draw: DrawMany | None, config: Config, reason: str = "",
        costly: bool = False) -> dict[str, Any]:
    """A family's row of the calibration table on one dataset: its operating curve, the power at its reference
    effect, the false-positive rate at its null, where the power reaches 0.8, and whether it is calibrated."""
    claim = BY_ID[family.claim]
    base = {"family": family.name, "data": where, "claim": family.claim, "known_answers": family.known_answers,
            "rule": f"{claim.measures}; holds when its interval lies {_rule(claim, config)}", "unit": family.unit,
            "reference": family.reference, "paper": family.paper, "null_effect": family.null}
    if draw is None:
        return base | {"calibrated": False, "reason": reason or "not computed"}
    wanted = precision(config, costly or family.flows)
    curve = operating_curve(claim, config, family.ladder, draw, wanted)
    power, null = rate_at(curve, family.reference), rate_at(curve, family.null)
    crossing = crossing_along(family.ladder, curve)
    calibrated = power["rate"] >= POWER and null["rate"] <= MAX_FALSE_POSITIVES
    why = [text for text, bad in ((f"power {power['rate']:.2f} < {POWER} at "
                                   f"{'the paper' if family.paper else 'the reference'}'s {family.reference:g}",
                                   power["rate"] < POWER),
                                  (f"false positives {null['rate']:.2f} > {MAX_FALSE_POSITIVES}",
                                   null["rate"] > MAX_FALSE_POSITIVES)) if bad]
    return base | {"curve": curve, "power": power, "null": null, "crossing": crossing, "precision": wanted.target,
                   "calibrated": calibrated, "reason": "; ".join(why)}


def added_spread(real: float | None, planted: float) -> float:
    """The standard deviation of the noise that brings a planted between-seed spread up to a real row's: their
    variances' difference, 0 where the planted spread is already as wide (or the row has no spread)."""
    return math.sqrt(max(0.0, real**2 - planted**2)) if real is not None and math.isfinite(real) else 0.0


def _rule(claim: Claim, config: Config) -> str:
    threshold = config_value(config, claim.threshold)
    if claim.comparison == "within_margin":
        return f"within [{-threshold:g}, {threshold:g}] (its 90 % interval: an equivalence test)"
    if claim.comparison == "within":
        return f"within [{claim.paper_value / threshold:.3g}, {claim.paper_value * threshold:.3g}]"
    return f"{'at or above' if claim.comparison == '>=' else 'at or below'} {threshold:g}"


def uncalibrated_rows() -> list[dict[str, Any]]:
    """The families with no known answer to plant: shown as uncalibrated, with the reason."""
    rows = []
    for name, reason in UNCALIBRATED.items():
        claims = [claim for claim in BY_ID.values() if claim.family == name]
        rows.append({"family": name, "data": "phase.dataset", "claim": ", ".join(claim.id for claim in claims),
                     "known_answers": "none", "rule": f"{claims[0].measures}; its interval", "calibrated": False,
                     "reason": reason})
    return rows
