"""The MLflow view of the run records: rebuilt alike when published twice, at once, and after a kill midway."""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from mlflow import MlflowClient

from tests.helpers import CHECKOUT_PATH
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
    named = {run.info.run_name: run for run in runs}
    stage_run = named[f"train synthetic [{parent.info.run_name}]"]
    deep = named[f"train synthetic, trained, lr 0.01 [{parent.info.run_name}]"]  # its path: what it is, alone
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


def test_an_artifact_outside_the_project_is_not_read(project, tmp_path_factory, capsys):
    """A record naming a file outside the project, by its absolute path or through `..`, with the right digest:
    the file is neither uploaded nor read for the parent's headline."""
    outside = tmp_path_factory.mktemp("elsewhere") / "secret.md"
    outside.write_text("# Not the project's\n\nWhat lies elsewhere.\n")
    sideways = Path("..") / outside.parent.name / outside.name  # the same file, from the project
    record = RunRecord("report", {"stage": "report"})
    with record.run():
        record.log_artifact(outside, pipeline=True)
        record.log_artifact(sideways)
    write_records(Path("runs") / "report.json", [record], {"params_yaml": "seed: 0\n"})
    assert publish.main([]) == 0
    err = capsys.readouterr().err
    assert f"publish: {outside} lies outside the project: not shown" in err
    assert f"publish: {sideways} lies outside the project: not shown" in err
    client, runs = _store(project)
    for run in runs:
        assert [a.path for a in client.list_artifacts(run.info.run_id)] == ["params.yaml"]
        assert "elsewhere" not in run.data.tags.get("mlflow.note.content", "")
    assert json.loads((project / "results" / "publish.json").read_text())["artifacts_not_shown"] == 2


