"""Team mode end to end: PostgreSQL and the MLflow server on loopback, requests without the admin's login refused,
a tiny pipeline logging to them with it, the runs read back over MLflow's REST API, then both processes stopped
(MLflow by its PID, PostgreSQL by pg_ctl)."""

from __future__ import annotations

import base64
import json
import math
import os
import stat
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from pipelines import evaluate, gradient_flow, one_step, prepare
from tests.helpers import REFUSED, TINY, Answer, free_port, http_stub
from toksel import publish
from toksel.runtime.config import params_values
from toksel.runtime.errors import ToksError
from toksel.runtime.records import RunRecord, flatten, write_records
from tools import team_server

STAGES = {"prepare": prepare, "one_step": one_step, "gradient_flow": gradient_flow, "evaluate": evaluate}


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str

    def header(self) -> str:
        """The value of an HTTP Authorization header (basic authentication)."""
        return "Basic " + base64.b64encode(f"{self.username}:{self.password}".encode()).decode()


@pytest.fixture
def postgres_installed() -> None:
    try:
        team_server.postgres_bin()
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


def _headers(login: Credentials | None) -> dict[str, str]:
    return {} if login is None else {"Authorization": login.header()}


def _get(base: str, endpoint: str, login: Credentials | None, **query: str) -> dict[str, Any]:
    request = urllib.request.Request(f"{base}{endpoint}?{urllib.parse.urlencode(query)}", headers=_headers(login))
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.load(answer)


