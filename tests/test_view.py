"""The MLflow view of the run records: rebuilt alike when published twice, at once, and after a kill midway."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from mlflow import MlflowClient

from tests.helpers import ROOT
from toksel import publish
from toksel.runtime.config import params_values
from toksel.runtime.io import outputs_together, write_text
from toksel.runtime.records import RunRecord, flatten, write_records
from toksel.tracking.saved_views import TAG_PREFIX
from toksel.tracking.view import Publisher

STAGE_RUNS = 3  # per pipeline below: three seeds, each with two trials
PER_PIPELINE = 1 + STAGE_RUNS * 3


def _records(project: Path, seeds: int = STAGE_RUNS) -> None:
    """runs/train/synthetic.json as a stage writes it: three seed runs, each with a history, an artifact and two
    nested trials."""
    records = []
    with outputs_together():
        for seed in range(seeds):
            record = RunRecord(f"train synthetic seed {seed}", {"stage": "train", "dataset": "synthetic",
                                                                 "seed": str(seed)}, {"train.lr": 0.02, "seed": seed})
            with record.run():
                write_text(Path("results") / "train" / f"seed{seed}.md", f"seed {seed}\n")
                record.log_artifact(Path("results") / "train" / f"seed{seed}.md")
                record.log_history(np.arange(5), {"val_loss": np.linspace(1, 0.5, 5)})
                for lr in (0.01, 0.02):
                    with record.child(f"lr {lr}", {"lr": str(lr)}) as trial:
                        trial.log_metrics({"test_accuracy": 0.5 + lr + seed})
            records.append(record)
        write_records(Path("runs") / "train" / "synthetic.json", records, {"params_yaml": "seed: 0\n"})


def _store(project: Path) -> tuple[MlflowClient, list]:
    client = MlflowClient(f"sqlite:///{project / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("toksel")
    return client, client.search_runs([experiment.experiment_id], max_results=1000)


def _check_once(project: Path, pipelines: int = 1, seeds: int = STAGE_RUNS, extra: int = 0) -> list:
    """The store holds each record's run once (and `extra` stage runs without trials), nested as the records are."""
    client, runs = _store(project)
    assert len(runs) == (1 + 3 * seeds) * pipelines + extra
    assert all(run.info.status == "FINISHED" for run in runs)
    assert len({run.data.tags["toksel.record"] for run in runs}) == len(runs)
    by_id = {run.info.run_id: run for run in runs}
    for run in runs:  # nesting: parent -> seed run -> trial, each parent alive
        parent = run.data.tags.get("mlflow.parentRunId")
        depth = 0
        while parent is not None:
            assert parent in by_id
            parent, depth = by_id[parent].data.tags.get("mlflow.parentRunId"), depth + 1
        assert depth == {"pipeline": 0, None: 2}.get(run.data.tags.get("stage") if "toksel.trial" not in
                                                     run.data.tags else None, 1)
    return runs


def test_publishing_twice_is_once_and_the_runs_show_the_records(project, capsys):
    _records(project)
    assert publish.main([]) == 0
    runs = _check_once(project)
    assert publish.main([]) == 0
    assert "0 made now" in capsys.readouterr().out
    assert {run.info.run_id for run in _check_once(project)} == {run.info.run_id for run in runs}
    client, runs = _store(project)
    parent = next(run for run in runs if run.data.tags["stage"] == "pipeline")
    assert parent.info.run_name.startswith("workspace (full) ")  # params.yaml's profile and the digest of its values
    seed1 = next(run for run in runs if run.info.run_name == f"train synthetic seed 1 [{parent.info.run_name}]")
    assert seed1.data.params == {"train.lr": "0.02", "seed": "1"} and seed1.data.tags["dataset"] == "synthetic"
    assert [m.value for m in client.get_metric_history(seed1.info.run_id, "val_loss")] == list(np.linspace(1, 0.5, 5))
    assert [a.path for a in client.list_artifacts(seed1.info.run_id)] == ["params.yaml", "seed1.md"]
    assert json.loads((project / "results" / "publish.json").read_text())["records"] == PER_PIPELINE - 1
    # Other values in params.yaml: another pipeline run, under a parent of its own; the old one's runs stay once.
    _with_profile(project, "other")
    _records(project)
    assert publish.main([]) == 0
    _check_once(project, pipelines=2)
    _with_profile(project, "full")  # the first values again: their parent, rebuilt from the records
    assert publish.main([]) == 0
    _check_once(project, pipelines=2)


def _with_profile(project: Path, name: str) -> None:
    text = (project / "params.yaml").read_text()
    (project / "params.yaml").write_text(re.sub(r"(?m)^profile: \w+", f"profile: {name}", text))


