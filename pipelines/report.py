"""Stage `report`: every claim of the paper and the rebuttal, and ours, in one place (toksel.report.document).

Reads the measurements the stages wrote under results/ (claims.json; a claim whose stage has not run says so),
judges each with the registry (toksel.claims.catalogue) and the thresholds of params.yaml, opens with the verdict
in words and what the run was (toksel.report.header: the profile, seeds, each dataset's d and rows from prepare's
metrics, the commit and DVC experiment), and writes results/report/:
report.md (figures linked), report.html (self-contained: figures embedded), verdicts.png (the forest plot) and
metrics.json (how many claims hold, fail, are inconclusive; how many controls fail). Both reports are
artifacts of the pipeline's parent MLflow run.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Sequence

from pipelines.sections import STAGE_SECTIONS
from toksel.report.changes import read_ledger
from toksel.report.counting import under_control
from toksel.report.document import (
    d_sweep_rows,
    figures,
    flow_checks,
    flow_note,
    forest_rows,
    headline,
    method_note,
    read_calibration,
    read_measurements,
    render,
    rows,
    sensitivity,
    tally,
    with_counting,
    with_history,
)
from toksel.report.forest import verdicts_figure
from toksel.report.header import header
from toksel.report.plots import save_figure
from toksel.report.readings import all_shown, readings_html, readings_markdown
from toksel.runtime.cli import run_stage
from toksel.runtime.config import Config, dataset_configs
from toksel.runtime.io import write_json, write_text
from toksel.runtime.paths import results_dir
from toksel.runtime.records import RunRecord

# The report also shows each dataset's data and d as its entry sets them, which SECTIONS leaves out: any change of
# them reaches the report through what it depends on (prepare's metrics, evaluate@<dataset>'s claims, which record
# d), and listing the entries would rerun it for an edit that changes no effective value.
SECTIONS = STAGE_SECTIONS["report"]
OUT = results_dir("report", "")
TITLE = "toksel: the paper's claims in our runs"


def report(config: Config, run: RunRecord, overrides: Sequence[str] = ()) -> None:
    measurements = read_measurements()
    datasets = dataset_configs(config.datasets, overrides)  # as the stages read them: d, the data's source
    calibration = read_calibration()
    sections = with_counting(rows(config, measurements, datasets), calibration, config.report.family_alpha)
    sections = with_history(sections, read_ledger(), config)  # the ledger: each rule fixed before or after the data
    found = sensitivity(config, measurements)
    every = [row for section in sections.values() for row in section]
    counted = [(row.data, under_control(row.assessment, row.counting)) for row in every
               if row.counting.counted or not row.assessment.judged]
    uncounted = [(row.data, row.assessment, row.counting.reason) for row in every
                 if row.assessment.judged and not row.counting.counted]
    first = header(config, counted, datasets, run.tags, not_counted=uncounted)
    save_figure(verdicts_figure(forest_rows(sections)), OUT / "verdicts.png")
    shown = figures(config)
    reviews = all_shown(config)  # what the kept models select in real test reviews
    notes = [flow_note(*flow_checks())]  # does every gradient-flow run follow the flow?
    sweep = d_sweep_rows(config)
    readings = {"md": "\n".join(readings_markdown(reviews)) + ("\n" if reviews else ""), "html": readings_html(reviews)}
    for markup in ("md", "html"):
        write_text(OUT / f"report.{markup}", render(markup, TITLE, sections, found, shown, OUT, readings[markup],
                                                    calibration, notes, sweep, first, method_note(config)))
    for name in ("report.md", "report.html"):
        run.log_artifact(OUT / name, pipeline=True)
    run.log_artifact(OUT / "verdicts.png")
    counts = tally(sections)
    run.record_metrics(OUT / "metrics.json", counts)
    verdicts = {f"{prefix}{name}": counts[f"{origin}_{name}"] for origin, prefix in (("claims", ""), ("ours", "ours_"))
                for name in ("held", "failed", "inconclusive", "held_holm", "not_counted")}
    write_json(OUT / "verdicts.json", verdicts)  # its DVC metrics: the paper's claims, and ours apart
    print(f"report: {first.verdict.lead} {headline(counts)} {OUT / 'report.html'}")


def main(argv: list[str] | None = None) -> int:
    overrides = sys.argv[1:] if argv is None else list(argv)  # each dataset's config takes them too
    return run_stage("report", SECTIONS, functools.partial(report, overrides=overrides), argv, per_dataset=False)


if __name__ == "__main__":
    sys.exit(main())
