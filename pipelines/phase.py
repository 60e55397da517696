"""Stage `phase`: one cell of the eta0 x d phase diagram on Assumption-1 synthetic data.

dvc.yaml runs it once per (phase.d, phase.eta0) with model.d and one_step.eta0 set to the cell's values: the
one step of the `one_step` stage from a fresh initialisation at that d, then the `gradient_flow` stage's GD on
p with the dataset's gradient_flow settings. The cell records whether p selects the important tokens and
reaches the max-margin direction (paper.md section 8: too large an eta0 breaks selection), and the one-step
error, the part of the update orthogonal to v, for the d sweep.
"""

from __future__ import annotations

import sys

from toksel.cli import run_stage, show_progress
from toksel.config import Config
from toksel.data.corpus import PackedSplit
from toksel.data.token_table import read_token_table
from toksel.errors import ToksError
from toksel.paths import phase_cell_dir, processed_dir
from toksel.theory.convergence import follow_gradient_flow
from toksel.theory.one_step import one_step_from_initialisation
from toksel.tracking import StageRun

SECTIONS = ("model", "one_step", "gradient_flow")


def phase_cell(config: Config, run: StageRun) -> None:
    if config.data.source != "synthetic" or config.data.synthetic.mode != "assumption1":
        raise ToksError(f"phase.dataset = {config.dataset!r} is not assumption1 synthetic data: the phase diagram "
                        "needs known important tokens and the max-margin QP (set phase.dataset=synthetic)")
    data = processed_dir(config.dataset)
    train, tokens = PackedSplit.load(data / "train.npz"), read_token_table(data / "tokens.csv")
    d, eta0 = config.model.d, config.one_step.eta0
    run.set_tag("phase_cell", f"d={d} eta0={eta0:g}")
    step = one_step_from_initialisation(train, tokens, d, config.seed, eta0)
    flow = follow_gradient_flow(step.E1, step.p0, step.v, train, tokens, config.gradient_flow,
                                progress=show_progress())
    one_step = {f"one_step_{name}": value for name, value in step.metrics.items()}
    run.record_metrics(phase_cell_dir(d, eta0) / "metrics.json",
                       {"d": float(d), "eta0": eta0, **one_step, **flow.metrics})


def main(argv: list[str] | None = None) -> int:
    return run_stage("phase", SECTIONS, phase_cell, argv, seeded=True)


if __name__ == "__main__":
    sys.exit(main())
