"""Theory checks along a gradient-flow trajectory: |p_t|, selection (Lemma 4.4), max-margin (Theorem 4.3).

p_mm is solved for the selection made by the final p_T; the cosine and the normalised margin are then
computed for every logged p_t. Theorem 4.3 with Lemma 4.4 says more: the limit direction is the max-margin
direction of the selection of the important tokens, p_mm* (each sequence's important tokens against its
others); cos(p_T, p_mm*) is measured too. Under Assumption 1, once p_T selects exactly the important tokens,
the two coincide.

Lemma 4.2 (|p_t| grows without bound) is read off the growth of |p_t| on a logarithmic time scale: the
increase over the last half of the run against the increase over the quarter before. Growth like log t, the
rate of gradient descent on a loss without a finite minimiser, gives 1; a bounded |p_t| approaching its limit
like 1/t gives 1/2, and one approaching it geometrically far less.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from toksel.data.corpus import PackedSplit
from toksel.data.token_table import TokenTable
from toksel.errors import ToksError
from toksel.models.fused import FusedBags
from toksel.theory.gradient_flow import Trajectory, run_gradient_flow
from toksel.theory.max_margin import (
    MaxMarginSolution,
    constraint_pairs,
    cosine,
    normalized_margin,
    solve_max_margin,
)
from toksel.theory.selection import selected_entries, selection_fraction

GROWTH_CAP = 2.0  # linear growth (normalised steps); beyond it the ratio says no more


def p_norm_growth(steps: np.ndarray, p_norm: np.ndarray, resolution: float = 1e-3) -> float:
    """(|p_T| - |p_{T/2}|) / (|p_{T/2}| - |p_{T/4}|) at the last logged steps at or before T, T/2 and T/4, in
    [0, GROWTH_CAP].

    A fall counts as no growth, and so does a change smaller than resolution |p_T| over half the run: log t
    growth adds |p_T| log 2 / log T there (7 % for T = 20,000), a hundred times more; a flow that has settled
    but still creeps by rounding or along a flat valley gives 0, not the ratio of two tiny changes, and a late
    rise after an early fall the cap. NaN for a run too short to have three distinct points.
    """
    T = int(steps[-1])

    def at(step: int) -> tuple[int, float]:
        index = int(np.searchsorted(steps, step, side="right")) - 1
        return index, float(p_norm[index])

    (first, quarter), (second, half), (third, end) = at(T // 4), at(T // 2), at(T)
    if len({first, second, third}) < 3:
        return float("nan")
    floor = resolution * abs(end)
    late, early = end - half, half - quarter
    if late <= floor:
        return 0.0
    return min(late / max(early, floor), GROWTH_CAP)


@dataclass(frozen=True)
class ConvergenceReport:
    history: dict[str, np.ndarray]  # step, loss, p_norm, selection fractions, cos_max_margin, normalized_margin
    max_margin: MaxMarginSolution
    n_constraints: int
    cos_important: float | None = None  # cos(p_T, p_mm*) for the selection of the important tokens

    def final_metrics(self) -> dict[str, float]:
        last = {name: float(values[-1]) for name, values in self.history.items() if name != "step"}
        p_norm, loss = self.history["p_norm"], self.history["loss"]
        return {
            **last,
            "max_margin_norm": self.max_margin.norm,
            "margin_ratio": last["normalized_margin"] * self.max_margin.norm,
            "p_norm_increasing_fraction": float(np.mean(np.diff(p_norm) > 0)) if len(p_norm) > 1 else float("nan"),
            "loss_decreasing_fraction": float(np.mean(np.diff(loss) < 0)) if len(loss) > 1 else float("nan"),
            "n_constraints": float(self.n_constraints),
            "steps": float(self.history["step"][-1]),
            "p_norm_growth": p_norm_growth(self.history["step"], p_norm),
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
    nan = np.full(len(trajectory.steps), np.nan)
    history = {
        "step": trajectory.steps,
        "loss": trajectory.loss,
        "p_norm": trajectory.p_norm,
        "selection_fraction": np.array([selection_fraction(chosen, important, split) for chosen in selections]),
        "selection_any_fraction": np.array([selection_fraction(chosen, important, split, every=False)
                                            for chosen in selections]),
        "cos_max_margin": np.array([cosine(p, solution.direction) for p in trajectory.p]) if solution.solved else nan,
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
    report: ConvergenceReport
    metrics: dict[str, float]  # the report's final values and the mean E_s^T p_T of important / least important


class FlowSettings(Protocol):
    """What the flow and its checks read (the gradient_flow section of params.yaml has these fields): theory
    takes them by shape, not from the config."""

    steps: int  # GD steps on p
    lr: float  # the step size (the step's length if normalized)
    normalized: bool  # p <- p - lr grad / |grad|
    log_every: int  # record every this many steps
    selection_tol: float  # s is selected in X if (p/|p|)^T (E_max - E_s) <= selection_tol
    max_margin: bool  # solve the max-margin QP of Theorem 4.3
    control_contraction: float  # Lemma 4.2's control: how strongly the penalty contracts p


def follow_gradient_flow(E: np.ndarray, p0: np.ndarray, v: np.ndarray, train: PackedSplit, tokens: TokenTable,
                         settings: FlowSettings, progress: bool = False,
                         important_direction: bool = True) -> GradientFlowResult:
    """GD on p from p0 with E frozen, on the training split, then the theory checks along the way (without
    `important_direction`, cos_max_margin_important is left null: a second QP that not every caller reads)."""
    bags = FusedBags.from_split(train, tokens.num_classes)
    trajectory = run_gradient_flow(E, p0, v, bags, steps=settings.steps, lr=settings.lr,
                                   normalized=settings.normalized, log_every=settings.log_every, progress=progress)
    report = analyse_trajectory(trajectory, E, train, tokens.important, settings.selection_tol, settings.max_margin,
                                important_direction)
    metrics = {**report.final_metrics(), **importance_scores(E @ trajectory.p[-1], tokens)}
    return GradientFlowResult(trajectory, report, metrics)


def control_metrics(E0: np.ndarray, E1: np.ndarray, p0: np.ndarray, v: np.ndarray, train: PackedSplit,
                    tokens: TokenTable, settings: FlowSettings) -> dict[str, float | None]:
    """The negative controls of the gradient-flow claims, as control_<metric>:

    - Lemma 4.2: the same GD on the loss plus lambda/2 |p|^2, which has a finite minimiser, so |p_t| must stop
      growing, for a quarter of the flow's steps (T'); lambda = control_contraction / (lr T'), at most 1/lr (a
      step then lands on -lr grad L), so that the penalty alone would shrink p by e^-control_contraction. It
      must be strong: a weak penalty leaves the loss's own landscape in charge (on IMDB, with e^-20 over the
      whole run, p sat at a saddle near |p| = 3 for 600 steps, then escaped to 7 and still crept on).
      Plain steps only: normalised steps of fixed length circle such a minimiser instead of settling, so with
      gradient_flow.normalized the control is not run (null).
    - Lemma 4.4 and Theorem 4.3 (when the QP is requested): the flow with E frozen at E0, no step taken.
    """
    bags = FusedBags.from_split(train, tokens.num_classes)
    growth = None
    if not settings.normalized:  # a quarter of the flow's steps, logged at its T/4, T/2 and T
        steps = max(4, settings.steps // 4)
        penalised = run_gradient_flow(E1, p0, v, bags, steps=steps, lr=settings.lr, log_every=max(1, steps // 4),
                                      penalty=min(settings.control_contraction / steps, 1.0) / settings.lr)
        growth = p_norm_growth(penalised.steps, penalised.p_norm)
    controls: dict[str, float | None] = {"control_p_norm_growth": growth}
    if settings.max_margin:  # only its end is judged: logged at the start and the end
        no_step = follow_gradient_flow(E0, p0, v, train, tokens, replace(settings, log_every=settings.steps)).metrics
        controls |= {f"control_{name}": no_step[name] for name in ("selection_fraction", "cos_max_margin_important")}
    return controls