def _post(base: str, endpoint: str, body: dict[str, Any], login: Credentials | None) -> dict[str, Any]:
    request = urllib.request.Request(f"{base}{endpoint}", data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", **_headers(login)})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.load(answer)


def _refused(call: Any, *args: Any, **query: str) -> bool:
    """Whether the server answered the request with 401 (who are you?)."""
    try:
        call(*args, **query)
    except urllib.error.HTTPError as error:
        return error.code == 401
    return False


def _check_strangers_are_refused(base: str, admin: Credentials) -> None:
    wrong = Credentials(admin.username, admin.password[::-1])
    for login in None, wrong, Credentials("nobody", admin.password):
        assert _refused(_post, base, "/api/2.0/mlflow/experiments/create", {"name": "intruder"}, login)
        assert _refused(_post, base, "/api/2.0/mlflow/experiments/search", {"max_results": 10}, login)
        assert _refused(_get, base, "/api/2.0/mlflow/experiments/get-by-name", login, experiment_name="Default")
    assert not _refused(_get, base, "/api/2.0/mlflow/experiments/get-by-name", admin, experiment_name="Default")


def _runs(base: str, admin: Credentials) -> list[dict[str, Any]]:
    experiment = _get(base, "/api/2.0/mlflow/experiments/get-by-name", admin, experiment_name="toksel")["experiment"]
    return _post(base, "/api/2.0/mlflow/runs/search",
                 {"experiment_ids": [experiment["experiment_id"]], "max_results": 100}, admin)["runs"]


def _check_runs_over_rest(base: str, folder: Path, admin: Credentials) -> None:
    experiment = _get(base, "/api/2.0/mlflow/experiments/get-by-name", admin, experiment_name="toksel")["experiment"]
    assert experiment["artifact_location"].startswith("mlflow-artifacts:")  # the server stores the artifacts
    runs = _runs(base, admin)
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
    listed = _get(base, "/api/2.0/mlflow/artifacts/list", admin, run_id=evaluate_run["run_id"])
    figures = {"gradient_flow.png", "one_step.png", "token_scores.png", "summary.md"}
    assert figures <= {entry["path"] for entry in listed["files"]}
    # Uploaded through the server onto its local disk: <folder>/artifacts/<experiment>/<run>/artifacts/...
    on_disk = folder / "artifacts" / experiment["experiment_id"] / evaluate_run["run_id"] / "artifacts"
    assert figures <= {path.name for path in on_disk.iterdir()}


def _exports(folder: Path, capsys: pytest.CaptureFixture) -> dict[str, str]:
    capsys.readouterr()
    assert team_server.main(["env", "--folder", str(folder)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    return dict(line.removeprefix("export ").split("=", 1) for line in lines)



@pytest.mark.slow  # 30 to 80 s: `make test-slow`
def test_pipeline_logs_to_the_team_server_on_postgres_with_a_login_and_both_stop(
        postgres_installed: None, project: Path, team_folder: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture) -> None:
    state = team_server.start(team_folder, port=free_port())
    uri = state["uri"]
    try:
        postgres = next(process for process in psutil.process_iter(["cmdline"])
                        if str(team_folder / "postgres") in " ".join(process.info["cmdline"] or []))
        assert postgres.username() == ("postgres" if os.geteuid() == 0 else psutil.Process().username())
        for secret in ("credentials", "auth.ini"):
            assert stat.S_IMODE((team_folder / secret).stat().st_mode) == 0o600
        login = team_server.credentials(team_folder)
        admin = Credentials(login["username"], login["password"])
        _check_strangers_are_refused(uri, admin)

        # The stages never open the store; publishing without the login is one line, exit 2, nothing written.
        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
        for module in STAGES.values():
            assert module.main(TINY) == 0
        capsys.readouterr()
        assert publish.main([]) == 2
        error = capsys.readouterr().err.strip().splitlines()
        assert len(error) == 1 and "error code 401" in error[0]
        assert "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD" in error[0]

        exports = _exports(team_folder, capsys)  # what `eval "$(python -m tools.team_server env)"` sets
        assert exports == {"MLFLOW_TRACKING_URI": uri, "MLFLOW_TRACKING_USERNAME": admin.username,
                           "MLFLOW_TRACKING_PASSWORD": admin.password}
        for name, value in exports.items():
            monkeypatch.setenv(name, value)
        assert publish.main([]) == 0
        _check_runs_over_rest(uri, team_folder, admin)
        assert not (project / "mlflow.db").exists() and not (project / "mlartifacts").exists()
        assert team_server.main(["status", "--folder", str(team_folder)]) == 0
    finally:
        team_server.stop(team_folder)
    assert not _alive(state["mlflow_pid"]) and not postgres.is_running() or postgres.status() == psutil.STATUS_ZOMBIE
    assert team_server.state_of(team_folder) is None
    assert team_server.main(["status", "--folder", str(team_folder)]) == 1


def test_cli_rejects_bad_input_with_one_line_and_exit_code_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert team_server.main(["start", "--folder", str(tmp_path), "--port", "70000"]) == 2
    (tmp_path / "server.json").write_text("{not json")
    assert team_server.main(["stop", "--folder", str(tmp_path)]) == 2
    own = tmp_path / "own"
    (own / "postgres").mkdir(parents=True)  # a cluster made before: its credentials are read, not made
    (own / "credentials").write_text("[mlflow]\nmlflow_tracking_password = x\n")
    (own / "credentials").chmod(0o644)  # a password others may read is refused
    assert team_server.main(["start", "--folder", str(own), "--port", str(free_port())]) == 2
    (own / "credentials").write_text("[mlflow]\nmlflow_tracking_username = admin\n")
    (own / "credentials").chmod(0o600)
    assert team_server.main(["start", "--folder", str(own), "--port", str(free_port())]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 4 and all(line.startswith("team_server: ") for line in errors)
    assert "70000" in errors[0] and "server.json" in errors[1]
    assert "others may read it (mode 644)" in errors[2] and "not a credentials file" in errors[3]


def _fake_mlflow(artifacts: Path) -> Answer:
    """As much of an MLflow server's REST API as publish uses on an empty experiment: the experiment, runs made and
    read back, everything else taken (a run's artifacts go to a folder of `artifacts`)."""
    runs: dict[str, dict] = {}

    def answer(method: str, path: str, body: bytes) -> tuple[int, dict]:
        endpoint, _, query = path.removeprefix("/api/2.0/mlflow/").partition("?")
        asked = json.loads(body or b"{}")
        if endpoint == "experiments/get-by-name":
            kind = {"key": "mlflow.experimentKind", "value": "custom_model_development"}
            return 200, {"experiment": {"experiment_id": "1", "name": "toksel", "lifecycle_stage": "active",
                                        "artifact_location": artifacts.as_uri(), "tags": [kind]}}
        if endpoint == "runs/create":
            run_id = f"run{len(runs)}"
            runs[run_id] = {"run_id": run_id, "experiment_id": "1", "run_name": asked.get("run_name", ""),
                            "status": "RUNNING", "lifecycle_stage": "active",
                            "artifact_uri": (artifacts / run_id).as_uri()}
            return 200, {"run": {"info": runs[run_id], "data": {}}}
        if endpoint == "runs/get":
            return 200, {"run": {"info": runs[urllib.parse.parse_qs(query)["run_id"][0]], "data": {}}}
        if endpoint == "runs/update":
            return 200, {"run_info": runs[asked["run_id"]]}
        return 200, {}  # a batch logged, a tag set, a search that finds no run yet

    return answer


def _stage_records() -> None:
    """A stage's record with a history per epoch (its description says what the steps are) and a nested trial."""
    record = RunRecord("train synthetic seed 0", {"stage": "train", "dataset": "synthetic"}, {"seed": 0})
    with record.run():
        record.log_history(range(5), {"epoch_val_loss": [1.0, 0.9, 0.8, 0.7, 0.6]})
        with record.child("lr 0.01", {"lr": "0.01"}) as trial:
            trial.log_metrics({"test_accuracy": 0.9})
    write_records(Path("runs") / "train.json", [record], {"params_yaml": "seed: 0\n"})


def test_publishing_to_a_server_prints_its_own_line_alone_and_no_password(project: Path, tmp_path_factory,
                                                                          capsys: pytest.CaptureFixture) -> None:
    """A server's client would print two lines per run, its address with the login among them; each run's params,
    metrics and description go in one batch."""
    _stage_records()
    with http_stub(_fake_mlflow(tmp_path_factory.mktemp("server"))) as (address, asked):
        login = address.replace("//", "//admin:s3cr3t@", 1)
        assert publish.main([login]) == 0
    out, err = capsys.readouterr()
    assert out == f"publish: 3 runs in {login.replace('s3cr3t', '***')} (3 made now, 0 no record backs removed)\n"
    assert "s3cr3t" not in out + err
    parent_batches = math.ceil(len(flatten(params_values(project / "params.yaml"))) / 100)  # 100 params a batch
    assert sum("/runs/log-batch" in line for line in asked) == parent_batches + 2  # one each for the stage and trial


@pytest.mark.parametrize("password", ["a@b:c", "wr/ong"])  # refused by the server; no URL the client can use
def test_publishing_without_the_login_is_one_line_without_the_password(project: Path, password: str,
                                                                       capsys: pytest.CaptureFixture) -> None:
    _stage_records()
    with http_stub(lambda *request: REFUSED) as (address, _):
        assert publish.main([address.replace("//", f"//admin:{password}@", 1)]) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"publish: the MLflow store {address.replace('//', '//admin:***@')}")
    assert "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD" in lines[0] and password not in out + err
