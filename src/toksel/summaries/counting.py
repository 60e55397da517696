"""Which rows of the report count, and their verdicts under the error control across the report.

A row counts when it is judged (measured, in its lemma's scope, a claim and not a description), not implied by a
proof (a consistency check, which only a bug could make fail, is shown and not counted), its verdict rule
is calibrated on that row's dataset (the calibration stage's row for its family and dataset, drawn with that claim's
own between-seed spread where its runs give one: power and false positives within their bounds; a family calibrated
elsewhere, or on narrower noise, says nothing of this row's), no fit it
reads was stopped by its epoch budget (two arms compared before they converged say nothing), its control
behaved (failed as a near miss without the effect must, or, where the threshold is the null's own value,
did not hold), and its verdict has p-values (an interval over seeds; a method's own interval, a grid's bracket,
has none). Every other row is shown with the reason and not counted.

The counted rows' verdicts are then put under Holm's procedure at report.family_alpha (toksel.claims.multiplicity):
a row holds under the control when its own rule says it holds and its Holm-adjusted p-value is within the level;
it fails likewise with the p-values of the opposite tests; else it is inconclusive. The report gives both.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from toksel.claims.catalogue import Assessment
from toksel.claims.multiplicity import benjamini_yekutieli, holm


@dataclass(frozen=True)
class Counting:
    counted: bool
    reason: str = ""  # why it is not counted
    controlled: str = ""  # its verdict under the error control (counted rows)
    adjusted: float | None = None  # Holm-adjusted p-value of its own verdict's test (holds, else fails)
    adjusted_by: float | None = None  # Benjamini-Yekutieli-adjusted, the same test
    controlled_by: str = ""  # its verdict under Benjamini-Yekutieli's false discovery rate control instead


def calibration_row(calibration: Sequence[Mapping[str, Any]], family: str, dataset: str,
                    claim: str = "") -> Mapping[str, Any] | None:
    """The calibration of `family` on `dataset` for `claim`: the row drawn with that claim's own between-seed
    spread where there is one, else the family's row there; None where it was not run there."""
    rows = [row for row in calibration if row["family"] == family and row["data"] == dataset]
    own = [row for row in rows if claim in row.get("for_claims", ())]
    return (own or [row for row in rows if not row.get("for_claims")] or [None])[0]


def reason_not_counted(item: Assessment, dataset: str, calibration: Sequence[Mapping[str, Any]]) -> str:
    """"" for a row that counts; else why not, in a few words."""
    if item.measurement is None:
        return "not run"
    if item.verdict in ("exploratory", "described", "transient", "not computed"):
        return item.verdict
    if item.claim.kind == "consistency":
        return "a consistency check: a proof implies it, so it could not have failed but for a bug (it would catch one)"
    found = calibration_row(calibration, item.claim.family, dataset, item.claim.id)
    if found is None:
        return f"its rule ({item.claim.family}) is not calibrated on {dataset}"
    if not found["calibrated"]:
        return f"its rule ({item.claim.family}) is uncalibrated on {dataset}: {found['reason']}"
    if item.measurement.bound_fits:
        bound = item.measurement.bound_fits
        return (f"it rests on {bound} {'fit' if bound == 1 else 'fits'} the epoch budget stopped before "
                f"{'its' if bound == 1 else 'their'} validation loss stopped improving")
    if item.control_behaved is not True:
        return f"its control is {item.control_verdict}: the check does not tell the effect from a near miss"
    if item.p is None:
        return "its interval is a method's own (no spread over seeds): no p-value for the error control"
    return ""


def count(rows: Sequence[tuple[str, Assessment]], calibration: Sequence[Mapping[str, Any]],
          family_alpha: float) -> list[Counting]:
    """Per (dataset, assessment): whether it counts and, for those that do, the verdict under Holm's procedure
    across all of them (the paper's and ours together: one family, the report)."""
    reasons = [reason_not_counted(item, dataset, calibration) for dataset, item in rows]
    counted = [i for i, reason in enumerate(reasons) if not reason]
    holds = holm([rows[i][1].p.holds for i in counted])
    fails = holm([rows[i][1].p.fails for i in counted])
    holds_by = benjamini_yekutieli([rows[i][1].p.holds for i in counted])
    fails_by = benjamini_yekutieli([rows[i][1].p.fails for i in counted])
    found = [Counting(False, reason) for reason in reasons]
    for k, i in enumerate(counted):
        verdict = rows[i][1].verdict
        own = verdict if verdict in ("holds", "fails") else "holds"
        adjusted = float(holds[k] if own == "holds" else fails[k])
        adjusted_by = float(holds_by[k] if own == "holds" else fails_by[k])
        found[i] = Counting(True, "", _controlled(verdict, adjusted, family_alpha), adjusted, adjusted_by,
                            _controlled(verdict, adjusted_by, family_alpha))
    return found


def _controlled(verdict: str, adjusted: float, alpha: float) -> str:
    """A verdict that stands under the control: its own rule's, where its adjusted p-value is within the level."""
    return verdict if verdict in ("holds", "fails") and adjusted <= alpha else "inconclusive"


def under_control(item: Assessment, counting: Counting) -> Assessment:
    """The assessment with its verdict under the error control: what the headline counts."""
    return dataclasses.replace(item, verdict=counting.controlled, own_verdict=item.verdict) if counting.counted \
        else item
