"""Stage `prepare`: generate the dataset, pack it (CSR bag-of-tokens + ordered ids), compute token statistics."""

from __future__ import annotations

import sys

import numpy as np

from toksel.cli import run_stage
from toksel.config import Config
from toksel.data.synthetic import SyntheticVocabulary, generate
from toksel.data.token_table import token_table, write_token_table
from toksel.paths import processed_dir, results_dir
from toksel.theory.frequency import assumption1_fraction, token_statistics
from toksel.tracking import StageRun

SECTIONS = ("base", "data")


def prepare(config: Config, run: StageRun) -> None:
    settings = config.data.synthetic
    vocab = SyntheticVocabulary(settings.n_positive, settings.n_negative, settings.n_irrelevant)
    rng = np.random.default_rng(config.base.seed)
    splits = {name: generate(settings.mode, vocab, n, settings.seq_len, settings.delta, rng)
              for name, n in (("train", settings.n_train), ("test", settings.n_test))}
    statistics = token_statistics(splits["train"])
    groups = vocab.groups()
    table = token_table(statistics, important=groups != 0, group=groups)

    out = processed_dir(config.data.name)
    for name, split in splits.items():
        split.save(out / f"{name}.npz")
    write_token_table(out / "tokens.csv", table)

    train = splits["train"]
    irrelevant = groups == 0
    run.record_metrics(results_dir("prepare", config.data.name) / "metrics.json", {
        "vocab_size": vocab.size,
        "n_train": train.n,
        "n_test": splits["test"].n,
        "nnz_train": len(train.bag_tokens),
        "mean_length": float(train.lengths.mean()),
        "positive_label_fraction": float(train.labels.mean()),
        "max_abs_alpha_irrelevant": float(np.abs(statistics.alpha[irrelevant]).max()),
        "mean_abs_alpha_relevant": float(np.abs(statistics.alpha[~irrelevant]).mean()),
        "assumption1_fraction": assumption1_fraction(train, statistics),
    })


def main(argv: list[str] | None = None) -> int:
    return run_stage("prepare", SECTIONS, prepare, argv)


if __name__ == "__main__":
    sys.exit(main())
