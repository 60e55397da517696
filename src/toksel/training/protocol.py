"""One protocol for the runs a claim compares: the same learning-rate procedure and stopping rule for every
arm, and each run's negative control.

- Learning rate, chosen the same way for every arm: each rate of the grid first trains `screen_epochs` epochs (the
  screen); when the rate with the lowest validation loss is the grid's smallest or largest, the grid is extended
  beyond it by its own spacing, up to `lr_extensions` times, so that the chosen rate lies inside the rates tried
  (`lr_at_edge` says when it still does not). The screen's best `converged_candidates` rates are then each trained
  from their start under the stopping rule (early stopping on the validation loss, within the epoch budget
  max_epochs, which these fits should not reach), and the one with the lowest converged validation loss is kept:
  the kept model, its best epoch on validation, which the claims read (`lr_screened` is the screen's own choice,
  `lr_moved` whether convergence chose another). A candidate the epoch budget stopped has no converged loss: it is
  kept only where no candidate converged (`lr_candidates_budget_bound` counts them). The rate the matched-lr
  protocol reads (train.lr) is trained the same way, when it is not the kept one, within its own budget
  matched_max_epochs (the rebuttal's one rate for every arm, a reading shown beside the claims: at lr 1e-3 the
  frozen arms do not converge within it). A full fit's first epochs repeat the screen's exactly (the
  same initialisation and batches); each fit keeps its own checkpoints, so a fit killed at any point goes on from
  its own (training/fit.py). A single rate (the ablations) skips the screen. A rate at which the loss stops being
  finite loses the screen (a warning, its run FAILED); when every rate does, the stage stops. Every fit is an
  MLflow run nested under the stage's, tagged `lr` and `phase` (screen, kept, matched).
- Convergence: every fit's metrics say the epoch it stopped at, the epoch of its lowest validation loss and
  whether the budget rather than early stopping ended it (stopped_epoch, best_epoch, budget_bound: a fit the
  budget ended had not converged, its validation loss still falling). With `per_epoch` (the train stage), the
  kept and matched fits also log every epoch (Trained.epoch_log): train, validation and test loss and accuracy and
  the curves' spreads, binned on the held-out and on the training statistics. The test split there only draws
  curves against epochs: the stop and the kept model read the validation split alone.
- Control: the kept rate (the claims' own fit) on the same rows with the training labels shuffled, scored on the
  true test labels: a near miss, a model trained as the claim's own is on labels that carry no signal (its
  curves are read against the true held-out statistics). Each seed shuffles anew (the stages seed the shuffle
  with base.data_seed and the run's seed), so the control's interval over the seeds holds the shuffle's chance too.

A screen of a few epochs ranks the rates mostly as the full fits would (on IMDB the frozen arms' best rate converges
fastest, and the trained arm's best is at its best by the second epoch), but it favours a rate that learns fast over
a slower one that converges lower: on Yelp the trained arm's screen picks 0.01, where 1e-3 converges to a lower
validation loss. Hence the choice by converged validation loss among the screen's best few; a rate the screen ranks
below them is not trained to convergence (its cost), which `converged_candidates` can lift.
"""

from __future__ import annotations

import dataclasses
import math
import shutil
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pandas as pd
import pytorch_lightning as pl

from toksel.claims.catalogue import CONTROL_PREFIX
from toksel.claims.protocols import CONVERGED_PREFIX, SCREEN_PREFIX
from toksel.runtime.distributed import is_worker
from toksel.training.classifier import ClassifierModule
from toksel.training.fit import FitPlan, FitResult, TrainingDiverged, fit
from toksel.training.record import Fitted, Metrics, TokenReading, Trained, epoch_spreads, summarise

# (learning rate, shuffled labels) -> the model to train and the data to train it on
ModelFactory = Callable[[float, bool], ClassifierModule]
DataFactory = Callable[[bool], pl.LightningDataModule]


# the fits a per-epoch log follows (a candidate may be the kept one): not the screens or the control (they cost)
LOGGED_PHASES = ("kept", "candidate", "matched")


def validation_loss(metrics: Metrics) -> float:
    value = metrics.get("best_val_loss")
    return math.inf if value is None or not math.isfinite(value) else float(value)


