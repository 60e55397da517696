"""The report's claims as one table, a row per claim and dataset (results/report/claims.csv), and what moved
between two runs of it: `python -m toksel.claims_diff` compares the tables of two experiments or commits.

A row: the claim, its dataset and origin (the paper's or ours), its verdict by its own rule, whether it counts,
its verdict under the error control across the report (Holm), the statistic's mean and interval, the threshold,
and the profile it was judged at (the models with positions also at their sequence.scale: cpu or paper).
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from toksel.runtime.io import write_csv
from toksel.summaries.claims import Row

COLUMNS = ("claim", "data", "origin", "verdict", "counted", "verdict_holm", "value", "low", "high", "threshold",
           "profile")
OPTIONAL = {"profile"}  # a table written before it had the column still compares
Key = tuple[str, str]  # (claim, dataset)
SEQUENCE_PRODUCERS = ("ablation_report", "pair_report")  # their claims read the models with positions


def profile_label(producer: str, profile: str, sequence_scale: str) -> str:
    """The profile a row was judged at; for a claim of the models with positions, their size too."""
    return f"{profile}, sequence.scale {sequence_scale}" if producer.startswith(SEQUENCE_PRODUCERS) else profile


def claim_rows(rows: Iterable[Row], profile: str = "", sequence_scale: str = "") -> pd.DataFrame:
    """The table of the report's rows (with their counting: document.with_counting), each labelled with the
    profile (and sequence.scale) of the run that judged it."""
    found = []
    for row in rows:
        item, interval = row.assessment, row.assessment.interval
        counted = row.counting is not None and row.counting.counted
        found.append({"claim": item.claim.id, "data": row.data, "origin": item.claim.origin, "verdict": item.verdict,
                      "counted": counted, "verdict_holm": row.counting.controlled if counted else "",
                      "value": interval.mean if interval else math.nan, "low": interval.low if interval else math.nan,
                      "high": interval.high if interval else math.nan, "threshold": item.threshold,
                      "profile": profile_label(row.producer, profile, sequence_scale)})
    return pd.DataFrame(found, columns=list(COLUMNS))


def write_claim_table(path: Path, rows: Iterable[Row], profile: str = "", sequence_scale: str = "") -> pd.DataFrame:
    table = claim_rows(rows, profile, sequence_scale)
    write_csv(path, table)
    return table


def read_claim_table(text: str) -> dict[Key, dict]:
    """A claims.csv's rows by (claim, dataset)."""
    frame = pd.read_csv(io.StringIO(text), keep_default_na=False, na_values=[""])
    missing = [name for name in COLUMNS if name not in frame.columns and name not in OPTIONAL]
    if missing:
        raise ValueError(f"not a claims table: no column {', '.join(missing)}")
    return {(row["claim"], row["data"]): row for row in frame.to_dict("records")}


@dataclass(frozen=True)
class Move:
    key: Key
    old: Mapping | None  # None: the row is new
    new: Mapping | None  # None: the row is gone

    def verdicts(self, side: Mapping | None) -> str:
        if side is None:
            return "-"
        controlled = side["counted"] and side["verdict_holm"] != side["verdict"]
        return side["verdict"] + (f" (Holm {side['verdict_holm']})" if controlled else "")

    @property
    def verdict_moved(self) -> bool:
        return self.verdicts(self.old) != self.verdicts(self.new)


def _number(value: object) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.4g}"


def moves(old: Mapping[Key, Mapping], new: Mapping[Key, Mapping]) -> list[Move]:
    """The rows whose verdict (its own or under the error control) or value moved, or that one side lacks: the
    verdicts' moves first, then the values', each in the report's order."""
    found = []
    for key in dict.fromkeys([*old, *new]):
        before, after = old.get(key), new.get(key)
        if before is None or after is None:
            found.append(Move(key, before, after))
            continue
        move = Move(key, before, after)
        if move.verdict_moved or _number(before["value"]) != _number(after["value"]):
            found.append(move)
    return sorted(found, key=lambda move: not move.verdict_moved)


def moves_text(found: list[Move], old_name: str, new_name: str) -> list[str]:
    """One line per move, under 120 columns: claim, dataset, verdict and value before and after."""
    if not found:
        return [f"no claim moved between {old_name} and {new_name}"]
    lines = [f"{len(found)} claim rows moved, {old_name} -> {new_name} (verdict moves first):",
             f"{'claim':<24}{'dataset':<18}{'verdict':<50}value"]
    for move in found:
        claim, data = move.key
        verdict = (move.verdicts(move.new) if not move.verdict_moved else
                   f"{move.verdicts(move.old)} -> {move.verdicts(move.new)}")
        value = " -> ".join(_number(side["value"]) if side else "-" for side in (move.old, move.new))
        lines.append(f"{claim:<24}{data:<18}{verdict:<50}{value}")
    return lines
