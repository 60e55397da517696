"""The training arms as the report shows them: where each fit stopped and whether its epoch budget ended it; the
untrained arm's test accuracy against epochs (a reading taken before a fit converged); and the spread ratio of the
full-training arm over the one-step arm across protocols, a sweep that finds where, if anywhere, the rebuttal's
direction appears (one step then frozen gives tighter binned curves: a ratio above 1).

Everything here reads what the train and d_sweep stages wrote: each arm's metrics.json (its kept fit), grid.csv
(every rate's screen and full fits) and epochs.csv (the kept and matched fits epoch by epoch), and the d sweep's
sweep.csv.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from toksel.claims.measurements import EPOCHS, seed_metrics
from toksel.claims.paper import REBUTTAL_ACCURACY
from toksel.claims.verdict import seed_interval
from toksel.params import EMBEDDINGS, Config
from toksel.runtime.paths import results_dir, seed_dir
from toksel.summaries.markdown import number
from toksel.theory.token_curves import SPREADS, TRAIN_BINNED

CONVERGENCE_HEADER = ["dataset", "arm", "fit", "learning rates", "stopped at epoch", "best epoch",
                      "ended by the epoch budget", "test accuracy"]


def _arm_folder(dataset: str, arm: str) -> Path:
    return results_dir("train", f"{dataset}/{arm}")


def _grid_fits(dataset: str, arm: str, config: Config, lr: float) -> list[dict]:
    """Each seed's full fit at `lr` from its grid.csv (its row carries the fit's metrics)."""
    fits = []
    for seed in config.training_seeds:
        path = seed_dir(_arm_folder(dataset, arm), seed) / "grid.csv"
        if path.exists():
            grid = pd.read_csv(path)
            row = grid[np.isclose(grid["lr"], lr)]
            if len(row) and "stopped_epoch" in row and math.isfinite(row["stopped_epoch"].iloc[0]):
                fits.append(row.iloc[0].to_dict())
    return fits


def _span(values: Sequence[float]) -> str:
    found = sorted({int(value) for value in values if value is not None and math.isfinite(value)})
    return "-" if not found else (f"{found[0]}" if len(found) == 1 else f"{found[0]}-{found[-1]}")


def convergence_rows(config: Config) -> list[list[str]]:
    """Per training dataset and arm: its kept fits (the claims' protocol) and its matched-lr fits, over the seeds:
    the rates, where they stopped and were best, how many the epoch budget ended, their test accuracy."""
    rows = []
    for dataset in config.train.datasets:
        for arm in EMBEDDINGS:
            kept = [metrics for metrics in seed_metrics(_arm_folder(dataset, arm), config.training_seeds).values()
                    if "stopped_epoch" in metrics]
            matched = _grid_fits(dataset, arm, config, config.train.lr)
            for fit, fits, budget in (("kept (its best rate)", kept, config.train.max_epochs),
                                      (f"matched lr {config.train.lr:g}", matched, config.train.matched_max_epochs)):
                if not fits:
                    continue
                accuracy = [fit["test_accuracy"] for fit in fits]
                rates = ", ".join(f"{rate:g}" for rate in sorted({fit["lr"] for fit in fits}))
                bound = sum(bool(fit["budget_bound"]) for fit in fits)
                rows.append([dataset, arm, fit, rates, _span([fit["stopped_epoch"] for fit in fits]),
                             _span([fit["best_epoch"] for fit in fits]),
                             f"{bound} of {len(fits)} (budget {budget})",
                             f"{np.mean(accuracy):.3f} +- {np.std(accuracy):.3f}"])
    return rows


def epoch_logs(dataset: str, arm: str, config: Config) -> dict[int, pd.DataFrame]:
    """seed -> the arm's per-epoch log (kept and matched fits), for the seeds that have one."""
    found = {}
    for seed in config.training_seeds:
        path = seed_dir(_arm_folder(dataset, arm), seed) / EPOCHS
        if path.exists():
            found[seed] = pd.read_csv(path)
    return found


def _fit(log: pd.DataFrame, name: str) -> pd.DataFrame:
    """One fit of a per-epoch log; the matched fit is the kept one where the arm kept the matched rate."""
    wanted = log[log["fit"] == name]
    return wanted if len(wanted) or name != "matched" else log[log["fit"] == "kept"]


def accuracy_epochs_figure(dataset: str, config: Config) -> plt.Figure | None:
    """Test accuracy against epochs: the untrained arm at the matched rate and at its own best rate, the trained
    arm at its best, every seed a line; the rebuttal's 72 % and the matched fits' budget."""
    logs = {arm: epoch_logs(dataset, arm, config) for arm in ("untrained", "trained")}
    if not logs["untrained"]:
        return None
    figure, axis = plt.subplots(figsize=(7.2, 4.4))
    styles = {("untrained", "matched"): ("#d73027", f"untrained, matched lr {config.train.lr:g}"),
              ("untrained", "kept"): ("#fc8d59", "untrained, its best rate"),
              ("trained", "kept"): ("#1a9850", "trained, its best rate")}
    for (arm, fit), (colour, label) in styles.items():
        for n, log in enumerate(logs[arm].values()):
            rows = _fit(log, fit)
            if len(rows):
                axis.plot(rows["epoch"], rows["test_accuracy"], "-", color=colour, lw=1.2, alpha=0.85,
                          label=label if n == 0 else None)
    axis.axhline(REBUTTAL_ACCURACY["untrained"], color="#555555", ls=":", lw=1,
                 label=f"the rebuttal's untrained arm, {REBUTTAL_ACCURACY['untrained']:g}")
    budget = config.train.matched_max_epochs
    axis.axvline(budget, color="#555555", ls="--", lw=1, label=f"epoch {budget}, the matched fits' budget")
    axis.set_xlabel("epoch")
    axis.set_ylabel("test accuracy")
    axis.set_title(f"{dataset}: test accuracy against epochs (each seed a line)", fontsize=10)
    axis.legend(fontsize=7, loc="lower right")
    axis.grid(alpha=0.3)
    figure.tight_layout()
    return figure


def spread_sweep(dataset: str, config: Config) -> pd.DataFrame:
    """The spread ratio, full training over one step then frozen (above 1: the one-step arm's curves are tighter,
    the rebuttal's direction), per seed, across protocols: after every epoch of the two kept fits, after the
    screen at every learning rate both arms tried, and at every d of the d sweep; each spread scale-free and raw,
    binned by the held-out and by the training split's statistics."""
    rows = []
    trained, one_step = (epoch_logs(dataset, arm, config) for arm in ("trained", "one_step"))
    for seed in sorted(set(trained) & set(one_step)):
        full, frozen = (_fit(log, "kept").set_index("epoch") for log in (trained[seed], one_step[seed]))
        for epoch in sorted(set(full.index) & set(frozen.index)):
            rows += _ratios("epoch", float(epoch), seed, full.loc[epoch], frozen.loc[epoch], "")
    for seed in config.training_seeds:
        grids = [seed_dir(_arm_folder(dataset, arm), seed) / "grid.csv" for arm in ("trained", "one_step")]
        if all(path.exists() for path in grids):
            full, frozen = (pd.read_csv(path).set_index("lr") for path in grids)
            for lr in sorted(set(full.index) & set(frozen.index)):
                rows += _ratios("learning rate (screen)", float(lr), seed, full.loc[lr], frozen.loc[lr], "screen_")
    path = results_dir("d_sweep", dataset) / "sweep.csv"
    if path.exists():
        sweep = pd.read_csv(path)
        for (d, seed), cells in sweep.groupby(["d", "seed"]):
            arms = cells.set_index("arm")
            if {"trained", "one_step"} <= set(arms.index):
                rows += _ratios("d", float(d), int(seed), arms.loc["trained"], arms.loc["one_step"], "")
    return pd.DataFrame(rows, columns=["protocol", "setting", "seed", "binning", "spread", "ratio"])


def _ratios(protocol: str, setting: float, seed: int, full: pd.Series, frozen: pd.Series,
            prefix: str) -> list[tuple]:
    found = []
    for binning, binned in (("held-out", ""), ("training", TRAIN_BINNED)):
        for spread in SPREADS:
            key = f"{prefix}{binned}{spread}"
            if key in full and key in frozen and float(frozen[key]) > 0:
                found.append((protocol, setting, seed, binning, spread, float(full[key]) / float(frozen[key])))
    return found


def sweep_findings(sweep: pd.DataFrame) -> pd.DataFrame:
    """Per protocol point and spread: the ratio's mean over the seeds with its 95 % interval, and whether it
    shows the rebuttal's direction (the interval above 1), the opposite (below 1), or neither."""
    rows = []
    for (protocol, setting, binning, spread), cells in sweep.groupby(["protocol", "setting", "binning", "spread"]):
        interval = seed_interval(cells["ratio"].tolist())
        direction = ("one step tighter" if interval.exists and interval.low > 1 else
                     "full training tighter" if interval.exists and interval.high < 1 else "neither")
        rows.append((protocol, setting, binning, spread, interval.mean, interval.low, interval.high, direction))
    return pd.DataFrame(rows, columns=["protocol", "setting", "binning", "spread", "mean", "low", "high",
                                       "direction"])


def sweep_text(dataset: str, findings: pd.DataFrame) -> str:
    """The sweep's finding in words: where the rebuttal's direction appears, and the largest ratio."""
    if findings.empty:
        return f"{dataset}: the protocol sweep has no runs yet."
    rebuttal = findings[findings["direction"] == "one step tighter"]
    largest = findings.loc[findings["mean"].idxmax()]
    where = "; ".join(f"{row.spread}, {row.binning} binning, {row.protocol} {row.setting:g} ({number(row.mean)} "
                      f"[{number(row.low)}, {number(row.high)}])" for row in rebuttal.itertuples()) or "nowhere"
    opposite = int((findings["direction"] == "full training tighter").sum())
    return (f"{dataset}: of {len(findings)} protocol points (epochs, learning rates, d; spreads scale-free and raw; "
            f"binned by held-out or training statistics), the rebuttal's direction (one step then frozen tighter, "
            f"the ratio's interval above 1) appears at: {where}. Full training is the tighter at {opposite} of them. "
            f"The largest ratio, {number(largest['mean'])}, is the {largest['spread']} at {largest['protocol']} "
            f"{largest['setting']:g} ({largest['binning']} binning).")


def sweep_figure(dataset: str, sweep: pd.DataFrame) -> plt.Figure | None:
    """The ratio's mean over the seeds against each protocol's setting, a panel per protocol, a line per spread
    and binning; the line at 1 parts the rebuttal's direction (above) from ours."""
    if sweep.empty:
        return None
    protocols = list(dict.fromkeys(sweep["protocol"]))
    figure, axes = plt.subplots(1, len(protocols), figsize=(4.2 * len(protocols), 3.8), squeeze=False)
    colours = {"bin_spread_v": "#2166ac", "bin_spread_p": "#b2182b", "bin_std_v": "#67a9cf", "bin_std_p": "#ef8a62"}
    for axis, protocol in zip(axes[0], protocols, strict=True):
        mine = sweep[sweep["protocol"] == protocol]
        for (spread, binning), cells in mine.groupby(["spread", "binning"]):
            means = cells.groupby("setting")["ratio"].mean()
            axis.plot(means.index, means.to_numpy(), "o-" if binning == "held-out" else "s--", ms=3, lw=1.1,
                      color=colours.get(spread, "#555555"), label=f"{spread}, {binning}")
        axis.axhline(1.0, color="black", lw=0.8)
        axis.set_yscale("log")
        if protocol != "epoch":
            axis.set_xscale("log")
        axis.set_xlabel(protocol, fontsize=8)
        axis.tick_params(labelsize=7)
        axis.grid(alpha=0.3)
    axes[0][0].set_ylabel("full training / one step then frozen", fontsize=8)
    axes[0][-1].legend(fontsize=6, loc="best")
    figure.suptitle(f"{dataset}: the spread ratio across protocols (above 1: the rebuttal's direction)", fontsize=10)
    figure.tight_layout()
    return figure
