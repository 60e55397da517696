"""`make ui` serves the MLflow UI on the toksel experiment's runs table, checked in headless Chromium (`make check-ui`
runs this file): the runs table shows the pipeline's run and a gradient-flow run's metric chart draws its curve; the
plain experiment page (MLflow 3's GenAI overview) fails the same check."""

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from mlflow import MlflowClient

from pipelines import gradient_flow, prepare
from tests.helpers import CHECKOUT_PATH, REFUSED, TINY, free_port, http_stub, published_runs
from toksel import ui
from toksel.report.render_check import BROWSERS, find_chromium, headless

# MLflow's page of one metric's chart (its route in the UI's code: getMetricPageRoute)
CHART_VIEW = ('#/metric?runs=["{run}"]&metric="p_norm"&experiments=["{experiment}"]&plot_metric_keys=["p_norm"]'
              "&plot_layout={{}}&x_axis=step&y_axis_scale=linear&line_smoothness=1&show_point=false")



def _look(address: str, screenshot: Path | None = None) -> str:
    """The page's DOM once loaded in headless Chromium (and its screenshot, if asked)."""
    browser = find_chromium()
    if screenshot is not None:
        headless(browser, f"--screenshot={screenshot}", "--window-size=1400,900", address)
    return headless(browser, "--dump-dom", address).stdout


@pytest.mark.slow  # 30 to 80 s: `make test-slow`
@pytest.mark.skipif(not any(shutil.which(name) for name in BROWSERS), reason="no Chromium")
def test_the_ui_shows_the_runs_table_and_a_metric_chart_and_the_check_can_fail(prepared):
    assert gradient_flow.main(TINY) == 0
    runs = published_runs(prepared)  # a pipeline run, its stages' runs, the flow's per-step curves
    flow = next(run for run in runs if run.data.tags.get("stage") == "gradient_flow")
    pipeline = next(run for run in runs if run.data.tags.get("stage") == "pipeline")
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "toksel.ui", "--port", str(port)], cwd=prepared,
                              env={**os.environ, "PYTHONPATH": CHECKOUT_PATH}, stdout=subprocess.PIPE, text=True)
    try:
        address = server.stdout.readline().split(": ", 2)[2].split(" (Ctrl-C")[0]
        for _ in range(120):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).close()
                break
            except OSError:
                time.sleep(0.5)
        shots = Path(os.environ.get("TOKSEL_UI_SCREENSHOTS", prepared))
        page = _look(address, shots / "mlflow-ui.png")
        assert "Run Name" in page and pipeline.info.run_name in page and "Detect Issues" not in page
        assert "toksel: pipelines, what differs" in page and flow.info.run_name not in page  # the parents' view
        experiment = MlflowClient(os.environ["MLFLOW_TRACKING_URI"]).get_experiment_by_name("toksel").experiment_id
        base = f"http://127.0.0.1:{port}/"
        chart = _look(base + CHART_VIEW.format(run=flow.info.run_id, experiment=experiment),
                      shots / "mlflow-ui-chart.png")
        assert "js-line" in chart and "p_norm" in chart
        # The checks can fail: the plain experiment page, and a chart of a run that is not there.
        assert "Run Name" not in _look(base + f"#/experiments/{experiment}")
        assert "js-line" not in _look(base + CHART_VIEW.format(run="no-such-run", experiment=experiment))
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert (shots / "mlflow-ui.png").stat().st_size > 10_000


def test_the_ui_says_when_there_is_nothing_to_show_and_creates_no_store(project, capsys):
    assert ui.main([]) == 2
    assert "no MLflow store at" in capsys.readouterr().err
    assert not (project / "mlflow.db").exists()  # started outside a project, it leaves nothing behind


def test_the_ui_refuses_a_port_another_program_listens_on(project, capsys):
    assert prepare.main(TINY) == 0
    published_runs(project)  # a store with a pipeline's run
    capsys.readouterr()
    with socket.socket() as other:  # another server on the port: its answers must not pass for ours
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        assert ui.main(["--port", str(port)]) == 2
    error = capsys.readouterr().err.strip()
    assert error == f"ui: port {port} is in use by another program: choose another with --port"


def _with_login(address: str, password: str) -> str:
    return address.replace("//", f"//admin:{password}@", 1)


@pytest.mark.parametrize(("password", "said"), [("s3cr3t", "the server asks who you are: set MLFLOW_TRACKING_USERNAME"),
                                                ("a@b:c", "the server asks who you are: set MLFLOW_TRACKING_USERNAME"),
                                                ("wr/ong", "no URL a client can use: give the login in MLFLOW_TRACK")])
def test_a_server_that_refuses_the_login_is_one_line_without_the_password(project, capsys, monkeypatch, password,
                                                                           said):
    with http_stub(lambda *request: REFUSED) as (address, _):
        monkeypatch.setenv("MLFLOW_TRACKING_URI", _with_login(address, password))
        assert ui.main([]) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"ui: the MLflow store {_with_login(address, '***')} failed")
    assert said in lines[0] and password not in out + err


def test_a_servers_ui_address_is_printed_without_the_login(project, capsys, monkeypatch):
    found = {"experiment": {"experiment_id": "7", "name": "toksel", "lifecycle_stage": "active", "tags": []}}
    with http_stub(lambda *request: (200, found)) as (address, _):
        monkeypatch.setenv("MLFLOW_TRACKING_URI", _with_login(address, "se:cr@t"))
        assert ui.main([]) == 0
    out = capsys.readouterr().out
    assert out == f"ui: the tracking server serves the UI: {address}/#/experiments/7?workflowType=machine_learning\n"


def test_a_damaged_store_is_one_line_that_says_how_to_rebuild_it(project, capsys):
    (project / "mlflow.db").write_text("not a database\n" * 100)
    assert ui.main([]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "is no SQLite database" in lines[0] and "python -m toksel.publish" in lines[0]
