"""The house's layers point only down, at module level and inside functions alike.

1. `topics/` (the contract) imports nothing of the project but the error tree,
   `runtime/errors.py`, a module that imports nothing (every layer raises from it);
2. `runtime/` (the library) imports no service, no command;
3. `consumers/` and `producers/` (the services) do not import each other, nor the root;
4. `cli/` (the composition root) is imported by nothing but tests, bench and the entry point.

Read from the source (every `import`, every `importlib.import_module`/`runpy.run_module`
with a literal name), so a lazy import inside a function counts as much as one at the top.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("topics", "runtime", "consumers", "producers", "cli")
# What each layer may import of the project.
ALLOWED = {
    "topics": {"topics", "runtime.errors"},
    "runtime": {"runtime", "topics"},
    "consumers": {"consumers", "runtime", "topics"},
    "producers": {"producers", "runtime", "topics"},
    "cli": set(PACKAGES),
}
# `python -m runtime.cli`, the command's old module entry: run as a program, never imported.
ENTRY_POINTS = {"runtime/cli/__main__.py": {"cli"}}
DYNAMIC = {"import_module", "run_module", "__import__"}


def _imports(source: str) -> list[tuple[int, str]]:
    """Every project module `source` names in an import, with its line."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            first = node.args[0]
            if (
                called in DYNAMIC
                and isinstance(first, ast.Constant)
                and isinstance(first.value, str)
            ):
                names = [first.value]
        found += [(node.lineno, n) for n in names if n.split(".")[0] in PACKAGES]
    return found


def _allowed(module: str, allowed: set[str]) -> bool:
    return any(module == a or module.startswith(a + ".") for a in allowed)


def _violations(package: str) -> list[str]:
    bad = []
    for path in sorted((REPO / package).rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        allowed = ALLOWED[package] | ENTRY_POINTS.get(rel, set())
        bad += [
            f"{rel}:{line} imports {m}"
            for line, m in _imports(path.read_text())
            if not _allowed(m, allowed)
        ]
    return bad


@pytest.mark.parametrize("package", PACKAGES)
def test_a_layer_imports_only_the_layers_below_it(package: str) -> None:
    assert _violations(package) == []


def test_the_reader_sees_every_kind_of_import() -> None:
    # The checker itself: a lazy import, an import_module and a runpy name all count.
    source = (
        "import topics.events\n"
        "def f():\n"
        "    from consumers.x import y\n"
        "    importlib.import_module('cli.z')\n"
        "    runpy.run_module('producers.w')\n"
        "    import numpy\n"
    )
    assert [m for _, m in _imports(source)] == [
        "topics.events", "consumers.x", "cli.z", "producers.w",
    ]  # fmt: skip
    assert not _allowed("consumers.x", ALLOWED["runtime"])
    assert _allowed("runtime.errors", ALLOWED["topics"])
    assert not _allowed("runtime.bus", ALLOWED["topics"])


def test_the_scalecua_command_is_the_roots() -> None:
    text = (REPO / "pyproject.toml").read_text()
    assert 'scalecua = "cli:entry"' in text


def test_the_error_tree_topics_raise_from_imports_nothing_of_the_project() -> None:
    # So `topics/` standing on it stands on nothing else of the project.
    assert _imports((REPO / "runtime/errors.py").read_text()) == []
