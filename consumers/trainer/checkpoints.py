"""The checkpoint store: one HF model folder per policy version, in a folder or at an fsspec URL.

Layout under the root (a local folder, `file://...`, or `s3://bucket/prefix`):

    v000001/                  an HF model folder: config, safetensors weights, tokenizer,
                              chat template, image processor config — `load_policy` and the
                              rollout engines' `load_weights` read it as is
    v000001/scalecua_trainer.json   the trainer's metadata (written last: the folder is
                              complete exactly when this file exists), with the sha256 of
                              every other file of the folder under `files` (the manifest a
                              rollout worker checks before adopting the version)
    state/v000001/optimizer.pt      what resuming needs beyond the weights (the newest few)

Older versions can be pruned as new ones are written (`keep_models`, default all): a version
is dropped metadata first, so a reader never takes a half-removed folder for a version.

Locally a version is written into a hidden temporary folder beside the root and renamed
into place (atomic), after its files are fsynced; remotely the files are uploaded first and
the metadata last. A reader therefore never sees a half-written version.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime.errors import StorageError
from runtime.policy.checkpoint import (
    CHECKPOINT_METADATA,
    checkpoint_name,
    default_checkpoint_root,
    file_manifest,
)

__all__ = ["METADATA", "Checkpoint", "CheckpointStore", "default_checkpoint_root"]

log = logging.getLogger(__name__)

METADATA = CHECKPOINT_METADATA  # its name is shared with every reader (rollout workers)
_VERSION = re.compile(r"v(\d{6,})")


@dataclass(frozen=True)
class Checkpoint:
    """A complete checkpoint: its version, where it lives, and the trainer's metadata."""

    version: int
    uri: str
    metadata: dict[str, Any]


