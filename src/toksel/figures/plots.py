"""Figures: token scores against the posterior difference, the one-step alignment, gradient-flow curves."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from toksel.data.frequency import TYPE_NAMES  # noqa: E402
from toksel.runtime.io import atomic_path  # noqa: E402

TYPE_COLOURS = {-2: "#b2182b", -1: "#ef8a62", 0: "#999999", 1: "#67a9cf", 2: "#2166ac"}


def save_figure(figure: plt.Figure, path: Path) -> None:
    with atomic_path(path) as tmp:
        figure.savefig(tmp, format=path.suffix.lstrip("."), dpi=120, bbox_inches="tight")
    plt.close(figure)


def _scatter_by_type(axis: plt.Axes, x: np.ndarray, y: np.ndarray, types: np.ndarray) -> None:
    for code, name in TYPE_NAMES.items():
        mask = types == code
        if mask.any():
            axis.scatter(x[mask], y[mask], s=14, alpha=0.8, color=TYPE_COLOURS[code], label=name)


def token_scores_figure(tokens: pd.DataFrame, title: str) -> plt.Figure:
    """E_s^T v and E_s^T p against the posterior difference P(1|s) - P(0|s), coloured by token type."""
    figure, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for axis, column, label in ((axes[0], "score_v", "$E_s^T v$"), (axes[1], "score_p", "$E_s^T p_T$")):
        _scatter_by_type(axis, tokens["posterior_difference"].to_numpy(), tokens[column].to_numpy(),
                         tokens["token_type"].to_numpy())
        axis.set_xlabel("posterior difference $P(1|s) - P(0|s)$")
        axis.set_ylabel(label)
        axis.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    figure.suptitle(title)
    return figure


def multiclass_token_scores_figure(tokens: pd.DataFrame, num_classes: int, title: str) -> plt.Figure:
    """K classes: E_s^T v_k against the class-k signed frequency, one panel per class, then E_s^T p against the
    importance max_k |alpha_s^(k)|."""
    figure, axes = plt.subplots(1, num_classes + 1, figsize=(3.6 * (num_classes + 1), 3.6), squeeze=False)
    panels = [(f"alpha_class_{k}", f"score_v_class_{k}", rf"$\alpha_s^{{({k})}}$", f"$E_s^T v_{{{k}}}$")
              for k in range(num_classes)]
    panels.append(("importance", "score_p", r"$\max_k |\alpha_s^{(k)}|$", "$E_s^T p_T$"))
    for axis, (x, y, x_label, y_label) in zip(axes[0], panels, strict=True):
        axis.scatter(tokens[x], tokens[y], s=6, alpha=0.5, color="#2166ac")
        axis.ticklabel_format(axis="x", style="sci", scilimits=(-2, 2))
        axis.set_xlabel(x_label)
        axis.set_ylabel(y_label)
        axis.grid(alpha=0.3)
    figure.suptitle(title)
    figure.tight_layout()
    return figure


def _one_step_panel(axis: plt.Axes, alpha: np.ndarray, update: np.ndarray, types: np.ndarray | None,
                    slope_theory: float, slope: float) -> None:
    if types is None:
        axis.scatter(alpha, update, s=6, alpha=0.5, color="#2166ac")
    else:
        _scatter_by_type(axis, alpha, update, types)
    grid = np.linspace(alpha.min(), alpha.max(), 2)
    axis.plot(grid, slope_theory * grid, "k--", lw=1, label=f"theory: slope {slope_theory:.4g}")
    axis.plot(grid, slope * grid, "g-", lw=1, alpha=0.7, label=f"fit: slope {slope:.4g}")
    axis.legend(fontsize=8)
    axis.grid(alpha=0.3)


def one_step_figure(alpha: np.ndarray, update_v: np.ndarray, types: np.ndarray, slope_theory: float,
                    slope: float) -> plt.Figure:
    """Lemma 4.1: (E1 - E0)_s^T v against alpha_s, with the fitted line and the theory line eta0/2."""
    figure, axis = plt.subplots(figsize=(6, 4.2))
    _one_step_panel(axis, alpha, update_v, types, slope_theory, slope)
    axis.set_xlabel(r"average signed frequency $\alpha_s$")
    axis.set_ylabel(r"$(E^1_s - E^0_s)^T v$")
    axis.set_title("Lemma 4.1: one GD step on E")
    return figure


def multiclass_one_step_figure(alphas: np.ndarray, updates: np.ndarray, slope_theory: float,
                               slopes: list[float]) -> plt.Figure:
    """The rebuttal's K-class Lemma 4.1: (E1 - E0)_s^T v_k against alpha_s^(k), one panel per class, with the
    theory line of slope eta0. alphas and updates: (K, tokens)."""
    classes = len(alphas)
    figure, axes = plt.subplots(1, classes, figsize=(3.8 * classes, 3.6), squeeze=False)
    for k, axis in enumerate(axes[0]):
        _one_step_panel(axis, alphas[k], updates[k], None, slope_theory, slopes[k])
        axis.ticklabel_format(axis="x", style="sci", scilimits=(-2, 2))
        axis.set_xlabel(rf"class-{k} signed frequency $\alpha_s^{{({k})}}$")
        axis.set_ylabel(rf"$(E^1_s - E^0_s)^T v_{{{k}}}$")
        axis.set_title(f"class {k}")
    figure.suptitle("Lemma 4.1 for K classes: one GD step on E")
    figure.tight_layout()
    return figure


def gradient_flow_figure(history: pd.DataFrame, max_margin_norm: float) -> plt.Figure:
    """|p_t|, the loss, cos(p_t, p_mm), selection and the normalised margin against flow time t (log axis); |p_t|
    and the loss also for the same run with every step halved (dotted), which should lie on top.

    Panels without data (no QP: no cosine, no margin) are left out.
    """
    later = history[history["flow_time"] > 0]
    time = later["flow_time"].to_numpy()
    margin_limit = 1 / max_margin_norm if np.isfinite(max_margin_norm) else None
    panels = (  # (curves as column: label, title, limit)
        ({"p_norm": "flow", "half_step_p_norm": "steps halved"}, r"$\|p_t\|$ (Lemma 4.2)", None),
        ({"loss": "flow", "half_step_loss": "steps halved"}, "training loss", None),
        ({"cos_max_margin_selected": None}, r"$\cos(p_t, p_{mm})$ (Theorem 4.3)", 1.0),
        ({"selection_fraction": "every important token", "selection_any_fraction": "at least one"},
         "important tokens selected (Lemma 4.4)", None),
        ({"normalized_margin": None}, "normalised margin", margin_limit),
    )
    panels = tuple(panel for panel in panels if any(column in later and later[column].notna().any()
                                                    for column in panel[0]))
    figure, axes = plt.subplots(1, len(panels), figsize=(4.3 * len(panels), 3.8), squeeze=False)
    for axis, (curves, title, limit) in zip(axes[0], panels, strict=True):
        for column, label in curves.items():
            if column in later:
                axis.plot(time, later[column].to_numpy(), lw=1.5, label=label,
                          ls=":" if column.startswith("half_step") else "-")
        if limit is not None:
            axis.axhline(limit, color="k", ls="--", lw=1, label="limit")
        if limit is not None or len(curves) > 1:
            axis.legend(fontsize=8)
        if "selection_fraction" in curves:  # fractions of sequences
            axis.set_ylim(-0.03, 1.03)
        axis.set_xscale("log")
        axis.set_xlabel("flow time t")
        axis.set_title(title, fontsize=10)
        axis.grid(alpha=0.3)
    return figure


def binned_scores_figure(panels: list[tuple[np.ndarray, np.ndarray, pd.DataFrame, str, str]], title: str) -> plt.Figure:
    """Scatter of token scores with the bin means (and +-1 std) on top, one panel per (x, y, bins, x label,
    y label); bins has the columns centre, mean, std (paper Fig. 3 and the rebuttal's tables)."""
    figure, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 3.9), squeeze=False)
    for axis, (x, y, bins, x_label, y_label) in zip(axes[0], panels, strict=True):
        axis.scatter(x, y, s=5, alpha=0.35, color="#999999", label="tokens")
        axis.errorbar(bins["centre"], bins["mean"], yerr=bins["std"], color="#b2182b", marker="o", ms=3, lw=1.2,
                      capsize=2, label="bin mean +- std")
        axis.set_xlabel(x_label)
        axis.set_ylabel(y_label)
        axis.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    figure.suptitle(title)
    figure.tight_layout()
    return figure


