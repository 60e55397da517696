"""MLflow as a view of the run records the stages write under runs/ (runtime/records.py).

`publish` shows the records as one pipeline run (current_pipeline): a DVC experiment, or the workspace at its
params.yaml's values. Its parent run carries those values (CHANGED_TAG names the ones that differ from the commit's),
the report's numbers and files, and as its description the report's headline with links to the report, so that two
experiments' parents compare; under it hangs a run per stage (and seed), and under those their trials, controls and
cells (deeper runs hang beside their parent). Every run is named by its whole path below the pipeline and the
pipeline's name (`train imdb seed 0, trained seed 0, lr 0.01 (kept) [eta0-50]`), so that no two runs share a name.
A run is known by the SHA-256 of its record (RECORD_TAG). Under the store's lock, publish keeps the finished run of
each record, makes the missing ones and deletes every other run of the pipeline (unbacked, unfinished or made twice):
publishing twice is publishing once, and a rerun finishes a failed one.

The parent's start and end are its pipeline run's. The records cannot tell them: DVC's run cache restores a stage's
records with the times of the run that made them, an hour or a week before. DVC can: it gives each stage's command
DVC_STAGE, which the DVC process itself (`dvc repro`, `dvc exp run`, a queued experiment's `dvc exp exec-run`) lacks,
so the nearest ancestor of publish without it is the pipeline run, and its start is the run's; publish is the last
stage, so its own time is the end. Run by hand, publish has no pipeline run around it, and the parent spans the
records. The points of a metric keep the times the stage logged them: the stages log a curve at once (a flow's whole
trajectory), and MLflow's time axes would draw it as one vertical line, so the saved views open charts on the step
(saved_views.py) and a run whose history has steps says in its description what they are (STEP_MEANINGS).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from toksel.runtime.config import params_values
from toksel.runtime.errors import ToksError
from toksel.runtime.io import file_sha256, read_json
from toksel.runtime.records import differing, flatten
from toksel.tracking.experiment import open_experiment, store_lock
from toksel.tracking.saved_views import save_views

RECORD_TAG, PARENT_RECORD_TAG = "toksel.record", "toksel.parent_record"
PIPELINE_KEY_TAG = "toksel.pipeline_key"
CHANGED_TAG = "toksel.changed"  # on the parent: the keys whose values differ from the commit's
TAG_LENGTH = 5000  # characters: MLflow keeps 8000 of a tag's value
PARENT_TAG = "mlflow.parentRunId"
NOTE_TAG = "mlflow.note.content"  # a run's description, which MLflow shows as Markdown atop its page
RUN_PAGE, RUN_ID = "{run page}", "{run id}"  # in a description: the run's address and id, once it has them
HEADLINE_LENGTH = 3000  # characters of the report's first paragraph in the parent's description
RECORDS = Path("runs")
PER_BATCH, ENTRIES_PER_BATCH = 100, 1000  # MLflow's log_batch: params (and tags) a call, entries in all
# What the steps of a stage's histories are (MLflow's chart axis says "Step"), by stage.
STEP_MEANINGS = {
    "gradient_flow": "The curves are drawn against step = 100 log10 t, t the flow time (step 300 is t = 1e3, step "
                     "1000 is t = 1e10), so that flows of other horizons line up; t = 0 is in history.csv.",
}
EPOCH_CURVES = "The epoch_ curves are drawn against the epoch, Lightning's own (val_loss, ...) against its step."


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
    not_shown: dict[str, str] = field(default_factory=dict)  # an artifact's path -> why it is not shown


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
    began: float | None = None  # when the DVC command running this publish began; None by hand


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
                    changed, dvc_started())


def dvc_started() -> float | None:
    """When the DVC command that runs this process as a stage began: its nearest ancestor without DVC_STAGE, which
    DVC sets for a stage's command alone (the module says why). None outside DVC, or where the system hides it."""
    if "DVC_STAGE" not in os.environ:
        return None
    try:
        return next((process.create_time() for process in psutil.Process().parents()
                     if "DVC_STAGE" not in process.environ()), None)
    except psutil.Error:
        return None


