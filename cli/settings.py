"""One TOML file for every knob, environment overrides, checked values, `scalecua config show`.

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

Every option declares what it takes as its argparse `type`: `integer(1)`, `number(0, 1)`,
`number(above=0)` (numbers are always finite), `items(...)` for lists, a `choices=` tuple, or
text. `build_parser` binds each option to a `_Setting` that checks a value from any source
with the same code, so a bad value is one line naming the setting and where it came from,

    scalecua: error: [train] lr = "fast" in scalecua.toml: expected a finite number > 0

and the command exits with status 2 before anything starts (`SettingError`). Rules across
settings (`require`) are checked on the final values. A bare `type=int` or `type=float` is
still checked (a whole or a finite number), but tests/cli/test_validation.py names it
until it declares its range.
"""

from __future__ import annotations

import argparse
import math
import os
import tomllib
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from runtime.errors import ConfigError, SettingError

__all__ = [
    "Kind",
    "ListKind",
    "integer",
    "number",
    "items",
    "bind_settings",
    "require",
    "check_parsed",
    "environment_value",
    "config_path",
    "load_config",
    "apply_config",
    "command_defaults",
    "configured",
    "render_toml",
    "register",
]

# Options that are not settings (actions, one-off arguments).
_SKIP = {"help", "func", "bootstrap", "command", "version", "verbose", "config"}

PORT = (0, 65535)  # a TCP port; 0 asks for any free one
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1  # the widest integer a setting takes


# -- kinds: what a setting takes ------------------------------------------------------------


class Kind:
    """What one setting takes: its type and constraint, from TOML values or from text."""

    def __init__(
        self,
        noun: str,
        convert: Callable[[Any, bool], Any],
        valid: Callable[[Any], bool] = lambda _: True,
        verb: str = "expected",
    ) -> None:
        self.noun = noun  # e.g. "an integer >= 1"
        self.reason = f"{verb} {noun}"  # why a value is refused
        self._convert = convert  # (value, from_text) -> value; TypeError/ValueError if wrong
        self._valid = valid

    def check(self, value: Any, text: bool = False) -> Any:
        """The value converted (`text`: it is command-line or environment text); else ValueError."""
        try:
            out = self._convert(value, text)
        except (TypeError, ValueError, KeyError):
            raise ValueError(self.reason) from None
        if not self._valid(out):
            raise ValueError(self.reason)
        return out

    def __call__(self, text: str) -> Any:
        """argparse's `type=` on a parser `bind_settings` has not bound."""
        try:
            return self.check(text, text=True)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None


class ListKind(Kind):
    """A list setting (`nargs`, `append`): each item of one kind, a count, a rule on the whole."""

    def __init__(
        self,
        item: Kind,
        count: int | None = None,
        rule: Callable[[list], bool] | None = None,
        rule_reason: str = "",
    ) -> None:
        size = f"{count} values" if count else "values"
        super().__init__(f"a list of {size}, each {item.noun}", self._convert_list)
        self.item, self.count, self.rule, self.rule_reason = item, count, rule, rule_reason

    def _convert_list(self, value: Any, text: bool) -> list:
        if not isinstance(value, list) or (self.count and len(value) != self.count):
            raise TypeError
        return [self.item.check(v) for v in value]

    def check(self, value: Any, text: bool = False) -> list:
        """The list converted, each item checked, then its rule; else ValueError."""
        out = super().check(value, text)
        if self.rule is not None and not self.rule(out):
            raise ValueError(self.rule_reason)
        return out

    def __call__(self, text: str) -> Any:
        """argparse's `type=`: one item of the list."""
        return self.item(text)


def _as_int(value: Any, text: bool) -> int:
    if text:
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise TypeError


