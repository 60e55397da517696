"""Stage `phase_diagram`: the phase cells gathered into heatmaps, the measured eta0 window set against the scale
argument, and the d sweep of the one-step error with its log-log slope (toksel.theory.phase).

Every seed of base.seeds has its own grid (its draw of the data, its initialisations): the first seed runs every
cell, the others the cells that bracket the first seed's edges, where the edges move from seed to seed; elsewhere
a seed's grid reads the first seed's cell. Its windows, its edges' factors against the scale argument (each
against its own mean |alpha_s|) and its one-step error slope are one value of each of the phase claims, judged
over the seeds like every other claim. The window table and the heatmaps are the first seed's.

Writes results/phase_diagram/: grid.csv (one row per cell and seed), one_step_error.csv, selection.png,
cos_max_margin_selected.png, one_step_error.png, summary.md and metrics.json.
"""

from __future__ import annotations

import dataclasses
import math
import sys

import numpy as np
import pandas as pd

from pipelines.sections import STAGE_SECTIONS
from toksel.claims.catalogue import BY_ID, Measurement, measure
from toksel.claims.verdict import seed_interval
from toksel.data.draws import data_dir
from toksel.data.token_table import read_token_table
from toksel.figures.plots import phase_heatmap, power_law_figure, save_figure
from toksel.params import Config
from toksel.runtime.cli import run_stage
from toksel.runtime.errors import ToksError
from toksel.runtime.io import read_json, write_csv, write_json
from toksel.runtime.paths import phase_cell_key, phase_row_dir, results_dir
from toksel.runtime.records import RunRecord
from toksel.summaries import markdown
from toksel.summaries.claims import publish_summary
from toksel.theory.phase import (
    Window,
    edge_factor,
    factor_range,
    fit_power_law,
    measured_window,
    predicted_window,
)

SECTIONS = STAGE_SECTIONS["phase_diagram"]
OUT = results_dir("phase_diagram", "")
COLUMNS = ("d", "eta0", "seed", "selection_fraction", "selection_any_fraction", "cos_max_margin_selected",
           "margin_ratio", "loss", "p_norm", "one_step_orthogonal_ratio", "one_step_slope_rel_error", "one_step_slope",
           "one_step_slope_theory", "flow_faithful")
# The controls of the edge claims: the neighbouring laws, eta0 |alpha| / 2 = 1/d for the lower edge and
# = 1/sqrt(d) for the upper one, against the same measured edges.
CONTROL_LAWS = {"low": lambda alpha, d: 2 / (alpha * d), "high": lambda alpha, d: 2 / (alpha * math.sqrt(d))}


def read_grid(config: Config) -> pd.DataFrame:
    """The metrics of every cell of the configured grid (an error names the first missing cell)."""
    rows = []
    for d in config.phase.d:
        row = read_json(phase_row_dir(d) / "metrics.json", producer=f"phase@{d}")
        for eta0 in config.phase.eta0:
            cell = row.get(phase_cell_key(eta0), {})
            first = config.base.seeds[0]
            if f"seed{first}" not in cell:
                raise ToksError(f"{phase_row_dir(d) / 'metrics.json'} has no cell eta0 = {eta0:g} for seed "
                                f"{first}: run the phase stage again (dvc repro phase@{d})")
            rows += [{column: cell[f"seed{seed}"].get(column) for column in COLUMNS} for seed in config.base.seeds
                     if f"seed{seed}" in cell]
    return pd.DataFrame(rows).astype(float)


def _edge(window: Window, which: str) -> str:
    inside, outside = (window.low, window.below) if which == "low" else (window.high, window.above)
    if inside is None:
        return "-"
    if outside is None:
        return f"{'<=' if which == 'low' else '>='} {inside:g} (grid end)"
    return f"({outside:g}, {inside:g}]" if which == "low" else f"[{inside:g}, {outside:g})"


