"""Fitting a classifier (training/classifier.py) with Lightning: early stopping on the validation loss, the best
and the last checkpoint, resume after an interruption, a clear stop when the loss stops being finite, and
metrics into the stage's own MLflow run.

With train.strategy=ddp, Lightning runs one process per device (train.devices x train.num_nodes); each
trains on its share of every batch (training/data.py) and DDP averages the gradients, which for equal shares is
the gradient of the whole batch: the fit matches one process's. Every process validates and tests on all rows,
so early stopping and the best checkpoint agree everywhere. Every process goes through the same fits; only rank
0 writes outputs and logs (a worker goes through the stage to its end and writes nothing: runtime/cli.py).

A fit killed at any point and run again ends as the uninterrupted fit does, bit for bit: it goes on from its last
checkpoint (last.ckpt, written after every epoch: weights, optimiser, loop and callback states), and the order of
each epoch's batches is drawn from (seed, epoch) (training/data.py), not from a generator that a new process would
start anew. A checkpoint is trusted by what it records (the fit's key and whether the fit had stopped), never by
file times.

Every fit records how it ended: the epochs it trained (stopped_epoch), the epoch of its lowest validation loss
(best_epoch, the model it keeps and tests) and whether the epoch budget rather than early stopping ended it
(budget_bound: the validation loss was still falling within the last `patience` epochs, so the fit had not
converged). A fit may also be measured after every training epoch (`per_epoch`): the test split evaluated (for
the curves against epochs only: early stopping and the kept model read the validation split alone) and the caller's
measures of the model then. These records live in the checkpoints' callback states, so a resumed fit ends with
the uninterrupted fit's.
"""

from __future__ import annotations

import logging
import math
import shutil
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import EarlyStopping, ModelCheckpoint
from pytorch_lightning.loggers import Logger
from pytorch_lightning.utilities import rank_zero_only

from toksel.params import TrainConfig
from toksel.runtime.config import params_hash
from toksel.runtime.distributed import is_worker
from toksel.runtime.errors import ToksError, raise_if_stopped
from toksel.runtime.io import file_sha256
from toksel.runtime.known_warnings import silence_known_warnings
from toksel.runtime.memory import keep_freed_memory
from toksel.runtime.records import RunRecord
from toksel.training.classifier import ClassifierModule
from toksel.training.data import PackedDataModule
from toksel.training.device import require_on


def parameter_dtype(precision: str) -> torch.dtype:
    """The dtype the parameters are created in for Lightning's `precision`."""
    return torch.float64 if precision == "64-true" else torch.float32


RECORD = "toksel"  # the checkpoint's entry that says which fit it belongs to


def checkpoint_dir(stage: str, variant: str) -> Path:
    """Lightning's checkpoints of an unfinished run; not a DVC output, so DVC leaves them for a resume."""
    return Path("checkpoints") / stage / variant


class StageLogger(Logger):
    """Lightning's per-step metrics into the fit's run record (runtime/records.py). The stage, not Lightning, ends
    the run."""

    def __init__(self, run: RunRecord) -> None:
        super().__init__()
        self.run = run

    @property
    def name(self) -> str:
        return "toksel"

    @property
    def version(self) -> str:
        return self.run.name

    @rank_zero_only
    def log_hyperparams(self, params: object, *args: object, **kwargs: object) -> None:
        pass  # the stage logs its parameters itself

    @rank_zero_only
    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self.run.log_metrics(metrics, step or 0)


# (the model after a training epoch) -> the caller's measures of it, for the per-epoch log
EpochMeasure = Callable[[ClassifierModule], dict[str, float]]
EPOCH_PREFIX = "epoch_"  # the per-epoch log's curves in the run record: apart from Lightning's and the final values


@dataclass(frozen=True)
class FitResult:
    epochs: int  # epochs trained in all, resumed ones included
    resumed_from_epoch: int | None  # where an interrupted fit was picked up; None for a fresh start
    seconds: float  # this process's fit and test
    test: dict[str, float]  # test_loss, test_accuracy and the test attention metrics
    fitted: dict[str, float]  # best_train_loss, ..._accuracy, best_val_...: the best model on the whole splits
    norms: dict[str, float]  # norm_p, norm_v, mean_norm_E of the best model
    best_epoch: int = 0  # 1-based epoch of the lowest validation loss: the model kept and tested
    budget_bound: bool = False  # max_epochs ended the fit, not early stopping: the validation loss was still falling
    history: tuple[dict[str, float], ...] = field(default=())  # with per_epoch: a row per epoch trained
    measure_seconds: float = 0.0  # this process's share of `seconds` spent on the per-epoch measures
    device: str = "cpu"  # where it trained, and where the module is left for the readings after the fit

    @property
    def stopped_epoch(self) -> int:
        """Epochs trained in all (1-based: the last epoch trained)."""
        return self.epochs

    def convergence(self) -> dict[str, float]:
        """stopped_epoch, best_epoch and budget_bound (1.0 or 0.0) as metrics."""
        return {"stopped_epoch": float(self.stopped_epoch), "best_epoch": float(self.best_epoch),
                "budget_bound": float(self.budget_bound)}


