"""VS Code's metrics on settings.json and keybindings.json as VS Code writes them, and a
task's test suite run on the agent's Python files in the judge sandbox."""

from __future__ import annotations

import json

import pytest

from runtime.envs.tasks.metrics import METRICS
from runtime.errors import TaskError

SETTINGS = """{
    // written by the settings editor
    "editor.wordWrapColumn": 50,
    "files.autoSave": "afterDelay",
    "workbench.colorTheme": "Default Dark Modern",
}
"""

KEYBINDINGS = """// Place your key bindings in this file to override the defaults
[
    {
        "key": "ctrl+j",
        "command": "workbench.action.focusActiveEditorGroup",
        "when": "terminalFocus"
    }
]
"""


def test_check_json_settings_reads_vscode_jsonc(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text(SETTINGS)
    m = METRICS["check_json_settings"]
    assert m(str(path), {"expected": {"editor.wordWrapColumn": 50}}) == 1.0
    both = {"editor.wordWrapColumn": 50, "files.autoSave": "afterDelay"}
    assert m(str(path), {"expected": both}) == 1.0
    assert m(str(path), {"expected": {"editor.wordWrapColumn": 80}}) == 0.0
    assert m(str(path), {"expected": {"editor.fontSize": 14}}) == 0.0
    assert m(str(tmp_path / "none.json"), {"expected": {"editor.wordWrapColumn": 50}}) == 0.0
    path.write_text('{"url": "http://x//y", "a": "/* not a comment */"}')
    assert m(str(path), {"expected": {"url": "http://x//y", "a": "/* not a comment */"}}) == 1.0


def test_check_json_keybindings(tmp_path):
    path = tmp_path / "keybindings.json"
    path.write_text(KEYBINDINGS)
    binding = json.loads(KEYBINDINGS.split("\n", 1)[1])[0]
    m = METRICS["check_json_keybindings"]
    assert m(str(path), {"expected": binding}) == 1.0
    assert m(str(path), {"expected": {**binding, "key": "ctrl+k"}}) == 0.0
    path.write_text("[]")
    assert m(str(path), {"expected": binding}) == 0.0
    path.write_text('{"key": "ctrl+j"}')  # not a list of bindings
    assert m(str(path), {"expected": binding}) == 0.0


def test_compare_config_and_is_extension_installed(tmp_path):
    path = tmp_path / "OpenProject.txt"
    path.write_text("project")
    assert METRICS["compare_config"](str(path), {"expected": "project"}) == 1.0
    assert METRICS["compare_config"](str(path), {"expected": "project\n"}) == 0.0
    assert METRICS["compare_config"](None, {"expected": "project"}) == 0.0
    listing = "ms-python.python\nundefined_publisher.test\n"
    m = METRICS["is_extension_installed"]
    assert m(listing, {"type": "contain", "expected": "undefined_publisher.test"}) == 1.0
    assert m(listing, {"type": "not_contain", "expected": "ms-python.python"}) == 0.0
    assert m("", {"type": "not_contain", "expected": "ms-python.python"}) == 1.0
    with pytest.raises(TaskError):
        m(listing, {"type": "regex", "expected": "x"})


SNAKE = """
class Snake:
    def __init__(self):
        self.body = [(5, 5)]

    def eats(self, food):
        return self.body[0] {op} food
"""

TEST_SUITE = """
from snake import Snake

def test():
    return Snake().eats((5, 5))
"""


def test_check_python_file_by_test_suite_runs_in_the_sandbox(tmp_path):
    fixed, buggy, tests = tmp_path / "fixed", tmp_path / "buggy", tmp_path / "tests"
    for folder, op in ((fixed, "=="), (buggy, "!=")):
        folder.mkdir()
        (folder / "snake.py").write_text(SNAKE.format(op=op))
        (folder / "settings.py").write_text("SIZE = 10\n")
    tests.mkdir()
    (tests / "test_suite.py").write_text(TEST_SUITE)
    m = METRICS["check_python_file_by_test_suite"]
    files = lambda folder: [str(folder / "snake.py"), str(folder / "settings.py")]  # noqa: E731
    assert m(files(fixed), str(tests / "test_suite.py")) == 1.0
    assert m(files(buggy), str(tests / "test_suite.py")) == 0.0
    assert m([str(fixed / "snake.py"), None], str(tests / "test_suite.py")) == 0.0
    # The suite runs where the host is out of reach: writing a host file stops it.
    escaped = tmp_path / "escaped"
    (tests / "nosy.py").write_text(f"open({str(escaped)!r}, 'w').write('x')\ndef test(): pass\n")
    with pytest.raises(RuntimeError, match="did not run"):
        m(files(fixed), str(tests / "nosy.py"))
    assert not escaped.exists()
    (tests / "named.py").write_text("from snake import Snake\ndef check():\n    return True\n")
    assert m(files(fixed), str(tests / "named.py"), test_function_name="check") == 1.0