def _standardised(values: np.ndarray) -> np.ndarray:
    return (values - np.nanmean(values)) / np.nanstd(values)


def rebuttal_figure(curves: list[tuple]) -> plt.Figure:
    """One panel per rebuttal table: its bin means and ours (one line per run), each standardised (mean 0, std 1),
    against x; curves holds (table, run name, our bin centres, our bin means)."""
    tables = list(dict.fromkeys(table for table, *_ in curves))
    columns = min(3, len(tables))
    rows = -(-len(tables) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(4.4 * columns, 3.5 * rows), squeeze=False)
    for axis, table in zip(axes.flat, tables, strict=False):
        x = np.asarray(table.x)
        axis.plot(x, _standardised(np.asarray(table.means)), color="black", marker="s", ms=3,
                  lw=1.5, label="rebuttal")
        for other, name, centres, means in curves:
            if other is table:
                filled = np.isfinite(means)
                axis.plot(centres[filled], _standardised(means[filled]), marker="o",
                          ms=2.5, lw=1, alpha=0.85, label=f"ours: {name}")
        axis.set_title(table.title, fontsize=9)
        axis.set_xlabel("x (held-out)")
        axis.set_ylabel("bin mean, standardised")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    for axis in list(axes.flat)[len(tables):]:
        axis.set_visible(False)
    figure.tight_layout()
    return figure


