"""The phase diagram (cells, window, d sweep) and the report of every claim, on the tiny synthetic pipeline run
through the stages' real entry points."""

import dataclasses
import html
import json
import math
import os
import re
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest
from mlflow import MlflowClient

from pipelines import evaluate, gradient_flow, one_step, phase, phase_diagram, prepare, report
from tests.helpers import ROOT, TINY, dvc, published_runs, throwaway_project
from toksel import claims_diff as diff
from toksel.claims.catalogue import BY_ID, assess, measure
from toksel.experiments_table import narrowed
from toksel.models.reading import Reading
from toksel.report.claim_table import read_claim_table
from toksel.report.document import blocks
from toksel.report.forest import CONTROL_COLOURS, verdicts_figure
from toksel.report.header import prepared_rows, verdict, warning
from toksel.report.page import page as html_page
from toksel.report.readings import ShownReview, readings_section
from toksel.report.render_check import BROWSERS, render
from toksel.report.render_check import main as render_check
from toksel.runtime import records
from toksel.runtime.config import load_config
from toksel.runtime.records import git_sha
from toksel.summaries.claims import HEADER, NOT_YET, Row, claims_table
from toksel.summaries.shading import LEGEND, SHADE_CAP, shade
from toksel.theory.phase import edge_factor, factor_range, fit_power_law, measured_window, predicted_window

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


def test_an_edge_read_off_the_grid_carries_its_bracket_in_its_interval():
    """Five seeds on the same grid cells: a zero-width interval over the seeds, but the grid's bracket (a factor 2
    between cells) spans sqrt 2 either side of its middle, which straddles a threshold of 4 here."""
    from pipelines.phase_diagram import with_brackets

    window = measured_window(np.array([10.0, 20, 40, 80]), np.array([False, True, True, False]))
    assert window.bracket("low") == (10, 20) and window.bracket("high") == (40, 80)
    assert factor_range((10, 20), 3.0) == pytest.approx((10 / 3, 20 / 3))
    assert factor_range((10, 20), 15.0) == pytest.approx((1.0, 1.5))  # the prediction inside the bracket
    claim = BY_ID["phase_lower_edge"]
    middle = edge_factor(window.edge("low"), 3.75)
    runs = {seed: {"phase": {"low_edge_factor": middle, "control_low_edge_factor": 9.0}} for seed in range(5)}
    least, most = factor_range((10, 20), 3.75)
    bracketed = with_brackets(measure(claim, "synthetic", runs), [least] * 5, [most] * 5)
    assert bracketed.bounds == pytest.approx((middle, least, most)) and least < 4 < most
    config = load_config([], ROOT / "params.yaml")
    assert assess(claim, bracketed, config).verdict == "inconclusive"  # it was `holds` on the zero-width interval
    assert assess(claim, measure(claim, "synthetic", runs), config).verdict == "holds"


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
    for name in ("selection_fraction", "cos_max_margin_selected", "one_step_orthogonal_ratio",
                 "one_step_slope_rel_error"):
        assert cell[name] is not None and math.isfinite(cell[name])
    # At d = 256 and eta0 = 40 the cell is the one_step and gradient_flow stages of TINY, run again.
    again = json.loads((reported / "results" / "phase" / "d256" / "metrics.json").read_text())["eta40"]["seed0"]
    flow = json.loads((reported / "results" / "gradient_flow" / "synthetic" / "seed0" / "metrics.json").read_text())
    first_step = json.loads((reported / "results" / "one_step" / "synthetic" / "seed0" / "metrics.json").read_text())
    assert again["selection_fraction"] == flow["selection_fraction"]
    assert again["cos_max_margin_selected"] == pytest.approx(flow["cos_max_margin_selected"], rel=1e-9)
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
    for figure in ("selection.png", "cos_max_margin_selected.png", "one_step_error.png"):
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
    claims = text.split("## How a claim is judged")[1].split("## How each verdict rule is calibrated")[0]
    rows = [line for line in claims.splitlines() if line.startswith("| ") and not line.startswith("| claim")]
    shown = sum(metrics[f"{origin}{kind}"] for origin in ("claims", "ours") for kind in ("", "_not_counted",
                                                                                         "_not_run"))
    assert len(rows) == shown + metrics["exploratory"] + metrics["transient"] + metrics["described"]
    cells = [row[2:-2].split(" | ") for row in rows]
    counted = [cells[6] for cells in cells if cells[-2] == "yes"]
    assert len(counted) == metrics["claims"] + metrics["ours"]
    assert metrics["claims_held"] + metrics["ours_held"] == counted.count("holds")
    assert metrics["claims_failed"] + metrics["ours_failed"] == counted.count("**fails**")
    verdicts = [cells[6] for cells in cells]
    # One seed (TINY): no interval, so no p-value for the error control and no calibration here: nothing counts, and
    # each row says why; every row says what the ledger knows of its rule (this throw-away project has no history).
    assert all(cells[-2].startswith("no: ") for cells in cells) and all(cells[-1] == "no history" for cells in cells)
    synthetic = [row for row in rows if row.split(" | ")[2] == "synthetic" and "eta0" not in row
                 and "not run (margins)" not in row]  # ours on synthetic: the margins stage did not run here
    assert {"Lemma 4.1", "Lemma 4.2", "Lemma 4.4", "Theorem 4.3"} == {row.split("` ")[1].split(":")[0]
                                                                       for row in synthetic}
    # One seed (TINY): a value and no interval, so no claim can hold or fail; its control the same.
    assert all("(one value: no interval)" in row and row.split(" | ")[6] == "inconclusive" for row in synthetic)
    # Each claim links to its family's row of the calibration table (that stage has not run here).
    assert "[one_step](#calibration-one-step) (not calibrated on this dataset)" in rows[0]
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
    # The stage's own figure, written in the same run (its file in place only at the stage's end), is shown.
    assert "results/report/verdicts.png)" in text
    for link in re.findall(r"!\[[^]]*\]\(([^)]+)\)", text):  # the Markdown's figures resolve from its folder
        assert (reported / "results" / "report" / link).resolve().is_file(), link


