"""Stage `train`: the one-layer model trained with Lightning from the one_step stage's initialisation.

train.embeddings chooses what E does: `trained` (E, p, v jointly), `untrained` (E frozen at E0, its random
init) or `one_step` (E frozen at E1). dvc.yaml runs all three on every dataset (train@<dataset>-<choice>).
"""

from __future__ import annotations

import shutil
import sys

import torch

from toksel.cli import run_stage, show_progress
from toksel.config import Config, params_hash
from toksel.data.token_table import read_token_table
from toksel.io import file_digest, read_npz
from toksel.paths import processed_dir, results_dir
from toksel.tracking import StageRun
from toksel.training.classifier import BagClassifier
from toksel.training.data import PackedDataModule
from toksel.training.fit import checkpoint_dir, fit, parameter_dtype
from toksel.training.record import record_fit

SECTIONS = ("base", "train")


def train(config: Config, run: StageRun) -> None:
    settings, dataset = config.train, config.dataset
    variant = f"{dataset}/{settings.embeddings}"
    run.set_tag("embeddings", settings.embeddings)
    run.set_tag("mlflow.runName", f"train {settings.embeddings}")
    tokens = read_token_table(processed_dir(dataset) / "tokens.csv")
    embeddings = read_npz(results_dir("one_step", dataset) / "embeddings.npz", producer="one_step")
    dtype = parameter_dtype(settings.precision)
    start = embeddings["E1"] if settings.embeddings == "one_step" else embeddings["E0"]
    trains_embeddings = settings.embeddings == "trained"
    module = BagClassifier(
        torch.tensor(start, dtype=dtype), torch.tensor(embeddings["p0"], dtype=dtype),
        torch.tensor(embeddings["v"], dtype=dtype), torch.tensor(tokens["important"].to_numpy(dtype=bool)),
        train_embeddings=trains_embeddings, optimizer=settings.optimizer,
        lr=settings.lr if trains_embeddings else settings.frozen_lr, weight_decay=settings.weight_decay)
    data = PackedDataModule(processed_dir(dataset), settings.batch_size, settings.val_fraction, config.base.seed,
                            dtype)
    checkpoints = checkpoint_dir("train", variant)
    # A checkpoint belongs to these parameters and these inputs: anything else starts afresh.
    fingerprint = params_hash(config.sections(SECTIONS)) + file_digest(
        processed_dir(dataset) / "train.npz", results_dir("one_step", dataset) / "embeddings.npz")
    result = fit(module, data, settings, checkpoints, fingerprint, run, config.base.seed, show_progress())

    record_fit(run, results_dir("train", variant), module, result, tokens, settings.bins,
               f"{dataset}, embeddings {settings.embeddings}: after training")
    shutil.rmtree(checkpoints)  # finished: nothing left to resume


def main(argv: list[str] | None = None) -> int:
    return run_stage("train", SECTIONS, train, argv)


if __name__ == "__main__":
    sys.exit(main())
