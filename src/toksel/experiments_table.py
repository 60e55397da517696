"""The experiments side by side, narrowed to what differs between them: `python -m toksel.experiments_table
[dvc exp show options]` (`make experiments`).

`dvc exp show --only-changed` keeps a column wherever a value differs among its rows, the baseline commit's and the
workspace's included, so that beside the full values every value a profile sets is a column (over 3,000
characters wide). Here the experiments are compared among themselves (with the baseline and the workspace only
when there are fewer than two experiments), and the table is turned: a row per parameter or metric whose value
differs between them, a column per experiment (three within 120 columns; longer values cut, with ~).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from toksel.runtime.errors import ToksError
from toksel.runtime.records import differing, flatten

KEY_WIDTH, VALUE_WIDTH = 36, 23  # three runs in 105 columns


def _values(data: Mapping[str, Any]) -> dict[str, Any]:
    """A row's parameters (params.yaml's keys) and metrics (each file's keys, after its name when there are several)."""
    params = {key: value for file in (data.get("params") or {}).values()
              for key, value in flatten((file or {}).get("data") or {}).items()}
    metrics_files = data.get("metrics") or {}
    metrics = {(f"{Path(path).stem}:{key}" if len(metrics_files) > 1 else key): value
               for path, file in metrics_files.items()
               for key, value in flatten((file or {}).get("data") or {}).items()}
    return {**params, **metrics}


def runs(shown: Sequence[Mapping[str, Any]]) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Every row of `dvc exp show --json` with its values, by name, and the names of the experiments among them. An
    experiment still running is named so; where it runs in the workspace, the workspace's row is its values (DVC
    shows them twice), so that row goes."""
    found: dict[str, dict[str, Any]] = {}
    experiments, running_here = [], False
    for baseline in shown:
        if baseline.get("data"):
            revision = baseline.get("rev") or "?"
            found[baseline.get("name") or (revision if revision == "workspace" else revision[:7])] = _values(
                baseline["data"])
        for experiment in baseline.get("experiments") or []:
            revision = (experiment.get("revs") or [{}])[0]
            name = experiment.get("name") or revision.get("name") or (revision.get("rev") or "?")[:7]
            executor = experiment.get("executor") or {}
            if executor.get("state") == "running":
                name, running_here = f"{name} (running)", running_here or executor.get("name") == "workspace"
            if revision.get("data"):  # a failed or queued experiment has none
                found[name] = _values(revision["data"])
                experiments.append(name)
    if running_here:
        found.pop("workspace", None)
    return found, experiments


def narrowed(shown: Sequence[Mapping[str, Any]]) -> list[str]:
    """The table: a row per key whose value differs between the runs compared, a column per run."""
    found, experiments = runs(shown)
    compared = experiments if len(experiments) >= 2 else list(found)
    if len(compared) < 2:
        return [f"nothing to compare: {len(compared)} run shown (dvc exp run makes experiments)"]
    moved = differing([found[name] for name in compared])
    if not moved:
        return [f"{', '.join(compared)}: every parameter and metric the same"]

    def cell(value: Any, width: int, keep_end: bool = False) -> str:
        """The value in width - 1 characters and a space; a longer one cut, with ~ where (its end for a key)."""
        text = "-" if value is None else f"{value:.5g}" if isinstance(value, float) else str(value)
        if len(text) >= width:
            text = "~" + text[-(width - 2):] if keep_end else text[: width - 2] + "~"
        return text.ljust(width)

    lines = [cell("", KEY_WIDTH) + "".join(cell(name, VALUE_WIDTH) for name in compared)]
    lines += [cell(key, KEY_WIDTH, keep_end=True) + "".join(cell(found[name].get(key), VALUE_WIDTH)
                                                             for name in compared) for key in moved]
    return [line.rstrip() for line in lines]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if any(arg in ("-h", "--help") for arg in argv):
        print(__doc__.strip())
        return 0
    try:
        done = subprocess.run(["dvc", "exp", "show", "--json", "--no-pager", *argv], capture_output=True, text=True)
        if done.returncode:
            reason = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise ToksError(f"dvc exp show failed: {reason}")
        shown = json.loads(done.stdout)
    except (OSError, ValueError) as error:
        print(f"experiments: dvc exp show gave no table ({type(error).__name__})", file=sys.stderr)
        return 2
    except ToksError as error:
        print(f"experiments: {error}", file=sys.stderr)
        return 2
    print("\n".join(narrowed(shown)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
