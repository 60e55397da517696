"""The ledger of the rules in force (toksel.claims.ledger): each rule component dated by git's history, and marked
changed after the data when results named its claim before the commit that set it. On small repositories built
here, then on this project's own history."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from pipelines import ledger as ledger_stage
from tests.helpers import ROOT
from toksel.claims.catalogue import CLAIMS
from toksel.claims.ledger import (
    ABSENT,
    CHANGED,
    FIXED,
    NOT_SET,
    THRESHOLD_VALUE,
    UNCOMMITTED,
    UNREADABLE,
    build_ledger,
    key_comments,
    per_claim_status,
)
from toksel.claims.pilots import PILOTS, Coded, Pilot

RANK = "report.min_rank_agreement"
RANKED = sorted(claim.id for claim in CLAIMS if claim.threshold == RANK)  # the claims judged on it
SPREAD = "report.min_spread_ratio"


def git(repo: Path, *args: str) -> str:
    """git in `repo`, whatever the environment says of another repository or of signing."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}
    done = subprocess.run(["git", "-c", "user.name=Ledger Test", "-c", "user.email=ledger@example.org",
                           "-c", "commit.gpgsign=false", *args], cwd=repo, env=env, check=True, capture_output=True,
                          text=True)
    return done.stdout.strip()


def commit(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "--short", "HEAD")


def set_param(repo: Path, key: str, value: float) -> None:
    """Change one value of the repository's params.yaml in place, its comment kept."""
    section, name = key.split(".")
    path = repo / "params.yaml"
    text, count = re.subn(rf"^(  {name}:\s*)[^\s#]+", rf"\g<1>{value}", path.read_text(), count=1, flags=re.M)
    assert count == 1 and yaml.safe_load(text)[section][name] == value
    path.write_text(text)


