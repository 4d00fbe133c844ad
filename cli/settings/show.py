"""`scalecua config show`: every command's effective settings as a TOML config file."""

from __future__ import annotations

import argparse

from cli.settings.binding import commands_of, settings_of
from cli.settings.config_file import apply_config, command_defaults, config_path, load_config
from cli.settings.kinds import toml_value

__all__ = ["register", "render_toml"]


def render_toml(parser: argparse.ArgumentParser, commands: list[str] | None = None) -> str:
    """The effective settings of the service commands as a TOML document with help comments."""
    lines = []
    for name, sub in commands_of(parser).items():
        if commands is not None and name not in commands:
            continue
        settings = settings_of(sub)
        if not settings:
            continue
        lines.append(f"[{name}]")
        for dest, action in settings.items():
            if action.help:
                lines.append(f"# {action.help}")
            if action.default is None:
                lines.append(f"# {dest} = (unset)")
            else:
                lines.append(f"{dest} = {toml_value(action.default)}")
        lines.append("")
    return "\n".join(lines)


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

    from cli import build_parser

    parser = build_parser()
    path = config_path(getattr(args, "config", None))
    apply_config(parser, load_config(path, parser))
    for name in commands_of(parser):  # rules across settings hold in what is shown
        command_defaults(parser, name)
    source = f"# effective settings; file: {path or '(none)'}, then SCALECUA_<COMMAND>_<KEY>\n\n"
    sys.stdout.write(source + render_toml(parser, args.commands or None))
    return 0
