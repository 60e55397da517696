"""Two `dvc exp run` at once in one workspace, for real: DVC lets the second rewrite the first's records and
parameters before any stage of ours runs; neither may then finish under the other's name, and nothing is
recorded with parameters its outputs were not made with. One experiment alone runs as usual."""

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dvc import api as dvc_api

from tests.helpers import CHECKOUT_PATH, dvc, dvc_environment, tiny_dvc_project
from toksel.runtime import workspace
from tools.profile import SET_ASIDE

pytestmark = pytest.mark.slow

DELAY = 30  # seconds before the first experiment's stage starts: the second is refused by then (a `dvc exp run`
# takes 5 to 10 s to get that far on two busy cores: at 8 s it once did not)


def _one_stage_project(folder: Path) -> Path:
    """The tiny project with one stage, prepare, that waits $TEST_DELAY seconds before it starts, committed."""
    project = tiny_dvc_project(folder)
    (project / "dvc.yaml").write_text(
        "stages:\n  prepare:\n"
        "    cmd: sleep $TEST_DELAY && python -m pipelines.prepare dataset=synthetic\n"
        "    params: [datasets.synthetic.data.synthetic.n_train]\n"
        "    outs: [data/processed/synthetic]\n")
    subprocess.run(["git", "add", "-A"], cwd=project, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "tiny"], cwd=project,
                   check=True)
    return project


def _files(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in folder.rglob("*") if path.is_file()}


def _experiments(project: Path) -> list[str]:
    return sorted(line.strip() for line in dvc(project, "exp", "list", "--name-only").splitlines() if line.strip())


