"""The commands the docs show work on the quick profile: the own-file example of docs/datasets.md through its
stages, and every `dvc exp run -S ...` of README.md and docs/ as an experiment of the quick profile through every
stage it reaches (marked `docs`: `make test-docs`, which CI runs after `make quick`)."""

import contextlib
import hashlib
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from pipelines import evaluate, gradient_flow, one_step, prepare
from tests.helpers import CHECKOUT_PATH, ROOT, dvc_environment
from tests.test_file_data import reviews
from toksel.report.header import dataset_rows
from toksel.runtime.config import load_config
from tools.profile import newest_experiment, profile_values, read_profile, real_data

DATASETS_DOC = ROOT / "docs" / "datasets.md"


def _own_file_entry() -> dict:
    """The entry of docs/datasets.md's own-file example, as written there."""
    blocks = re.findall(r"```yaml\n(datasets:\n.*?)```", DATASETS_DOC.read_text(), re.S)
    [example] = [block for block in blocks if "source: file" in block]
    return OmegaConf.to_container(OmegaConf.create(example))["datasets"]


def _on_the_quick_profile(project) -> None:
    """params.yaml as `make quick` runs it: the quick profile's values set on the project's own."""
    shutil.copytree(ROOT / "profiles", project / "profiles")
    profile = read_profile("quick", project / "params.yaml")
    OmegaConf.save(OmegaConf.merge(OmegaConf.load(project / "params.yaml"), profile), project / "params.yaml")


@pytest.mark.slow  # 8 s or more: make test-slow (make test stays under 5 minutes)
@pytest.mark.filterwarnings("ignore:.*takes every one of the")  # a small file: the profile's caps take all of it
def test_the_own_file_example_runs_on_the_quick_profile_and_the_report_names_its_file(project):
    entry = _own_file_entry()
    [(name, values)] = entry.items()
    (project / values["data"]["path"]).parent.mkdir(parents=True)
    reviews(600).to_csv(project / values["data"]["path"], index=False)  # the example's columns: review, stars
    params = OmegaConf.load(project / "params.yaml")
    params.datasets.update(entry)
    OmegaConf.save(params, project / "params.yaml")
    _on_the_quick_profile(project)
    config = load_config([f"dataset={name}"])
    assert (config.model.d, config.data.max_train) == (512, 1000)  # the quick profile's every_other_dataset
    assert config.gradient_flow.horizon == values["gradient_flow"]["horizon"]  # the entry's own
    for stage in (prepare, one_step, gradient_flow, evaluate):
        assert stage.main([f"dataset={name}", "base.seeds=[0]"]) == 0, stage.__name__
    assert dataset_rows({name: config})[0][1].startswith(f"file {values['data']['path']} (SHA-256 ")


DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
VALUE = r"(?:'[^']*'|\"[^\"]*\"|[^\s`'\"]+)"  # quoted, or up to a space, a quote or the end of a code span
COMMAND = re.compile(rf"(dvc exp run|python -m tools\.plan|python -m tools\.profile \w+|make quick REPRO_FLAGS=\")"
                     rf"((?: +(?:-S +{VALUE}|--?[\w-]+|\w+@[\w.-]+))*)")
SETTING = re.compile(r"-S +(?:'([^']*)'|\"([^\"]*)\"|([^\s`'\"]+))")
TARGET = re.compile(r"(?:^| )([\w]+@[\w.-]+)")


@dataclass(frozen=True)
class Documented:
    """A `dvc exp run` (or profile run) with settings that README.md or docs/ shows, as the quick profile runs it."""
    settings: tuple[str, ...]  # key=value, as -S gives them
    targets: tuple[str, ...]  # stages it names (train@yelp_polarity)
    where: str  # file:line
    gpu: str = ""  # why it needs a GPU ("" where it does not)

    @property
    def name(self) -> str:
        return " ".join([*self.settings, *self.targets])


def documented_commands() -> list[Documented]:
    """Every command of README.md and docs/ that sets values with -S, once per settings and targets (a --dry, a
    --queue of the same are the same run); a profile other than quick (paper) and a GPU's command are marked."""
    found: dict[tuple, Documented] = {}
    for document in DOCUMENTS:
        for number, line in enumerate(document.read_text().splitlines(), 1):
            for part in line.replace('REPRO_FLAGS="', 'REPRO_FLAGS=" ').split("&&"):  # its options as on a command line
                for command in COMMAND.finditer(part):
                    settings = tuple(next(value for value in match if value) for match in SETTING.findall(command[2]))
                    if not settings or not all("=" in setting for setting in settings):  # none, or `-S ...`
                        continue
                    targets = tuple(TARGET.findall(SETTING.sub("", command[2])))
                    comment = part[command.end():]
                    gpu = ("a GPU (train.accelerator=gpu)" if "train.accelerator=gpu" in settings else
                           "GPUs (its comment says so)" if "GPU" in comment else
                           "the paper profile, for GPUs" if command[1].endswith(" paper") else "")
                    where = f"{document.relative_to(ROOT)}:{number}"
                    found.setdefault((settings, targets), Documented(settings, targets, where, gpu))
    return list(found.values())


