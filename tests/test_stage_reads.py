"""What each stage reads of the settings, seen while it runs, against the keys dvc.yaml lists under its `params:`.

Every stage of a tiny project runs in this process, in DVC's order, with each read of a settings value recorded
while the stage computes (its units of work: the run records and the fan-out around them move values and compute
no number). DVC reruns a stage when a listed value changes, so a value read but not listed would let a stale result
stand (or come back from the run cache), and one listed but not read reruns the stage for nothing and weighs on
dvc.lock, which DVC reads and rewrites around every stage.

How a read is counted: a value of the stage's own dataset's config, under a section an entry of `datasets` may hold
(data, model, one_step, gradient_flow, train), asks for the shared section and the entry's (datasets.<name>.<section>)
whole, since the real data's paths read more of them than the tiny synthetic one does; any other value asks for its
key (evaluate reads pair.dataset, not the rest of pair). A value read from another dataset's config (the report's,
calibrate's and negation's dataset_configs) asks for `datasets` whole and the shared section.
"""

from __future__ import annotations

import contextlib
import dataclasses
import graphlib
import importlib
import typing
from collections.abc import Iterator

import pytest
import yaml

import toksel.params
import toksel.runtime.cli
from pipelines.sections import STAGE_SECTIONS
from tests.helpers import ROOT, tiny_dvc_project
from toksel.params import DATASET_SECTIONS, Config

pytestmark = pytest.mark.slow

NOT_RUN = ("toksel.publish",)  # the view in MLflow: no value of a section, and it runs every time
SHARED = yaml.safe_load((ROOT / "params.yaml").read_text())  # the shared sections, the entries' own ones


class Reads:
    """The values read through Config objects while `on`: (owner, section, key), the owner "own" for the config
    the stage's unit was handed and "other" for any other (another dataset's)."""

    def __init__(self) -> None:
        self.on, self.own, self.found = False, -1, set()
        self.owners: dict[int, str] = {}  # id of a section object -> the owner it was read through

    def section(self, config: Config, name: str, value: object) -> None:
        if self.on:
            owner = "own" if id(config) == self.own else "other"
            self.owners[id(value)] = owner
            if not dataclasses.is_dataclass(value):  # a top-level value: profile, datasets
                self.found.add((owner, name, ""))

    def key(self, section_object: object, section: str, key: str) -> None:
        if self.on:
            # a section object the stage made from its own values (a flow's settings for a phase cell) is its own
            self.found.add((self.owners.get(id(section_object), "own"), section, key))


@contextlib.contextmanager
def recorded(monkeypatch: pytest.MonkeyPatch) -> Iterator[Reads]:
    reads = Reads()
    hints = typing.get_type_hints(Config)
    sections = {field.name: hints[field.name] for field in dataclasses.fields(Config)}
    top_level = {name for name in sections if name not in ("dataset", "seed", "compute")}
    for name, kind in sections.items():
        if dataclasses.is_dataclass(kind) and name != "compute":  # compute: where units run, in no stage's params
            fields = {field.name for field in dataclasses.fields(kind)}
            original = kind.__getattribute__

            def read_key(self, key, _original=original, _section=name, _fields=fields):
                if key in _fields:
                    reads.key(self, _section, key)
                return _original(self, key)

            monkeypatch.setattr(kind, "__getattribute__", read_key)
    config_getattribute = Config.__getattribute__

    def read_section(self, name):
        value = config_getattribute(self, name)
        if name in top_level:
            reads.section(self, name, value)
        return value

    monkeypatch.setattr(Config, "__getattribute__", read_section)
    validate = Config.__post_init__

    def unrecorded_validation(self):  # the schema's rules read every value: check_params's job, not the stage's
        was, reads.on = reads.on, False
        try:
            validate(self)
        finally:
            reads.on = was

    monkeypatch.setattr(Config, "__post_init__", unrecorded_validation)
    run_unit = toksel.runtime.cli._run_unit

    def recorded_unit(unit, captured=True):
        reads.on, reads.own = True, id(unit.config)
        try:
            return run_unit(unit, captured)
        finally:
            reads.on = False

    monkeypatch.setattr(toksel.runtime.cli, "_run_unit", recorded_unit)
    run = toksel.runtime.cli._run

    def recorded_run(stage, sections, body, argv, every_seed, seeds, *rest):
        """A stage of every seed reads which seeds (base.seeds, or what `seeds` reads) before its units."""
        def seeds_read(config):
            reads.on, reads.own = True, id(config)
            try:
                return seeds(config) if seeds else config.base.seeds
            finally:
                reads.on = False
        return run(stage, sections, body, argv, every_seed, seeds_read if every_seed else seeds, *rest)

    monkeypatch.setattr(toksel.runtime.cli, "_run", recorded_run)
    yield reads


