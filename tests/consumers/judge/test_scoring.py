"""The judge's status rules, and scoring from a collected manifest alone."""

from __future__ import annotations

from pathlib import Path

import openpyxl
import orjson
import pytest

from consumers.judge.scoring import JudgeConfig, reward_for
from consumers.judge.service import score_trajectory
from runtime.blobstore import open_blob_store
from runtime.errors import ConfigError
from topics.events import REWARD_SCORES, TrajectoryComplete


def _trajectory(status: str, **kw: object) -> TrajectoryComplete:
    return TrajectoryComplete(
        trajectory_id="g/0@0abc", status=status, num_steps=3, task_id="t", group_id="g",
        group_size=4, sample_index=0, request_id="g/0", max_steps=3, **kw,
    )  # fmt: skip


def test_status_rules() -> None:
    config = JudgeConfig(judge_version="v9", incomplete_reward=-0.2)
    done = reward_for(_trajectory("done"), 1.0, "metrics", config)
    assert (done.score, done.scored, done.judge_version) == (1.0, True, "v9")
    incomplete = reward_for(_trajectory("max_steps"), 1.0, "metrics", config)
    assert incomplete.score == -0.2 and incomplete.metric_score == 1.0 and incomplete.scored
    assert "3-step limit" in incomplete.reason
    failed = reward_for(_trajectory("error", error="desktop died"), None, "", config)
    assert not failed.scored and "desktop died" in failed.reason
    unscorable = reward_for(_trajectory("done"), None, "artifacts unusable", config)
    assert not unscorable.scored and "artifacts unusable" in unscorable.reason
    assert done.dedup_id() == "g/0@0abc:v9"


def test_the_judge_writes_only_scores_it_promises() -> None:
    for penalty in (0.5, -1.5, float("nan")):
        with pytest.raises(ConfigError, match=r"must be a penalty in \[-1, 0\]"):
            JudgeConfig(incomplete_reward=penalty)
    config = JudgeConfig(incomplete_reward=-1.0)
    assert reward_for(_trajectory("max_steps"), 0.0, "metrics", config).score in REWARD_SCORES


async def test_scoring_needs_only_the_manifest_and_the_blob_store(tmp_path: Path) -> None:
    blobs = open_blob_store(str(tmp_path / "blobs"))
    book = openpyxl.Workbook()
    book.active.append(["total", 42])
    book.save(tmp_path / "out.xlsx")
    sheet = {"$blob": blobs.put((tmp_path / "out.xlsx").read_bytes()), "name": "out.xlsx"}
    manifest = {
        "version": 1,
        "task_id": "t",
        "evaluator": {
            "func": ["sandboxed_judge", "exact_match"],
            "result": [{"type": "vm_file", "path": "/x"}, {"type": "rule", "rules": {}}],
            "expected": [None, {"type": "rule", "rules": {}}],
            "options": [
                {
                    "source": (
                        "import openpyxl\n"
                        "def judge(a):\n"
                        "    ws = openpyxl.load_workbook(a['result']).active\n"
                        "    return float(ws['B1'].value == 42)\n"
                    ),
                    "function": "judge",
                },
                {},
            ],
        },
        "decided": None,
        "funcs": [
            {"func": "sandboxed_judge", "result": sheet, "expected": None,
             "has_expected": False, "error": None},
            {"func": "exact_match", "result": "yes", "expected": {"expected": "yes"},
             "has_expected": True, "error": None},
        ],
    }  # fmt: skip
    ref = blobs.put(orjson.dumps(manifest))
    score, reason = await score_trajectory(
        _trajectory("done", artifacts={"evaluation": ref}), blobs
    )
    assert (score, reason) == (1.0, "metrics")
    score, reason = await score_trajectory(
        _trajectory("done", artifacts={"evaluation": "sha256:" + "0" * 64}), blobs
    )
    assert score is None and "artifacts unusable" in reason
