"""Which checkpoint folders a rollout worker may adopt (issue 30, finding 4): only the run's
trainer's, under its checkpoint root; on shared storage only with the files the trainer
hashed. Checkpoints are written by the trainer's own store, locally and on S3 (moto)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from consumers.trainer.checkpoints import CheckpointStore
from runtime.errors import PolicyError
from runtime.policy.checkpoint import CHECKPOINT_METADATA, adoptable_checkpoint


def _files(names: dict[str, bytes]):  # noqa: ANN202
    def save(out: Path) -> None:
        out.mkdir(parents=True, exist_ok=True)
        for name, data in names.items():
            (out / name).write_bytes(data)

    return save


def _write(root: str, version: int, weights: bytes = b"weights") -> str:
    files = {"config.json": b"{}", "model.safetensors": weights}
    return CheckpointStore(root).write(version, _files(files), None, {"policy_version": version})


def _adopt(uri: str, version: int, root: str, **kw: object) -> bytes:
    with adoptable_checkpoint(uri, version, root, **kw) as folder:
        return (Path(folder) / "model.safetensors").read_bytes()


def test_a_local_checkpoint_is_adopted_only_from_under_the_root(tmp_path: Path) -> None:
    root = str(tmp_path / "ckpt")
    v1 = _write(root, 1)
    assert _adopt(v1, 1, root) == b"weights"
    assert _adopt(f"file://{v1}", 1, f"file://{root}", hashes=True) == b"weights"
    assert _adopt(v1, 1, str(tmp_path)) == b"weights"  # a root above (up's <root>/<run>/v...)
    elsewhere = _write(str(tmp_path / "some" / "folder"), 901)
    with pytest.raises(PolicyError, match="is not under the run's checkpoint root"):
        _adopt(f"file://{elsewhere}", 901, root)
    with pytest.raises(PolicyError, match="is not under the run's checkpoint root"):
        _adopt(f"{root}/../some/folder/v000901", 901, root)
    # A link under the root to a folder elsewhere, or a file that leads out of the folder.
    os.symlink(elsewhere, f"{root}/v000901")
    with pytest.raises(PolicyError, match="is not under the run's checkpoint root"):
        _adopt(f"{root}/v000901", 901, root)
    v2 = _write(root, 2)
    (Path(v2) / "model.safetensors").unlink()
    os.symlink(Path(elsewhere) / "model.safetensors", Path(v2) / "model.safetensors")
    with pytest.raises(PolicyError, match="links outside the checkpoint"):
        _adopt(v2, 2, root)
    # The folder and its metadata must both be the announced version.
    with pytest.raises(PolicyError, match="holds policy version 1, not 5"):
        _adopt(v1, 5, root)
    renamed = Path(root) / "v000007"
    Path(_write(root, 3)).rename(renamed)
    with pytest.raises(PolicyError, match="holds policy version 3, not 7"):
        _adopt(str(renamed), 7, root)
    with pytest.raises(PolicyError, match="is not the folder of version 3"):
        _adopt(str(renamed), 3, root)
    with pytest.raises(PolicyError, match="is not a complete checkpoint"):
        _adopt("/nonexistent", 1, root)


def test_a_checkpoint_on_another_host_s_disk_is_refused_with_the_cure(tmp_path: Path) -> None:
    """Hosts apart (issue 32): a trainer whose root is a folder of its own host announces a
    path the worker's host does not have; the refusal says what the deploy is missing."""
    root = str(tmp_path / "ckpt")
    with pytest.raises(PolicyError, match="no such folder on this host.*SCALECUA_CHECKPOINTS"):
        _adopt(f"file://{root}/v000001", 1, root)


def test_a_local_checkpoint_checked_by_hash_refuses_changed_and_extra_files(
    tmp_path: Path,
) -> None:
    root = str(tmp_path / "ckpt")
    v1 = _write(root, 1)
    (Path(v1) / "model.safetensors").write_bytes(b"other weights")
    assert _adopt(v1, 1, root) == b"other weights"  # a local root: not hashed unless asked
    with pytest.raises(PolicyError, match="model.safetensors do not match the sha256"):
        _adopt(v1, 1, root, hashes=True)
    v2 = _write(root, 2)
    (Path(v2) / "pytorch_model.bin").write_bytes(b"a pickle")
    with pytest.raises(PolicyError, match=r"unlisted: \['pytorch_model.bin'\]"):
        _adopt(v2, 2, root, hashes=True)


def test_a_checkpoint_on_shared_storage_needs_the_trainers_manifest(
    s3_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import boto3
    import fsspec

    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1").create_bucket(
        Bucket="shared"
    )
    root = "s3://shared/run/ckpt"
    v1, v2, v3 = (_write(root, v) for v in (1, 2, 3))
    assert _adopt(v1, 1, root) == b"weights"  # downloaded once, checked, loaded from the copy
    fs = fsspec.filesystem("s3")
    fs.pipe(f"{v2.removeprefix('s3://')}/model.safetensors", b"swapped weights")
    with pytest.raises(PolicyError, match="do not match the sha256 the trainer wrote"):
        _adopt(v2, 2, root)
    # A folder whose metadata has no manifest (written by hand, or by an older trainer).
    fs.pipe(f"{v3.removeprefix('s3://')}/{CHECKPOINT_METADATA}", b'{"policy_version": 3}')
    with pytest.raises(PolicyError, match="has no file manifest"):
        _adopt(v3, 3, root)
    elsewhere = _write("s3://shared/elsewhere", 901)
    for uri in (elsewhere, "s3://shared/run/ckpt/../../elsewhere/v000901", f"file://{v1}"):
        with pytest.raises(PolicyError, match="not under the run's checkpoint root|not a plain"):
            _adopt(uri, 901, root)