def test_the_documented_commands_are_found_as_written():
    """The parser finds the commands it must run (so that an empty list cannot pass for a documented one)."""
    found = {item.name: item for item in documented_commands()}
    assert "datasets.synthetic.one_step.eta0=50" in found  # docs/operations.md's example: planned, queued
    assert "datasets.synthetic.one_step.eta0=50 datasets.synthetic.gradient_flow.horizon=1e12" in found
    assert "phase.eta0=[10,14,20,28,40] phase.d=[1024]" in found  # quoted values
    assert "datasets.imdb.one_step.eta0=500" in found  # README's make quick REPRO_FLAGS="-S ..."
    assert "train.strategy=ddp train.devices=2 train@yelp_polarity" in found and not found[
        "train.strategy=ddp train.devices=2 train@yelp_polarity"].gpu  # a target; two CPU processes
    assert found["sequence.scale=paper train.accelerator=gpu train.precision=bf16-mixed"].gpu
    assert len(found) >= 12


@pytest.mark.docs
@pytest.mark.parametrize("command", documented_commands(), ids=lambda command: command.name)
def test_each_documented_setting_runs_as_an_experiment_of_the_quick_profile(command, quick_clone):
    """`make quick REPRO_FLAGS="-S ..."` for each: rc 0, its experiment, its MLflow parent and its claims diff
    against the quick profile's own run. In a clone that shares this project's DVC cache (its run cache: after
    `make quick` here, each runs only the stages its values reach)."""
    if command.gpu:
        pytest.skip(f"{command.where} needs {command.gpu}: run on a GPU machine")
    if command.targets and not real_data():
        pytest.skip(f"{command.where} names stages on the real datasets: no TOKSEL_DATA_MIRROR, and no Hub")
    project, base = quick_clone
    name = "doc-" + hashlib.sha256(command.name.encode()).hexdigest()[:8]
    settings = [arg for setting in command.settings for arg in ("-S", setting)]
    done = _profile(project, [*settings, *command.targets, "-n", name])
    assert done.returncode == 0, f"{command.where}: {done.stdout[-3000:]}{done.stderr[-3000:]}"
    if real_data() and not command.targets:  # the whole DAG ran, publish last (without the real datasets, the
        # synthetic stages alone; with a target, it and what it needs)
        assert f"MLflow shows its runs under the parent run {name}" in done.stdout, done.stdout[-2000:]
    diff = subprocess.run([sys.executable, "-m", "toksel.claims_diff", base, name], cwd=project, env=_environment(),
                          capture_output=True, text=True)
    assert diff.returncode == 0, diff.stdout + diff.stderr


def _environment() -> dict[str, str]:
    return {**dvc_environment(), "PYTHONPATH": CHECKOUT_PATH, "TOKSEL_PROGRESS": "0"}


def _profile(project: Path, options: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tools.profile", "quick", *options], cwd=project,
                          env=_environment(), capture_output=True, text=True, timeout=3600)


@pytest.fixture(scope="module")
def quick_clone(tmp_path_factory) -> tuple[Path, str]:
    """A clone of the repository's HEAD whose DVC cache is this project's, and the quick profile's experiment in it:
    the newest one `make quick` left here on this commit (CI's), fetched, else one run in the clone."""
    project = tmp_path_factory.mktemp("docs") / "project"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(project)], check=True)
    subprocess.run(["dvc", "cache", "dir", str(ROOT / ".dvc" / "cache")], cwd=project, check=True,
                   env=_environment())
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=project, capture_output=True, text=True,
                          check=True).stdout.strip()
    experiments = f"refs/exps/{head[:2]}/{head[2:]}/*"
    subprocess.run(["git", "fetch", "-q", str(ROOT), f"{experiments}:{experiments}"], cwd=project, check=True)
    with contextlib.chdir(project):
        found = newest_experiment("quick", profile_values(read_profile("quick")))
    if found is not None:
        return project, found[0]
    done = _profile(project, ["-n", "doc-base"])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return project, "doc-base"
