"""Stage `one_step`: E0, p0 ~ N(0, I/d), v a unit vector (K orthonormal v_k for K > 2 classes); one full-batch
GD step on E (Lemma 4.1; the rebuttal's formula for K classes)."""

from __future__ import annotations

import sys

import numpy as np

from toksel.cli import run_stage
from toksel.config import Config
from toksel.data.corpus import PackedSplit
from toksel.data.token_table import class_alphas, num_classes, occurring, read_token_table
from toksel.errors import ToksError
from toksel.io import write_npz
from toksel.models.fused import FusedBags
from toksel.models.one_layer import initialise
from toksel.paths import processed_dir, results_dir
from toksel.theory.one_step import alignment_metrics, one_gradient_step_on_embeddings, theory_slope
from toksel.tracking import StageRun

SECTIONS = ("base", "model", "one_step")


def one_step(config: Config, run: StageRun) -> None:
    data = processed_dir(config.dataset)
    train = PackedSplit.load(data / "train.npz")
    tokens = read_token_table(data / "tokens.csv")
    classes = num_classes(tokens)
    if classes > config.model.d:
        raise ToksError(f"{classes} classes need {classes} orthonormal output vectors: model.d = {config.model.d} "
                        "is too small")
    init = initialise(train.vocab_size, config.model.d, config.base.seed, num_classes=classes)
    E0, p0, v = init.E.numpy(), init.p.numpy(), init.v.numpy()
    E1 = one_gradient_step_on_embeddings(E0, p0, v, FusedBags.from_split(train, classes), config.one_step.eta0)
    alpha = tokens["alpha"].to_numpy() if classes == 2 else class_alphas(tokens)
    metrics = alignment_metrics(E0, E1, v, alpha, theory_slope(config.one_step.eta0, classes),
                                np.flatnonzero(occurring(tokens)))

    out = results_dir("one_step", config.dataset)
    write_npz(out / "embeddings.npz", E0=E0, E1=E1, p0=p0, v=v)
    run.record_metrics(out / "metrics.json", metrics)


def main(argv: list[str] | None = None) -> int:
    return run_stage("one_step", SECTIONS, one_step, argv)


if __name__ == "__main__":
    sys.exit(main())
