"""The phase diagram (cells, window, d sweep) and the report of every claim, on the tiny synthetic pipeline run
through the stages' real entry points."""

import json
import math
import os
import re
import shutil

import numpy as np
import pandas as pd
import pytest
from mlflow import MlflowClient

from pipelines import evaluate, gradient_flow, one_step, phase, phase_diagram, prepare, report
from tests.helpers import TINY, published_runs, throwaway_project
from toksel.report.render_check import BROWSERS, render
from toksel.report.render_check import main as render_check
from toksel.theory.phase import edge_factor, fit_power_law, measured_window, predicted_window

# The cells follow their flows as the gradient_flow stage of TINY does (its horizon, the default tolerance).
GRID = ["phase.eta0=[40]", "phase.d=[64,256]", "phase.horizon=1e4", "phase.tolerance=1e-3"]


def test_the_window_is_the_range_where_the_claim_holds_with_its_edges_bracketed():
    window = measured_window(np.array([80.0, 10, 20, 40, 160]), np.array([False, False, True, True, False]))
    assert (window.low, window.high, window.below, window.above) == (20, 40, 10, 80)
    assert window.holding == 2 and window.contiguous
    assert window.edge("low") == pytest.approx(math.sqrt(200)) and window.edge("high") == pytest.approx(math.sqrt(3200))
    at_the_end = measured_window(np.array([10.0, 20]), np.array([True, True]))
    assert at_the_end.edge("low") is None and at_the_end.edge("high") is None  # the grid does not bracket them
    gapped = measured_window(np.array([1.0, 2, 3]), np.array([True, False, True]))
    assert not gapped.contiguous and gapped.holding == 2
    assert measured_window(np.array([1.0, 2]), np.array([False, False])).low is None


def test_the_scale_argument_and_the_power_law_fit():
    low, high = predicted_window(mean_abs_alpha=0.01, d=400)
    assert (low, high) == pytest.approx((10.0, 200.0))  # 2 / (0.01 * 20) and 2 / 0.01
    assert edge_factor(5.0, 10.0) == edge_factor(20.0, 10.0) == 2.0 and edge_factor(None, 1.0) is None
    d = np.array([64.0, 256, 1024])
    law = fit_power_law(d, 3 * d**-0.5)
    assert (law.slope, law.prefactor, law.r) == pytest.approx((-0.5, 3.0, -1.0))
    assert math.isnan(fit_power_law(np.array([64.0]), np.array([1.0])).slope)


@pytest.fixture(scope="module")
def reported(tmp_path_factory):
    """The four theory stages, two phase cells, the phase diagram and the report, in one throw-away project."""
    with throwaway_project(tmp_path_factory) as project:
        for module in (prepare, one_step, gradient_flow, evaluate):
            assert module.main(TINY) == 0
        for d in (64, 256):
            assert phase.main([*TINY, *GRID, f"model.d={d}"]) == 0
        assert phase_diagram.main([*TINY, *GRID]) == 0
        assert report.main([*TINY, *GRID]) == 0
        yield project


def test_a_phase_cell_records_selection_max_margin_and_the_one_step_error(reported):
    cell = json.loads((reported / "results" / "phase" / "d64" / "metrics.json").read_text())["eta40"]["seed0"]
    assert (cell["d"], cell["eta0"]) == (64, 40)
    for name in ("selection_fraction", "cos_max_margin", "one_step_orthogonal_ratio", "one_step_slope_rel_error"):
        assert cell[name] is not None and math.isfinite(cell[name])
    # At d = 256 and eta0 = 40 the cell is the one_step and gradient_flow stages of TINY, run again.
    again = json.loads((reported / "results" / "phase" / "d256" / "metrics.json").read_text())["eta40"]["seed0"]
    flow = json.loads((reported / "results" / "gradient_flow" / "synthetic" / "seed0" / "metrics.json").read_text())
    first_step = json.loads((reported / "results" / "one_step" / "synthetic" / "seed0" / "metrics.json").read_text())
    assert again["selection_fraction"] == flow["selection_fraction"]
    assert again["cos_max_margin"] == pytest.approx(flow["cos_max_margin"], rel=1e-9)
    assert again["one_step_orthogonal_ratio"] == pytest.approx(first_step["orthogonal_ratio"], rel=1e-12)