def _geometric_edges(values: np.ndarray) -> np.ndarray:
    """Cell edges for log axes: the geometric midpoints, and as far again beyond the ends."""
    values = np.sort(np.asarray(values, dtype=float))
    if len(values) == 1:
        return values * np.array([0.7, 1.4])
    middle = np.sqrt(values[:-1] * values[1:])
    return np.concatenate([[values[0] ** 2 / middle[0]], middle, [values[-1] ** 2 / middle[-1]]])


def phase_heatmap(grid: pd.DataFrame, column: str, title: str, mean_abs_alpha: float,
                  limits: tuple[float, float]) -> plt.Figure:
    """grid[column] over eta0 (x) and d (y), both log, each cell annotated, with the scale argument's window
    2 / (|alpha| sqrt(d)) < eta0 < 2 / |alpha| drawn on top."""
    table = grid.pivot(index="d", columns="eta0", values=column).sort_index().sort_index(axis=1)
    eta0, d = table.columns.to_numpy(dtype=float), table.index.to_numpy(dtype=float)
    figure, axis = plt.subplots(figsize=(1.1 * len(eta0) + 3, 0.55 * len(d) + 2.4))
    mesh = axis.pcolormesh(_geometric_edges(eta0), _geometric_edges(d), table.to_numpy(dtype=float),
                           cmap="viridis", vmin=limits[0], vmax=limits[1])
    figure.colorbar(mesh, ax=axis, label=column.replace("_", " "))
    for i, row in enumerate(table.to_numpy(dtype=float)):
        for j, value in enumerate(row):
            if np.isfinite(value):
                axis.text(eta0[j], d[i], f"{value:.2f}", ha="center", va="center", fontsize=8,
                          color="white" if value < (limits[0] + limits[1]) / 2 else "black")
    d_line = np.geomspace(*_geometric_edges(d)[[0, -1]], 50)
    axis.plot(2 / (mean_abs_alpha * np.sqrt(d_line)), d_line, "w--", lw=1.5,
              label=r"$\eta_0|\alpha|/2 = 1/\sqrt{d}$")
    axis.axvline(2 / mean_abs_alpha, color="w", ls=":", lw=1.5, label=r"$\eta_0|\alpha|/2 = 1$")
    axis.set_xscale("log")
    axis.set_yscale("log")
    axis.set_xlim(*_geometric_edges(eta0)[[0, -1]])
    axis.set_ylim(*_geometric_edges(d)[[0, -1]])
    axis.set_xticks(eta0, [f"{value:g}" for value in eta0])
    axis.set_yticks(d, [f"{value:g}" for value in d])
    axis.minorticks_off()
    axis.set_xlabel(r"one-step size $\eta_0$")
    axis.set_ylabel("embedding dimension d")
    axis.set_title(title, fontsize=10)
    axis.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, frameon=False)
    return figure


