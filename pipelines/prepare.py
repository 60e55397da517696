"""Stage `prepare`: load or generate a dataset, pack it (CSR bag of tokens + ordered ids), token statistics.

Where the data are drawn (the synthetic generator, a subsample of a text split, a bootstrap resample of a training
split used whole), each seed of base.seeds gets its own draw, data/processed/<dataset>/seed<k>/; a dataset used
whole without bootstrap has one, data/processed/<dataset>/all/ (toksel.data.draws). A text dataset used whole is
loaded and tokenized once, and each seed resamples its packed training rows. Each draw's metrics go into
results/prepare/<dataset>/metrics.json under its folder's name.
"""

from __future__ import annotations

import sys

import numpy as np

from pipelines.sections import STAGE_SECTIONS
from toksel.data.draws import draw_seed, draws, write_manifest
from toksel.data.prepared import bootstrap_draw, prepare_synthetic, prepare_text, summary_metrics
from toksel.data.token_table import write_token_table
from toksel.params import Config
from toksel.runtime.cli import run_stage
from toksel.runtime.paths import processed_dir, results_dir
from toksel.runtime.records import RunRecord, flatten

SECTIONS = STAGE_SECTIONS["prepare"]


def prepare(config: Config, run: RunRecord) -> None:
    data = config.data
    folders = draws(data, config.base.seeds)
    metrics = {}
    whole = None  # a text dataset without a subsample: loaded and tokenized once, each seed resamples its rows
    for name, seed in folders.items():
        generator_seed = draw_seed(config.base.data_seed, seed)
        if data.source == "synthetic":
            prepared = prepare_synthetic(data.synthetic, generator_seed)
        else:
            subsampled = data.max_train > 0 or data.max_test > 0
            if not subsampled:
                whole = whole or prepare_text(config.dataset, data, config.base.data_seed)
            prepared = prepare_text(config.dataset, data, generator_seed) if subsampled else whole
            if data.bootstrap and seed is not None and prepared.metrics["train_every_row"]:
                prepared = bootstrap_draw(prepared, data.num_classes, np.random.default_rng((*generator_seed, 1)))
        out = processed_dir(config.dataset) / name
        for split_name, split in prepared.splits.items():
            split.save(out / f"{split_name}.npz")
        write_token_table(out / "tokens.csv", prepared.tokens)
        metrics[name] = summary_metrics(prepared)
    write_manifest(config.dataset, folders, config.base.seeds)
    run.record_metrics(results_dir("prepare", config.dataset) / "metrics.json", metrics)
    run.log_metrics(flatten(metrics))  # the draws' metrics as <folder>.<name>


def main(argv: list[str] | None = None) -> int:
    return run_stage("prepare", SECTIONS, prepare, argv)


if __name__ == "__main__":
    sys.exit(main())
