"""The GitHub Actions workflows: actionlint finds nothing wrong in them (and does find a planted mistake), and
the retrain workflow runs only for the files that can change the pipeline's results."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers import ROOT

WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
RETRAIN = ROOT / ".github" / "workflows" / "retrain.yml"
RETRAIN_PATHS = ["params.yaml", "dvc.yaml", "src/**", "pipelines/**", "data/own/**"]


def _actionlint() -> str:
    """The binary the dev extras install beside the venv's python, else one on PATH."""
    beside = Path(sys.executable).parent / "actionlint"
    found = str(beside) if beside.is_file() else shutil.which("actionlint")
    assert found, "no actionlint: `make install` puts it in .venv/bin (the dev extras of pyproject.toml)"
    return found


def _lint(files: list[Path], cwd: Path, *options: str) -> subprocess.CompletedProcess:
    # shellcheck and pyflakes are used when they are on PATH: turned off, the verdict is the same on every machine.
    command = [_actionlint(), "-no-color", "-shellcheck=", "-pyflakes=", *options, *map(str, files)]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=60)


def _triggers(workflow: Path) -> dict:
    loaded = yaml.safe_load(workflow.read_text())
    return loaded[True] if True in loaded else loaded["on"]  # YAML 1.1 reads the bare key `on` as True


def test_there_are_the_test_and_retrain_workflows():
    assert [path.name for path in WORKFLOWS] == ["retrain.yml", "test.yml"]


def test_actionlint_finds_no_error_in_the_workflows():
    done = _lint(WORKFLOWS, ROOT)
    assert done.returncode == 0, f"actionlint exited {done.returncode}:\n{done.stdout}{done.stderr}"


@pytest.mark.parametrize(("correct", "broken", "kind"), [
    ("runs-on: ubuntu-latest", "runs_on: ubuntu-latest", "syntax-check"),  # an unknown key
    ("steps.base.outputs.rev", "steps.bsae.outputs.rev", "expression"),  # an undefined step
    ("${{ github.event.before }}", "${{ github.event.before) }}", "expression"),  # a bad expression
])
def test_actionlint_fails_on_a_copy_with_a_mistake(tmp_path, correct, broken, kind):
    text = RETRAIN.read_text()
    assert correct in text, f"the retrain workflow no longer holds {correct!r}: pick another mistake"
    copy = tmp_path / ".github" / "workflows" / "retrain.yml"
    copy.parent.mkdir(parents=True)
    copy.write_text(text.replace(correct, broken))
    done = _lint([copy], tmp_path, "-format", "{{json .}}")
    assert done.returncode == 1, f"actionlint exited {done.returncode}:\n{done.stdout}{done.stderr}"
    # Reported where the mistake is, as a mistake of its kind.
    lines = {number for number, line in enumerate(copy.read_text().splitlines(), 1) if broken in line}
    errors = json.loads(done.stdout)
    assert any(error["line"] in lines and error["kind"] == kind for error in errors), errors


def test_retrain_runs_on_pushes_and_pull_requests_that_touch_the_pipeline_only():
    triggers = _triggers(RETRAIN)
    assert set(triggers) == {"push", "pull_request"}
    for event in ("push", "pull_request"):
        assert sorted(triggers[event]["paths"]) == sorted(RETRAIN_PATHS), event
        assert set(triggers[event]) == {"paths"}, event  # no branch filter, no paths-ignore


def test_the_tests_run_on_every_push_and_pull_request():
    triggers = _triggers(ROOT / ".github" / "workflows" / "test.yml")
    assert triggers == {"push": None, "pull_request": None}