class CheckpointStore:
    """Versioned HF model folders under a root folder or fsspec URL."""

    def __init__(self, root: str) -> None:
        self.root = str(root)
        self.remote = "://" in self.root and not self.root.startswith("file://")
        if self.remote:
            import fsspec

            self.fs, base = fsspec.core.url_to_fs(self.root)
            self.base = base.rstrip("/")
        else:
            self.path = Path(self.root.removeprefix("file://")).expanduser().resolve()
            try:
                self.path.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StorageError(
                    f"cannot create the checkpoint folder {self.path}: {exc}"
                ) from exc

    def clean_partial(self) -> None:
        """Remove temporary folders a killed writer left in a local root."""
        if self.remote:
            return
        for leftover in self.path.glob(".v*-*"):
            if leftover.is_dir() and _VERSION.fullmatch(leftover.name[1:].split("-", 1)[0]):
                shutil.rmtree(leftover, ignore_errors=True)

    @staticmethod
    def name(version: int) -> str:
        """The folder name of a version."""
        return checkpoint_name(version)

    def uri(self, version: int) -> str:
        """Where a version's model folder lives (a local path or a URL)."""
        if self.remote:
            return f"{self.root.rstrip('/')}/{self.name(version)}"
        return str(self.path / self.name(version))

    # -- reading --------------------------------------------------------------------------
    def versions(self) -> list[int]:
        """Every complete version, oldest first."""
        try:
            if self.remote:
                names = [
                    p.rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(self.base, detail=False)
                ]
            else:
                names = [p.name for p in self.path.iterdir() if p.is_dir()]
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise StorageError(f"cannot list checkpoints in {self.root}: {exc}") from exc
        found = []
        for name in names:
            match = _VERSION.fullmatch(name)
            if match and self._exists(f"{name}/{METADATA}"):
                found.append(int(match.group(1)))
        return sorted(found)

    def latest(self) -> Checkpoint | None:
        """The newest complete checkpoint, or None."""
        versions = self.versions()
        if not versions:
            return None
        version = versions[-1]
        return Checkpoint(version, self.uri(version), self.metadata(version))

    def metadata(self, version: int) -> dict[str, Any]:
        """A version's trainer metadata."""
        return json.loads(self._read(f"{self.name(version)}/{METADATA}"))

    @contextlib.contextmanager
    def local_model(self, version: int) -> Iterator[Path]:
        """A version's model folder on local disk (itself, or a temporary download)."""
        with self._local(self.name(version)) as path:
            yield path

    @contextlib.contextmanager
    def local_state(self, version: int) -> Iterator[Path | None]:
        """A version's resume state on local disk, or None if it was not kept."""
        name = f"state/{self.name(version)}"
        if not self._exists(f"{name}/optimizer.pt"):
            yield None
            return
        with self._local(name) as path:
            yield path

    # -- writing --------------------------------------------------------------------------
    def write(
        self,
        version: int,
        save_model: Callable[[Path], None],
        save_state: Callable[[Path], None] | None,
        metadata: dict[str, Any],
        keep_states: int = 2,
        keep_models: int = 0,
    ) -> str:
        """Write a version (state first, model files, metadata last); return its URI.

        Afterwards only the newest `keep_states` resume states are kept and, unless
        `keep_models` is 0, only the newest `keep_models` versions.
        """
        name = self.name(version)
        scratch = None if self.remote else self.path
        try:
            with tempfile.TemporaryDirectory(prefix=f".{name}-", dir=scratch) as tmp:
                model_dir, state_dir = Path(tmp) / name, Path(tmp) / "state"
                save_model(model_dir)
                if save_state is not None:
                    save_state(state_dir)
                manifest = {**metadata, "files": file_manifest(model_dir)}
                (model_dir / METADATA).write_text(json.dumps(manifest, indent=1, sort_keys=True))
                if self.remote:
                    self._upload(state_dir, f"state/{name}")
                    self._upload(model_dir, name, last=METADATA)
                else:
                    self._install_local(state_dir, self.path / "state" / name)
                    self._install_local(model_dir, self.path / name)
        except StorageError:
            raise
        except OSError as exc:
            raise StorageError(f"writing checkpoint {self.uri(version)} failed: {exc}") from exc
        try:  # the version is written: failing to drop older ones must not undo that
            self._prune_states(version, keep_states)
            if keep_models > 0:
                self._prune_models(version, keep_models)
        except (OSError, StorageError) as exc:
            log.warning("checkpoint %s written, but pruning older versions failed: %s",
                        self.uri(version), exc)  # fmt: skip
        return self.uri(version)

    def _install_local(self, source: Path, target: Path) -> None:
        if not source.exists():
            return
        for file in source.rglob("*"):
            if file.is_file():
                with open(file, "rb") as handle:
                    os.fsync(handle.fileno())
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():  # a version is only rewritten after a crash left it unannounced
            shutil.rmtree(target)
        os.rename(source, target)
        fd = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _upload(self, source: Path, name: str, last: str | None = None) -> None:
        if not source.exists():
            return
        files = sorted(f for f in source.rglob("*") if f.is_file())
        files.sort(key=lambda f: f.name == last)  # the completeness marker goes last
        for file in files:
            self.fs.put_file(str(file), f"{self.base}/{name}/{file.relative_to(source).as_posix()}")

    def _prune_states(self, version: int, keep: int) -> None:
        """Keep the resume state of the newest `keep` versions only (optimizer states are big)."""
        old = [v for v in self._state_versions() if v <= version - max(keep, 1)]
        for v in old:
            target = f"state/{self.name(v)}"
            if self.remote:
                self.fs.rm(f"{self.base}/{target}", recursive=True)
            else:
                shutil.rmtree(self.path / target, ignore_errors=True)

    def _prune_models(self, version: int, keep: int) -> None:
        """Drop every version older than the newest `keep` (its metadata first)."""
        for v in self.versions():
            if v > version - keep:
                continue
            name = self.name(v)
            if self.remote:
                self.fs.rm(f"{self.base}/{name}/{METADATA}")
                self.fs.rm(f"{self.base}/{name}", recursive=True)
                if self.fs.exists(f"{self.base}/state/{name}"):
                    self.fs.rm(f"{self.base}/state/{name}", recursive=True)
            else:
                (self.path / name / METADATA).unlink(missing_ok=True)
                shutil.rmtree(self.path / name, ignore_errors=True)
                shutil.rmtree(self.path / "state" / name, ignore_errors=True)

    def _state_versions(self) -> list[int]:
        try:
            if self.remote:
                if not self.fs.exists(f"{self.base}/state"):
                    return []
                names = [p.rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(f"{self.base}/state")]
            else:
                folder = self.path / "state"
                names = [p.name for p in folder.iterdir()] if folder.exists() else []
        except FileNotFoundError:
            return []
        return sorted(int(m.group(1)) for n in names if (m := _VERSION.fullmatch(n)))

    # -- backend-neutral file access ------------------------------------------------------
    def _exists(self, relative: str) -> bool:
        try:
            if self.remote:
                return bool(self.fs.exists(f"{self.base}/{relative}"))
            return (self.path / relative).exists()
        except OSError as exc:
            raise StorageError(f"cannot read checkpoints in {self.root}: {exc}") from exc

    def _read(self, relative: str) -> bytes:
        try:
            if self.remote:
                with self.fs.open(f"{self.base}/{relative}", "rb") as handle:
                    return handle.read()
            return (self.path / relative).read_bytes()
        except OSError as exc:
            raise StorageError(f"cannot read {relative} in {self.root}: {exc}") from exc

    @contextlib.contextmanager
    def _local(self, relative: str) -> Iterator[Path]:
        if not self.remote:
            yield self.path / relative
            return
        with tempfile.TemporaryDirectory(prefix="scalecua-ckpt-") as tmp:
            remote = f"{self.base}/{relative}"
            try:
                for file in self.fs.find(remote):
                    target = Path(tmp) / Path(file).relative_to(remote)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    self.fs.get_file(file, str(target))
            except OSError as exc:
                raise StorageError(f"cannot fetch {self.root}/{relative}: {exc}") from exc
            yield Path(tmp)
