"""Lightning training throughput: the one-layer bag-of-tokens step (the `train` stage's model) and the two-layer
model over positions (the `ablation` stage's) with and without length bucketing.

Each measurement trains one model for a few warm-up steps, then `windows` windows of `steps` steps, and
reports the median over the windows. A window is timed from the end of one training step to the end of
another, so it includes making the batches (padding, bucketing) as well as the forward and backward passes.
"""

from __future__ import annotations

import statistics
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import pytorch_lightning as pl
import torch

from toksel.data.draws import data_dir
from toksel.data.token_table import read_token_table
from toksel.models.initial import initialise
from toksel.models.sequence import LAYOUTS, SequenceClassifier
from toksel.params import Config
from toksel.runtime.io import read_npz
from toksel.runtime.memory import keep_freed_memory
from toksel.runtime.paths import results_dir, seed_dir
from toksel.training import classifier
from toksel.training.classifier import BagClassifier, ClassifierModule
from toksel.training.data import PackedDataModule
from toksel.training.fit import parameter_dtype
from toksel.training.sequence_classifier import SequenceModule
from toksel.training.sequence_data import SequenceDataModule

WARM_UP = 3


@dataclass(frozen=True)
class Throughput:
    steps_per_second: float  # medians over the windows
    sequences_per_second: float
    tokens_per_second: float  # tokens of the sequences, padding left out
    padded_tokens_per_second: float  # positions computed on, padding included (bags: = tokens)
    windows: int
    steps: int  # per window


class _StepClock(pl.Callback):
    """The end time of every training step, with the batch's sequences, tokens and positions."""

    def __init__(self) -> None:
        self.ends: list[float] = []
        self.sizes: list[tuple[int, int, int]] = []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:  # noqa: ANN001
        self.ends.append(time.perf_counter())
        if "mask" in batch:
            mask = batch["mask"]
            self.sizes.append((len(batch["labels"]), int(mask.sum()), mask.numel()))
        else:
            tokens = int(batch["counts"].sum())
            self.sizes.append((len(batch["labels"]), tokens, tokens))


def measure(module: ClassifierModule, data: PackedDataModule, windows: int, steps: int, precision: str,
            accelerator: str = "auto") -> Throughput:
    keep_freed_memory()  # as the stages' fit does: freed gradients stay in the process
    clock = _StepClock()
    trainer = pl.Trainer(max_steps=WARM_UP + windows * steps, accelerator=accelerator, devices=1, precision=precision,
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, limit_val_batches=0, num_sanity_val_steps=0, callbacks=[clock])
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*(does not have many workers|LeafSpec|val_dataloader).*")
        trainer.fit(module, train_dataloaders=data.loader("train", shuffle=True))
    ends, sizes = np.array(clock.ends), np.array(clock.sizes, dtype=float)
    rates = []
    for window in range(windows):
        first, last = WARM_UP - 1 + window * steps, WARM_UP - 1 + (window + 1) * steps
        seconds = ends[last] - ends[first]
        rates.append(np.concatenate([[steps], sizes[first + 1:last + 1].sum(axis=0)]) / seconds)
    median = [statistics.median(rate[i] for rate in rates) for i in range(4)]
    return Throughput(*median, windows=windows, steps=steps)


@contextmanager
def autograd_products() -> Iterator[None]:
    """The model's E p and E v as plain torch products differentiated by autograd, instead of the compiled
    products with their own gradient (models/one_layer.token_products): what the step cost without them."""
    compiled = classifier.token_products
    classifier.token_products = lambda E, p, v: (E @ p, E @ v)
    try:
        yield
    finally:
        classifier.token_products = compiled


def one_layer_step(config: Config, dataset: str, windows: int, steps: int) -> Throughput:
    """The `train` stage's model (E, p, v trained) on `dataset`, from its one_step initialisation."""
    settings = config.train
    dtype = parameter_dtype(settings.precision)
    tokens = read_token_table(data_dir(dataset, 0) / "tokens.csv")
    start = read_npz(seed_dir(results_dir("one_step", dataset), 0) / "embeddings.npz", producer="one_step")
    E, p, v = (torch.tensor(start[name], dtype=dtype) for name in ("E0", "p0", "v"))
    module = BagClassifier(E, p, v, torch.tensor(tokens.important), train_embeddings=True,
                           optimizer=settings.optimizer, lr=settings.lr, weight_decay=settings.weight_decay)
    data = PackedDataModule(data_dir(dataset, 0), settings.batch_size, settings.val_fraction, config.seed,
                            dtype)
    return measure(module, data, windows, steps, settings.precision)


def two_layer_step(config: Config, dataset: str, bucketed: bool, max_len: int | None, windows: int,
                   steps: int) -> Throughput:
    """The `ablation` stage's two-layer model at the CPU profile's d, reviews cut to `max_len` tokens."""
    module, data = sequence_model(config, dataset, "two_layer", "cpu", bucketed, max_len)
    return measure(module, data, windows, steps, config.train.precision)


def sequence_model(config: Config, dataset: str, variant: str, scale: str, bucketed: bool = True,
                   max_len: int | None = None) -> tuple[SequenceModule, SequenceDataModule]:
    """An `ablation` variant and its data at a size profile of sequence (cpu, paper), reviews cut to `max_len`
    tokens (None: the profile's)."""
    settings, size = config.train, getattr(config.sequence, scale)
    tokens = read_token_table(data_dir(dataset, 0) / "tokens.csv")
    init = initialise(len(tokens), size.d, config.seed, parameter_dtype(settings.precision), tokens.num_classes)
    model = SequenceClassifier(init.E, init.p, init.v, **LAYOUTS[variant], seed=config.seed)
    module = SequenceModule(model, torch.tensor(tokens.important), settings.optimizer, settings.lr,
                            settings.weight_decay)
    data = SequenceDataModule(data_dir(dataset, 0), config.sequence.batch_size, settings.val_fraction, config.seed,
                              bucketed, max_len if max_len is not None else size.max_len, size.max_train,
                              size.max_test)
    return module, data


def step_flops(module: ClassifierModule, data: PackedDataModule | SequenceDataModule, batches: int) -> float:
    """The mean floating-point operations of a training step's forward and backward passes over the first
    `batches` batches of a shuffled epoch (torch's count: matrix products and attention, not elementwise work)."""
    from torch.utils.flop_counter import FlopCounterMode

    data.setup("fit")
    counts = []
    for index, batch in enumerate(data.loader("train", shuffle=True)):
        if index == batches:
            break
        with FlopCounterMode(display=False) as counter:
            loss, _ = module.loss_and_accuracy(batch)
            loss.backward()
        module.zero_grad(set_to_none=True)
        counts.append(counter.get_total_flops())
    return statistics.mean(counts)
