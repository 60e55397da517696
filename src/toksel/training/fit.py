"""Fitting a classifier (training/classifier.py) with Lightning: early stopping on the validation loss, the best
and the last checkpoint, resume after an interruption, a clear stop when the loss stops being finite, and
metrics into the stage's own MLflow run.

With train.strategy=ddp, Lightning runs one process per device (train.devices x train.num_nodes); each
trains on its share of every batch (training/data.py) and DDP averages the gradients, which for equal shares is
the gradient of the whole batch: the fit matches one process's. Every process validates and tests on all rows,
so early stopping and the best checkpoint agree everywhere. Every process goes through the same fits; only rank
0 writes outputs and logs (training/protocol.py ends the workers after their last fit).

A fit killed at any point and run again ends as the uninterrupted fit does, bit for bit: it goes on from its last
checkpoint (weights, optimiser, loop and callback states), and the order of each epoch's batches is drawn from
(seed, epoch) (training/data.py), not from a generator that a new process would start anew. A checkpoint is
trusted by what it records (the fit's key and whether the fit had stopped), never by file times.
"""

from __future__ import annotations

import logging
import shutil
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import EarlyStopping, ModelCheckpoint
from pytorch_lightning.loggers import Logger
from pytorch_lightning.utilities import rank_zero_only

from toksel.runtime.config import TrainConfig, params_hash
from toksel.runtime.distributed import is_worker
from toksel.runtime.errors import ToksError
from toksel.runtime.io import file_sha256
from toksel.runtime.known_warnings import silence_known_warnings
from toksel.runtime.live import live_logger
from toksel.runtime.memory import keep_freed_memory
from toksel.runtime.records import RunRecord
from toksel.training.classifier import ClassifierModule
from toksel.training.data import PackedDataModule


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


@dataclass(frozen=True)
class FitResult:
    epochs: int  # epochs trained in all, resumed ones included
    resumed_from_epoch: int | None  # where an interrupted fit was picked up; None for a fresh start
    seconds: float  # this process's fit and test
    test: dict[str, float]  # test_loss, test_accuracy and the test attention metrics
    fitted: dict[str, float]  # best_train_loss, ..._accuracy, best_val_...: the best model on the whole splits
    norms: dict[str, float]  # norm_p, norm_v, mean_norm_E of the best model


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
    """Stop with a clear error once a training loss is NaN or infinite (every DDP process at the same step)."""

    def on_train_batch_end(self, trainer: pl.Trainer, module: pl.LightningModule, outputs: object, batch: object,
                           batch_idx: int) -> None:
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        if trainer.strategy.reduce_boolean_decision(bool(torch.isfinite(loss.detach()).all()), all=True):
            return
        raise TrainingDiverged(f"training diverged: the loss became {float(loss)} at epoch {trainer.current_epoch}, "
                               f"step {trainer.global_step} (lr {module.lr}): lower the learning rate (train.lr or "
                               "train.lr_grid)")


class LogNorms(pl.Callback):
    """|p|, |v| and the mean |E_s| after every training epoch (MLflow curves norm_p, norm_v, mean_norm_E)."""

    def on_train_epoch_end(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        for name, value in module.norms().items():
            module.log(name, value, on_epoch=True, sync_dist=False)


def fit(module: ClassifierModule, data: PackedDataModule, settings: TrainConfig, checkpoints: Path,
        fingerprint: str, run: RunRecord, seed: int, progress: bool,
        callbacks: Sequence[pl.Callback] = ()) -> FitResult:
    """Train until early stopping (or max_epochs), then test the best checkpoint, whose weights `module` keeps.

    An interrupted fit with the same `fingerprint` (the caller's key of parameters and inputs) resumes from its
    last checkpoint.
    """
    start = time.perf_counter()
    keep_freed_memory()
    # Lightning's per-fit notices (devices, checkpoints restored, epochs reached) would repeat for every fit: the
    # stage says in one line what each fit was and how it ended (training/protocol.py), resumed or not.
    logging.getLogger("pytorch_lightning.utilities.rank_zero").setLevel(logging.WARNING)
    pl.seed_everything(seed, workers=True, verbose=False)
    resume = resumable_checkpoint(checkpoints, fingerprint)
    # A fit that had stopped early trains no further: its budget ends where it stopped.
    max_epochs = resume.epoch if resume is not None and resume.stopped else settings.max_epochs
    best = ModelCheckpoint(dirpath=checkpoints / fingerprint, filename="best", monitor="val_loss", save_last=True)
    trainer = pl.Trainer(
        max_epochs=max_epochs, accelerator=settings.accelerator, strategy=settings.strategy,
        devices=settings.devices, num_nodes=settings.num_nodes, precision=settings.precision,
        use_distributed_sampler=False,  # the data module shares each batch out itself
        logger=[StageLogger(run), *([live_logger(run)] if run.live else [])],
        callbacks=[best, EarlyStopping(monitor="val_loss", patience=settings.patience), StopOnNonFiniteLoss(),
                   LogNorms(), RecordFit(fingerprint), *callbacks],
        enable_progress_bar=progress, enable_model_summary=False, deterministic=True, log_every_n_steps=10,
        default_root_dir=checkpoints / fingerprint,
    )
    if resume is not None:
        run.set_tag("resumed_from_epoch", str(resume.epoch))  # the run shows it; the results are the same
    with warnings.catch_warnings():
        silence_known_warnings()
        trainer.fit(module, datamodule=data, ckpt_path=None if resume is None else resume.checkpoint)
        tested = trainer.test(module, datamodule=data, ckpt_path="best", verbose=False)[0]
    return FitResult(epochs=trainer.current_epoch, resumed_from_epoch=None if resume is None else resume.epoch,
                     seconds=time.perf_counter() - start, test={name: float(value) for name, value in tested.items()},
                     norms=module.norms(),
                     fitted={f"best_{name}_{kind}": value for name in ("train", "val")
                             for kind, value in _full_pass(module, data, name).items()})


def _full_pass(module: ClassifierModule, data: PackedDataModule, name: str) -> dict[str, float]:
    """Loss and accuracy of the (best) model on a whole split, batch by batch without gradients."""
    loss = correct = 0.0
    with torch.no_grad(), module.evaluating():
        for batch in data.loader(name):
            batch = {key: value.to(module.device) for key, value in batch.items()}
            batch_loss, batch_accuracy = module.loss_and_accuracy(batch)
            size = len(batch["labels"])
            loss, correct = loss + float(batch_loss) * size, correct + float(batch_accuracy) * size
    total = len(data.rows(name)[1])
    return {"loss": loss / total, "accuracy": correct / total}