def power_law_figure(d: np.ndarray, y: np.ndarray, fitted: np.ndarray, slope: float, y_label: str,
                     title: str) -> plt.Figure:
    """Measured points on log-log axes, the fitted power law, and the slope -1/2 reference through the fit."""
    figure, axis = plt.subplots(figsize=(5.6, 4.2))
    axis.loglog(d, y, "o", color="#2166ac", label="measured")
    axis.loglog(d, fitted, "-", color="#b2182b", label=f"fit: slope {slope:.3f}")
    reference = fitted[0] * (np.asarray(d, dtype=float) / d[0]) ** -0.5
    axis.loglog(d, reference, "k:", lw=1, label="slope -1/2")
    axis.set_xticks(d, [f"{value:g}" for value in d])
    axis.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    # Labels at 1, 2 and 5 times each power of ten: the values often span less than a decade.
    axis.yaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
    axis.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    axis.yaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    axis.set_xlabel("embedding dimension d")
    axis.set_ylabel(y_label)
    axis.set_title(title, fontsize=10)
    axis.grid(alpha=0.3, which="both")
    axis.legend(fontsize=8)
    return figure


def calibration_figure(rows: list[dict]) -> plt.Figure:
    """Each family's operating curves, a panel per family and a line per dataset: how often its verdict rule holds
    at each planted effect, with its 95 % Wilson band; the dotted line marks the paper's size (or the family's
    reference effect), the dashed one the null, the horizontal lines the power 0.8 and the false-positive rate 0.1
    a calibrated family must clear."""
    measured = [row for row in rows if "curve" in row]
    families = list(dict.fromkeys(row["family"] for row in measured))
    columns = 4
    lines = max(1, -(-len(families) // columns))
    figure, axes = plt.subplots(lines, columns, figsize=(3.2 * columns, 2.6 * lines), squeeze=False)
    colours = plt.get_cmap("tab10")
    datasets = list(dict.fromkeys(row["data"] for row in measured))
    for axis, family in zip(axes.flat, families, strict=False):
        mine = [row for row in measured if row["family"] == family]
        for row in mine:
            points = sorted(row["curve"], key=lambda point: point["effect"])
            effects = [point["effect"] for point in points]
            colour = colours(datasets.index(row["data"]) % 10)
            axis.fill_between(effects, [point["low"] for point in points], [point["high"] for point in points],
                              color=colour, alpha=0.15, lw=0)
            same = [other for other in mine if other["data"] == row["data"]]  # a row per claim: a dash each
            axis.plot(effects, [point["rate"] for point in points], marker="o", color=colour, ms=3, lw=1.2,
                      ls=("-", "--", "-.", ":")[same.index(row) % 4],
                      label=row["data"] + "".join(f", {claim}" for claim in row.get("for_claims", [])))
        first = mine[0]
        axis.axvline(first["reference"], color="#1a9850", ls=":", lw=1)
        axis.axvline(first["null_effect"], color="#d73027", ls="--", lw=1)
        for level, colour in ((0.8, "#1a9850"), (0.1, "#d73027")):
            axis.axhline(level, color=colour, lw=0.6, alpha=0.6)
        if first["unit"].startswith("k,") or first["unit"].startswith("penalty"):
            axis.set_xscale("symlog", linthresh=0.002 if first["unit"].startswith("penalty") else 1.0)
        axis.set_ylim(-0.03, 1.03)
        axis.set_title(family, fontsize=9)
        axis.set_xlabel(first["unit"], fontsize=7)
        axis.tick_params(labelsize=7)
        axis.legend(fontsize=6, loc="best")
    for axis in list(axes.flat)[len(families):]:
        axis.axis("off")
    axes[0][0].set_ylabel("share holding", fontsize=8)
    figure.tight_layout()
    return figure


def d_sweep_figure(sweep: pd.DataFrame, dataset: str) -> plt.Figure:
    """Test accuracy of the trained and the untrained (random frozen) embeddings against d / V: every seed a dot,
    the mean over the seeds a line; the train stage's runs at model.d hollow."""
    figure, axis = plt.subplots(figsize=(6.4, 4.2))
    colours = {"trained": "#1a9850", "untrained": "#d73027"}
    for arm, rows in sweep.groupby("arm"):
        means = rows.groupby("d_over_vocabulary")["test_accuracy"].mean()
        axis.plot(means.index, means.to_numpy(), "-", color=colours.get(arm, "#555555"), lw=1.6,
                  label=f"{arm} embeddings (mean of the seeds)")
        for source, marker_face in (("sweep", None), ("train stage", "white")):
            shown = rows[rows["source"] == source]
            axis.plot(shown["d_over_vocabulary"], shown["test_accuracy"], "o", ms=4, color=colours.get(arm),
                      mfc=marker_face or colours.get(arm), alpha=0.8)
    axis.set_xscale("log")
    axis.set_xlabel("d / V (embedding dimension over the tokens that occur in training)")
    axis.set_ylabel("test accuracy")
    axis.set_title(f"{dataset}: trained and random frozen embeddings against d (hollow: the train stage's runs)",
                   fontsize=9)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    figure.tight_layout()
    return figure


def pair_figure(steps: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]], accuracy: pd.DataFrame, cap: float,
                past_cap: float) -> plt.Figure:
    """Left: the one step's update along v against alpha_s on each pair dataset (its pair tokens marked). Right:
    each model's accuracy on the pair sequences per seed, with the one-layer cap and the threshold past it."""
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    colours = ("#2166ac", "#b2182b")
    for (name, (alpha, update, pair)), colour in reversed(list(zip(steps.items(), colours, strict=False))):
        left.scatter(alpha, update, s=8, alpha=0.4, color=colour, label=f"{name}: every token")
        left.scatter(alpha[pair], update[pair], s=60, marker="*", color=colour, edgecolor="k",
                     label=f"{name}: not, good, bad")
    left.set_xlabel(r"average signed frequency $\alpha_s$")
    left.set_ylabel(r"$(E^1_s - E^0_s)^T v$")
    left.set_title("one step: the pair's tokens stay at 0 where the pair flips the label", fontsize=9)
    left.legend(fontsize=7)
    left.grid(alpha=0.3)
    runs = list(dict.fromkeys(zip(accuracy["dataset"], accuracy["model"], strict=True)))
    for position, (dataset, model) in enumerate(runs):
        values = accuracy[(accuracy["dataset"] == dataset) & (accuracy["model"] == model)]["pair_accuracy"]
        right.plot(np.full(len(values), position) + np.linspace(-0.1, 0.1, len(values)), values, "o", ms=5,
                   color=colours[dataset != runs[0][0]])
    right.axhline(cap, color="k", ls="--", lw=1, label=f"one-layer cap {cap:g}")
    right.axhline(past_cap, color="#4d9221", ls=":", lw=1, label=f"past the cap: {past_cap:g}")
    right.set_xticks(range(len(runs)), [f"{model}\n{'pair' if dataset == runs[0][0] else 'control'} data"
                                        for dataset, model in runs], fontsize=8)
    right.set_ylabel("test accuracy on the pair sequences (a dot per seed)")
    right.set_ylim(0.4, 1.03)
    right.set_title("which model reads the pair", fontsize=9)
    right.legend(fontsize=7)
    right.grid(alpha=0.3)
    figure.tight_layout()
    return figure


