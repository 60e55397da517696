"""One report of every claim: the paper's value, ours with its interval, the threshold, the three-way verdict,
and the negative control's value and verdict; as Markdown and as a self-contained HTML page.

The stages that measure claims write their measurements (claims.json: evaluate per dataset, ablation_report,
phase_diagram); the registry (toksel.claims) judges them here with the thresholds of the config. A claim whose
stage has not run stays in the report and says so.
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toksel.claims import CLAIMS, Assessment, Claim, Measurement, assess, in_scope
from toksel.config import Config, load_config
from toksel.io import read_json, write_text
from toksel.markdown import number, table
from toksel.measurements import EQUAL, MATCHED, PROTOCOL_CLAIMS, THEORY
from toksel.paths import results_dir
from toksel.tracking import StageRun
from toksel.verdict import Interval

SECTIONS = {  # heading: the scopes it shows
    "The theory, on every dataset": ("every", "assumption1"),
    "Full training on real data": ("binary_real", "multiclass"),
    "The rebuttal's ablations": ("ablation",),
    "Beyond the paper: the eta0 x d phase diagram": ("phase",),
}
PROTOCOLS = ("tuned lr", MATCHED, EQUAL, THEORY)  # the sensitivity table's rows; "tuned lr" is the claims' own
PER_DATASET = ("evaluate", "compare")  # the stages that run once per dataset (evaluate@imdb)


def read_measurements(root: Path = Path("results")) -> list[Measurement]:
    """Every claims.json the measuring stages wrote under `root`."""
    found = []
    for path in sorted(root.glob("*/**/claims.json")):
        found += [Measurement.from_record(record) for record in json.loads(path.read_text())]
    return found


@dataclass(frozen=True)
class Row:
    assessment: Assessment
    data: str
    producer: str  # the stage (with its dataset) that measures it, named when it has not run

    @property
    def verdict(self) -> str:
        verdict = self.assessment.verdict
        return f"not run ({self.producer})" if verdict == "not run" else verdict


def rows(config: Config, measurements: list[Measurement]) -> dict[str, list[Row]]:
    """Every claim on every dataset in its scope, in the registry's order, grouped by section."""
    data = {name: load_config([f"dataset={name}"]).data for name in config.datasets}
    main = {(item.claim, item.data): item for item in measurements if not item.protocol}
    grouped: dict[str, list[Row]] = {heading: [] for heading in SECTIONS}
    for claim in CLAIMS:
        heading = next(heading for heading, scopes in SECTIONS.items() if claim.scope in scopes)
        for dataset in [name for name in config.datasets if in_scope(claim, name, data[name], config)]:
            producer = claim.producer + (f"@{dataset}" if claim.producer in PER_DATASET else "")
            grouped[heading].append(Row(assess(claim, main.get((claim.id, dataset)), config), dataset, producer))
    return grouped


def sensitivity(config: Config, measurements: list[Measurement]) -> list[tuple[Claim, str, str, Assessment]]:
    """(claim, dataset, protocol, assessment) for the protocol-dependent claims under each protocol measured."""
    by_key = {(item.claim, item.data, item.protocol or PROTOCOLS[0]): item for item in measurements}
    found = []
    for claim in (claim for claim in CLAIMS if claim.id in PROTOCOL_CLAIMS):
        for dataset in dict.fromkeys(item.data for item in measurements if item.claim == claim.id):
            for protocol in PROTOCOLS:
                if (claim.id, dataset, protocol) in by_key:
                    found.append((claim, dataset, protocol, assess(claim, by_key[claim.id, dataset, protocol], config)))
    return found


