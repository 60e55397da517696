"""`make plots-diff` (tools/plots_diff.py): the plots whose data moved between two revisions, drawn on a page that
needs no network; the unchanged ones named, not drawn."""

import shutil
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from tests.helpers import CHECKOUT_PATH, ROOT, dvc, dvc_environment
from toksel.report.render_check import BROWSERS, find_chromium, headless
from tools.plots_diff import SCRIPTS, VEGA, changed


def _vega(points: list[dict], revision: str) -> dict:
    return {"type": "vega", "revisions": [revision],
            "content": {"data": {"values": [{**point, "rev": revision} for point in points]}}}


def _image(path, content: bytes, revision: str) -> dict:
    path.write_bytes(content)
    return {"type": "image", "revisions": [revision], "url": str(path)}


def test_a_plot_changed_when_its_data_differ_or_a_revision_lacks_it(tmp_path):
    revisions = ["workspace", "HEAD"]
    same, moved = [{"t": "1", "p": "2"}], [{"t": "1", "p": "3"}]
    listing = {
        "flow_same": [{**_vega(same, "workspace"), "content": {"data": {"values": [
            {**same[0], "rev": "workspace"}, {**same[0], "rev": "HEAD"}]}}}],
        "flow_moved": [{**_vega(same, "workspace"), "content": {"data": {"values": [
            {**same[0], "rev": "workspace"}, {**moved[0], "rev": "HEAD"}]}}}],
        "flow_new": [_vega(same, "workspace")],
        "figure_same": [_image(tmp_path / "a1.png", b"png", "workspace"), _image(tmp_path / "a2.png", b"png", "HEAD")],
        "figure_moved": [_image(tmp_path / "b1.png", b"png", "workspace"), _image(tmp_path / "b2.png", b"gif", "HEAD")],
    }
    assert changed(listing, revisions) == ["flow_moved", "flow_new", "figure_moved"]


@pytest.mark.slow  # a tiny dvc repro, twice: about a minute
def test_the_changed_plots_are_drawn_on_a_page_that_needs_no_network(dvc_project):
    kept = ROOT / VEGA  # the scripts this checkout already fetched, if any: fetched once
    if kept.is_dir():
        shutil.copytree(kept, dvc_project / VEGA)
    dvc(dvc_project, "repro", "evaluate@synthetic")
    subprocess.run(["git", "add", "-A"], cwd=dvc_project, check=True, capture_output=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first"], cwd=dvc_project,
                   check=True)
    params = OmegaConf.load(dvc_project / "params.yaml")
    params.datasets.synthetic.gradient_flow.horizon = 5.0e3
    OmegaConf.save(params, dvc_project / "params.yaml")
    dvc(dvc_project, "repro", "evaluate@synthetic")
    done = subprocess.run([sys.executable, "-m", "tools.plots_diff"], cwd=dvc_project, capture_output=True, text=True,
                          env={**dvc_environment(), "PYTHONPATH": CHECKOUT_PATH})
    if "could not be fetched" in done.stderr:
        pytest.skip(f"the npm registry did not answer: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    moved, same = (line.split(": ", 2)[2].split(", ") for line in done.stdout.splitlines()[:2])
    assert {"p_norm", "max_margin_convergence", "results/evaluate/synthetic/gradient_flow.png"} <= set(moved)
    assert "results/evaluate/synthetic/one_step.png" in same  # the one step does not see the flow's horizon
    page = (dvc_project / "dvc_plots" / "index.html").read_text()
    assert "<script src=" not in page and "vegaEmbed('#p_norm'" in page
    assert all((dvc_project / VEGA / f"{name}-{version}.min.js").is_file() for name, (version, _, _) in SCRIPTS.items())
    assert "one_step.png" not in page and "gradient_flow.png" in page
    if any(shutil.which(name) for name in BROWSERS):  # drawn: Vega's canvases, from the scripts in the page alone
        drawn = headless(find_chromium(), "--dump-dom", (dvc_project / "dvc_plots" / "index.html").as_uri()).stdout
        assert drawn.count('class="marks"') >= 2
    # A bare `dvc plots show` with the project's page (.dvc/config) loads the same scripts from .dvc/tmp/vega/.
    dvc(dvc_project, "config", "plots.html_template", "plots/page.html")
    shutil.rmtree(dvc_project / "dvc_plots")
    dvc(dvc_project, "plots", "show")
    shown = (dvc_project / "dvc_plots" / "index.html").read_text()
    assert '<script src="../.dvc/tmp/vega/vega-5.20.2.min.js">' in shown
    if any(shutil.which(name) for name in BROWSERS):
        drawn = headless(find_chromium(), "--dump-dom", (dvc_project / "dvc_plots" / "index.html").as_uri()).stdout
        assert drawn.count('class="marks"') >= 2


def test_the_projects_page_loads_the_scripts_plots_diff_fetches():
    assert (ROOT / ".dvc" / "config").read_text().count("html_template = plots/page.html") == 1
    page = (ROOT / ".dvc" / "plots" / "page.html").read_text()
    for name, (version, _, _) in SCRIPTS.items():
        assert f'<script src="../.dvc/tmp/vega/{name}-{version}.min.js"></script>' in page
        assert f'"{name}@{version}"' in page  # the CDN's, where they are not fetched
    assert "{plot_divs}" in page