def _dvc_exp_run(project: Path, name: str, n_train: int, delay: int = 0) -> subprocess.Popen:
    return subprocess.Popen(["dvc", "exp", "run", "-n", name, "-S",
                             f"datasets.synthetic.data.synthetic.n_train={n_train}"], cwd=project,
                            env={**dvc_environment(), "TEST_DELAY": str(delay)}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def test_a_second_experiment_in_the_workspace_leaves_nothing_mixed(tmp_path):
    project = _one_stage_project(tmp_path)
    alone = _dvc_exp_run(project, "alone", 60)
    assert alone.wait(timeout=120) == 0, alone.communicate()[0]
    claim = json.loads((project / workspace.CLAIM).read_text())
    assert claim["name"] == "alone"
    lock = (project / "dvc.lock").read_text()
    outputs = _files(project / "data" / "processed" / "synthetic")

    first = _dvc_exp_run(project, "first", 70, delay=DELAY)
    started = time.monotonic()
    while not (project / workspace.DVC_RUN / "workspace.json").exists():  # the first is in its stage's `sleep`
        assert first.poll() is None and time.monotonic() - started < 60, first.communicate()[0]
        time.sleep(0.1)
    second = _dvc_exp_run(project, "second", 50)
    second_output = second.communicate(timeout=120)[0]
    assert time.monotonic() - started < DELAY, "the second experiment ended after the first one's stage began"
    first_output = first.communicate(timeout=120)[0]

    # The second meets the first's lock on the stage's outputs (DVC's refusal); the first's stage, once it
    # starts, finds its records rewritten and stops before it writes anything.
    assert second.returncode != 0 and "is busy" in second_output, second_output
    assert first.returncode != 0
    assert "prepare: another experiment was started in this workspace while experiment 'first' ran" in first_output
    assert _experiments(project) == ["alone"]  # neither is recorded, under its name or the other's
    assert (project / "dvc.lock").read_text() == lock  # the stage's record: still the outputs it describes
    assert _files(project / "data" / "processed" / "synthetic") == outputs


def test_a_profile_runs_apart_from_the_workspace_and_says_where_its_results_are(tmp_path):
    """`make quick`'s runner: the profile's experiment runs in a copy of the project (--temp); the workspace's
    params.yaml and results stay as they were, and the experiment holds the results."""
    project = tiny_dvc_project(tmp_path)
    (project / "profiles").mkdir()
    (project / "profiles" / "tiny.yaml").write_text("profile: tiny\nbase: {seeds: [0]}\n")
    subprocess.run(["git", "add", "-A"], cwd=project, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "tiny"], cwd=project,
                   check=True)
    params = (project / "params.yaml").read_text()
    environment = {**dvc_environment(), "HF_HUB_OFFLINE": "1"}
    environment.pop("TOKSEL_DATA_MIRROR", None)  # the synthetic stages alone
    done = subprocess.run([sys.executable, "-m", "tools.profile", "tiny", "-n", "small"], cwd=project,
                          env={**environment, "PYTHONPATH": CHECKOUT_PATH}, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "its results are in the DVC experiment small, not in the workspace" in done.stdout
    assert (project / "params.yaml").read_text() == params and not (project / "results").exists()
    assert _experiments(project) == ["small"]
    # The experiment holds the results (the synthetic stages': without real data the rest did not run), in DVC's
    # cache, where its commit's dvc.lock points.
    ref = subprocess.run(["git", "for-each-ref", "--format=%(refname)", "refs/exps/*/*/small"], cwd=project,
                         capture_output=True, text=True, check=True).stdout.strip()
    shown = dvc_api.read("results/evaluate/synthetic/metrics.json", repo=str(project), rev=ref)
    assert "lemma41_linear" in json.loads(shown)
    # make experiments: the one experiment beside the workspace and its baseline, a row per value that differs.
    table = subprocess.run([sys.executable, "-m", "toksel.experiments_table"], cwd=project, env=environment,
                           capture_output=True, text=True, check=True).stdout.splitlines()
    assert table[0].split()[0] == "workspace" and table[0].split()[-1] == "small"
    rows = {row.split()[0]: row.split()[-1] for row in table[1:]}
    assert rows["profile"] == "tiny"  # the tiny params already run one seed: the profile alone differs

    # A variant starts from that experiment (its dvc.lock stands in for the workspace's while DVC copies it): the
    # stages the value does not reach are unchanged, not restored one by one from the run cache; the workspace's
    # dvc.lock (none here) is as it was.
    variant = subprocess.run([sys.executable, "-m", "tools.profile", "tiny", "-S",
                              "datasets.synthetic_pair.one_step.eta0=30", "-n", "variant"], cwd=project,
                             env={**environment, "PYTHONPATH": CHECKOUT_PATH}, capture_output=True, text=True,
                             timeout=600)
    assert variant.returncode == 0, variant.stdout + variant.stderr
    assert "starting from the experiment small" in variant.stdout
    ran = re.findall(r"Running stage '([^']+)'", variant.stdout)
    assert {"check_params", "one_step@synthetic_pair", "evaluate@synthetic_pair"} <= set(ran)
    assert not [stage for stage in ran if stage.endswith("@synthetic")], ran  # the other dataset's: unchanged
    assert "Stage 'one_step@synthetic' didn't change, skipping" in variant.stdout + variant.stderr
    assert "is cached - skipping run" not in variant.stdout + variant.stderr
    assert not (project / "dvc.lock").exists() and not (project / SET_ASIDE).exists()
    assert (project / "params.yaml").read_text() == params and _experiments(project) == ["small", "variant"]


def test_a_refused_workspace_experiment_says_what_it_left_in_params_yaml_and_how_to_undo_it(tmp_path):
    project = _one_stage_project(tmp_path)
    (project / "dvc.yaml").write_text((project / "dvc.yaml").read_text().replace(
        "    cmd: sleep $TEST_DELAY && python -m pipelines.prepare dataset=synthetic\n",
        "    cmd: python -m pipelines.check_params && python -m pipelines.prepare dataset=synthetic\n"))
    subprocess.run(["git", "commit", "-qam", "check first", "--author", "t <t@t>"], cwd=project, check=True,
                   env={**dvc_environment(), "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"})
    refused = subprocess.run(["dvc", "exp", "run", "-S", "datasets.synthetic.data.synthetic.n_train=-5"], cwd=project,
                             env={**dvc_environment(), "TEST_DELAY": "0"}, capture_output=True, text=True, timeout=300)
    assert refused.returncode != 0
    said = [line for line in (refused.stdout + refused.stderr).splitlines() if line.startswith("check_params:")]
    assert len(said) == 1 and "`git checkout params.yaml` undoes it" in said[0], refused.stdout + refused.stderr
    left = subprocess.run(["git", "diff", "--quiet", "params.yaml"], cwd=project)
    assert left.returncode == 1  # the line is true: params.yaml holds what DVC wrote
    subprocess.run(["git", "checkout", "params.yaml"], cwd=project, check=True)
    assert subprocess.run(["git", "diff", "--quiet"], cwd=project).returncode == 0  # and the undo is whole
