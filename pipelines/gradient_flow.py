"""Stage `gradient_flow`: E frozen at E1, full-batch GD on p; selection and max-margin checks along the way, and
the controls of those claims (theory/convergence.py). Every seed of base.seeds in one process
(gradient_flow@<dataset>), each from that seed's one_step, into results/gradient_flow/<dataset>/seed<seed>/;
their metrics gathered in results/gradient_flow/<dataset>.json."""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd

from toksel.cli import run_stage, show_progress
from toksel.config import Config
from toksel.data.corpus import PackedSplit
from toksel.data.token_table import read_token_table
from toksel.io import read_npz, write_csv, write_npz
from toksel.paths import processed_dir, results_dir, seed_dir
from toksel.theory.convergence import control_metrics, follow_gradient_flow
from toksel.tracking import StageRun

SECTIONS = ("base.seeds", "gradient_flow")


def gradient_flow(config: Config, run: StageRun) -> None:
    data, seed = processed_dir(config.dataset), config.seed
    embeddings = read_npz(seed_dir(results_dir("one_step", config.dataset), seed) / "embeddings.npz",
                          producer="one_step")
    train, tokens = PackedSplit.load(data / "train.npz"), read_token_table(data / "tokens.csv")
    flow = follow_gradient_flow(embeddings["E1"], embeddings["p0"], embeddings["v"], train, tokens,
                                config.gradient_flow, progress=show_progress())
    controls = control_metrics(embeddings["E0"], embeddings["E1"], embeddings["p0"], embeddings["v"], train, tokens,
                               config.gradient_flow)
    report, trajectory = flow.report, flow.trajectory
    if config.gradient_flow.max_margin and not report.max_margin.solved:
        print(f"gradient_flow: the max-margin QP for the final selection is {report.max_margin.status} "
              f"({report.n_constraints} constraints); cos_max_margin and normalized_margin are null",
              file=sys.stderr)
    run.set_tag("max_margin_status", report.max_margin.status)

    out = seed_dir(results_dir("gradient_flow", config.dataset), seed)
    p_mm = report.max_margin.direction if report.max_margin.solved else np.full_like(trajectory.p[-1], np.nan)
    write_npz(out / "trajectory.npz", steps=trajectory.steps, p=trajectory.p, p_max_margin=p_mm)
    write_csv(out / "history.csv", pd.DataFrame(report.history))
    curves = {name: values for name, values in report.history.items() if name != "step"}
    run.log_history(trajectory.steps, curves)
    run.record_metrics(out / "metrics.json", {**flow.metrics, **controls}, logged=curves)


def main(argv: list[str] | None = None) -> int:
    return run_stage("gradient_flow", SECTIONS, gradient_flow, argv,
                     every_seed=lambda config: results_dir("gradient_flow", config.dataset))


if __name__ == "__main__":
    sys.exit(main())
