"""What the ledger (toksel.claims.ledger, results/ledger/ledger.json) says of each row of the report: whether the
rule that judges it was fixed before the data or changed after them (from what, in which commit, why), and the
verdict the rule in force before the data would give.

A row's rule is its claim's statistic, comparison, kind, threshold and band, scope and requirements, protocol and
the settings of its protocol. A dataset's own setting (datasets.<name>.<key>) bears on that dataset's rows alone; a
top-level setting on the rows of the datasets that do not override it. The verdict under the rule before reverts
every component changed after the data to its previous value where this run's numbers can be judged that way:
an old threshold, comparison, kind or band, the equivalence test's old level (the 95 % interval), the lemma's
requirements as they were, an old statistic the runs still record, the protocol before (the matched-lr fits,
within the budget they had). A change this run cannot undo (a flow's horizon, the
one step's eta0, the rates screened) leaves the old verdict "not recomputed", with the reason.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toksel.claims.catalogue import Assessment, Claim, Measurement, Statistic, assess
from toksel.claims.ledger import ABSENT, CHANGED, NOT_SET
from toksel.claims.protocols import MATCHED, SCREENED
from toksel.claims.verdict import judge, judge_within
from toksel.runtime.io import read_json
from toksel.runtime.paths import results_dir

LEDGER = results_dir("ledger", "") / "ledger.json"
FIXED_TEXT, CHANGED_TEXT, UNKNOWN = "fixed before the data", "changed after the data", "no history"
CATALOGUE = {spec.name for spec in dataclasses.fields(Claim)}
# The settings this run's numbers cannot be judged without: another run would be needed under the old value.
RERUN = {"gradient_flow.horizon": "the flows at the old horizon", "gradient_flow.tolerance": "the flows at the old "
         "tolerance", "one_step.eta0": "the one step at the old eta0", "train.lr_grid": "the arms screened on the old "
         "rates", "train.patience": "the arms under the old patience"}
Remeasure = Callable[[Claim, str], Measurement | None]  # a claim (an old version) on the row's runs of a protocol


def read_ledger(path: Path = LEDGER) -> list[dict[str, Any]] | None:
    """The ledger's records; None where it has not run or had no history to read."""
    if not path.exists():
        return None
    ledger = read_json(path)
    return ledger["records"] if ledger.get("available") else None


def bearing(records: Sequence[Mapping[str, Any]], claim: str, dataset: str) -> list[Mapping[str, Any]]:
    """The claim's components changed after the data that bear on its row on `dataset`."""
    mine = [record for record in records if record["claim"] == claim]
    overridden = {record["component"].split(".", 2)[2] for record in mine
                  if record["component"].startswith(f"datasets.{dataset}.") and record["value"] != NOT_SET}
    found = []
    for record in mine:
        component = record["component"]
        if record["status"] != CHANGED:
            continue
        if component.startswith("datasets."):
            if component.split(".")[1] == dataset:
                found.append(record)
        elif component not in overridden:
            found.append(record)
    return found


@dataclass(frozen=True)
class RuleHistory:
    status: str  # fixed before the data, changed after the data, or no history
    changes: tuple[Mapping[str, Any], ...]
    old_verdict: str = ""  # the verdict under the rule in force before the data ("" where it was fixed)
    note: str = ""  # how the old verdict was found, or why it could not be
    each: tuple[tuple[str, str, str], ...] = ()  # with several changes: (component, verdict, note) of each one undone
    # alone, the others as they are now: where one change needs a rerun, the others' old rules are still judged

    @property
    def changed(self) -> bool:
        return self.status == CHANGED_TEXT

    def text(self) -> str:
        """The row's cell: the status, each change with its commit (why: the report's ledger section, one row per
        change), and the old verdict."""
        if not self.changed:
            return self.status
        parts = [f"{record['component']} {shown(record['previous'])} -> {shown(record['value'])} "
                 f"({record['set_in']}{', after a pilot' if record.get('pilot') else ''})" for record in self.changes]
        alone = "; ".join(f"{component} as before: {verdict}" + (f" ({note})" if note else "")
                          for component, verdict, note in self.each)
        return (f"{CHANGED_TEXT}: " + "; ".join(parts) + f". Under the rule before: {self.old_verdict}"
                + (f" ({self.note})" if self.note else "") + (f". Each change alone: {alone}" if alone else ""))


def shown(value: Any) -> str:
    """A component's value in a table cell: a statistic as `metric of runs (combine)`, text as it is."""
    if isinstance(value, Mapping) and {"runs", "metric", "combine"} <= value.keys():
        combine = "" if value["combine"] == "value" else f" ({value['combine']})"
        return f"{value['metric']} of {', '.join(value['runs'])}{combine}"
    if isinstance(value, str):
        return value or '""'
    return json.dumps(value)


