"""Theory checks along a gradient-flow trajectory: |p_t|, selection (Lemma 4.4), max-margin (Theorem 4.3), and
whether the discrete steps follow the flow.

p_mm is solved for the selection made by the final p_T; the cosine and the normalised margin are then
computed for every recorded p_t. Theorem 4.3 with Lemma 4.4 says more: the limit direction is the max-margin
direction of the selection of the important tokens, p_mm* (each sequence's important tokens against its
others); cos(p_T, p_mm*) is measured too. Under Assumption 1, once p_T selects exactly the important tokens,
the two coincide.

Lemma 4.2 (|p_t| grows without bound) is read off the slope of |p_t| against log t over the second half of the
flow, t in [T/2, T], set against its average slope since the flow started to move (from the first record where
|p_t| has covered a tenth of its total change): `log_growth`. Steady growth like log t, the rate of gradient
flow on a loss without a finite minimiser (|p_t| ~ |p_mm| log t under Assumption 1), keeps its rate and gives
about 1 (less while the fast start still weighs in the average); a bounded |p_t| that has settled near its
limit gives about 0. The threshold, 1/2, lies half way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from toksel.data.corpus import PackedSplit
from toksel.data.token_table import TokenTable
from toksel.models.fused import FusedBags
from toksel.runtime.errors import ToksError
from toksel.theory.flow_field import FlowField
from toksel.theory.gradient_flow import (
    RECORDS_PER_DOUBLING,
    Integration,
    Observer,
    StepCapReached,
    Trajectory,
    halved,
    run_gradient_flow,
)
from toksel.theory.max_margin import (
    MaxMarginSolution,
    constraint_pairs,
    cosine,
    normalized_margin,
    solve_max_margin,
)
from toksel.theory.selection import selected_entries, selection_fraction

MOVED = 0.1  # the flow has started to move once |p_t| has covered this share of its change up to T


def log_growth(times: np.ndarray, p_norm: np.ndarray) -> float:
    """The slope of |p_t| against log t over [T/2, T] over its average slope from the time t_0 the flow started
    to move to T. times: 0, then the record times (three per doubling, the last at T). 0 when |p_t| ends where it
    began; NaN when it moved only at the very end (no average to compare with)."""
    end, half = float(p_norm[-1]), float(p_norm[-1 - RECORDS_PER_DOUBLING])
    change = end - float(p_norm[0])
    if change <= 0:
        return 0.0
    recorded, norms = times[1:], p_norm[1:]
    start = int(np.argmax(norms - p_norm[0] >= MOVED * change))
    if recorded[start] >= recorded[-1]:
        return float("nan")
    late = (end - half) / math.log(2)
    average = (end - float(norms[start])) / math.log(recorded[-1] / recorded[start])
    return late / average if average > 0 else float("nan")


SETTLING = 40.0  # the penalised flow is followed on for this many times 1/penalty, its slowest time scale
BOUND_RESIDUAL = 1e-3  # the gradient it may keep there, times 1/penalty, relative to |p|: p* within that of it


def bound_ratio(E: np.ndarray, v: np.ndarray, bags: FusedBags, penalty: float, p_end: np.ndarray) -> float:
    """How far beyond its end a penalised flow's bound lies: |p*| / |p_T|, p* the minimiser of L + penalty/2 |p|^2
    that the flow runs to, found by following the same flow on from its end p_T for SETTLING / penalty (near p*
    its Hessian is at least the penalty, so the distance left falls at least as exp(-penalty t)). A bounded flow
    whose ratio is near 1 has settled; one whose bound lies far beyond |p_T| looks, up to T, like unbounded
    growth. NaN when the gradient left is not small (the flow has not settled)."""
    on = run_gradient_flow(E, p_end, v, bags, Integration(SETTLING / penalty, 1e-5), penalty=penalty)
    end = on.p[-1]
    _, gradient = FlowField(E, v, bags, penalty)(end)
    if np.linalg.norm(gradient) / penalty > BOUND_RESIDUAL * np.linalg.norm(end):
        return float("nan")
    return float(np.linalg.norm(end) / np.linalg.norm(p_end))


SETTLED_TOLERANCE = 0.1  # the two doublings' readings of log_growth agree within this (see `growth_settledness`)


@dataclass(frozen=True)
class GrowthSettledness:
    """log_growth read over each of the last two doublings of the flow, on the same scale."""

    last: float  # log_growth itself: the log-t slope of |p_t| over [T/2, T] over its average slope since t_0
    previous: float  # the log-t slope over [T/4, T/2] over the same average
    settled: bool  # |last - previous| <= the tolerance: the statistic has stopped moving

    def metrics(self) -> dict[str, float]:
        return {"log_growth_previous": self.previous, "log_growth_settled": float(self.settled)}


def growth_settledness(times: np.ndarray, p_norm: np.ndarray, tolerance: float = SETTLED_TOLERANCE
                       ) -> GrowthSettledness:
    """Whether log_growth has settled by T: the log-t slope of |p_t| over the last doubling, [T/2, T], and over
    the one before, [T/4, T/2], each over the average slope from t_0 (the flow started to move) to T, agree within
    `tolerance`. A flow still in its transient (accelerating, or passing from one plateau to the next) is not
    settled, and its log_growth says nothing about Lemma 4.2 either way ("not tested: transient").

    Steady growth like log t reads the same on both doublings (about 1 each); a flow converging to a finite point
    reads about 0 on both (like 1/t: the slope halves with each doubling, 2^-k of the average); a flow still
    accelerating reads more on the last doubling than on the one before (|p_t| ~ t^a: 2^a times more). The
    tolerance, 0.1, is fixed by the verdict it protects, not by the data: log_growth is judged against 1/2, half way
    between the two readings 0 and 1, so a statistic that still moves by at most 0.1 per doubling is a fifth of
    that margin from where it was a doubling earlier; it would take five more doublings of the same drift to carry
    a clear reading across the threshold. Fewer than two doublings since t_0, or no average slope: not settled.
    |p_t| that ends no higher than it began reads 0 on both (as log_growth does): settled, no growth."""
    end, half = float(p_norm[-1]), float(p_norm[-1 - RECORDS_PER_DOUBLING])
    quarter = float(p_norm[-1 - 2 * RECORDS_PER_DOUBLING])
    change = end - float(p_norm[0])
    if change <= 0:
        return GrowthSettledness(0.0, 0.0, True)
    recorded, norms = times[1:], p_norm[1:]
    start = int(np.argmax(norms - p_norm[0] >= MOVED * change))
    if recorded[start] > recorded[-1] / 4 or not end > float(norms[start]):
        return GrowthSettledness(log_growth(times, p_norm), float("nan"), False)
    average = (end - float(norms[start])) / math.log(recorded[-1] / recorded[start])
    last, previous = (end - half) / math.log(2) / average, (half - quarter) / math.log(2) / average
    return GrowthSettledness(last, previous, abs(last - previous) <= tolerance)


@dataclass(frozen=True)
class FlowAgreement:
    """The flow against the same run with every step halved, at the same flow times."""

    p_norm_gap: float  # the largest | |p_t| - |p'_t| | / |p'_t| over the records
    loss_gap: float  # the largest |L_t - L'_t| over the records, as a share of the loss's fall from 0 to T
    selection_gap: float  # | selection fraction at T - the halved run's |
    angle: float  # radians between p_T and p'_T

    def faithful(self, tolerance: float) -> bool:
        return max(self.p_norm_gap, self.loss_gap, self.selection_gap, self.angle) <= tolerance

    def metrics(self, tolerance: float) -> dict[str, float]:
        return {"half_step_p_norm_gap": self.p_norm_gap, "half_step_loss_gap": self.loss_gap,
                "half_step_selection_gap": self.selection_gap, "half_step_angle": self.angle,
                "flow_faithful": float(self.faithful(tolerance))}


def agreement(run: Trajectory, finer: Trajectory, selection: float, finer_selection: float) -> FlowAgreement:
    fall = max(float(finer.loss[0] - finer.loss[-1]), 1e-12)
    cos = float(np.clip(cosine(run.p[-1], finer.p[-1]), -1.0, 1.0))
    return FlowAgreement(float(np.max(np.abs(run.p_norm - finer.p_norm) / finer.p_norm)),
                         float(np.max(np.abs(run.loss - finer.loss)) / fall), abs(selection - finer_selection),
                         math.acos(cos))


@dataclass(frozen=True)
class ConvergenceReport:
    # flow_time, loss, p_norm, selection fractions, cos_max_margin_selected, normalized_margin
    history: dict[str, np.ndarray]
    max_margin: MaxMarginSolution
    n_constraints: int
    cos_important: float | None = None  # cos(p_T, p_mm*) for the selection of the important tokens

    def final_metrics(self) -> dict[str, float]:
        last = {name: float(values[-1]) for name, values in self.history.items()}
        p_norm, loss, times = self.history["p_norm"], self.history["loss"], self.history["flow_time"]
        return {
            **last,
            "max_margin_norm": self.max_margin.norm,
            "margin_ratio": last["normalized_margin"] * self.max_margin.norm,
            "p_norm_increasing_fraction": float(np.mean(np.diff(p_norm) > 0)) if len(p_norm) > 1 else float("nan"),
            "loss_decreasing_fraction": float(np.mean(np.diff(loss) <= 0)) if len(loss) > 1 else float("nan"),
            "n_constraints": float(self.n_constraints),
            "log_growth": log_growth(times, p_norm),
            "p_norm_last_doubling": float(p_norm[-1] - p_norm[-1 - RECORDS_PER_DOUBLING]),
            "cos_max_margin_important": self.cos_important,
        }


MAX_QP_CONSTRAINTS = 200_000


def analyse_trajectory(
    trajectory: Trajectory, E: np.ndarray, split: PackedSplit, important: np.ndarray, tol: float,
    max_margin: bool = True, important_direction: bool = True,
) -> ConvergenceReport:
    """Selection along the trajectory and, if `max_margin`, the QP for the final selection and (with
    `important_direction`) the one for the selection of the important tokens, when that is another."""
    def selection(p: np.ndarray) -> np.ndarray:
        return selected_entries(E @ p / np.linalg.norm(p), split, tol)

    selections = [selection(p) for p in trajectory.p]
    pairs = constraint_pairs(selections[-1], split) if max_margin else np.empty((0, 2), dtype=np.int64)
    if len(pairs) > MAX_QP_CONSTRAINTS:
        raise ToksError(f"the max-margin QP would have {len(pairs):,} constraints (limit {MAX_QP_CONSTRAINTS:,}): "
                        "set gradient_flow.max_margin=false for this dataset")
    solution = (solve_max_margin(E, pairs) if max_margin
                else MaxMarginSolution("not requested", None, np.empty((0, E.shape[1]))))
    cos_important = None
    if max_margin and important_direction:
        wanted = constraint_pairs(important[split.bag_tokens], split)
        same = len(wanted) == len(pairs) and np.array_equal(wanted, pairs)
        target = solution if same else solve_max_margin(E, wanted)
        cos_important = cosine(trajectory.p[-1], target.direction) if target.solved else None
    nan = np.full(len(trajectory.times), np.nan)
    history = {
        "flow_time": trajectory.times,
        "loss": trajectory.loss,
        "p_norm": trajectory.p_norm,
        "selection_fraction": np.array([selection_fraction(chosen, important, split) for chosen in selections]),
        "selection_any_fraction": np.array([selection_fraction(chosen, important, split, every=False)
                                            for chosen in selections]),
        # the direction of the QP for the selection the flow ended with (cos_max_margin_important: the QP for the
        # selection of the important tokens, the one Theorem 4.3 is about, when that is another)
        "cos_max_margin_selected": (np.array([cosine(p, solution.direction) for p in trajectory.p])
                                    if solution.solved else nan),
        "normalized_margin": (np.array([normalized_margin(p, solution.differences) for p in trajectory.p])
                              if len(pairs) else nan),
    }
    return ConvergenceReport(history=history, max_margin=solution, n_constraints=len(pairs),
                             cos_important=cos_important)


def importance_scores(scores: np.ndarray, tokens: TokenTable) -> dict[str, float]:
    """Mean E_s^T p over the important tokens and over the least important tenth (smallest |alpha_s|, or
    max_k |alpha_s^(k)| for K classes)."""
    magnitude, present = tokens.importance(), tokens.occurring()
    least = present & (magnitude <= np.quantile(magnitude[present], 0.1))
    return {"score_p_important": float(scores[tokens.important].mean()),
            "score_p_least_important": float(scores[least].mean())}


@dataclass(frozen=True)
class GradientFlowResult:
    trajectory: Trajectory
    halved: Trajectory  # the same run with every step halved
    report: ConvergenceReport
    metrics: dict[str, float]  # the report's final values, the mean E_s^T p_T of important / least important tokens,
    # the steps taken and the agreement with the halved run


class FlowSettings(Protocol):
    """What the flow and its checks read (the gradient_flow section of params.yaml has these fields): theory
    takes them by shape, not from the config."""

    horizon: float  # the flow time T the flow is followed to
    tolerance: float  # the local error a step may make, relative to max(|p|, 1)
    agreement: float  # the flow and its halved run agree when every gap is at most this
    selection_tol: float  # s is selected in X if (p/|p|)^T (E_max - E_s) <= selection_tol
    max_margin: bool  # solve the max-margin QP of Theorem 4.3
    control_penalty: float  # Lemma 4.2's control: the penalty lambda = control_penalty / horizon
    method: str  # the integrator: explicit (gradient steps) or implicit (theory/stiff_flow.py)


def integration_of(settings: FlowSettings, stop_at_cap: bool = False) -> Integration:
    return Integration(settings.horizon, settings.tolerance, settings.method, stop_at_cap=stop_at_cap)


def follow_gradient_flow(E: np.ndarray, p0: np.ndarray, v: np.ndarray, train: PackedSplit, tokens: TokenTable,
                         settings: FlowSettings, observe: Observer | None = None,
                         important_direction: bool = True, stop_at_cap: bool = False) -> GradientFlowResult:
    """The flow on p from p0 with E frozen, on the training split, to flow time settings.horizon; the theory
    checks along the way (without `important_direction`, cos_max_margin_important is left null: a second QP
    that not every caller reads); the same run with its steps halved, and how far the two differ. With
    `stop_at_cap`, a flow that needs more steps than the cap is analysed where it stopped (horizon_reached 0)."""
    bags = FusedBags.from_split(train, tokens.num_classes)
    trajectory = run_gradient_flow(E, p0, v, bags, integration_of(settings, stop_at_cap), observe=observe)
    report = analyse_trajectory(trajectory, E, train, tokens.important, settings.selection_tol, settings.max_margin,
                                important_direction)
    finer = halved(E, p0, v, bags, trajectory)
    finer_selection = selection_fraction(selected_entries(E @ finer.p[-1] / np.linalg.norm(finer.p[-1]), train,
                                                          settings.selection_tol), tokens.important, train)
    check = agreement(trajectory, finer, float(report.history["selection_fraction"][-1]), finer_selection)
    metrics = {**report.final_metrics(), **importance_scores(E @ trajectory.p[-1], tokens),
               **growth_settledness(trajectory.times, trajectory.p_norm).metrics(),
               **check.metrics(settings.agreement), "steps": float(trajectory.steps),
               "rejected_steps": float(trajectory.rejected), "first_step_change": trajectory.first_step_change,
               "horizon_reached": float(trajectory.times[-1] >= settings.horizon)}
    return GradientFlowResult(trajectory, finer, report, metrics)


def control_metrics(E1: np.ndarray, E1_null: np.ndarray, p0: np.ndarray, v: np.ndarray, train: PackedSplit,
                    tokens: TokenTable, settings: FlowSettings, bounded: bool = True) -> dict[str, float | None]:
    """The negative controls of the gradient-flow claims, as control_<metric>: each the same measurement on a
    near miss, a run where everything is as in the claim but the claimed effect.

    - Lemma 4.2 (`bounded`): the same flow over the same horizon on the loss plus lambda/2 |p|^2, which has a
      finite minimiser; lambda = control_penalty / T puts the penalty's time scale at a fraction of the horizon,
      so |p_t| grows like the flow's at first, then levels off at a bound it reaches within the run. A check
      that reads a rise of |p_t| anywhere, or growth before the bound, would pass it.
    - Lemma 4.4 and Theorem 4.3 (when the QP is requested): the flow with E frozen at E1_null, the one step taken
      on labels that carry no signal (one_step's control): E moved as much, but not along alpha_s.
    """
    controls: dict[str, float | None] = {}
    if bounded:
        bags = FusedBags.from_split(train, tokens.num_classes)
        penalty = settings.control_penalty / settings.horizon
        try:
            flow = run_gradient_flow(E1, p0, v, bags, integration_of(settings), penalty=penalty)
            finer = halved(E1, p0, v, bags, flow, penalty=penalty)
            controls |= {"control_log_growth": log_growth(flow.times, flow.p_norm),
                         "control_p_norm": float(flow.p_norm[-1]),
                         "control_flow_faithful": float(agreement(flow, finer, 0.0, 0.0).faithful(settings.agreement))}
        except StepCapReached:  # a control that cannot reach the horizon is not computed
            controls |= dict.fromkeys(("control_log_growth", "control_p_norm", "control_flow_faithful"))
    if settings.max_margin:
        names = ("selection_fraction", "cos_max_margin_important")
        try:
            null = follow_gradient_flow(E1_null, p0, v, train, tokens, settings).metrics
            controls |= {f"control_{name}": null[name] for name in names}
        except StepCapReached:
            controls |= {f"control_{name}": None for name in names}
    return controls
