"""A DVC remote holds the cache and the run cache: a fresh checkout pulls a stage's outputs instead of running it
(what the retrain workflow does when a remote is configured)."""

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers import dvc, stages_run

pytestmark = pytest.mark.slow
TARGETS = ["prepare@synthetic", "one_step@synthetic"]


def test_a_fresh_checkout_restores_stages_from_a_local_remote_instead_of_running_them(dvc_project, tmp_path_factory):
    assert stages_run(dvc(dvc_project, "repro", *TARGETS)) == ["check_params", "prepare", "one_step"]
    remote = tmp_path_factory.mktemp("remote")
    dvc(dvc_project, "remote", "add", "-d", "shared", str(remote))
    pushed = dvc(dvc_project, "push", "--run-cache", *TARGETS)
    assert "pushed" in pushed

    # Another machine: the repository's files (code, params.yaml, dvc.yaml, dvc.lock, the remote's config), no
    # cache and no outputs but those git keeps (the uncached ones: the check's verdict, the metrics).
    clone = tmp_path_factory.mktemp("clone")
    for name in ("dvc.yaml", "dvc.lock", "params.yaml", ".dvcignore", "src", "pipelines", "data/own", ".dvc/config",
                 "results/check_params/valid.txt",
                 "results/prepare/synthetic/metrics.json", "results/one_step/synthetic.json"):
        source, target = dvc_project / name, clone / name
        target.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if source.is_dir() else shutil.copy)(source, target)
    subprocess.run(["git", "init", "-q"], cwd=clone, check=True)
    embeddings = Path("results") / "one_step" / "synthetic" / "seed0" / "embeddings.npz"
    assert not (clone / embeddings).exists()

    restored = dvc(clone, "repro", "--pull", *TARGETS)
    assert stages_run(restored) == []  # nothing ran: every output came from the remote
    assert (clone / embeddings).read_bytes() == (dvc_project / embeddings).read_bytes()
    assert dvc(clone, "status", *TARGETS).strip().endswith("up to date.")
