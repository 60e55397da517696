"""One report of every claim: the paper's value, ours, the threshold and the verdict, as Markdown and as a
self-contained HTML page (figures embedded), from the metrics the stages wrote.

A claim whose stage has not run (its metrics file is missing) stays in the report and says so.
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from toksel.checks import Check
from toksel.config import Config, load_config
from toksel.paths import results_dir
from toksel.rebuttal import TABLES


@dataclass(frozen=True)
class Row:
    topic: str  # where the claim comes from: "Lemma 4.1", "rebuttal: MLP", ...
    data: str  # the dataset or run it is measured on
    paper: str  # the paper's (or the rebuttal's, or our argument's) value
    ours: str  # what we measured, in words and numbers
    check: Check | None  # None: the stage that measures it has not run
    producer: str = ""  # that stage, named in the report when it has not run

    @property
    def verdict(self) -> str:
        if self.check is None:
            return f"not run ({self.producer})"
        if self.check.value is None:
            return "not computed"
        return "holds" if self.check.holds else "fails"

    @property
    def threshold(self) -> str:
        return "" if self.check is None else f"{self.check.comparison} {self.check.threshold:g}"


class Results:
    """The stages' JSON outputs under `root`; a missing file reads as None."""

    def __init__(self, root: Path = Path("results")) -> None:
        self.root = root

    def get(self, *parts: str) -> dict | list | None:
        path = self.root.joinpath(*parts)
        return json.loads(path.read_text()) if path.exists() else None


def _number(value: float | None, spec: str = ".4g") -> str:
    return "not computed" if value is None else format(value, spec)


# The paper's value for each check `evaluate` makes (checks.json), by check name.
PAPER_VALUES = {
    "lemma41_slope_rel_error": "slope eta0/2 (K classes: eta0)",
    "lemma41_pearson_r": "linear in alpha_s",
    "lemma42_p_norm_increasing": "|p_t| grows without bound",
    "lemma44_selection_fraction": "every sequence",
    "theorem43_cos_max_margin": "converges to 1",
}
# What each check's value measures, as the report says it (the slope's row says more).
MEASURED = {
    "lemma41_pearson_r": "Pearson r",
    "lemma42_p_norm_increasing": "fraction of logged steps with |p_t| growing",
    "lemma44_selection_fraction": "fraction of sequences selected",
    "theorem43_cos_max_margin": "cos(p_T, p_mm)",
}
TOPICS = {"lemma41": "Lemma 4.1", "lemma42": "Lemma 4.2", "lemma44": "Lemma 4.4", "theorem43": "Theorem 4.3"}


def _judged(metrics: dict | None, producer: str, topic: str, data: str, paper: str, ours: str, value: float | None,
            comparison: str, threshold: float) -> Row:
    """A row judged by `value` against `threshold`; `metrics` None: its stage `producer` has not run."""
    if metrics is None:
        return Row(topic, data, paper, "", None, producer)
    return Row(topic, data, paper, ours, Check(topic, "", value, comparison, threshold), producer)


def theory_rows(results: Results, dataset: str) -> list[Row]:
    """The checks `evaluate` made on `dataset`, as it recorded them."""
    checks = results.get("evaluate", dataset, "checks.json")
    if checks is None:
        return [Row("Lemmas 4.1 and 4.2 (and 4.4, Theorem 4.3 on Assumption-1 data)", dataset, "", "", None,
                    f"evaluate@{dataset}")]
    one_step = results.get("one_step", dataset, "metrics.json") or {}
    flow = results.get("gradient_flow", dataset, "metrics.json") or {}
    slopes = [one_step[key] for key in sorted(one_step) if key.startswith("slope_class_")] or [one_step.get("slope")]
    rows = []
    for fields in checks:
        check = Check(**{key: fields[key] for key in ("name", "claim", "value", "comparison", "threshold")})
        ours = f"{MEASURED.get(check.name, 'value')} {_number(check.value)}"
        if check.name == "lemma42_p_norm_increasing" and flow.get("p_norm") is not None:
            ours += f"; |p_T| = {_number(flow['p_norm'], '.3g')}"
        if check.name == "lemma41_slope_rel_error":
            ours = (f"slope {', '.join(_number(slope) for slope in slopes)} against "
                    f"{_number(one_step.get('slope_theory'))}: relative error {_number(check.value, '.3g')}"
                    + (" (worst class)" if len(slopes) > 1 else ""))
        rows.append(Row(f"{TOPICS[check.name.split('_')[0]]}: {check.claim.split(': ', 1)[-1]}", dataset,
                        PAPER_VALUES[check.name], ours, check))
    return rows