def tally(sections: dict[str, list[Row]]) -> dict[str, float]:
    every = [row.assessment for section in sections.values() for row in section]
    judged = [item for item in every if item.measurement is not None]
    controlled = [item for item in judged if item.control_interval is not None and item.control_interval.n > 0]
    count = {verdict: float(sum(item.verdict == verdict for item in every))
             for verdict in ("holds", "fails", "inconclusive", "not computed")}
    return {"claims": float(len(every)), "claims_held": count["holds"], "claims_failed": count["fails"],
            "claims_inconclusive": count["inconclusive"], "claims_not_computed": count["not computed"],
            "claims_not_run": float(len(every) - len(judged)),
            "controls_failing": float(sum(item.control_fails for item in controlled)),
            "controls_not_failing": float(sum(not item.control_fails for item in controlled))}


def headline(counts: dict[str, float]) -> str:
    controls = counts["controls_failing"] + counts["controls_not_failing"]
    return (f"{counts['claims_held']:.0f} of {counts['claims']:.0f} claims hold, {counts['claims_failed']:.0f} fail, "
            f"{counts['claims_inconclusive']:.0f} inconclusive, {counts['claims_not_computed']:.0f} not computed, "
            f"{counts['claims_not_run']:.0f} not run; the control fails as it must for "
            f"{counts['controls_failing']:.0f} of the {controls:.0f} controls measured.")


def interval_text(interval: Interval | None) -> str:
    """mean [low, high] (n seeds), or what there is."""
    if interval is None or interval.n == 0:
        return "not computed"
    if not interval.exists:
        return f"{number(interval.mean)} (one value: no interval)"
    seeds = f", {interval.n} seeds" if interval.method.endswith("seeds") else ""
    return f"{number(interval.mean)} [{number(interval.low)}, {number(interval.high)}{seeds}]"


def cells(row: Row) -> list[str]:
    """claim, data, paper, ours, threshold, verdict, control, control verdict."""
    item, claim = row.assessment, row.assessment.claim
    detail = item.measurement.detail if item.measurement is not None else ""
    ours = "" if item.measurement is None else interval_text(item.interval) + (f"; {detail}" if detail else "")
    control = "" if item.measurement is None else interval_text(item.control_interval)
    return [f"{claim.source}: {claim.statement}", row.data, claim.paper, ours,
            f"{claim.comparison} {item.threshold:g}", row.verdict, control,
            "" if item.measurement is None else item.control_verdict]


HEADER = ["claim", "data", "paper", "ours: mean [95 % interval]", "threshold", "verdict", "control",
          "control's verdict"]


def markdown_table(table_rows: Iterable[Row]) -> list[str]:
    """The claims' rows, a failing verdict in bold."""
    def marked(values: list[str]) -> list[str]:
        return [*values[:5], f"**{values[5]}**" if values[5] == "fails" else values[5], *values[6:]]

    return table(HEADER, (marked(cells(row)) for row in table_rows))


def sensitivity_lines(found: list[tuple[Claim, str, str, Assessment]]) -> list[str]:
    if not found:
        return []
    return table(["claim", "data", "protocol", "ours: mean [95 % interval]", "threshold", "verdict"],
                 [[claim.statement, data, protocol, interval_text(item.interval),
                   f"{claim.comparison} {item.threshold:g}", item.verdict] for claim, data, protocol, item in found])


PROTOCOL_NOTE = ("`tuned lr` (the claims' protocol): each embedding arm at its own learning rate, the best of "
                 "train.lr_grid on the validation loss, trained to its validation optimum (early stopping within the "
                 "epoch budget); `matched lr`: every arm at train.lr, the same stopping rule; `equal steps`: every "
                 "arm at its tuned rate after the same train.screen_epochs epochs; `theory protocol`, for the "
                 "spread ratios: E frozen at E1 with v at v0 and p from gradient flow in place of the trained "
                 "one-step arm.")
METHOD_NOTE = ("Each claim is measured on every seed of base.seeds; `ours` is the mean with its 95 % interval "
               "(Student's t over the seeds; the phase diagram's claims: the grid's brackets, the fit's "
               "confidence interval). A claim holds when the whole interval lies on its side of the threshold, "
               "fails when it lies on the other side, and is inconclusive otherwise. Its control is the same "
               "measurement where the claim must not hold; the control's verdict should be `fails`.")


INTERRUPTION = "resumed_after_interruption"


