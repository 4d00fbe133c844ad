"""The config file and the environment: where settings come from before the command line."""

from __future__ import annotations

import argparse
import os
import tomllib
from pathlib import Path
from typing import Any

from cli.settings.binding import (
    Setting,
    bound_setting,
    check_rules,
    commands_of,
    settings_of,
)
from runtime.errors import ConfigError

__all__ = ["apply_config", "command_defaults", "config_path", "configured", "load_config"]


def config_path(explicit: str | None = None) -> Path | None:
    """Return the config file in use: the argument, $SCALECUA_CONFIG, or ./scalecua.toml."""
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise ConfigError(f"no config file at {path}")
        return path
    env = os.environ.get("SCALECUA_CONFIG")
    if env:
        path = Path(env)
        if not path.is_file():
            raise ConfigError(f"SCALECUA_CONFIG names {path}, which does not exist")
        return path
    local = Path("scalecua.toml")
    return local if local.is_file() else None


def load_config(path: Path | None, parser: argparse.ArgumentParser) -> dict[str, dict[str, Any]]:
    """Read the file and the environment into {command: {key: value}}, every name and value checked."""
    commands = commands_of(parser)
    values: dict[str, dict[str, Any]] = {}
    if path is not None:
        raw = _read_toml(path)
        for command, table in raw.items():
            if command not in commands or not isinstance(table, dict):
                raise ConfigError(f"{path}: [{command}] is not a command with settings")
            known = settings_of(commands[command])
            for key, value in table.items():
                if key not in known:
                    raise ConfigError(
                        f"{path}: [{command}] has no setting {key!r}; "
                        f"known: {', '.join(sorted(known))}"
                    )
                checked = bound_setting(known[key]).accept(value, f"in {path}")
                values.setdefault(command, {})[key] = checked
    for name, text in os.environ.items():
        if not name.startswith("SCALECUA_"):
            continue
        for command, sub in commands.items():
            prefix = f"SCALECUA_{command.upper()}_"
            if name.startswith(prefix):
                key = name[len(prefix) :].lower()
                known = settings_of(sub)
                if key in known:
                    checked = bound_setting(known[key]).accept_env(name, text)
                    values.setdefault(command, {})[key] = checked
    return values


def _read_toml(path: Path) -> dict[str, Any]:
    """The file's TOML tables; ConfigError when it cannot be read, is not UTF-8 or not TOML."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config file: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ConfigError(
            f"{path}: not UTF-8 text (byte 0x{data[exc.start]:02x} on line {line}); "
            "a TOML file is UTF-8"
        ) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def apply_config(parser: argparse.ArgumentParser, values: dict[str, dict[str, Any]]) -> None:
    """Make the configured (checked) values the defaults of their commands' options."""
    commands = commands_of(parser)
    for command, table in values.items():
        commands[command].set_defaults(**table)


def command_defaults(parser: argparse.ArgumentParser, command: str) -> argparse.Namespace:
    """Return a command's effective settings (as parsing it with no arguments would), checked."""
    sub = commands_of(parser)[command]
    ns = argparse.Namespace(**{dest: a.default for dest, a in settings_of(sub).items()})
    check_rules(command, sub, ns)
    return ns


def configured(parser: argparse.ArgumentParser, command: str, key: str) -> bool:
    """Whether a command's setting was given a value (file, environment), not left at its default."""
    setting = settings_of(commands_of(parser)[command])[key].type
    return isinstance(setting, Setting) and setting.source != "by default"