def training_rows(results: Results, dataset: str, config: Config) -> list[Row]:
    """Full training on real data against the paper's figures and the rebuttal's scalars."""
    settings = config.report
    evaluate = results.get("evaluate", dataset, "metrics.json")
    trained = results.get("train", dataset, "trained", "metrics.json")
    read = {} if evaluate is None else evaluate
    accuracy = (read.get("accuracy_trained"), read.get("accuracy_untrained"))
    gap = None if None in accuracy else accuracy[0] - accuracy[1]
    rows = [_judged(evaluate, f"evaluate@{dataset}", "Rebuttal: trained embeddings beat random frozen ones", dataset,
                    "test accuracy about 0.95 against 0.72", f"{_number(accuracy[0])} against {_number(accuracy[1])}: "
                    f"gap {_number(gap, '.3g')}", gap, ">=", settings.min_accuracy_gap)]
    for name, paper in (("v", "about 8"), ("p", "about 6")):
        ratio = read.get(f"bin_std_{name}_ratio")
        rows.append(_judged(evaluate, f"evaluate@{dataset}", f"Rebuttal: per-bin std of E_s^T {name}, full training "
                            "over one step then frozen", dataset, paper, _number(ratio, ".3g"), ratio, ">=",
                            settings.min_bin_std_ratio))
    spearman = None if trained is None else trained.get("spearman_v_alpha")
    rows.append(_judged(trained, f"train@{dataset}-trained", "Figure 3: E_s^T v increases with the posterior "
                        "difference", dataset, "monotone increasing",
                        f"Spearman with alpha_s {_number(spearman, '.3f')}", spearman, ">=",
                        config.ablation.min_spearman))
    rows.append(_u_row("Figures 1, 3: E_s^T p is U-shaped, lowest near posterior difference 0", dataset, trained,
                       settings.max_u_minimum, f"train@{dataset}-trained"))
    return rows


def _u_row(topic: str, data: str, metrics: dict | None, limit: float, producer: str) -> Row:
    read = {} if metrics is None else metrics
    location = read.get("p_min_location")
    return _judged(metrics, producer, topic, data, "minimum near 0", f"lowest bin at {_number(location, '.2f')} "
                   f"(Spearman with |alpha_s| {_number(read.get('spearman_p_abs_alpha'), '.3f')})",
                   None if location is None else abs(location), "<=", limit)


def ablation_rows(results: Results, config: Config) -> list[Row]:
    """The rebuttal's tables against our runs (ablation_report), and the two-layer model's U (Figure 1)."""
    settings = config.ablation
    report = results.get("ablation_report", "metrics.json")
    rows = []
    for table in TABLES:
        datasets = [settings.multiclass] if table.model == "multiclass" else [
            dataset for dataset in settings.datasets if table.model in settings.variants]
        for dataset in datasets:
            value = None if report is None else report.get(f"spearman_{table.name}_{dataset}")
            rows.append(_judged(report, "ablation_report", f"Rebuttal table: {table.title}", dataset, table.reading,
                                f"Spearman with the table's bin means {_number(value, '.3f')}", value, ">=",
                                settings.min_spearman))
    if "two_layer" in settings.variants:
        for dataset in settings.datasets:
            metrics = results.get("ablation", dataset, "two_layer", "metrics.json")
            rows.append(_u_row("Figure 1: the two-layer model's <cls> score is U-shaped", f"{dataset} two_layer",
                               metrics, config.report.max_u_minimum, f"ablation@{dataset}-two_layer"))
    return rows


def phase_rows(results: Results, config: Config) -> list[Row]:
    """Beyond the paper: the eta0 window against the scale argument, and the one-step error against d."""
    settings = config.report
    metrics = results.get("phase_diagram", "metrics.json")
    read = {} if metrics is None else metrics
    data = f"{config.phase.dataset}, {len(config.phase.eta0)} eta0 x {len(config.phase.d)} d"
    rows = []
    for which, edge, bound in (("low", "lower", "1/sqrt(d)"), ("high", "upper", "1")):
        factor = read.get(f"{which}_edge_factor_max")
        rows.append(_judged(metrics, "phase_diagram", f"Ours (paper.md section 8): the {edge} edge of the eta0 window "
                            "of selection", data, f"eta0 |alpha_s| / 2 = {bound} (scale argument)",
                            f"every measured edge within a factor {_number(factor, '.3g')} of it "
                            f"({_number(read.get(f'{which}_edges_compared'), '.0f')} edges bracketed by the grid)",
                            factor, "<=", settings.max_edge_factor))
    slope = read.get("one_step_error_slope")
    rows.append(_judged(metrics, "phase_diagram", "Ours: the one-step error (update orthogonal to v) falls like "
                        "1/sqrt(d)", data, "log-log slope -0.5 (paper.md section 6)",
                        f"slope {_number(slope, '.3f')} (judged: |slope + 0.5|)",
                        None if slope is None else abs(slope + 0.5), "<=", settings.max_slope_deviation))
    return rows


