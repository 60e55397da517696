"""Team mode end to end: PostgreSQL and the MLflow server on loopback, a tiny pipeline logging to them, the runs
read back over MLflow's REST API, then both processes stopped (MLflow by its PID, PostgreSQL by pg_ctl)."""

from __future__ import annotations

import json
import os
import stat
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from pipelines import evaluate, gradient_flow, one_step, prepare
from tests.helpers import TINY
from toksel.errors import ToksError
from tools import team_server

STAGES = {"prepare": prepare, "one_step": one_step, "gradient_flow": gradient_flow, "evaluate": evaluate}


@pytest.fixture
def postgres_installed() -> None:
    try:
        team_server.find_postgres()
    except ToksError as error:
        pytest.skip(f"no PostgreSQL, and `make postgres` could not install it: {error}")


@pytest.fixture
def team_folder(project: Path) -> Iterator[Path]:
    """A folder for the cluster and the artifacts inside the test's tmp_path.

    As root the cluster belongs to the `postgres` user, who must pass through pytest's private (0700) folders
    above tmp_path: they get search permission for others (not read) for the test's duration.
    """
    opened: list[tuple[Path, int]] = []
    if os.geteuid() == 0:
        for folder in (project, *project.parents):
            mode = stat.S_IMODE(folder.stat().st_mode)
            if not mode & stat.S_IXOTH:
                folder.chmod(mode | stat.S_IXOTH)
                opened.append((folder, mode))
    try:
        yield project / "team"
    finally:
        for folder, mode in opened:
            folder.chmod(mode)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _get(base: str, endpoint: str, **query: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{base}{endpoint}?{urllib.parse.urlencode(query)}", timeout=30) as answer:
        return json.load(answer)


def _post(base: str, endpoint: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(f"{base}{endpoint}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.load(answer)


def _check_runs_over_rest(base: str, folder: Path) -> None:
    experiment = _get(base, "/api/2.0/mlflow/experiments/get-by-name", experiment_name="toksel")["experiment"]
    assert experiment["artifact_location"].startswith("mlflow-artifacts:")  # the server stores the artifacts
    runs = _post(base, "/api/2.0/mlflow/runs/search",
                 {"experiment_ids": [experiment["experiment_id"]], "max_results": 100})["runs"]
    tags = {run["info"]["run_id"]: {tag["key"]: tag["value"] for tag in run["data"]["tags"]} for run in runs}
    parents = [run for run in runs if tags[run["info"]["run_id"]]["stage"] == "pipeline"]
    assert len(parents) == 1
    parent_id = parents[0]["info"]["run_id"]
    assert parents[0]["info"]["status"] == "FINISHED"
    stage_runs = {tags[run["info"]["run_id"]]["stage"]: run for run in runs if run is not parents[0]}
    assert sorted(stage_runs) == sorted(STAGES) and len(runs) == len(STAGES) + 1
    for run in stage_runs.values():
        assert run["info"]["status"] == "FINISHED"
        assert tags[run["info"]["run_id"]]["mlflow.parentRunId"] == parent_id
        assert "peak_memory_mb" in {metric["key"] for metric in run["data"]["metrics"]}
    flow_metrics = {metric["key"]: metric["value"] for metric in stage_runs["gradient_flow"]["data"]["metrics"]}
    assert 0 < flow_metrics["loss"] < 0.7 and flow_metrics["p_norm"] > 0

    evaluate_run = stage_runs["evaluate"]["info"]
    listed = _get(base, "/api/2.0/mlflow/artifacts/list", run_id=evaluate_run["run_id"], path="figures")
    figures = sorted(entry["path"] for entry in listed["files"])
    assert figures == ["figures/gradient_flow.png", "figures/one_step.png", "figures/token_scores.png"]
    # Uploaded through the server onto its local disk: <folder>/artifacts/<experiment>/<run>/artifacts/...
    on_disk = folder / "artifacts" / experiment["experiment_id"] / evaluate_run["run_id"] / "artifacts" / "figures"
    assert sorted(path.name for path in on_disk.iterdir()) == ["gradient_flow.png", "one_step.png", "token_scores.png"]


def test_pipeline_logs_to_the_team_server_on_postgres_and_both_stop_by_pid(
        postgres_installed: None, project: Path, team_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    port, postgres_port = team_server.free_port(), team_server.free_port()
    server = team_server.start(team_folder, port=port, postgres_port=postgres_port, timeout=90)
    pids = [server.postgres.pid, server.mlflow.pid]
    try:
        assert server.running() and server.tracking_uri == f"http://127.0.0.1:{port}"
        assert team_server.read_state(team_folder) == server
        assert psutil.Process(server.postgres.pid).username() == ("postgres" if os.geteuid() == 0 else
                                                                  psutil.Process().username())
        monkeypatch.setenv("MLFLOW_TRACKING_URI", server.tracking_uri)
        for module in STAGES.values():
            assert module.main(TINY) == 0
        _check_runs_over_rest(server.tracking_uri, team_folder)
        assert not (project / "mlflow.db").exists() and not (project / "mlartifacts").exists()
    finally:
        team_server.stop(server)
    # pg_ctl's postmaster is not our child: once down it may linger a moment as a zombie, which has exited.
    assert [pid for pid in pids if _alive(pid)] == []
    assert team_server.read_state(team_folder) is None
    assert team_server.main(["status", "--folder", str(team_folder)]) == 1


def test_cli_rejects_bad_input_with_one_line_and_exit_code_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert team_server.main(["start", "--folder", str(tmp_path), "--port", "5001", "--postgres-port", "5001"]) == 2
    assert team_server.main(["start", "--folder", str(tmp_path), "--port", "70000"]) == 2
    (tmp_path / "server.json").write_text("{not json")
    assert team_server.main(["stop", "--folder", str(tmp_path)]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 3 and all(line.startswith("team_server: ") for line in errors)
    assert "two ports" in errors[0] and "70000" in errors[1] and "server.json" in errors[2]
