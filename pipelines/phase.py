"""Stage `phase`: one row of the eta0 x d phase diagram on Assumption-1 synthetic data: every eta0 of phase.eta0
at the row's d for the first seed of base.seeds, and the cells at the edges of its window for every seed.

dvc.yaml runs it once per d of phase.d (phase@<d>) with model.d set to it. Each cell is the one step of the
`one_step` stage from a fresh initialisation at (d, eta0) on the seed's draw of the data, then the
`gradient_flow` stage's flow on p with the dataset's gradient_flow settings, to flow time phase.horizon at
phase.tolerance (cells near the window's upper edge are stiff: at the dataset's tolerance their halved-step
twins part from them). Each cell is its own MLflow run, nested under the stage's (parameters model.d and
one_step.eta0, its seeds' metrics as seed<k>.<name>). The cell records whether p selects the important tokens and
reaches the max-margin direction (too large an eta0 breaks selection), and the one-step error, the part of the
update orthogonal to v, for the d sweep. Where the edges lie is what varies from seed to seed: the cells that
bracket the first seed's edges (the last failing and the first selecting eta0 on each side) run for every other
seed too; the max-margin QP is solved for the first seed only, for the heatmap. The row's cells go into one file,
results/phase/d<d>/metrics.json, keyed eta<eta0> then seed<k>. Each cell is a small problem on one thread, so one
is computed per core, each in its own process.
"""

from __future__ import annotations

import dataclasses
import sys

import numpy as np
from tqdm import tqdm

from pipelines.sections import STAGE_SECTIONS
from toksel.data.corpus import PackedSplit
from toksel.data.draws import data_dir
from toksel.data.token_table import read_token_table
from toksel.params import Config
from toksel.runtime.cli import run_stage
from toksel.runtime.errors import ToksError
from toksel.runtime.fanout import map_units
from toksel.runtime.paths import phase_cell_key, phase_row_dir
from toksel.runtime.progress import show_progress
from toksel.runtime.records import RunRecord, flatten
from toksel.theory.convergence import follow_gradient_flow
from toksel.theory.one_step import one_step_from_initialisation
from toksel.theory.phase import bracketing, measured_window

SECTIONS = STAGE_SECTIONS["phase"]


def phase_row(config: Config, run: RunRecord) -> None:
    if config.data.source != "synthetic" or config.data.synthetic.mode != "assumption1":
        raise ToksError(f"phase.dataset = {config.dataset!r} is not assumption1 synthetic data: the phase diagram "
                        "needs known important tokens and the max-margin QP (set phase.dataset=synthetic)")
    d, seeds = config.model.d, config.base.seeds
    draws = {seed: (PackedSplit.load(data_dir(config.dataset, seed) / "train.npz"),
                    read_token_table(data_dir(config.dataset, seed) / "tokens.csv")) for seed in seeds}

    def cell(eta0: float, seed: int) -> dict[str, float]:
        train, tokens = draws[seed]
        step = one_step_from_initialisation(train, tokens, d, seed, eta0)
        # The QP for the first seed's heatmap; the grid reads the direction for the cell's own final selection.
        settings = dataclasses.replace(config.gradient_flow, horizon=config.phase.horizon,
                                       tolerance=config.phase.tolerance,
                                       max_margin=config.gradient_flow.max_margin and seed == seeds[0])
        flow = follow_gradient_flow(step.E1, step.p0, step.v, train, tokens, settings,
                                    important_direction=False)
        return {"d": float(d), "eta0": eta0, "seed": float(seed),
                **{f"one_step_{name}": value for name, value in step.metrics.items()}, **flow.metrics}

    # Each cell is a small problem that runs on one thread (models/threads.py). Processes, not threads: a flow's
    # step control is Python, which holds the GIL between the compiled passes (two threads kept 1.1 cores busy, two
    # processes 1.9). The cells are independent, so the numbers do not depend on the order.
    with tqdm(desc=f"phase d={d}: cells", unit="cell", disable=not show_progress(), mininterval=1.0) as bar:
        def computed(wanted: list[tuple[float, int]]) -> dict[tuple[float, int], dict[str, float]]:
            bar.total = (bar.total or 0) + len(wanted)
            return dict(zip(wanted, map_units(lambda key: cell(*key), wanted, config.compute, "processes", bar.update),
                            strict=True))

        first = computed([(eta0, seeds[0]) for eta0 in config.phase.eta0])
        window = measured_window(np.array(config.phase.eta0), np.array(
            [first[eta0, seeds[0]]["selection_fraction"] >= config.evaluate.min_selection_fraction
             for eta0 in config.phase.eta0]))
        edges = computed([(eta0, seed) for eta0 in bracketing(window) for seed in seeds[1:]])
    cells: dict[str, dict[str, dict[str, float]]] = {}
    for eta0 in config.phase.eta0:
        cells[phase_cell_key(eta0)] = {f"seed{seed}": values for (at, seed), values in {**first, **edges}.items()
                                       if at == eta0}
        with run.child(f"cell d={d} eta0={eta0:g}", {"phase_cell": f"d={d} eta0={eta0:g}"}) as logged:
            logged.log_params({"model.d": d, "one_step.eta0": eta0})
            logged.log_metrics(flatten(cells[phase_cell_key(eta0)]))
    run.record_metrics(phase_row_dir(d) / "metrics.json", cells)


def main(argv: list[str] | None = None) -> int:
    return run_stage("phase", SECTIONS, phase_row, argv, variant=lambda config: f"d {config.model.d}")


if __name__ == "__main__":
    sys.exit(main())