@dataclass(frozen=True)
class Resume:
    checkpoint: Path  # last.ckpt of the interrupted fit
    epoch: int  # the first epoch still to train
    stopped: bool  # the fit had stopped early: nothing is left to train, only the test


class RecordFit(pl.Callback):
    """Writes into every checkpoint the fit's key and whether the fit has stopped early. Lightning runs the
    checkpoint callbacks after the others, so early stopping has decided by the time the checkpoint is written."""

    def __init__(self, key: str) -> None:
        self.key = key

    def on_save_checkpoint(self, trainer: pl.Trainer, module: pl.LightningModule, checkpoint: dict) -> None:
        checkpoint[RECORD] = {"key": self.key, "stopped": bool(trainer.should_stop)}


def fit_key(settings: dict, rows: Path) -> str:
    """The key of a fit's checkpoints: the digest of the settings it ran with and of its training rows."""
    return params_hash(settings) + file_sha256(rows)[:16]


def resumable_checkpoint(folder: Path, key: str) -> Resume | None:
    """Where a fit with this key that a stopped process left got to (folder/<key>/last.ckpt), or None.

    A fit's checkpoints live in the folder named by its key (the caller's digest of its parameters and inputs).
    What the checkpoint records decides: one that cannot be read (a kill while it was being written), or that
    records another key or none, is removed with the folder, and the fit starts afresh. DDP workers start after
    rank 0 has sorted the folder out, and leave it as they find it."""
    last = folder / key / "last.ckpt"
    if last.exists():
        try:
            state = torch.load(last, map_location="cpu", weights_only=False)
            record = state.get(RECORD, {})
            if record.get("key") == key:
                return Resume(last, int(state["epoch"]) + 1, bool(record.get("stopped")))
            warnings.warn(f"{last} records another fit: training starts afresh", stacklevel=2)
        except Exception as error:  # noqa: BLE001 (whatever makes it unreadable: start afresh)
            warnings.warn(f"{last} cannot be read ({type(error).__name__}): training starts afresh", stacklevel=2)
    if is_worker():
        return None
    shutil.rmtree(folder, ignore_errors=True)
    (folder / key).mkdir(parents=True)
    return None


class TrainingDiverged(ToksError):
    """The training loss stopped being finite: the learning rate is too large."""


