"""A tiny end-to-end run of the four stages through their real entry points, and what lands in MLflow."""

import json
import math
import re
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from mlflow import MlflowClient

from pipelines import evaluate, gradient_flow, one_step, prepare
from tests.helpers import TINY, published_runs, seed_folder, throwaway_project
from toksel.runtime.records import flatten
from toksel.theory.gradient_flow import record_times

STAGES = {"prepare": prepare, "one_step": one_step, "gradient_flow": gradient_flow, "evaluate": evaluate}
SEEDED = ("one_step", "gradient_flow")  # their outputs go to <stage>/<dataset>/seed<k>/


def _folder(project, stage):
    return seed_folder(project, stage, "synthetic") if stage in SEEDED else project / "results" / stage / "synthetic"


@pytest.fixture(scope="module")
def finished_pipeline(tmp_path_factory):
    """The four stages on TINY in a throw-away project, shared by this module's tests (the last one, which breaks
    an output on purpose, runs last), their run records then published, as the pipeline's last stage does."""
    with throwaway_project(tmp_path_factory) as project:
        for module in STAGES.values():
            assert module.main(TINY) == 0
        published_runs(project)
        yield project


def test_outputs_exist_with_the_stable_metric_names(finished_pipeline):
    results = finished_pipeline / "results"
    metrics = {stage: json.loads((_folder(finished_pipeline, stage) / "metrics.json").read_text()) for stage in STAGES}
    assert {"slope", "slope_theory", "pearson_r", "orthogonal_ratio", "control_slope_rel_error",
            "control_pearson_r"} <= metrics["one_step"].keys()
    assert {"loss", "p_norm", "selection_fraction", "cos_max_margin_selected", "cos_max_margin_important",
            "normalized_margin", "max_margin_norm", "log_growth", "control_log_growth", "control_selection_fraction",
            "flow_faithful", "control_cos_max_margin_important"} <= metrics["gradient_flow"].keys()
    assert metrics["prepare"]["seed0"]["max_abs_alpha_irrelevant"] == 0.0  # each seed's draw of the data
    assert not any("peak_memory_mb" in stage_metrics for stage_metrics in metrics.values())  # telemetry: not results
    records = {stage: json.loads((results.parent / "runs" / stage / "synthetic.json").read_text()) for stage in STAGES}
    assert all(record["runs"][0]["metrics"]["peak_memory_mb"][0][1] > 50 for record in records.values())  # numpy
    assert metrics["one_step"]["slope_theory"] == 20.0  # eta0 = 40 in TINY
    history = pd.read_csv(_folder(finished_pipeline, "gradient_flow") / "history.csv")
    np.testing.assert_allclose(history["flow_time"], record_times(1e4), rtol=1e-9)  # TINY's horizon
    assert (history["p_norm"].diff().dropna() > 0).all()
    summary = (results / "evaluate" / "synthetic" / "summary.md").read_text()
    for statement in ("Lemma 4.1: one step on E", "Lemma 4.2:", "Lemma 4.4:", "Theorem 4.3:"):
        assert statement in summary
    for claim in ("lemma41_slope", "lemma41_linear", "lemma42_growth", "lemma44_selection", "theorem43_direction"):
        assert metrics["evaluate"][f"{claim}_holds"] in (0.0, 1.0) and f"control_{claim}" in metrics["evaluate"]
    claims = json.loads((results / "evaluate" / "synthetic" / "claims.json").read_text())
    assert {item["claim"] for item in claims} == {"lemma41_slope", "lemma41_linear", "lemma42_growth",
                                                   "lemma44_selection", "theorem43_direction"}
    assert all(item["seeds"] == [0] and len(item["values"]) == len(item["control"]) == 1 for item in claims)
    for figure in ("token_scores.png", "one_step.png", "gradient_flow.png"):
        assert (results / "evaluate" / "synthetic" / figure).stat().st_size > 10_000
    assert not list(finished_pipeline.rglob(".*.tmp-*"))  # no temporary file left behind


