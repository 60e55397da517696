"""Every claim family's verdict rule on known answers: power, holding at half the effect, false positives.

A family is the claims that share a statistic and a verdict rule. For each it names one of its claims (whose
rule, threshold and comparison are the family's), the statistic the known answers produce, and which answers:
`power` (the effect at the paper's size), `half` (at half of it) and `null` (absent on a realistic null). For a
size check, the effect at half the paper's size is its null: a size check must not hold there. Each answer is
`calibration.replicates` verdicts of as many seeds as the claims run. A family is calibrated when its power is at
least 0.8 and its false-positive rate at most 0.1.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from toksel.calibration.curves import TokenPopulation, accuracy_gaps, curve_statistics, spread_statistics
from toksel.calibration.rates import Rate, holding_rate
from toksel.calibration.theory import HALF, theory_replicate
from toksel.claims.catalogue import BY_ID, Claim, config_value
from toksel.claims.measurements import curve_settings
from toksel.runtime.config import Config
from toksel.runtime.fanout import map_units

MIN_POWER, MAX_FALSE_POSITIVES = 0.8, 0.1
PAPER_GAP = 0.23  # the rebuttal's 0.95 - 0.72


@dataclass(frozen=True)
class Family:
    name: str
    claim: str  # the claim whose rule the family shares
    statistic: str  # the key of the known answers' statistics it reads
    known_answers: str  # what is planted, in words
    conditions: tuple[str, ...] = ("power", "half", "null")  # the answers it is run on
    source: str = "theory"  # theory | curves | spread | accuracy
    paper_size: float = 1.0  # the planted effect at the paper's size (spread: how many times tighter)

    @property
    def checks_size(self) -> bool:
        """A size check, whose null is the effect at half the paper's size."""
        return BY_ID[self.claim].kind == "size"


THEORY_ANSWERS = ("small Assumption-1 data (calibration.synthetic, d, eta0), each seed its own draw; the step on "
                  "labels with all, half or none of their signal, then the flow on the true labels")
CURVE_ANSWERS = ("the dataset's tokens redrawn per seed (their training and held-out counts from their own "
                 "posteriors); a model following its training draw's statistic (calibration.model_fidelity); the "
                 "training draw keeps all, half or none of the labels' signal")

FAMILIES: tuple[Family, ...] = (
    Family("one_step", "lemma41_linear", "pearson_r", THEORY_ANSWERS),
    Family("one_step_size", "lemma41_slope", "slope_rel_error", THEORY_ANSWERS + "; its null: half the signal, "
           "so half the slope", conditions=("power", "null")),
    Family("growth", "lemma42_growth", "log_growth", "as for one_step; the null: the flow after the true step on "
           "the loss plus a weak L2 penalty (gradient_flow.control_penalty / T), bounded",
           conditions=("power", "null")),
    Family("selection", "lemma44_selection", "selection_fraction", THEORY_ANSWERS),
    Family("direction", "theorem43_direction", "cos_max_margin_important", THEORY_ANSWERS),
    Family("rank", "v_increasing", "spearman_v_alpha_corrected", CURVE_ANSWERS, source="curves"),
    Family("side_rise", "mlp_v_positive_side", "posterior_v_rise_positive_corrected", CURVE_ANSWERS + "; its E_s^T v "
           "follows the posterior difference, the x of the rebuttal's table", source="curves"),
    Family("u_shape", "p_u_shape", "u_rise_corrected", CURVE_ANSWERS, source="curves"),
    *(Family(f"spread_{vector}", f"spread_ratio_{vector}", f"bin_spread_{vector}",
             f"two planted arms on one draw of the dataset's tokens, the second's scatter {size:g} times smaller "
             f"(half: {size / 2:g}; null: the same, A/A)", source="spread", paper_size=size)
      for vector, size in (("v", 8.0), ("p", 6.0))),
    *(Family(f"spread_size_{vector}", f"spread_ratio_{vector}_size", f"bin_std_{vector}",
             f"as spread_{vector}; its null: half the paper's factor", conditions=("power", "null"), source="spread",
             paper_size=size) for vector, size in (("v", 8.0), ("p", 6.0))),
    Family("accuracy_gap", "accuracy_gap", "gap", "test accuracies per seed, the trained arm 0.23 (half: 0.115; null: "
           "0, A/A) above the untrained one, each with the seed-to-seed spread of our runs", source="accuracy",
           paper_size=PAPER_GAP),
    Family("accuracy_gap_size", "accuracy_gap_size", "gap", "as accuracy_gap; its null: half the paper's gap",
           conditions=("power", "null"), source="accuracy", paper_size=PAPER_GAP),
)
# The families whose verdicts read a method's own interval, not a spread over seeds: shown as uncalibrated.
UNCALIBRATED = {
    "phase_edge": ("no known answer but the law under test: a window with planted edges would need the scale "
                   "argument the claim checks; the threshold, a factor 4, is two steps of the grid's factor 2"),
    "error_slope": ("no known answer but the law under test: the one step's error at each d is what the claim "
                    "reads, with nothing to plant in it"),
}


def strength(family: Family, condition: str) -> float:
    """The planted effect of a condition, as the share of the labels' signal (or the spread's factor, the gap)."""
    if family.source == "spread":  # how many times tighter; its null: the same (A/A), or for a size check half
        null = family.paper_size / 2 if family.checks_size else 1.0
        return {"power": family.paper_size, "half": family.paper_size / 2, "null": null}[condition]
    size = family.paper_size
    if family.checks_size:  # its null: half the paper's effect
        return {"power": size, "null": size * HALF}[condition]
    return {"power": size, "half": size * HALF, "null": 0.0}[condition]


