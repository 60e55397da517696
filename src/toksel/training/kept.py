"""The models the training stages kept (model.npz and model.json: training/record.py), read back on their test
reviews: which each gets right.

The train stage's one-layer model reads a review through its tokens' scores E_s^T p and values E_s^T v alone
(models/reading.py: no bias term) and was scored on the whole test split; a model with positions (ablation, pair)
is rebuilt from its parameters and was scored on its data module's test rows, each cut to its first max_len tokens.
Either way the accuracy read back must be the one its run recorded (metrics.json), or the model or its data have
changed since: refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from toksel.data.corpus import PackedSplit
from toksel.data.token_table import TokenTable
from toksel.models.reading import bag_outputs
from toksel.params import Config
from toksel.runtime.errors import ToksError
from toksel.runtime.io import read_json, read_npz
from toksel.training.device import reading_device
from toksel.training.sequence_classifier import correct_on, kept_module
from toksel.training.sequence_data import SequenceDataModule

BAG_STAGES = ("train",)  # their model.npz holds the one-layer model's scores and values, read as a bag of tokens


@dataclass(frozen=True)
class Scored:
    """A kept model on the test reviews its run was scored on."""

    parameters: dict[str, np.ndarray]  # its model.npz: the one-layer model's scores and values, every parameter
    split: PackedSplit  # the test split
    rows: np.ndarray  # the rows of it the model was scored on
    max_len: int | None  # the tokens of each row it reads (None: all)
    correct: np.ndarray  # bool, one per row of `rows`: the model predicts its label


def scored_on_test(model: Path, data: Path, tokens: TokenTable, config: Config) -> Scored:
    """The kept model in folder `model` (results/<stage>/<dataset>/<run>/seed<k>) on the test split of its data
    folder `data` (with its token table `tokens`); config: its dataset's (the sequence and train sections)."""
    about = read_json(model / "model.json", producer=model.parts[-4])
    parameters = read_npz(model / "model.npz", producer=about["stage"])
    if about["vocabulary"] != tokens.vocabulary_digest():
        raise ToksError(f"{model} was trained on another vocabulary than {data} holds now: run "
                        f"{about['stage']}@{about['dataset']} again")
    if about["stage"] in BAG_STAGES:
        split = PackedSplit.load(data / "test.npz")
        outputs = bag_outputs(parameters["scores"], parameters["values"], split)
        scored = Scored(parameters, split, np.arange(split.n), None, (outputs > 0) == (split.labels == 1))
    else:
        sequence, scale = config.sequence, config.sequence.profile
        split, rows = SequenceDataModule(data, sequence.batch_size, config.train.val_fraction, about["seed"],
                                         sequence.bucketed, scale.max_len, scale.max_train,
                                         scale.max_test).rows("test")
        module = kept_module(parameters, about["model"], config.train).to(reading_device(config.train.accelerator))
        correct = correct_on(module, split, rows, scale.max_len, sequence.batch_size)  # as its test loader batched
        scored = Scored(parameters, split, rows, scale.max_len, correct.numpy())
    recorded = read_json(model / "metrics.json", producer=about["stage"])["test_accuracy"]
    if round(recorded * len(scored.rows)) != int(scored.correct.sum()):
        raise ToksError(f"{model} gets {int(scored.correct.sum())} of {len(scored.rows)} test reviews right where its "
                        f"run recorded a test accuracy of {recorded:.6f}: the model or its data changed since; run "
                        f"{about['stage']}@{about['dataset']} again")
    return scored
