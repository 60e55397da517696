"""The commands the docs show work on the profile they are run with, where that is cheap: the own-file example of
docs/datasets.md and the one-step sweeps of docs/operations.md, each at the quick profile's values (as
`make quick` would apply them with `dvc exp run -S`), through the real stages."""

import re
import shutil

import pytest
from omegaconf import OmegaConf

from pipelines import evaluate, gradient_flow, one_step, prepare
from tests.helpers import ROOT
from tests.test_file_data import reviews
from toksel.report.header import dataset_rows
from toksel.runtime.config import load_config
from tools.profile import read_profile

DATASETS_DOC, OPERATIONS_DOC = ROOT / "docs" / "datasets.md", ROOT / "docs" / "operations.md"


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


def _documented_sweeps() -> list[tuple[str, ...]]:
    """The `-S` settings of each `dvc exp run` of docs/operations.md that sweeps the synthetic data's one step."""
    found = set()
    for line in OPERATIONS_DOC.read_text().splitlines():
        for command in line.split("&&"):
            if "dvc exp run" in command and "one_step.eta0" in command:
                found.add(tuple(re.findall(r"-S (datasets\.synthetic\.\S+=[^\s`]+)", command)))
    return sorted(found - {()})  # () a line that tells of an old run's value


def test_the_docs_sweep_the_one_step():
    assert ("datasets.synthetic.one_step.eta0=50",) in _documented_sweeps()


@pytest.mark.parametrize("settings", _documented_sweeps(), ids=" ".join)
def test_each_documented_sweep_runs_on_the_quick_profile(project, settings):
    _on_the_quick_profile(project)
    params = OmegaConf.load(project / "params.yaml")
    for setting in settings:
        key, value = setting.split("=", 1)
        OmegaConf.update(params, key, OmegaConf.from_dotlist([f"v={value}"]).v)
    OmegaConf.save(params, project / "params.yaml")
    for stage in (prepare, one_step, gradient_flow):
        assert stage.main(["dataset=synthetic", "base.seeds=[0]"]) == 0, stage.__name__