def test_the_parent_shows_what_changed_and_the_report_and_no_run_is_deeper_than_three_levels(project):
    """In a git checkout, the parent carries the values params.yaml changes against the commit, and the report's
    numbers; a run nested deeper hangs beside its parent, named after it."""
    subprocess.run(["git", "init", "-q"], check=True)
    subprocess.run(["git", "add", "params.yaml"], check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "values"], check=True)
    text = (project / "params.yaml").read_text()
    (project / "params.yaml").write_text(re.sub(r"(?m)^  seeds: \[.*\]", "  seeds: [0, 1]", text, count=1))
    with outputs_together():
        stage = RunRecord("train synthetic", {"stage": "train"})
        with stage.run(), stage.child("trained", {}) as arm, arm.child("lr 0.01", {}) as trial:
            trial.log_metrics({"test_accuracy": 0.9})
        report = RunRecord("report", {"stage": "report"})
        with report.run():
            report.log_metrics({"claims_held": 5.0, "claim.lemma41_linear.imdb": 0.99})
        write_records(Path("runs") / "train.json", [stage], {"params_yaml": "seeds: [0, 1]\n"})
        write_records(Path("runs") / "report.json", [report], {"params_yaml": "seeds: [0, 1]\n"})
    assert publish.main([]) == 0
    client, runs = _store(project)
    parent = next(run for run in runs if run.data.tags["stage"] == "pipeline")
    assert parent.data.params["base.seeds"] == "[0, 1]" and parent.data.params["profile"] == "full"
    assert len(parent.data.params) == len(flatten(params_values()))  # every value, the changed one named
    assert parent.data.tags["toksel.changed"] == "base.seeds"
    assert parent.data.metrics == {"claims_held": 5.0, "claim.lemma41_linear.imdb": 0.99}
    by_id = {run.info.run_id: run for run in runs}
    stage_run = next(run for run in runs if run.info.run_name == f"train synthetic [{parent.info.run_name}]")
    deep = next(run for run in runs if run.info.run_name == "trained, lr 0.01")
    assert deep.data.tags["mlflow.parentRunId"] == stage_run.info.run_id and deep.data.metrics["test_accuracy"] == 0.9
    for run in runs:  # three levels at the most: the pipeline, a stage, what is nested in it
        depth, above = 0, run.data.tags.get("mlflow.parentRunId")
        while above is not None:
            depth, above = depth + 1, by_id[above].data.tags.get("mlflow.parentRunId")
        assert depth <= 2


def test_an_artifact_changed_after_its_stage_is_not_shown(project, capsys):
    _records(project)
    (project / "results" / "train" / "seed0.md").write_text("edited by hand\n")
    assert publish.main([]) == 0
    assert "results/train/seed0.md has changed since its stage wrote it" in capsys.readouterr().err
    client, runs = _store(project)
    seed0 = next(run for run in runs if run.info.run_name.startswith("train synthetic seed 0 ["))
    assert [a.path for a in client.list_artifacts(seed0.info.run_id)] == ["params.yaml"]


def _publisher(project: Path, kill_after: int | None = None) -> subprocess.Popen:
    """`python -m toksel.publish` in its own process; with kill_after, it kills itself (SIGKILL) right after making
    that many runs, before it ends the last one."""
    code = "import sys; from toksel import publish; sys.exit(publish.main())"
    if kill_after is not None:
        code = ("import os, signal; from toksel.tracking import view\n"
                "made = []\ncreate = view.Publisher._create\n"
                "def dying(self, spec, parent):\n"
                "    made.append(spec)\n"
                f"    if len(made) > {kill_after}:\n"
                "        self.client.create_run(self.experiment_id, run_name='half made', tags={\n"
                "            view.RECORD_TAG: spec.key, view.PIPELINE_KEY_TAG: spec.pipeline})\n"
                "        os.kill(os.getpid(), signal.SIGKILL)\n"
                "    return create(self, spec, parent)\n"
                "view.Publisher._create = dying\n" + code)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-c", code], cwd=project, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_a_publisher_killed_midway_is_finished_by_the_next(project):
    _records(project)
    killed = _publisher(project, kill_after=4)
    killed.communicate(timeout=120)
    assert killed.returncode == -9
    client, runs = _store(project)
    assert "RUNNING" in {run.info.status for run in runs} and len(runs) == 5
    assert publish.main([]) == 0
    _check_once(project)


def test_publishers_at_once_leave_each_run_once(project):
    """Three publishers started together on a store that exists: one at a time takes the store's lock, and the
    later ones find every run made."""
    _records(project, seeds=20)
    Publisher(f"sqlite:///{project / 'mlflow.db'}")
    started = [_publisher(project) for _ in range(3)]
    outs = []
    for process in started:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err
        outs.append(out)
    _check_once(project, seeds=20)
    assert sorted(int(out.split("(")[1].split()[0]) for out in outs) == [0, 0, 1 + 3 * 20]  # made now