def test_the_claims_table_has_every_row_of_the_report_and_diff_names_what_moved(reported, tmp_path, monkeypatch,
                                                                               capsys):
    text = (reported / "results" / "report" / "claims.csv").read_text()
    table = read_claim_table(text)
    metrics = json.loads((reported / "results" / "report" / "metrics.json").read_text())
    shown = sum(metrics[f"{origin}{kind}"] for origin in ("claims", "ours")
                for kind in ("", "_not_counted", "_not_run"))
    assert len(table) == shown + metrics["exploratory"] + metrics["transient"] + metrics["described"]
    assert table["lemma41_linear", "synthetic"]["verdict"] == "inconclusive"  # one seed: no interval
    assert table["lemma41_linear", "imdb"]["verdict"] == "not run"
    # Each verdict says the profile that judged it; the models with positions also their size.
    config = load_config([])
    assert table["lemma41_linear", "synthetic"]["profile"] == config.profile
    sequence_rows = [row for (claim, _), row in table.items() if claim.startswith("pair_")]
    assert sequence_rows and all(row["profile"] == f"{config.profile}, sequence.scale {config.sequence.scale}"
                                 for row in sequence_rows)
    # A run committed, then the same table with one verdict and one value moved in the workspace.
    monkeypatch.chdir(tmp_path)
    subprocess.run(["git", "init", "-q"], check=True)
    dvc(tmp_path, "init", "-q")
    (tmp_path / "results" / "report").mkdir(parents=True)
    (tmp_path / diff.TABLE).write_text(text)
    subprocess.run(["git", "add", "-A"], check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "run"], check=True)
    frame = pd.read_csv(tmp_path / diff.TABLE)
    frame.loc[(frame["claim"] == "lemma44_selection") & (frame["data"] == "synthetic"), "verdict"] = "holds"
    frame.loc[(frame["claim"] == "lemma41_linear") & (frame["data"] == "synthetic"), "value"] = 0.5
    frame.to_csv(tmp_path / diff.TABLE, index=False)
    assert diff.main([]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "2 claim rows moved, HEAD -> workspace (verdict moves first):"
    assert lines[2].split()[:5] == ["lemma44_selection", "synthetic", "inconclusive", "->", "holds"]
    assert lines[3].split()[:3] == ["lemma41_linear", "synthetic", "inconclusive"] and lines[3].endswith("-> 0.5")
    assert max(map(len, lines)) < 120
    assert diff.main(["HEAD", "HEAD"]) == 0 and capsys.readouterr().out.startswith("no claim moved")
    assert diff.main(["no-such-experiment"]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and error[0].startswith(f"diff: cannot read {diff.TABLE} at 'no-such-experiment'")


def test_the_report_opens_with_the_verdict_and_what_the_run_was_and_warns_of_a_small_run(reported, monkeypatch):
    out = reported / "results" / "report"
    full = (out / "report.md").read_text()
    first = full.split("## The verdict, claim by claim")[0]  # the first lines, before the claims one by one
    assert first.startswith("# toksel: the paper's claims in our runs\n\n**Verdict.** ")
    assert "A small run" not in full and "class='warning'" not in (out / "report.html").read_text()
    assert "**The run.** Profile full: the paper's sizes for the one-layer model; the ablations at d 256 on reviews " \
           "cut to 64 tokens, at most 6,000 training rows: not the paper's (sequence.scale: cpu). Seeds 0 (the " \
           f"theory, the phase diagram); the training and the ablations on 0. Commit {git_sha()}; DVC experiment: " \
           "none" in first
    # TINY's d (model.d=256 on the command line) and prepare's rows of its synthetic data (80 / 40); the datasets
    # TINY did not prepare say so.
    assert "| synthetic | synthetic (assumption1) | 2 | 256 | 80 | 40 | data (a fresh draw of the generator) and " \
           "initialisation |" in first
    assert "| imdb | stanfordnlp/imdb | 2 | 256 | not prepared | not prepared | data (a bootstrap resample of the " \
           "training rows) and initialisation |" in first

    monkeypatch.setenv("DVC_EXP_NAME", "eager-pika")
    monkeypatch.setattr(records, "git_sha", lambda: "0123abc")  # the commit a run is tagged with (a checkout's)
    assert report.main([*TINY, *GRID, "profile=quick"]) == 0
    quick, page = (out / "report.md").read_text(), (out / "report.html").read_text()
    assert quick.split("\n\n")[1].startswith("> **A small run: its verdicts are not the paper's.** Profile quick")
    assert page.index("<blockquote>\n<p><strong>A small run") < page.index("<p><strong>Verdict.</strong>")
    assert "Commit 0123abc; DVC experiment: eager-pika." in quick
    monkeypatch.delenv("DVC_EXP_NAME")
    assert report.main([*TINY, *GRID]) == 0  # the module's other tests read the full profile's report
    assert "A small run" not in (out / "report.md").read_text()


def test_the_html_report_is_self_contained_and_an_artifact_of_the_pipeline_run(reported):
    page = (reported / "results" / "report" / "report.html").read_text()
    figures = re.findall(r'<img src="([^"]*)"', page)
    assert len(figures) == len(re.findall(r"!\[", (reported / "results" / "report" / "report.md").read_text()))
    assert figures and all(src.startswith("data:image/png;base64,") for src in figures)
    # A table of contents after the title: a link to each section (##), each reaching its heading.
    sections = re.findall(r"(?m)^## (.+)$", (reported / "results" / "report" / "report.md").read_text())
    contents = re.findall(r"<li><a href='#([^']+)'>([^<]+)</a></li>", page.split("</nav>")[0])
    assert [text for _, text in contents] == [html.escape(section, quote=True) for section in sections]
    assert all(f'<h2 id="{anchor}">' in page for anchor, _ in contents) and len(contents) > 5
    runs = published_runs(reported, "tags.stage = 'report'")
    client = MlflowClient(f"sqlite:///{reported / 'mlflow.db'}")
    parent = runs[0].data.tags["mlflow.parentRunId"]
    assert {"report.md", "report.html"} <= {artifact.path for artifact in client.list_artifacts(parent)}


def test_runs_are_named_for_what_they_are_and_only_a_dataset_s_runs_carry_one(reported):
    runs = published_runs(reported)
    named = {run.info.run_name: run.data.tags for run in runs if "toksel.trial" not in run.data.tags}
    parents = [name for name, tags in named.items() if tags.get("stage") == "pipeline"]
    assert len(parents) == 1 and parents[0].startswith("workspace (full) ")  # not a DVC experiment
    named = {name.removesuffix(f" [{parents[0]}]"): tags for name, tags in named.items()}  # the pipeline's name
    assert {"gradient_flow synthetic seed 0", "evaluate synthetic", "phase synthetic d 64", "phase synthetic d 256",
            "phase_diagram", "report"} <= set(named)
    assert "dataset" not in named["report"] and "dataset" not in named["phase_diagram"]
    assert named["evaluate synthetic"]["dataset"] == "synthetic"


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
    from toksel.summaries.markdown import number, table

    assert table(["quantity", "value"], [["|p|", 1.5]]) == ["| quantity | value |", "|---|---|", "| \\|p\\| | 1.5 |"]
    assert [number(None), number(float("nan")), number(0.12345), number(None, missing="not measured")] == [
        "n/a", "n/a", "0.123", "not measured"]


def _lemma41(data: str, controls: list[float]) -> Row:
    """Lemma 4.1's linearity measured on three seeds (it holds: r 0.999), with the given control values."""
    claim = BY_ID["lemma41_linear"]
    runs = {seed: {"step": {"pearson_r": 0.999 - 0.0002 * seed, "control_pearson_r": control}}
            for seed, control in enumerate(controls)}
    return Row(assess(claim, measure(claim, data, runs), load_config([], ROOT / "params.yaml")), data, "evaluate")


def test_a_stage_summary_leaves_the_calibration_to_the_report_which_follows_it():
    row = _lemma41("a", [0.0, 0.01, -0.01])
    assert f"({NOT_YET})" in "\n".join(claims_table([row]))  # pair_report, margins: written before calibrate runs
    assert "(not calibrated on this dataset)" in "\n".join(claims_table([row], []))  # the report, calibrate not run


def test_a_control_that_fails_as_it_must_is_shown_as_good_and_one_that_holds_as_bad():
    behaved, passed = _lemma41("a", [0.01, -0.02, 0.0]), _lemma41("b", [0.998, 0.999, 0.9995])
    assert behaved.assessment.verdict == passed.assessment.verdict == "holds"
    assert (behaved.assessment.control_verdict, passed.assessment.control_verdict) == ("fails", "holds")
    table = blocks({"The theory": [behaved, passed]}, [], [], [])[0].table
    control = HEADER.index("control's verdict")
    assert [row[control] for row in table.rows] == ["fails, as it must", "holds: it must fail"]
    assert all(row[0].startswith("`lemma41_linear` Lemma 4.1:") for row in table.rows)  # the claim's id in the code
    page = html_page(str(table), "claims", {})  # report.html: the Markdown made HTML, each verdict cell coloured
    assert '<td class="good">fails, as it must</td>' in page and '<td class="bad">holds: it must fail</td>' in page
    assert page.count('<td class="holds">holds</td>') == 2
    # The forest plot: each control's hollow marker in the colour of how it behaved.
    figure = verdicts_figure([("a", behaved.assessment), ("b", passed.assessment)])
    hollow = [line.get_color() for line in figure.axes[0].lines if line.get_marker() == "o"
              and line.get_markerfacecolor() == "white"]
    assert hollow == [CONTROL_COLOURS[True], CONTROL_COLOURS[False]]
    # The verdict in words names the control that held.
    controls = next(item for item in verdict([("a", behaved.assessment), ("b", passed.assessment)]).items
                    if item.label == "Controls")
    assert controls.text.startswith("1 of the 2 controls of the judged claims failed as they must; 1 held where it "
                                    "must fail") and controls.text.endswith(": lemma41_linear (b).")


def test_the_verdict_in_words_names_the_claims_that_do_not_hold():
    config = load_config([], ROOT / "params.yaml")
    holds = _lemma41("a", [0.0, 0.01, -0.01]).assessment
    gap = BY_ID["accuracy_gap"]
    runs = {seed: {"trained": {"test_accuracy": 0.70 - 0.01 * seed}, "untrained": {"test_accuracy": 0.80}}
            for seed in (0, 1, 2)}
    fails = assess(gap, measure(gap, "imdb", runs), config)
    assert fails.verdict == "fails"
    said = verdict([("a", holds), ("imdb", fails)])
    assert said.lead == ("The paper's claims hold in part: 1 of the 2 judged here hold on every dataset they were "
                         "judged on; these do not: trained embeddings beat random frozen ones (fails on imdb).")
    labels = {item.label: item for item in said.items}
    assert labels["Hold"].claims == [f"Lemma 4.1: {holds.claim.statement} (a)"]
    assert labels["Do not hold"].claims[0].startswith("Rebuttal: trained embeddings beat random frozen ones: fails "
                                                      "on imdb (-0.11 [")
    assert verdict([("a", holds)]).lead.startswith("The paper's claims hold: each of the 1 judged here holds")
    assert verdict([("imdb", fails)]).lead == ("No claim of the paper judged here (1) holds on every dataset it was "
                                               "judged on; these do not: trained embeddings beat random frozen ones "
                                               "(fails on imdb).")
    assert verdict([]).lead.startswith("No claim of the paper has been judged yet")
    # A row that fails by its own rule and is inconclusive under the error control is unsettled, and says both.
    controlled = dataclasses.replace(fails, verdict="inconclusive", own_verdict="fails")
    open_row = verdict([("a", holds), ("imdb", controlled)])
    assert "unsettled (inconclusive under the error control" in open_row.lead
    unsettled = {item.label: item for item in open_row.items}["Unsettled"]
    assert "inconclusive on imdb (-0.11 [" in unsettled.claims[0] and "; fails by its own rule)" in unsettled.claims[0]
    assert warning("full") == warning("paper") == ""  # the paper-scale profile is no small run
    assert "profiles/quick.yaml" in warning("quick") and "`make quick`" in warning("quick")


def test_prepares_rows_are_read_per_draw(tmp_path):
    folder = tmp_path / "prepare" / "synthetic"
    folder.mkdir(parents=True)
    (folder / "metrics.json").write_text(json.dumps({"seed0": {"n_train": 80, "n_test": 1200},
                                                     "seed1": {"n_train": 82, "n_test": 1200}}))
    assert prepared_rows("synthetic", tmp_path) == ("80-82", "1,200")
    assert prepared_rows("imdb", tmp_path) == ("not prepared", "not prepared")


def _review(weights: list[float], arm: str, row: int = 0) -> ShownReview:
    weights = np.asarray(weights)
    reading = Reading(weights, np.asarray(0.0), np.array([0.5, 0.5]))
    return ShownReview("imdb", row, 1, 2, "right", [f"w{i}" for i in range(len(weights))], {arm: reading})


def _alphas(page: str, caption_row: int) -> list[float]:
    """The background alpha of each token of the review shown for test row `caption_row`."""
    section = page.split(f"test review {caption_row}:")[1].split("###")[0]
    return [float(alpha) for alpha in re.findall(r"rgba\(33, 102, 172, ([0-9.]+)\)", section)]


def test_attention_is_shaded_against_uniform_on_one_scale_for_every_review_and_arm():
    assert shade(0.25, 4) == 0.0 and shade(0.1, 4) == 0.0  # uniform and below: no shade
    assert shade(0.5, 4) == pytest.approx(math.log(2) / math.log(SHADE_CAP))  # twice uniform
    assert shade(0.9, 40) == 1.0  # beyond the cap: the darkest
    assert shade(0.2, 10) == shade(0.5, 4)  # the same w T, the same shade, whatever the review's length
    uniform = _review([0.25] * 4, "untrained", row=1)
    peaked = _review([0.85, 0.05, 0.05, 0.05], "trained", row=2)
    longer = _review([0.2] + [0.8 / 9] * 9, "trained", row=3)  # twice uniform on w0, as w0 of a review of 4 at 0.5
    page = readings_section([uniform, peaked, longer])
    assert _alphas(page, 1) == [0.0] * 4  # a uniform reading is not shaded, however its largest weight compares
    darkest, *rest = _alphas(page, 2)
    assert darkest == pytest.approx(shade(0.85, 4), abs=0.005) and darkest > 0.5 and rest == [0.0] * 3
    assert _alphas(page, 3)[0] == pytest.approx(math.log(2) / math.log(SHADE_CAP), abs=0.005)
    assert "class='legend'" in page and f"the darkest from {SHADE_CAP:g} x uniform" in page
    assert "| trained | negative (0.50); w0 (0.85, 3.4 x)" in page  # report.md names the largest weights too
    shown = html_page(page, "readings", {})  # report.html keeps every shade
    assert shown.count("class='token'") == 4 + 4 + 10 + len(LEGEND)
    odd = ShownReview("imdb", 4, 1, 2, "right", ["<cls>", "*", "a|b", "`x"], uniform.readings)
    words = re.findall(r"<span class='token'[^>]*>(.*?)</span>", html_page(readings_section([odd]), "odd", {}))
    assert words[-4:] == ["&lt;cls&gt;", "*", "a|b", "`x"]  # words that look like markup are shown as they are


def _shown_row(name: str | None, rev: str, seeds: list[int], held: float, eta0: float = 40.0) -> dict:
    """A row of `dvc exp show --json`, as DVC 3 writes it."""
    return {"rev": rev, "name": name, "error": None, "experiments": None,
            "data": {"params": {"params.yaml": {"data": {"profile": "quick", "base": {"seeds": seeds},
                                                         "one_step": {"eta0": eta0}}}},
                     "metrics": {"results/report/verdicts.json": {"data": {"held": held, "failed": 0.0}}}}}


def test_experiments_are_compared_among_themselves_a_row_per_value_that_differs():
    baseline = _shown_row(None, "a" * 40, [0, 1, 2, 3, 4], 12.0)
    baseline["experiments"] = [{"name": name, "executor": None, "revs": [_shown_row(name, rev * 40, [0, 1], held,
                                                                                    eta0)]}
                               for name, rev, held, eta0 in (("quick-1", "b", 5.0, 40.0), ("eta0-50", "c", 4.0, 50.0))]
    lines = narrowed([_shown_row(None, "workspace", [0, 1, 2, 3, 4], 12.0), baseline])
    # Two experiments: compared with each other alone, so the seeds both changed against the baseline are no row.
    assert lines[0].split() == ["quick-1", "eta0-50"]
    assert [line.split() for line in lines[1:]] == [["one_step.eta0", "40", "50"], ["held", "5", "4"]]
    assert max(map(len, lines)) < 120
    # One experiment: the workspace and the baseline join it.
    baseline["experiments"] = baseline["experiments"][:1]
    lines = narrowed([_shown_row(None, "workspace", [0, 1, 2, 3, 4], 12.0), baseline])
    assert lines[0].split() == ["workspace", "aaaaaaa", "quick-1"]
    assert lines[1].split()[0] == "base.seeds" and lines[2].split() == ["held", "12", "12", "5"]


def test_an_experiment_running_in_the_workspace_is_named_so_and_not_shown_again_as_the_workspace():
    """While `dvc exp run` runs in the workspace, DVC shows its values twice: as the workspace's row and as the
    running experiment's (executor state `running`, name `workspace`)."""
    running = _shown_row("eta0-50", "workspace", [0, 1], 4.0, 50.0)
    baseline = _shown_row(None, "a" * 40, [0, 1, 2, 3, 4], 12.0)
    baseline["experiments"] = [{"name": "eta0-50", "executor": {"state": "running", "name": "workspace"},
                                "revs": [running]}]
    lines = narrowed([_shown_row(None, "workspace", [0, 1], 4.0, 50.0), baseline])
    assert lines[0].split() == ["aaaaaaa", "eta0-50", "(running)"]
    assert "workspace" not in lines[0]
    baseline["experiments"][0]["executor"] = {"state": "running", "name": "dvc-task-1"}  # in a queue's folder
    assert narrowed([_shown_row(None, "workspace", [0, 1, 2, 3, 4], 12.0), baseline])[0].split() == [
        "workspace", "aaaaaaa", "eta0-50", "(running)"]