def why_not_shown(artifact: dict[str, Any]) -> str | None:
    """Why an artifact of a record is not shown, or None: a file outside the project (the working directory) is
    never read, whatever its record says; one changed since its stage wrote it is not the stage's. Outside is
    judged on the path as written, its `..` resolved: DVC may link an output to a cache kept elsewhere."""
    path = Path(artifact["path"])
    if not Path(os.path.abspath(path)).is_relative_to(os.getcwd()):
        return "lies outside the project"
    if not path.is_file() or file_sha256(path) != artifact["sha256"]:
        return "has changed since its stage wrote it"
    return None


def _headline(artifacts: list[dict[str, Any]]) -> str:
    """The report's title and first paragraph (its verdict), from its Markdown as the stage wrote it, else ""."""
    for artifact in artifacts:
        path = Path(artifact["path"])
        if path.suffix == ".md" and why_not_shown(artifact) is None:
            blocks = [block.strip() for block in path.read_text().split("\n\n") if block.strip()]
            title = [f"**{block.lstrip('# ')}**" for block in blocks[:1] if block.startswith("# ")]
            text = next((block for block in blocks if not block.startswith("#")), "")
            cut = text if len(text) <= HEADLINE_LENGTH else text[:HEADLINE_LENGTH].rsplit(" ", 1)[0] + " ..."
            return "\n\n".join([*title, cut, ""])
    return ""


def _report_note(artifacts: list[dict[str, Any]]) -> str:
    """The parent's description: the report's headline, and links to its files in the artifact pane and to
    report.html's download. MLflow previews an HTML file once it has loaded it whole (seconds for the report's
    megabytes of embedded figures: blank until then); downloaded and opened, it draws at once."""
    names = [Path(artifact["path"]).name for artifact in artifacts]
    links = [f"[{name}]({RUN_PAGE}/artifacts/{name})" for name in names]
    links += [f"[download {name}](get-artifact?path={name}&run_uuid={RUN_ID})" for name in names
              if name.endswith(".html")]
    return _headline(artifacts) + "The report: " + " · ".join(links)


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
    # the report's files the stage marked for the pipeline's run (report.md, report.html), at the top of its artifacts
    shown = [{**artifact, "folder": None} for artifact in (report["artifacts"] if report else [])
             if artifact.get("pipeline")]
    parent = {"name": pipeline.name, "status": "FINISHED", "params": pipeline.values, "artifacts": shown,
              "inputs": [],
              # the report's numbers: verdict counts and each claim's value (claim.<id>.<dataset>)
              "metrics": {name: points[-1:] for name, points in report["metrics"].items()} if report else {},
              "tags": {"stage": "pipeline", CHANGED_TAG: changed,
                       **({NOTE_TAG: _report_note(shown)} if shown else {}),
                       **({"dvc.experiment": pipeline.experiment} if pipeline.experiment else {})}}
    # The parent is made anew when its values or numbers change; the runs under it are known by the pipeline run.
    root = _digest("pipeline", pipeline.key)
    parent_key = _digest(root, parent)
    if pipeline.began is not None:  # under DVC: its pipeline run, of which publish is the last stage
        parent.update(started=pipeline.began, ended=time.time())
    else:  # by hand: the records' span (one restored from DVC's run cache counts from when it was made)
        parent.update(started=min(run["started"] for run, _ in tops), ended=max(run["ended"] for run, _ in tops))
    specs = [Spec(parent_key, parent, pipeline.key, None, texts={"params.yaml": pipeline.params_yaml})]
    names: set[str] = set()
    for run, params_yaml in tops:
        specs.extend(_tree(run, pipeline, root, parent_key, {"params.yaml": params_yaml}, names))
    return specs


def _step_note(run: dict[str, Any]) -> str:
    """What the steps of a run's histories are, if it has one (a metric logged at more than one step)."""
    histories = [name for name, points in run["metrics"].items() if len({point[0] for point in points}) > 1]
    if not histories:
        return ""
    epochs = EPOCH_CURVES if any(name.startswith("epoch_") for name in histories) else ""
    return " ".join(filter(None, [STEP_MEANINGS.get(run["tags"].get("stage", ""), ""), epochs]))


