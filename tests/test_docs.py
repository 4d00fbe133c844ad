"""The docs' code runs after the documented install: every Python snippet in README.md and
docs/ parses, and every name it imports exists; the README's analysis snippet runs for real."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
from pathlib import Path

import pyarrow as pa
import pytest

from runtime.replay import write_table

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# Optional extras the README's install does not include (the `gpu` extra needs a GPU machine).
OPTIONAL = {"vllm"}


def _snippets() -> list[tuple[str, int, str]]:
    out = []
    for doc in DOCS:
        text = doc.read_text()
        for m in re.finditer(r"```python\n(.*?)```", text, re.S):
            line = text[: m.start()].count("\n") + 1
            out.append((doc.name, line, m.group(1)))
    return out


SNIPPETS = _snippets()


@pytest.mark.parametrize(
    ("doc", "line", "code"), SNIPPETS, ids=[f"{d}:{n}" for d, n, _ in SNIPPETS]
)
def test_snippet_parses_and_its_imports_exist(doc: str, line: int, code: str) -> None:
    flags = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    tree = compile(code, f"{doc}:{line}", "exec", flags=flags)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] not in OPTIONAL:
                    importlib.import_module(alias.name)
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.split(".")[0] in OPTIONAL:
                continue
            module = importlib.import_module(node.module)
            for alias in node.names:
                found = hasattr(module, alias.name) or (  # a name, or a submodule of a package
                    hasattr(module, "__path__")
                    and importlib.util.find_spec(f"{node.module}.{alias.name}") is not None
                )
                assert found, f"{doc}:{line}: {node.module}.{alias.name}"


def test_the_readme_analysis_snippet_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = (ROOT / "README.md").read_text()
    (code,) = [c for c in re.findall(r"```python\n(.*?)```", text, re.S) if "duckdb" in c]
    rewards = pa.table(
        {
            "_run": ["r1", "r1", "r2"],
            "_partition": [0, 0, 1],
            "_offset": [0, 1, 0],
            "task_id": ["a", "a", "b"],
            "score": [1.0, 0.0, 1.0],
        }
    )
    write_table(rewards, str(tmp_path / "rewards.parquet"))
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {})
