"""Stage `report`: every claim of the paper and the rebuttal, and ours, in one place (toksel.report).

Reads what the stages wrote under results/ (a claim whose stage has not run says so) and writes
results/report/: report.md (figures linked), report.html (self-contained: figures embedded) and metrics.json
(how many claims hold). Both reports are artifacts of the pipeline's parent MLflow run.
"""

from __future__ import annotations

import sys

from toksel.cli import run_stage
from toksel.config import Config
from toksel.io import write_text
from toksel.paths import results_dir
from toksel.report import Results, all_rows, figures, html_page, markdown, tally
from toksel.tracking import StageRun

SECTIONS = ("report", "ablation", "phase")
OUT = results_dir("report", "")
TITLE = "toksel: the paper's claims in our runs"


def report(config: Config, run: StageRun) -> None:
    sections = all_rows(config, Results())
    shown = figures(config)
    write_text(OUT / "report.md", markdown(TITLE, sections, shown, OUT))
    write_text(OUT / "report.html", html_page(TITLE, sections, shown))
    for name in ("report.md", "report.html"):
        run.log_pipeline_artifact(OUT / name)
    counts = tally(sections)
    run.record_metrics(OUT / "metrics.json", counts)
    print(f"report: {counts['claims_held']:.0f} of {counts['claims']:.0f} claims hold, {counts['claims_failed']:.0f} "
          f"fail, {counts['claims_not_run']:.0f} not run: {OUT / 'report.html'}")


def main(argv: list[str] | None = None) -> int:
    return run_stage("report", SECTIONS, report, argv)


if __name__ == "__main__":
    sys.exit(main())
