"""Stage `ablation`: a model with positions (models/sequence.py) trained end to end with Lightning.

sequence.variant chooses the model: one_layer, mlp, two_layer (paper Fig. 1, parameter-free residual
self-attention) or two_layer_kq (the rebuttal's trained W_KQ). sequence.scale picks the size profile: `cpu`
(minutes here) or `paper` (d 2048, whole reviews, all data: for a GPU). dvc.yaml runs every variant on each
dataset of ablation.datasets (ablation@<dataset>-<variant>); E, p and v start from a fresh seeded Gaussian
initialisation at the profile's d.
"""

from __future__ import annotations

import shutil
import sys

import torch

from toksel.cli import run_stage, show_progress
from toksel.config import Config, params_hash
from toksel.data.token_table import num_classes, read_token_table
from toksel.io import file_digest
from toksel.models.one_layer import initialise
from toksel.models.sequence import LAYOUTS, SequenceClassifier
from toksel.paths import processed_dir, results_dir
from toksel.tracking import StageRun
from toksel.training.fit import checkpoint_dir, fit, parameter_dtype
from toksel.training.record import record_fit
from toksel.training.sequence_classifier import SequenceModule
from toksel.training.sequence_data import SequenceDataModule

SECTIONS = ("base", "train", "sequence")
SCORE_LABELS = {"two_layer_kq": "$p^T W_{KQ}^{(2)} E_s$"}  # the rebuttal's plotted score with a trained W_KQ^(2)


def ablation(config: Config, run: StageRun) -> None:
    settings, training, dataset = config.sequence, config.train, config.dataset
    scale, variant = settings.profile, f"{dataset}/{settings.variant}"
    run.set_tag("variant", settings.variant)
    run.set_tag("mlflow.runName", f"ablation {settings.variant}")
    tokens = read_token_table(processed_dir(dataset) / "tokens.csv")
    init = initialise(len(tokens), scale.d, config.base.seed, parameter_dtype(training.precision),
                      num_classes(tokens))
    module = SequenceModule(SequenceClassifier(init.E, init.p, init.v, **LAYOUTS[settings.variant],
                                               seed=config.base.seed),
                            torch.tensor(tokens["important"].to_numpy(dtype=bool)), training.optimizer, training.lr,
                            training.weight_decay)
    data = SequenceDataModule(processed_dir(dataset), settings.batch_size, training.val_fraction, config.base.seed,
                              settings.bucketed, scale.max_len, scale.max_train, scale.max_test)
    checkpoints = checkpoint_dir("ablation", variant)
    fingerprint = params_hash(config.sections(SECTIONS)) + file_digest(processed_dir(dataset) / "train.npz")
    result = fit(module, data, training, checkpoints, fingerprint, run, config.base.seed, show_progress())
    size = {"d": float(scale.d), "train_rows": float(len(data.rows("train")[1])),
            "test_rows": float(len(data.rows("test")[1])), "padding_fraction": data.training_batches_padding()}
    record_fit(run, results_dir("ablation", variant), module, result, tokens, training.bins,
               f"{dataset}, {settings.variant} (d {scale.d}, first {scale.max_len or 'all'} tokens): after training",
               among=data.trained_tokens(), extra=size, score_label=SCORE_LABELS.get(settings.variant, "$E_s^T p$"))
    shutil.rmtree(checkpoints)  # finished: nothing left to resume


def main(argv: list[str] | None = None) -> int:
    return run_stage("ablation", SECTIONS, ablation, argv)


if __name__ == "__main__":
    sys.exit(main())
