"""System prompts: both paper variants describe the parser's action space and response format."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from runtime.errors import ConfigError
from runtime.policy.actions import ACTION_ARGUMENTS, format_action, parse_action
from runtime.policy.prompts import response_style, system_prompt


def test_scienceboard_describes_every_action() -> None:
    text = system_prompt("scienceboard")
    for action in ACTION_ARGUMENTS:
        assert re.search(rf"\b{action}\b", text), action


def test_osworld_leaves_out_scienceboard_actions() -> None:
    text = system_prompt("osworld")
    assert "write_file" not in text and "answer:" not in text
    assert re.search(r"\bdone\b", text)


@pytest.mark.parametrize("variant", ["osworld", "scienceboard"])
def test_example_in_prompt_parses(variant: str) -> None:
    # The format the prompt teaches is the one the parser reads.
    assert parse_action(system_prompt(variant)) == {
        "action": "left_click",
        "coordinate": [500, 300],
    }


def test_compact_is_short_and_its_example_parses() -> None:
    text = system_prompt("compact")
    for action in ("type", "key", "left_click", "done", "fail"):
        assert re.search(rf"\b{action}\b", text), action
    assert len(text) < len(system_prompt("osworld")) / 3  # every turn pays for it again
    example = next(line for line in text.splitlines() if line.startswith("{"))
    assert parse_action(example) == {"action": "type", "text": "ls\n"}
    assert response_style("compact") == "json"
    assert format_action(parse_action(example), response_style("compact")) == example


def test_paper_variants_answer_with_a_tool_call() -> None:
    assert response_style("osworld") == response_style("scienceboard") == "tool_call"


def test_grid_and_os_are_configurable() -> None:
    text = system_prompt("osworld", os_name="Windows 11", grid=1000)
    assert "Windows 11" in text and "1000x1000" in text


def test_custom_prompt_text_or_file(tmp_path: Path) -> None:
    assert system_prompt(custom="Be brief.") == "Be brief."
    file = tmp_path / "prompt.txt"
    file.write_text("From a file.")
    assert system_prompt(custom=file) == "From a file."


def test_unknown_variant_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="variant"):
        system_prompt("android")
