"""One DVC experiment at a time in a workspace. DVC (3.x) lets a second `dvc exp run` rewrite the running
experiment's records and parameters before any stage runs; the stages then refuse to go on under the wrong name.
Here DVC's records are written by hand (the real race is in test_dvc_experiments.py)."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from pipelines import prepare
from tests.helpers import TINY
from toksel.runtime import workspace
from toksel.runtime.processes import Process


def _dvc_records(project: Path, name: str | None, dvc_pid: int) -> None:
    """What `dvc exp run` writes for the experiment it runs in the workspace: its name, and its own PID."""
    folder = project / workspace.DVC_RUN
    folder.mkdir(parents=True, exist_ok=True)
    if name is None:  # a refused second experiment's clean-up removes them
        for path in folder.iterdir():
            path.unlink()
        return
    (folder / "workspace.run").write_text(json.dumps({"name": name, "location": "workspace", "status": 2}))
    (folder / "workspace.json").write_text(json.dumps({"pid": dvc_pid, "returncode": None}))


@pytest.fixture
def in_experiment(project: Path, monkeypatch: pytest.MonkeyPatch):
    """Run the stages as `dvc exp run <name>` in the workspace would: DVC's variables, this process's parent as
    the DVC process (an ancestor, as DVC is of its stages)."""
    def enter(name: str) -> None:
        monkeypatch.setenv("DVC_EXP_NAME", name)
        monkeypatch.setenv("DVC_ROOT", str(project))
    return enter


def _one_line(capsys: pytest.CaptureFixture) -> str:
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and error[0].startswith("prepare: "), error
    return error[0]


def test_a_second_experiment_stops_while_the_first_ones_dvc_runs(project, in_experiment, capsys):
    first_dvc = subprocess.Popen(["sleep", "120"])
    try:
        first_process = str(Process.of(first_dvc.pid))
        (project / workspace.CLAIM).parent.mkdir(parents=True)
        (project / workspace.CLAIM).write_text(json.dumps({"name": "first", "process": first_process}))
        _dvc_records(project, "second", os.getppid())  # the second rewrote DVC's records
        in_experiment("second")
        assert prepare.main(TINY) == 2
        line = _one_line(capsys)
        assert f"experiment 'first' is running in this workspace (DVC PID {first_dvc.pid})" in line
        assert "experiment 'second' stops" in line and "dvc queue start" in line
        assert not (project / "data").exists()  # nothing written
        # The same name does not make it the same experiment: the claim's DVC process does.
        claim = {"name": "second", "process": first_process}
        (project / workspace.CLAIM).write_text(json.dumps(claim))
        assert prepare.main(TINY) == 2
        assert "experiment 'second' is running in this workspace" in _one_line(capsys)
    finally:
        first_dvc.kill()
        first_dvc.wait()
    # Once the first experiment's DVC has ended, the workspace is the second's: it claims it and runs.
    assert prepare.main(TINY) == 0
    claim = json.loads((project / workspace.CLAIM).read_text())
    assert claim["name"] == "second" and Process.parse(claim["process"]).pid == os.getppid()


@pytest.mark.parametrize(("records", "message"), [
    ("second", "experiment 'second' was started in this workspace while experiment 'first' ran"),
    (None, "another experiment was started in this workspace while experiment 'first' ran"),
    ("first, run by another DVC", "another experiment was started in this workspace while experiment 'first' ran"),
], ids=["named", "cleaned up", "another DVC"])
def test_an_experiment_whose_records_another_one_rewrote_stops(project, in_experiment, capsys, records, message):
    if records == "first, run by another DVC":
        _dvc_records(project, "first", os.getpid())  # a PID that is not one of the stage's ancestors
    else:
        _dvc_records(project, records, os.getppid())
    in_experiment("first")
    assert prepare.main(TINY) == 2
    line = _one_line(capsys)
    assert message in line and "params.yaml may hold its parameters now" in line
    assert not (project / "data").exists()


def test_outside_the_workspace_and_outside_experiments_nothing_is_claimed(project, in_experiment, monkeypatch):
    _dvc_records(project, "someone-else", os.getpid())  # records that would stop an experiment in the workspace
    monkeypatch.setenv("DVC_EXP_NAME", "queued")
    monkeypatch.setenv("DVC_ROOT", str(project.parent))  # a queued experiment runs in a folder of its own
    assert prepare.main(TINY) == 0
    monkeypatch.delenv("DVC_EXP_NAME")  # `dvc repro`, or a stage run by hand
    assert prepare.main(TINY) == 0
    assert not (project / workspace.CLAIM).exists()
