"""The file cache: the bytes behind a URL, stored once by content, with an index by URL.

    cache = open_file_cache()                 # $SCALECUA_FILES, else $SCALECUA_HOME/files
    cache.put(url, data, how="added")         # -> CachedFile(url, sha256, size, fetched_at, ...)
    cache.get(url)                            # the bytes, checked against their sha256; or None

Contents live in a blob store (runtime/blobstore.py) under `<root>/objects`, so a file two
tasks share is stored once and every read is hash-checked; the index holds one small JSON
object per URL at `<root>/urls/<two hex>/<sha256 of the URL>.json` ({url, sha256, size,
fetched_at, how, final_url}). One object per URL needs no lock: writers replace it
atomically (a rename in a folder, one PUT on S3), and the content is written before its
index entry, so an entry never names missing bytes. The root is a folder (`file://…` too)
or `s3://bucket/prefix` for a cluster, like the blob store.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import logging
import os
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from runtime.blobstore import BlobStore, LocalBlobStore, S3BlobStore, s3_filesystem
from runtime.config import file_cache_url
from runtime.errors import BlobCorrupt, BlobNotFound, ConfigError

__all__ = ["CachedFile", "FileCache", "open_file_cache"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CachedFile:
    """One URL's entry in the index: which content it names and how it got there."""

    url: str
    sha256: str  # 64 hex digits of the content
    size: int  # bytes
    fetched_at: float  # Unix seconds when it was stored
    how: str = "fetched"  # "fetched" (over http(s)) or "added" (seeded by hand)
    final_url: str = ""  # where the last redirect led, when fetched

    @property
    def ref(self) -> str:
        """The content's blob reference ("sha256:<hex>")."""
        return f"sha256:{self.sha256}"


class FileCache:
    """URL -> bytes, content-addressed in a blob store, indexed by URL (see the module doc)."""

    def __init__(self, url: str | None = None, *, endpoint_url: str | None = None) -> None:
        url = url or file_cache_url()
        parsed = urlparse(url)
        if parsed.scheme == "s3":
            if not parsed.netloc:
                raise ConfigError(f"not an S3 URL (expected s3://bucket[/prefix]): {url!r}")
            self.url = url.rstrip("/")
            self.objects: BlobStore = S3BlobStore(f"{self.url}/objects", endpoint_url=endpoint_url)
            self._index: _Index = _S3Index(f"{self.url}/urls", endpoint_url)
        elif parsed.scheme in ("", "file"):
            if parsed.scheme == "file" and parsed.netloc not in ("", "localhost"):
                raise ConfigError(f"file:// URL with a remote host is not supported: {url!r}")
            root = Path(unquote(parsed.path) if parsed.scheme else url).expanduser().resolve()
            self.url = str(root)
            self.objects = LocalBlobStore(root / "objects")
            self._index = _LocalIndex(root / "urls")
        else:
            raise ConfigError(f"unsupported file cache URL {url!r}: use a folder, file:// or s3://")

    def entry(self, url: str) -> CachedFile | None:
        """The index entry of a URL, or None when it is not cached."""
        raw = self._index.read(_url_digest(url))
        if raw is None:
            return None
        try:
            return CachedFile(**json.loads(raw))
        except (ValueError, TypeError) as exc:
            log.warning("file cache %s: unreadable index entry for %s (%s)", self.url, url, exc)
            return None

    def has(self, url: str) -> bool:
        """Whether the cache holds the bytes of a URL (its entry and its content)."""
        entry = self.entry(url)
        return entry is not None and self.objects.exists(entry.ref)

    def get(self, url: str) -> bytes | None:
        """The bytes of a URL, checked against their sha256; None when missing or damaged."""
        entry = self.entry(url)
        if entry is None:
            return None
        try:
            return self.objects.get(entry.ref)
        except BlobNotFound:
            return None
        except BlobCorrupt as exc:  # treated as missing, so it is fetched or seeded again
            log.warning("file cache %s: %s", self.url, exc)
            return None

    def put(self, url: str, data: bytes, *, how: str = "added", final_url: str = "") -> CachedFile:
        """Store the bytes of a URL (replacing what it named before) and return its entry."""
        ref = self.objects.put(data, repair=True)  # seeding again mends a damaged copy
        entry = CachedFile(url, ref.removeprefix("sha256:"), len(data), time.time(), how, final_url)
        self._index.write(_url_digest(url), json.dumps(asdict(entry)).encode())
        return entry

    async def aget(self, url: str) -> bytes | None:
        """`get` without blocking the event loop."""
        return await asyncio.to_thread(self.get, url)

    async def aput(
        self, url: str, data: bytes, *, how: str = "added", final_url: str = ""
    ) -> CachedFile:
        """`put` without blocking the event loop."""
        return await asyncio.to_thread(self.put, url, data, how=how, final_url=final_url)

    async def ahas(self, url: str) -> bool:
        """`has` without blocking the event loop."""
        return await asyncio.to_thread(self.has, url)

    def __repr__(self) -> str:
        return f"FileCache({self.url!r})"


@functools.lru_cache(maxsize=8)
def _opened(url: str) -> FileCache:
    return FileCache(url)


def open_file_cache(url: str | None = None) -> FileCache:
    """The file cache at a folder, file:// or s3:// URL (default: $SCALECUA_FILES), opened once."""
    return _opened(url or file_cache_url())


def _url_digest(url: str) -> str:
    return hashlib.sha256(url.encode()).hexdigest()


class _Index:
    """Small objects named by a URL's digest: read one, replace one atomically."""

    def read(self, digest: str) -> bytes | None:
        raise NotImplementedError

    def write(self, digest: str, data: bytes) -> None:
        raise NotImplementedError


class _LocalIndex(_Index):
    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def _path(self, digest: str) -> Path:
        return self.root / digest[:2] / f"{digest}.json"

    def read(self, digest: str) -> bytes | None:
        try:
            return self._path(digest).read_bytes()
        except FileNotFoundError:
            return None

    def write(self, digest: str, data: bytes) -> None:
        path = self._path(digest)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        try:
            tmp.write_bytes(data)
            os.replace(tmp, path)  # readers see the old entry or the new one, never half
        finally:
            tmp.unlink(missing_ok=True)


class _S3Index(_Index):
    def __init__(self, url: str, endpoint_url: str | None) -> None:
        parsed = urlparse(url)
        self.base = f"{parsed.netloc}/{parsed.path.strip('/')}".rstrip("/")
        self.fs: Any = s3_filesystem(endpoint_url)

    def _key(self, digest: str) -> str:
        return f"{self.base}/{digest[:2]}/{digest}.json"

    def read(self, digest: str) -> bytes | None:
        try:
            return self.fs.cat_file(self._key(digest))
        except FileNotFoundError:
            return None

    def write(self, digest: str, data: bytes) -> None:
        self.fs.pipe_file(self._key(digest), data)  # one PUT: atomic
