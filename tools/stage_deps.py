"""Each stage's source deps in dvc.yaml, computed: the files of the project modules its entry module imports
(at module level or inside a function, directly or not; grimp's graph, the one import-linter checks the layers
on), with their packages' __init__.py and a module's template (its name with .jinja), but the modules that
cannot change a result (RESULT_NEUTRAL). A compute stage (COMPUTE_STAGES) must import no MLflow view and no report
rendering (FOR_VIEWS_ONLY): editing those reruns only the stages that render or publish (docs/design.md).

`python -m tools.stage_deps` rewrites the source part of every stage's deps (the files under pipelines/ and
src/) and keeps the rest (data, results) and the comments; `--check` only says which stage would change, exit 1.
tests/test_stage_deps.py runs the check, so dvc.yaml cannot drift from the imports.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import grimp
from ruamel.yaml import YAML

ROOT = Path(__file__).resolve().parents[1]
STAGE_MODULE = re.compile(r"python -m ((?:pipelines|toksel)\.\w+)")
SOURCE = ("pipelines/", "src/")
# Whether progress bars are drawn, which known warnings are silenced, whether curves are sent to MLflow live: no
# result depends on them.
RESULT_NEUTRAL = {"toksel.runtime.progress", "toksel.runtime.known_warnings", "toksel.runtime.live",
                  "toksel.runtime.experiment"}
COMPUTE_STAGES = ("prepare", "one_step", "gradient_flow", "train", "ablation", "phase", "d_sweep", "calibrate")
FOR_VIEWS_ONLY = ("src/toksel/tracking/", "src/toksel/publish.py", "src/toksel/ui.py", "src/toksel/report/document.",
                  "src/toksel/report/markdown.py", "src/toksel/report/comparison.py", "src/toksel/report/readings.py",
                  "src/toksel/report/render_check.py", "src/toksel/report/header.py", "src/toksel/report/forest.py")


def _file(module: str) -> str:
    parts = module.split(".")
    base = Path("src", *parts) if parts[0] == "toksel" else Path(*parts)
    return str(base / "__init__.py") if (ROOT / base).is_dir() else str(base.with_suffix(".py"))


def imported_files(graph: grimp.ImportGraph, module: str) -> list[str]:
    """The files `module` runs when imported: its own, every project module it imports, their packages."""
    modules = ({module} | graph.find_upstream_modules(module)) - RESULT_NEUTRAL
    packages = {".".join(m.split(".")[:i]) for m in modules for i in range(1, len(m.split(".")))}
    files = [_file(m) for m in modules | packages]
    # A module's template, named after it (report/document.py renders report/document.jinja), is its code too.
    templates = [str(Path(name).with_suffix(".jinja")) for name in files
                 if (ROOT / name).with_suffix(".jinja").exists()]
    return sorted(files + templates)


def stage_bodies(dvc: dict) -> dict[str, dict]:
    """stage name -> the mapping holding its cmd and deps (a foreach stage's `do`)."""
    return {name: stage.get("do", stage) for name, stage in dvc["stages"].items()}


def computed_deps(graph: grimp.ImportGraph, body: dict) -> list[str]:
    """The stage's deps with its source part recomputed: source files first, then its other deps as they were."""
    module = STAGE_MODULE.search(body["cmd"]).group(1)
    return [*imported_files(graph, module), *[dep for dep in body["deps"] if not str(dep).startswith(SOURCE)]]


def views_in_compute(dvc: dict) -> list[str]:
    """`stage: file` for each view or rendering file among a compute stage's deps."""
    bodies = stage_bodies(dvc)
    return [f"{stage}: {dep}" for stage in COMPUTE_STAGES for dep in map(str, bodies[stage]["deps"])
            if dep.startswith(FOR_VIEWS_ONLY)]


def main(argv: list[str] | None = None) -> int:
    check = "--check" in (sys.argv[1:] if argv is None else argv)
    yaml = YAML()
    yaml.width = 120
    yaml.preserve_quotes = True
    yaml.indent(mapping=2, sequence=4, offset=2)  # the file's own style
    path = ROOT / "dvc.yaml"
    dvc = yaml.load(path)
    graph = grimp.build_graph("toksel", "pipelines")
    changed = []
    for name, body in stage_bodies(dvc).items():
        deps, listed = computed_deps(graph, body), [str(dep) for dep in body["deps"]]
        if listed != deps:
            missing, extra = sorted(set(deps) - set(listed)), sorted(set(listed) - set(deps))
            changed.append(f"{name} (missing: {', '.join(missing) or 'none'}; not imported: "
                           f"{', '.join(extra) or 'none'})")
            body["deps"] = deps
    if check:
        for name in changed:
            print(f"dvc.yaml: the deps of {name} are not what it imports (python -m tools.stage_deps rewrites them)")
        for found in views_in_compute(dvc):
            print(f"dvc.yaml: a compute stage depends on view or rendering code: {found}")
        return 1 if changed or views_in_compute(dvc) else 0
    if changed:
        yaml.dump(dvc, path)
    print(f"dvc.yaml: {len(changed)} stages' deps rewritten" if changed else "dvc.yaml: every stage's deps hold")
    return 0


if __name__ == "__main__":
    sys.exit(main())
