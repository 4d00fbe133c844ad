"""What makes a folder a trainer checkpoint, and one a rollout worker may adopt.

    from runtime.policy.checkpoint import adoptable_checkpoint

    root = "s3://bucket/run/ckpt"                          # the run's checkpoint root
    with adoptable_checkpoint(f"{root}/v000015", 15, root) as folder:
        ...  # load the weights from `folder`; PolicyError before this unless all holds

A checkpoint is an HF model folder (a local path, `file://`, or any fsspec URL such as
`s3://`) that holds the trainer's metadata, `scalecua_trainer.json`. The trainer writes
that file last, so a folder is a complete checkpoint exactly when it exists; it names the
policy version the weights are and, under `files`, the sha256 of every other file of the
folder (the manifest). An announcement on `policy-updates` is only a claim — anyone who can
write the log can make one — so a worker adopts a version only when:

- the folder is below the run's checkpoint root, the root the worker was configured with
  (a local folder by its real path, symlinks resolved, and so is every file in it; a URL
  by its path, without `..`, `?` or `#`);
- its metadata names that version, and the folder is named for it (`v000015`);
- for a root on shared storage (any URL but `file://`, or when asked for a local one), the
  manifest: the folder holds exactly the files it lists, with their sha256. A remote folder
  is downloaded once, checked, and loaded from that copy (nothing is read twice).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import posixpath
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from runtime.config import home_dir
from runtime.errors import PolicyError

__all__ = [
    "CHECKPOINT_METADATA",
    "checkpoint_name",
    "default_checkpoint_root",
    "file_manifest",
    "read_checkpoint_metadata",
    "verify_checkpoint",
    "adoptable_checkpoint",
]

CHECKPOINT_METADATA = "scalecua_trainer.json"
_SHA256 = re.compile(r"[0-9a-f]{64}")


def checkpoint_name(version: int) -> str:
    """The folder name of a policy version (`v000015`)."""
    return f"v{version:06d}"


def default_checkpoint_root() -> str:
    """Return where trainers write and workers adopt from by default: $SCALECUA_CHECKPOINTS,
    else `$SCALECUA_HOME/checkpoints`."""
    return os.environ.get("SCALECUA_CHECKPOINTS") or str(home_dir() / "checkpoints")


def _is_remote(uri: str) -> bool:
    return "://" in uri and not uri.startswith("file://")


def _local_path(uri: str) -> Path:
    return Path(uri.removeprefix("file://")).expanduser()


def file_manifest(folder: Path) -> dict[str, str]:
    """sha256 of every file below `folder` (posix relative path -> hex), the metadata excepted."""
    out = {}
    for file in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
        name = file.relative_to(folder).as_posix()
        if name != CHECKPOINT_METADATA:
            out[name] = _sha256(file)
    return out


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def read_checkpoint_metadata(uri: str) -> dict[str, Any]:
    """The trainer's metadata of the checkpoint at `uri`; PolicyError if it is not one."""
    try:
        if _is_remote(uri):
            import fsspec

            fs, root = fsspec.core.url_to_fs(uri)
            with fs.open(f"{root.rstrip('/')}/{CHECKPOINT_METADATA}", "rb") as handle:
                raw = handle.read()
        else:
            raw = (_local_path(uri) / CHECKPOINT_METADATA).read_bytes()
    except FileNotFoundError:
        raise PolicyError(
            f"{uri} is not a complete checkpoint (it has no {CHECKPOINT_METADATA})"
        ) from None
    except (OSError, ValueError, ImportError) as exc:
        raise PolicyError(f"cannot read {CHECKPOINT_METADATA} of {uri}: {exc}") from exc
    try:
        metadata = json.loads(raw)
    except ValueError as exc:
        raise PolicyError(f"{CHECKPOINT_METADATA} of {uri} is not JSON: {exc}") from exc
    if not isinstance(metadata, dict):
        raise PolicyError(f"{CHECKPOINT_METADATA} of {uri} is not a JSON object")
    return metadata


def verify_checkpoint(uri: str, policy_version: int) -> dict[str, Any]:
    """Refuse (PolicyError) a checkpoint that is missing, incomplete or another version."""
    metadata = read_checkpoint_metadata(uri)
    holds = metadata.get("policy_version")
    if holds != policy_version or isinstance(holds, bool):
        raise PolicyError(f"{uri} holds policy version {holds}, not {policy_version}")
    return metadata


