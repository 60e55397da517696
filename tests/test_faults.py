"""Faults: a stage killed outright (kill -9) reruns to completion, with no half-written output and no MLflow run
left RUNNING, and a killed training resumes from its last checkpoint; a training whose loss stops being finite stops
with a clear error; the same seed gives the same metrics."""

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
import psutil
import pytest

from pipelines import gradient_flow, one_step, prepare, train
from tests.helpers import (
    CHECKOUT_PATH,
    ROOT,
    TIMING_METRICS,
    TINY,
    TINY_TRAIN,
    published_runs,
    run_stage_process,
    seed_folder,
    start_stage,
)
from toksel.runtime.errors import Terminated, forget_stops, raise_if_stopped, stop

LONG_FLOW = [*TINY, "gradient_flow.tolerance=1e-8"]  # seconds of steps: a few hundred times the usual number


def _computing(pid: int, seconds: float = 3.0) -> Callable[[], bool]:
    """Whether the process has spent `seconds` of CPU: past its imports (about 1.6 s for gradient_flow), into its
    work. A stage writes nothing before its end, so its CPU time is what tells how far it has gone."""
    def busy() -> bool:
        times = psutil.Process(pid).cpu_times()
        return times.user + times.system > seconds

    return busy


def _stage_runs(project: Path, stage: str) -> list:
    """The stage's runs in MLflow once its records are published (not the trials nested under them)."""
    return [run for run in published_runs(project, f"tags.stage = '{stage}'") if "toksel.trial" not in run.data.tags]


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


@pytest.mark.slow  # 8 s or more: make test-slow (make test stays under 5 minutes)
def test_a_gradient_flow_killed_outright_reruns_and_no_run_is_left_running(prepared):
    process = start_stage("gradient_flow", LONG_FLOW, prepared)
    _wait_until(_computing(process.pid), process)  # into the descent
    process.kill()  # SIGKILL: nothing in the stage runs after this
    process.wait()
    outputs = seed_folder(prepared, "gradient_flow", "synthetic")
    _assert_whole(outputs)
    assert not (prepared / "runs" / "gradient_flow").exists()  # no record: the stage never opened a run

    rerun = run_stage_process("gradient_flow", TINY, prepared)  # shorter: only its ending matters here
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    _assert_whole(outputs)
    _assert_whole(prepared / "runs")
    assert json.loads((outputs / "metrics.json").read_text())["loss"] >= 0
    assert [run.info.status for run in _stage_runs(prepared, "gradient_flow")] == ["FINISHED"]


@pytest.mark.parametrize(("stage", "args", "signum"), [
    ("gradient_flow", LONG_FLOW, signal.SIGTERM),  # a `kill`, DVC or CI stopping the stage
    pytest.param("train", [*TINY, *TINY_TRAIN, "train.max_epochs=200", "train.patience=200"], signal.SIGINT,
                 marks=pytest.mark.slow),  # Ctrl-C; 12 s: make test-slow
], ids=["sigterm", "ctrl-c in training"])
def test_a_stopped_stage_keeps_its_old_outputs_and_records_and_says_so_in_one_line(prepared, stage, args, signum):
    if stage == "gradient_flow":  # outputs to keep (the training's are none: it must then write none)
        assert run_stage_process(stage, TINY, prepared).returncode == 0
    outputs = [prepared / "results" / stage, prepared / "runs" / stage]
    before = {path: path.read_bytes() for folder in outputs for path in folder.rglob("*") if path.is_file()}
    process = start_stage(stage, args, prepared)
    if stage == "train":  # into the training: its first checkpoint
        _wait_until(lambda: any((prepared / "checkpoints").rglob("last.ckpt")), process)
    else:
        _wait_until(_computing(process.pid), process)  # into the descent
    process.send_signal(signum)
    assert process.wait(timeout=60) == 128 + signum
    error = process.stderr.read().strip().splitlines()
    assert error == [f"{stage}: stopped by {signal.Signals(signum).name}: it wrote nothing"]
    assert {path: path.read_bytes() for folder in outputs for path in folder.rglob("*") if path.is_file()} == before


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stage_stopped_while_it_imports_says_so_in_one_line(prepared, signum):
    """Ctrl-C within the first second lands in the stage's imports (torch's take seconds), before runtime/cli.py
    takes the signals over: one line, not the traceback of the module that was importing, and nothing written."""
    outputs = [prepared / "results" / "one_step", prepared / "runs" / "one_step"]
    before = {path: path.read_bytes() for folder in outputs for path in folder.rglob("*") if path.is_file()}
    process = start_stage("one_step", TINY, prepared)
    time.sleep(0.5)
    process.send_signal(signum)
    assert process.wait(timeout=60) == 128 + signum
    error = process.stderr.read().strip().splitlines()
    assert len(error) == 1 and error[0].startswith(f"one_step: stopped by {signal.Signals(signum).name}")
    assert {path: path.read_bytes() for folder in outputs for path in folder.rglob("*") if path.is_file()} == before


