"""The named profiles (profiles/*.yaml) that `make quick` and CI run as DVC experiments (tools/profile.py)."""

import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers import ROOT
from toksel.runtime.config import load_config
from tools import profile
from tools.profile import main, newest_experiment, read_profile, settings, synthetic_targets


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


def test_a_variant_starts_from_the_profiles_own_run_rather_than_from_a_newer_variant(tmp_path, monkeypatch):
    """The experiment a variant starts from: the newest whose params are the profile's own values; without one,
    the newest of the profile; another profile's or another commit's, never."""
    monkeypatch.chdir(tmp_path)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", "-b", "main"], check=True)
    Path("params.yaml").write_text("profile: full\nlr: 0.1\n")
    Path("dvc.lock").write_text("schema: '2.0'\nstages: {}\n")
    subprocess.run(["git", "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "head"], check=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()

    def experiment(name: str, params: str, when: int) -> None:
        Path("params.yaml").write_text(params)
        Path("dvc.lock").write_text(f"# {name}\n")
        subprocess.run(["git", "add", "-A"], check=True)
        tree = subprocess.run(["git", "write-tree"], capture_output=True, text=True, check=True).stdout.strip()
        dated = {**os.environ, "GIT_COMMITTER_DATE": f"{1_700_000_000 + when} +0000"}
        commit = subprocess.run([*git, "commit-tree", tree, "-p", head, "-m", name], capture_output=True, text=True,
                                check=True, env=dated).stdout.strip()
        subprocess.run(["git", "update-ref", f"refs/exps/{head[:2]}/{head[2:]}/{name}", commit], check=True)
        subprocess.run(["git", "checkout", "-q", "--", "."], check=True)
        subprocess.run(["git", "reset", "-q"], check=True)

    quick = {"profile": "quick", "lr": 0.01}
    assert newest_experiment("quick", quick) is None
    experiment("other", "profile: paper\nlr: 0.01\n", 1_000)
    experiment("base", "profile: quick\nlr: 0.01\n", 2_000)
    experiment("variant", "profile: quick\nlr: 0.02\n", 3_000)
    assert newest_experiment("quick", quick) == ("base", "# base\n")
    assert newest_experiment("quick", {"profile": "quick", "lr": 0.5}) == ("variant", "# variant\n")
    assert newest_experiment("paper", None) == ("other", "# other\n")


def test_the_closing_line_finds_an_experiment_whose_baseline_is_no_longer_head(monkeypatch):
    """A commit made while `make quick` ran moves HEAD off the experiment's baseline: `dvc exp list` then shows
    HEAD's experiments only, and the closing line must still name the experiment that exists."""
    def dvc(args, **_):
        found = "quick-1" if "--all-commits" in args else ""
        return subprocess.CompletedProcess(args, 0, stdout=found, stderr="")

    monkeypatch.setattr(profile.subprocess, "run", dvc)
    monkeypatch.setattr(profile, "parent_run", lambda name: True)
    assert profile.closing("quick-1").startswith("its results are in the DVC experiment quick-1")
    assert profile.closing("quick-2").startswith("DVC kept no experiment quick-2")