def test_the_phase_diagram_gathers_the_grid_and_fits_the_d_sweep(reported):
    out = reported / "results" / "phase_diagram"
    grid = pd.read_csv(out / "grid.csv")
    assert sorted(grid["d"]) == [64, 256] and set(grid["eta0"]) == {40}
    error = pd.read_csv(out / "one_step_error.csv")
    metrics = json.loads((out / "metrics.json").read_text())
    expected = np.log(error["one_step_orthogonal_ratio"]).diff().iloc[1] / np.log(4)  # two points: their slope
    assert metrics["one_step_error_slope"] == pytest.approx(expected)
    assert metrics["cells"] == 2 and metrics["predicted_high"] == pytest.approx(2 / metrics["mean_abs_alpha_important"])
    for figure in ("selection.png", "cos_max_margin.png", "one_step_error.png"):
        assert (out / figure).stat().st_size > 10_000
    assert "| 64 |" in (out / "summary.md").read_text()


def test_a_missing_cell_or_non_assumption1_data_is_a_clear_error(reported, capsys, monkeypatch):
    monkeypatch.chdir(reported)
    assert phase_diagram.main([*TINY, "phase.eta0=[40,80]", "phase.d=[64]"]) == 2
    assert "results/phase/d64/metrics.json has no cell eta0 = 80 for seed 0: run the phase stage again" in (
        capsys.readouterr().err)
    assert phase_diagram.main([*TINY, "phase.eta0=[40]", "phase.d=[32]"]) == 2
    assert "results/phase/d32/metrics.json is missing: run the phase@32 stage first" in capsys.readouterr().err
    assert phase.main([*TINY, "dataset=synthetic_independent"]) == 2
    assert "is not assumption1 synthetic data" in capsys.readouterr().err
    assert phase.main([*TINY, "phase.d=[]"]) == 2
    assert "phase.d = [] must be non-empty" in capsys.readouterr().err


def test_the_report_has_every_claim_with_its_verdict_and_says_what_did_not_run(reported):
    text = (reported / "results" / "report" / "report.md").read_text()
    metrics = json.loads((reported / "results" / "report" / "metrics.json").read_text())
    rows = [line for line in text.split("## How each verdict rule is calibrated")[0].splitlines()
            if line.startswith("| ") and not line.startswith("| claim")]
    assert len(rows) == metrics["claims"] + metrics["ours"] + metrics["exploratory"] + metrics["described"]
    verdicts = [row.split(" | ")[6] for row in rows]
    assert metrics["claims_held"] + metrics["ours_held"] == verdicts.count("holds")
    assert metrics["claims_failed"] + metrics["ours_failed"] == verdicts.count("**fails**")
    assert metrics["claims_inconclusive"] + metrics["ours_inconclusive"] == verdicts.count("inconclusive")
    synthetic = [row for row in rows if row.split(" | ")[2] == "synthetic" and "eta0" not in row]
    assert {"Lemma 4.1", "Lemma 4.2", "Lemma 4.4", "Theorem 4.3"} == {row[2:].split(":")[0] for row in synthetic}
    # One seed (TINY): a value and no interval, so no claim can hold or fail; its control the same.
    assert all("(one value: no interval)" in row and row.split(" | ")[6] == "inconclusive" for row in synthetic)
    # Each claim links to its family's row of the calibration table (that stage has not run here).
    assert "[one_step](#calibration-one-step) (not run)" in rows[0]
    assert "The calibration stage has not run" in text
    # The theory stage's one seed and the two phase cells each checked their steps against halved ones.
    assert "Every gradient-flow run follows the flow: each of the 3 runs" in text
    # Only the theory stages ran on synthetic data: the rest says so, naming the stage to run.
    assert "not run (evaluate@imdb)" in text and "not run (evaluate@synthetic_independent)" in text
    assert "not run (ablation_report)" in text
    assert metrics["claims_not_run"] + metrics["ours_not_run"] == sum("not run (" in verdict for verdict in verdicts)
    phase_rows = text.split("## Beyond the paper")[1].split("## How each verdict rule")[0]
    assert "not run (" not in phase_rows and "slope " in phase_rows
    assert (reported / "results" / "report" / "verdicts.png").stat().st_size > 10_000
    for link in re.findall(r"!\[[^]]*\]\(([^)]+)\)", text):  # the Markdown's figures resolve from its folder
        assert (reported / "results" / "report" / link).resolve().is_file(), link


