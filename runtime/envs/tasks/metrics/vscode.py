"""VS Code metrics with OSWorld's names: settings.json and keybindings.json, config text,
installed extensions, and Python files checked by a task's test suite (in the sandbox)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from runtime.errors import TaskError

__all__ = [
    "METRICS",
    "check_json_keybindings",
    "check_json_settings",
    "check_python_file_by_test_suite",
    "compare_config",
    "is_extension_installed",
    "load_jsonc",
]

# A string, a // or /* */ comment, or a comma before a closing bracket.
_JSONC = re.compile(r'"(?:[^"\\]|\\.)*"|//[^\n]*|/\*.*?\*/|,(?=\s*[\]}])', re.DOTALL)


def load_jsonc(text: str) -> Any:
    """Parse VS Code's JSON with comments and trailing commas (settings, keybindings)."""
    return json.loads(_JSONC.sub(lambda m: m[0] if m[0].startswith('"') else "", text))


def _load(path: str | None) -> Any:
    """The JSON(C) file's value, or None when it is missing or unreadable."""
    if not path or not Path(path).is_file():
        return None
    try:
        return load_jsonc(Path(path).read_text(encoding="utf-8", errors="replace"))
    except ValueError:
        return None


def check_json_keybindings(result: str | None, expected: dict[str, Any], **options: Any) -> float:
    """1.0 when keybindings.json (a list) holds the `expected` binding object."""
    data = _load(result)
    if not isinstance(data, list):
        return 0.0
    return float(expected["expected"] in data)


def check_json_settings(result: str | None, expected: dict[str, Any], **options: Any) -> float:
    """1.0 when settings.json sets every key of `expected` to its value."""
    data = _load(result)
    if not isinstance(data, dict):
        return 0.0
    return float(all(k in data and data[k] == v for k, v in expected["expected"].items()))


def compare_config(result: str | None, rules: dict[str, Any], **options: Any) -> float:
    """1.0 when the file's text is exactly `rules["expected"]`."""
    if not result or not Path(result).is_file():
        return 0.0
    return float(Path(result).read_text(encoding="utf-8", errors="replace") == rules["expected"])


def is_extension_installed(result: str | None, rules: dict[str, Any], **options: Any) -> float:
    """1.0 when the extension list (`code --list-extensions`) does (`type` "contain") or does
    not ("not_contain") hold `expected`."""
    kind = rules.get("type")
    if kind not in ("contain", "not_contain"):
        raise TaskError(f"is_extension_installed: unknown type {kind!r} (contain, not_contain)")
    found = rules["expected"] in (result or "")
    return float(found if kind == "contain" else not found)


# The judge the sandbox runs: the task's test file and the agent's files in one folder,
# then the test function's truth is the score.
_TEST_SUITE_JUDGE = """
def judge(artifacts):
    import importlib.util, os, sys
    path = artifacts[artifacts["__test__"]]
    folder = os.path.dirname(path)
    os.chdir(folder)
    sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location("task_test_suite", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["task_test_suite"] = module
    spec.loader.exec_module(module)
    try:
        return 1.0 if getattr(module, artifacts["__function__"])() else 0.0
    except Exception:
        return 0.0
"""


def check_python_file_by_test_suite(result: Any, test_file: str | None, **options: Any) -> float:
    """1.0 when the task's test suite (`test_function_name`, default `test`) passes on the
    agent's Python files.

    The test file and the agent's files are copied side by side into the judge sandbox
    (runtime.judge): both are untrusted code, so they never run on the host.
    """
    from runtime.judge import FileArtifact, JudgeLimits, run_judge

    if not test_file or not Path(test_file).is_file():
        raise TaskError("check_python_file_by_test_suite: the task's test file is missing")
    files = result if isinstance(result, list) else [result]
    if any(f is None or not Path(f).is_file() for f in files):
        return 0.0  # a file the agent was to fix is gone
    names = [Path(f).name for f in [*files, test_file]]
    if len(set(names)) != len(names):
        raise TaskError("check_python_file_by_test_suite: two files share a name")
    # Artifacts are staged under their keys' names, all in one folder, as the tests expect.
    artifacts: dict[str, Any] = {Path(f).name: FileArtifact(path=str(f)) for f in files}
    artifacts[Path(test_file).name] = FileArtifact(path=str(test_file))
    artifacts["__test__"] = Path(test_file).name
    artifacts["__function__"] = str(options.get("test_function_name", "test"))
    verdict = run_judge(_TEST_SUITE_JUDGE, "judge", artifacts, JudgeLimits(wall_seconds=60))
    if verdict.status != "ok" or verdict.score is None:
        raise RuntimeError(f"the test suite did not run: {verdict.status} {verdict.detail}")
    return float(verdict.score)


METRICS: dict[str, Any] = {
    "check_json_keybindings": check_json_keybindings,
    "check_json_settings": check_json_settings,
    "compare_config": compare_config,
    "is_extension_installed": is_extension_installed,
    "check_python_file_by_test_suite": check_python_file_by_test_suite,
}
