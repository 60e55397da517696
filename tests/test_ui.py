"""`make ui` opens the MLflow UI on the toksel experiment's runs table, checked in headless Chromium; the plain
experiment page (MLflow 3's GenAI overview) fails the same check."""

import shutil

import pytest

from pipelines import prepare
from tests.helpers import TINY
from toksel import ui
from toksel.render_check import BROWSERS

pytestmark = pytest.mark.skipif(not any(shutil.which(name) for name in BROWSERS), reason="no Chromium")


def test_the_ui_opens_on_the_runs_table_and_the_plain_experiment_page_does_not(project, monkeypatch, tmp_path):
    assert prepare.main(TINY) == 0  # a pipeline run and its stage's run in the store
    screenshot = tmp_path / "ui.png"
    assert ui.main(["--check", "--screenshot", str(screenshot)]) == 0
    assert screenshot.stat().st_size > 10_000
    monkeypatch.setattr(ui, "RUNS_VIEW", "#/experiments/{experiment}")  # without the model-training view
    assert ui.main(["--check"]) == 1


def test_the_ui_says_when_there_is_nothing_to_show(project, capsys):
    assert ui.main(["--check"]) == 2
    assert "holds no run of the experiment 'toksel'" in capsys.readouterr().err
