"""MLflow as a view of the run records that the stages write under runs/ (runtime/records.py).

`publish` shows each record as an MLflow run of the toksel experiment: a parent run per pipeline execution, its
stage runs under it, their trials, controls and cells under those (three levels). A run is known by what produced
it: RECORD_TAG holds the SHA-256 of its record (stage, dataset, variant, seed, parameters, metrics, the digests of
its artifacts, its times) and of its parent's. Hence, by construction:
- publishing twice is publishing once: a record whose run the store holds, ended, is left alone;
- a publisher killed midway leaves runs RUNNING, tagged with its process (PUBLISHER_TAG): the next publisher on that
  host deletes them once that process is gone (from another host, after STALE seconds) and makes them afresh;
- two publishers at once may both make a run for one record: each ends by keeping, for every record, the run that
  starts first (then the smaller id), deleting the others, and hanging every nested run under its parent record's
  kept run. All publishers choose alike, so the last one to finish leaves one run per record.
Nothing here runs inside a compute stage, and nothing is kept outside the store: the records are the truth, and a
store that fails costs this step alone.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toksel.runtime.errors import ToksError
from toksel.runtime.experiment import LIVE_PROCESS_TAG, LIVE_TAG, gone_from_this_host, open_experiment, this_process
from toksel.runtime.io import file_sha256, read_json

RECORD_TAG, PARENT_RECORD_TAG = "toksel.record", "toksel.parent_record"
PIPELINE_KEY_TAG = "toksel.pipeline_key"
PUBLISHER_TAG = "toksel.publisher"  # "<host> <pid>-<start time>" of the publisher making the run
PARENT_TAG = "mlflow.parentRunId"
STALE = 3600.0  # seconds after which a RUNNING run of another host's publisher is taken as abandoned
RECORDS = Path("runs")


@dataclass
class Spec:
    """One run to show: its record and where it hangs."""

    key: str
    record: dict[str, Any]
    pipeline: str
    parent_key: str | None
    texts: dict[str, str] = field(default_factory=dict)  # artifact name -> text (params.yaml)


@dataclass
class Published:
    runs: int = 0  # in the store, one per record
    records: int = 0  # of those, the stages' (not the parents': how many executions made the records varies)
    created: int = 0
    removed: int = 0  # unfinished or duplicate runs deleted
    skipped_artifacts: list[str] = field(default_factory=list)


def _digest(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def read_specs(root: Path = RECORDS) -> list[Spec]:
    """Every run to show, parents before children, from the record files under `root`."""
    by_pipeline: dict[str, list[tuple[dict, dict]]] = defaultdict(list)
    for path in sorted(root.rglob("[!.]*.json")) if root.is_dir() else []:
        content = read_json(path)  # checked against the folder's digests: a record edited by hand is refused
        try:
            pipeline, runs = content["pipeline"], content["runs"]
            by_pipeline[pipeline["key"]].extend((pipeline, run) for run in runs)
        except (ToksError, KeyError, TypeError) as error:
            raise ToksError(f"{path} is not a stage's run records ({type(error).__name__}): run the stage that "
                            "writes it again (dvc repro)") from None
    specs = []
    for pipeline_key, runs in by_pipeline.items():
        first = min(runs, key=lambda item: item[1]["started"])[0]
        parent_key = _digest("pipeline", pipeline_key)
        parent = {"name": first["name"], "status": "FINISHED", "params": {}, "metrics": {}, "artifacts": [],
                  "inputs": [], "started": min(run["started"] for _, run in runs),
                  "ended": max(run["ended"] for _, run in runs),
                  "tags": {"stage": "pipeline", **({"dvc.experiment": first["experiment"]} if first["experiment"]
                                                   else {})}}
        specs.append(Spec(parent_key, parent, pipeline_key, None, texts={"params.yaml": first["params_yaml"]}))
        for pipeline, run in runs:
            specs.extend(_tree(run, pipeline_key, parent_key, {"params.yaml": pipeline["params_yaml"]}))
    return specs


def _tree(run: dict, pipeline_key: str, parent_key: str, texts: dict[str, str]) -> Iterator[Spec]:
    own = {name: value for name, value in run.items() if name != "children"}
    key = _digest(parent_key, own)
    yield Spec(key, own, pipeline_key, parent_key, texts=texts)
    for child in run["children"]:
        yield from _tree(child, pipeline_key, key, {})


class Publisher:
    """Makes the runs of the specs in one MLflow store, as the module says."""

    def __init__(self, uri: str) -> None:
        self.uri, self.me = uri, this_process()
        self.client, self.experiment_id = open_experiment(uri)
        self.published = Published()

    def _runs(self, pipeline_key: str) -> dict[str, list]:
        """The store's runs of one pipeline execution, by record."""
        found, token = defaultdict(list), None
        while True:
            page = self.client.search_runs([self.experiment_id], f"tags.`{PIPELINE_KEY_TAG}` = '{pipeline_key}'",
                                           max_results=1000, page_token=token)
            for run in page:
                found[run.data.tags.get(RECORD_TAG)].append(run)
            token = page.token
            if not token:
                return found

    def publish(self, specs: list[Spec]) -> Published:
        for pipeline_key in dict.fromkeys(spec.pipeline for spec in specs):
            mine = [spec for spec in specs if spec.pipeline == pipeline_key]
            existing = self._runs(pipeline_key)
            made: dict[str, str] = {}
            for spec in mine:
                ended = _ended(run for run in existing.get(spec.key, []) if not self._remove_if_abandoned(run))
                made[spec.key] = ended[0].info.run_id if ended else self._create(spec, made.get(spec.parent_key))
            self._reconcile(pipeline_key, mine)
        self._remove_dead_live_runs()
        return self.published

    def _remove_dead_live_runs(self) -> None:
        """Live runs no record will complete: their fit's process, on this host, is gone and they were never
        completed (their stage died first; its rerun makes its own)."""
        for run in self.client.search_runs([self.experiment_id], f"tags.`{LIVE_TAG}` != ''", max_results=1000):
            if RECORD_TAG not in run.data.tags and gone_from_this_host(run.data.tags.get(LIVE_PROCESS_TAG, "")):
                self._unless_gone(self.client.delete_run, run.info.run_id)
                self.published.removed += 1

    def _remove_if_abandoned(self, run: Any) -> bool:
        """Delete `run` if a publisher left it unfinished: its process, on this host, is gone (on another, it is
        older than STALE)."""
        if run.info.status != "RUNNING":
            return False
        gone = gone_from_this_host(run.data.tags.get(PUBLISHER_TAG, ""))
        if not (time.time() - run.info.start_time / 1000 > STALE if gone is None else gone):
            return False
        self._unless_gone(self.client.delete_run, run.info.run_id)
        self.published.removed += 1
        return True

    def _live_run(self, key: str | None) -> Any:
        """The run a fit's live logger made (runtime/live.py), if any."""
        found = [] if key is None else self.client.search_runs(
            [self.experiment_id], f"tags.`{LIVE_TAG}` = '{key}'", max_results=1)
        return found[0] if found else None

    def _create(self, spec: Spec, parent_id: str | None) -> str:
        """The record's run: made, or, where the fit sent its curves live, that run completed (its curves kept)."""
        from mlflow.entities import Dataset, DatasetInput, InputTag, Metric, Param, RunTag

        record = spec.record
        tags = {**record["tags"], RECORD_TAG: spec.key, PIPELINE_KEY_TAG: spec.pipeline, PUBLISHER_TAG: self.me,
                **({PARENT_TAG: parent_id, PARENT_RECORD_TAG: spec.parent_key} if parent_id else {})}
        live = self._live_run(record["tags"].get(LIVE_TAG))
        if live is None:
            run_id, have = self.client.create_run(self.experiment_id, start_time=int(record["started"] * 1000),
                                                  tags=tags, run_name=record["name"]).info.run_id, None
        else:  # unfinished until completed: a kill midway leaves it to the next publisher, as a made run
            run_id, have = live.info.run_id, live.data
            self.client.update_run(run_id, status="RUNNING", name=record["name"])
            self.client.log_batch(run_id, tags=[RunTag(key, value) for key, value in tags.items()])
        params = [Param(key, value) for key, value in record["params"].items() if not have or key not in have.params]
        metrics = [Metric(name, value, stamp, step) for name, points in record["metrics"].items()
                   if not have or name not in have.metrics for step, value, stamp in points]
        for start in range(0, len(params), 100):  # MLflow takes 100 params, 1000 metrics a call
            self.client.log_batch(run_id, params=params[start : start + 100])
        for start in range(0, len(metrics), 1000):
            self.client.log_batch(run_id, metrics=metrics[start : start + 1000])
        for dataset in record["inputs"]:
            self.client.log_inputs(run_id, [DatasetInput(Dataset(dataset["name"], dataset["digest"], "toksel",
                                                                 dataset["source"]),
                                                         [InputTag("mlflow.data.context", "training")])])
        for artifact in record["artifacts"]:
            path = Path(artifact["path"])
            if not path.is_file() or file_sha256(path) != artifact["sha256"]:  # not the bytes the stage wrote
                self.published.skipped_artifacts.append(str(path))
                continue
            self.client.log_artifact(run_id, str(path), artifact["folder"])
            if artifact.get("pipeline") and parent_id is not None:  # the report: the parent run shows it too
                self.client.log_artifact(parent_id, str(path))
        for name, text in spec.texts.items():
            if text:
                self.client.log_text(run_id, text, name)
        self.client.set_terminated(run_id, record["status"], end_time=int((record["ended"] or time.time()) * 1000))
        self.published.created += 1
        return run_id

    def _unless_gone(self, call: Any, run_id: str, *args: str) -> None:
        """`call(run_id, *args)`, unless another publisher has deleted the run meanwhile (it chose alike)."""
        from mlflow.exceptions import MlflowException

        try:
            call(run_id, *args)
        except MlflowException as error:
            if "must be in the 'active' state" not in str(error):
                raise

    def _reconcile(self, pipeline_key: str, specs: list[Spec]) -> None:
        """One run per record: the first of each kept, the others deleted, every nested run under its parent
        record's kept run."""
        existing = self._runs(pipeline_key)
        kept = {}
        for key, runs in existing.items():
            ended = _ended(runs)
            if ended and key is not None:
                kept[key] = ended[0]
                for duplicate in ended[1:]:
                    self._unless_gone(self.client.delete_run, duplicate.info.run_id)
                    self.published.removed += 1
        for run in kept.values():
            parent = kept.get(run.data.tags.get(PARENT_RECORD_TAG))
            if parent is not None and run.data.tags.get(PARENT_TAG) != parent.info.run_id:
                self._unless_gone(self.client.set_tag, run.info.run_id, PARENT_TAG, parent.info.run_id)
        self.published.runs += sum(spec.key in kept for spec in specs)
        self.published.records += sum(spec.key in kept for spec in specs if spec.parent_key is not None)


def _ended(runs: Iterable[Any]) -> list[Any]:
    """The runs no publisher is still making, the one that started first (then the smaller id) first: the one kept."""
    return sorted((run for run in runs if run.info.status != "RUNNING"),
                  key=lambda run: (run.info.start_time, run.info.run_id))
