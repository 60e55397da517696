"""What a training stage keeps of a fitted model: its metrics, the token curves against the held-out token
statistics (bins.csv) and their figure. Shared by `train`, `ablation` and `d_sweep`.

Besides the token-curve metrics (theory/token_curves.py), every fit's metrics carry how it ended (stopped_epoch,
best_epoch, budget_bound: training/fit.py) and the four spreads of its curves binned by the training split's
statistics instead of the held-out ones (train_binned_bin_spread_v, ..._p, train_binned_bin_std_v, ..._p).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from toksel.data.token_table import TokenTable
from toksel.figures.plots import binned_scores_figure, save_figure
from toksel.runtime.io import write_csv, write_json, write_npz
from toksel.runtime.records import RunRecord
from toksel.theory.token_curves import (
    TRAIN_BINNED,
    BinnedCurve,
    CurveSettings,
    binned_curves,
    heldout_tokens,
    spreads,
    token_curves,
    value_axes,
)
from toksel.training.classifier import ClassifierModule
from toksel.training.fit import EpochMeasure, FitResult

Metrics = dict[str, float | None]


@dataclass(frozen=True)
class TokenReading:
    """What a fitted model's token curves are read over."""

    tokens: TokenTable  # the vocabulary with its held-out and training statistics
    settings: CurveSettings  # bins, binning, the least count of a token and of a bin
    among: np.ndarray | None = None  # the tokens the model trained (a sequence model's); None: every token


@dataclass(frozen=True)
class Fitted:
    module: ClassifierModule
    metrics: Metrics
    curves: dict[str, BinnedCurve]
    history: tuple[dict[str, float], ...] = ()  # the per-epoch log, for the fits that keep one


@dataclass
class Trained:
    module: ClassifierModule  # the kept fit's model (its best checkpoint)
    metrics: Metrics  # its metrics, with `lr` and the control's as control_<name>
    curves: dict[str, BinnedCurve]
    trials: pd.DataFrame  # one row per rate: lr, its screen's metrics (screen_<name>), a full fit's metrics
    epoch_log: pd.DataFrame  # with per_epoch: a row per epoch of the kept and matched fits (column `fit`); else empty


def summarise(module: ClassifierModule, result: FitResult, reading: TokenReading
              ) -> tuple[Metrics, dict[str, BinnedCurve]]:
    """A fitted model's metrics -- the test metrics, loss and accuracy of the best model on the whole splits,
    |p|, |v| and mean |E_s|, the token-curve metrics, the training-binned spreads, epochs and how the fit ended
    (stopped_epoch, best_epoch, budget_bound) -- and its curves (the seconds it took are telemetry: its run shows
    them)."""
    tokens, settings, among = reading.tokens, reading.settings, reading.among
    score_p, score_v = module.token_scores()
    metrics, curves = token_curves(tokens, score_p, score_v, settings, among)
    return {**result.test, **result.fitted, **result.norms, **metrics,
            **train_binned_spreads(tokens, score_p, score_v, settings, among),
            "epochs": float(result.epochs), **result.convergence()}, curves


def train_binned_spreads(tokens: TokenTable, score_p: np.ndarray, score_v: np.ndarray, settings: CurveSettings,
                         among: np.ndarray | None = None) -> dict[str, float]:
    """bin_spread_v, ..._p, bin_std_v, ..._p of the curves binned by the training split's statistic, prefixed
    train_binned_: the same tokens as the held-out curves'."""
    curves = binned_curves(tokens, score_p, score_v, settings, among, binned_on="train")
    return {TRAIN_BINNED + name: value for name, value in spreads(curves).items()}


def epoch_spreads(reading: TokenReading) -> EpochMeasure:
    """The per-epoch log's measure of a model: its four spreads binned on the held-out statistics (the stage's
    curves) and the four binned on the training split's."""

    tokens, settings, among = reading.tokens, reading.settings, reading.among

    def measure(module: ClassifierModule) -> dict[str, float]:
        score_p, score_v = module.token_scores()
        heldout = spreads(binned_curves(tokens, score_p, score_v, settings, among))
        return heldout | train_binned_spreads(tokens, score_p, score_v, settings, among)

    return measure


def record_fit(run: RunRecord, out: Path, trained: Trained, reading: TokenReading, title: str, about: dict[str, object],
               score_label: str = "$E_s^T p$") -> None:
    """Write bins.csv, token_scores.png, the kept model and metrics.json into `out` and log them; `about`: what
    the model is (stage, dataset, arm or variant, seed, learning rate).

    The model is kept as model.npz (a DVC output; also artifacts of the run): its trained parameters in float32
    (E only where it was trained; a frozen E is the seed's E0 or its E1) and each token's score E_s^T p and value
    E_s^T v (v_k), all the one-layer model needs to read a review (models/reading.py); model.json says what it is.
    """
    module, curves, tokens = trained.module, trained.curves, reading.tokens
    # One row per bin; columns centre_<curve>, count_<curve>, mean_<curve>, std_<curve> (curves p, v or v_class_k).
    write_csv(out / "bins.csv", pd.concat([curve.as_frame().add_suffix(f"_{name}") for name, curve in curves.items()],
                                          axis=1))
    score_p, score_v = module.token_scores()
    kept = heldout_tokens(tokens, reading.settings.min_count, reading.among)
    save_figure(binned_scores_figure(_panels(tokens, kept, score_p, score_v, curves, score_label), title),
                out / "token_scores.png")
    parameters = {name.replace(".", "/"): parameter.detach().cpu().float().numpy()
                  for name, parameter in module.named_parameters()}
    write_npz(out / "model.npz", scores=score_p, values=score_v, **parameters)
    write_json(out / "model.json", {**about, "parameters": sorted(parameters),
                                    "vocabulary": tokens.vocabulary_digest()})
    run.log_artifact(out / "token_scores.png")
    run.log_artifact(out / "bins.csv")
    run.log_artifact(out / "model.npz", "model")
    run.log_artifact(out / "model.json", "model")
    run.record_metrics(out / "metrics.json", trained.metrics)


def _panels(tokens: TokenTable, kept: np.ndarray, score_p: np.ndarray, score_v: np.ndarray,
            curves: dict[str, BinnedCurve], score_label: str) -> list:
    """Figure panels: the <cls> score over the held-out posterior difference, then E_s^T v (each v_k) along its
    curve's axis."""
    x = tokens.column("heldout_posterior_difference")[kept]
    return [(x, score_p[kept], curves["p"].as_frame(), "posterior difference (held-out)", score_label),
            *((axis.x, axis.scores, curves[f"v{axis.suffix}"].as_frame(), axis.x_label, axis.score_label)
              for axis in value_axes(tokens, kept, score_v))]
