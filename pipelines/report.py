"""Stage `report`: every claim of the paper and the rebuttal, and ours, in one place (toksel.report.document).

Reads the measurements the stages wrote under results/ (claims.json; a claim whose stage has not run says so),
judges each with the registry (toksel.claims.catalogue) and the thresholds of params.yaml, opens with the verdict
in words and what the run was (toksel.report.header: the profile, seeds, each dataset's d and rows from prepare's
metrics, the commit and DVC experiment), and writes results/report/: report.md (figures linked), report.html
(report.md made HTML, self-contained: figures embedded), verdicts.png (the forest plot), claims.csv (a row per claim
and dataset: its verdicts, value and interval, which `python -m toksel.claims_diff` compares between runs) and
metrics.json (how many claims hold, fail, are inconclusive; how many controls fail). Both reports are artifacts of
the pipeline's parent MLflow run.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Sequence

from pipelines.sections import STAGE_SECTIONS
from toksel.claims.ledger import CHANGED
from toksel.figures.plots import save_figure
from toksel.params import Config
from toksel.report.claim_table import write_claim_table
from toksel.report.document import (
    Block,
    Content,
    Table,
    d_sweep_rows,
    embedded,
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
from toksel.report.negation import negation_block
from toksel.report.page import page
from toksel.report.readings import all_shown, readings_section
from toksel.report.training_runs import (
    CONVERGENCE_HEADER,
    accuracy_epochs_figure,
    convergence_rows,
    spread_sweep,
    sweep_figure,
    sweep_findings,
    sweep_text,
)
from toksel.runtime.cli import run_stage
from toksel.runtime.config import dataset_configs
from toksel.runtime.io import write_json, write_text
from toksel.runtime.paths import results_dir
from toksel.runtime.records import RunRecord
from toksel.summaries.changes import read_ledger, shown
from toksel.summaries.counting import under_control

# The report also shows each dataset's data and d as its entry sets them, which SECTIONS leaves out: any change of
# them reaches the report through what it depends on (prepare's metrics, evaluate@<dataset>'s claims, which record
# d), and listing the entries would rerun it for an edit that changes no effective value.
SECTIONS = STAGE_SECTIONS["report"]
OUT = results_dir("report", "")
TITLE = "toksel: the paper's claims in our runs"


CONVERGENCE_NOTE = ("Every fit trains until its validation loss has not improved for train.patience epochs, within "
                    "train.max_epochs; a fit the budget ended had not converged. The claims read the kept fits (each "
                    "arm at its own best rate); a claim resting on a fit the budget ended is shown and not counted. "
                    "The matched-lr fits (every arm at train.lr) are the protocol table's.")


def training_figures(config: Config) -> None:
    """Per training dataset: test accuracy against epochs, and the spread ratio across protocols."""
    for dataset in config.train.datasets:
        for name, figure in ((f"accuracy_epochs_{dataset}.png", accuracy_epochs_figure(dataset, config)),
                             (f"spread_sweep_{dataset}.png", sweep_figure(dataset, spread_sweep(dataset, config)))):
            if figure is not None:
                save_figure(figure, OUT / "training" / name)


def training_blocks(config: Config) -> list[Block]:
    """The arms' convergence table and the spread sweep's finding, per training dataset."""
    found = [Block("Training arms: where each fit stopped", [CONVERGENCE_NOTE],
                   Table(CONVERGENCE_HEADER, convergence_rows(config)))]
    findings = [sweep_text(dataset, sweep_findings(spread_sweep(dataset, config)))
                for dataset in config.train.datasets]
    found.append(Block("Beyond the paper: where the rebuttal's tighter one-step curves appear", findings))
    return found


def ledger_blocks(records: list | None) -> list[Block]:
    """Every rule component changed after the data (the ledger; results/ledger/ledger.md lists them all)."""
    if records is None:
        return [Block("The ledger of the rules", ["The ledger stage has not run, or found no git history: no rule "
                                                  "can be dated."])]
    changed = [record for record in records if record["status"] == CHANGED]
    rows = [[record["claim"], record["component"], shown(record["previous"]), shown(record["value"]),
             f"{record['set_in']}: {record['subject']}", record["reason"]] for record in changed]
    return [Block("The ledger: every rule changed after the data", [
        f"Derived from the repository's history (stage ledger): {len(changed)} of {len(records)} rule components "
        "were set after results they judge existed. Each claim's row above says so and gives its verdict under the "
        "rule before; results/ledger/ledger.md lists every component with the commit that set it."],
        Table(["claim", "component", "before", "now", "set in", "why (params.yaml)"], rows))]


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
    training_figures(config)
    shown = figures(config)
    reviews = all_shown(config)  # what the kept models select in real test reviews
    notes = [flow_note(*flow_checks())]  # does every gradient-flow run follow the flow?
    sweep = d_sweep_rows(config)
    # The negation section last, just before the shaded reviews of the next section (the template's `readings`).
    extra = training_blocks(config) + ledger_blocks(read_ledger()) + [negation_block()]
    content = Content(shown, readings_section(reviews), calibration, notes, sweep, first, method_note(config), extra)
    markdown = render(TITLE, sections, found, content, OUT)
    write_text(OUT / "report.md", markdown)
    write_text(OUT / "report.html", page(markdown, TITLE, embedded(shown, OUT)))
    for name in ("report.md", "report.html"):
        run.log_artifact(OUT / name, pipeline=True)
    run.log_artifact(OUT / "verdicts.png")
    # A row per claim and dataset, labelled with the profile that judged it: `toksel.claims_diff` reads it.
    table = write_claim_table(OUT / "claims.csv", every, config.profile, config.sequence.scale)
    # Each row's value as a metric of the run (claim.<id>.<dataset>), which the pipeline's MLflow run shows too, so
    # that two experiments' runs compare claim by claim.
    run.log_metrics({f"claim.{row.claim}.{row.data}": row.value for row in table.itertuples()})
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
