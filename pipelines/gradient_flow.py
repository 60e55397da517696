"""Stage `gradient_flow`: E frozen at E1, full-batch GD on p; selection and max-margin checks along the way."""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd

from toksel.cli import run_stage, show_progress
from toksel.config import Config
from toksel.data.corpus import PackedSplit
from toksel.data.token_table import num_classes, read_token_table
from toksel.io import read_npz, write_csv, write_npz
from toksel.models.fused import FusedBags
from toksel.paths import processed_dir, results_dir
from toksel.theory.convergence import analyse_trajectory, importance_scores
from toksel.tracking import StageRun
from toksel.training.gradient_flow import run_gradient_flow

SECTIONS = ("gradient_flow",)


def gradient_flow(config: Config, run: StageRun) -> None:
    settings = config.gradient_flow
    data = processed_dir(config.dataset)
    train = PackedSplit.load(data / "train.npz")
    tokens = read_token_table(data / "tokens.csv")
    important = tokens["important"].to_numpy(dtype=bool)
    embeddings = read_npz(results_dir("one_step", config.dataset) / "embeddings.npz", producer="one_step")
    E1, p0, v = embeddings["E1"], embeddings["p0"], embeddings["v"]

    bags = FusedBags.from_split(train, num_classes(tokens))
    trajectory = run_gradient_flow(E1, p0, v, bags, steps=settings.steps, lr=settings.lr,
                                   normalized=settings.normalized, log_every=settings.log_every,
                                   progress=show_progress())
    report = analyse_trajectory(trajectory, E1, train, important, settings.selection_tol, settings.max_margin)
    if settings.max_margin and not report.max_margin.solved:
        print(f"gradient_flow: the max-margin QP for the final selection is {report.max_margin.status} "
              f"({report.n_constraints} constraints); cos_max_margin and normalized_margin are null",
              file=sys.stderr)
    run.set_tag("max_margin_status", report.max_margin.status)

    out = results_dir("gradient_flow", config.dataset)
    p_mm = report.max_margin.direction if report.max_margin.solved else np.full_like(trajectory.p[-1], np.nan)
    write_npz(out / "trajectory.npz", steps=trajectory.steps, p=trajectory.p, p_max_margin=p_mm)
    write_csv(out / "history.csv", pd.DataFrame(report.history))
    curves = {name: values for name, values in report.history.items() if name != "step"}
    run.log_history(trajectory.steps, curves)
    metrics = {**report.final_metrics(), **importance_scores(E1 @ trajectory.p[-1], tokens)}
    run.record_metrics(out / "metrics.json", metrics, logged=curves)


def main(argv: list[str] | None = None) -> int:
    return run_stage("gradient_flow", SECTIONS, gradient_flow, argv)


if __name__ == "__main__":
    sys.exit(main())
