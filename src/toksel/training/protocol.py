"""One protocol for the runs a claim compares: the same learning-rate procedure and stopping rule for every
arm, and each run's negative control.

- Learning rate: the model is trained at every rate of a grid (one rate for the ablations), each trial a fit
  with early stopping on the validation loss within the same epoch budget; the trial with the lowest
  validation loss is kept. Each trial is an MLflow run nested under the stage's, tagged `lr`. A rate at which
  the loss stops being finite loses (a warning, its run FAILED); when every rate does, the stage stops.
- Control: the kept rate again, on the same rows with the labels of both splits shuffled: what the model makes
  of data in which no token goes with a label (its curves are read against the true held-out statistics).
  Each seed shuffles anew (the stages seed the shuffle with base.data_seed and the run's seed), so the
  control's interval over the seeds holds the shuffle's chance too. Its run is tagged `labels`
  `shuffled`; its metrics join the stage's as control_<name>.
"""

from __future__ import annotations

import math
import shutil
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytorch_lightning as pl

from toksel.claims import CONTROL_PREFIX
from toksel.config import TrainConfig
from toksel.distributed import WorkerFinished, is_worker
from toksel.theory.token_curves import BinnedCurve, CurveSettings
from toksel.tracking import StageRun
from toksel.training.classifier import ClassifierModule
from toksel.training.fit import TrainingDiverged, fit
from toksel.training.record import Metrics, summarise

# (learning rate, shuffled labels) -> the model to train and the data to train it on
ModelFactory = Callable[[float, bool], ClassifierModule]
DataFactory = Callable[[bool], pl.LightningDataModule]


@dataclass
class Trained:
    module: ClassifierModule  # the kept trial's model (its best checkpoint)
    metrics: Metrics  # its metrics, with `lr` and the control's as control_<name>
    curves: dict[str, BinnedCurve]
    trials: pd.DataFrame  # one row per learning rate: lr, and every metric of that trial


def validation_loss(metrics: Metrics) -> float:
    value = metrics.get("best_val_loss")
    return math.inf if value is None or not math.isfinite(value) else float(value)


def train_with_control(model: ModelFactory, data: DataFactory, rates: Sequence[float], settings: TrainConfig,
                       checkpoints: Path, fingerprint: str, run: StageRun, seed: int, progress: bool,
                       tokens: pd.DataFrame, curves: CurveSettings, among: np.ndarray | None = None) -> Trained:
    """Fit at every rate, keep the lowest validation loss, then fit the control at that rate."""
    kept: Trained | None = None
    rows: list[dict] = []
    for lr in rates:
        try:
            with run.child(f"lr {lr:g}", {"lr": f"{lr:g}", "labels": "true"}) as trial:
                module = model(lr, False)
                result = fit(module, data(False), settings, checkpoints / f"lr{lr:g}", fingerprint, trial, seed,
                             progress)
                metrics, binned = summarise(module, result, tokens, curves, among)
                trial.log_metrics({name: value for name, value in metrics.items() if name not in result.test})
        except TrainingDiverged as error:
            if len(rows) == len(rates) - 1 and kept is None:
                raise  # every rate diverged: nothing to keep
            warnings.warn(f"learning rate {lr:g} left out: {error}", stacklevel=2)
            rows.append({"lr": lr, "diverged": 1.0})
            continue
        rows.append({"lr": lr, "diverged": 0.0, **metrics})
        if kept is None or validation_loss(metrics) < validation_loss(kept.metrics):
            kept = Trained(module, {"lr": lr, **metrics}, binned, pd.DataFrame())
    assert kept is not None  # the grid is never empty (config), and a grid that only diverged raised above
    lr = float(kept.metrics["lr"])
    with run.child("control: shuffled labels", {"lr": f"{lr:g}", "labels": "shuffled"}) as control:
        module = model(lr, True)
        result = fit(module, data(True), settings, checkpoints / "control", fingerprint, control, seed, progress)
        shuffled, _ = summarise(module, result, tokens, curves, among)
        control.log_metrics({name: value for name, value in shuffled.items() if name not in result.test})
    if is_worker():  # a DDP worker has trained its share of every fit; rank 0 writes the outputs
        raise WorkerFinished
    shutil.rmtree(checkpoints, ignore_errors=True)  # finished: nothing left to resume
    metrics = {**kept.metrics, **{CONTROL_PREFIX + name: value for name, value in shuffled.items()}}
    return Trained(kept.module, metrics, kept.curves, pd.DataFrame(rows))
