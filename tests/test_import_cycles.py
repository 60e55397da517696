"""No import circle anywhere in the package: each module can be read knowing only the ones below it. grimp (the
graph import-linter builds) counts every import, a function-local one as well."""

import grimp


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
