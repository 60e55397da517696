"""Every stage's DVC deps are the files it imports (tools/stage_deps.py computes them from the import graph), so
that editing any of them marks the stage changed, and a file left out or a new import is caught."""

import grimp
import pytest
import yaml

from tests.helpers import ROOT
from tools import stage_deps


@pytest.fixture(scope="module")
def graph():
    return grimp.build_graph("toksel", "pipelines")


def test_every_stage_depends_on_exactly_the_files_it_imports(capsys):
    assert stage_deps.main(["--check"]) == 0, capsys.readouterr().out


def test_a_dependency_left_out_or_a_new_import_is_found(graph):
    body = stage_deps.stage_bodies(yaml.safe_load((ROOT / "dvc.yaml").read_text()))["gradient_flow"]
    assert stage_deps.computed_deps(graph, body) == body["deps"]
    shortened = {**body, "deps": [dep for dep in body["deps"] if dep != "src/toksel/runtime/config.py"]}
    assert "src/toksel/runtime/config.py" in stage_deps.computed_deps(graph, shortened)
    # Indirect imports count: the gradient-flow loop comes in through theory/convergence.py.
    assert "src/toksel/theory/gradient_flow.py" in stage_deps.imported_files(graph, "pipelines.gradient_flow")
    assert "data/processed/${key}" in body["deps"]  # the data deps are kept as they are


def test_no_compute_stage_depends_on_the_mlflow_view_or_report_rendering(graph):
    dvc = yaml.safe_load((ROOT / "dvc.yaml").read_text())
    assert stage_deps.views_in_compute(dvc) == []
    assert "src/toksel/runtime/progress.py" not in stage_deps.imported_files(graph, "pipelines.gradient_flow")
    # An import of the report's rendering from a compute stage is found.
    graph.add_import(importer="pipelines.one_step", imported="toksel.report.document")
    bodies = stage_deps.stage_bodies(dvc)
    bodies["one_step"]["deps"] = stage_deps.computed_deps(graph, bodies["one_step"])
    assert "one_step: src/toksel/report/document.py" in stage_deps.views_in_compute(dvc)
