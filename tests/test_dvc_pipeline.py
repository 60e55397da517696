"""`dvc repro` on a copy of the project: the DAG, its caching, and the MLflow nesting across processes."""

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow import MlflowClient
from omegaconf import OmegaConf

from tests.helpers import ROOT, dvc, dvc_environment, run_dvc, stages_run, stages_stale
from toksel.runtime.io import write_json

pytestmark = pytest.mark.slow


def _pipeline_runs(project: Path) -> dict[str, list[str]]:
    """Each parent run id -> the stages nested under it."""
    client = MlflowClient(f"sqlite:///{project / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("toksel").experiment_id])
    nested: dict[str, list[str]] = {run.info.run_id: [] for run in runs if run.data.tags["stage"] == "pipeline"}
    for run in runs:
        if run.data.tags["stage"] != "pipeline" and "toksel.trial" not in run.data.tags:  # not a stage's trial
            nested[run.data.tags["mlflow.parentRunId"]].append(run.data.tags["stage"])
    return nested


LEDGER = "ledger"  # reads git's history, which DVC cannot follow: it runs on every repro (always_changed)


def ran(output: str) -> list[str]:
    """The stages a repro ran, but the ledger, which runs every time (checked apart)."""
    stages = stages_run(output)
    assert LEDGER in stages, stages
    return [stage for stage in stages if stage != LEDGER]


def stale(project) -> list[str]:
    return [stage for stage in stages_stale(project) if stage != LEDGER]


def test_repro_then_a_gradient_flow_edit_reruns_only_its_descendants(dvc_project):
    first = ran(dvc(dvc_project, "repro"))
    training = ["train", "d_sweep"]  # the three arms in one stage; two of them at other d
    ablations = ["ablation-two_layer_kq"]  # ablation.variants: one of the four, to keep the test short
    assert first[:2] == ["check_params", "prepare"] and first.index("one_step") < first.index("gradient_flow")
    assert first.index("ablation_report") > max(first.index(name) for name in [*ablations, "train"])
    assert first[-2:] == ["report", "publish"] and first.index("phase_diagram") > first.index("phase")
    theory = ["phase", "phase_diagram", "report"]
    assert sorted(first) == sorted(["check_params", "prepare", "one_step", "gradient_flow", *training, "evaluate",
                                    "compare", *ablations, "ablation_report", "calibrate", *theory, "publish"])
    assert first.index("calibrate") < first.index("report")
    every_stage = sorted(["evaluate", "compare", "gradient_flow", "one_step", "prepare", "train", "d_sweep", "ablation",
                          "ablation_report", "calibrate", *theory])
    assert sorted(map(sorted, _pipeline_runs(dvc_project).values())) == [every_stage]
    summary = (dvc_project / "results" / "ablation_report" / "summary.md").read_text()
    assert "2-layer + W_KQ: p^T W_KQ^(2) E_s | synthetic two_layer_kq |" in summary
    assert "synthetic has two classes: no multi-class comparison" in summary

    # DVC's metrics are the report's verdict counts, a few short names; every other result is an output, each
    # judging stage's own counts too, shown as rows of one narrow table when named.
    shown = json.loads(dvc(dvc_project, "metrics", "show", "--json"))[""]["data"]
    assert list(shown) == ["results/report/verdicts.json"]
    counts = shown["results/report/verdicts.json"]["data"]
    assert set(counts) == {f"{origin}{name}" for origin in ("", "ours_")
                           for name in ("held", "failed", "inconclusive", "held_holm", "not_counted")}
    assert sum(counts.values()) > 0
    named = json.loads(dvc(dvc_project, "metrics", "show", "--json", "results/evaluate/synthetic/verdicts.json",
                           "results/compare/synthetic/verdicts.json"))[""]["data"]
    assert all(set(entry["data"]) == {"held", "failed", "inconclusive"} for entry in named.values())
    report = (dvc_project / "results" / "report" / "report.md").read_text()
    assert "| Lemma 4.4: p_t selects the important token of every sequence | presence | synthetic |" in report

    assert ran(dvc(dvc_project, "repro")) == []  # nothing changed

    params = OmegaConf.load(dvc_project / "params.yaml")
    params.gradient_flow.horizon = 5.0e3
    OmegaConf.save(params, dvc_project / "params.yaml")
    second = dvc(dvc_project, "repro")
    # The phase row runs GD too (and computes the same numbers, its horizon being its own: phase_diagram stays);
    # compare reads the flow for the theory protocol; the calibration follows the flow's settings too.
    rerun = ["gradient_flow", "evaluate", "compare", "calibrate", "phase", "report"]
    assert sorted(ran(second)) == sorted(["check_params", *rerun, "publish"])
    assert sorted(map(sorted, _pipeline_runs(dvc_project).values())) == sorted([sorted(rerun), every_stage])
    history = (dvc_project / "results" / "gradient_flow" / "synthetic" / "seed0" / "history.csv").read_text()
    assert history.strip().splitlines()[-1].startswith("5000,")  # the last record: the new horizon

    # A kill while DVC rewrites dvc.lock (after the last stage) cuts the file, and DVC refuses to start;
    # heal_lock, make repro's first step, puts back the copy the last stage took as it started.
    lock = dvc_project / "dvc.lock"
    whole = lock.read_bytes()
    lock.write_bytes(whole[: whole.index(b"hash:", len(whole) // 2) + len(b"hash:")])
    assert "validation failed" in run_dvc(dvc_project, "status").stderr
    healed = subprocess.run([sys.executable, "-m", "tools.heal_lock"], cwd=dvc_project, capture_output=True,
                            text=True, env={**dvc_environment(), "PYTHONPATH": str(ROOT)})
    assert healed.returncode == 0 and "dvc.lock was cut" in healed.stderr
    assert ran(dvc(dvc_project, "repro")) == ["report", "publish"]  # the stage whose record the copy lacked
    assert ran(dvc(dvc_project, "repro")) == []

    # A stage that ran again (other timings in its run record) but was killed before DVC recorded it is restored
    # from DVC's run cache: the cached run's record beside the last run's digest record. Its reader takes it.
    row = dvc_project / "runs" / "phase" / "synthetic" / "d256.json"
    again = json.loads(row.read_text())
    again["runs"][0]["ended"] += 1.0
    write_json(row, again)  # as the stage writes it: the folder's record follows
    restored = dvc(dvc_project, "repro")
    assert "Stage 'phase@256' is cached - skipping run, checking out outputs" in restored
    record = json.loads((row.parent / ".digests.json").read_text())["d256.json"]
    assert json.loads(row.read_text()) != again and record[1] != hashlib.sha256(row.read_bytes()).hexdigest()
    assert stages_run(dvc(dvc_project, "repro", "--single-item", "--force", "publish")) == ["publish"]

    # Which stages read a value: once check_params has written their settings, `dvc status` names them without
    # running them (the re-run of their descendants is DVC's own, shown above), which keeps this test short.
    def stale_after(edit) -> list[str]:
        edit(params)
        OmegaConf.save(params, dvc_project / "params.yaml")
        assert stages_run(dvc(dvc_project, "repro", "--single-item", "check_params")) == ["check_params"]
        return stale(dvc_project)

    patience = params.train.patience  # a training parameter: the training runs and compare (the arms' protocol)
    assert stale_after(lambda p: setattr(p.train, "patience", 5)) == sorted([*training, *ablations, "compare",
                                                                            "calibrate"])
    params.train.patience = patience
    # A sequence-model parameter: the ablations and their report only.
    assert stale_after(lambda p: setattr(p.sequence, "bucketed", False)) == sorted([*ablations, "ablation_report"])
    params.sequence.bucketed = True
    # A value a dataset's own entry overrides: no stage reads the shared one, so none reruns.
    eta0 = params.one_step.eta0
    params.datasets.synthetic.one_step = {"eta0": eta0}
    assert stale_after(lambda p: setattr(p.one_step, "eta0", eta0 + 10)) == []
    # Where the independent units run changes no number: no stage reruns for it.
    assert stale_after(lambda p: setattr(p.compute, "workers", 1)) == []

    # A rejected value stops the pipeline at check_params, before DVC deletes the outputs of the stages that
    # read it: one_step's embeddings are still there.
    params.sequence.bucketed = True
    params.one_step.eta0 = -1
    OmegaConf.save(params, dvc_project / "params.yaml")
    embeddings = dvc_project / "results" / "one_step" / "synthetic" / "seed0" / "embeddings.npz"
    refused = run_dvc(dvc_project, "repro")
    assert refused.returncode != 0 and embeddings.exists()
    assert "check_params: config error: one_step.eta0 = -1" in refused.stdout + refused.stderr
    assert stages_run(refused.stdout) == ["check_params"]
