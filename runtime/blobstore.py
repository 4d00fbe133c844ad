"""Content-addressed blob store for the claim-check: events carry a ref, the bytes live here.

Screenshots and other large payloads are stored once under their sha256 and referenced from
events as "sha256:<64 hex>". Two backends share one interface:

    open_blob_store("/data/blobs")            a local folder (also "file:///data/blobs")
    open_blob_store("s3://bucket/prefix")     any S3-compatible store, through s3fs

Objects sit in fan-out folders, `<root>/<first two hex>/<full hex>`, so no folder grows huge.
A put is idempotent (same bytes, same ref, nothing rewritten when an intact copy exists) and
every get re-hashes what it read, so a damaged object raises BlobCorrupt instead of feeding a
wrong screenshot to the trainer. The S3 endpoint comes from the standard AWS_ENDPOINT_URL
variable (or `endpoint_url=`), credentials from the standard AWS variables.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import uuid
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from runtime.config import blob_store_url
from runtime.errors import BlobCorrupt, BlobNotFound, ConfigError

__all__ = [
    "BlobStore",
    "LocalBlobStore",
    "S3BlobStore",
    "blob_ref",
    "open_blob_store",
    "s3_filesystem",
]

_REF = re.compile(r"sha256:([0-9a-f]{64})")


def blob_ref(data: bytes) -> str:
    """Return the content reference ("sha256:<64 hex>") of some bytes."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _digest(ref: str) -> str:
    match = _REF.fullmatch(ref)
    if match is None:
        raise ValueError(f"not a blob reference (expected 'sha256:<64 hex>'): {ref!r}")
    return match.group(1)


class BlobStore(ABC):
    """A content-addressed store: put bytes, get them back by their sha256 reference."""

    url: str

    def put(self, data: bytes, *, repair: bool = False) -> str:
        """Store bytes (unless an intact copy exists) and return their reference.

        A stored copy of the right size counts as intact; with `repair` it is re-read and
        rewritten if its bytes no longer match their hash.
        """
        ref = blob_ref(data)
        digest = _digest(ref)
        key = self._key(digest)
        if self._stored_size(key) != len(data):  # missing, or a truncated leftover
            self._write(key, data)
        elif repair and hashlib.sha256(self._read(key)).hexdigest() != digest:
            self._write(key, data)
        return ref

    def get(self, ref: str) -> bytes:
        """Return the bytes behind a reference, checked against its hash."""
        digest = _digest(ref)
        try:
            data = self._read(self._key(digest))
        except FileNotFoundError:
            raise BlobNotFound(f"no blob {ref} in {self.url}") from None
        actual = hashlib.sha256(data).hexdigest()
        if actual != digest:
            raise BlobCorrupt(
                f"blob {ref} in {self.url} is corrupt: its {len(data)} bytes hash to sha256:{actual}"
            )
        return data

    def exists(self, ref: str) -> bool:
        """Return whether the store holds a blob for this reference."""
        return self._stored_size(self._key(_digest(ref))) is not None

    @abstractmethod
    def url_for(self, ref: str) -> str:
        """Return the URL where the blob for this reference lives (file:// or s3://)."""

    async def aput(self, data: bytes) -> str:
        """Store bytes without blocking the event loop; return their reference."""
        return await asyncio.to_thread(self.put, data)

    async def aget(self, ref: str) -> bytes:
        """Return the bytes behind a reference without blocking the event loop."""
        return await asyncio.to_thread(self.get, ref)

    async def aexists(self, ref: str) -> bool:
        """Return whether a blob exists, without blocking the event loop."""
        return await asyncio.to_thread(self.exists, ref)

    # Backends provide these four, addressed by a backend-specific key.
    @abstractmethod
    def _key(self, digest: str) -> Any: ...

    @abstractmethod
    def _stored_size(self, key: Any) -> int | None: ...

    @abstractmethod
    def _read(self, key: Any) -> bytes: ...

    @abstractmethod
    def _write(self, key: Any, data: bytes) -> None: ...

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"


