"""Stage `phase_diagram`: the phase cells gathered into heatmaps, the measured eta0 window set against the scale
argument, and the d sweep of the one-step error with its log-log slope (toksel.theory.phase).

Writes results/phase_diagram/: grid.csv (one row per cell), one_step_error.csv, selection.png,
cos_max_margin.png, one_step_error.png, summary.md and metrics.json.
"""

from __future__ import annotations

import math
import sys

import numpy as np
import pandas as pd

from toksel import markdown
from toksel.claims import BY_ID, Measurement
from toksel.cli import run_stage
from toksel.config import Config
from toksel.data.draws import data_dir
from toksel.data.token_table import read_token_table
from toksel.errors import ToksError
from toksel.io import read_json, require_output, write_csv, write_json
from toksel.paths import phase_cell_key, phase_row_dir, results_dir
from toksel.plots import phase_heatmap, power_law_figure, save_figure
from toksel.report import publish_summary
from toksel.theory.phase import (
    Window,
    deviation_range,
    edge_factor,
    factor_range,
    fit_power_law,
    measured_window,
    predicted_window,
)
from toksel.tracking import StageRun

SECTIONS = ("phase", "evaluate")
OUT = results_dir("phase_diagram", "")
COLUMNS = ("d", "eta0", "selection_fraction", "selection_any_fraction", "cos_max_margin", "margin_ratio", "loss",
           "p_norm", "one_step_orthogonal_ratio", "one_step_slope_rel_error", "one_step_slope", "one_step_slope_theory")
# The controls of the edge claims: the neighbouring laws, eta0 |alpha| / 2 = 1/d for the lower edge and
# = 1/sqrt(d) for the upper one, against the same measured edges.
CONTROL_LAWS = {"low": lambda alpha, d: 2 / (alpha * d), "high": lambda alpha, d: 2 / (alpha * math.sqrt(d))}


def read_grid(config: Config) -> pd.DataFrame:
    """The metrics of every cell of the configured grid (an error names the first missing cell)."""
    rows = []
    for d in config.phase.d:
        row = read_json(require_output(phase_row_dir(d) / "metrics.json", producer=f"phase@{d}"))
        for eta0 in config.phase.eta0:
            if phase_cell_key(eta0) not in row:
                raise ToksError(f"{phase_row_dir(d) / 'metrics.json'} has no cell eta0 = {eta0:g}: run the phase stage "
                                f"again (dvc repro phase@{d})")
            rows.append({column: row[phase_cell_key(eta0)].get(column) for column in COLUMNS})
    return pd.DataFrame(rows).astype(float)


def _edge(window: Window, which: str) -> str:
    inside, outside = (window.low, window.below) if which == "low" else (window.high, window.above)
    if inside is None:
        return "-"
    if outside is None:
        return f"{'<=' if which == 'low' else '>='} {inside:g} (grid end)"
    return f"({outside:g}, {inside:g}]" if which == "low" else f"[{inside:g}, {outside:g})"


