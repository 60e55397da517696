"""Faults: a stage killed outright (kill -9) reruns to completion, with no half-written output and no MLflow run
left RUNNING, and a killed training resumes from its last checkpoint; two stages write to one sqlite store at
once; a training whose loss stops being finite stops with a clear error; the same seed gives the same metrics."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from mlflow import MlflowClient

from pipelines import gradient_flow, one_step, prepare, train
from tests.helpers import ROOT, TIMING_METRICS, TINY, TINY_TRAIN, run_stage_process, seed_folder, start_stage
from toksel.theory.gradient_flow import record_times

LONG_FLOW = [*TINY, "gradient_flow.tolerance=1e-8"]  # seconds of steps: a few hundred times the usual number


def _client(project: Path) -> MlflowClient:
    return MlflowClient(f"sqlite:///{project / 'mlflow.db'}")


def _runs(project: Path, stage: str) -> list:
    """The stage's runs (not the trials nested under them), oldest first."""
    client = _client(project)
    found = client.search_runs([client.get_experiment_by_name("toksel").experiment_id],
                               filter_string=f"tags.stage = '{stage}'", order_by=["attributes.start_time ASC"])
    return [run for run in found if "toksel.trial" not in run.data.tags]


def _wait_until(condition: Callable[[], bool], process, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert process.poll() is None, f"the stage ended first ({process.returncode}): {process.stderr.read()}"
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def _assert_whole(folder: Path) -> None:
    """Every file in `folder` reads back in full: no temporary file, no truncated output."""
    for path in folder.rglob("*") if folder.exists() else ():
        assert ".tmp-" not in path.name, path
        if path.suffix == ".json":
            json.loads(path.read_text())
        elif path.suffix == ".npz":
            with np.load(path) as arrays:
                [arrays[name] for name in arrays.files]
        elif path.suffix == ".csv":
            pd.read_csv(path)


def test_a_gradient_flow_killed_outright_reruns_and_its_run_is_not_left_running(prepared):
    process = start_stage("gradient_flow", LONG_FLOW, prepared)
    _wait_until(lambda: [run for run in _runs(prepared, "gradient_flow") if run.info.status == "RUNNING"], process)
    time.sleep(0.3)  # into the descent
    process.kill()  # SIGKILL: nothing in the stage runs after this
    process.wait()
    outputs = seed_folder(prepared, "gradient_flow", "synthetic")
    _assert_whole(outputs)
    assert [run.info.status for run in _runs(prepared, "gradient_flow")] == ["RUNNING"]  # what kill -9 leaves

    rerun = run_stage_process("gradient_flow", TINY, prepared)  # shorter: only its ending matters here
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "marked KILLED" in rerun.stderr
    _assert_whole(outputs)
    assert json.loads((outputs / "metrics.json").read_text())["loss"] >= 0
    killed, finished = _runs(prepared, "gradient_flow")
    assert (killed.info.status, finished.info.status) == ("KILLED", "FINISHED")
    parent = _client(prepared).get_run(finished.data.tags["mlflow.parentRunId"])
    assert parent.info.status == "FINISHED"


@pytest.mark.parametrize(("stage", "args", "signum"), [
    ("gradient_flow", LONG_FLOW, signal.SIGTERM),  # a `kill`, DVC or CI stopping the stage
    ("train", [*TINY, *TINY_TRAIN, "train.max_epochs=200", "train.patience=200"], signal.SIGINT),  # Ctrl-C
], ids=["sigterm", "ctrl-c in training"])
def test_a_stopped_stage_marks_its_runs_killed_keeps_its_old_outputs_and_says_so_in_one_line(prepared, stage, args,
                                                                                              signum):
    if stage == "gradient_flow":  # outputs to keep (the training's are none: it must then write none)
        assert run_stage_process(stage, TINY, prepared).returncode == 0
    outputs = prepared / "results" / stage
    before = {path: path.read_bytes() for path in outputs.rglob("*") if path.is_file()}
    process = start_stage(stage, args, prepared)
    _wait_until(lambda: [run for run in _runs(prepared, stage) if run.info.status == "RUNNING"], process)
    time.sleep(0.5)  # into the descent, or the training
    process.send_signal(signum)
    assert process.wait(timeout=60) == 128 + signum
    error = process.stderr.read().strip().splitlines()
    assert error == [f"{stage}: stopped by {signal.Signals(signum).name}: its MLflow runs are marked KILLED and its "
                     "old outputs kept"]
    stopped = _runs(prepared, stage)[-1]
    assert stopped.info.status == "KILLED"
    assert _client(prepared).get_run(stopped.data.tags["mlflow.parentRunId"]).info.status == "KILLED"
    assert {path: path.read_bytes() for path in outputs.rglob("*") if path.is_file()} == before


def _gone(pid: int) -> bool:
    """No such process, or only its exit status left (a zombie nobody has reaped)."""
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split()[0] == "Z"
    except (FileNotFoundError, IndexError):
        return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent's death is told by Linux (prctl)")
def test_a_stage_whose_starter_is_killed_stops_and_never_writes_after_it(prepared):
    assert run_stage_process("gradient_flow", TINY, prepared).returncode == 0
    outputs = seed_folder(prepared, "gradient_flow", "synthetic")
    before = {path.name: path.read_bytes() for path in outputs.iterdir()}
    # A stand-in for `dvc repro`: it starts the stage and is then killed, as `kill -TERM <dvc>` ends DVC at once.
    starter = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys; stage = subprocess.Popen(sys.argv[1:]); "
         "print(stage.pid, flush=True); stage.wait()", sys.executable, "-m", "pipelines.gradient_flow", *LONG_FLOW],
        cwd=prepared, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        text=True)
    stage = int(starter.stdout.readline())
    _wait_until(lambda: [run for run in _runs(prepared, "gradient_flow") if run.info.status == "RUNNING"], starter)
    starter.kill()
    starter.wait()
    deadline = time.monotonic() + 60
    while not _gone(stage):
        assert time.monotonic() < deadline, "the stage outlived the process that started it"
        time.sleep(0.1)
    assert {path.name: path.read_bytes() for path in outputs.iterdir()} == before
    assert _runs(prepared, "gradient_flow")[-1].info.status == "KILLED"