class LocalBlobStore(BlobStore):
    """Blobs in a local (or shared-volume) folder, written atomically."""

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool = True) -> None:
        self.root = Path(root).expanduser().resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self.url = self.root.as_uri()
        self.fsync = fsync  # a ref may be in Kafka before the page cache reaches the disk

    def url_for(self, ref: str) -> str:
        """Return the file:// URL of the blob for this reference."""
        return self._key(_digest(ref)).as_uri()

    def _key(self, digest: str) -> Path:
        return self.root / digest[:2] / digest

    def _stored_size(self, key: Path) -> int | None:
        try:
            return key.stat().st_size
        except FileNotFoundError:
            return None

    def _read(self, key: Path) -> bytes:
        return key.read_bytes()

    def _write(self, key: Path, data: bytes) -> None:
        key.parent.mkdir(exist_ok=True)
        # A unique temp name per writer: concurrent puts of one blob never share a half-file,
        # and rename is atomic, so readers see the whole blob or none.
        tmp = key.with_name(f".{key.name}.{uuid.uuid4().hex}.tmp")
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                if self.fsync:
                    f.flush()
                    os.fsync(f.fileno())
            os.replace(tmp, key)
        finally:
            tmp.unlink(missing_ok=True)


def s3_filesystem(
    endpoint_url: str | None = None, storage_options: dict[str, Any] | None = None
) -> Any:
    """Return an s3fs filesystem on the configured endpoint (AWS_ENDPOINT_URL[_S3])."""
    import s3fs

    options = dict(storage_options or {})
    endpoint = (
        endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    )
    if endpoint:
        options.setdefault("endpoint_url", endpoint)
    # Several processes write one bucket: a cached listing would hide their objects.
    options.setdefault("use_listings_cache", False)
    options.setdefault("skip_instance_cache", True)
    return s3fs.S3FileSystem(**options)


class S3BlobStore(BlobStore):
    """Blobs in an S3-compatible bucket under a prefix, through s3fs."""

    def __init__(
        self,
        url: str,
        *,
        endpoint_url: str | None = None,
        storage_options: dict[str, Any] | None = None,
    ) -> None:
        parsed = urlparse(url)
        if parsed.scheme != "s3" or not parsed.netloc:
            raise ConfigError(f"not an S3 URL (expected s3://bucket[/prefix]): {url!r}")
        self.bucket = parsed.netloc
        self.prefix = parsed.path.strip("/")
        self.url = f"s3://{self.bucket}/{self.prefix}".rstrip("/")
        self.fs = s3_filesystem(endpoint_url, storage_options)

    def url_for(self, ref: str) -> str:
        """Return the s3:// URL of the blob for this reference."""
        return "s3://" + self._key(_digest(ref))

    def _key(self, digest: str) -> str:
        return "/".join(p for p in (self.bucket, self.prefix, digest[:2], digest) if p)

    def _stored_size(self, key: str) -> int | None:
        try:
            return int(self.fs.info(key)["size"])
        except FileNotFoundError:
            return None

    def _read(self, key: str) -> bytes:
        return self.fs.cat_file(key)

    def _write(self, key: str, data: bytes) -> None:
        # One PUT is atomic on S3, and racing writers of one key write identical bytes.
        try:
            self.fs.pipe_file(key, data)
        except FileNotFoundError as exc:
            raise ConfigError(
                f"cannot write to {self.url}: does bucket {self.bucket!r} exist?"
            ) from exc


def open_blob_store(
    url: str | None = None,
    *,
    endpoint_url: str | None = None,
    storage_options: dict[str, Any] | None = None,
) -> BlobStore:
    """Open the blob store at a folder, file:// or s3:// URL (default: $SCALECUA_BLOBS)."""
    url = url or blob_store_url()
    scheme = urlparse(url).scheme
    if scheme == "s3":
        return S3BlobStore(url, endpoint_url=endpoint_url, storage_options=storage_options)
    if endpoint_url or storage_options:
        raise ConfigError(f"endpoint_url and storage_options apply to s3:// stores, not {url!r}")
    if scheme == "file":
        parsed = urlparse(url)
        if parsed.netloc not in ("", "localhost"):
            raise ConfigError(f"file:// URL with a remote host is not supported: {url!r}")
        return LocalBlobStore(unquote(parsed.path))
    if scheme == "":
        return LocalBlobStore(url)
    raise ConfigError(f"unsupported blob store URL {url!r}: use a folder, file:// or s3://")
