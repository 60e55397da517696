"""Stage `train`: the one-layer model trained with Lightning, each embedding arm of train.arms, every seed.

An arm is what E does: `trained` (E, p, v jointly), `untrained` (E frozen at E0, its random initialisation) or
`one_step` (E frozen at E1, E0 after the one GD step of Lemma 4.1). E0, p0 and v are drawn from the run's seed as
the one_step stage draws them, the same for every arm. Every arm follows one protocol (training/protocol.py):
each rate of train.lr_grid screened for a few epochs, the best on validation trained under the stopping rule
(and train.lr, for the matched-lr protocol), then its control on shuffled labels. The arms share one process
(and its data) because they share every input; each is its own MLflow run under its seed's. Every seed of
base.seeds in one process (train@<dataset>), into results/train/<dataset>/<arm>/seed<seed>/; their metrics
gathered in results/train/<dataset>.json.
"""

from __future__ import annotations

import functools
import sys

import torch

from toksel.cli import run_stage, show_progress
from toksel.config import Config, params_hash
from toksel.data.draws import data_dir
from toksel.data.token_table import read_token_table
from toksel.io import file_digest, write_csv
from toksel.measurements import curve_settings
from toksel.models.fused import FusedBags
from toksel.models.one_layer import initialise
from toksel.paths import results_dir, seed_dir
from toksel.theory.one_step import one_gradient_step_on_embeddings
from toksel.tracking import StageRun
from toksel.training.classifier import BagClassifier
from toksel.training.data import PackedDataModule
from toksel.training.fit import checkpoint_dir, parameter_dtype
from toksel.training.protocol import train_with_control
from toksel.training.record import record_fit

SECTIONS = ("base.seeds", "base.data_seed", "model", "one_step", "train")


def train(config: Config, run: StageRun) -> None:
    settings, dataset, seed = config.train, config.dataset, config.seed
    folder = data_dir(dataset, seed)
    run.set_tag("mlflow.runName", f"train seed {seed}")
    tokens = read_token_table(folder / "tokens.csv")
    classes = tokens.num_classes
    init = initialise(len(tokens), config.model.d, seed, num_classes=classes)
    dtype = parameter_dtype(settings.precision)
    important = torch.tensor(tokens.important)

    # Every fit of the stage (each arm's screens, kept, matched, control) reads the same rows and starts from E0
    # or E1: each made once per label set (E1 is a full pass over the split; the splits are read from disk).
    @functools.cache
    def data(shuffled: bool) -> PackedDataModule:
        return PackedDataModule(folder, settings.batch_size, settings.val_fraction, seed, dtype,
                                label_seed=(config.base.data_seed, seed) if shuffled else None)

    @functools.cache
    def one_step_embeddings(shuffled: bool) -> torch.Tensor:
        """E1: the one step on the train split this model trains on (the control's labels are shuffled)."""
        labelled = data(shuffled).rows("train")[0]  # the whole split, validation rows included, as one_step's
        E0, p0, v = init.E.numpy(), init.p.numpy(), init.v.numpy()
        return torch.from_numpy(one_gradient_step_on_embeddings(E0, p0, v, FusedBags.from_split(labelled, classes),
                                                                config.one_step.eta0))

    # A checkpoint belongs to these parameters and these inputs: anything else starts afresh.
    fingerprint = params_hash({**config.sections(SECTIONS), "seed": seed}) + file_digest(folder / "train.npz")
    curves = curve_settings(config.train)
    for arm in settings.arms:
        def model(lr: float, shuffled: bool, arm: str = arm) -> BagClassifier:
            E = one_step_embeddings(shuffled) if arm == "one_step" else init.E
            return BagClassifier(E.to(dtype), init.p.to(dtype), init.v.to(dtype), important,
                                 train_embeddings=arm == "trained", optimizer=settings.optimizer, lr=lr,
                                 weight_decay=settings.weight_decay)

        with run.child(f"{arm} seed {seed}", {"embeddings": arm}) as arm_run:
            trained = train_with_control(model, data, settings.lr_grid, settings,
                                         checkpoint_dir("train", f"{dataset}/{arm}") / f"seed{seed}",
                                         fingerprint, arm_run, seed, show_progress(), tokens, curves,
                                         matched=settings.lr)
            out = seed_dir(results_dir("train", f"{dataset}/{arm}"), seed)
            write_csv(out / "grid.csv", trained.trials)
            arm_run.log_artifact(out / "grid.csv")
            record_fit(arm_run, out, trained.module, trained.metrics, trained.curves, tokens, curves,
                       f"{dataset}, embeddings {arm}, seed {seed} (lr {trained.metrics['lr']:g}): after training",
                       {"stage": "train", "model": "one_layer", "dataset": dataset, "embeddings": arm, "seed": seed,
                        "lr": trained.metrics["lr"], "num_classes": classes})


def main(argv: list[str] | None = None) -> int:
    return run_stage("train", SECTIONS, train, argv, every_seed=lambda config: results_dir("train", config.dataset),
                     seeds=lambda config: config.training_seeds)


if __name__ == "__main__":
    sys.exit(main())