Replicates = dict[str, list[list[float | None]]]  # condition -> replicate -> the statistic on each seed


def _theory_seeds(settings: Any, flow: Any, seeds: int, replicate: int) -> list[dict[str, dict[str, float | None]]]:
    return [theory_replicate(settings, flow, replicate, seed) for seed in range(seeds)]


def theory_answers(config: Config, seeds: int, progress: Callable[[], None] = lambda: None
                   ) -> dict[str, Replicates]:
    """family name -> its replicates, for the theory's families, from one pass over the replicates' seeds."""
    families = [family for family in FAMILIES if family.source == "theory"]
    answers: dict[str, Replicates] = {family.name: {condition: [] for condition in family.conditions}
                                      for family in families}
    # Each replicate is a small problem, seeded by itself alone, mostly Python around small arrays: a process each
    # (threads would wait on each other's interpreter), the same numbers in the same order wherever they run.
    work = functools.partial(_theory_seeds, config.calibration, config.gradient_flow, seeds)
    for per_seed in map_units(work, range(config.calibration.replicates), config.compute, "processes", progress):
        for family in families:
            for condition in family.conditions:
                # A size check's null is the half-size answer.
                answer = "half" if family.checks_size and condition == "null" else condition
                answers[family.name][condition].append([seed[answer][family.statistic] for seed in per_seed])
    return answers


class DataAnswers:
    """The known answers drawn on one dataset: each draw (a strength or a spread factor, a replicate, a seed) made
    once, from its own seeded generator, and shared by the families that read it."""

    def __init__(self, population: TokenPopulation | None, accuracy_spread: float | None, config: Config, seeds: int,
                 salt: int) -> None:
        self.population, self.accuracy_spread, self.config, self.seeds, self.salt = (
            population, accuracy_spread, config, seeds, salt)
        self.settings = curve_settings(config.train)  # the claims' own binning and choice of tokens
        self._drawn: dict[tuple, dict[str, float]] = {}

    def _rng(self, *key: float) -> np.random.Generator:
        return np.random.default_rng((self.config.calibration.seed, self.salt, *(round(1000 * k) for k in key)))

    def _draw(self, source: str, planted: float, replicate: int, seed: int) -> dict[str, float]:
        key = (source, planted, replicate, seed)
        if key not in self._drawn:
            rng = self._rng(len(source), planted, replicate, seed)
            fidelity = self.config.calibration.model_fidelity
            draw = spread_statistics if source == "spread" else curve_statistics
            self._drawn[key] = draw(self.population, planted, fidelity, self.settings, rng)
        return self._drawn[key]

    def replicates(self, family: Family) -> Replicates:
        answers: Replicates = {}
        for condition in family.conditions:
            planted = strength(family, condition)
            if family.source == "accuracy":
                answers[condition] = [accuracy_gaps(planted, self.accuracy_spread, self.seeds,
                                                    self._rng(0, planted, replicate))
                                      for replicate in range(self.config.calibration.replicates)]
                continue
            answers[condition] = [[self._draw(family.source, planted, replicate, seed)[family.statistic]
                                   for seed in range(self.seeds)]
                                  for replicate in range(self.config.calibration.replicates)]
        return answers


def row(family: Family, where: str, answers: Replicates | None, config: Config, reason: str = "") -> dict[str, Any]:
    """A family's row of the calibration table: its rates with their intervals, and whether it is calibrated."""
    claim = BY_ID[family.claim]
    base = {"family": family.name, "data": where, "claim": family.claim, "known_answers": family.known_answers,
            "rule": f"{claim.measures}; holds when its interval (over {_seeds_text(answers)}) lies "
                    f"{_rule(claim, config)}"}
    if answers is None:
        return base | {"calibrated": False, "reason": reason or "not computed"}
    rates: dict[str, Rate] = {condition: holding_rate(claim, replicates, config)
                              for condition, replicates in answers.items()}
    power, null = rates["power"].rate, rates["null"].rate
    calibrated = power >= MIN_POWER and null <= MAX_FALSE_POSITIVES
    why = [] if calibrated else [text for text, bad in (
        (f"power {power:.2f} < {MIN_POWER}", not power >= MIN_POWER),
        (f"false positives {null:.2f} > {MAX_FALSE_POSITIVES}", not null <= MAX_FALSE_POSITIVES)) if bad]
    return base | {condition: rate.as_record() for condition, rate in rates.items()} | {
        "calibrated": calibrated, "reason": "; ".join(why)}


def _seeds_text(answers: Replicates | None) -> str:
    if not answers:
        return "the claim's seeds"
    return f"{len(next(iter(answers.values()))[0])} seeds"


def _rule(claim: Claim, config: Config) -> str:
    threshold = config_value(config, claim.threshold)
    if claim.comparison == "within":
        return f"within [{claim.paper_value / threshold:.3g}, {claim.paper_value * threshold:.3g}]"
    return f"{'at or above' if claim.comparison == '>=' else 'at or below'} {threshold:g}"


def uncalibrated_rows() -> list[dict[str, Any]]:
    """The families with no known answer to plant: shown as uncalibrated, with the reason."""
    rows = []
    for name, reason in UNCALIBRATED.items():
        claims = [claim for claim in BY_ID.values() if claim.family == name]
        rows.append({"family": name, "data": "phase.dataset", "claim": ", ".join(claim.id for claim in claims),
                     "known_answers": "none", "rule": f"{claims[0].measures}; its t-interval over the seeds",
                     "calibrated": False, "reason": reason})
    return rows
