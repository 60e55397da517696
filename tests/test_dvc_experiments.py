"""Two `dvc exp run` at once in one workspace, for real: DVC lets the second rewrite the first's records and
parameters before any stage of ours runs; neither may then finish under the other's name, and nothing is
recorded with parameters its outputs were not made with. One experiment alone runs as usual."""

import json
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers import dvc, dvc_environment, tiny_dvc_project
from toksel.runtime import workspace

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
