"""The TOML config: precedence (default < file < environment < flag), checking, `config show`."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from cli import build_parser
from cli.settings import apply_config, command_defaults, load_config
from runtime.errors import ConfigError

SCALECUA = [sys.executable, "-m", "cli"]


def test_file_then_environment_then_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "scalecua.toml"
    path.write_text("[sample]\nmu = 0.4\nbatch = 16\n\n[rollout]\ncontext = [3, 2]\n")
    monkeypatch.setenv("SCALECUA_SAMPLE_BATCH", "4")
    parser = build_parser()
    apply_config(parser, load_config(path, parser))
    sample = command_defaults(parser, "sample")
    assert (sample.mu, sample.batch, sample.sigma) == (0.4, 4, 0.25)  # file, env, default
    assert command_defaults(parser, "rollout").context == [3, 2]
    args = parser.parse_args(["sample", "--batch", "2"])
    assert (args.batch, args.mu) == (2, 0.4)  # the flag wins


def test_unknown_names_and_bad_choices_are_refused(tmp_path: Path) -> None:
    parser = build_parser()
    for text, message in (
        ("[sample]\nmuu = 1\n", "no setting 'muu'"),
        ("[nonsense]\nx = 1\n", "not a command"),
        ('[sample]\nstrategy = "psychic"\n', "choose one of"),
    ):
        path = tmp_path / "bad.toml"
        path.write_text(text)
        with pytest.raises(ConfigError, match=message):
            apply_config(parser, load_config(path, parser))


def test_config_show_prints_a_file_that_loads_back(tmp_path: Path) -> None:
    res = subprocess.run([*SCALECUA, "config", "show"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    shown = tomllib.loads(res.stdout)
    assert shown["sample"]["mu"] == 0.5 and shown["rollout"]["context"] == [5, 5]
    path = tmp_path / "shown.toml"
    path.write_text(res.stdout)
    again = subprocess.run([*SCALECUA, "--config", str(path), "config", "show"],
                           capture_output=True, text=True, timeout=60)  # fmt: skip
    assert again.returncode == 0 and tomllib.loads(again.stdout) == shown


def test_up_sizes_the_trainers_process_group_from_train_or_its_flag(tmp_path: Path) -> None:
    from cli.up_commands import service_settings

    path = tmp_path / "scalecua.toml"
    path.write_text("[train]\nnproc = 2\n")
    parser = build_parser()
    assert service_settings(parser.parse_args(["up"]))["train"].nproc == 1
    file_args = parser.parse_args(["--config", str(path), "up"])
    assert service_settings(file_args)["train"].nproc == 2  # [train] nproc
    flag_args = parser.parse_args(["--config", str(path), "up", "--trainer-nproc", "3"])
    assert service_settings(flag_args)["train"].nproc == 3  # the flag wins


def test_ups_profile_fills_only_what_the_file_left_unset(tmp_path: Path) -> None:
    """A file's value wins over up's profile even when it equals the command's own default."""
    from cli.up_commands import service_settings

    parser = build_parser()
    train = service_settings(parser.parse_args(["up"]))["train"]
    assert train.keep_checkpoints == 3 and train.lr == 2e-5  # smollm2's profile
    path = tmp_path / "scalecua.toml"
    path.write_text("[train]\nkeep_checkpoints = 0\nlr = 3e-6\n")  # `train`'s own defaults
    train = service_settings(parser.parse_args(["--config", str(path), "up"]))["train"]
    assert train.keep_checkpoints == 0 and train.lr == 3e-6


def test_one_kept_checkpoint_is_refused(tmp_path: Path) -> None:
    res = subprocess.run([*SCALECUA, "train", "--keep-checkpoints", "1"],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert res.returncode == 2 and "keep_checkpoints = 1" in res.stderr, res.stderr
