"""What a training stage keeps of a fitted model: the token curves against the token statistics (bins.csv),
their figure, and the metrics (metrics.json and MLflow). Shared by `train` and `ablation`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from toksel.data.token_table import class_alphas, num_classes, occurring
from toksel.io import write_csv
from toksel.plots import binned_scores_figure, save_figure
from toksel.theory.token_curves import BinnedCurve, token_curves
from toksel.tracking import StageRun
from toksel.training.classifier import ClassifierModule
from toksel.training.fit import FitResult


def record_fit(run: StageRun, out: Path, module: ClassifierModule, result: FitResult, tokens: pd.DataFrame,
               bins: int, title: str, among: np.ndarray | None = None, extra: dict[str, float] | None = None,
               score_label: str = "$E_s^T p$") -> dict[str, float | None]:
    """Write bins.csv, token_scores.png and metrics.json into `out`, log them, and return the metrics.

    The curves use the tokens that occur in training (and are in `among`, if given); score_label names the
    <cls> score in the figure.
    """
    score_p, score_v = module.token_scores()
    metrics, curves = token_curves(tokens, score_p, score_v, bins, among)
    # One row per bin; columns centre_<curve>, count_<curve>, mean_<curve>, std_<curve> (curves p, v or v_class_k).
    write_csv(out / "bins.csv", pd.concat([curve.as_frame().add_suffix(f"_{name}") for name, curve in curves.items()],
                                          axis=1))
    present = occurring(tokens) if among is None else occurring(tokens) & among
    save_figure(binned_scores_figure(_panels(tokens, present, score_p, score_v, curves, score_label), title),
                out / "token_scores.png")
    run.log_artifact(out / "token_scores.png", "figures")
    run.log_artifact(out / "bins.csv")
    # best_train_/best_val_ loss and accuracy: the tested (best) model on the whole splits; MLflow also has the
    # per-epoch curves train_loss_epoch, val_loss, ...
    final = {**result.test, **result.fitted, **metrics, **(extra or {}), "epochs": float(result.epochs),
             "seconds": result.seconds,
             "resumed_from_epoch": None if result.resumed_from_epoch is None else float(result.resumed_from_epoch)}
    run.record_metrics(out / "metrics.json", final, logged=result.test)
    return final


def _panels(tokens: pd.DataFrame, present: np.ndarray, score_p: np.ndarray, score_v: np.ndarray,
            curves: dict[str, BinnedCurve], score_label: str) -> list:
    """Figure panels: the <cls> score over the posterior difference, then E_s^T v (each v_k over alpha_s^(k))."""
    x = tokens["posterior_difference"].to_numpy()[present]
    panels = [(x, score_p[present], curves["p"].as_frame(), "posterior difference", score_label)]
    if num_classes(tokens) == 2:
        return [*panels, (x, score_v[present], curves["v"].as_frame(), "posterior difference", "$E_s^T v$")]
    alphas = class_alphas(tokens)[:, present]
    return [*panels, *((alphas[k], score_v[present, k], curves[f"v_class_{k}"].as_frame(),
                        rf"$\alpha_s^{{({k})}}$", f"$E_s^T v_{{{k}}}$") for k in range(len(alphas)))]
