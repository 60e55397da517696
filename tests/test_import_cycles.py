"""No import circle anywhere in the package: each module can be read knowing only the ones below it. grimp (the
graph import-linter builds) counts every import, a function-local one as well. And every package the code imports
is one pyproject.toml declares: none reaches the code only as another package's dependency."""

import importlib.metadata
import re
import sys
import tomllib

import grimp

from tests.helpers import ROOT


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return groups


def test_the_package_has_no_import_cycle():
    assert _cycles(grimp.build_graph("toksel", "pipelines")) == []


def test_the_check_finds_a_planted_cycle():
    graph = grimp.build_graph("toksel")
    graph.add_import(importer="toksel.runtime.paths", imported="toksel.tracking.view")  # the view imports paths
    assert any({"toksel.runtime.paths", "toksel.tracking.view"} <= set(group) for group in _cycles(graph))


def _name(requirement: str) -> str:
    """A distribution's name as pip compares them (PEP 503): `PyYAML`, `pyyaml` and `py_yaml` alike."""
    return re.sub(r"[-_.]+", "-", re.split(r"[\s\[=<>!~;]", requirement, maxsplit=1)[0]).lower()


def test_every_package_the_code_imports_is_declared():
    graph = grimp.build_graph("toksel", "pipelines", "tools", include_external_packages=True)
    imported = {module for module in graph.modules if graph.is_module_squashed(module)} - set(sys.stdlib_module_names)
    declared = {_name(item) for item in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]}
    providers = importlib.metadata.packages_distributions()
    undeclared = sorted(module for module in imported
                        if not declared & {_name(distribution) for distribution in providers.get(module, [module])})
    assert imported and undeclared == []
