"""Every option of every command bound as a checked setting, and rules across settings.

`bind_settings` wraps each option's argparse `type` in a `Setting` that checks a value with
its kind and remembers where it came from (the default, the file, the environment, the
command line), so an error names the setting and its source.
"""

from __future__ import annotations

import argparse
import os
import tomllib
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cli.settings.kinds import (
    Kind,
    ListKind,
    flag_kind,
    integer,
    items,
    number,
    one_of,
    path_kind,
    text_kind,
    toml_value,
)
from runtime.errors import ConfigError, SettingError

__all__ = [
    "NOT_SETTINGS", "Setting", "bind_settings", "bound_setting", "check_parsed", "check_rules",
    "commands_of", "environment_value", "require", "settings_of", "walk_commands",
]  # fmt: skip

# Options that are not settings (actions, one-off arguments).
NOT_SETTINGS = {"help", "func", "bootstrap", "command", "version", "verbose", "config"}


class Setting:
    """An option bound as a setting: its kind, its command and key, where its value came from."""

    def __init__(self, command: str, action: argparse.Action, kind: Kind) -> None:
        self.command = command  # "sample", "verigen run"
        self.action = action
        self.key = action.dest
        self.kind = kind
        self.ranged = action.type not in (int, float)  # a bare int/float declares no range
        self.source = "by default"

    def __call__(self, text: str) -> Any:
        """argparse's `type=`: check one command-line value."""
        if text is not self.action.default:  # argparse also converts string defaults
            self.source = f"on the command line ({self.action.option_strings[-1]})"
        kind = self.kind.item if isinstance(self.kind, ListKind) else self.kind
        return self._check(kind, text, text, self.source, text=True)

    def accept(self, value: Any, where: str) -> Any:
        """Check a value from the config file."""
        self.source = where
        return self._check(self.kind, value, toml_value(value), where, text=False)

    def accept_env(self, name: str, raw: str) -> Any:
        """Check an environment variable's text (a TOML value, else a bare word)."""
        self.source = f"in ${name}"
        try:
            parsed = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            parsed = raw
        if isinstance(self.kind, ListKind):
            return self._check(self.kind, parsed, raw, self.source, text=False)
        text = parsed if isinstance(parsed, str) else raw
        return self._check(self.kind, text, raw, self.source, text=True)

    def recheck(self, value: Any) -> Any:
        """Check a final list value as a whole (its items were checked as they were parsed)."""
        return self._check(self.kind, list(value), toml_value(value), self.source, text=False)

    def _check(self, kind: Kind, value: Any, shown: str, where: str, text: bool) -> Any:
        try:
            return kind.check(value, text=text)
        except ValueError as exc:
            raise SettingError(f"[{self.command}] {self.key} = {shown} {where}: {exc}") from None


def _kind_of(command: str, action: argparse.Action) -> Kind | None:
    declared = action.type
    if isinstance(action, argparse._StoreTrueAction | argparse._StoreFalseAction):
        return flag_kind()
    if action.nargs == 0:  # other constant actions take no value
        return None
    if isinstance(declared, Kind):
        kind = declared
    elif action.choices is not None:
        kind = one_of(tuple(action.choices))
    elif declared is None or declared is str:
        kind = text_kind()
    elif declared is Path:
        kind = path_kind()
    elif declared in (int, float):  # still checked, but with no range: a test flags these
        kind = integer() if declared is int else number()
    else:
        raise TypeError(
            f"scalecua {command} {action.option_strings[-1]}: declare what it takes with "
            "integer(...), number(...), items(...) or choices (cli/settings/kinds.py)"
        )
    listed = action.nargs not in (None, "?") or isinstance(action, argparse._AppendAction)
    return items(kind) if listed and not isinstance(kind, ListKind) else kind


def walk_commands(parser: argparse.ArgumentParser, path: str = "") -> list[tuple[str, Any]]:
    out = []
    for action in parser._actions:  # argparse keeps subcommands in a private action
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                where = f"{path} {name}".strip()
                out += [(where, sub), *walk_commands(sub, where)]
    return out


def bind_settings(parser: argparse.ArgumentParser) -> None:
    """Bind every option of every command to a checked `Setting` (once, on the built parser)."""
    for command, sub in walk_commands(parser):
        for action in sub._actions:
            if (
                not action.option_strings
                or isinstance(action, argparse._HelpAction | argparse._VersionAction)
                or isinstance(action.type, Setting)  # bound already
            ):
                continue
            kind = _kind_of(command, action)
            if kind is not None:
                action.type = Setting(command, action, kind)


_RULES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def require(
    parser: argparse.ArgumentParser, keys: tuple[str, ...], holds: Callable[..., bool], reason: str
) -> None:
    """Declare a rule across a command's settings, checked on their final values."""
    _RULES.setdefault(parser, []).append((keys, holds, reason))


def check_rules(command: str, sub: argparse.ArgumentParser, ns: argparse.Namespace) -> None:
    for action in sub._actions:
        setting = action.type
        if isinstance(setting, Setting) and isinstance(setting.kind, ListKind):
            value = getattr(ns, action.dest, None)
            if value is not None:
                setting.recheck(value)
    for keys, holds, reason in _RULES.get(sub, []):
        values = [getattr(ns, k, None) for k in keys]
        if any(v is None for v in values) or holds(*values):
            continue
        sources = {a.dest: a.type.source for a in sub._actions if isinstance(a.type, Setting)}
        named = " and ".join(
            f"{k} = {toml_value(v)} {sources[k]}" for k, v in zip(keys, values, strict=True)
        )
        raise SettingError(f"[{command}] {named}: {reason}")


def check_parsed(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Check the rules of the command `args` invokes (SettingError if one fails)."""
    path = ""
    while True:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        name = getattr(args, subs[0].dest, None) if subs else None
        if not name:
            return
        parser = subs[0].choices[name]
        path = f"{path} {name}".strip()
        check_rules(path, parser, args)


def environment_value(name: str, kind: Kind, default: Any) -> Any:
    """A variable of the environment checked as `kind`, or the default when it is unset."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        return kind.check(raw, text=True)
    except ValueError as exc:
        raise SettingError(f"${name} = {raw}: {exc}") from None


def commands_of(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse keeps subcommands in a private action
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def settings_of(sub: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {
        a.dest: a
        for a in sub._actions
        if a.dest not in NOT_SETTINGS
        and not isinstance(a, argparse._SubParsersAction)
        and a.option_strings
    }


def bound_setting(action: argparse.Action) -> Setting:
    if not isinstance(action.type, Setting):
        raise ConfigError(f"{action.dest} is not a setting (is the parser from build_parser?)")
    return action.type
