"""dvc.yaml, written by hand, against the code and the settings: every stage depends on the code it computes with
(a file or folder of its deps holds each module it imports, plumbing aside) and lists under `params:` the values its
run logs (pipelines/sections.py; tests/test_stage_reads.py checks every value read, and no more, as the stages run).
A compute stage depends on no plumbing, view or rendering code."""

import grimp
import pytest
import yaml
from dvc.repo import Repo
from dvc.stage import PipelineStage

from pipelines.sections import STAGE_SECTIONS
from tests.helpers import ROOT
from toksel.params import DATASET_SECTIONS

PARAMS = yaml.safe_load((ROOT / "params.yaml").read_text())  # its top-level sections: the shared values

# Code that moves values and files and computes no number: no compute stage depends on it (publish does). The
# schema of params.yaml checks the values, which DVC follows in params.yaml itself (each stage's `params:`).
PLUMBING = ("toksel.runtime", "toksel.tracking", "pipelines.sections", "toksel.params")
COMPUTE = ("prepare", "one_step", "gradient_flow", "train", "ablation", "phase", "d_sweep", "calibrate")
NOT_FOR_COMPUTE = ("src/toksel/runtime", "src/toksel/tracking", "src/toksel/report", "src/toksel/summaries",
                   "src/toksel/publish.py", "src/toksel/params.py")


@pytest.fixture(scope="module")
def graph():
    return grimp.build_graph("toksel", "pipelines")


@pytest.fixture(scope="module")
def stages():
    """Every stage of dvc.yaml as DVC resolves it (one_step@imdb, ablation@yelp_polarity-mlp)."""
    with Repo(str(ROOT)) as repo:
        return {stage.name: stage for stage in repo.index.stages if isinstance(stage, PipelineStage)}


def _paths(stage, kind: str) -> list[str]:
    return [str(item.def_path) for item in getattr(stage, kind)]


def _module_file(module: str) -> str:
    parts = module.split(".")
    return "/".join(["src", *parts] if parts[0] == "toksel" else parts)


def uncovered_imports(graph, stage) -> list[str]:
    """The modules the stage's command imports (directly or not) that no dep of it holds, plumbing aside."""
    module = stage.cmd.split()[2]
    deps = [path.rstrip("/") for path in _paths(stage, "deps")]
    imported = ({module} | graph.find_upstream_modules(module)) - {"toksel", "pipelines"}
    return sorted(name for name in imported if not name.startswith(PLUMBING) and not any(
        _module_file(name) == dep.removesuffix(".py") or _module_file(name).startswith(f"{dep}/") for dep in deps))


def _keys(stage) -> set[str]:
    return {key for dep in stage.deps if hasattr(dep, "params") for key in dep.params}


def covered(key: str, keys: set[str]) -> bool:
    """Whether `key` (base.seeds, datasets.imdb.model) lies within a listed key (base, datasets), or is whole
    params.yaml."""
    return any(key == listed or key.startswith(f"{listed}.") for listed in keys)


def unread_keys(stage, keys: set[str]) -> list[str]:
    """What the stage reads (pipelines/sections.py) that its params leave out: the shared section's value, and its
    dataset's own (datasets.<name>.<section>) where the section is one an entry holds. A key its command line sets
    (phase's model.d) is the command's."""
    name = stage.name.split("@")[0]
    args = dict(arg.split("=", 1) for arg in stage.cmd.split() if "=" in arg)
    dataset = args.get("dataset")
    missing = []
    for read in STAGE_SECTIONS.get(name, ()):
        section = read.split(".")[0]
        if any(covered(arg, {read}) or covered(read, {arg}) for arg in args if arg != "dataset"):
            continue
        shared = section in PARAMS and not covered(read, keys)
        own = (section in DATASET_SECTIONS and dataset is not None
               and not covered(f"datasets.{dataset}.{section}", keys))
        if shared or own:
            missing.append(read)
    return missing


def test_every_stage_depends_on_the_code_it_imports(graph, stages):
    assert len(stages) > 30
    assert {name: uncovered_imports(graph, stage) for name, stage in stages.items()
            if uncovered_imports(graph, stage)} == {}


def test_no_compute_stage_depends_on_plumbing_views_or_rendering(stages):
    found = [f"{name}: {path}" for name, stage in stages.items() if name.split("@")[0] in COMPUTE
             for path in _paths(stage, "deps") if path.startswith(NOT_FOR_COMPUTE)]
    assert found == []


def test_the_report_s_own_code_reruns_the_report_alone(stages):
    """The report's template, page and sections (src/toksel/report): an edit of them reruns `report`, no stage that
    writes a summary (those write with src/toksel/summaries)."""
    assert [name for name, stage in stages.items() if "src/toksel/report" in _paths(stage, "deps")] == ["report"]


def test_the_settings_check_reruns_when_the_schema_changes(stages):
    """A new range or rule may refuse what passed: check_params, which stops a pipeline before DVC deletes any output,
    runs again (its verdict, the same when params.yaml still passes, reruns nothing after it)."""
    assert {"src/toksel/params.py", "src/toksel/runtime/config.py"} <= set(_paths(stages["check_params"], "deps"))


GIT_SHOWN = ("report", "ledger", "publish")  # the last stages: what git shows comes from them (cache: false)


def test_every_stage_can_come_from_the_run_cache_and_git_shows_only_the_last_stages(stages):
    """DVC's run cache restores a stage only when none of its outputs persists: then a variant re-runs only the stages
    its change reaches. Uncached outputs (in git) are the report's, the ledger's and publish's alone; every other
    output is in DVC's cache, where `dvc checkout` finds what a stopped stage lost."""
    outs = {name: stage.outs for name, stage in stages.items()}
    assert [f"{name}: {out.def_path}" for name, found in outs.items() for out in found if out.persist] == []
    assert sorted({name for name, found in outs.items() for out in found if not out.use_cache}) == sorted(GIT_SHOWN)
    assert {str(out.def_path) for out in outs["report"] if not out.use_cache} >= {
        "results/report/report.md", "results/report/claims.csv", "results/report/verdicts.json"}


def test_every_stage_lists_the_values_its_run_logs(stages):
    for name, stage in stages.items():
        keys = _keys(stage)
        if name == "check_params" or stage.always_changed:
            continue  # params.yaml whole, as a file; the ledger and publish run every time
        assert unread_keys(stage, keys) == [], name


def test_the_checks_find_what_they_look_for(graph, stages):
    """Each check could fail: an import no dep holds, a value read and not listed."""
    flow = stages["gradient_flow@imdb"]
    graph.add_import(importer="pipelines.gradient_flow", imported="toksel.training.fit")
    assert "toksel.training.fit" in uncovered_imports(graph, flow)
    assert "toksel.runtime.config" not in uncovered_imports(graph, flow)  # plumbing
    assert "toksel.params" not in uncovered_imports(graph, flow)  # the schema: DVC follows the values
    without = {key for key in _keys(flow) if key != "datasets.imdb.gradient_flow"}
    assert unread_keys(flow, without) == ["gradient_flow"]
    assert not covered("datasets.imdb.one_step", {"datasets.imdb.data", "one_step"})
