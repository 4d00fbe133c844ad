"""Every public module says what it offers in `__all__`: names that exist, none left out.

A public module is any module of the project's packages whose path has no `_private` part.
Its public names are what it defines at top level (functions, classes, assigned names)
without a leading underscore, except its logger and type variables; each must be in
`__all__`, and everything in `__all__` must be defined or imported there. Read from the
source, so modules that only run inside a desktop (AT-SPI, Xlib) count too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("topics", "runtime", "consumers", "producers", "cli")
LOGGERS = {"log", "logger"}


def _modules() -> list[Path]:
    return [
        path
        for package in PACKAGES
        for path in sorted((REPO / package).rglob("*.py"))
        if path.name != "__main__.py"
        and not any(p.startswith("_") and p != "__init__.py" for p in path.relative_to(REPO).parts)
    ]


def _top_level(tree: ast.Module) -> list[ast.stmt]:
    """Top-level statements, with those inside top-level `if`/`try` blocks."""
    out: list[ast.stmt] = []
    for node in tree.body:
        out.append(node)
        if isinstance(node, ast.If | ast.Try):
            inner = [*node.body, *node.orelse]
            if isinstance(node, ast.Try):
                inner += [*node.finalbody, *(s for h in node.handlers for s in h.body)]
            out += _top_level(ast.Module(body=inner, type_ignores=[]))
    return out


def _is_type_variable(value: ast.expr | None) -> bool:
    return isinstance(value, ast.Call) and getattr(
        value.func, "id", getattr(value.func, "attr", "")
    ) in ("TypeVar", "ParamSpec")


def _bound_names(target: ast.expr) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Tuple | ast.List):
        return [n for element in target.elts for n in _bound_names(element)]
    return []


def names(source: str) -> tuple[list[str] | None, set[str], set[str]]:
    """A module's `__all__` (None without one), its public definitions, and every name bound."""
    declared: list[str] | None = None
    public: set[str] = set()
    bound: set[str] = set()
    for node in _top_level(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
            public.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:  # names bound, not attributes or items set
                for name in _bound_names(target):
                    if name == "__all__" and node.value is not None:
                        declared = list(ast.literal_eval(node.value))
                    bound.add(name)
                    if not (name in LOGGERS or _is_type_variable(node.value)):
                        public.add(name)
    return declared, {n for n in public if not n.startswith("_")}, bound


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_module_declares_what_it_offers(package: str) -> None:
    problems = []
    for path in _modules():
        rel = path.relative_to(REPO).as_posix()
        if not rel.startswith(package + "/"):
            continue
        declared, public, bound = names(path.read_text())
        if declared is None:
            if public:
                problems.append(f"{rel}: no __all__ (defines {', '.join(sorted(public))})")
            continue
        if missing := public - set(declared):
            problems.append(f"{rel}: public but not in __all__: {', '.join(sorted(missing))}")
        if absent := [n for n in declared if n not in bound]:
            problems.append(f"{rel}: in __all__ but not defined: {', '.join(absent)}")
        if len(set(declared)) != len(declared):
            problems.append(f"{rel}: __all__ names a name twice")
    assert problems == []


def test_the_reader_finds_what_is_missing_and_what_does_not_exist() -> None:
    source = (
        "import logging\nfrom typing import TypeVar\n"
        "__all__ = ['a', 'ghost']\n"
        "log = logging.getLogger(__name__)\nT = TypeVar('T')\n"
        "def a(): ...\nclass B: ...\nLIMIT = 3\n_private = 1\n"
        "try:\n    import fast\n    SPEED = 2\nexcept ImportError:\n    SPEED = 1\n"
        "fast.limit = 4\nLOW, HIGH = 1, 2\n"
    )
    declared, public, bound = names(source)
    assert declared == ["a", "ghost"]
    assert public == {"a", "B", "LIMIT", "SPEED", "LOW", "HIGH"}
    assert "ghost" not in bound and {"fast", "logging", "a"} <= bound
