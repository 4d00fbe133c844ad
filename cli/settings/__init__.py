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

The package: `kinds` (what a setting takes), `binding` (options bound as checked settings,
rules across them), `config_file` (the file and the environment), `show` (`config show`).
"""

from cli.settings.binding import bind_settings, check_parsed, environment_value, require
from cli.settings.config_file import (
    apply_config,
    command_defaults,
    config_path,
    configured,
    load_config,
)
from cli.settings.kinds import PORT, Kind, ListKind, integer, items, number
from cli.settings.show import render_toml

__all__ = [
    "PORT",
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
]
