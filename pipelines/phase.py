"""Stage `phase`: one row of the eta0 x d phase diagram on Assumption-1 synthetic data: every eta0 of phase.eta0
at the row's d.

dvc.yaml runs it once per d of phase.d (phase@<d>) with model.d set to it. Each cell is the one step of the
`one_step` stage from a fresh initialisation at (d, eta0), then the `gradient_flow` stage's GD on p with the
dataset's gradient_flow settings, and is its own MLflow run, nested under the stage's (parameters model.d and
one_step.eta0). The cell records whether p selects the important tokens and reaches the max-margin direction
(too large an eta0 breaks selection), and the one-step error, the part of the update orthogonal to v, for the
d sweep. The row's cells go into one file, results/phase/d<d>/metrics.json, keyed eta<eta0>. Each cell is a small
problem on one thread, so two are computed at a time.
"""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor

from toksel.cli import run_stage
from toksel.config import Config
from toksel.data.corpus import PackedSplit
from toksel.data.draws import data_dir
from toksel.data.token_table import read_token_table
from toksel.errors import ToksError
from toksel.paths import phase_cell_key, phase_row_dir
from toksel.theory.convergence import follow_gradient_flow
from toksel.theory.one_step import one_step_from_initialisation
from toksel.tracking import StageRun

SECTIONS = ("model", "gradient_flow", "phase.eta0")
PARALLEL_CELLS = 2


def phase_row(config: Config, run: StageRun) -> None:
    if config.data.source != "synthetic" or config.data.synthetic.mode != "assumption1":
        raise ToksError(f"phase.dataset = {config.dataset!r} is not assumption1 synthetic data: the phase diagram "
                        "needs known important tokens and the max-margin QP (set phase.dataset=synthetic)")
    data = data_dir(config.dataset, config.seed)
    train, tokens = PackedSplit.load(data / "train.npz"), read_token_table(data / "tokens.csv")
    d = config.model.d
    run.set_tag("mlflow.runName", f"phase d={d}")
    def cell(eta0: float) -> dict[str, float]:
        step = one_step_from_initialisation(train, tokens, d, config.seed, eta0)
        # The grid reads the direction for the cell's own final selection, not for the important tokens.
        flow = follow_gradient_flow(step.E1, step.p0, step.v, train, tokens, config.gradient_flow,
                                    progress=False, important_direction=False)
        return {"d": float(d), "eta0": eta0, **{f"one_step_{name}": value for name, value in step.metrics.items()},
                **flow.metrics}

    # Each cell is a small problem that runs on one thread (models/threads.py): two at a time fill two cores.
    # The compiled passes release the GIL; the cells are independent, so the numbers do not depend on the order.
    cells = {}
    with ThreadPoolExecutor(max_workers=PARALLEL_CELLS) as pool:
        for eta0, metrics in zip(config.phase.eta0, pool.map(cell, config.phase.eta0), strict=True):
            with run.child(f"cell d={d} eta0={eta0:g}", {"phase_cell": f"d={d} eta0={eta0:g}"}) as logged:
                logged.log_params({"model.d": d, "one_step.eta0": eta0})
                logged.log_metrics(metrics)
            cells[phase_cell_key(eta0)] = metrics
    run.record_metrics(phase_row_dir(d) / "metrics.json", cells)


def main(argv: list[str] | None = None) -> int:
    return run_stage("phase", SECTIONS, phase_row, argv, seeded=True)


if __name__ == "__main__":
    sys.exit(main())
