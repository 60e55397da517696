"""Two runs' outputs compared value by value: `python -m benchmarks.compare_outputs OLD NEW` (two project folders).

Every JSON, CSV and npz file under results/ and data/processed/ of either: each number of a JSON file (timings
aside: tests/helpers.TIMING_METRICS, and the run records' times, which runs/ holds apart), each cell of a CSV file,
each array of an npz file must be equal (NaN equal to NaN). A key or file on one side only counts as a difference
and is named; a JSON key that is new in NEW (a metric added) is listed apart, since it moves no number. Prints one
line per kind of file, then the differences; exit 1 when a number differs or a file is missing.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from tests.helpers import TIMING_METRICS

FOLDERS = ("results", "data/processed")


def _numbers(node: object, key: str, found: dict[str, float]) -> None:
    if isinstance(node, dict):
        for name, value in node.items():
            if name not in TIMING_METRICS:
                _numbers(value, f"{key}.{name}", found)
    elif isinstance(node, list):
        for index, value in enumerate(node):
            _numbers(value, f"{key}[{index}]", found)
    elif isinstance(node, int | float) and not isinstance(node, bool):
        found[key] = float(node)


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def files(root: Path, suffix: str) -> dict[str, Path]:
    return {str(path.relative_to(root)): path for folder in FOLDERS if (root / folder).is_dir()
            for path in sorted((root / folder).rglob(f"*{suffix}"))}


def compare_json(old: Path, new: Path) -> tuple[int, list[str], list[str]]:
    """(numbers compared, differences, keys new in NEW)."""
    a, b = {}, {}
    _numbers(json.loads(old.read_text()), "", a)
    _numbers(json.loads(new.read_text()), "", b)
    differing = [key for key in a if key not in b or not _same(a[key], b[key])]
    return len(a), differing, [key for key in b if key not in a]


def compare_csv(old: Path, new: Path) -> tuple[int, list[str]]:
    a, b = pd.read_csv(old), pd.read_csv(new)
    if list(a.columns) != list(b.columns) or len(a) != len(b):
        return a.size, [f"columns or rows ({list(a.columns)} x {len(a)} against {list(b.columns)} x {len(b)})"]
    differing = []
    for column in a.columns:
        x, y = a[column].to_numpy(), b[column].to_numpy()
        if x.dtype.kind in "fiu" and y.dtype.kind in "fiu":
            equal = (x == y) | (np.isnan(x.astype(float)) & np.isnan(y.astype(float)))
        else:
            equal = x.astype(str) == y.astype(str)
        differing += [f"{column}[{row}]" for row in np.flatnonzero(~equal)]
    return a.size, differing


def compare_npz(old: Path, new: Path) -> tuple[int, list[str]]:
    with np.load(old, allow_pickle=False) as a, np.load(new, allow_pickle=False) as b:
        names = sorted(set(a.files) | set(b.files))
        differing = [name for name in names if name not in a.files or name not in b.files
                     or not np.array_equal(a[name], b[name], equal_nan=a[name].dtype.kind == "f")]
        return sum(a[name].size for name in a.files), differing


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    old, new = Path(argv[0]), Path(argv[1])
    problems, added = [], []
    for suffix, compare in ((".json", compare_json), (".csv", compare_csv), (".npz", compare_npz)):
        a, b = files(old, suffix), files(new, suffix)
        problems += [f"{name}: only in {old}" for name in sorted(set(a) - set(b))]
        problems += [f"{name}: only in {new}" for name in sorted(set(b) - set(a))]
        count = 0
        for name in sorted(set(a) & set(b)):
            compared, differing, *new_keys = compare(a[name], b[name])
            count += compared
            problems += [f"{name}: {item}" for item in differing[:5]] + (
                [f"{name}: ... {len(differing) - 5} more"] if len(differing) > 5 else [])
            added += [f"{name}: {key}" for key in (new_keys[0] if new_keys else [])]
        print(f"{suffix[1:]}: {len(set(a) & set(b))} files in both, {count:,} values compared")
    if added:
        print(f"{len(added)} keys new in {new} (no number moved): " + ", ".join(added[:20]))
    print(f"{len(problems)} differences" + "".join(f"\n  {line}" for line in problems[:200]))
    return int(bool(problems))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