def test_a_stopped_prepare_of_many_seeds_leaves_no_folder_it_made(prepared):
    """Its seeds' folders are made as their files are written: stopped among them, it leaves the project as it
    found it (seed0's folder, an old output's, stays), no empty folder for each seed it had begun."""
    def tree() -> list[Path]:
        return sorted(path.relative_to(prepared) for folder in ("data", "results", "runs")
                      for path in (prepared / folder).rglob("*"))

    before = tree()
    many = [*TINY, f"base.seeds=[{','.join(map(str, range(1000)))}]"]
    process = start_stage("prepare", many, prepared)
    _wait_until(lambda: len(list((prepared / "data" / "processed" / "synthetic").glob("seed*"))) > 5, process)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 128 + signal.SIGTERM
    assert process.stderr.read().strip().splitlines() == ["prepare: stopped by SIGTERM: it wrote nothing"]
    assert tree() == before


def test_a_stop_whose_raise_is_lost_in_a_finalizer_is_raised_again(monkeypatch):
    # A signal's handler runs wherever Python is, a __del__ too, where its exception is only reported: the stage
    # would have trained on and written its outputs (once in CI, a Ctrl-C in training ended the stage with 0).
    lost = []
    monkeypatch.setattr(sys, "unraisablehook", lambda unraisable: lost.append(unraisable.exc_value))
    forget_stops()

    class Finalised:
        def __del__(self):
            stop(signal.SIGINT)

    Finalised()  # garbage at once
    assert [type(error) for error in lost] == [Terminated]  # the raise went nowhere
    with pytest.raises(Terminated) as again:  # as the stage asks between training steps and before it writes
        raise_if_stopped()
    assert again.value.signum == signal.SIGINT
    forget_stops()  # a new stage run has received none
    raise_if_stopped()


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
        cwd=prepared, env={**os.environ, "PYTHONPATH": CHECKOUT_PATH}, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True)
    stage = int(starter.stdout.readline())
    _wait_until(_computing(stage), starter)
    starter.kill()
    starter.wait()
    deadline = time.monotonic() + 60
    while not _gone(stage):
        assert time.monotonic() < deadline, "the stage outlived the process that started it"
        time.sleep(0.1)
    assert {path.name: path.read_bytes() for path in outputs.iterdir()} == before


SCREENED = [*TINY, *TINY_TRAIN, "train.max_epochs=30", "train.patience=30", "train.lr_grid=[0.02,0.05]",
            "train.lr_extensions=0", "train.screen_epochs=1"]  # a screen of two rates, then both to convergence


@pytest.mark.slow  # 30 to 80 s: `make test-slow`
def test_a_training_stopped_during_its_kept_fit_reruns_to_the_uninterrupted_metrics(prepared):
    assert run_stage_process("train", SCREENED, prepared).returncode == 0
    output = seed_folder(prepared, "train", "synthetic/trained") / "metrics.json"

    def results() -> dict:
        return {key: value for key, value in json.loads(output.read_text()).items() if key not in TIMING_METRICS}

    uninterrupted = results()
    seed = prepared / "checkpoints" / "train" / "synthetic" / "trained" / "seed0"
    process = start_stage("train", SCREENED, prepared)
    _wait_until(lambda: any(seed.glob("*-candidate/*/last.ckpt")), process)  # after the screen, converging
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
    converged = published_runs(prepared, "tags.phase = 'candidate'")  # the records of the last run: the resumed one
    assert len(converged) == 2 and any("resumed_from_epoch" in run.data.tags for run in converged)  # says where


def test_a_training_whose_loss_overflows_stops_with_a_clear_error(prepared, capsys):
    assert train.main([*TINY, *TINY_TRAIN, "train.lr=1e30", "train.lr_grid=[1e30]"]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("train: training diverged: the loss became nan at epoch 0") and "lower" in error
    assert not (seed_folder(prepared, "train", "synthetic/trained") / "metrics.json").exists()
    assert not (prepared / "runs" / "train").exists()  # a failed stage records nothing


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
