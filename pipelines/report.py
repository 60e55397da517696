"""Stage `report`: every claim of the paper and the rebuttal, and ours, in one place (toksel.report).

Reads the measurements the stages wrote under results/ (claims.json; a claim whose stage has not run says so),
judges each with the registry (toksel.claims) and the thresholds of params.yaml, and writes results/report/:
report.md (figures linked), report.html (self-contained: figures embedded), verdicts.png (the forest plot) and
metrics.json (how many claims hold, fail, are inconclusive; how many controls fail). Both reports are
artifacts of the pipeline's parent MLflow run.
"""

from __future__ import annotations

import sys

from toksel.cli import run_stage
from toksel.config import Config
from toksel.io import write_text
from toksel.paths import results_dir
from toksel.plots import save_figure, verdicts_figure
from toksel.readings import all_shown, readings_html, readings_markdown
from toksel.report import (
    d_sweep_rows,
    figures,
    flow_checks,
    flow_note,
    forest_rows,
    headline,
    html_page,
    markdown,
    read_calibration,
    read_measurements,
    rows,
    sensitivity,
    tally,
)
from toksel.tracking import StageRun

SECTIONS = ("base.seeds", "train.datasets", "train.seeds", "report", "evaluate", "ablation", "phase", "d_sweep")
OUT = results_dir("report", "")
TITLE = "toksel: the paper's claims in our runs"


def report(config: Config, run: StageRun) -> None:
    measurements = read_measurements()
    sections, found = rows(config, measurements), sensitivity(config, measurements)
    save_figure(verdicts_figure(forest_rows(sections)), OUT / "verdicts.png")
    shown = figures(config)
    reviews = all_shown(config)  # what the kept models select in real test reviews
    calibration = read_calibration()
    notes = [flow_note(*flow_checks())]  # does every gradient-flow run follow the flow?
    sweep = d_sweep_rows(config)
    write_text(OUT / "report.md", markdown(TITLE, sections, found, shown, OUT, readings_markdown(reviews),
                                           calibration, notes, sweep))
    write_text(OUT / "report.html", html_page(TITLE, sections, found, shown, readings_html(reviews),
                                              calibration, notes, sweep))
    for name in ("report.md", "report.html"):
        run.log_pipeline_artifact(OUT / name)
    run.log_artifact(OUT / "verdicts.png", "figures")
    counts = tally(sections)
    run.record_metrics(OUT / "metrics.json", counts)
    print(f"report: {headline(counts)} {OUT / 'report.html'}")


def main(argv: list[str] | None = None) -> int:
    return run_stage("report", SECTIONS, report, argv, per_dataset=False)


if __name__ == "__main__":
    sys.exit(main())
