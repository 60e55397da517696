"""MLflow as a view of the run records the stages write under runs/ (runtime/records.py).

`publish` shows the records as one pipeline run (current_pipeline): a DVC experiment, or the workspace at its
params.yaml's values. Its parent run carries those values (CHANGED_TAG names the ones that differ from the commit's)
and the report's numbers, so that two experiments' parents compare; under it hangs a run per stage (and seed), named
with the pipeline's name so that overlaid runs tell apart, and under those their trials, controls and cells (deeper
runs hang beside their parent). A run is known by the SHA-256 of its record (RECORD_TAG). Under the store's lock,
publish keeps the finished run of each record, makes the missing ones and deletes every other run of the pipeline
(unbacked, unfinished or made twice): publishing twice is publishing once, and a rerun finishes a failed one.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toksel.runtime.config import params_values
from toksel.runtime.errors import ToksError
from toksel.runtime.experiment import open_experiment, store_lock
from toksel.runtime.io import file_sha256, read_json
from toksel.runtime.records import differing, flatten
from toksel.tracking.saved_views import save_views

RECORD_TAG, PARENT_RECORD_TAG = "toksel.record", "toksel.parent_record"
PIPELINE_KEY_TAG = "toksel.pipeline_key"
CHANGED_TAG = "toksel.changed"  # on the parent: the keys whose values differ from the commit's
TAG_LENGTH = 5000  # characters: MLflow keeps 8000 of a tag's value
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
    records: int = 0  # of those, the stages' (not the parents')
    created: int = 0
    removed: int = 0
    skipped_artifacts: list[str] = field(default_factory=list)


def _digest(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class Pipeline:
    """The pipeline run the records make up: a DVC experiment, or the workspace at its values."""
    key: str
    name: str
    experiment: str  # the DVC experiment's name; "" for the workspace
    params_yaml: str
    values: dict[str, str]  # params.yaml's values, flattened
    changed: tuple[str, ...]  # the keys whose values differ from the commit's (none without git)


def _committed_values(path: Path) -> dict[str, Any] | None:
    """params.yaml's values at HEAD, flattened; None without git or a committed file that reads."""
    try:
        text = subprocess.run(["git", "show", f"HEAD:{path.as_posix()}"], capture_output=True, text=True,
                              check=True).stdout
        return flatten(params_values(path, text))
    except (OSError, subprocess.CalledProcessError, ToksError):
        return None


def current_pipeline(path: Path = Path("params.yaml")) -> Pipeline:
    """The DVC experiment being run (DVC_EXP_NAME), else the workspace named by its values' digest: the same values
    show under the same parent, changed ones under a new one."""
    values = flatten(params_values(path)) if path.is_file() else {}
    committed = _committed_values(path)
    changed = () if committed is None else tuple(key for key, value in values.items()
                                                 if key not in committed or committed[key] != value)
    experiment, digest = os.environ.get("DVC_EXP_NAME", ""), _digest(values)[:8]
    return Pipeline(f"experiment {experiment}" if experiment else f"workspace {digest}",
                    experiment or f"workspace ({values.get('profile', '?')}) {digest}", experiment,
                    path.read_text() if path.is_file() else "", {key: str(value) for key, value in values.items()},
                    changed)


def read_specs(pipeline: Pipeline, root: Path = RECORDS) -> list[Spec]:
    """Every run to show, parents before children, from the record files under `root`."""
    tops: list[tuple[dict, str]] = []  # each stage run's record, with the params.yaml its stage read
    for path in sorted(root.rglob("[!.]*.json")) if root.is_dir() else []:
        content = read_json(path)
        try:
            params_yaml, runs = content["pipeline"]["params_yaml"], content["runs"]
            tops.extend((run, params_yaml) for run in runs)
        except (ToksError, KeyError, TypeError) as error:
            raise ToksError(f"{path} is not a stage's run records ({type(error).__name__}): run the stage that "
                            "writes it again (dvc repro)") from None
    if not tops:
        return []
    report = next((run for run, _ in tops if run["tags"].get("stage") == "report"), None)
    changed = ", ".join(pipeline.changed)
    changed = changed if len(changed) <= TAG_LENGTH else "(too many to list)"
    parent = {"name": pipeline.name, "status": "FINISHED", "params": pipeline.values, "artifacts": [], "inputs": [],
              # the report's numbers: verdict counts and each claim's value (claim.<id>.<dataset>)
              "metrics": {name: points[-1:] for name, points in report["metrics"].items()} if report else {},
              "tags": {"stage": "pipeline", CHANGED_TAG: changed,
                       **({"dvc.experiment": pipeline.experiment} if pipeline.experiment else {})}}
    # The parent is made anew when its values or numbers change; the runs under it are known by the pipeline run.
    root = _digest("pipeline", pipeline.key)
    parent_key = _digest(root, parent)
    parent.update(started=min(run["started"] for run, _ in tops), ended=max(run["ended"] for run, _ in tops))
    specs = [Spec(parent_key, parent, pipeline.key, None, texts={"params.yaml": pipeline.params_yaml})]
    for run, params_yaml in tops:
        specs.extend(_tree(run, pipeline, root, parent_key, {"params.yaml": params_yaml}))
    return specs


