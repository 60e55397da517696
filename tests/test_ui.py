"""`make ui` opens the MLflow UI on the toksel experiment's runs table, checked in headless Chromium; the plain
experiment page (MLflow 3's GenAI overview) fails the same check."""

import shutil
import socket

import pytest

from pipelines import gradient_flow, prepare
from tests.helpers import TINY, published_runs
from toksel import ui
from toksel.report.render_check import BROWSERS

pytestmark = pytest.mark.skipif(not any(shutil.which(name) for name in BROWSERS), reason="no Chromium")


@pytest.mark.slow  # 30 to 80 s: `make test-slow`
def test_the_ui_shows_the_runs_table_and_a_metric_chart_and_the_check_can_fail(prepared, monkeypatch, tmp_path):
    assert gradient_flow.main(TINY) == 0
    published_runs(prepared)  # a pipeline run, its stages' runs, the flow's per-step curves
    screenshot = tmp_path / "ui.png"
    assert ui.main(["--check", "--screenshot", str(screenshot)]) == 0
    assert screenshot.stat().st_size > 10_000 and (tmp_path / "ui-chart.png").stat().st_size > 10_000
    with monkeypatch.context() as patch:
        patch.setattr(ui, "RUNS_VIEW", "#/experiments/{experiment}")  # without the model-training view
        assert ui.main(["--check"]) == 1
    monkeypatch.setattr(ui, "CHART_VIEW", ui.CHART_VIEW.replace('runs=["{run}"]', 'runs=["no-such-run"]'))
    assert ui.main(["--check"]) == 1  # no curve drawn


def test_the_ui_says_when_there_is_nothing_to_show_and_creates_no_store(project, capsys):
    assert ui.main(["--check"]) == 2
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
