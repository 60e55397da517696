"""Stage `prepare`: load or generate a dataset, pack it (CSR bag of tokens + ordered ids), token statistics.

Where the data are drawn (the synthetic generator, a subsample of a text split), each seed of base.seeds gets its
own draw, data/processed/<dataset>/seed<k>/; a dataset used whole has one, data/processed/<dataset>/all/
(toksel.data.draws). Each draw's metrics go into results/prepare/<dataset>/metrics.json under its folder's name.
"""

from __future__ import annotations

import sys

from pipelines.sections import STAGE_SECTIONS
from toksel.data.draws import draw_seed, draws, write_manifest
from toksel.data.prepared import prepare_synthetic, prepare_text, summary_metrics
from toksel.data.token_table import write_token_table
from toksel.runtime.cli import run_stage
from toksel.runtime.config import Config
from toksel.runtime.paths import processed_dir, results_dir
from toksel.runtime.records import RunRecord, flatten

SECTIONS = STAGE_SECTIONS["prepare"]


def prepare(config: Config, run: RunRecord) -> None:
    folders = draws(config.data, config.base.seeds)
    metrics = {}
    for name, seed in folders.items():
        generator_seed = draw_seed(config.base.data_seed, seed)
        if config.data.source == "synthetic":
            prepared = prepare_synthetic(config.data.synthetic, generator_seed)
        else:
            prepared = prepare_text(config.dataset, config.data, generator_seed)
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