@dataclass(frozen=True)
class Protocol:
    """The fits of one stage's model: each an MLflow run nested under the plan's run, its checkpoints in a folder of
    its own under the plan's."""

    model: ModelFactory
    data: DataFactory
    plan: FitPlan  # the stage's: its settings, checkpoints folder, fingerprint, run, seed and progress bar
    reading: TokenReading  # what each fit's token curves are read over
    per_epoch: bool = False  # the kept and matched fits log every epoch (Trained.epoch_log)
    extra: Callable[[ClassifierModule], dict[str, float]] | None = None  # the stage's own measures of every fit

    def fit(self, lr: float, phase: str, shuffled: bool = False, epochs: int | None = None) -> Fitted:
        """One fit at `lr` (within `epochs`, else the budget), logged as its own run; the module and metrics."""
        plan = self.plan
        settings = plan.settings if epochs is None else dataclasses.replace(plan.settings, max_epochs=epochs)
        labels, phase = ("shuffled", "control") if shuffled else ("true", phase)
        name = "control: shuffled labels" if shuffled else f"lr {lr:g} ({phase})"
        # A folder per fit: a screen, a full fit at a rate, or the control.
        folder = plan.checkpoints / (f"control-lr{lr:g}" if shuffled else f"lr{lr:g}-{phase}")
        ran_with = {"train.lr": lr, "train.max_epochs": settings.max_epochs, "labels": labels}
        logged = self.per_epoch and phase in LOGGED_PHASES
        with plan.run.child(name, {"lr": f"{lr:g}", "labels": labels, "phase": phase}, ran_with) as trial:
            module = self.model(lr, shuffled)
            result = fit(module, self.data(shuffled),
                         dataclasses.replace(plan, settings=settings, checkpoints=folder, run=trial),
                         per_epoch=epoch_spreads(self.reading) if logged else None)
            metrics, curves = summarise(module, result, self.reading)
            metrics |= self.extra(module) if self.extra is not None else {}
            trial.log_metrics({name: value for name, value in metrics.items() if name not in result.test})
            trial.log_metrics({"seconds": result.seconds, "measure_seconds": result.measure_seconds})
        if not is_worker():
            print(f"{trial.label}: {_ending(result)}, validation loss {validation_loss(metrics):.4g}, test accuracy "
                  f"{result.test.get('test_accuracy', math.nan):.4f}, {result.seconds:.1f} s"
                  + (f" ({result.measure_seconds:.1f} s of per-epoch tests and spreads)" if logged else ""),
                  flush=True)
        return Fitted(module, metrics, curves, result.history)


def _ending(result: FitResult) -> str:
    """How a fit ended, in words: its epochs, where it was best, whether the budget stopped it, a resume."""
    bound = ", the epoch budget ended it" if result.budget_bound else ""
    resumed = "" if result.resumed_from_epoch is None else f", resumed from epoch {result.resumed_from_epoch}"
    return f"{result.epochs} epochs (best {result.best_epoch}{bound}){resumed}"


def _rounded(rate: float) -> float:
    """A rate as a person writes it: 0.1, not 0.09999999999999996 (it names a checkpoint folder)."""
    return float(f"{rate:.6g}")


def screen(protocol: Protocol, rates: Sequence[float], extensions: int = 0) -> tuple[float, list[dict], bool]:
    """Each rate for screen_epochs epochs, the grid extended beyond its edge while the best rate sits there (up to
    `extensions` more rates): the rate with the lowest validation loss, a row per rate with the screen's metrics
    (screen_<name>), and whether that rate is still the smallest or largest tried."""
    rows: list[dict] = []

    def try_rate(lr: float) -> None:
        try:
            fitted = protocol.fit(lr, "screen", epochs=protocol.plan.settings.screen_epochs)
        except TrainingDiverged as error:
            warnings.warn(f"learning rate {lr:g} left out: {error}", stacklevel=2)
            rows.append({"lr": lr, "diverged": 1.0, "screen_val_loss": math.inf})
            return
        rows.append({"lr": lr, "diverged": 0.0, "screen_val_loss": validation_loss(fitted.metrics),
                     **{SCREEN_PREFIX + name: value for name, value in fitted.metrics.items()}})

    def best() -> float | None:
        finite = [row for row in rows if math.isfinite(row["screen_val_loss"])]
        return min(finite, key=lambda row: row["screen_val_loss"])["lr"] if finite else None

    for lr in rates:
        try_rate(lr)
    for _ in range(extensions if len(rates) > 1 else 0):
        tried, chosen = sorted(row["lr"] for row in rows), best()
        if chosen == tried[0]:
            try_rate(_rounded(tried[0] ** 2 / tried[1]))  # one more step of the grid's own spacing, below
        elif chosen == tried[-1]:
            try_rate(_rounded(tried[-1] ** 2 / tried[-2]))  # and above
        else:
            break
    chosen = best()
    if chosen is None:
        raise TrainingDiverged(f"training diverged at every learning rate of train.lr_grid = {list(rates)}: lower "
                               "the learning rate (train.lr or train.lr_grid)")
    tried = sorted(row["lr"] for row in rows)
    return chosen, sorted(rows, key=lambda row: row["lr"]), chosen in (tried[0], tried[-1])


