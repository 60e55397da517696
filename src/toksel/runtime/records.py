"""Run records: what a stage's MLflow runs will show, written among the stage's own outputs.

A stage never opens MLflow. Each of its runs (per seed, and nested in one per trial, control or phase cell) is a
RunRecord: name, tags, effective parameters, metrics with their steps, and its artifacts with their SHA-256. The
stage writes them to one JSON file under runs/, a DVC output apart from the results later stages read, so that a
rerun with the same numbers but other timings changes nothing downstream. `python -m toksel.publish` shows them.
"""

from __future__ import annotations

import functools
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from toksel.runtime.errors import Terminated
from toksel.runtime.io import file_sha256, write_json
from toksel.runtime.paths import project_root

TELEMETRY = frozenset({"seconds", "peak_memory_mb"})  # how the run went, not what it found: kept out of results
TRIAL_TAG = "toksel.trial"  # on a nested run: which trial of its stage's run it is ("lr 0.001", "control: ...")
Recorded = list[tuple[Path, dict[str, Any]]]  # (path, metrics) of every record_metrics of a stage


def peak_memory_mb() -> float:
    """This process's peak resident memory in MiB: VmHWM on Linux (ru_maxrss would count a parent that forked it)."""
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024  # bytes on macOS, KiB elsewhere


@functools.cache  # asked by every run a process opens: git runs once
def git_sha() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
                              cwd=project_root()).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def source_tags(stage: str) -> dict[str, str]:
    """MLflow's tags for where a run comes from, and the DVC experiment's name under `dvc exp run`."""
    tags = {"git_sha": git_sha(), "mlflow.source.git.commit": git_sha(), "mlflow.source.name": f"pipelines/{stage}.py",
            "mlflow.source.type": "LOCAL"}
    if os.environ.get("DVC_EXP_NAME"):
        tags["dvc.experiment"] = os.environ["DVC_EXP_NAME"]
    return tags


