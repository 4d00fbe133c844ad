"""One TOML file for every knob, environment overrides, and `scalecua config show`.

The file's tables are the commands and its keys their options (dashes as underscores), so
a value means the same in the file, in the environment and on the command line:

    [sample]                 # scalecua sample --batch 32 --n 8 --mu 0.5 ...
    batch = 32
    n = 8

    [rollout]                # scalecua rollout --temperature 0.8 --context 5 5 ...
    temperature = 0.8
    context = [5, 5]

Precedence, lowest first: the built-in default, the file (`--config FILE`, else
`$SCALECUA_CONFIG`, else `./scalecua.toml` when present), the environment
(`SCALECUA_<COMMAND>_<KEY>`, e.g. `SCALECUA_SAMPLE_BATCH=4`, parsed as TOML values), then
the command line. `scalecua up` configures every service it runs from the same tables.
"""

from __future__ import annotations

import argparse
import os
import tomllib
from pathlib import Path
from typing import Any

from runtime.errors import ConfigError

__all__ = [
    "config_path",
    "load_config",
    "apply_config",
    "command_defaults",
    "render_toml",
    "register",
]

# Options that are not settings (actions, one-off arguments).
_SKIP = {"help", "func", "bootstrap", "command", "version", "verbose", "config"}


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


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse keeps subcommands in a private action
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _settings(sub: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {
        a.dest: a
        for a in sub._actions
        if a.dest not in _SKIP
        and not isinstance(a, argparse._SubParsersAction)
        and a.option_strings
    }


def load_config(path: Path | None, parser: argparse.ArgumentParser) -> dict[str, dict[str, Any]]:
    """Read the file and the environment into {command: {key: value}}, checking every name."""
    commands = _commands(parser)
    values: dict[str, dict[str, Any]] = {}
    if path is not None:
        try:
            raw = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: {exc}") from exc
        for command, table in raw.items():
            if command not in commands or not isinstance(table, dict):
                raise ConfigError(f"{path}: [{command}] is not a command with settings")
            known = _settings(commands[command])
            for key in table:
                if key not in known:
                    raise ConfigError(
                        f"{path}: [{command}] has no setting {key!r}; "
                        f"known: {', '.join(sorted(known))}"
                    )
            values[command] = dict(table)
    for name, value in os.environ.items():
        if not name.startswith("SCALECUA_"):
            continue
        for command, sub in commands.items():
            prefix = f"SCALECUA_{command.upper()}_"
            if name.startswith(prefix):
                key = name[len(prefix) :].lower()
                if key in _settings(sub):
                    values.setdefault(command, {})[key] = _env_value(name, value)
    return values


def _env_value(name: str, text: str) -> Any:
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text  # a bare word: a string


def apply_config(parser: argparse.ArgumentParser, values: dict[str, dict[str, Any]]) -> None:
    """Make the configured values the defaults of their commands' options."""
    commands = _commands(parser)
    for command, table in values.items():
        sub = commands[command]
        actions = _settings(sub)
        converted = {}
        for key, value in table.items():
            action = actions[key]
            if action.type is not None and not isinstance(value, list | bool):
                value = action.type(value)
            if action.choices is not None and value not in action.choices:
                raise ConfigError(
                    f"[{command}] {key} = {value!r}: choose one of {list(action.choices)}"
                )
            converted[key] = value
        sub.set_defaults(**converted)


def command_defaults(parser: argparse.ArgumentParser, command: str) -> argparse.Namespace:
    """Return a command's effective settings (as parsing it with no arguments would)."""
    sub = _commands(parser)[command]
    return argparse.Namespace(**{dest: a.default for dest, a in _settings(sub).items()})


def render_toml(parser: argparse.ArgumentParser, commands: list[str] | None = None) -> str:
    """The effective settings of the service commands as a TOML document with help comments."""
    lines = []
    for name, sub in _commands(parser).items():
        if commands is not None and name not in commands:
            continue
        settings = _settings(sub)
        if not settings:
            continue
        lines.append(f"[{name}]")
        for dest, action in settings.items():
            if action.help:
                lines.append(f"# {action.help}")
            if action.default is None:
                lines.append(f"# {dest} = (unset)")
            else:
                lines.append(f"{dest} = {_toml(action.default)}")
        lines.append("")
    return "\n".join(lines)


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `scalecua config show` to the parser."""
    p = subparsers.add_parser("config", help="the effective configuration (file, environment)")
    sub = p.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    show = sub.add_parser(
        "show", help="print every command's effective settings as a TOML config file"
    )
    show.add_argument("commands", nargs="*", help="only these commands' tables")
    show.set_defaults(func=_show)


def _show(args: argparse.Namespace) -> int:
    import sys

    from runtime.cli import build_parser

    parser = build_parser()
    path = config_path(getattr(args, "config", None))
    apply_config(parser, load_config(path, parser))
    source = f"# effective settings; file: {path or '(none)'}, then SCALECUA_<COMMAND>_<KEY>\n\n"
    sys.stdout.write(source + render_toml(parser, args.commands or None))
    return 0
