"""A DVC remote holds the cache and the run cache: a fresh clone with one value changed runs only the stages that
value reaches and pulls what they read (what the retrain workflow does: `make repro REPRO_FLAGS="--pull
--allow-missing"`)."""

import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests.helpers import CHECKOUT_PATH, ROOT, dvc, dvc_environment, stages_run

pytestmark = pytest.mark.slow
GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]


def test_a_fresh_clone_with_one_value_changed_runs_only_the_stages_it_reaches(dvc_project, tmp_path_factory):
    remote = tmp_path_factory.mktemp("remote")
    dvc(dvc_project, "remote", "add", "-d", "shared", str(remote))
    dvc(dvc_project, "repro")
    subprocess.run(["git", "add", "-A"], cwd=dvc_project, check=True)
    subprocess.run([*GIT, "commit", "-qm", "the tiny pipeline, run"], cwd=dvc_project, check=True)
    assert "pushed" in dvc(dvc_project, "push", "--run-cache")

    # Another machine: the repository as git has it (code, params.yaml, dvc.yaml, dvc.lock, the remote's config, the
    # report's files); no cache, no other output.
    clone = tmp_path_factory.mktemp("clone") / "project"
    subprocess.run(["git", "clone", "-q", str(dvc_project), str(clone)], check=True)
    assert not (clone / "data" / "processed" / "synthetic").exists()
    assert (clone / "results" / "report" / "report.md").exists()
    params = OmegaConf.load(clone / "params.yaml")
    params.margins.discrete_steps = 40  # read by margins, and by the calibration and the report after it
    OmegaConf.save(params, clone / "params.yaml")
    # the project's Makefile, its recipe as written, with the tests' environment in place of .venv
    done = subprocess.run(["make", "-f", str(ROOT / "Makefile"), "repro", "STAMP=",
                           f"BIN={Path(sys.executable).parent}", "REPRO_FLAGS=--pull --allow-missing"], cwd=clone,
                          env={**dvc_environment(), "PYTHONPATH": CHECKOUT_PATH}, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(stages_run(done.stdout)) == ["calibrate", "check_params", "ledger", "margins", "publish", "report"]
    # what they read came from the remote (margins reads the one step's embeddings), computed nowhere here
    assert (clone / "results" / "one_step" / "synthetic" / "seed0" / "embeddings.npz").exists()