class StopOnNonFiniteLoss(pl.Callback):
    """Stop with a clear error once a training loss is NaN or infinite (every DDP process at the same step).

    A step does not wait for the device to say so: the first non-finite step and its loss are kept on the device,
    and read once, at the epoch's last batch (before its validation and checkpoint, so no diverged model is
    saved). A diverged fit trains out that epoch for nothing, and stops as it did, with the step it diverged at."""

    def on_train_epoch_start(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        self.first_step = self.first_loss = None

    def on_train_batch_end(self, trainer: pl.Trainer, module: pl.LightningModule, outputs: object, batch: object,
                           batch_idx: int) -> None:
        loss = (outputs["loss"] if isinstance(outputs, dict) else outputs).detach()
        if self.first_step is None:
            self.first_step = torch.full((), -1, dtype=torch.long, device=loss.device)
            self.first_loss = torch.zeros((), dtype=loss.dtype, device=loss.device)
        first = ~torch.isfinite(loss).all() & (self.first_step < 0)
        self.first_step = torch.where(first, trainer.global_step, self.first_step)
        self.first_loss = torch.where(first, loss, self.first_loss)
        if batch_idx + 1 < trainer.num_training_batches:
            return
        step = int(self.first_step)  # the epoch's one wait for the device
        if trainer.strategy.reduce_boolean_decision(step < 0, all=True):
            return
        raise TrainingDiverged(f"training diverged: the loss became {float(self.first_loss)} at epoch "
                               f"{trainer.current_epoch}, step {step} (lr {module.lr}): lower the learning rate "
                               "(train.lr or train.lr_grid)")


class StopWhenAsked(pl.Callback):
    """A stop (SIGTERM, Ctrl-C) whose first raise was lost (runtime/errors.py) stops the fit at the next step."""

    def on_train_batch_end(self, trainer: pl.Trainer, module: pl.LightningModule, outputs: object, batch: object,
                           batch_idx: int) -> None:
        raise_if_stopped()


class LogNorms(pl.Callback):
    """|p|, |v| and the mean |E_s| after every training epoch (MLflow curves norm_p, norm_v, mean_norm_E)."""

    def on_train_epoch_end(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        for name, value in module.norms().items():
            module.log(name, value, on_epoch=True, sync_dist=False)


class EpochLog(pl.Callback):
    """After every training epoch (its validation done): the epoch of the lowest validation loss so far and, with
    `measure`, a row of the per-epoch log: epoch, lr, train and validation loss and accuracy, the test split's, and
    `measure`'s values. Its state goes into every checkpoint (it runs before the checkpoint callback, which
    Lightning runs last), so a resumed fit keeps the rows and best epoch of the epochs it does not repeat."""

    def __init__(self, measure: EpochMeasure | None = None) -> None:
        self.measure = measure
        self.best_epoch, self.best_loss = 0, math.inf
        self.rows: list[dict[str, float]] = []
        self.seconds = 0.0  # this process's time in the measures (telemetry: not kept in the checkpoint)

    def on_train_epoch_end(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        metrics, epoch = trainer.callback_metrics, trainer.current_epoch + 1
        val_loss = _number(metrics.get("val_loss"))
        if val_loss < self.best_loss:  # strictly lower, as the checkpoint callback keeps its best
            self.best_epoch, self.best_loss = epoch, val_loss
        if self.measure is None or not trainer.is_global_zero:  # rank 0 alone writes the log
            return
        start = time.perf_counter()
        row = {"epoch": float(epoch), "lr": float(module.lr), "train_loss": _number(metrics.get("train_loss_epoch")),
               "val_loss": val_loss, "val_accuracy": _number(metrics.get("val_accuracy"))}
        # The test split at this epoch, for the curves against epochs: nothing here chooses a model or a stop.
        with torch.random.fork_rng(devices=[]), _evaluation_mode(module):  # a loader draws from the global RNG
            tested = full_pass(module, trainer.datamodule, "test", trainer.strategy.root_device)
            row |= {"test_loss": tested["loss"], "test_accuracy": tested["accuracy"], **self.measure(module)}
        self.rows.append(row)
        self.seconds += time.perf_counter() - start

    def state_dict(self) -> dict:
        return {"best_epoch": self.best_epoch, "best_loss": self.best_loss, "rows": self.rows}

    def load_state_dict(self, state_dict: dict) -> None:
        self.best_epoch, self.best_loss = state_dict["best_epoch"], state_dict["best_loss"]
        self.rows = list(state_dict["rows"])


def _number(value: torch.Tensor | float | None) -> float:
    """A logged metric as a float; NaN when it was not logged."""
    return math.nan if value is None else float(value)


@contextmanager
def _evaluation_mode(module: pl.LightningModule) -> Iterator[None]:
    """The module in eval mode for a pass between training steps, then back in the mode it was in."""
    training = module.training
    module.eval()
    try:
        yield
    finally:
        module.train(training)


@dataclass(frozen=True)
class FitPlan:
    """Where and how one fit runs."""

    settings: TrainConfig  # its optimiser, budget and stopping rule, devices and precision
    checkpoints: Path  # its checkpoints go to <checkpoints>/<fingerprint>
    fingerprint: str  # the caller's key of the fit's parameters and inputs: a fit with the same key resumes
    run: RunRecord  # the run its metrics and curves are recorded in
    seed: int
    progress: bool = False  # Lightning's progress bar


def fit(module: ClassifierModule, data: PackedDataModule, plan: FitPlan, callbacks: Sequence[pl.Callback] = (),
        per_epoch: EpochMeasure | None = None) -> FitResult:
    """Train until early stopping (or max_epochs), then test the best checkpoint, whose weights `module` keeps.

    An interrupted fit with the same fingerprint resumes from its last checkpoint. `per_epoch`: measure the model
    after every training epoch (FitResult.history, and curves epoch_<name> in the plan's run with the epoch as
    step); None: no per-epoch log (and no test pass per epoch).
    """
    settings, checkpoints, fingerprint, run = plan.settings, plan.checkpoints, plan.fingerprint, plan.run
    start = time.perf_counter()
    keep_freed_memory()
    # Lightning's per-fit notices (devices, checkpoints restored, epochs reached) would repeat for every fit: the
    # stage says in one line what each fit was and how it ended (training/protocol.py), resumed or not.
    logging.getLogger("pytorch_lightning.utilities.rank_zero").setLevel(logging.WARNING)
    pl.seed_everything(plan.seed, workers=True, verbose=False)
    resume = resumable_checkpoint(checkpoints, fingerprint)
    # A fit that had stopped early trains no further: its budget ends where it stopped.
    max_epochs = resume.epoch if resume is not None and resume.stopped else settings.max_epochs
    # The best model's weights alone: the test reads nothing else of it, and the optimiser's state would triple a
    # trained E's file (60 MB on IMDB), written at most epochs of a fit.
    best = ModelCheckpoint(dirpath=checkpoints / fingerprint, filename="best", monitor="val_loss",
                           save_weights_only=True)
    # last.ckpt after every epoch: save_last writes it only with a new best, so a fit would resume from its last
    # improvement and a stop (never a new best) would go unrecorded. Without a monitor it saves each epoch, in place.
    last = ModelCheckpoint(dirpath=checkpoints / fingerprint, filename="last", enable_version_counter=False)
    stopping, log = EarlyStopping(monitor="val_loss", patience=settings.patience), EpochLog(per_epoch)
    trainer = pl.Trainer(
        max_epochs=max_epochs, accelerator=settings.accelerator, strategy=settings.strategy,
        devices=settings.devices, num_nodes=settings.num_nodes, precision=settings.precision,
        use_distributed_sampler=False,  # the data module shares each batch out itself
        logger=StageLogger(run),
        callbacks=[best, last, stopping, StopOnNonFiniteLoss(), StopWhenAsked(), LogNorms(), RecordFit(fingerprint),
                   log, *callbacks],
        enable_progress_bar=plan.progress, enable_model_summary=False, deterministic=True, log_every_n_steps=10,
        default_root_dir=checkpoints / fingerprint,
    )
    if resume is not None:
        run.set_tag("resumed_from_epoch", str(resume.epoch))  # the run shows it; the results are the same
    with warnings.catch_warnings():
        silence_known_warnings()
        trainer.fit(module, datamodule=data, ckpt_path=None if resume is None else resume.checkpoint)
        # Read before the test, which restores the callbacks' states of the best checkpoint, an earlier epoch's.
        epochs, best_epoch, history = trainer.current_epoch, log.best_epoch, tuple(log.rows)
        bound = budget_bound(epochs, settings.max_epochs, stopping)
        tested = trainer.test(module, datamodule=data, ckpt_path=best.best_model_path, verbose=False)[0]
    # Lightning's teardown has moved the module to the CPU: every reading of the kept model runs where it trained.
    device = trainer.strategy.root_device
    module.to(device)
    _log_epochs(run, history)
    return FitResult(epochs=epochs, resumed_from_epoch=None if resume is None else resume.epoch,
                     seconds=time.perf_counter() - start, test={name: float(value) for name, value in tested.items()},
                     norms=module.norms(),
                     fitted={f"best_{name}_{kind}": value for name in ("train", "val")
                             for kind, value in full_pass(module, data, name, device).items()},
                     best_epoch=best_epoch, budget_bound=bound, history=history, measure_seconds=log.seconds,
                     device=str(device))


def _log_epochs(run: RunRecord, rows: Sequence[dict[str, float]]) -> None:
    """The per-epoch log as curves epoch_<name> against the epoch: every epoch's, those trained before a resume
    too, so the run shows the whole fit (a prefix of their own: Lightning's val_loss runs against the step, and
    the fit's final values are the best model's, not the last epoch's)."""
    if rows:
        names = [name for name in rows[0] if name != "epoch"]
        run.log_history([int(row["epoch"]) for row in rows],
                        {EPOCH_PREFIX + name: [row[name] for row in rows] for name in names})


def budget_bound(epochs: int, max_epochs: int, stopping: EarlyStopping) -> bool:
    """Whether the epoch budget ended the fit: it trained every epoch of max_epochs and early stopping never fired
    (its public `stopped_epoch` stays 0 until it does; a resumed fit restores it from the checkpoint)."""
    return epochs >= max_epochs and stopping.stopped_epoch == 0


def full_pass(module: ClassifierModule, data: PackedDataModule, name: str, device: torch.device
              ) -> dict[str, float]:
    """Loss and accuracy of the (best) model on a whole split, on `device` (where the module must be), batch by
    batch without gradients; the sums stay there until the end (one copy to the host, not one per batch)."""
    require_on(module, device)
    loss = correct = torch.zeros((), dtype=torch.float64, device=device)
    with torch.inference_mode(), module.evaluating():
        for batch in data.loader(name, device=device):
            batch = {key: value.to(device) for key, value in batch.items()}
            batch_loss, batch_accuracy = module.loss_and_accuracy(batch)
            size = len(batch["labels"])
            loss, correct = loss + batch_loss.double() * size, correct + batch_accuracy.double() * size
    total = len(data.rows(name)[1])
    summed_loss, summed_correct = torch.stack([loss, correct]).tolist()
    return {"loss": summed_loss / total, "accuracy": summed_correct / total}