def history(item: Assessment, dataset: str, records: Sequence[Mapping[str, Any]] | None, config: Any,
            remeasure: Remeasure) -> RuleHistory:
    """The row's rule history and its verdict under the rule before. remeasure: an old version of the claim
    measured on the row's runs under a protocol ("" for the claim's own)."""
    if records is None:
        return RuleHistory(UNKNOWN, ())
    changes = bearing(records, item.claim.id, dataset)
    if not changes:
        return RuleHistory(FIXED_TEXT, ())
    if item.measurement is None:
        return RuleHistory(CHANGED_TEXT, tuple(changes), "not run")
    if all(record.get("pilot") and record["previous"] in (ABSENT, NOT_SET) for record in changes):
        return RuleHistory(CHANGED_TEXT, tuple(changes), "none",
                           "set after a pilot's numbers (the ledger says which): there was no rule before")
    verdict, note = _old_verdict(item, {record["component"]: record["previous"] for record in changes}, config,
                                 remeasure)
    each = tuple((record["component"], *_old_verdict(item, {record["component"]: record["previous"]}, config,
                                                     remeasure)) for record in changes) if len(changes) > 1 else ()
    return RuleHistory(CHANGED_TEXT, tuple(changes), verdict, note, each)


def _own_key(component: str) -> str:
    """A setting's key without its dataset: datasets.imdb.gradient_flow.horizon -> gradient_flow.horizon."""
    return component.split(".", 2)[2] if component.startswith("datasets.") else component


def _old_verdict(item: Assessment, previous: Mapping[str, Any], config: Any, remeasure: Remeasure) -> tuple[str, str]:
    claim, notes = item.claim, []
    if any(value == ABSENT for component, value in previous.items() if component in CATALOGUE):
        return "none", "the claim was added after its numbers were seen: there was no rule before"
    undone = sorted({f"{_own_key(component)} (needs {RERUN[_own_key(component)]})" for component in previous
                     if _own_key(component) in RERUN})
    if undone:
        return "not recomputed", "this run cannot undo " + ", ".join(undone)
    old = dataclasses.replace(claim, **{field: previous[field] for field in ("comparison", "kind", "paper_value")
                                        if field in previous})
    if "requires" in previous:
        old = dataclasses.replace(old, requires=tuple(previous["requires"]))
        notes.append(f"the requirements it had then ({', '.join(previous['requires']) or 'none'})")
    if "statistic" in previous:
        before = previous["statistic"]
        old = dataclasses.replace(old, statistic=Statistic(tuple(before["runs"]), before["metric"], before["combine"]))
        notes.append(f"its statistic then, {before['metric']}")
    protocol = ""
    if "protocol" in previous:
        protocol = MATCHED
        notes.append(f"the {protocol} fits (their budget train.matched_max_epochs, the old one)")
    elif any(_own_key(component) == "train.converged_candidates" for component in previous):
        protocol = SCREENED
        notes.append("each arm at its screen's choice, its converged fit from this run")
    elif any(_own_key(component) == "train.max_epochs" for component in previous):
        return "not recomputed", "needs the arms under the old epoch budget"
    measurement = item.measurement if old.statistic == claim.statistic and not protocol else remeasure(old, protocol)
    if measurement is None or all(value is None for value in measurement.values):
        return "not recomputed", f"this run records no {old.statistic.metric} under {protocol or 'its protocol'}"
    threshold = previous.get("threshold_value", item.threshold)
    if not isinstance(threshold, int | float) or not math.isfinite(threshold):
        return "none", f"no threshold before ({threshold})"
    if "report.size_alpha" in previous:
        notes.append("its 95 % interval, as size checks were read before the equivalence test")
        return _wide_verdict(old, measurement, float(threshold)), "; ".join(notes)
    judged = assess(old, dataclasses.replace(measurement, regime=item.measurement.regime),
                    _Thresholds(config, _threshold_key(claim, old), float(threshold)))
    return judged.verdict, "; ".join(notes)


def _threshold_key(claim: Claim, old: Claim) -> str:
    """Where assess reads the old rule's threshold: the band's factor for a size read as a band, else the claim's
    own key (which holds the old value in _Thresholds)."""
    return "report.size_factor" if old.comparison == "within" else claim.threshold


def _wide_verdict(claim: Claim, measurement: Measurement, threshold: float) -> str:
    """A size check read as before the equivalence test: its 95 % interval inside the band (or on its side)."""
    from toksel.claims.verdict import seed_interval

    interval = seed_interval(measurement.values)
    if claim.comparison == "within" and claim.paper_value is not None:
        return judge_within(interval, claim.paper_value / threshold, claim.paper_value * threshold)
    return judge(interval, claim.comparison, threshold)


class _Thresholds:
    """The config with one threshold replaced (the old value), for `assess`, which reads it by its dotted key."""

    def __init__(self, config: Any, key: str, value: float) -> None:
        self._config, self._key, self._value = config, key, value

    def __getattr__(self, name: str) -> Any:
        section = getattr(self._config, name)
        head, _, field = self._key.partition(".")
        return dataclasses.replace(section, **{field: self._value}) if name == head else section
