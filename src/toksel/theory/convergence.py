"""Theory checks along a gradient-flow trajectory: |p_t|, selection (Lemma 4.4), max-margin (Theorem 4.3).

p_mm is solved for the selection made by the final p_T; the cosine and the normalised margin are then
computed for every logged p_t.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from toksel.config import GradientFlowConfig
from toksel.data.corpus import PackedSplit
from toksel.data.token_table import importance, num_classes, occurring
from toksel.errors import ToksError
from toksel.models.fused import FusedBags
from toksel.theory.max_margin import (
    MaxMarginSolution,
    constraint_pairs,
    cosine,
    normalized_margin,
    solve_max_margin,
)
from toksel.theory.selection import selected_entries, selection_fraction
from toksel.training.gradient_flow import Trajectory, run_gradient_flow


@dataclass(frozen=True)
class ConvergenceReport:
    history: dict[str, np.ndarray]  # step, loss, p_norm, selection fractions, cos_max_margin, normalized_margin
    max_margin: MaxMarginSolution
    n_constraints: int

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
        }


MAX_QP_CONSTRAINTS = 200_000


def analyse_trajectory(
    trajectory: Trajectory, E: np.ndarray, split: PackedSplit, important: np.ndarray, tol: float,
    max_margin: bool = True,
) -> ConvergenceReport:
    """Selection along the trajectory and, if `max_margin`, the QP for the final selection."""
    def selection(p: np.ndarray) -> np.ndarray:
        return selected_entries(E @ p / np.linalg.norm(p), split, tol)

    selections = [selection(p) for p in trajectory.p]
    pairs = constraint_pairs(selections[-1], split) if max_margin else np.empty((0, 2), dtype=np.int64)
    if len(pairs) > MAX_QP_CONSTRAINTS:
        raise ToksError(f"the max-margin QP would have {len(pairs):,} constraints (limit {MAX_QP_CONSTRAINTS:,}): "
                        "set gradient_flow.max_margin=false for this dataset")
    solution = (solve_max_margin(E, pairs) if max_margin
                else MaxMarginSolution("not requested", None, np.empty((0, E.shape[1]))))
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
    return ConvergenceReport(history=history, max_margin=solution, n_constraints=len(pairs))


def importance_scores(scores: np.ndarray, tokens: pd.DataFrame) -> dict[str, float]:
    """Mean E_s^T p over the important tokens and over the least important tenth (smallest |alpha_s|, or
    max_k |alpha_s^(k)| for K classes)."""
    magnitude, present = importance(tokens), occurring(tokens)
    least = present & (magnitude <= np.quantile(magnitude[present], 0.1))
    return {"score_p_important": float(scores[tokens["important"].to_numpy(dtype=bool)].mean()),
            "score_p_least_important": float(scores[least].mean())}


@dataclass(frozen=True)
class GradientFlowResult:
    trajectory: Trajectory
    report: ConvergenceReport
    metrics: dict[str, float]  # the report's final values and the mean E_s^T p_T of important / least important


def follow_gradient_flow(E: np.ndarray, p0: np.ndarray, v: np.ndarray, train: PackedSplit, tokens: pd.DataFrame,
                         settings: GradientFlowConfig, progress: bool = False) -> GradientFlowResult:
    """GD on p from p0 with E frozen, on the training split, then the theory checks along the way."""
    bags = FusedBags.from_split(train, num_classes(tokens))
    trajectory = run_gradient_flow(E, p0, v, bags, steps=settings.steps, lr=settings.lr,
                                   normalized=settings.normalized, log_every=settings.log_every, progress=progress)
    important = tokens["important"].to_numpy(dtype=bool)
    report = analyse_trajectory(trajectory, E, train, important, settings.selection_tol, settings.max_margin)
    metrics = {**report.final_metrics(), **importance_scores(E @ trajectory.p[-1], tokens)}
    return GradientFlowResult(trajectory, report, metrics)