def _as_float(value: Any, text: bool) -> float:
    if text:
        return float(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    raise TypeError


def _as_str(value: Any, text: bool) -> str:
    if isinstance(value, str) and value:
        return value
    raise TypeError


def _as_bool(value: Any, text: bool) -> bool:
    if text:
        return {"true": True, "false": False}[value]
    if isinstance(value, bool):
        return value
    raise TypeError


def _bounds(low: float | None, high: float | None, above: float | None, below: float | None) -> str:
    lo = f"{low:g}" if low is not None else f"{above:g}" if above is not None else None
    hi = f"{high:g}" if high is not None else f"{below:g}" if below is not None else None
    if lo is not None and hi is not None:
        return f" in {'[' if above is None else '('}{lo}, {hi}{']' if below is None else ')'}"
    if lo is not None:
        return f" {'>=' if above is None else '>'} {lo}"
    if hi is not None:
        return f" {'<=' if below is None else '<'} {hi}"
    return ""


def _within(x: float, low: Any, high: Any, above: Any = None, below: Any = None) -> bool:
    return (
        (low is None or x >= low)
        and (high is None or x <= high)
        and (above is None or x > above)
        and (below is None or x < below)
    )


class _Integer(Kind):
    """A whole number in its declared range and within 64 bits (what events and tensors hold)."""

    def __init__(self, low: int | None, high: int | None) -> None:
        super().__init__(f"an integer{_bounds(low, high, None, None)}", _as_int,
                         lambda x: _within(x, low, high))  # fmt: skip
        # A bound left open is still 64 bits: beyond it the value cannot be encoded or used.
        self.low = INT64_MIN if low is None else max(low, INT64_MIN)
        self.high = INT64_MAX if high is None else min(high, INT64_MAX)

    def check(self, value: Any, text: bool = False) -> int:
        """The whole number, within its range; else ValueError naming the range."""
        out = super().check(value, text)
        if not self.low <= out <= self.high:
            raise ValueError(f"expected an integer in [{self.low}, {self.high}]")
        return out


def integer(low: int | None = None, high: int | None = None) -> Kind:
    """A whole number, low <= x <= high (each bound optional; never beyond 64 bits)."""
    return _Integer(low, high)


def number(
    low: float | None = None,
    high: float | None = None,
    *,
    above: float | None = None,
    below: float | None = None,
) -> Kind:
    """A finite number, low <= x <= high and above < x < below (each bound optional)."""
    span = _bounds(low, high, above, below)
    finite = "" if span.startswith(" in ") else "finite "
    return Kind(f"a {finite}number{span}", _as_float,
                lambda x: math.isfinite(x) and _within(x, low, high, above, below))  # fmt: skip


def items(
    item: Kind,
    count: int | None = None,
    rule: Callable[[list], bool] | None = None,
    rule_reason: str = "",
) -> ListKind:
    """A list of `count` (any number if None) values of one kind, with a rule on the whole."""
    return ListKind(item, count, rule, rule_reason)


def _text() -> Kind:
    return Kind("a non-empty string", _as_str)


def _path() -> Kind:
    return Kind("a path", lambda v, text: Path(_as_str(v, text)))


def _flag() -> Kind:
    return Kind("true or false", _as_bool)


def _one_of(choices: Sequence[Any]) -> Kind:
    return Kind(", ".join(map(str, choices)), lambda v, text: _as_str(v, text),
                lambda v: v in choices, verb="choose one of")  # fmt: skip


# -- binding: every option of every command becomes a checked setting --------------------------


class _Setting:
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
        return self._check(self.kind, value, _toml(value), where, text=False)

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
        return self._check(self.kind, list(value), _toml(value), self.source, text=False)

    def _check(self, kind: Kind, value: Any, shown: str, where: str, text: bool) -> Any:
        try:
            return kind.check(value, text=text)
        except ValueError as exc:
            raise SettingError(f"[{self.command}] {self.key} = {shown} {where}: {exc}") from None


def _kind_of(command: str, action: argparse.Action) -> Kind | None:
    declared = action.type
    if isinstance(action, argparse._StoreTrueAction | argparse._StoreFalseAction):
        return _flag()
    if action.nargs == 0:  # other constant actions take no value
        return None
    if isinstance(declared, Kind):
        kind = declared
    elif action.choices is not None:
        kind = _one_of(tuple(action.choices))
    elif declared is None or declared is str:
        kind = _text()
    elif declared is Path:
        kind = _path()
    elif declared in (int, float):  # still checked, but with no range: a test flags these
        kind = integer() if declared is int else number()
    else:
        raise TypeError(
            f"scalecua {command} {action.option_strings[-1]}: declare what it takes with "
            "integer(...), number(...), items(...) or choices (cli/settings.py)"
        )
    listed = action.nargs not in (None, "?") or isinstance(action, argparse._AppendAction)
    return items(kind) if listed and not isinstance(kind, ListKind) else kind


def _walk(parser: argparse.ArgumentParser, path: str = "") -> list[tuple[str, Any]]:
    out = []
    for action in parser._actions:  # argparse keeps subcommands in a private action
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                where = f"{path} {name}".strip()
                out += [(where, sub), *_walk(sub, where)]
    return out


def bind_settings(parser: argparse.ArgumentParser) -> None:
    """Bind every option of every command to a checked `_Setting` (once, on the built parser)."""
    for command, sub in _walk(parser):
        for action in sub._actions:
            if (
                not action.option_strings
                or isinstance(action, argparse._HelpAction | argparse._VersionAction)
                or isinstance(action.type, _Setting)  # bound already
            ):
                continue
            kind = _kind_of(command, action)
            if kind is not None:
                action.type = _Setting(command, action, kind)


_RULES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def require(
    parser: argparse.ArgumentParser, keys: tuple[str, ...], holds: Callable[..., bool], reason: str
) -> None:
    """Declare a rule across a command's settings, checked on their final values."""
    _RULES.setdefault(parser, []).append((keys, holds, reason))


def _check_rules(command: str, sub: argparse.ArgumentParser, ns: argparse.Namespace) -> None:
    for action in sub._actions:
        setting = action.type
        if isinstance(setting, _Setting) and isinstance(setting.kind, ListKind):
            value = getattr(ns, action.dest, None)
            if value is not None:
                setting.recheck(value)
    for keys, holds, reason in _RULES.get(sub, []):
        values = [getattr(ns, k, None) for k in keys]
        if any(v is None for v in values) or holds(*values):
            continue
        sources = {a.dest: a.type.source for a in sub._actions if isinstance(a.type, _Setting)}
        named = " and ".join(
            f"{k} = {_toml(v)} {sources[k]}" for k, v in zip(keys, values, strict=True)
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
        _check_rules(path, parser, args)


def environment_value(name: str, kind: Kind, default: Any) -> Any:
    """A variable of the environment checked as `kind`, or the default when it is unset."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        return kind.check(raw, text=True)
    except ValueError as exc:
        raise SettingError(f"${name} = {raw}: {exc}") from None


# -- the config file and the environment ----------------------------------------------------


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


def _bound(action: argparse.Action) -> _Setting:
    if not isinstance(action.type, _Setting):
        raise ConfigError(f"{action.dest} is not a setting (is the parser from build_parser?)")
    return action.type


def load_config(path: Path | None, parser: argparse.ArgumentParser) -> dict[str, dict[str, Any]]:
    """Read the file and the environment into {command: {key: value}}, every name and value checked."""
    commands = _commands(parser)
    values: dict[str, dict[str, Any]] = {}
    if path is not None:
        raw = _read_toml(path)
        for command, table in raw.items():
            if command not in commands or not isinstance(table, dict):
                raise ConfigError(f"{path}: [{command}] is not a command with settings")
            known = _settings(commands[command])
            for key, value in table.items():
                if key not in known:
                    raise ConfigError(
                        f"{path}: [{command}] has no setting {key!r}; "
                        f"known: {', '.join(sorted(known))}"
                    )
                checked = _bound(known[key]).accept(value, f"in {path}")
                values.setdefault(command, {})[key] = checked
    for name, text in os.environ.items():
        if not name.startswith("SCALECUA_"):
            continue
        for command, sub in commands.items():
            prefix = f"SCALECUA_{command.upper()}_"
            if name.startswith(prefix):
                key = name[len(prefix) :].lower()
                known = _settings(sub)
                if key in known:
                    checked = _bound(known[key]).accept_env(name, text)
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
    commands = _commands(parser)
    for command, table in values.items():
        commands[command].set_defaults(**table)


def command_defaults(parser: argparse.ArgumentParser, command: str) -> argparse.Namespace:
    """Return a command's effective settings (as parsing it with no arguments would), checked."""
    sub = _commands(parser)[command]
    ns = argparse.Namespace(**{dest: a.default for dest, a in _settings(sub).items()})
    _check_rules(command, sub, ns)
    return ns


def configured(parser: argparse.ArgumentParser, command: str, key: str) -> bool:
    """Whether a command's setting was given a value (file, environment), not left at its default."""
    setting = _settings(_commands(parser)[command])[key].type
    return isinstance(setting, _Setting) and setting.source != "by default"


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

    from cli import build_parser

    parser = build_parser()
    path = config_path(getattr(args, "config", None))
    apply_config(parser, load_config(path, parser))
    for name in _commands(parser):  # rules across settings hold in what is shown
        command_defaults(parser, name)
    source = f"# effective settings; file: {path or '(none)'}, then SCALECUA_<COMMAND>_<KEY>\n\n"
    sys.stdout.write(source + render_toml(parser, args.commands or None))
    return 0