SCREENED = [*TINY, *TINY_TRAIN, "train.max_epochs=5", "train.patience=5", "train.lr_grid=[0.02,0.05]",
            "train.lr_extensions=0", "train.screen_epochs=1"]  # a screen of two rates, then the kept fit


def test_a_training_stopped_during_its_kept_fit_reruns_to_the_uninterrupted_metrics(prepared):
    assert run_stage_process("train", SCREENED, prepared).returncode == 0
    output = seed_folder(prepared, "train", "synthetic/trained") / "metrics.json"

    def results() -> dict:
        return {key: value for key, value in json.loads(output.read_text()).items() if key not in TIMING_METRICS}

    uninterrupted = results()
    seed = prepared / "checkpoints" / "train" / "synthetic" / "trained" / "seed0"
    process = start_stage("train", SCREENED, prepared)
    _wait_until(lambda: any(seed.glob("*-kept/*/last.ckpt")), process)  # after the screen, in the kept fit
    time.sleep(0.3)  # an epoch or two further
    process.kill()  # SIGKILL: nothing of the stage runs after it (SIGTERM ends a stage as cleanly: above)
    process.wait()
    _assert_whole(prepared / "results" / "train")
    two_hours_ahead = time.time() + 7200  # a skewed clock: a checkpoint is trusted by what it records, not its time
    for checkpoint in seed.rglob("*.ckpt"):
        os.utime(checkpoint, (two_hours_ahead, two_hours_ahead))
    rerun = run_stage_process("train", SCREENED, prepared)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert results() == uninterrupted  # bit for bit
    assert not seed.exists()  # finished: nothing left to resume
    assert [run.info.status for run in _runs(prepared, "train")] == ["FINISHED", "KILLED", "FINISHED"]
    client = _client(prepared)
    kept = client.search_runs([client.get_experiment_by_name("toksel").experiment_id],
                              filter_string="tags.phase = 'kept'", order_by=["attributes.start_time DESC"])
    assert "resumed_from_epoch" in kept[0].data.tags  # the run says where it went on; its results do not


def test_two_stages_writing_to_one_sqlite_store_at_once_lose_nothing(prepared, tmp_path):
    second = tmp_path / "second"
    second.mkdir()
    for name in ("params.yaml", "data", "results"):  # the same inputs, another project folder
        (shutil.copytree if (prepared / name).is_dir() else shutil.copy)(prepared / name, second / name)
    args = [*TINY, "gradient_flow.tolerance=1e-6"]  # a longer run: the two stages overlap
    processes = [start_stage("gradient_flow", args, folder, TOKSEL_PIPELINE_ID=f"concurrent-{i}")
                 for i, folder in enumerate((prepared, second))]
    for process in processes:
        assert process.wait(timeout=300) == 0, process.stderr.read()[-3000:]
    runs = _runs(prepared, "gradient_flow")
    assert len(runs) == 2 and {run.info.status for run in runs} == {"FINISHED"}
    client = _client(prepared)
    run_of_parent = {run.data.tags["mlflow.parentRunId"]: run for run in runs}
    for i, folder in enumerate((prepared, second)):
        parent = client.search_runs([runs[0].info.experiment_id],
                                    filter_string=f"tags.`toksel.pipeline_key` = 'concurrent-{i}'")[0]
        run = run_of_parent[parent.info.run_id]
        history = pd.read_csv(seed_folder(folder, "gradient_flow", "synthetic") / "history.csv")
        for name in ("loss", "p_norm", "selection_fraction"):
            logged = client.get_metric_history(run.info.run_id, name)
            assert len(logged) == len(history) == len(record_times(1e4)), name
            assert np.allclose([point.value for point in sorted(logged, key=lambda point: point.step)],
                               history[name].to_numpy())


def test_a_training_whose_loss_overflows_stops_with_a_clear_error(prepared, capsys):
    assert train.main([*TINY, *TINY_TRAIN, "train.lr=1e30", "train.lr_grid=[1e30]"]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("train: training diverged: the loss became nan at epoch 0") and "lower" in error
    assert not (seed_folder(prepared, "train", "synthetic/trained") / "metrics.json").exists()
    assert [run.info.status for run in _runs(prepared, "train")] == ["FAILED"]


def test_the_same_seed_gives_the_same_metrics_on_the_cpu(tmp_path, monkeypatch):
    metrics = []
    for attempt in ("first", "second"):
        folder = tmp_path / attempt
        folder.mkdir()
        shutil.copy(ROOT / "params.yaml", folder / "params.yaml")
        monkeypatch.chdir(folder)
        monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{folder / 'mlflow.db'}")
        for stage, args in ((prepare, TINY), (one_step, TINY), (gradient_flow, TINY), (train, [*TINY, *TINY_TRAIN])):
            assert stage.main(args) == 0
        metrics.append({path.relative_to(folder).as_posix(): {name: value for name, value in
                                                              json.loads(path.read_text()).items()
                                                              if name not in TIMING_METRICS}
                        for path in sorted((folder / "results").rglob("metrics.json"))})
    assert len(metrics[0]) == 4 and metrics[0] == metrics[1]
