"""`dvc repro` on a copy of the project: the DAG, its caching, and the MLflow nesting across processes."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow import MlflowClient
from omegaconf import OmegaConf

from tests.helpers import ROOT, TINY

pytestmark = pytest.mark.slow


def _run_dvc(project: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "DVC_NO_ANALYTICS": "1"}
    env.pop("MLFLOW_TRACKING_URI", None)  # the default: sqlite:///<project>/mlflow.db
    env.pop("TOKSEL_PIPELINE_ID", None)  # stages must find their parent run through the dvc process
    return subprocess.run(["dvc", *args], cwd=project, env=env, capture_output=True, text=True)


def _dvc(project: Path, *args: str) -> str:
    done = _run_dvc(project, *args)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _short(name: str) -> str:
    """A stage name without the dataset, the seed or the grid cell: prepare, ..., train, phase, ..."""
    name = re.sub(r"@[\d.-]+$", "", re.sub(r"@synthetic-?", "-", name))  # the dataset; a phase row's d
    return re.sub(r"-\d+$", "", name).rstrip("-")  # the seed


def _stages_run(output: str) -> list[str]:
    """The stages a `dvc repro` ran, in order."""
    return [_short(name) for name in re.findall(r"Running stage '([\w@.-]+)'", output)]


def _stages_stale(project: Path) -> list[str]:
    """The stages `dvc repro` would start with: those whose own dependencies changed."""
    return sorted(_short(name) for name in json.loads(_dvc(project, "status", "--json")))


@pytest.fixture
def dvc_project(tmp_path: Path) -> Path:
    for name in ("dvc.yaml", ".dvcignore"):
        shutil.copy(ROOT / name, tmp_path / name)
    for folder in ("src", "pipelines"):
        shutil.copytree(ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__"))
    tiny_training = ["train.max_epochs=2", "train.batch_size=16", "train.datasets=[synthetic]", "train.lr_grid=[0.001]",
                     "train.heldout_min_count=1", "sequence.cpu.d=16", "ablation.datasets=[synthetic]",
                     "ablation.variants=[two_layer_kq]", "ablation.multiclass=synthetic",
                     "phase.eta0=[40]", "phase.d=[256]"]  # one phase cell: the gradient_flow stage's own (d, eta0)
    params = OmegaConf.merge(OmegaConf.load(ROOT / "params.yaml"), OmegaConf.from_dotlist([*TINY, *tiny_training]))
    params.datasets = {"synthetic": params.datasets.synthetic}  # the real datasets have tests of their own
    OmegaConf.save(params, tmp_path / "params.yaml")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    _dvc(tmp_path, "init", "-q")
    return tmp_path


def _pipeline_runs(project: Path) -> dict[str, list[str]]:
    """Each parent run id -> the stages nested under it."""
    client = MlflowClient(f"sqlite:///{project / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("toksel").experiment_id])
    nested: dict[str, list[str]] = {run.info.run_id: [] for run in runs if run.data.tags["stage"] == "pipeline"}
    for run in runs:
        if run.data.tags["stage"] != "pipeline" and "toksel.trial" not in run.data.tags:  # not a stage's trial
            nested[run.data.tags["mlflow.parentRunId"]].append(run.data.tags["stage"])
    return nested


def test_repro_then_a_gradient_flow_edit_reruns_only_its_descendants(dvc_project):
    first = _stages_run(_dvc(dvc_project, "repro"))
    training = ["train"]  # the three arms in one stage
    ablations = ["ablation-two_layer_kq"]  # ablation.variants: one of the four, to keep the test short
    assert first[:2] == ["check_params", "prepare"] and first.index("one_step") < first.index("gradient_flow")
    assert first.index("ablation_report") > max(first.index(name) for name in [*ablations, "train"])
    assert first.index("report") == len(first) - 1 and first.index("phase_diagram") > first.index("phase")
    theory = ["phase", "phase_diagram", "report"]
    assert sorted(first) == sorted(["check_params", "prepare", "one_step", "gradient_flow", *training, "evaluate",
                                    "compare", *ablations, "ablation_report", *theory])
    every_stage = sorted(["evaluate", "compare", "gradient_flow", "one_step", "prepare", "train", "ablation",
                          "ablation_report", *theory])
    assert sorted(map(sorted, _pipeline_runs(dvc_project).values())) == [every_stage]
    summary = (dvc_project / "results" / "ablation_report" / "summary.md").read_text()
    assert "2-layer + W_KQ: p^T W_KQ^(2) E_s | synthetic two_layer_kq |" in summary
    assert "synthetic has two classes: no multi-class comparison" in summary

    metrics = json.loads(_dvc(dvc_project, "metrics", "show", "--json"))
    shown = json.dumps(metrics)
    for name in ("slope", "pearson_r", "orthogonal_ratio", "cos_max_margin", "selection_fraction", "claims_held",
                 "cells_selecting"):
        assert f'"{name}"' in shown
    report = (dvc_project / "results" / "report" / "report.md").read_text()
    assert "| Lemma 4.4: p_t selects the important token of every sequence | synthetic |" in report

    assert _stages_run(_dvc(dvc_project, "repro")) == []  # nothing changed

    params = OmegaConf.load(dvc_project / "params.yaml")
    params.gradient_flow.steps = 400
    OmegaConf.save(params, dvc_project / "params.yaml")
    second = _dvc(dvc_project, "repro")
    # The phase row runs GD too; compare reads the flow for the theory protocol.
    assert sorted(_stages_run(second)) == sorted(["check_params", "gradient_flow", "evaluate", "compare", *theory])
    assert sorted(map(sorted, _pipeline_runs(dvc_project).values())) == sorted([
        sorted(["evaluate", "compare", "gradient_flow", *theory]), every_stage])
    history = (dvc_project / "results" / "gradient_flow" / "synthetic" / "seed0" / "history.csv").read_text()
    assert history.strip().splitlines()[-1].startswith("400,")

    # Which stages read a section: `dvc status` names them without running them (the re-run of their
    # descendants is DVC's own, shown above), which keeps this test inside the time budget of `make test`.
    patience, params.train.patience = params.train.patience, 5  # a training parameter: the training runs and
    OmegaConf.save(params, dvc_project / "params.yaml")  # compare, which reads the arms' protocol
    assert _stages_stale(dvc_project) == sorted(["check_params", *training, *ablations, "compare"])
    params.train.patience = patience
    params.sequence.bucketed = False  # a sequence-model parameter: the ablations and their report only
    OmegaConf.save(params, dvc_project / "params.yaml")
    assert _stages_stale(dvc_project) == sorted(["check_params", *ablations, "ablation_report"])

    # A rejected value stops the pipeline at check_params, before DVC deletes the outputs of the stages that
    # read it: one_step's embeddings are still there.
    params.sequence.bucketed = True
    params.one_step.eta0 = -1
    OmegaConf.save(params, dvc_project / "params.yaml")
    embeddings = dvc_project / "results" / "one_step" / "synthetic" / "seed0" / "embeddings.npz"
    refused = _run_dvc(dvc_project, "repro")
    assert refused.returncode != 0 and embeddings.exists()
    assert "check_params: config error: one_step.eta0 = -1" in refused.stdout + refused.stderr
    assert _stages_run(refused.stdout) == ["check_params"]
