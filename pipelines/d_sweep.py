"""Stage `d_sweep`: a finding of ours, how the gap between trained and random frozen embeddings moves with the
embedding dimension. For every d of d_sweep.d and every training seed, the trained, untrained and one_step arms
of the one-layer model (training/arms.py) are trained as the train stage trains them, each at its own best rate
(the screen over train.lr_grid, extended past an edge): E frozen at random grows more expressive as d nears the
number of tokens V, the trained arm does not need it to. The one_step arm gives the spread ratio trained /
one_step (the rebuttal's tighter curves) against d. The train stage's runs at model.d join the sweep.

dvc.yaml runs it for each dataset of d_sweep.datasets (d_sweep@<dataset>). Writes results/d_sweep/<dataset>/:
sweep.csv (one row per d, arm and seed: test accuracy, the rate, how the fit ended, and the curves' four spreads
binned on the held-out statistics and the four binned on the training split's, train_binned_), accuracy.png
(test accuracy against d / V) and metrics.json (per d: each arm's mean test accuracy, the gap, and the spread
ratios trained / one_step of the seeds' means). Each d and seed is a unit of work (a process each here, or a
cluster's worker: runtime/fanout.py).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np
import pandas as pd

from pipelines.sections import STAGE_SECTIONS
from toksel.claims.measurements import curve_settings
from toksel.data.draws import data_dir
from toksel.figures.plots import d_sweep_figure, save_figure
from toksel.params import Config
from toksel.runtime.cli import run_stage
from toksel.runtime.fanout import map_units
from toksel.runtime.io import read_json, write_csv
from toksel.runtime.paths import results_dir, seed_dir
from toksel.runtime.progress import show_progress
from toksel.runtime.records import RunRecord
from toksel.theory.token_curves import SPREADS, TRAIN_BINNED

SECTIONS = STAGE_SECTIONS["d_sweep"]
SWEPT = ("trained", "untrained", "one_step")  # E trained, frozen at its random initialisation, frozen at E1
KEPT = ("test_accuracy", "test_loss", "lr", "lr_at_edge", "epochs", "stopped_epoch", "best_epoch", "budget_bound",
        *SPREADS, *(TRAIN_BINNED + name for name in SPREADS))


def train_stage_rows(dataset: str, config: Config, vocabulary: dict[int, int]) -> list[dict]:
    """The train stage's kept fits of the swept arms at model.d (those that exist)."""
    rows = []
    for arm in SWEPT:
        for seed in config.training_seeds:
            path = seed_dir(results_dir("train", f"{dataset}/{arm}"), seed) / "metrics.json"
            if path.exists():
                metrics = read_json(path)
                rows.append({"d": config.model.d, "arm": arm, "seed": seed, "vocabulary": vocabulary[seed],
                             "source": "train stage", **{name: metrics.get(name) for name in KEPT}})
    return rows


@dataclass(frozen=True)
class SweepPoint:
    """One d and seed of the sweep: a unit of work (runtime/fanout.py), its runs nested in a copy of the stage's."""
    config: Config
    d: int
    seed: int
    run: RunRecord


def sweep_point(point: SweepPoint) -> tuple[list[dict], RunRecord]:
    """The swept arms at one d and seed: their rows, and the copy of the stage's run that holds their runs."""
    # Lightning (and torch) where a fit runs: in the point's process, not in the one that hands the points out
    from toksel.training.arms import Arms
    from toksel.training.fit import FitPlan, checkpoint_dir, fit_key
    from toksel.training.protocol import Protocol, train_with_control
    from toksel.training.record import TokenReading

    config, d, seed, run = point.config, point.d, point.seed, point.run
    settings, folder = config.train, data_dir(config.dataset, point.seed)
    arms = Arms(config, folder, seed, d)
    fingerprint = fit_key({**config.sections(SECTIONS), "seed": seed, "d": d}, folder / "train.npz")
    rows = []
    for arm in SWEPT:
        with run.child(f"d {d} {arm} seed {seed}", {"embeddings": arm, "d": str(d)},
                       {"arm": arm, "model.d": d}) as child:
            plan = FitPlan(settings, checkpoint_dir("d_sweep", f"{config.dataset}/d{d}/{arm}") / f"seed{seed}",
                           fingerprint, child, seed, show_progress())
            protocol = Protocol(arms.model(arm), arms.data, plan, TokenReading(arms.tokens, curve_settings(settings)))
            fitted = train_with_control(protocol, settings.lr_grid, control=False)
            child.log_metrics({name: fitted.metrics.get(name) for name in KEPT})
        rows.append({"d": d, "arm": arm, "seed": seed, "vocabulary": int(arms.tokens.occurring().sum()),
                     "source": "sweep", **{name: fitted.metrics.get(name) for name in KEPT}})
    return rows, run


def d_sweep(config: Config, run: RunRecord) -> None:
    dataset = config.dataset
    points = [SweepPoint(config, d, seed, run.detached()) for seed in config.training_seeds for d in config.d_sweep.d]
    rows = []
    for point_rows, point_run in map_units(sweep_point, points, config.compute, "processes"):  # a fit each
        rows.extend(point_rows)
        run.adopt(point_run)
    vocabulary = {row["seed"]: row["vocabulary"] for row in rows}
    sweep = pd.DataFrame([*rows, *train_stage_rows(dataset, config, vocabulary)])
    sweep["d_over_vocabulary"] = sweep["d"] / sweep["vocabulary"]
    out = results_dir("d_sweep", dataset)
    write_csv(out / "sweep.csv", sweep)
    means = sweep.groupby(["d", "arm"])["test_accuracy"].mean().unstack()
    save_figure(d_sweep_figure(sweep, dataset), out / "accuracy.png")
    run.log_artifact(out / "accuracy.png")
    ratios = spread_ratios(sweep)
    metrics = {f"d{d}": {f"{arm}_test_accuracy": means.loc[d, arm] for arm in SWEPT if arm in means}
               | {"gap": means.loc[d, "trained"] - means.loc[d, "untrained"]} | ratios.get(d, {})
               for d in means.index}
    gaps = np.array([values["gap"] for values in metrics.values()])
    run.record_metrics(out / "metrics.json", {**metrics, "gap_smallest_d": float(gaps[0]),
                                              "gap_largest_d": float(gaps[-1])})


def spread_ratios(sweep: pd.DataFrame) -> dict[int, dict[str, float]]:
    """Per d: spread_ratio_v, _p (the seeds' mean bin_spread of the trained arm over the one_step arm's, as the
    claims read it: above 1, one step then frozen gives the tighter curves) and the same of the training-binned
    spreads (train_binned_spread_ratio_v, _p); {} for a d without both arms."""
    names = {f"spread_ratio_{vector}": f"bin_spread_{vector}" for vector in ("v", "p")}
    names |= {f"{TRAIN_BINNED}spread_ratio_{vector}": f"{TRAIN_BINNED}bin_spread_{vector}" for vector in ("v", "p")}
    columns = [column for column in names.values() if column in sweep]
    means = sweep[sweep["arm"].isin(["trained", "one_step"])].groupby(["d", "arm"])[columns].mean()
    ratios = {}
    for d in sweep["d"].unique():
        if (d, "trained") in means.index and (d, "one_step") in means.index:
            ratios[d] = {ratio: float(means.loc[(d, "trained"), column] / means.loc[(d, "one_step"), column])
                         for ratio, column in names.items() if column in columns}
    return ratios


def main(argv: list[str] | None = None) -> int:
    return run_stage("d_sweep", SECTIONS, d_sweep, argv)


if __name__ == "__main__":
    sys.exit(main())
