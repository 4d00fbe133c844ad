"""Every command's --help renders (argparse formats help text lazily: a stray % breaks it)."""

from __future__ import annotations

import argparse

import pytest

from cli import build_parser


def _commands(parser: argparse.ArgumentParser) -> list[list[str]]:
    out: list[list[str]] = [[]]
    for action in parser._actions:  # argparse keeps subcommands in a private action
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += [[name, *rest] for rest in _commands(sub)]
    return out


@pytest.mark.parametrize("argv", _commands(build_parser()), ids=lambda a: " ".join(a) or "-")
def test_help_renders(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args([*argv, "--help"])
    assert exit_info.value.code == 0
    assert "usage: scalecua" in capsys.readouterr().out
