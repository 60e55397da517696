"""The named profiles (profiles/*.yaml) that `make quick` and CI run as DVC experiments (tools/profile.py)."""

import pytest

from tests.helpers import ROOT
from toksel.runtime.config import load_config
from tools.profile import main, read_profile, settings, synthetic_targets


@pytest.fixture(autouse=True)
def _in_the_project(monkeypatch):
    monkeypatch.chdir(ROOT)


def test_the_quick_profile_becomes_one_setting_per_value_that_dvc_applies():
    profile = read_profile("quick")
    flags = settings(profile)
    assert '++profile="quick"' in flags and "++base.seeds=[0, 1]" in flags
    assert "++datasets.imdb.model.d=512" in flags and "++train.lr_grid=[0.001, 0.1]" in flags
    assert all(flag.startswith("++") and "=" in flag for flag in flags)


def test_without_real_data_the_synthetic_stages_run(monkeypatch):
    targets = synthetic_targets(read_profile("quick"))
    assert targets == ["evaluate@synthetic", "evaluate@synthetic_independent", "evaluate@synthetic_pair",
                       "evaluate@synthetic_pair_first_order", "phase_diagram", "pair_report", "margins"]


def test_a_profile_is_checked_against_the_schema_before_dvc_starts(tmp_path, monkeypatch, capsys):
    (tmp_path / "profiles").mkdir()
    (tmp_path / "params.yaml").write_text((ROOT / "params.yaml").read_text())
    (tmp_path / "profiles" / "typo.yaml").write_text("profile: typo\ntrain: {max_epoch: 3}\n")
    (tmp_path / "profiles" / "unnamed.yaml").write_text("train: {max_epochs: 3}\n")
    monkeypatch.chdir(tmp_path)
    assert main(["typo"]) == 2
    assert "unknown key 'train.max_epoch'" in capsys.readouterr().err
    assert main(["unnamed"]) == 2
    assert "must be a mapping of params.yaml's sections that sets profile: unnamed" in capsys.readouterr().err
    assert main(["missing"]) == 2
    assert "no profile 'missing': profiles/ holds typo, unnamed" in capsys.readouterr().err


def test_the_full_values_say_they_are_full():
    assert load_config().profile == "full"


def test_the_paper_profile_runs_the_ablations_at_the_papers_sizes():
    flags = settings(read_profile("paper"))  # checked against the schema
    assert '++profile="paper"' in flags and '++sequence.scale="paper"' in flags and "++train.seeds=5" in flags
    assert load_config().sequence.paper.d == 2048  # what sequence.scale=paper selects
