"""Stage `one_step`: E0, p0 ~ N(0, I/d), v a unit vector; one full-batch GD step on E (Lemma 4.1)."""

from __future__ import annotations

import sys

import numpy as np

from toksel.cli import run_stage
from toksel.config import Config
from toksel.data.corpus import PackedSplit
from toksel.data.token_table import occurring, read_token_table
from toksel.io import write_npz
from toksel.models.fused import FusedBags
from toksel.models.one_layer import initialise
from toksel.paths import processed_dir, results_dir
from toksel.theory.one_step import alignment_metrics, one_gradient_step_on_embeddings
from toksel.tracking import StageRun

SECTIONS = ("base", "model", "one_step")


def one_step(config: Config, run: StageRun) -> None:
    data = processed_dir(config.dataset)
    train = PackedSplit.load(data / "train.npz")
    tokens = read_token_table(data / "tokens.csv")
    init = initialise(train.vocab_size, config.model.d, config.base.seed)
    E0, p0, v = init.E.numpy(), init.p.numpy(), init.v.numpy()
    E1 = one_gradient_step_on_embeddings(E0, p0, v, FusedBags.from_split(train), config.one_step.eta0)
    metrics = alignment_metrics(E0, E1, v, tokens["alpha"].to_numpy(), config.one_step.eta0,
                                np.flatnonzero(occurring(tokens)))

    out = results_dir("one_step", config.dataset)
    write_npz(out / "embeddings.npz", E0=E0, E1=E1, p0=p0, v=v)
    run.record_metrics(out / "metrics.json", metrics)


def main(argv: list[str] | None = None) -> int:
    return run_stage("one_step", SECTIONS, one_step, argv)


if __name__ == "__main__":
    sys.exit(main())
