"""Stage `report`: every claim of the paper and the rebuttal, and ours, in one place (toksel.report.document).

Reads the measurements the stages wrote under results/ (claims.json; a claim whose stage has not run says so),
judges each with the registry (toksel.claims.catalogue) and the thresholds of params.yaml, and writes results/report/:
report.md (figures linked), report.html (self-contained: figures embedded), verdicts.png (the forest plot) and
metrics.json (how many claims hold, fail, are inconclusive; how many controls fail). Both reports are
artifacts of the pipeline's parent MLflow run.
"""

from __future__ import annotations

import sys

from pipelines.sections import STAGE_SECTIONS
from toksel.report.document import (
    d_sweep_rows,
    figures,
    flow_checks,
    flow_note,
    forest_rows,
    headline,
    read_calibration,
    read_measurements,
    render,
    rows,
    sensitivity,
    tally,
)
from toksel.report.plots import save_figure, verdicts_figure
from toksel.report.readings import all_shown, readings_html, readings_markdown
from toksel.runtime.cli import run_stage
from toksel.runtime.config import Config
from toksel.runtime.io import write_json, write_text
from toksel.runtime.paths import results_dir
from toksel.runtime.records import RunRecord

SECTIONS = STAGE_SECTIONS["report"]
OUT = results_dir("report", "")
TITLE = "toksel: the paper's claims in our runs"


def report(config: Config, run: RunRecord) -> None:
    measurements = read_measurements()
    sections, found = rows(config, measurements), sensitivity(config, measurements)
    save_figure(verdicts_figure(forest_rows(sections)), OUT / "verdicts.png")
    shown = figures(config)
    reviews = all_shown(config)  # what the kept models select in real test reviews
    calibration = read_calibration()
    notes = [flow_note(*flow_checks())]  # does every gradient-flow run follow the flow?
    sweep = d_sweep_rows(config)
    readings = {"md": "\n".join(readings_markdown(reviews)) + ("\n" if reviews else ""), "html": readings_html(reviews)}
    for markup in ("md", "html"):
        write_text(OUT / f"report.{markup}", render(markup, TITLE, sections, found, shown, OUT, readings[markup],
                                                    calibration, notes, sweep))
    for name in ("report.md", "report.html"):
        run.log_artifact(OUT / name, pipeline=True)
    run.log_artifact(OUT / "verdicts.png")
    counts = tally(sections)
    run.record_metrics(OUT / "metrics.json", counts)
    verdicts = {f"{prefix}{name}": counts[f"{origin}_{name}"] for origin, prefix in (("claims", ""), ("ours", "ours_"))
                for name in ("held", "failed", "inconclusive")}
    write_json(OUT / "verdicts.json", verdicts)  # its DVC metrics: the paper's claims, and ours apart
    print(f"report: {headline(counts)} {OUT / 'report.html'}")


def main(argv: list[str] | None = None) -> int:
    return run_stage("report", SECTIONS, report, argv, per_dataset=False)


if __name__ == "__main__":
    sys.exit(main())
