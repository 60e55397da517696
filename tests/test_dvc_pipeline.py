"""`dvc repro` on a copy of the project: the DAG, its caching, and the MLflow nesting across processes."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow import MlflowClient
from omegaconf import OmegaConf

from tests.helpers import CHECKOUT_PATH, dvc, dvc_environment, run_dvc, stages_run, stages_stale
from toksel.runtime.io import write_json

pytestmark = pytest.mark.slow


def _stopped(project: Path, *args: str) -> str:
    """`dvc args`, stopped by Ctrl-C (SIGINT to DVC and its stage) as soon as DVC starts a stage: what it printed."""
    started = subprocess.Popen(["dvc", *args], cwd=project, env=dvc_environment(), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    printed = []
    for line in started.stdout:
        printed.append(line)
        if line.startswith("Running stage"):
            os.killpg(started.pid, signal.SIGINT)
    started.wait(timeout=120)
    return "".join(printed)


def _pipeline_runs(project: Path) -> dict[str, list[str]]:
    """Each parent run id -> the stages nested under it."""
    client = MlflowClient(f"sqlite:///{project / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("toksel").experiment_id])
    nested: dict[str, list[str]] = {run.info.run_id: [] for run in runs if run.data.tags["stage"] == "pipeline"}
    for run in runs:
        if run.data.tags["stage"] != "pipeline" and "toksel.trial" not in run.data.tags:  # not a stage's trial
            nested[run.data.tags["mlflow.parentRunId"]].append(run.data.tags["stage"])
    return nested


# Run on every repro (always_changed): the ledger reads git's history, which DVC cannot follow; publish gives every
# pipeline run its MLflow parent, a DVC experiment whose stages all came from the run cache too.
ALWAYS = ("ledger", "publish")


def ran(output: str) -> list[str]:
    """The stages a repro ran, but the ledger and publish, which run every time (checked apart)."""
    stages = stages_run(output)
    assert set(ALWAYS) <= set(stages), stages
    return [stage for stage in stages if stage not in ALWAYS]


def stale(project) -> list[str]:
    return [stage for stage in stages_stale(project) if stage not in ALWAYS]


def test_repro_then_a_gradient_flow_edit_reruns_only_its_descendants(dvc_project):
    first = ran(dvc(dvc_project, "repro"))
    training = ["train", "d_sweep"]  # the three arms in one stage; two of them at other d
    ablations = ["ablation-two_layer_kq"]  # ablation.variants: one of the four, to keep the test short
    assert first[:2] == ["check_params", "prepare"] and first.index("one_step") < first.index("gradient_flow")
    assert first.index("ablation_report") > max(first.index(name) for name in [*ablations, "train"])
    assert first[-1] == "report" and first.index("phase_diagram") > first.index("phase")
    theory = ["phase", "phase_diagram", "report"]
    per_dataset = ["prepare", "one_step", "gradient_flow", "evaluate"] * 3  # synthetic and the two pair datasets
    pair = ["pair-one_layer", "pair-mlp"] * 2 + ["pair_report"]
    assert sorted(first) == sorted(["check_params", *per_dataset, *training, "compare", *ablations, "ablation_report",
                                    "calibrate", *pair, "margins", "negation", *theory])
    assert first.index("negation") < first.index("report")
    assert first.index("calibrate") < first.index("report")
    every_stage = sorted([*per_dataset, "compare", "train", "d_sweep", "ablation", "ablation_report", "calibrate",
                          "pair", "pair", "pair", "pair", "pair_report", "margins", "negation", *theory])
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
    # dvc.yaml's plots read fields their files have (the flows against flow time, on a log axis): no warning.
    plotted = run_dvc(dvc_project, "plots", "show", "--json")
    assert plotted.returncode == 0 and "WARNING" not in plotted.stdout + plotted.stderr, plotted.stderr
    report = (dvc_project / "results" / "report" / "report.md").read_text()
    row = ("| `lemma44_selection` Lemma 4.4: p_t selects the important token of every sequence (computed by "
           "gradient_flow: `theory.selection.selection_fraction`) | presence | synthetic |")
    assert row in report  # each row starts with its claim's id and names the stage and function that compute it

    assert ran(dvc(dvc_project, "repro")) == []  # nothing changed

    params = OmegaConf.load(dvc_project / "params.yaml")
    params.datasets.synthetic.gradient_flow.horizon = 5.0e3
    OmegaConf.save(params, dvc_project / "params.yaml")
    # DVC names the stages that read the value (each lists what it reads, no more): the flow and its evaluation
    # (whose run logs the flow's settings); the phase row, which runs GD on the synthetic data's flow settings (and
    # computes the same numbers, its horizon being its own, so the phase diagram stays); the calibration, negation
    # and the report, which read every dataset's config. Then compare runs too, for it reads the new flow (the
    # theory protocol).
    reading = ["gradient_flow", "evaluate", "calibrate", "phase", "negation", "report"]
    assert stale(dvc_project) == sorted(["check_params", *reading])
    second = dvc(dvc_project, "repro")
    assert sorted(ran(second)) == sorted(["check_params", *reading, "compare"])
    # The view is the records': the new values are a run of their own, under a parent of its own that shows every
    # stage (the ones that did not rerun are part of it too); the first values' parent stays as it was.
    assert sorted(map(sorted, _pipeline_runs(dvc_project).values())) == [sorted(every_stage)] * 2
    history = (dvc_project / "results" / "gradient_flow" / "synthetic" / "seed0" / "history.csv").read_text()
    assert history.strip().splitlines()[-1].startswith("5000,")  # the last record: the new horizon

    # A kill while DVC rewrites dvc.lock (after the last stage) cuts the file, and DVC refuses to start;
    # heal_lock, make repro's first step, puts back the copy the last stage took as it started.
    lock = dvc_project / "dvc.lock"
    whole = lock.read_bytes()
    lock.write_bytes(whole[: whole.index(b"hash:", len(whole) // 2) + len(b"hash:")])
    assert "validation failed" in run_dvc(dvc_project, "status").stderr
    healed = subprocess.run([sys.executable, "-m", "tools.heal_lock"], cwd=dvc_project, capture_output=True,
                            text=True, env={**dvc_environment(), "PYTHONPATH": CHECKOUT_PATH})
    assert healed.returncode == 0 and "dvc.lock was cut" in healed.stderr
    assert ran(dvc(dvc_project, "repro")) == ["report"]  # the stage whose record the copy lacked
    assert ran(dvc(dvc_project, "repro")) == []

    # A stage that ran again (other timings in its run record) but was killed before DVC recorded it is restored
    # from DVC's run cache, its outputs those of the run DVC cached.
    row = dvc_project / "runs" / "phase" / "synthetic" / "d256.json"
    again = json.loads(row.read_text())
    again["runs"][0]["ended"] += 1.0
    write_json(row, again)
    restored = dvc(dvc_project, "repro")
    assert "Stage 'phase@256' is cached - skipping run, checking out outputs" in restored
    assert json.loads(row.read_text()) != again
    assert stages_run(dvc(dvc_project, "repro", "--single-item", "--force", "publish")) == ["publish"]

    # Which stages read a value: `dvc status` names them before anything runs (what reads their outputs runs when
    # those change: the plan names it too).
    def stale_after(edit) -> list[str]:
        edit(params)
        OmegaConf.save(params, dvc_project / "params.yaml")
        return stale(dvc_project)

    patience = params.train.patience  # a training parameter: the training runs, what reads them, the report
    assert stale_after(lambda p: setattr(p.train, "patience", 5)) == sorted(
        ["check_params", *training, *ablations, "ablation_report", "compare", *pair, "calibrate", "negation",
         "report"])
    params.train.patience = patience
    # A sequence-model parameter: the ablations and the pair's models (models with positions), and the stages that
    # read the sequence settings themselves: the ablations' report, negation (it rebuilds the kept ablations) and the
    # report; the calibration and the pair's report read the pair runs, not these values.
    assert stale_after(lambda p: setattr(p.sequence, "bucketed", False)) == sorted(
        ["check_params", *ablations, "ablation_report", *pair[:-1], "negation", "report"])
    params.sequence.bucketed = True
    OmegaConf.save(params, dvc_project / "params.yaml")
    assert stale(dvc_project) == []
    # Where the independent units run changes no number: no stage but the settings check reruns for it.
    assert stale_after(lambda p: setattr(p.compute, "workers", 1)) == ["check_params"]
    # A code edit in runtime/ or tracking/ (plumbing, the view) reruns no stage but publish, which runs every time
    # (check_params: compute.workers above).
    for file, expected in (("src/toksel/runtime/records.py", ["check_params"]),
                           ("src/toksel/tracking/view.py", ["check_params"])):
        path = dvc_project / file
        text = path.read_text()
        path.write_text(text + "# a comment\n")
        assert stale(dvc_project) == expected, file
        path.write_text(text)

    # A stage stopped under DVC loses its outputs (DVC removed them before it started it): `dvc checkout` brings
    # back those in DVC's cache. The report's files that git shows are not there (DVC keeps no run-cache entry for
    # a stage with such an output), so the next repro makes them again, the same bytes.
    margins, shown = dvc_project / "results" / "margins", dvc_project / "results" / "report" / "report.md"
    kept = {path: path.read_bytes() for path in [*margins.rglob("*.json"), shown]}
    for stage in ("margins", "report"):
        assert stages_run(_stopped(dvc_project, "repro", "-f", "-s", stage)) == [stage]
    assert not any(path.exists() for path in kept)
    dvc(dvc_project, "checkout", "margins")
    assert "margins" not in stages_stale(dvc_project)
    again = dvc(dvc_project, "repro", "report")  # the settings check too: compute.workers changed above
    assert stages_run(again) == ["check_params", "ledger", "report"], again
    assert {path: path.read_bytes() for path in kept} == kept

    # A rejected value stops the pipeline at check_params, before DVC deletes the outputs of the stages that
    # read it: one_step's embeddings are still there.
    params.compute.workers = 0
    params.datasets.synthetic.one_step.eta0 = -1
    OmegaConf.save(params, dvc_project / "params.yaml")
    embeddings = dvc_project / "results" / "one_step" / "synthetic" / "seed0" / "embeddings.npz"
    refused = run_dvc(dvc_project, "repro")
    assert refused.returncode != 0 and embeddings.exists()
    assert "check_params: config error: datasets.synthetic.one_step.eta0 = -1" in refused.stdout + refused.stderr
    assert stages_run(refused.stdout) == ["check_params"]