def test_the_html_report_is_self_contained_and_an_artifact_of_the_pipeline_run(reported):
    page = (reported / "results" / "report" / "report.html").read_text()
    figures = re.findall(r"<img [^>]*src='([^']*)'", page)
    assert len(figures) == len(re.findall(r"!\[", (reported / "results" / "report" / "report.md").read_text()))
    assert figures and all(src.startswith("data:image/png;base64,") for src in figures)
    runs = published_runs(reported, "tags.stage = 'report'")
    client = MlflowClient(f"sqlite:///{reported / 'mlflow.db'}")
    parent = runs[0].data.tags["mlflow.parentRunId"]
    assert {"report.md", "report.html"} <= {artifact.path for artifact in client.list_artifacts(parent)}


def test_runs_are_named_for_what_they_are_and_only_a_dataset_s_runs_carry_one(reported):
    runs = published_runs(reported)
    named = {run.info.run_name: run.data.tags for run in runs if "toksel.trial" not in run.data.tags}
    assert {"gradient_flow synthetic seed 0", "evaluate synthetic", "phase synthetic d 64", "phase synthetic d 256",
            "phase_diagram", "report"} <= set(named)
    assert "dataset" not in named["report"] and "dataset" not in named["phase_diagram"]
    assert named["evaluate synthetic"]["dataset"] == "synthetic"
    parents = [name for name, tags in named.items() if tags.get("stage") == "pipeline"]
    assert len(parents) == 1 and parents[0].startswith("workspace ")  # not a DVC experiment


@pytest.mark.skipif(not any(shutil.which(name) for name in BROWSERS) and not os.environ.get("TOKSEL_CHROMIUM"),
                    reason="no Chromium (`make chromium` installs it; .ci/run does)")
def test_the_html_report_renders_in_headless_chromium_with_every_image(reported, tmp_path):
    page = reported / "results" / "report" / "report.html"
    rendering = render(page, screenshot=tmp_path / "page.png")
    assert rendering.images_in_source > 0 and rendering.ok, rendering
    assert (tmp_path / "page.png").stat().st_size > 10_000
    broken = tmp_path / "broken.html"  # a figure that is not embedded does not load: the check can fail
    broken.write_text(page.read_text().replace("data:image/png;base64,", "missing.png#", 1))
    assert render(broken).broken == 1


def test_the_render_check_says_in_one_line_what_is_missing(tmp_path, capsys):
    assert render_check([str(tmp_path / "report.html")]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0
    (tmp_path / "report.txt").write_text("no page here")
    assert render_check([str(tmp_path / "report.txt")]) == 2
    assert "not an HTML page" in capsys.readouterr().err


def test_every_table_escapes_its_pipes_and_every_missing_number_says_so():
    from toksel.report.markdown import number, table

    assert table(["quantity", "value"], [["|p|", 1.5]]) == ["| quantity | value |", "|---|---|", "| \\|p\\| | 1.5 |"]
    assert [number(None), number(float("nan")), number(0.12345), number(None, missing="not measured")] == [
        "n/a", "n/a", "0.123", "not measured"]