def phase_diagram(config: Config, run: StageRun) -> None:
    settings, thresholds = config.phase, config.evaluate
    grid = read_grid(config)
    tokens = read_token_table(data_dir(settings.dataset, config.seed) / "tokens.csv")
    mean_abs_alpha = float(np.abs(tokens.column("alpha")[tokens.important]).mean())
    grid["selects"] = grid["selection_fraction"] >= thresholds.min_selection_fraction
    grid["max_margin"] = grid["selects"] & (grid["cos_max_margin"] >= thresholds.min_cos_max_margin)
    write_csv(OUT / "grid.csv", grid)

    metrics: dict[str, float | None] = {"mean_abs_alpha_important": mean_abs_alpha, "cells": float(len(grid)),
                                        "cells_selecting": float(grid["selects"].sum()),
                                        "cells_max_margin": float(grid["max_margin"].sum())}
    factors: dict[str, list[float]] = {"low": [], "high": []}
    # Per edge, the factor's range over the grid's bracket: for the scale argument and for its control's law.
    ranges: dict[tuple[str, str], list[tuple[float, float, float]]] = {(which, kind): [] for which in ("low", "high")
                                                                for kind in ("ours", "control")}
    rows: list[list[str]] = []  # one per d: the windows and edges, measured and predicted
    for d, cells in grid.groupby("d"):
        window = measured_window(cells["eta0"].to_numpy(), cells["selects"].to_numpy())
        margin = measured_window(cells["eta0"].to_numpy(), cells["max_margin"].to_numpy())
        low, high = predicted_window(mean_abs_alpha, int(d))
        metrics |= {f"selection_low_d{d:g}": window.low, f"selection_high_d{d:g}": window.high,
                    f"predicted_low_d{d:g}": low}
        for which, predicted in (("low", low), ("high", high)):
            factor = edge_factor(window.edge(which), predicted)
            if factor is not None:
                factors[which].append(factor)
            for kind, law in (("ours", predicted), ("control", CONTROL_LAWS[which](mean_abs_alpha, d))):
                bracket = factor_range(window, which, law)
                if bracket is not None:
                    ranges[which, kind].append((edge_factor(window.edge(which), law), *bracket))
        span = "empty" if window.low is None else (f"{window.low:g} to {window.high:g}"
                                                  + ("" if window.contiguous else " (with gaps)"))
        margin_span = "empty" if margin.low is None else f"{margin.low:g} to {margin.high:g}"
        rows.append([f"{d:g}", span, _edge(window, "low"), f"{low:.3g}", _edge(window, "high"), f"{high:.3g}",
                     margin_span])
    metrics["predicted_high"] = predicted_window(mean_abs_alpha, 1)[1]
    for which in ("low", "high"):
        metrics[f"{which}_edges_compared"] = float(len(factors[which]))
        metrics[f"{which}_edge_factor_max"] = max(factors[which]) if factors[which] else None

    # The one-step error does not depend on eta0 (E1 - E0 is eta0 times the gradient): one value per d.
    error = grid.groupby("d", as_index=False)["one_step_orthogonal_ratio"].median()
    law = fit_power_law(error["d"].to_numpy(), error["one_step_orthogonal_ratio"].to_numpy())
    error["fitted"] = law(error["d"].to_numpy())
    error[["log10_d", "log10_ratio", "log10_fitted"]] = np.log10(error[["d", "one_step_orthogonal_ratio", "fitted"]])
    write_csv(OUT / "one_step_error.csv", error)
    metrics |= {"one_step_error_slope": law.slope, "one_step_error_r": law.r}
    along = grid.groupby("d", as_index=False)[["one_step_slope", "one_step_slope_theory"]].median()
    along_ratio = (along["one_step_slope"] / along["one_step_slope_theory"]).to_numpy()
    control_law = fit_power_law(along["d"].to_numpy(), along_ratio)  # the update along v: flat in d
    measurements = phase_measurements(config, ranges, law, control_law)
    write_json(OUT / "claims.json", [item.as_record() for item in measurements])

    figures = {
        "selection.png": phase_heatmap(grid, "selection_fraction", "Lemma 4.4: share of sequences whose important "
                                       "token p selects", mean_abs_alpha, (0.5, 1.0)),
        "cos_max_margin.png": phase_heatmap(grid, "cos_max_margin", r"Theorem 4.3: $\cos(p_T, p_{mm})$ for the "
                                            "final selection", mean_abs_alpha, (0.5, 1.0)),
        "one_step_error.png": power_law_figure(error["d"].to_numpy(), error["one_step_orthogonal_ratio"].to_numpy(),
                                               error["fitted"].to_numpy(), law.slope,
                                               "update orthogonal to v / update along v",
                                               "Lemma 4.1: the one-step error against d"),
    }
    for name, figure in figures.items():
        save_figure(figure, OUT / name)
        run.log_artifact(OUT / name, "figures")
    summary = _summary(config, grid, mean_abs_alpha, rows, metrics, list(figures))
    publish_summary(run, OUT, summary, metrics, shown_until="\n\n![")


