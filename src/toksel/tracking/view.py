"""MLflow as a view of the run records that the stages write under runs/ (runtime/records.py).

`publish` shows each record as an MLflow run of the toksel experiment: a parent run per pipeline execution, its
stage runs under it, their trials, controls and cells under those. A run is known by its record: RECORD_TAG holds
the SHA-256 of the record and of its parent's. Under the store's lock (runtime/experiment.py), publishing keeps the
finished run of each record, makes the missing ones (parents first) and deletes every other run of those
executions (one no record backs, one left unfinished by a killed publisher, one made twice): publishing twice is
publishing once, and a rerun after a failure finishes the job. A store that fails costs this step alone.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toksel.runtime.errors import ToksError
from toksel.runtime.experiment import open_experiment, store_lock
from toksel.runtime.io import file_sha256, read_json

RECORD_TAG, PARENT_RECORD_TAG = "toksel.record", "toksel.parent_record"
PIPELINE_KEY_TAG = "toksel.pipeline_key"
PARENT_TAG = "mlflow.parentRunId"
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
    removed: int = 0  # runs no record backs, unfinished or made twice, deleted
    skipped_artifacts: list[str] = field(default_factory=list)


def _digest(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def read_specs(root: Path = RECORDS) -> list[Spec]:
    """Every run to show, parents before children, from the record files under `root`."""
    by_pipeline: dict[str, list[tuple[dict, dict]]] = defaultdict(list)
    for path in sorted(root.rglob("[!.]*.json")) if root.is_dir() else []:
        content = read_json(path)
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
    """Rebuilds, in one MLflow store, the view of the specs' pipeline executions, as the module says."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        with store_lock(uri):
            self.client, self.experiment_id = open_experiment(uri)
        self.published = Published()

    def _runs(self, pipeline_key: str) -> list[Any]:
        """The store's runs of one pipeline execution."""
        found, token = [], None
        while True:
            page = self.client.search_runs([self.experiment_id], f"tags.`{PIPELINE_KEY_TAG}` = '{pipeline_key}'",
                                           max_results=1000, page_token=token)
            found.extend(page)
            token = page.token
            if not token:
                return found

    def publish(self, specs: list[Spec]) -> Published:
        with store_lock(self.uri):
            for pipeline_key in dict.fromkeys(spec.pipeline for spec in specs):
                self._rebuild([spec for spec in specs if spec.pipeline == pipeline_key])
        return self.published

    def _rebuild(self, specs: list[Spec]) -> None:
        kept: dict[str, str] = {}  # record key -> run id
        for run in sorted(self._runs(specs[0].pipeline), key=lambda run: (run.info.start_time, run.info.run_id)):
            key = run.data.tags.get(RECORD_TAG)
            if run.info.status == "RUNNING" or key in kept:
                self.client.delete_run(run.info.run_id)
                self.published.removed += 1
            else:
                kept[key] = run.info.run_id
        wanted = {spec.key for spec in specs}
        for key in [key for key in kept if key not in wanted]:
            self.client.delete_run(kept.pop(key))
            self.published.removed += 1
        for spec in specs:  # parents first
            if spec.key not in kept:
                kept[spec.key] = self._create(spec, kept.get(spec.parent_key))
        self.published.runs += len(specs)
        self.published.records += sum(spec.parent_key is not None for spec in specs)

    def _create(self, spec: Spec, parent_id: str | None) -> str:
        """The record's run, RUNNING until all of it is logged (a kill midway leaves it to the next publisher)."""
        from mlflow.entities import Dataset, DatasetInput, InputTag, Metric, Param

        record = spec.record
        tags = {**record["tags"], RECORD_TAG: spec.key, PIPELINE_KEY_TAG: spec.pipeline,
                **({PARENT_TAG: parent_id, PARENT_RECORD_TAG: spec.parent_key} if parent_id else {})}
        run_id = self.client.create_run(self.experiment_id, start_time=int(record["started"] * 1000), tags=tags,
                                        run_name=record["name"]).info.run_id
        params = [Param(key, value) for key, value in record["params"].items()]
        metrics = [Metric(name, value, stamp, step) for name, points in record["metrics"].items()
                   for step, value, stamp in points]
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
        self.client.set_terminated(run_id, record["status"], end_time=int(record["ended"] * 1000)
                                   if record["ended"] else None)
        self.published.created += 1
        return run_id
