"""MLflow tracking: one run per stage, nested under one parent run per pipeline execution.

DVC starts each stage as its own process, so the stages of one `dvc repro` find their common parent run
through a pipeline key: $TOKSEL_PIPELINE_ID if set, else the id of the `dvc` process that started them (a
stage started by hand gets a parent of its own), named after the DVC experiment or `workspace <time>`. A stage
run is named for what it is (run_name), and carries the tags stage, git_sha, params_hash and, on one dataset,
dataset; the stage's flattened parameters, its metrics (the same as its metrics.json) and artifacts.

The store is $MLFLOW_TRACKING_URI, else the embedded sqlite:///<project root>/mlflow.db, reached through its
companion process (tracker.py), which opens it once for all the stages.

A stage killed outright (kill -9, a lost machine) cannot close its run; each run therefore carries its host and
process, and the next stage to start on that host marks such orphans KILLED. Under DDP only rank 0 holds a run:
the other processes (distributed.is_worker) log nothing.
"""

from __future__ import annotations

import functools
import math
import os
import re
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from toksel.config import Config, params_hash
from toksel.distributed import is_worker
from toksel.errors import Terminated, ToksError
from toksel.guarded import GuardedStore, limit_server_waits
from toksel.io import after_outputs, write_json
from toksel.paths import project_root, tracking_uri
from toksel.processes import Process
from toksel.tracker import open_store

EXPERIMENT = "toksel"
PIPELINE_KEY_TAG = "toksel.pipeline_key"
PARENT_TAG = "mlflow.parentRunId"
HOST_TAG, PROCESS_TAG = "toksel.host", "toksel.process"  # where a running stage lives: "<pid>-<start time>"
PIPELINE_ID = re.compile(r"[A-Za-z0-9._:-]+")
TRIAL_TAG = "toksel.trial"  # on a run nested under a stage's: which trial of it ("lr 0.001", "control: ...")
DVC_EXPERIMENT_TAG = "dvc.experiment"  # the name `dvc exp show` lists


def peak_memory_mb() -> float:
    """The peak resident memory of this process so far, in MiB.

    On Linux, VmHWM of /proc/self/status: it starts afresh when the process execs. ru_maxrss does not: a stage
    forked by a 3 GiB parent (dvc, a benchmark) would report at least 3 GiB.
    """
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024  # bytes on macOS, KiB elsewhere


def experiment_name() -> str:
    return os.environ.get("MLFLOW_EXPERIMENT_NAME") or EXPERIMENT


@functools.cache  # asked by every run a process opens (each seed, its parent): git runs once
def git_sha() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
                              cwd=project_root()).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _is_dvc(process: psutil.Process) -> bool:
    """`dvc ...`, `python .../bin/dvc ...` or `python -m dvc ...`."""
    try:
        return any(Path(word).name == "dvc" for word in process.cmdline()[:3])
    except psutil.Error:
        return False


def pipeline_key() -> str:
    """What the stages of one pipeline execution share: $TOKSEL_PIPELINE_ID, else their `dvc` process."""
    if os.environ.get("TOKSEL_PIPELINE_ID"):
        key = os.environ["TOKSEL_PIPELINE_ID"]
        if not PIPELINE_ID.fullmatch(key):  # it stands quoted in a search of the store
            raise ToksError(f"TOKSEL_PIPELINE_ID {key!r} may hold only letters, digits and . _ : -")
        return key
    process = psutil.Process()
    for ancestor in process.parents():
        if _is_dvc(ancestor):
            return f"dvc-{Process.of(ancestor.pid)}"
    return f"process-{Process.of(process.pid)}"


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