def candidates(rows: Sequence[dict], count: int) -> list[float]:
    """The screen's best `count` rates, by their screen's validation loss (the diverged left out)."""
    finite = sorted((row for row in rows if math.isfinite(row["screen_val_loss"])),
                    key=lambda row: row["screen_val_loss"])
    return [row["lr"] for row in finite[:count]]


def converged_choice(protocol: Protocol, rates: Sequence[float]) -> tuple[float, Fitted, dict[float, Fitted]]:
    """Each rate trained to convergence under the stopping rule: the rate with the lowest converged validation loss,
    its fit, and every rate's fit (a rate that diverges drops out with a warning). A fit the epoch budget ended has
    no converged loss (it was still falling): it is chosen only when no candidate converged."""
    phase = "kept" if len(rates) == 1 else "candidate"
    fitted = {}
    for lr in rates:
        try:
            fitted[lr] = protocol.fit(lr, phase)
        except TrainingDiverged as error:
            if len(rates) == 1:
                raise
            warnings.warn(f"learning rate {lr:g} left out of the choice: {error}", stacklevel=2)
    if not fitted:
        raise TrainingDiverged(f"training diverged at every candidate rate {list(rates)}: lower train.lr_grid")
    converged = [lr for lr in fitted if not fitted[lr].metrics.get("budget_bound")] or list(fitted)
    chosen = min(converged, key=lambda lr: validation_loss(fitted[lr].metrics))
    return chosen, fitted[chosen], fitted


def train_with_control(protocol: Protocol, rates: Sequence[float], matched: float | None = None,
                       control: bool = True) -> Trained:
    """Screen the rates, fit the screen's best few under the stopping rule and keep the lowest converged validation
    loss (and fit `matched`, the matched-lr protocol's rate, within matched_max_epochs), then (with `control`) the
    control at the kept rate."""
    settings = protocol.plan.settings
    if len(rates) > 1:
        screened_lr, rows, at_edge = screen(protocol, rates, settings.lr_extensions)
        kept_lr, kept, full = converged_choice(protocol, candidates(rows, settings.converged_candidates))
    else:
        screened_lr, rows, at_edge = rates[0], [{"lr": rates[0], "diverged": 0.0}], False
        kept_lr, kept, full = converged_choice(protocol, rates)
    matched_fit = None
    if matched is not None and matched != kept_lr:  # its own budget, even where a candidate trained at its rate
        try:
            matched_fit = protocol.fit(matched, "matched", epochs=settings.matched_max_epochs)
        except TrainingDiverged as error:
            warnings.warn(f"the matched-lr protocol's rate {matched:g} diverged: {error}", stacklevel=2)
    # A rate's row: a candidate's converged fit as converged_<name>; the kept fit's metrics, or the matched-lr
    # protocol's fit at train.lr (what that protocol reads), unprefixed.
    for row in rows:
        if row["lr"] in full:
            row |= {CONVERGED_PREFIX + name: value for name, value in full[row["lr"]].metrics.items()}
        if row["lr"] == kept_lr:
            row |= kept.metrics
        elif matched_fit is not None and row["lr"] == matched:
            row |= matched_fit.metrics
    controls = {}
    if control:
        shuffled = protocol.fit(kept_lr, "control", shuffled=True)  # the claims' own fit, on labels without signal
        controls = {CONTROL_PREFIX + name: value for name, value in shuffled.metrics.items()}
    if not is_worker():  # a DDP worker goes on to the stage's next fit with rank 0; rank 0 owns the files
        shutil.rmtree(protocol.plan.checkpoints, ignore_errors=True)  # finished: nothing left to resume
    screened = {"lr_at_edge": float(at_edge), "lr_rates_tried": float(len(rows)), "lr_screened": screened_lr,
                "lr_moved": float(kept_lr != screened_lr),
                "lr_candidates_budget_bound": float(sum(bool(item.metrics.get("budget_bound"))
                                                        for item in full.values()))}
    return Trained(kept.module, {"lr": kept_lr, **screened, **kept.metrics, **controls}, kept.curves,
                   pd.DataFrame(rows), epoch_frame(kept, kept if matched == kept_lr else matched_fit))


def epoch_frame(kept: Fitted, matched: Fitted | None) -> pd.DataFrame:
    """The per-epoch logs of the kept fit and the matched-lr one, a column `fit` saying which: one frame for the
    figure of accuracy against epochs at both rates. When train.lr is the kept rate, the one fit's rows appear under
    both names, so that a reader finds each protocol's fit by its name. Empty without per-epoch logs."""
    frames = [pd.DataFrame(list(fitted.history)).assign(fit=name) for name, fitted in (("kept", kept),
              ("matched", matched)) if fitted is not None and fitted.history]
    if not frames:
        return pd.DataFrame()
    log = pd.concat(frames, ignore_index=True)
    log["epoch"] = log["epoch"].astype(int)
    return log[["fit", *(column for column in log.columns if column != "fit")]]