def interrupted_fits(folders: Iterable[Path]) -> list[str]:
    """The fits, in the gathered metrics (<stage>/<run>.json) under `folders`, that went on from a checkpoint a
    stopped process had left: their results may differ from an uninterrupted run's in the last digits."""
    found = []

    def walk(node: object, where: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key.endswith(INTERRUPTION) and value:
                    found.append(f"{where} ({key.removesuffix(INTERRUPTION).rstrip('_') or 'kept fit'})")
                walk(value, f"{where}/{key}" if isinstance(value, dict) else where)

    for folder in folders:
        for path in sorted(folder.rglob("*.json")) if folder.is_dir() else []:
            if path.parent.name.startswith("seed") or path.name in ("metrics.json", "claims.json"):
                continue  # the gathered files hold the seeds' metrics
            walk(read_json(path), str(path.with_suffix("").relative_to(folder.parent)))
    return found


def interruption_note(fits: list[str]) -> str:
    return ("" if not fits else "Resumed after an interruption (a resumed fit may differ from an uninterrupted one "
            f"in the last digits): {', '.join(fits)}.")


def markdown(title: str, sections: dict[str, list[Row]], found: list, figures: Iterable[tuple[str, Path]],
             out: Path, interrupted: list[str] = (), readings: list[str] = ()) -> str:
    """The report as Markdown; figures linked relative to `out` (the report's folder)."""
    lines = [f"# {title}", "", headline(tally(sections)), "", METHOD_NOTE, ""]
    if interrupted:
        lines += [interruption_note(list(interrupted)), ""]
    for heading, section in sections.items():
        lines += [f"## {heading}", "", *markdown_table(section), ""]
    if found:
        lines += ["## How the protocol moves the verdicts", "", PROTOCOL_NOTE, "", *sensitivity_lines(found), ""]
    lines += [*readings]
    lines += ["## What each claim measures", "", *table(["claim", "source", "statistic", "control"],
                                                        [[f"`{claim.id}`", claim.source, claim.measures, claim.control]
                                                         for claim in CLAIMS])]
    lines += ["", "## Figures", ""]
    for caption, path in figures:
        lines += [f"### {caption}", "", f"![{caption}]({_relative(path, out)})", ""]
    return "\n".join(lines)


def _relative(path: Path, start: Path) -> str:
    return Path(*[".."] * len(start.parts), path).as_posix()


STYLE = """body{font-family:system-ui,sans-serif;max-width:1400px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;width:100%;font-size:13px;margin-bottom:1.5em}
th,td{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}th{background:#f3f3f3}
td.holds{background:#e6f4ea}td.fails{background:#fce8e6;font-weight:bold}td.inconclusive{background:#fef7e0}
td.missing{background:#f1f1f1}
img{max-width:100%;border:1px solid #eee}figure{margin:1.5em 0}figcaption{font-weight:bold;margin-bottom:.4em}
td.reading{line-height:1.9}.token{padding:1px 2px;border-radius:3px}"""


def _verdict_class(verdict: str) -> str:
    return verdict if verdict in ("holds", "fails", "inconclusive") else "missing"


def html_page(title: str, sections: dict[str, list[Row]], found: list, figures: Iterable[tuple[str, Path]],
              interrupted: list[str] = (), readings: str = "") -> str:
    """The report as one HTML file with every figure embedded (data: URIs), readable offline."""
    escape = html.escape
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{escape(title)}</title>"
             f"<style>{STYLE}</style></head><body><h1>{escape(title)}</h1>",
             f"<p>{escape(headline(tally(sections)))}</p><p>{escape(METHOD_NOTE)}</p>"]
    if interrupted:
        parts.append(f"<p>{escape(interruption_note(list(interrupted)))}</p>")
    for heading, section in sections.items():
        parts.append(f"<h2>{escape(heading)}</h2><table><tr>" + "".join(f"<th>{escape(name)}</th>" for name in HEADER)
                     + "</tr>")
        for row in section:
            values = cells(row)
            kinds = ["", "", "", "", "", _verdict_class(values[5]), "", _verdict_class(values[7])]
            parts.append("<tr>" + "".join(f"<td class='{kind}'>{escape(value)}</td>" if kind else
                                          f"<td>{escape(value)}</td>" for kind, value in zip(kinds, values,
                                                                                           strict=True)) + "</tr>")
        parts.append("</table>")
    if found:
        parts.append(f"<h2>How the protocol moves the verdicts</h2><p>{escape(PROTOCOL_NOTE)}</p><table><tr>"
                     "<th>claim</th><th>data</th><th>protocol</th><th>ours: mean [95 % interval]</th>"
                     "<th>threshold</th><th>verdict</th></tr>")
        for claim, data, protocol, item in found:
            parts.append(f"<tr><td>{escape(claim.statement)}</td><td>{escape(data)}</td><td>{escape(protocol)}</td>"
                         f"<td>{escape(interval_text(item.interval))}</td><td>{claim.comparison} {item.threshold:g}"
                         f"</td><td class='{_verdict_class(item.verdict)}'>{escape(item.verdict)}</td></tr>")
        parts.append("</table>")
    parts.append(readings)
    parts.append("<h2>What each claim measures</h2><table><tr><th>claim</th><th>source</th><th>statistic</th>"
                 "<th>control</th></tr>")
    parts += [f"<tr><td>{escape(claim.id)}</td><td>{escape(claim.source)}</td><td>{escape(claim.measures)}</td>"
              f"<td>{escape(claim.control)}</td></tr>" for claim in CLAIMS]
    parts.append("</table><h2>Figures</h2>")
    for caption, path in figures:
        encoded = base64.b64encode(path.read_bytes()).decode("ascii")
        parts.append(f"<figure><figcaption>{escape(caption)}</figcaption>"
                     f"<img alt='{escape(caption)}' src='data:image/png;base64,{encoded}'></figure>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def figures(config: Config) -> list[tuple[str, Path]]:
    """The figures the report shows, those that exist: captions and paths (the first seed's runs)."""
    seed = f"seed{config.training_seeds[0]}"
    wanted = [("Every claim's interval against its threshold, and its control's", results_dir("report", "")
               / "verdicts.png")]
    wanted += [(f"{name}: {what}", results_dir("evaluate", name) / file) for name in config.datasets
               for what, file in (("Lemma 4.1, one step", "one_step.png"), ("gradient flow on p", "gradient_flow.png"),
                                  ("E_s^T v and E_s^T p after gradient flow", "token_scores.png"))]
    wanted += [(f"{name}: full training, binned token scores (Figure 3), {seed}",
                results_dir("train", name) / "trained" / seed / "token_scores.png") for name in config.train.datasets]
    wanted += [("The rebuttal's tables against our runs", results_dir("ablation_report", "") / "rebuttal_tables.png")]
    wanted += [(caption, results_dir("phase_diagram", "") / file) for caption, file in (
        ("Phase diagram: selection", "selection.png"), ("Phase diagram: max-margin direction", "cos_max_margin.png"),
        ("The one-step error against d", "one_step_error.png"))]
    return [(caption, path) for caption, path in wanted if path.exists()]


def forest_rows(sections: dict[str, list[Row]]) -> list[tuple[str, Assessment]]:
    """(label, assessment) of every measured claim, for the forest plot."""
    return [(f"{row.assessment.claim.id} ({row.data})", row.assessment) for section in sections.values()
            for row in section if row.assessment.measurement is not None]


def publish_summary(run: StageRun, out: Path, summary: str, metrics: Mapping[str, Any],
                    shown_until: str = "\n\n## ") -> None:
    """A stage's summary.md (also an artifact of its MLflow run) and its metrics.json; the summary up to
    `shown_until` (its first subsection) on stdout."""
    write_text(out / "summary.md", summary)
    run.log_artifact(out / "summary.md")
    run.record_metrics(out / "metrics.json", metrics)
    print(summary.split(shown_until)[0])
