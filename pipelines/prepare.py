"""Stage `prepare`: load or generate a dataset, pack it (CSR bag of tokens + ordered ids), token statistics."""

from __future__ import annotations

import sys

from toksel.cli import run_stage
from toksel.config import Config
from toksel.data.prepared import prepare_synthetic, prepare_text, summary_metrics
from toksel.data.token_table import write_token_table
from toksel.paths import processed_dir, results_dir
from toksel.tracking import StageRun

SECTIONS = ("base.data_seed", "data")


def prepare(config: Config, run: StageRun) -> None:
    if config.data.source == "synthetic":
        prepared = prepare_synthetic(config.data, config.base.data_seed)
    else:
        prepared = prepare_text(config.dataset, config.data, config.base.data_seed)
    out = processed_dir(config.dataset)
    for name, split in prepared.splits.items():
        split.save(out / f"{name}.npz")
    write_token_table(out / "tokens.csv", prepared.tokens)
    run.record_metrics(results_dir("prepare", config.dataset) / "metrics.json", summary_metrics(prepared))


def main(argv: list[str] | None = None) -> int:
    return run_stage("prepare", SECTIONS, prepare, argv)


if __name__ == "__main__":
    sys.exit(main())
