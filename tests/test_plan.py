"""The plan of a `dvc exp run` (tools/plan.py): read from what DVC prints while it decides stage by stage; the slow
test runs a plan and then the experiment it plans, on the tiny project, and compares what ran."""

import subprocess
import sys

import pytest

from tests.helpers import CHECKOUT_PATH, ROOT, dvc, dvc_environment, tiny_dvc_project
from tools.plan import always_run, describe, read_plan

# What `dvc exp run --temp --keep-going` printed for a plan: one stage DVC would run (it said so and stopped), what
# reads its outputs skipped after it, one stage from the run cache, one unchanged, the settings check and the ledger
# run for real (the ledger always runs; the settings check's run is in the run cache now).
PRINTED = """Reproducing experiment 'plan-1'
Running stage 'check_params':
> python -m pipelines.check_params

Running stage 'ledger':
> python -m pipelines.ledger

Stage 'prepare@synthetic' didn't change, skipping
Running stage 'one_step@synthetic':
> python -m pipelines.one_step dataset=synthetic
one_step: would run (a plan: nothing computed)
WARNING: failed to run: python -m pipelines.one_step dataset=synthetic, exited with 3
WARNING: Stages 'gradient_flow@synthetic', 'evaluate@synthetic' and 'report' will be skipped due to this failure
Stage 'phase@256' is cached - skipping run, checking out outputs
Updating lock file 'dvc.lock'
ERROR: failed to reproduce 'one_step@synthetic'
""".splitlines()


def test_a_plan_reads_which_stages_would_run_come_from_the_run_cache_or_stay():
    plan = read_plan(PRINTED, always_run=["ledger"])
    assert plan.runs == ["ledger", "one_step@synthetic"] and plan.checked == ["check_params"]
    assert plan.after == ["gradient_flow@synthetic", "evaluate@synthetic", "report"]
    assert plan.restored == ["phase@256"] and plan.unchanged == ["prepare@synthetic"] and plan.refused == []
    assert describe(plan)[0].startswith("would run 5: ledger, one_step@synthetic; then")
    assert describe(plan)[1] == ("from DVC's run cache 1: phase@256 (and check_params, which ran here to check the "
                                 "values)")


def test_the_stages_that_always_run_are_read_from_dvc_yaml():
    assert always_run(ROOT / "dvc.yaml") == ["ledger", "publish"]


def test_a_stage_that_stops_for_real_is_a_refusal_not_a_plan():
    refused = read_plan(["Running stage 'check_params':", "> python -m pipelines.check_params",
                         "check_params: config error: datasets.synthetic.one_step.eta0 = -1 is out of range",
                         "WARNING: failed to run: python -m pipelines.check_params, exited with 2",
                         "WARNING: Stage 'prepare@synthetic' will be skipped due to this failure"])
    assert refused.refused == ["check_params stopped (exit code 2): check_params: config error: "
                               "datasets.synthetic.one_step.eta0 = -1 is out of range"]
    assert refused.runs == ["check_params"] and refused.checked == []
    assert read_plan(PRINTED).refused == []  # exit code 3: the plan's own stop


@pytest.mark.slow
def test_the_plan_of_a_variant_names_exactly_the_stages_its_experiment_then_runs(tmp_path):
    project = tiny_dvc_project(tmp_path)
    subprocess.run(["git", "add", "-A"], cwd=project, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "tiny"], cwd=project,
                   check=True)
    dvc(project, "repro")  # the cache and the run cache hold every stage
    environment = {**dvc_environment(), "PYTHONPATH": CHECKOUT_PATH}
    setting = ["-S", "datasets.synthetic_pair.one_step.eta0=30"]
    planning = subprocess.run([sys.executable, "-m", "tools.plan", *setting], cwd=project, env=environment,
                              capture_output=True, text=True, timeout=900)
    assert planning.returncode == 0, planning.stdout + planning.stderr
    assert "plan-" not in dvc(project, "exp", "list", "--name-only")  # nothing kept
    would_run = planning.stdout.splitlines()[0]
    ran = dvc(project, "exp", "run", "--temp", *setting, "-n", "variant")
    assert sorted(stage_names(ran)) == sorted(planned_names(would_run)), (would_run, ran)
    assert {"one_step@synthetic_pair", "report", "publish"} <= set(stage_names(ran))
    assert "prepare@synthetic" not in stage_names(ran)  # restored from the run cache: not run


def stage_names(output: str) -> list[str]:
    import re

    return re.findall(r"Running stage '([^']+)'", output)


def planned_names(line: str) -> list[str]:
    """The stage names of the plan's first line: would run N: a, b; then, on what those remake: c, d."""
    names = line.split(":", 1)[1].replace("; then, on what those remake:", ",")
    return [name.strip() for name in names.split(",") if name.strip() and name.strip() != "none"]