@contextlib.contextmanager
def adoptable_checkpoint(
    uri: str, policy_version: int, root: str, *, hashes: bool | None = None
) -> Iterator[str]:
    """The checkpoint at `uri` as a local folder to load, once it is verified as the run's
    trainer's checkpoint of `policy_version` (see the module docstring); PolicyError if not.

    `hashes`: check the manifest (None: only for a remote root, where it is required).
    """
    if _is_remote(root) != _is_remote(uri):
        raise PolicyError(f"{uri} is not under the run's checkpoint root {root}")
    if _is_remote(root):
        remote = _remote_under(uri, root)
        with tempfile.TemporaryDirectory(prefix="scalecua-update-") as tmp:
            folder = Path(tmp)
            _download(remote, folder)
            metadata = verify_checkpoint(str(folder), policy_version)
            _check_name(remote.rsplit("/", 1)[-1], uri, policy_version)
            if hashes is not False:
                _check_manifest(folder, metadata, uri)
            yield str(folder)
        return
    folder = _local_under(uri, root)
    metadata = verify_checkpoint(str(folder), policy_version)
    _check_name(folder.name, uri, policy_version)
    if hashes:
        _check_manifest(folder, metadata, uri)
    yield str(folder)


def _check_name(name: str, uri: str, version: int) -> None:
    if name != checkpoint_name(version):
        raise PolicyError(f"{uri} is not the folder of version {version} "
                          f"({checkpoint_name(version)})")  # fmt: skip


def _local_under(uri: str, root: str) -> Path:
    """The real path of a local checkpoint folder below `root`."""
    base = _local_path(root).resolve()
    try:
        folder = _local_path(uri).resolve(strict=True)
    except FileNotFoundError:
        # The usual cause across hosts: the trainer wrote it to a folder of its own host.
        raise PolicyError(
            f"{uri} is not a complete checkpoint (no such folder on this host: a trainer on "
            "another host must write where its workers read, SCALECUA_CHECKPOINTS=s3://... or "
            "a shared folder)"
        ) from None
    except (OSError, RuntimeError) as exc:
        raise PolicyError(f"{uri} is not a complete checkpoint ({exc})") from None
    if folder == base or not folder.is_relative_to(base):
        raise PolicyError(f"{uri} is not under the run's checkpoint root {base}")
    for file in folder.rglob("*"):  # a file may not lead out of the folder either
        if not file.resolve().is_relative_to(folder):
            raise PolicyError(f"{uri}: {file.relative_to(folder)} links outside the checkpoint")
    return folder


def _remote_under(uri: str, root: str) -> str:
    """`uri`, normalised, when it is a folder below the remote `root`."""
    if any(c in uri for c in "?#\\"):
        raise PolicyError(f"{uri} is not a plain checkpoint URL")
    scheme, _, path = uri.partition("://")
    root_scheme, _, root_path = root.partition("://")
    parts = path.rstrip("/").split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise PolicyError(f"{uri} is not a plain checkpoint URL")
    base = posixpath.normpath(root_path.rstrip("/"))
    if scheme != root_scheme or not path.rstrip("/").startswith(base + "/"):
        raise PolicyError(f"{uri} is not under the run's checkpoint root {root}")
    return f"{scheme}://{path.rstrip('/')}"


def _download(uri: str, target: Path) -> None:
    try:
        import fsspec

        fs, base = fsspec.core.url_to_fs(uri)
        base = base.rstrip("/")
        files = [f for f in fs.find(base) if not f.endswith("/")]
        if not files:
            raise PolicyError(f"{uri} is not a complete checkpoint (it is empty or missing)")
        for remote in files:
            relative = posixpath.relpath(remote, base)
            if relative.startswith("..") or relative.startswith("/"):
                raise PolicyError(f"{uri}: {remote} is outside the checkpoint")
            local = target / relative
            local.parent.mkdir(parents=True, exist_ok=True)
            fs.get_file(remote, str(local))
    except (OSError, ValueError, ImportError) as exc:
        raise PolicyError(f"cannot fetch checkpoint {uri}: {exc}") from exc


def _check_manifest(folder: Path, metadata: dict[str, Any], uri: str) -> None:
    """Refuse a folder whose files are not exactly the ones the trainer hashed."""
    listed = metadata.get("files")
    if not isinstance(listed, dict) or not listed:
        raise PolicyError(f"{uri} has no file manifest (sha256 of its files, written by the "
                          "trainer): it cannot be checked, so it is not adopted")  # fmt: skip
    if not all(isinstance(v, str) and _SHA256.fullmatch(v) for v in listed.values()):
        raise PolicyError(f"{uri}: its file manifest is malformed")
    found = file_manifest(folder)
    if set(found) != set(listed):
        extra, missing = sorted(set(found) - set(listed)), sorted(set(listed) - set(found))
        raise PolicyError(f"{uri} does not hold the files its manifest lists "
                          f"(unlisted: {extra[:5]}, missing: {missing[:5]})")  # fmt: skip
    changed = sorted(name for name, digest in found.items() if listed[name] != digest)
    if changed:
        raise PolicyError(f"{uri}: {', '.join(changed[:5])} do not match the sha256 the trainer "
                          "wrote")  # fmt: skip