def without_telemetry(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """The metrics but the TELEMETRY names, at every depth (a prepare's draws, a phase row's cells)."""
    return {name: without_telemetry(value) if isinstance(value, Mapping) else value
            for name, value in metrics.items() if name not in TELEMETRY}


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def differing(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The keys whose values differ among the rows (a row lacking one counts as differing), in order of appearance."""
    keys = dict.fromkeys(key for row in rows for key in row)
    return [key for key in keys if len({json.dumps(row.get(key), sort_keys=True, default=str) for row in rows}) > 1]


class RunRecord:
    """One run to show: metrics, histories, artifacts and nested runs are recorded here."""

    def __init__(self, name: str, tags: Mapping[str, str], params: Mapping[str, Any] | None = None,
                 recorded: Recorded | None = None) -> None:
        self.name, self.tags = name, dict(tags)
        self.params = {key: str(value) for key, value in (params or {}).items()}
        self.metrics: dict[str, list[list[float]]] = {}  # name -> [[step, value, time in ms], ...]
        self.artifacts: list[dict[str, str | None]] = []
        self.inputs: list[dict[str, str]] = []  # datasets read: name, digest, source
        self.children: list[RunRecord] = []
        self.status, self.started, self.ended = "RUNNING", time.time(), None
        self.recorded = [] if recorded is None else recorded  # shared by the runs of one stage
        self.label = name  # what the console calls it: its own name after its parents'
        self.written: Path | None = None  # the last metrics file it wrote
        self.outcome = ""  # what it found, in words, for the console's line (a stage's verdict counts)

    def record_metrics(self, path: Path, metrics: Mapping[str, Any], logged: Iterable[str] = ()) -> None:
        """Write `metrics` but the telemetry to `path` (for DVC and later stages) and record them all with the peak
        memory so far; names in `logged` already ended their history on these values."""
        results = without_telemetry(metrics)
        write_json(path, results)
        self.written = Path(path)
        self.recorded.append((Path(path), results))
        logged = set(logged)
        self.log_metrics({name: value for name, value in {**metrics, "peak_memory_mb": peak_memory_mb()}.items()
                          if name not in logged})

    def log_metrics(self, metrics: Mapping[str, Any], step: int = 0) -> None:
        """Numbers only: None and nested groups are left out (and, as in every history, NaN and inf)."""
        self.log_history([step], {name: [value] for name, value in metrics.items() if isinstance(value, int | float)})

    def log_history(self, steps: Sequence[int], series: Mapping[str, Sequence[float]]) -> None:
        """Per-step curves: one history per name, its finite points only (JSON's null is NaN or inf)."""
        now = int(time.time() * 1000)
        for name, values in series.items():
            points = [[int(step), float(value), now] for step, value in zip(steps, values, strict=True)
                      if np.isfinite(value)]
            if points:
                self.metrics.setdefault(name, []).extend(points)

    def log_artifact(self, path: Path | str, folder: str | None = None, pipeline: bool = False) -> None:
        """A file of the stage's outputs to show with the run (in `folder`; with the pipeline's run too if `pipeline`),
        and its SHA-256 now, so that the view shows these bytes or none."""
        self.artifacts.append({"path": str(path), "folder": folder, "sha256": file_sha256(path),
                               **({"pipeline": "yes"} if pipeline else {})})

    def set_tag(self, key: str, value: str) -> None:
        self.tags[key] = str(value)

    def log_params(self, params: Mapping[str, Any]) -> None:
        self.params.update((key, str(value)) for key, value in params.items())

    @contextmanager
    def run(self) -> Iterator[RunRecord]:
        """Ends the record FINISHED, or FAILED on an error, KILLED on a stop."""
        self.status = "FAILED"
        try:
            yield self
            self.status = "FINISHED"
        except Terminated:
            self.status = "KILLED"
            raise
        finally:
            self.ended = time.time()

    @contextmanager
    def child(self, name: str, tags: Mapping[str, str], params: Mapping[str, Any] | None = None) -> Iterator[RunRecord]:
        """A run nested under this one: this run's tags and parameters, with `tags`, TRIAL_TAG = name and its own
        values (`params`: a trial's rate, an arm, a cell's d) on top."""
        child = RunRecord(name, {**self.tags, **tags, TRIAL_TAG: name}, {**self.params, **(params or {})},
                          recorded=self.recorded)
        child.label = f"{self.label}, {name}"
        self.children.append(child)
        with child.run():
            yield child

    def detached(self) -> RunRecord:
        """A copy without what it recorded, for runs nested in it in another process, which `adopt` then takes in."""
        copy = RunRecord(self.name, self.tags, self.params, recorded=[])
        copy.label = self.label
        return copy

    def adopt(self, copy: RunRecord) -> None:
        """The runs nested in a detached copy of this one, with what they recorded."""
        self.children.extend(copy.children)
        self.recorded.extend(copy.recorded)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "started": self.started, "ended": self.ended,
                "tags": self.tags, "params": self.params, "metrics": self.metrics, "artifacts": self.artifacts,
                "inputs": self.inputs, "children": [child.as_dict() for child in self.children]}


def write_records(path: Path, records: list[RunRecord], pipeline: Mapping[str, str]) -> None:
    """A stage's records, with what they keep of the pipeline run (the params.yaml the stage read)."""
    write_json(path, {"format": 1, "pipeline": dict(pipeline), "runs": [record.as_dict() for record in records]})


def gathered_metrics(recorded: Iterable[tuple[Path, Mapping[str, Any]]], folder: Path) -> dict[str, Any]:
    """The metrics recorded inside `folder`, nested by subfolder (trained/seed0/metrics.json: trained.seed0)."""
    gathered: dict[str, Any] = {}
    for path, metrics in recorded:
        try:
            parts = path.parent.relative_to(folder).parts
        except ValueError:
            continue
        node = gathered
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1] if parts else path.stem] = dict(metrics)
    return gathered
