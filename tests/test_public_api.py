"""Other packages through their public API only: no `thing._private` of an object or module that is not ours, and no
private name reached through getattr. A private attribute changes without notice on an upgrade, and the code that
leaned on it breaks silently."""

import ast

from tests.helpers import ROOT

OURS = ("toksel", "pipelines", "tools", "benchmarks", "tests")


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _reaches(path, root=ROOT) -> list[str]:
    """`value._name` where value is not self, cls or a module of ours; getattr(value, "_name") likewise."""
    tree = ast.parse(path.read_text())
    ours = {alias.asname or alias.name.split(".")[0] for node in ast.walk(tree)
            if isinstance(node, ast.Import | ast.ImportFrom) for alias in node.names
            if (node.module if isinstance(node, ast.ImportFrom) else alias.name or "").startswith(OURS)
            or (isinstance(node, ast.ImportFrom) and node.level > 0)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            base = node.value
            if not (isinstance(base, ast.Name) and base.id in {"self", "cls", *ours}):
                found.append(f"{path.relative_to(root)}:{node.lineno} .{node.attr}")
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "setattr")
                and len(node.args) > 1 and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str) and _private(node.args[1].value)
                and not (isinstance(node.args[0], ast.Name) and node.args[0].id in ("self", "cls"))):
            found.append(f"{path.relative_to(root)}:{node.lineno} {node.func.id} {node.args[1].value}")
    return found


def test_no_private_attribute_of_another_package_is_used():
    files = [path for folder in ("src", "pipelines", "tools", "benchmarks") for path in (ROOT / folder).rglob("*.py")]
    assert len(files) > 50
    assert [hit for path in files for hit in _reaches(path)] == []


def test_the_scan_finds_what_it_looks_for(tmp_path):
    """The check could fail: a pool's `_processes` and numba's `_is_initialized` (what the fan-out once used) are
    found, our own privates are not."""
    source = tmp_path / "probe.py"
    source.write_text("from toksel.runtime import fanout\nimport numba\n"
                      "pool._processes\ngetattr(numba, '_is_initialized')\nfanout._pool\nself._x\n"
                      "getattr(self, '_y')\n")
    assert [hit.split(":")[1] for hit in _reaches(source, tmp_path)] == ["3 ._processes", "4 getattr _is_initialized"]