def _tree(run: dict, pipeline: Pipeline, root: str, parent_key: str, texts: dict[str, str], depth: int = 1,
          prefix: str = "") -> Iterator[Spec]:
    """The run and those nested in it; below depth 2 they hang beside their parent, named after it."""
    own = {name: value for name, value in run.items() if name != "children"}
    own["name"] = prefix + own["name"] + (f" [{pipeline.name}]" if depth == 1 else "")
    key = _digest(root, own)
    yield Spec(key, own, pipeline.key, parent_key, texts=texts)
    for child in run["children"]:
        if depth < 2:
            yield from _tree(child, pipeline, key, key, {}, depth + 1)
        else:
            yield from _tree(child, pipeline, parent_key, parent_key, {}, depth, prefix=f"{own['name']}, ")


class Publisher:
    """Rebuilds, in one MLflow store, the view of a pipeline run's specs, as the module says."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        with store_lock(uri):
            self.client, self.experiment_id = open_experiment(uri)
        self.published = Published()

    def _runs(self, tag: str, value: str) -> list[Any]:
        """The store's runs whose tag `tag` is `value`, every page."""
        found, token = [], None
        while True:
            page = self.client.search_runs([self.experiment_id], f"tags.`{tag}` = '{value}'", max_results=1000,
                                           page_token=token)
            found.extend(page)
            if not (token := page.token):
                return found

    def publish(self, specs: list[Spec]) -> Published:
        if specs:
            with store_lock(self.uri):
                self._rebuild(specs)
                # The pipelines' view shows the values that differ among the parents that carry every value
                # (CHANGED_TAG marks them; an older publisher's carry only their changed ones), or this one's changed.
                parents = [run.data.params for run in self._runs("stage", "pipeline") if CHANGED_TAG in run.data.tags]
                own = specs[0].record
                changed = [key for key in own["tags"][CHANGED_TAG].split(", ") if key in own["params"]]
                save_views(self.client, self.experiment_id, differing(parents) if len(parents) > 1 else changed,
                           PIPELINE_KEY_TAG)
        return self.published

    def _rebuild(self, specs: list[Spec]) -> None:
        kept: dict[str, str] = {}  # record key -> run id
        runs = self._runs(PIPELINE_KEY_TAG, specs[0].pipeline)
        wanted = {spec.key for spec in specs}
        for run in sorted(runs, key=lambda run: (run.info.start_time, run.info.run_id)):
            key = run.data.tags.get(RECORD_TAG)
            if run.info.status == "RUNNING" or key in kept or key not in wanted:
                self.client.delete_run(run.info.run_id)
                self.published.removed += 1
            else:
                kept[key] = run.info.run_id
        made = set()
        for spec in specs:  # parents first
            if spec.key not in kept:
                kept[spec.key] = self._create(spec, kept.get(spec.parent_key))
                made.add(spec.key)
            elif spec.parent_key in made:  # a run kept under a parent made anew
                self.client.set_tag(kept[spec.key], PARENT_TAG, kept[spec.parent_key])
                self.client.set_tag(kept[spec.key], PARENT_RECORD_TAG, spec.parent_key)
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
        for data in record["inputs"]:
            dataset = Dataset(data["name"], data["digest"], "toksel", data["source"])
            self.client.log_inputs(run_id, [DatasetInput(dataset, [InputTag("mlflow.data.context", "training")])])
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
