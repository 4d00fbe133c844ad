"""`scalecua policy init` and `scalecua policy check`, offline, as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cli import main
from runtime.policy.model import load_policy


def test_init_writes_a_loadable_hf_model_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "policy"
    assert main(["policy", "init", "--out", str(out), "--seed", "3"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["policy"] == str(out)
    for name in ("config.json", "model.safetensors", "tokenizer.json", "preprocessor_config.json"):
        assert (out / name).exists(), name
    policy = load_policy(out)
    assert policy.processor.is_multimodal
    assert 15e6 < sum(p.numel() for p in policy.model.parameters()) < 25e6
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "qwen2_5_vl"


def test_init_is_seeded(tmp_path: Path) -> None:
    from safetensors.torch import load_file

    a, b, c = (tmp_path / n for n in "abc")
    for path, seed in ((a, 1), (b, 1), (c, 2)):
        assert main(["policy", "init", "--out", str(path), "--seed", str(seed)]) == 0
    wa, wb, wc = (load_file(str(p / "model.safetensors")) for p in (a, b, c))
    key = next(k for k in wa if k.endswith("q_proj.weight"))
    assert wa[key].equal(wb[key]) and not wa[key].equal(wc[key])


def test_check_prints_one_json_line_within_1e5(tiny_dir: Path) -> None:
    # A subprocess with no hub access: the whole path is offline.
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "cli", "policy", "check", str(tiny_dir), "--threads", "2"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert len(lines) == 1
    report = json.loads(lines[0])
    assert report["turns"] == 5 and report["images"] == 5
    assert report["dtype"] == "float32"
    assert 0 <= report["max_abs_logprob_diff"] <= 1e-5