def test_mlflow_has_one_parent_with_one_nested_run_per_stage(finished_pipeline):
    client = MlflowClient(f"sqlite:///{finished_pipeline / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("toksel")
    runs = client.search_runs([experiment.experiment_id])
    parents = [run for run in runs if run.data.tags.get("stage") == "pipeline"]
    assert len(parents) == 1
    parent = parents[0]
    assert parent.info.status == "FINISHED"
    assert [a.path for a in client.list_artifacts(parent.info.run_id)] == ["params.yaml"]
    children = {run.data.tags["stage"]: run for run in runs if run is not parent}
    assert children.keys() == STAGES.keys()
    for stage, run in children.items():
        tags = run.data.tags
        assert tags["mlflow.parentRunId"] == parent.info.run_id
        assert tags["dataset"] == "synthetic" and len(tags["params_hash"]) == 12 and tags["git_sha"]
        assert run.info.status == "FINISHED"
        assert "params.yaml" in [a.path for a in client.list_artifacts(run.info.run_id)]
        # The same numbers as metrics.json, under the same names.
        written = flatten(json.loads((_folder(finished_pipeline, stage) / "metrics.json").read_text()))
        for name, value in written.items():
            if value is not None and math.isfinite(value):
                assert run.data.metrics[name] == pytest.approx(value, rel=1e-12), (stage, name)
    assert children["one_step"].data.params["one_step.eta0"] == "40.0"
    assert "gradient_flow.horizon" in children["gradient_flow"].data.params
    assert children["gradient_flow"].data.tags["seed"] == "0" and "seed" not in children["evaluate"].data.tags
    history = client.get_metric_history(children["gradient_flow"].info.run_id, "cos_max_margin_selected")
    # Drawn against 100 log10 t: the records after t = 0, three a doubling, the last at the horizon 1e4 (step 400).
    assert [m.step for m in history] == [round(100 * math.log10(t)) for t in record_times(1e4)[1:]]
    assert history[-1].step == 400 and children["gradient_flow"].data.params["one_step.eta0"] == "40.0"  # lineage
    artifacts = [a.path for a in client.list_artifacts(children["evaluate"].info.run_id)]
    assert {"gradient_flow.png", "one_step.png", "token_scores.png", "summary.md"} <= set(artifacts)
    assert experiment.artifact_location == (finished_pipeline / "mlartifacts").as_uri()


def test_failed_stage_exits_2_and_keeps_its_old_outputs_and_records(finished_pipeline, capsys):
    out = _folder(finished_pipeline, "gradient_flow")
    before = {path: path.read_bytes() for path in [*out.iterdir(), finished_pipeline / "runs" / "gradient_flow"
                                                   / "synthetic.json"]}
    (_folder(finished_pipeline, "one_step") / "embeddings.npz").unlink()
    assert gradient_flow.main(TINY) == 2
    assert "run the one_step stage first" in capsys.readouterr().err
    assert {path: path.read_bytes() for path in before} == before
    assert len(published_runs(finished_pipeline, "tags.stage = 'gradient_flow'")) == 1


def test_a_stage_reports_its_own_peak_memory_not_that_of_the_process_that_started_it():
    ballast = np.ones(2**27)  # 1 GiB resident in this process, which forks the child below
    probe = "from toksel.runtime.records import peak_memory_mb; print(peak_memory_mb())"
    child = float(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                                 check=True).stdout)
    assert 20 < child < 512 < ballast.nbytes / 2**20


@pytest.mark.slow  # 8 s or more: make test-slow (make test stays under 5 minutes)
def test_a_stage_runs_every_seed_in_one_process_and_gathers_their_metrics(prepared, capsys):
    assert one_step.main([*TINY, "base.seeds=[1,2]"]) == 2  # no draw of the data for them yet
    # the seeds run at once, each in a process of its own: the first to fail tells
    assert re.fullmatch(r"one_step: \S+ holds no data for seed [12]: .*\n", capsys.readouterr().err)
    assert prepare.main([*TINY, "base.seeds=[1,2]"]) == 0
    assert one_step.main([*TINY, "base.seeds=[1,2]"]) == 0
    gathered = json.loads((prepared / "results" / "one_step" / "synthetic.json").read_text())
    assert sorted(gathered) == ["seed1", "seed2"]
    for seed in (1, 2):
        written = json.loads((seed_folder(prepared, "one_step", "synthetic", seed) / "metrics.json").read_text())
        assert gathered[f"seed{seed}"] == written
    assert gathered["seed1"]["slope"] != gathered["seed2"]["slope"]  # two initialisations, not one run twice
    runs = published_runs(prepared, "tags.stage = 'one_step'")
    assert sorted(run.data.tags["seed"] for run in runs) == ["1", "2"]  # the records of the last run, seeds 1 and 2
    capsys.readouterr()
    assert one_step.main([*TINY, "seed=1"]) == 2  # one seed is base.seeds=[1]
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "base.seeds=[<seed>]" in error[0]


def test_a_flow_stopped_by_the_step_cap_finishes_its_stage_and_its_claims_are_not_computed(prepared, monkeypatch,
                                                                                         capsys):
    from toksel.theory import gradient_flow as flow

    monkeypatch.setattr(flow, "MAX_STEPS", 20)  # the tiny flow to 1e4 takes a few hundred
    assert gradient_flow.main(TINY) == 0
    metrics = json.loads((seed_folder(prepared, "gradient_flow", "synthetic") / "metrics.json").read_text())
    assert metrics["horizon_reached"] == 0.0 and metrics["flow_time"] < 1e4
    assert "datasets.synthetic.gradient_flow.horizon sets the horizon" in capsys.readouterr().err
    assert evaluate.main(TINY) == 0
    claims = {item["claim"]: item for item in json.loads((prepared / "results/evaluate/synthetic/claims.json")
                                                        .read_text())}
    assert claims["lemma44_selection"]["values"] == [None] and claims["lemma41_linear"]["values"] != [None]