def _tree(run: dict, pipeline: Pipeline, root: str, parent_key: str, texts: dict[str, str], names: set[str],
          depth: int = 1, path: str = "") -> Iterator[Spec]:
    """The run and those nested in it (below depth 2 they hang beside their parent), each named by its path below
    the pipeline and the pipeline's name: a name that says what the run is in a chart or table without its parents,
    and unique in the pipeline (`names`: those taken; a repeated one is numbered)."""
    own = {name: value for name, value in run.items() if name != "children"}
    path = f"{path}, {own['name']}" if path else own["name"]
    own["name"], number = f"{path} [{pipeline.name}]", 1
    while own["name"] in names:
        number += 1
        own["name"] = f"{path} ({number}) [{pipeline.name}]"
    names.add(own["name"])
    if note := _step_note(own):
        own["tags"] = {**own["tags"], NOTE_TAG: note}
    key = _digest(root, own)
    yield Spec(key, own, pipeline.key, parent_key, texts=texts)
    for child in run["children"]:
        if depth < 2:
            yield from _tree(child, pipeline, key, key, {}, names, depth + 1, path)
        else:
            yield from _tree(child, pipeline, parent_key, parent_key, {}, names, depth, path)


def _batches(params: list[Any], metrics: list[Any], tags: list[Any]) -> Iterator[dict[str, list[Any]]]:
    """Params, metrics and tags in as few of MLflow's log_batch calls as it takes: a call holds at most 100 params,
    100 tags and 1000 entries in all (each call one request to a server)."""
    while params or metrics or tags:
        batch = {"params": params[:PER_BATCH], "tags": tags[:PER_BATCH]}
        batch["metrics"] = metrics[: ENTRIES_PER_BATCH - len(batch["params"]) - len(batch["tags"])]
        params, tags, metrics = params[PER_BATCH:], tags[PER_BATCH:], metrics[len(batch["metrics"]) :]
        yield batch


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
        from mlflow.entities import RunTag

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
                self.client.log_batch(kept[spec.key], tags=[RunTag(PARENT_TAG, kept[spec.parent_key]),
                                                            RunTag(PARENT_RECORD_TAG, spec.parent_key)])
        self.published.runs += len(specs)
        self.published.records += sum(spec.parent_key is not None for spec in specs)

    def _create(self, spec: Spec, parent_id: str | None) -> str:
        """The record's run, RUNNING until all of it is logged (a kill midway leaves it to the next publisher)."""
        from mlflow.entities import Dataset, DatasetInput, InputTag, Metric, Param, RunTag

        record = spec.record
        tags = {**record["tags"], RECORD_TAG: spec.key, PIPELINE_KEY_TAG: spec.pipeline,
                **({PARENT_TAG: parent_id, PARENT_RECORD_TAG: spec.parent_key} if parent_id else {})}
        note = tags.pop(NOTE_TAG, "")
        run_id = self.client.create_run(self.experiment_id, start_time=int(record["started"] * 1000), tags=tags,
                                        run_name=record["name"]).info.run_id
        # Its description's links to the run's own page need the run's id: it goes with the first batch.
        page = f"#/experiments/{self.experiment_id}/runs/{run_id}"
        late_tags = [RunTag(NOTE_TAG, note.replace(RUN_PAGE, page).replace(RUN_ID, run_id))] if note else []
        params = [Param(key, value) for key, value in record["params"].items()]
        metrics = [Metric(name, value, stamp, step) for name, points in record["metrics"].items()
                   for step, value, stamp in points]
        for batch in _batches(params, metrics, late_tags):
            self.client.log_batch(run_id, **batch)
        datasets = [DatasetInput(Dataset(data["name"], data["digest"], "toksel", data["source"]),
                                 [InputTag("mlflow.data.context", "training")]) for data in record["inputs"]]
        if datasets:
            self.client.log_inputs(run_id, datasets)
        for artifact in record["artifacts"]:
            if why := why_not_shown(artifact):  # the report's may be met twice: its run's and the parent's
                self.published.not_shown[artifact["path"]] = why
                continue
            self.client.log_artifact(run_id, artifact["path"], artifact["folder"])
        for name, text in spec.texts.items():
            if text:
                self.client.log_text(run_id, text, name)
        self.client.set_terminated(run_id, record["status"], end_time=int(record["ended"] * 1000)
                                   if record["ended"] else None)
        self.published.created += 1
        return run_id