def _largest(edges: list[tuple[float, float, float]]) -> tuple[float | None, float | None, float | None]:
    """(estimate, low, high) of the largest factor over the edges, from each edge's (factor at the geometric middle
    of its bracket, smallest and largest factor over the bracket): the edge lies somewhere in its bracket, so the
    largest factor lies between the largest smallest and the largest largest."""
    if not edges:
        return None, None, None
    return tuple(max(edge[i] for edge in edges) for i in range(3))


def _deviation(law) -> tuple[float | None, float | None, float | None]:
    """(|slope + 1/2|, and its range over the slope's 95 % interval)."""
    if not math.isfinite(law.slope):
        return None, None, None
    low, high = deviation_range(law.slope_interval, -0.5) if math.isfinite(law.slope_interval[0]) else (None, None)
    return abs(law.slope + 0.5), low, high


def phase_measurements(config: Config, ranges: dict, law, control_law) -> list[Measurement]:
    """The phase diagram's three claims, each with the interval its method gives (grid brackets, fit)."""
    data, grid = config.phase.dataset, f"{len(config.phase.eta0)} eta0 x {len(config.phase.d)} d, seed {config.seed}"
    found = []
    for claim, which in (("phase_lower_edge", "low"), ("phase_upper_edge", "high")):
        found.append(Measurement(claim, data, [config.seed], [], [],
                                 f"{grid}: {len(ranges[which, 'ours'])} edges bracketed",
                                 bounds=_largest(ranges[which, "ours"]),
                                 control_bounds=_largest(ranges[which, "control"]),
                                 method="the grid's brackets of the edges"))
    found.append(Measurement(BY_ID["phase_error_slope"].id, data, [config.seed], [], [],
                             f"{grid}: slope {law.slope:.3f} (r {law.r:.3f})", bounds=_deviation(law),
                             control_bounds=_deviation(control_law), method="95 % confidence interval of the fit"))
    return found


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
        f"{len(grid)} cells, each one step on E from a fresh initialisation then GD on p with the dataset's "
        f"gradient_flow settings. A cell selects when the selection fraction is >= "
        f"{thresholds.min_selection_fraction:g}; it reaches the max-margin direction when it also has "
        f"cos(p_T, p_mm) >= {thresholds.min_cos_max_margin:g}. Mean |alpha_s| of the important tokens: "
        f"{mean_abs_alpha:.4g}, so the scale argument (docs/results.md: the phase diagram) puts the window at "
        f"2 / (|alpha| sqrt(d)) < eta0 < 2 / |alpha| = {metrics['predicted_high']:.3g}.", "",
        *markdown.table(["d", "selection window in eta0", "lower edge", "scale argument's lower edge", "upper edge",
                         "scale argument's upper edge", "max-margin window"], rows), "",
        "Selection fraction of every cell (rows d, columns eta0):", "",
        *selection_grid(grid), "",
        f"Measured edges (geometric middle of the grid's bracket) against the scale argument: lower edges within a "
        f"factor {number(metrics['low_edge_factor_max'])} ({metrics['low_edges_compared']:.0f} bracketed), upper "
        f"edges within a factor {number(metrics['high_edge_factor_max'])} ({metrics['high_edges_compared']:.0f} "
        "bracketed).", "",
        f"One-step error (update orthogonal to v over the update along v) against d: log-log slope "
        f"{metrics['one_step_error_slope']:.3f} (r {number(metrics['one_step_error_r'], '.4f')}); the "
        "1/sqrt(d) argument gives -0.5.", "",
        *[f"![{name}]({name})" for name in figures],
    ]) + "\n"


def main(argv: list[str] | None = None) -> int:
    return run_stage("phase_diagram", SECTIONS, phase_diagram, argv)


if __name__ == "__main__":
    sys.exit(main())
