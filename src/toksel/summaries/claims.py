"""A claim's row as every table of verdicts shows it: a stage's summary (evaluate, compare, ablation_report) and
the report alike. The row starts with the claim's id, its name in toksel.claims.catalogue, and names the stage and
function that compute its statistic, so that a reader goes from a row to its code; a claim whose stage has not run
names that stage."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toksel.claims.catalogue import Assessment, Claim
from toksel.claims.verdict import Interval
from toksel.runtime.io import write_json, write_text
from toksel.runtime.records import RunRecord
from toksel.summaries.changes import RuleHistory
from toksel.summaries.counting import Counting, calibration_row
from toksel.summaries.markdown import number, table

Calibration = list[dict[str, Any]]  # the calibration stage's rows: one per family and dataset


NOT_YET = "calibrated after this stage: the report says"  # a stage's summary, written before calibrate runs


def family_standing(calibration: Calibration | None, family: str, dataset: str, claim: str = "") -> str:
    """calibrated or uncalibrated on `dataset` (its own calibration row), or not run there; None: a stage's own
    summary, which the calibrate stage follows, so not judged here."""
    if calibration is None:
        return NOT_YET
    found = calibration_row(calibration, family, dataset, claim)
    if found is None:
        return "not calibrated on this dataset"
    return "calibrated" if found["calibrated"] else "uncalibrated"


@dataclass(frozen=True)
class Row:
    assessment: Assessment
    data: str
    producer: str  # the stage (with its dataset) that measures it, named when it has not run
    counting: Counting | None = None  # whether it counts, and its verdict under the error control (with_counting)
    rule: RuleHistory | None = None  # what the ledger says of its rule (with_history)

    @property
    def verdict(self) -> str:
        item = self.assessment
        if item.verdict == "not run":
            return f"not run ({self.producer})"
        inferred = f"; our inference, not the paper's: it {'; '.join(item.inferred)}" if item.inferred else ""
        if item.verdict == "exploratory":
            return f"exploratory ({'; '.join(item.unmet)}; the rule alone would say {item.judged_verdict})"
        if item.verdict == "transient":
            flows = [settled for settled in item.measurement.settled if settled is not None]
            return (f"not tested: transient (its statistic still moves over the last two doublings of the flow on "
                    f"{flows.count(False)} of {len(flows)} seeds; the rule alone would say "
                    f"{item.judged_verdict}{inferred})")
        return item.verdict + (f" ({inferred[2:]})" if inferred else "")


def interval_text(interval: Interval | None) -> str:
    """mean [low, high] (n seeds), or what there is."""
    if interval is None or interval.n == 0:
        return "not computed"
    if not interval.exists:
        return f"{number(interval.mean)} (one value: no interval)"
    seeds = f", {interval.n} seeds" if interval.method.endswith("seeds") else ""
    return f"{number(interval.mean)} [{number(interval.low)}, {number(interval.high)}{seeds}]"


def family_anchor(family: str) -> str:
    return f"calibration-{family.replace('_', '-')}"


def calibration_cell(claim: Claim, dataset: str, calibration: Calibration | None) -> str:
    """The claim's family, linked to its rows of the calibration table, with its standing on the row's dataset."""
    if not claim.family:
        return ""
    standing = family_standing(calibration, claim.family, dataset, claim.id)
    return f"[{claim.family}](#{family_anchor(claim.family)}) ({standing})"


CONTROL_TEXT = {True: "as it must", False: "it must fail"}  # after a control's verdict, whether it behaved


def control_text(item: Assessment) -> str:
    """A control's verdict with what it means: a near miss without the effect must fail the check (or straddle a
    threshold that is the null's own value)."""
    behaved = item.control_behaved
    return item.control_verdict if behaved is None else (
        f"{item.control_verdict}{', ' if behaved else ': '}{CONTROL_TEXT[behaved]}")