class StageRun:
    """The MLflow run of one stage execution: metrics, histories and artifacts go here."""

    def __init__(self, store: GuardedStore | _Silent, run_id: str | None, parent_id: str | None = None,
                 recorded: list[tuple[Path, dict[str, Any]]] | None = None) -> None:
        self.store, self.run_id, self.parent_id = store, run_id, parent_id
        # (path, metrics) of every record_metrics of this run and the runs nested under it
        self.recorded = [] if recorded is None else recorded

    def record_metrics(self, path: Path, metrics: Mapping[str, Any], logged: Iterable[str] = ()) -> None:
        """Write `metrics` to `path` (JSON, for DVC) and log the same numbers to MLflow, with the stage
        process's peak memory so far (`peak_memory_mb`).

        Names in `logged` already ended their MLflow history (log_history) on these final values.
        """
        metrics = {**metrics, "peak_memory_mb": peak_memory_mb()}
        write_json(path, metrics)
        self.recorded.append((Path(path), metrics))
        logged = set(logged)
        self.log_metrics({name: value for name, value in metrics.items() if name not in logged})

    def log_metrics(self, metrics: Mapping[str, float | None], step: int = 0) -> None:
        self._log_points((name, value, step) for name, value in metrics.items())

    def log_history(self, steps: np.ndarray, series: Mapping[str, np.ndarray]) -> None:
        """Per-step curves: one MLflow metric history per name."""
        self._log_points((name, value, int(step)) for name, values in series.items()
                         for step, value in zip(steps, values, strict=True))

    def log_artifact(self, path: Path | str, artifact_path: str | None = None) -> None:
        """Log a file the stage wrote, once it is in place (outputs first, then MLflow)."""
        after_outputs(lambda: self.store.log_artifact(self.run_id, str(path), artifact_path))

    def log_pipeline_artifact(self, path: Path | str) -> None:
        """An artifact of the pipeline's parent run (the report), as well as of this run."""
        self.log_artifact(path)
        if self.parent_id is not None:
            after_outputs(lambda: self.store.log_artifact(self.parent_id, str(path)))

    def set_tag(self, key: str, value: str) -> None:
        self.store.set_tag(self.run_id, key, value)

    def log_params(self, params: Mapping[str, Any]) -> None:
        self.store.log_batch(self.run_id, [], [[key, str(value)] for key, value in params.items()])

    @contextmanager
    def child(self, name: str, tags: Mapping[str, str]) -> Iterator[StageRun]:
        """A run nested under this one (a trial of a learning-rate grid, a control), closed FAILED on an error.

        It carries this run's tags (stage, dataset, seed, ...) with `tags` on top, and TRIAL_TAG = name."""
        if self.run_id is None:  # a DDP worker: nothing is logged
            yield self
            return
        info = self.store.run_info(self.run_id)
        inherited = {key: value for key, value in info["tags"].items() if not key.startswith("mlflow.")}
        run_id = self.store.create_run(info["experiment_id"], name,
                                       {**inherited, **tags, PARENT_TAG: self.run_id, TRIAL_TAG: name})
        status = "FAILED"
        try:
            yield StageRun(self.store, run_id, self.parent_id, self.recorded)
            status = "FINISHED"
        except Terminated:
            status = "KILLED"
            raise
        finally:
            self.store.set_terminated(run_id, status)

    def _log_points(self, points: Iterable[tuple[str, float | None, int]]) -> None:
        """(name, value, step) triples; None, NaN and inf are left out (JSON has them as null), and so are nested
        groups (a phase row's cells, which their own runs hold)."""
        now = int(time.time() * 1000)
        metrics = [[name, float(value), now, int(step)] for name, value, step in points
                   if isinstance(value, int | float) and math.isfinite(float(value))]
        for start in range(0, len(metrics), 1000):  # MLflow caps a batch at 1000 metrics
            self.store.log_batch(self.run_id, metrics[start : start + 1000], [])


def gathered_metrics(recorded: Iterable[tuple[Path, Mapping[str, Any]]], folder: Path) -> dict[str, Any]:
    """The metrics recorded (StageRun.recorded) inside `folder`, nested by their subfolders:
    folder/seed0/metrics.json -> {"seed0": {...}}, folder/trained/seed0/metrics.json -> {"trained": {"seed0": ...}}."""
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


def _experiment_id(store: GuardedStore) -> str:
    # With the embedded store, pin artifacts to the project root: a relative default would follow the working
    # directory, which `dvc exp run --temp` deletes afterwards. A server chooses its own artifact store.
    embedded = tracking_uri().startswith("sqlite:")
    return store.experiment_id(experiment_name(), (project_root() / "mlartifacts").as_uri() if embedded else None)


def _parent_run(store: GuardedStore, experiment_id: str, key: str) -> str:
    found = store.search_runs(experiment_id, f"tags.`{PIPELINE_KEY_TAG}` = '{key}'", 1)
    if found:
        store.set_status(found[0]["run_id"], "RUNNING")
        return found[0]["run_id"]
    # Named after the DVC experiment that runs it; else it is a run in the workspace (`dvc repro`, a stage by hand).
    name = os.environ.get("DVC_EXP_NAME") or f"workspace {time.strftime('%Y-%m-%d %H:%M:%S')}"
    run_id = store.create_run(experiment_id, name,
                              {PIPELINE_KEY_TAG: key, "stage": "pipeline", "git_sha": git_sha(),
                               **source_tags("pipeline")})
    _log_params_file(store, run_id)
    return run_id


def _log_params_file(store: GuardedStore, run_id: str) -> None:
    params_file = project_root() / "params.yaml"
    if params_file.exists():
        store.log_artifact(run_id, str(params_file))