def write_results(repo: Path, ids: list[str]) -> None:
    results = repo / "results" / "compare" / "x" / "claims.json"
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(json.dumps({"claims": [{"id": claim} for claim in ids]}, indent=2))


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository holding this project's params.yaml (report.min_rank_agreement 0.5, report.min_spread_ratio
    1.1) and claims package, nothing committed yet."""
    repo = tmp_path / "repo"
    (repo / "src" / "toksel" / "claims").mkdir(parents=True)
    shutil.copy(ROOT / "params.yaml", repo / "params.yaml")
    for module in (ROOT / "src" / "toksel" / "claims").glob("*.py"):  # catalogue.py, verdict.py, what they import
        shutil.copy(module, repo / "src" / "toksel" / "claims" / module.name)
    set_param(repo, RANK, 0.5)
    set_param(repo, SPREAD, 1.1)
    git(repo, "init", "-q")
    return repo


def records_of(ledger, component: str) -> dict[str, dict]:
    return {record["claim"]: record for record in ledger.records if record["component"] == component}


def test_a_threshold_changed_after_results_named_its_claims_is_changed_after_the_data(repo):
    write_results(repo, RANKED)
    first = commit(repo, "claims, thresholds and their results")
    set_param(repo, RANK, 0.6)
    change = commit(repo, "a lower bar for the rank claims\n\nbody text")
    ledger = build_ledger(repo, pilots=())  # results/ alone: the pilots are tested below
    assert ledger.available and ledger.warnings == [] and ledger.head.startswith(f"{change} a lower bar")

    thresholds = records_of(ledger, THRESHOLD_VALUE)
    for claim in RANKED:
        record = thresholds[claim]
        assert (record["value"], record["previous"], record["set_in"]) == (0.6, 0.5, change)
        assert record["subject"] == "a lower bar for the rank claims"
        assert record["results_before"] is True and record["status"] == CHANGED
        assert record["reason"] == key_comments((repo / "params.yaml").read_text())[RANK] != ""
    status = per_claim_status(ledger.records)
    assert set(status) == {claim.id for claim in CLAIMS}
    for claim, changed in status.items():  # the rank claims by their threshold alone, every other claim not at all
        assert [record["component"] for record in changed] == ([THRESHOLD_VALUE] if claim in RANKED else []), claim
    untouched = [record for record in ledger.records if record["status"] == FIXED]
    assert untouched and all(record["set_in"] == first and record["previous"] == ABSENT for record in untouched)


def test_a_threshold_changed_before_any_result_is_fixed_before_the_data(repo):
    commit(repo, "claims and thresholds")
    set_param(repo, SPREAD, 1.3)
    change = commit(repo, "a higher bar, before any run")
    write_results(repo, [claim.id for claim in CLAIMS])
    commit(repo, "the first results")
    record = records_of(build_ledger(repo), THRESHOLD_VALUE)["spread_ratio_v"]
    assert (record["value"], record["previous"], record["set_in"]) == (1.3, 1.1, change)
    assert record["results_before"] is False and record["status"] == FIXED


def test_an_uncommitted_change_is_dated_uncommitted_and_judged_against_head(repo):
    write_results(repo, RANKED)
    commit(repo, "claims, thresholds and their results")
    set_param(repo, RANK, 0.7)  # on disk only
    ledger = build_ledger(repo)
    assert "uncommitted" in ledger.head
    record = records_of(ledger, THRESHOLD_VALUE)[RANKED[0]]
    assert (record["value"], record["previous"], record["set_in"]) == (0.7, 0.5, UNCOMMITTED)
    assert record["status"] == CHANGED  # HEAD's results named the claim


def test_a_commit_whose_claims_module_cannot_load_is_unreadable_with_a_warning(repo):
    commit(repo, "claims and thresholds")
    catalogue = repo / "src" / "toksel" / "claims" / "catalogue.py"
    good = catalogue.read_text()
    catalogue.write_text(good + "\nthis is not python (\n")
    broken = commit(repo, "a half edit")
    catalogue.write_text(good)
    mended = commit(repo, "mended")
    ledger = build_ledger(repo)
    assert len(ledger.warnings) == 1 and broken in ledger.warnings[0] and "SyntaxError" in ledger.warnings[0]
    statistic = records_of(ledger, "statistic")["v_increasing"]
    # Nothing says what the rule was at the broken commit: the value holds from the commit that mended it.
    assert (statistic["previous"], statistic["set_in"], statistic["status"]) == (UNREADABLE, mended, FIXED)
    assert records_of(ledger, THRESHOLD_VALUE)["v_increasing"]["previous"] == UNREADABLE


def test_without_a_history_the_ledger_says_so_and_lists_nothing(tmp_path, monkeypatch, capsys):
    plain = tmp_path / "plain"
    plain.mkdir()
    shutil.copy(ROOT / "params.yaml", plain / "params.yaml")
    ledger = build_ledger(plain)
    assert not ledger.available and ledger.records == [] and len(ledger.warnings) == 1
    assert "history unavailable" in ledger.warnings[0] and per_claim_status(ledger.records) == {}
    # The stage still finishes, and its outputs say why they are empty.
    monkeypatch.chdir(plain)
    assert ledger_stage.main([]) == 0
    written = json.loads((plain / "results" / "ledger" / "ledger.json").read_text())
    assert written["available"] is False and written["records"] == []
    assert "history unavailable" in capsys.readouterr().err


def test_the_stage_writes_the_records_and_the_page_under_what_head_was(repo, monkeypatch):
    write_results(repo, RANKED)
    commit(repo, "claims, thresholds and their results")
    set_param(repo, RANK, 0.6)
    change = commit(repo, "a lower bar for the rank claims")
    monkeypatch.chdir(repo)
    assert ledger_stage.main([]) == 0
    out = repo / "results" / "ledger"
    written = json.loads((out / "ledger.json").read_text())
    assert written["records"] == build_ledger(repo).records and "head" not in written  # a commit alone changes nothing
    page = (out / "ledger.md").read_text()
    assert f"HEAD: {change} a lower bar" in page
    first = written["records"][0]["history"][0]["from"]
    assert (f"| {RANKED[0]} | threshold_value | 0.6 | {change}: a lower bar for the rank claims | 0.5 ({first}) -> "
            f"0.6 ({change}) | {CHANGED} |") in page


def test_a_pilot_sets_the_components_it_names_changed_after_the_data_with_what_was_seen(repo):
    """No result under results/ names the pair claims; a pilot note saying their threshold was set after numbers
    were seen makes it changed after the data, with the note, and names nothing else."""
    commit(repo, "claims and thresholds, no result yet")
    pair = sorted(claim.id for claim in CLAIMS if claim.threshold == "pair.past_cap")
    assert records_of(build_ledger(repo, pilots=()), THRESHOLD_VALUE)[pair[0]]["status"] == FIXED
    note = Pilot(("pair.past_cap",), "0.75 on four seeds", "a note")
    ledger = build_ledger(repo, pilots=(note,))
    thresholds = records_of(ledger, THRESHOLD_VALUE)
    assert all(thresholds[claim]["status"] == CHANGED and thresholds[claim]["pilot"] == "0.75 on four seeds (a note)"
               for claim in pair)
    changed = [(record["claim"], record["component"]) for record in ledger.records if record["status"] == CHANGED]
    assert sorted(changed) == [(claim, THRESHOLD_VALUE) for claim in pair]
    # A dataset's override of a key is the key's.
    lr = Pilot(("train.lr",), "a plateau", "a log")
    assert lr.names("datasets.synthetic_pair.train.lr") and not lr.names("train.lr_grid")


def test_every_pilot_names_a_rule_component(repo):
    """A pilot whose keys no component matches would be written down for nothing."""
    commit(repo, "claims and thresholds")
    ledger = build_ledger(repo)
    for pilot in PILOTS:
        for key in pilot.keys:
            thresholds = {claim.id: claim.threshold for claim in CLAIMS}
            named = [record for record in ledger.records if Pilot((key,), "", "").names(
                thresholds[record["claim"]] if record["component"] == THRESHOLD_VALUE else record["component"])]
            assert named and all(record["status"] == CHANGED and pilot.seen in record["pilot"] for record in named), key


def test_a_value_held_in_code_fills_an_unset_field_from_its_commit_on(repo):
    """Before the claims had a field for a component, code held its value: from the commit that put it there, the
    ledger reads that value wherever the field is unset, and a field set later is a change from it."""
    catalogue = repo / "src" / "toksel" / "claims" / "catalogue.py"
    current = catalogue.read_text()
    catalogue.write_text(current.replace('CONVERGED = "tuned lr, trained to convergence"', 'CONVERGED = ""'))
    first = commit(repo, "claims, the protocol in code")
    set_param(repo, RANK, 0.6)
    second = commit(repo, "another commit")
    catalogue.write_text(current)
    third = commit(repo, "the protocol as a field")
    coded = (Coded("protocol", ("accuracy_gap",), second, "matched", "compare.py"),)
    protocol = records_of(build_ledger(repo, pilots=(), coded=coded), "protocol")
    assert [(run["value"], run["from"]) for run in protocol["accuracy_gap"]["history"]] == [
        ("", first), ("matched (in code: compare.py)", second), ("tuned lr, trained to convergence", third)]
    assert protocol["accuracy_gap_size"]["previous"] == ""  # a claim the entry does not name keeps its field


def test_a_components_history_lists_every_value_it_took(repo):
    commit(repo, "claims and thresholds")
    set_param(repo, RANK, 0.6)
    up = commit(repo, "a higher bar")
    set_param(repo, RANK, 0.5)
    back = commit(repo, "the bar as it was")
    record = records_of(build_ledger(repo), THRESHOLD_VALUE)[RANKED[0]]
    assert [run["value"] for run in record["history"]] == [0.5, 0.6, 0.5]
    assert [run["from"] for run in record["history"]][1:] == [up, back] and record["set_in"] == back


def test_a_setting_is_followed_at_the_top_level_and_in_each_dataset_override(repo):
    (repo / "params.yaml").write_text(
        "gradient_flow:\n"
        "  horizon: 100.0          # the flow time\n"
        "datasets:\n"
        "  a:\n"
        "    gradient_flow: {horizon: 5.0}  # a stiff one:\n"
        "      # steps of about 1\n"
        "  b:\n"
        "    gradient_flow: {}\n"
        "report:\n"
        "  min_rank_agreement: 0.5\n")
    commit(repo, "the flow's horizon")
    (repo / "params.yaml").write_text((repo / "params.yaml").read_text().replace("{horizon: 5.0}", "{horizon: 6.0}"))
    change = commit(repo, "a longer flow on a")
    claim = dataclasses.replace(CLAIMS[0], settings=("gradient_flow.horizon",))
    parts = {record["component"]: record for record in build_ledger(repo, [claim]).records}
    # Followed per dataset, as each one's stages read it: a's own value, b's the shared one.
    assert "gradient_flow.horizon" not in parts
    override = parts["datasets.a.gradient_flow.horizon"]
    assert (override["value"], override["previous"], override["set_in"]) == (6.0, 5.0, change)
    assert override["reason"] == "a stiff one: steps of about 1"
    assert parts["datasets.b.gradient_flow.horizon"]["value"] == 100.0
    # A value moved from the shared section into b's entry is the same rule: nothing changed for b.
    (repo / "params.yaml").write_text((repo / "params.yaml").read_text().replace(
        "    gradient_flow: {}\n", "    gradient_flow: {horizon: 100.0}\n"))
    commit(repo, "b's horizon written in its entry")
    moved = {record["component"]: record for record in build_ledger(repo, [claim]).records}
    assert moved["datasets.b.gradient_flow.horizon"]["set_in"] == parts["datasets.b.gradient_flow.horizon"]["set_in"]
    assert parts[THRESHOLD_VALUE]["value"] == NOT_SET  # evaluate.min_pearson_r is not in this params.yaml


def _real_history_missing() -> str:
    if shutil.which("git") is None:
        return "git is not installed"
    shallow = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--is-shallow-repository"], capture_output=True,
                             text=True)
    if shallow.returncode != 0:
        return f"{ROOT} is not a git repository"
    return "the project's history is a shallow clone" if shallow.stdout.strip() == "true" else ""


@pytest.mark.skipif(bool(_real_history_missing()), reason=_real_history_missing() or "the history is there")
def test_this_projects_history_shows_the_rules_changed_after_its_first_results():
    ledger = build_ledger(ROOT)
    assert ledger.available
    spread = records_of(ledger, THRESHOLD_VALUE)["spread_ratio_v"]  # report.min_spread_ratio, 2.0 -> 1.1
    assert spread["set_in"][:7] == "7abfcc1" and spread["previous"] == 2.0 and spread["status"] == CHANGED
    statistic = records_of(ledger, "statistic")["v_increasing"]
    assert statistic["status"] == CHANGED and statistic["previous"]["metric"] == "spearman_v_alpha"
    horizon = records_of(ledger, "margins.horizon")["margin_converged"]  # set after a pilot's cosines
    assert horizon["status"] == CHANGED and "0.990 at 1e14" in horizon["pilot"]
    # The training claims' protocol lived in code before it was a field: tuned, then matched, then tuned again.
    protocol = records_of(ledger, "protocol")["accuracy_gap"]
    assert [run["from"][:7] for run in protocol["history"][1:]] == ["3b140b8", "7abfcc1", "b77728b"]
    assert [run["value"].split(" (")[0] for run in protocol["history"][1:]] == [
        "tuned lr", "matched lr", "tuned lr, trained to convergence"]
    assert protocol["previous"].startswith("matched lr") and protocol["status"] == CHANGED


@pytest.mark.skipif(bool(_real_history_missing()), reason=_real_history_missing() or "the history is there")
def test_the_docs_say_what_the_ledger_says():
    """docs/verdicts.md's table of the rules changed after the data is the ledger's (python -m pipelines.ledger
    --docs writes it): a rule changed without it fails here."""
    text = (ROOT / "docs" / "verdicts.md").read_text()
    written = text[text.index(ledger_stage.START):text.index(ledger_stage.END) + len(ledger_stage.END)]
    assert written == ledger_stage.docs_block(build_ledger(ROOT).records)
