"""Stage `ledger`: every rule in force for every claim, with the commit that set it and whether results existed
then (toksel.claims.ledger), derived from the repository's git history so that it cannot drift from it.

Writes results/ledger/ledger.json (one record per claim and rule component: what the report reads, and what
changes only when a rule does) and results/ledger/ledger.md (the same as a table, under what HEAD was). It reads
git, which DVC cannot follow: dvc.yaml runs it every time (always_changed). Without a history (not a git
repository, a shallow clone) both files say so, and the stage still succeeds.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from toksel.claims.ledger import CHANGED, NO_HISTORY, Ledger, build_ledger, per_claim_status
from toksel.runtime.errors import ToksError
from toksel.runtime.io import write_json, write_text
from toksel.summaries.changes import shown
from toksel.summaries.markdown import table

OUT = Path("results") / "ledger"
SUBJECT_SHOWN = 60  # characters of a commit's subject in the table; the JSON has 200


def _set_in(record: Mapping[str, Any]) -> str:
    subject = record["subject"]
    cut = subject if len(subject) <= SUBJECT_SHOWN else subject[:SUBJECT_SHOWN].rstrip() + "..."
    return f"{record['set_in']}: {cut}" if cut else record["set_in"]


def markdown(ledger: Ledger) -> str:
    """The ledger as a Markdown page: HEAD, the claims whose rule changed after the data, the table."""
    lines = ["# The ledger: every rule in force", "", f"HEAD: {ledger.head or NO_HISTORY}", ""]
    lines += [f"- {warning}" for warning in ledger.warnings] + ([""] if ledger.warnings else [])
    if not ledger.available:
        return "\n".join([*lines, "No rule is listed: without the history, none can be dated.", ""])
    changed = {claim: parts for claim, parts in per_claim_status(ledger.records).items() if parts}
    count = sum(map(len, changed.values()))
    lines += [f"{count} of {len(ledger.records)} rule components were changed after the data, in "
              f"{len(changed)} claims: {', '.join(changed) or 'none'}. A component is fixed before the data when no "
              "tracked file under results/ named its claim or its statistic's metric before the commit that set its "
              "current value, and no pilot set it (numbers seen that results/ does not hold: "
              "src/toksel/claims/pilots.py).", ""]
    rows = [(record["claim"], record["component"], shown(record["value"]), _set_in(record), history(record),
             record["status"], "; ".join(part for part in (record["reason"], _pilot(record)) if part))
            for record in ledger.records]
    return "\n".join([*lines, *table(["claim", "component", "value", "set in", "history", "status", "why"], rows),
                      ""])


def history(record: Mapping[str, Any]) -> str:
    """Every value the component took, oldest first, each with the commit that set it: absent (3b140b8) -> tuned
    (b77728b)."""
    runs = record.get("history") or [{"value": record["previous"], "from": ""}, {"value": record["value"],
                                                                                 "from": record["set_in"]}]
    return " -> ".join(f"{shown(run['value'])} ({run['from']})" if run["from"] else shown(run["value"])
                       for run in runs)


def _pilot(record: Mapping[str, Any]) -> str:
    return f"set after a pilot: {record['pilot']}" if record.get("pilot") else ""


DOCS = Path("docs") / "verdicts.md"
START, END = "<!-- the ledger: written by `python -m pipelines.ledger --docs` -->", "<!-- the ledger ends -->"


def docs_block(records: list[dict[str, Any]]) -> str:
    """The components changed after the data as docs/verdicts.md gives them: what changed, from what to what, and
    the reason params.yaml gives; the commits are the report's (a commit cannot name itself in its own docs)."""
    rows = [(record["claim"], record["component"], shown(record["previous"]), shown(record["value"]),
             "; ".join(part for part in (record["reason"], _pilot(record)) if part))
            for record in records if record["status"] == CHANGED]
    return "\n".join([START, *table(["claim", "component", "before", "now", "why (params.yaml)"], rows), END])


def write_docs(path: Path, records: list[dict[str, Any]]) -> None:
    """Replace the ledger's block of `path` with the ledger of now."""
    text = path.read_text()
    if START not in text or END not in text:
        raise ToksError(f"{path} has no ledger block ({START} ... {END}) to write")
    head, rest = text.split(START, 1)
    path.write_text(head + docs_block(records) + rest.split(END, 1)[1])  # a doc, not a result: no digest beside it


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ledger = build_ledger(Path("."))
    if argv == ["--docs"]:  # docs/verdicts.md says what the ledger says
        write_docs(DOCS, ledger.records)
        print(f"ledger: {DOCS} rewritten")
        return 0
    for warning in ledger.warnings:
        print(warning, file=sys.stderr)
    write_json(OUT / "ledger.json", ledger.as_json())
    write_text(OUT / "ledger.md", markdown(ledger))
    changed = sum(record["status"] == CHANGED for record in ledger.records)
    print(f"ledger: {len(ledger.records)} rule components, {changed} changed after the data: {OUT / 'ledger.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