def close_orphaned_runs(store: GuardedStore, experiment_id: str) -> list[str]:
    """Mark KILLED the RUNNING stage runs of this host whose process is gone, and then their parent when no stage
    of it still runs; returns the stage runs so closed."""
    host = socket.gethostname()
    running = store.search_runs(experiment_id, "attributes.status = 'RUNNING'", 1000)
    orphans = [run for run in running if run["tags"].get(HOST_TAG) == host and PROCESS_TAG in run["tags"]
               and not Process.parse(run["tags"][PROCESS_TAG]).running()]
    for run in orphans:
        store.set_terminated(run["run_id"], "KILLED")
    still_running = {run["tags"].get(PARENT_TAG) for run in running if run not in orphans}
    for parent in {run["tags"].get(PARENT_TAG) for run in orphans} - still_running - {None}:
        if store.run_info(parent)["status"] == "RUNNING":
            store.set_terminated(parent, "KILLED")
    return [run["run_id"] for run in orphans]


class _Silent:
    """A store that drops every call: the MLflow run of a DDP worker process, which rank 0 logs for."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


def source_tags(stage: str) -> dict[str, str]:
    """MLflow's own tags for where a run comes from (the git commit, the stage's module), and the DVC
    experiment's name when `dvc exp run` started it (DVC sets DVC_EXP_NAME)."""
    tags = {"mlflow.source.git.commit": git_sha(), "mlflow.source.name": f"pipelines/{stage}.py",
            "mlflow.source.type": "LOCAL"}
    if os.environ.get("DVC_EXP_NAME"):
        tags[DVC_EXPERIMENT_TAG] = os.environ["DVC_EXP_NAME"]
    return tags


def log_dataset(store: GuardedStore, run_id: str, config: Config) -> None:
    """The run's dataset as an MLflow dataset input: its name, a digest of its settings, where it comes from."""
    data = config.data
    source = data.hub_id if data.source == "hub" else f"synthetic ({data.synthetic.mode})"
    store.log_input(run_id, config.dataset, params_hash({"data": config.sections(["data"])}), source,
                    "training")


def run_name(stage: str, config: Config, per_dataset: bool, seeded: bool, variant: str | None = None) -> str:
    """What a run is, in words: `gradient_flow imdb seed 1`, `ablation yelp_polarity two_layer_kq seed 0`, `report`."""
    parts = [stage, config.dataset if per_dataset else None, variant, f"seed {config.seed}" if seeded else None]
    return " ".join(part for part in parts if part)


@contextmanager
def stage_run(stage: str, config: Config, sections: tuple[str, ...], seeded: bool = False,
              recorded: list[tuple[Path, dict[str, Any]]] | None = None, dataset_input: bool = False,
              per_dataset: bool = True, variant: str | None = None) -> Iterator[StageRun]:
    """Open the stage's MLflow run under the pipeline's parent run; close both, FAILED on an exception.

    seeded: the run is of one seed (config.seed), which tags it `seed`. recorded: where the run's record_metrics
    calls are kept (StageRun.recorded), shared by the runs of one process's seeds. dataset_input: the stage
    works on one dataset (config.dataset), logged as the run's input. per_dataset: the stage works on
    config.dataset, which tags it `dataset` (a stage over all datasets has no such tag). variant: what else tells
    this run from its siblings (an ablation's variant, a phase row's d), in its name."""
    if is_worker():
        yield StageRun(_Silent(), run_id=None, recorded=recorded)
        return
    store = _store(stage)
    experiment_id = _experiment_id(store)
    for orphan in close_orphaned_runs(store, experiment_id):
        print(f"{stage}: MLflow run {orphan} was left running by a process that is gone: marked KILLED",
              file=sys.stderr)
    parent_id = _parent_run(store, experiment_id, pipeline_key())
    resolved = config.sections(sections)
    tags = {PARENT_TAG: parent_id, "stage": stage, "git_sha": git_sha(), "params_hash": params_hash(resolved),
            HOST_TAG: socket.gethostname(), PROCESS_TAG: str(Process.current()), **source_tags(stage)}
    if per_dataset:
        tags["dataset"] = config.dataset
    if seeded:
        tags["seed"] = str(config.seed)
    run_id = store.create_run(experiment_id, run_name(stage, config, per_dataset, seeded, variant), tags)
    params = [[key, str(value)] for key, value in flatten(resolved).items()]
    if seeded:
        params.append(["seed", str(config.seed)])
    for start in range(0, len(params), 100):
        store.log_batch(run_id, [], params[start : start + 100])
    _log_params_file(store, run_id)
    if dataset_input:
        log_dataset(store, run_id, config)
    status = "FAILED"
    try:
        yield StageRun(store, run_id, parent_id, recorded)
        status = "FINISHED"
    except Terminated:
        status = "KILLED"
        raise
    finally:
        store.set_terminated(run_id, status)
        store.set_terminated(parent_id, status)


_stores: dict[str, GuardedStore] = {}


def _store(stage: str) -> GuardedStore:
    """The store of tracking_uri(), opened once per process (the seeds of a stage share it), guarded: a store
    that fails costs the stage a warning, not its results (guarded.py)."""
    uri = tracking_uri()
    if uri not in _stores:
        limit_server_waits()
        _stores[uri] = GuardedStore(uri, lambda: open_store(uri), stage)
    return _stores[uri]