def all_rows(config: Config, results: Results) -> dict[str, list[Row]]:
    """Every claim, grouped by section title."""
    configs = {name: load_config([f"dataset={name}"]) for name in config.datasets}
    real = [name for name, settings in configs.items() if settings.data.source == "hub"]
    binary_real = [name for name in real if configs[name].data.num_classes == 2]
    return {
        "The theory, on every dataset": [row for name in config.datasets for row in theory_rows(results, name)],
        "Full training on real data": [row for name in binary_real for row in training_rows(results, name, config)],
        "The rebuttal's ablations": ablation_rows(results, config),
        "Beyond the paper: the eta0 x d phase diagram": phase_rows(results, config),
    }


def tally(sections: dict[str, list[Row]]) -> dict[str, float]:
    rows = [row for section in sections.values() for row in section]
    return {"claims": float(len(rows)), "claims_held": float(sum(row.verdict == "holds" for row in rows)),
            "claims_failed": float(sum(row.verdict == "fails" for row in rows)),
            "claims_not_run": float(sum(row.check is None for row in rows))}


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown(title: str, sections: dict[str, list[Row]], figures: Iterable[tuple[str, Path]], out: Path) -> str:
    """The report as Markdown; figures linked relative to `out` (the report's folder)."""
    counts = tally(sections)
    lines = [f"# {title}", "", f"{counts['claims_held']:.0f} of {counts['claims']:.0f} claims hold, "
             f"{counts['claims_failed']:.0f} fail, {counts['claims_not_run']:.0f} not run.", ""]
    for heading, rows in sections.items():
        lines += [f"## {heading}", "", "| claim | data | paper | ours | threshold | verdict |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {_cell(row.topic)} | {_cell(row.data)} | {_cell(row.paper)} | {_cell(row.ours)} | "
                  f"{_cell(row.threshold)} | {'**fails**' if row.verdict == 'fails' else row.verdict} |"
                  for row in rows]
        lines.append("")
    lines += ["## Figures", ""]
    for caption, path in figures:
        lines += [f"### {caption}", "", f"![{caption}]({_relative(path, out)})", ""]
    return "\n".join(lines)


def _relative(path: Path, start: Path) -> str:
    return Path(*[".."] * len(start.parts), path).as_posix()


STYLE = """body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;width:100%;font-size:14px;margin-bottom:1.5em}
th,td{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}th{background:#f3f3f3}
td.holds{background:#e6f4ea}td.fails{background:#fce8e6;font-weight:bold}td.missing{background:#fef7e0}
img{max-width:100%;border:1px solid #eee}figure{margin:1.5em 0}figcaption{font-weight:bold;margin-bottom:.4em}"""


def html_page(title: str, sections: dict[str, list[Row]], figures: Iterable[tuple[str, Path]]) -> str:
    """The report as one HTML file with every figure embedded (data: URIs), readable offline."""
    counts = tally(sections)
    escape: Callable[[str], str] = html.escape
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{escape(title)}</title>"
             f"<style>{STYLE}</style></head><body><h1>{escape(title)}</h1>",
             f"<p>{counts['claims_held']:.0f} of {counts['claims']:.0f} claims hold, {counts['claims_failed']:.0f} "
             f"fail, {counts['claims_not_run']:.0f} not run.</p>"]
    for heading, rows in sections.items():
        parts.append(f"<h2>{escape(heading)}</h2><table><tr><th>claim</th><th>data</th><th>paper</th><th>ours</th>"
                     "<th>threshold</th><th>verdict</th></tr>")
        for row in rows:
            kind = row.verdict if row.verdict in ("holds", "fails") else "missing"
            cells = "".join(f"<td>{escape(text)}</td>" for text in (row.topic, row.data, row.paper, row.ours,
                                                                     row.threshold))
            parts.append(f"<tr>{cells}<td class='{kind}'>{escape(row.verdict)}</td></tr>")
        parts.append("</table>")
    parts.append("<h2>Figures</h2>")
    for caption, path in figures:
        encoded = base64.b64encode(path.read_bytes()).decode("ascii")
        parts.append(f"<figure><figcaption>{escape(caption)}</figcaption>"
                     f"<img alt='{escape(caption)}' src='data:image/png;base64,{encoded}'></figure>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def figures(config: Config) -> list[tuple[str, Path]]:
    """The figures the report shows, those that exist: captions and paths."""
    wanted = [(f"{name}: {what}", results_dir("evaluate", name) / file) for name in config.datasets
              for what, file in (("Lemma 4.1, one step", "one_step.png"), ("gradient flow on p", "gradient_flow.png"),
                                 ("E_s^T v and E_s^T p after gradient flow", "token_scores.png"))]
    wanted += [(f"{name}: full training, binned token scores (Figure 3)",
                results_dir("train", name) / "trained" / "token_scores.png") for name in config.datasets]
    wanted += [("The rebuttal's tables against our runs", results_dir("ablation_report", "") / "rebuttal_tables.png")]
    wanted += [(caption, results_dir("phase_diagram", "") / file) for caption, file in (
        ("Phase diagram: selection", "selection.png"), ("Phase diagram: max-margin direction", "cos_max_margin.png"),
        ("The one-step error against d", "one_step_error.png"))]
    return [(caption, path) for caption, path in wanted if path.exists()]