def seed_grid(grid: pd.DataFrame, first: pd.DataFrame, seed: int) -> pd.DataFrame:
    """A seed's grid: its own cells (those at the first seed's edges), the first seed's elsewhere."""
    own = grid[grid["seed"] == seed]
    taken = first.set_index(["d", "eta0"]).index.isin(own.set_index(["d", "eta0"]).index)
    return pd.concat([own, first[~taken]], ignore_index=True)


def seed_values(cells: pd.DataFrame, mean_abs_alpha: float) -> dict[str, float | None]:
    """One seed's values of the phase claims: over d, the largest factor between a measured edge (the geometric
    middle of its bracket) and the scale argument's, and against the neighbouring law (the control); the one-step
    error's |log-log slope + 1/2| in d, and the same for the update along v (its control)."""
    values: dict[str, float | None] = {}
    for which in ("low", "high"):
        ours, control, ranges = [], [], []
        for d, row in cells.groupby("d"):
            window = measured_window(row["eta0"].to_numpy(), row["selects"].to_numpy())
            edge = window.edge(which)
            predicted = predicted_window(mean_abs_alpha, int(d))[0 if which == "low" else 1]
            if edge is not None:
                ours.append(edge_factor(edge, predicted))
                control.append(edge_factor(edge, CONTROL_LAWS[which](mean_abs_alpha, d)))
                ranges.append(factor_range(window.bracket(which), predicted))
        values[f"{which}_edge_factor"] = max(ours) if ours else None
        # The grid fixes an edge only to its bracket: the factors any edge inside the brackets would give.
        values[f"{which}_edge_factor_least"] = max(low for low, _ in ranges) if ranges else None
        values[f"{which}_edge_factor_most"] = max(high for _, high in ranges) if ranges else None
        values[f"control_{which}_edge_factor"] = max(control) if control else None
        values[f"{which}_edges_compared"] = float(len(ours))
    # The one-step error does not depend on eta0 (E1 - E0 is eta0 times the gradient): one value per d.
    per_d = cells.groupby("d", as_index=False)[["one_step_orthogonal_ratio", "one_step_slope",
                                                "one_step_slope_theory"]].median()
    law = fit_power_law(per_d["d"].to_numpy(), per_d["one_step_orthogonal_ratio"].to_numpy())
    along = fit_power_law(per_d["d"].to_numpy(), (per_d["one_step_slope"] / per_d["one_step_slope_theory"]).to_numpy())
    values |= {"one_step_error_slope": law.slope,
               "one_step_error_slope_deviation": abs(law.slope + 0.5) if math.isfinite(law.slope) else None,
               "control_one_step_error_slope_deviation": abs(along.slope + 0.5) if math.isfinite(along.slope)
               else None}
    return values