def p_text(row: Row) -> str:
    """The p-value of the row's own verdict's test (its holds test unless it fails) and, for a counted row, the
    Holm-adjusted one with the verdict under the control."""
    item, counting = row.assessment, row.counting
    if item.p is None:
        return ""
    own = item.p.fails if item.verdict == "fails" else item.p.holds
    if counting is None or not counting.counted:
        return number(own, ".2g")
    return f"{number(own, '.2g')}; Holm {number(counting.adjusted, '.2g')}: {counting.controlled}"


def counted_text(row: Row) -> str:
    if row.counting is None:
        return ""
    return "yes" if row.counting.counted else f"no: {row.counting.reason}"


def cells(row: Row, calibration: Calibration | None = None) -> list[str]:
    """The claim (its id first: the name it has in the code; last, the stage and function that compute it), checks,
    data, paper, ours, threshold, verdict, its p-value (and under Holm), control, control verdict, calibration
    family, whether it counts, its rule's history; a failing verdict in bold."""
    item, claim = row.assessment, row.assessment.claim
    detail = item.measurement.detail if item.measurement is not None else ""
    ours = "" if item.measurement is None else interval_text(item.interval) + (f"; {detail}" if detail else "")
    control = "" if item.measurement is None else interval_text(item.control_interval)
    stage, function = claim.computed_by
    return [f"`{claim.id}` {claim.source}: {claim.statement} (computed by {stage}: `{function}`)", claim.kind,
            row.data, claim.paper, ours,
            item.threshold_text, "**fails**" if row.verdict == "fails" else row.verdict, p_text(row), control,
            "" if item.measurement is None else control_text(item),
            calibration_cell(claim, row.data, calibration), counted_text(row),
            "" if row.rule is None else row.rule.text()]


HEADER = ["claim", "checks", "data", "paper", "ours: mean [95 % interval]", "threshold", "verdict",
          "p; Holm-adjusted: verdict under the control", "control", "control's verdict", "calibration", "counted",
          "rule: fixed before the data, or changed after"]


def claims_table(table_rows: Iterable[Row], calibration: Calibration | None = None) -> list[str]:
    """The lines of a Markdown table of the claims' rows; calibration None: a stage's summary, written before the
    calibrate stage runs."""
    return table(HEADER, (cells(row, calibration) for row in table_rows))


PROTOCOL_NOTE = ("`tuned lr` (the claims' protocol): each embedding arm at its own rate, of the screen's best "
                 "train.converged_candidates rates (the grid extended past an edge where the best sat on it) the one "
                 "whose fit trained until its validation loss stopped improving (train.patience) within "
                 "train.max_epochs reached the lowest validation loss; `screened lr`: every arm at its screen's own "
                 "choice, trained the same way (the protocol before that choice); `matched lr`: every arm "
                 "at train.lr within train.matched_max_epochs, the rebuttal's one rate for all and the budget it had "
                 "here before (the frozen arms do not converge within it); `equal steps`: every arm at its tuned rate "
                 "after the same train.screen_epochs epochs; `theory protocol`, for the spread ratios: E frozen at E1 "
                 "with v at v0 and p from gradient flow in place of the trained one-step arm.")


def publish_summary(run: RunRecord, out: Path, summary: str, metrics: Mapping[str, Any],
                    verdicts: Mapping[str, float] | None = None) -> None:
    """A stage's summary.md (also an artifact of its MLflow run), its metrics.json and, for a stage that judges
    claims, its verdict counts (verdicts.json), which the stage's line on the console gives."""
    write_text(out / "summary.md", summary)
    run.log_artifact(out / "summary.md")
    run.record_metrics(out / "metrics.json", metrics)
    if verdicts is not None:
        write_json(out / "verdicts.json", verdicts)
        run.outcome = f"the claims: {verdict_words(verdicts)}"


def verdict_words(verdicts: Mapping[str, float]) -> str:
    """12 hold, 1 fails, 3 inconclusive."""
    held, failed, unclear = (int(verdicts[name]) for name in ("held", "failed", "inconclusive"))
    return f"{held} hold{'s' if held == 1 else ''}, {failed} fail{'s' if failed == 1 else ''}, {unclear} inconclusive"