def covered(key: str, listed: set[str]) -> bool:
    return any(key == item or key.startswith(f"{item}.") for item in listed)


def needed(reads: set[tuple[str, str, str]], dataset: str, set_by_command: set[str]) -> set[str]:
    """The keys dvc.yaml must list for these reads (the module's notes say how a read is counted)."""
    keys = set()
    for owner, section, key in reads:
        read = f"{section}.{key}".rstrip(".")
        if any(covered(read, {item}) or covered(item, {read}) for item in set_by_command):
            continue  # the command's (phase's model.d)
        if section in DATASET_SECTIONS:
            keys |= {section} & SHARED.keys()
            if owner == "other":
                keys.add("datasets")
            elif section in SHARED["datasets"][dataset]:
                keys.add(f"datasets.{dataset}.{section}")
        else:
            keys.add(read)
    return keys


@pytest.fixture(scope="module")
def stage_reads(tmp_path_factory) -> dict[str, tuple[set[str], set[str], set[str]]]:
    """stage -> (the keys its reads need, the keys dvc.yaml lists, the keys its command sets), every stage of the
    tiny project run once."""
    from dvc.repo import Repo
    from dvc.stage import PipelineStage

    folder = tiny_dvc_project(tmp_path_factory.mktemp("reads"))
    params = (folder / "params.yaml").read_text()
    (folder / "params.yaml").write_text(params.replace("workers: 0", "workers: 1"))  # every unit in this process
    with Repo(str(folder)) as repo:
        graph = repo.index.graph
        # DVC's graph points from a stage to those it reads from: they come first
        order = graphlib.TopologicalSorter({stage: set(graph.successors(stage)) for stage in graph}).static_order()
        stages = [stage for stage in order if isinstance(stage, PipelineStage)]
        listed = {stage.name: {key for dep in stage.deps if hasattr(dep, "params") for key in dep.params}
                  for stage in stages}
        commands = {stage.name: stage.cmd.split() for stage in stages}
    found = {}
    with pytest.MonkeyPatch.context() as monkeypatch, recorded(monkeypatch) as reads:
        monkeypatch.chdir(folder)
        monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{folder / 'mlflow.db'}")
        for name, command in commands.items():
            if command[2] in NOT_RUN:
                continue
            reads.found = set()
            assert importlib.import_module(command[2]).main(command[3:]) == 0, name
            arguments = dict(item.split("=", 1) for item in command[3:])
            # a stage of every dataset (the report) reads the default dataset's config as its own
            dataset = arguments.pop("dataset", Config.dataset)
            declared = {("own", *(*read.split(".", 1), "")[:2]) for read in STAGE_SECTIONS.get(name.split("@")[0], ())}
            found[name] = (needed(reads.found | declared, dataset, set(arguments)), listed[name], set(arguments))
    return found


def test_dvc_yaml_lists_every_value_a_stage_reads(stage_reads):
    assert len(stage_reads) > 20
    assert {name: sorted(key for key in needs if not covered(key, listed))
            for name, (needs, listed, _) in stage_reads.items()
            if any(not covered(key, listed) for key in needs)} == {}


def whole(section: str, read: set[str]) -> bool:
    """A shared section the stage reads half of or more: listed whole, for the keys its other paths read
    (sequence.paper where sequence.scale is paper; this run reads sequence.cpu)."""
    keys = SHARED.get(section)
    return isinstance(keys, dict) and 2 * sum(covered(f"{section}.{key}", read) for key in keys) >= len(keys)


def unread(needs: set[str], listed: set[str], command: set[str]) -> list[str]:
    """The keys listed for the stage that hold no read of it (a key its command sets counts as read)."""
    return sorted(key for key in listed if not covered(key, needs) and not whole(key, needs | command))


def test_dvc_yaml_lists_no_value_a_stage_does_not_read(stage_reads):
    """Each listed key lies within a key the stage reads (check_params and the ledger read params.yaml whole)."""
    assert {name: unread(*found) for name, found in stage_reads.items() if unread(*found)} == {}



def test_the_checks_find_what_they_look_for(stage_reads):
    """A value read and not listed, a key listed and not read, a section read in part listed whole."""
    needs, listed, command = stage_reads["evaluate@synthetic"]
    assert "pair.dataset" in needs and not covered("pair.dataset", listed - {"pair.dataset"})
    assert unread(needs, listed | {"calibration", "report"}, command) == ["calibration", "report"]
    assert whole("evaluate", needs) and not whole("margins", needs)