def phase_diagram(config: Config, run: RunRecord) -> None:
    settings, thresholds, seeds = config.phase, config.evaluate, config.base.seeds
    grid = read_grid(config)
    alphas = {}
    for seed in seeds:
        tokens = read_token_table(data_dir(settings.dataset, seed) / "tokens.csv")
        alphas[seed] = float(np.abs(tokens.column("alpha")[tokens.important]).mean())
    grid["selects"] = grid["selection_fraction"] >= thresholds.min_selection_fraction
    grid["max_margin"] = grid["selects"] & (grid["cos_max_margin_selected"] >= thresholds.min_cos_max_margin)
    write_csv(OUT / "grid.csv", grid)
    first, mean_abs_alpha = grid[grid["seed"] == seeds[0]], alphas[seeds[0]]
    by_seed = {seed: seed_values(seed_grid(grid, first, seed), alphas[seed]) for seed in seeds}

    metrics: dict[str, float | None] = {"mean_abs_alpha_important": mean_abs_alpha, "cells": float(len(first)),
                                        "seeds": float(len(seeds)),
                                        "cells_selecting": float(first["selects"].sum()),
                                        "cells_max_margin": float(first["max_margin"].sum())}
    rows: list[list[str]] = []  # one per d: the first seed's windows and edges, measured and predicted
    for d, cells in first.groupby("d"):
        window = measured_window(cells["eta0"].to_numpy(), cells["selects"].to_numpy())
        margin = measured_window(cells["eta0"].to_numpy(), cells["max_margin"].to_numpy())
        low, high = predicted_window(mean_abs_alpha, int(d))
        metrics |= {f"selection_low_d{d:g}": window.low, f"selection_high_d{d:g}": window.high,
                    f"predicted_low_d{d:g}": low}
        span = "empty" if window.low is None else (f"{window.low:g} to {window.high:g}"
                                                  + ("" if window.contiguous else " (with gaps)"))
        margin_span = "empty" if margin.low is None else f"{margin.low:g} to {margin.high:g}"
        rows.append([f"{d:g}", span, _edge(window, "low"), f"{low:.3g}", _edge(window, "high"), f"{high:.3g}",
                     margin_span])
    metrics["predicted_high"] = predicted_window(mean_abs_alpha, 1)[1]
    for name in ("low_edge_factor", "high_edge_factor", "one_step_error_slope"):
        found = [value[name] for value in by_seed.values() if value[name] is not None]
        metrics[f"{name}_mean"] = float(np.mean(found)) if found else None

    error = grid.groupby("d", as_index=False)["one_step_orthogonal_ratio"].median()  # over eta0 and the seeds
    law = fit_power_law(error["d"].to_numpy(), error["one_step_orthogonal_ratio"].to_numpy())
    error["fitted"] = law(error["d"].to_numpy())
    error[["log10_d", "log10_ratio", "log10_fitted"]] = np.log10(error[["d", "one_step_orthogonal_ratio", "fitted"]])
    write_csv(OUT / "one_step_error.csv", error)
    metrics |= {"one_step_error_slope": law.slope, "one_step_error_r": law.r}
    measurements = phase_measurements(config, by_seed)
    write_json(OUT / "claims.json", [item.as_record() for item in measurements])

    figures = {
        "selection.png": phase_heatmap(first, "selection_fraction", "Lemma 4.4: share of sequences whose "
                                       f"important token p selects (seed {seeds[0]})", mean_abs_alpha, (0.5, 1.0)),
        "cos_max_margin_selected.png": phase_heatmap(
            first, "cos_max_margin_selected", r"Theorem 4.3: $\cos(p_T, p_{mm})$ for the "
            f"final selection (seed {seeds[0]})", mean_abs_alpha, (0.5, 1.0)),
        "one_step_error.png": power_law_figure(error["d"].to_numpy(), error["one_step_orthogonal_ratio"].to_numpy(),
                                               error["fitted"].to_numpy(), law.slope,
                                               "update orthogonal to v / update along v",
                                               "Lemma 4.1: the one-step error against d"),
    }
    for name, figure in figures.items():
        save_figure(figure, OUT / name)
        run.log_artifact(OUT / name)
    summary = _summary(config, first, mean_abs_alpha, rows, metrics, list(figures))
    publish_summary(run, OUT, summary, metrics)


def phase_measurements(config: Config, by_seed: dict[int, dict[str, float | None]]) -> list:
    """The phase diagram's three claims, one value per seed (its own grid)."""
    runs = {seed: {"phase": values} for seed, values in by_seed.items()}
    data = config.phase.dataset
    grid = f"{len(config.phase.eta0)} eta0 x {len(config.phase.d)} d"
    found = []
    for claim, which in (("phase_lower_edge", "low"), ("phase_upper_edge", "high")):
        compared = [values[f"{which}_edges_compared"] for values in by_seed.values()]
        measured = measure(BY_ID[claim], data, runs, f"{grid}, {min(compared):.0f} to {max(compared):.0f} edges "
                                                     "bracketed per seed")
        found.append(with_brackets(measured, [values[f"{which}_edge_factor_least"] for values in by_seed.values()],
                                   [values[f"{which}_edge_factor_most"] for values in by_seed.values()]))
    slopes = [values["one_step_error_slope"] for values in by_seed.values() if values["one_step_error_slope"]]
    found.append(measure(BY_ID["phase_error_slope"], data, runs,
                         f"{grid}: slope {markdown.number(float(np.mean(slopes)) if slopes else None)} on average"))
    return found