def test_another_embedded_store_keeps_its_artifacts_beside_it(project, tmp_path_factory):
    """Publishing to another sqlite store writes nothing in the project: its artifacts go beside that store."""
    _records(project)
    other = tmp_path_factory.mktemp("other")
    assert publish.main([f"sqlite:///{other / 'mlflow.db'}"]) == 0
    experiment = MlflowClient(f"sqlite:///{other / 'mlflow.db'}").get_experiment_by_name("toksel")
    assert experiment.artifact_location == (other / "mlartifacts").as_uri()
    assert len(list((other / "mlartifacts").rglob("params.yaml"))) == 4  # the parent's and each stage run's
    assert sorted(path.name for path in project.iterdir()) == ["params.yaml", "results", "runs"]
    assert not (project / "results" / "publish.json").exists()  # the stage's output is the project store's alone


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
    env = {**os.environ, "PYTHONPATH": CHECKOUT_PATH}
    return subprocess.Popen([sys.executable, "-c", code], cwd=project, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_a_publisher_on_a_new_store_says_one_line_alone(project):
    """In a process of its own, as DVC runs it: MLflow's notices as it makes the store's tables are not shown."""
    _records(project)
    out, err = _publisher(project).communicate(timeout=120)
    assert err == "" and out.startswith(f"publish: {PER_PIPELINE} runs in sqlite:///") and out.count("\n") == 1


def test_a_publisher_killed_midway_is_finished_by_the_next(project):
    _records(project)
    killed = _publisher(project, kill_after=4)
    killed.communicate(timeout=120)
    assert killed.returncode == -9
    client, runs = _store(project)
    assert "RUNNING" in {run.info.status for run in runs} and len(runs) == 5
    assert publish.main([]) == 0
    _check_once(project)


@pytest.mark.slow  # 8 s or more: make test-slow (make test stays under 5 minutes)
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
        code = subprocess.run([sys.executable, "-c", "import sys; from toksel.tracking import experiment; "
                               "experiment.LOCK_WAIT = 0.5; from toksel import publish; sys.exit(publish.main())"],
                              cwd=project, env={**os.environ, "PYTHONPATH": CHECKOUT_PATH}, capture_output=True,
                              text=True)
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
    assert f"{project / 'mlflow.db'} is no SQLite database (damaged, or another file): move it aside" in error[0]


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
    seed0 = next(run for run in runs if run.info.run_name.startswith("train synthetic seed 0 ["))
    assert seed0.info.run_id == before[seed0.info.run_name]  # kept, and moved under the new parent
    assert seed0.data.tags["mlflow.parentRunId"] == parent.info.run_id
    _check_once(project, extra=1)


def test_no_two_runs_of_a_pipeline_share_a_name_and_each_says_what_it_is(project):
    """Children named alike under many parents (an arm and its trials under each seed and dataset, a name twice
    under one run): each run is named by its path and the pipeline's name, and none twice."""
    with outputs_together():
        for dataset in ("synthetic", "imdb"):
            records = []
            for seed in (0, 1):
                record = RunRecord(f"train {dataset} seed {seed}", {"stage": "train", "dataset": dataset})
                with record.run(), record.child(f"trained seed {seed}", {}) as arm:
                    for name in ("lr 0.01 (screen)", "lr 0.01 (kept)", "lr 0.01 (kept)"):
                        with arm.child(name, {}) as trial:
                            trial.log_metrics({"test_accuracy": 0.9})
                records.append(record)
            write_records(Path("runs") / "train" / f"{dataset}.json", records, {"params_yaml": ""})
    assert publish.main([]) == 0
    _, runs = _store(project)
    names = [run.info.run_name for run in runs]
    assert len(names) == 1 + 2 * 2 * (2 + 3) and len(set(names)) == len(names)
    pipeline = next(run.info.run_name for run in runs if run.data.tags["stage"] == "pipeline")
    assert all(name.endswith(f" [{pipeline}]") for name in names if name != pipeline)
    assert {f"train imdb seed 1, trained seed 1 [{pipeline}]", f"train imdb seed 1, trained seed 1, lr 0.01 (kept) "
            f"[{pipeline}]", f"train imdb seed 1, trained seed 1, lr 0.01 (kept) (2) [{pipeline}]"} <= set(names)


def _moved(record: dict, seconds: float) -> None:
    """A record and those nested in it, made `seconds` earlier."""
    record["started"] += seconds
    record["ended"] += seconds
    for child in record["children"]:
        _moved(child, seconds)


def test_the_parent_spans_its_pipeline_run_not_the_records_dvc_restored(project):
    """A stage DVC's run cache restored keeps the times of the run that made it, an hour before: the parent starts
    when DVC began this pipeline run and ends when publish, its last stage, runs. By hand: the records' span."""
    _records(project)
    path = project / "runs" / "train" / "synthetic.json"
    content = json.loads(path.read_text())
    for record in content["runs"]:
        _moved(record, -3600)
    path.write_text(json.dumps(content))
    _report(5.0)  # made in this pipeline run
    # DVC: a process that starts publish as a stage's command, with DVC_STAGE (its own environment lacks it).
    dvc = ("import os, subprocess, sys; sys.exit(subprocess.run([sys.executable, '-m', 'toksel.publish'], "
           "env={**os.environ, 'DVC_STAGE': 'publish'}).returncode)")
    began = time.time()
    assert subprocess.run([sys.executable, "-c", dvc], cwd=project, env={**os.environ, "PYTHONPATH": CHECKOUT_PATH},
                          capture_output=True).returncode == 0
    ended = time.time()
    _, runs = _store(project)
    parent = next(run for run in runs if run.data.tags["stage"] == "pipeline")
    assert began - 2 <= parent.info.start_time / 1000 <= parent.info.end_time / 1000 <= ended  # boot-time rounding
    restored = next(run for run in runs if run.info.run_name.startswith("train synthetic seed 0 ["))
    assert restored.info.start_time / 1000 < began - 3000  # a stage's run keeps its record's times
    assert publish.main([f"sqlite:///{project / 'by-hand.db'}"]) == 0
    client = MlflowClient(f"sqlite:///{project / 'by-hand.db'}")
    by_hand = client.search_runs([client.get_experiment_by_name("toksel").experiment_id], "tags.stage = 'pipeline'")
    records = [run for run in runs if run.data.tags["stage"] != "pipeline"]
    assert by_hand[0].info.start_time == min(run.info.start_time for run in records)


def _flow() -> None:
    """runs/gradient_flow/synthetic.json: a flow's curves against 100 log10 t, and a one-step run without a history."""
    with outputs_together():
        flow = RunRecord("gradient_flow synthetic seed 0", {"stage": "gradient_flow", "dataset": "synthetic"})
        with flow.run():
            flow.log_history([-100, 0, 100, 300], {"p_norm": [0.1, 1.0, 2.0, 4.0]})
        write_records(Path("runs") / "gradient_flow" / "synthetic.json", [flow], {"params_yaml": ""})
        step = RunRecord("one_step synthetic seed 0", {"stage": "one_step", "dataset": "synthetic"})
        with step.run():
            step.log_metrics({"pearson_r": 0.9})
        write_records(Path("runs") / "one_step" / "synthetic.json", [step], {"params_yaml": ""})


def test_a_flow_says_what_its_step_is_keeps_its_times_and_the_views_chart_the_step(project):
    """MLflow's time axes would draw a curve logged at once as a vertical line: the views open charts on the step,
    the flow's description says the step is 100 log10 t, and its points keep the times the stage logged them."""
    _flow()
    assert publish.main([]) == 0
    client, runs = _store(project)
    flow = next(run for run in runs if run.data.tags["stage"] == "gradient_flow")
    assert "step = 100 log10 t, t the flow time" in flow.data.tags["mlflow.note.content"]
    record = json.loads((project / "runs" / "gradient_flow" / "synthetic.json").read_text())["runs"][0]
    history = client.get_metric_history(flow.info.run_id, "p_norm")
    assert [[point.step, point.value, point.timestamp] for point in history] == record["metrics"]["p_norm"]
    assert "mlflow.note.content" not in next(run for run in runs if run.data.tags["stage"] == "one_step").data.tags
    for key in ("toksel-gradient-flow", "toksel-training", "toksel-pipelines"):
        assert _saved_view(client, key)["globalLineChartConfig"]["xAxisKey"] == "step"


def _report_files(project: Path) -> None:
    """runs/report.json as the report stage writes it: report.md and report.html marked for the pipeline's run."""
    folder = project / "results" / "report"
    with outputs_together():
        write_text(folder / "report.md", "# toksel: the paper's claims in our runs\n\n**Verdict.** The paper's "
                   "claims hold in part: 8 of the 15 hold.\n\n## The verdict, claim by claim\n\n- more\n")
        write_text(folder / "report.html", "<html><body><h1>toksel</h1></body></html>\n")
        report = RunRecord("report", {"stage": "report"})
        with report.run():
            report.log_metrics({"claims_held": 8.0})
            for name in ("report.md", "report.html"):
                report.log_artifact(folder / name, pipeline=True)
        write_records(Path("runs") / "report.json", [report], {"params_yaml": ""})


def test_the_parent_shows_the_report_and_its_headline_with_links_to_it(project):
    """The parent's description (MLflow's Markdown atop its page): the report's title and verdict, and links to the
    report in its artifact pane and to report.html's download; its artifacts: the report's files, also on a parent
    made anew while the report's run is kept."""
    _records(project)
    _report_files(project)
    assert publish.main([]) == 0
    client, runs = _store(project)
    parent = next(run for run in runs if run.data.tags["stage"] == "pipeline")
    run_id, experiment = parent.info.run_id, parent.info.experiment_id
    note = parent.data.tags["mlflow.note.content"]
    assert note.startswith("**toksel: the paper's claims in our runs**\n\n**Verdict.** The paper's claims hold in "
                           "part: 8 of the 15 hold.\n\n") and "claim by claim" not in note
    assert f"[report.html](#/experiments/{experiment}/runs/{run_id}/artifacts/report.html)" in note
    assert f"[report.md](#/experiments/{experiment}/runs/{run_id}/artifacts/report.md)" in note
    assert f"[download report.html](get-artifact?path=report.html&run_uuid={run_id})" in note
    assert {a.path for a in client.list_artifacts(run_id)} == {"params.yaml", "report.md", "report.html"}
    html = Path(client.download_artifacts(run_id, "report.html", str(project / "fetched")))
    assert html.read_bytes() == (project / "results" / "report" / "report.html").read_bytes()
    # The parent made anew (the commit's values differ now), the report's run kept: the new parent shows it too.
    subprocess.run(["git", "init", "-q"], check=True)
    text = (project / "params.yaml").read_text()
    (project / "params.yaml").write_text(re.sub(r"(?m)^  seeds: \[.*\]", "  seeds: [0, 1]", text, count=1))
    subprocess.run(["git", "add", "params.yaml"], check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "values"], check=True)
    (project / "params.yaml").write_text(text)
    assert publish.main([]) == 0
    _, runs = _store(project)
    renewed = next(run for run in runs if run.data.tags["stage"] == "pipeline")
    assert renewed.info.run_id != run_id and renewed.data.tags["toksel.changed"] == "base.seeds"
    assert {a.path for a in client.list_artifacts(renewed.info.run_id)} == {"params.yaml", "report.md", "report.html"}
    assert renewed.info.run_id in renewed.data.tags["mlflow.note.content"]
