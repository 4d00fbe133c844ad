"""The checkpoint store: complete versions only, resume state kept for the newest, local and S3;
a trainer checkpoint on S3 loads into the rollout engine."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from consumers.trainer.backends import make_backend
from consumers.trainer.checkpoints import METADATA, CheckpointStore
from runtime.engines.transformers_engine import TransformersEngine
from runtime.policy.model import default_tiny_policy, load_policy


def _files(names: dict[str, str]):  # noqa: ANN202
    def save(out: Path) -> None:
        out.mkdir(parents=True, exist_ok=True)
        for name, text in names.items():
            (out / name).write_text(text)

    return save


def test_local_versions_appear_whole_and_old_states_go(tmp_path: Path) -> None:
    store = CheckpointStore(str(tmp_path / "ckpt"))
    assert store.latest() is None
    for version in (1, 2, 3):
        uri = store.write(version, _files({"config.json": f"{version}"}),
                          _files({"optimizer.pt": "x"}), {"step": version}, keep_states=2)  # fmt: skip
        assert uri == str(tmp_path / "ckpt" / f"v{version:06d}")
    latest = store.latest()
    # The metadata, with the sha256 of every file of the folder (what workers check).
    assert (latest.version, latest.metadata) == (3, {"step": 3, "files": {
        "config.json": hashlib.sha256(b"3").hexdigest()}})  # fmt: skip
    assert sorted(p.name for p in (tmp_path / "ckpt" / "state").iterdir()) == ["v000002", "v000003"]
    with store.local_state(1) as gone, store.local_state(3) as kept:
        assert gone is None and (kept / "optimizer.pt").exists()
    # What a writer killed midway leaves behind is not a version, and is cleaned up.
    (tmp_path / "ckpt" / ".v000004-abc" / "v000004").mkdir(parents=True)
    (tmp_path / "ckpt" / "v000005").mkdir()  # no metadata: never completed
    assert store.versions() == [1, 2, 3]
    store.clean_partial()
    assert not (tmp_path / "ckpt" / ".v000004-abc").exists()


def test_only_the_newest_versions_are_kept_when_asked(tmp_path: Path) -> None:
    store = CheckpointStore(str(tmp_path / "ckpt"))
    for version in range(1, 6):
        store.write(version, _files({"config.json": f"{version}"}), _files({"optimizer.pt": "x"}),
                    {"step": version}, keep_states=1, keep_models=3)  # fmt: skip
    assert store.versions() == [3, 4, 5]
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == [
        "state", "v000003", "v000004", "v000005"
    ]  # fmt: skip
    assert [p.name for p in (tmp_path / "ckpt" / "state").iterdir()] == ["v000005"]
    store.write(6, _files({"config.json": "6"}), None, {"step": 6})  # keep_models=0: all
    assert store.versions() == [3, 4, 5, 6]


def test_a_failed_prune_keeps_the_version_just_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = CheckpointStore(str(tmp_path / "ckpt"))

    def broken(version: int, keep: int) -> None:
        raise OSError("bucket is read-only for deletes")

    monkeypatch.setattr(store, "_prune_models", broken)
    for version in (1, 2, 3):
        uri = store.write(version, _files({"config.json": "{}"}), None, {}, keep_models=2)
        assert uri.endswith(f"v{version:06d}")
    assert store.versions() == [1, 2, 3]  # nothing dropped, nothing lost


def test_a_failed_save_leaves_no_version(tmp_path: Path) -> None:
    store = CheckpointStore(str(tmp_path / "ckpt"))

    def broken(out: Path) -> None:
        out.mkdir()
        (out / "model.safetensors").write_text("half")
        raise OSError("disk full")

    with pytest.raises(Exception, match="disk full"):
        store.write(1, broken, None, {})
    assert store.versions() == [] and list((tmp_path / "ckpt").iterdir()) == []


async def test_s3_checkpoints_resume_and_load_into_the_rollout_engine(
    tmp_path: Path, s3_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import boto3

    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1").create_bucket(
        Bucket="train"
    )
    store = CheckpointStore("s3://train/run-1/ckpt")
    assert store.latest() is None
    backend = make_backend("torch", lr=1e-3)
    backend.load(default_tiny_policy())
    uri = store.write(1, backend.save, backend.save_state, {"step": 1, "groups": ["g"]})
    store.write(2, _files({"config.json": "{}"}), None, {"step": 2})
    assert uri == "s3://train/run-1/ckpt/v000001" and store.versions() == [1, 2]
    assert store.latest().metadata == {"step": 2, "files": {
        "config.json": hashlib.sha256(b"{}").hexdigest()}}  # fmt: skip
    with store.local_model(1) as folder, store.local_state(1) as state:
        assert json.loads((folder / METADATA).read_text())["groups"] == ["g"]
        policy = load_policy(folder)
        assert (state / "optimizer.pt").exists()
    trained = backend.model.state_dict()
    assert all((v == trained[k]).all() for k, v in policy.model.state_dict().items())
    engine = TransformersEngine(load_policy("tiny"))
    await engine.load_weights(uri, 1)
    assert engine.policy_version == 1
    # Keeping the newest two drops version 1 and its state from the bucket.
    store.write(3, _files({"config.json": "{}"}), None, {"step": 3}, keep_models=2)
    assert store.versions() == [2, 3]
    with store.local_state(1) as gone:
        assert gone is None