def test_a_held_lock_is_one_line_and_exit_2(project):
    from filelock import FileLock

    _records(project)
    with FileLock(project / "mlflow.lock"):
        code = subprocess.run([sys.executable, "-c", "import sys; from toksel.runtime import experiment; "
                               "experiment.LOCK_WAIT = 0.5; from toksel import publish; sys.exit(publish.main())"],
                              cwd=project, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True)
    assert code.returncode == 2 and len(code.stderr.strip().splitlines()) == 1
    assert "has held" in code.stderr and "mlflow.lock" in code.stderr


def test_runs_no_record_backs_are_removed_and_a_deleted_experiment_comes_back(project):
    """A record replaced within its pipeline execution (its stage ran again): its old run goes, the new one comes.
    The experiment deleted in the UI: publish restores it and rebuilds the view."""
    _records(project)
    assert publish.main([]) == 0
    client, runs = _store(project)
    client.delete_experiment(client.get_experiment_by_name("toksel").experiment_id)
    _records(project, seeds=2)  # the same pipeline, its stage rerun with two seeds
    assert publish.main([]) == 0
    _check_once(project, seeds=2)


def test_a_store_that_fails_is_one_line_and_exit_2(project, capsys):
    _records(project)
    (project / "mlflow.db").write_bytes(b"this is no sqlite database" * 100)
    assert publish.main([]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "run `python -m toksel.publish` again" in error[0]


@pytest.mark.parametrize(("content", "said"), [('{"runs": [', "runs/one_step.json is damaged"),
                                              ('{"runs": []}', "runs/one_step.json is not a stage's run records")])
def test_a_damaged_record_is_one_line_and_exit_2(project, capsys, content, said):
    (project / "runs").mkdir()
    (project / "runs" / "one_step.json").write_text(content)
    assert publish.main([]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and said in error[0]


def _saved_view(client: MlflowClient, key: str) -> dict:
    """A saved view of the runs table as the UI reads it: its name, its filter and its columns."""
    tag = client.get_experiment_by_name("toksel").tags[TAG_PREFIX + key]
    view = json.loads(tag)
    return {"name": view["name"], **json.loads(view["state"])}


def test_each_kind_of_run_has_a_saved_view_and_the_pipelines_view_shows_what_differs(project):
    _records(project)
    assert publish.main([]) == 0
    client, _ = _store(project)
    flows = _saved_view(client, "toksel-gradient-flow")
    assert flows["searchFilter"] == "tags.stage = 'gradient_flow'"
    shown = set(flows["selectedColumns"])
    assert {"params.`one_step.eta0`", "params.`model.d`", "metrics.`selection_fraction`"} <= shown
    assert flows["groupBy"]["groupByKeys"] == [{"mode": "tag", "groupByData": "toksel.pipeline_key"}]  # listed flat
    pipelines = _saved_view(client, "toksel-pipelines")
    assert pipelines["searchFilter"] == "tags.stage = 'pipeline'"
    assert [column for column in pipelines["selectedColumns"] if column.startswith("params")] == []  # no git: no change
    old = client.create_run(client.get_experiment_by_name("toksel").experiment_id, tags={"stage": "pipeline"})
    client.log_param(old.info.run_id, "train.lr", "0.5")  # a parent of an older publisher: its changed values only
    _with_profile(project, "other")  # a second pipeline run: the value that differs becomes a column
    assert publish.main([]) == 0
    columns = _saved_view(client, "toksel-pipelines")["selectedColumns"]
    assert [column for column in columns if column.startswith("params")] == ["params.`profile`"]
    assert "metrics.`claims_held`" in columns


def _report(held: float) -> None:
    """runs/report.json: a report run that counts `held` claims held."""
    with outputs_together():
        report = RunRecord("report", {"stage": "report"})
        with report.run():
            report.log_metrics({"claims_held": held})
        write_records(Path("runs") / "report.json", [report], {"params_yaml": ""})


def test_a_parent_whose_numbers_change_is_made_anew_and_keeps_its_runs(project):
    _records(project)
    _report(5.0)
    assert publish.main([]) == 0
    client, runs = _store(project)
    before = {run.info.run_name: run.info.run_id for run in runs}
    _report(6.0)  # the report again, with another count
    assert publish.main([]) == 0
    client, runs = _store(project)
    parent = next(run for run in runs if run.data.tags["stage"] == "pipeline")
    assert parent.data.metrics["claims_held"] == 6.0 and parent.info.run_id not in before.values()
    seed0 = next(run for run in runs if run.info.run_name.startswith("train synthetic seed 0"))
    assert seed0.info.run_id == before[seed0.info.run_name]  # kept, and moved under the new parent
    assert seed0.data.tags["mlflow.parentRunId"] == parent.info.run_id
    _check_once(project, extra=1)