def margins_figure(optimisers: list[str], norms: list[str], cosines: np.ndarray) -> plt.Figure:
    """Each optimiser's end (a row) against each norm's hard-margin direction (a column): the cosine, mean over the
    seeds, as 1 - cos on a log colour scale (an angle of 8 degrees is 0.01), the nearest solution of each row
    outlined."""
    figure, axes = plt.subplots(figsize=(1.3 * len(norms) + 2.5, 0.55 * len(optimisers) + 1.6))
    distance = np.clip(1 - cosines, 1e-4, None)
    image = axes.imshow(distance, cmap="viridis", norm=matplotlib.colors.LogNorm(vmin=1e-3, vmax=0.5))
    for row, column in np.ndindex(distance.shape):
        axes.text(column, row, f"{cosines[row, column]:.3f}" if np.isfinite(cosines[row, column]) else "not computed",
                  ha="center", va="center", fontsize=8, color="w" if distance[row, column] < 0.02 else "k")
    for row, column in enumerate(np.argmin(distance, axis=1)):
        if np.isfinite(distance[row, column]):  # a row not computed has no nearest solution
            axes.add_patch(plt.Rectangle((column - 0.5, row - 0.5), 1, 1, fill=False, edgecolor="#b2182b", lw=2))
    axes.set_xticks(range(len(norms)), [f"{norm} solution" for norm in norms], fontsize=8)
    axes.set_yticks(range(len(optimisers)), optimisers, fontsize=8)
    axes.set_title("which margin each optimiser picks: cos(end, solution), nearest outlined", fontsize=9)
    figure.colorbar(image, ax=axes, label="1 - cos (log)")
    figure.tight_layout()
    return figure