def with_brackets(measured: Measurement, least: list[float | None], most: list[float | None]) -> Measurement:
    """The measurement with an interval that holds the grid's coarseness too: from the lower 95 % end over the seeds
    of each seed's smallest factor its brackets allow, to the upper end of their largest (where every seed reads the
    same grid cells, the brackets themselves)."""
    finite = [value for value in measured.values if value is not None]
    if not finite or any(value is None for value in (*least, *most)):
        return measured
    low, high = seed_interval(least), seed_interval(most)
    ends = (low.low if low.exists else min(least), high.high if high.exists else max(most))
    return dataclasses.replace(measured, bounds=(float(np.mean(finite)), *ends),
                               method="the seeds' 95 % interval of their grid brackets' ends")


def selection_grid(grid: pd.DataFrame) -> list[str]:
    """The selection fraction as a d x eta0 Markdown table (the numbers of selection.png)."""
    fractions = grid.pivot(index="d", columns="eta0", values="selection_fraction").sort_index()
    header = ["d \\ eta0", *(f"{eta0:g}" for eta0 in fractions.columns)]
    return markdown.table(header, [[f"{d:g}", *(markdown.number(value, ".3g") for value in row)]
                                   for d, row in fractions.iterrows()])


def _summary(config: Config, grid: pd.DataFrame, mean_abs_alpha: float, rows: list[list[str]], metrics: dict,
             figures: list[str]) -> str:
    def number(value: float | None, spec: str = ".3g") -> str:
        return markdown.number(value, spec, missing="not measured")

    thresholds = config.evaluate
    return "\n".join([
        f"# Phase diagram: eta0 x d on {config.phase.dataset}", "",
        f"{len(grid)} cells (the cells at the first seed's edges for each of {metrics['seeds']:.0f} seeds, each its "
        "own draw of the data): one step on E from a fresh initialisation then the flow on p with the dataset's "
        "gradient_flow settings. The windows below are the first seed's. A cell selects when the selection "
        "fraction is >= "
        f"{thresholds.min_selection_fraction:g}; it reaches the max-margin direction when it also has "
        f"cos(p_T, p_mm) >= {thresholds.min_cos_max_margin:g}. Mean |alpha_s| of the important tokens: "
        f"{mean_abs_alpha:.4g}, so the scale argument (docs/results.md: the phase diagram) puts the window at "
        f"2 / (|alpha| sqrt(d)) < eta0 < 2 / |alpha| = {metrics['predicted_high']:.3g}.", "",
        *markdown.table(["d", "selection window in eta0", "lower edge", "scale argument's lower edge", "upper edge",
                         "scale argument's upper edge", "max-margin window"], rows), "",
        "Selection fraction of every cell, the first seed's (rows d, columns eta0):", "",
        *selection_grid(grid), "",
        f"Measured edges (geometric middle of the grid's bracket) against the scale argument, the largest factor over "
        f"d, on average over the seeds: lower edges {number(metrics['low_edge_factor_mean'])}, upper edges "
        f"{number(metrics['high_edge_factor_mean'])}.", "",
        f"One-step error (update orthogonal to v over the update along v) against d: log-log slope "
        f"{metrics['one_step_error_slope']:.3f} (r {number(metrics['one_step_error_r'], '.4f')}); the "
        "1/sqrt(d) argument gives -0.5.", "",
        *[f"![{name}]({name})" for name in figures],
    ]) + "\n"


def main(argv: list[str] | None = None) -> int:
    return run_stage("phase_diagram", SECTIONS, phase_diagram, argv, per_dataset=False)


if __name__ == "__main__":
    sys.exit(main())