NEGATION_KINDS = {"other token": ("#cccccc", 6, "o"), "strong negative word": ("#b2182b", 10, "o"),
                  "strong positive word": ("#2166ac", 10, "o"), "negator": ("black", 90, "*")}


def negation_figure(accuracy: pd.DataFrame, tokens: pd.DataFrame, reading: str) -> plt.Figure:
    """Left: each model's test accuracy on the negated reviews and on the others, every seed a dot, the mean with
    its 95 % interval (accuracy: model, group, seed, accuracy, mean, low, high). Right: E_s^T v against E_s^T p of
    one model (`reading` names it) for every token, the strong sentiment words and the negators marked (tokens:
    value, score, kind, word)."""
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.6), gridspec_kw={"width_ratios": [1.3, 1]})
    models = list(dict.fromkeys(accuracy["model"]))
    for shift, (group, colour) in zip((-0.15, 0.15), (("negated", "#d73027"), ("other", "#4575b4")), strict=True):
        rows = accuracy[accuracy["group"] == group]
        at = np.array([models.index(model) for model in rows["model"]]) + shift
        left.plot(at, rows["accuracy"], "o", ms=3, color=colour, alpha=0.5)
        means = rows.drop_duplicates("model")
        spot = np.array([models.index(model) for model in means["model"]]) + shift
        left.errorbar(spot, means["mean"], yerr=[means["mean"] - means["low"], means["high"] - means["mean"]],
                      fmt="_", ms=14, capsize=3, color=colour, label=f"{group} reviews: mean, 95 % interval")
    left.set_xticks(range(len(models)), [model.replace("/", "\n") for model in models], fontsize=7)
    left.set_ylabel("test accuracy (a dot per seed)")
    left.set_title("accuracy on test reviews with a negated strong sentiment word, and on the others", fontsize=9)
    left.legend(fontsize=7)
    left.grid(alpha=0.3)
    for kind, (colour, size, marker) in NEGATION_KINDS.items():
        shown = tokens[tokens["kind"] == kind]
        right.scatter(shown["score"], shown["value"], s=size, c=colour, marker=marker, alpha=0.9 if size > 6 else 0.5,
                      label=kind, edgecolors="none")
        if kind == "negator":
            for row in shown.itertuples():
                right.annotate(row.word, (row.score, row.value), fontsize=7, xytext=(3, 3),
                               textcoords="offset points")
    right.set_xlabel("$E_s^T p$")
    right.set_ylabel("$E_s^T v$")
    right.set_title(f"how {reading} reads each token", fontsize=9)
    right.legend(fontsize=7)
    right.grid(alpha=0.3)
    figure.tight_layout()
    return figure
