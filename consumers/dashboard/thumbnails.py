"""The page's screenshots: `/blob/sha256:...?w=320`, a blob from the blob store, shrunk to
`w` pixels wide as JPEG (w=0: the original). Blobs are content-addressed, so every answer
is cached forever; shrunk ones are also kept in memory, newest first, within a byte budget.
"""

from __future__ import annotations

import asyncio
import io
import re
from collections import OrderedDict

from PIL import Image, UnidentifiedImageError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from runtime.blobstore import BlobStore
from runtime.errors import BlobCorrupt, BlobNotFound

__all__ = ["thumbnail_routes"]

_REF = re.compile(r"sha256:[0-9a-f]{64}")
_IMMUTABLE = "public, max-age=31536000, immutable"  # a blob's bytes never change
_THUMB_CACHE_BYTES = 32 << 20


class _Thumbnails:
    """Shrunk screenshots, newest kept within a byte budget."""

    def __init__(self, budget: int = _THUMB_CACHE_BYTES) -> None:
        self.budget = budget
        self._items: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        self._bytes = 0

    def get(self, key: tuple[str, int]) -> bytes | None:
        data = self._items.get(key)
        if data is not None:
            self._items.move_to_end(key)
        return data

    def put(self, key: tuple[str, int], data: bytes) -> None:
        self._items[key] = data
        self._bytes += len(data)
        while self._bytes > self.budget and len(self._items) > 1:
            _, old = self._items.popitem(last=False)
            self._bytes -= len(old)


def _thumbnail(data: bytes, width: int) -> bytes:
    """Return an image shrunk to `width` pixels wide (never enlarged) as JPEG."""
    with Image.open(io.BytesIO(data)) as image:
        image = image.convert("RGB")
        if image.width > width:
            height = max(1, round(image.height * width / image.width))
            image = image.resize((width, height), Image.Resampling.LANCZOS)
        out = io.BytesIO()
        image.save(out, "JPEG", quality=82, optimize=True)
        return out.getvalue()


def _image_type(data: bytes) -> str | None:
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def thumbnail_routes(blobs: BlobStore | None) -> list[Route]:
    """The `/blob/{ref}` route over a blob store (None: every blob is not found)."""
    thumbs = _Thumbnails()

    async def blob(request: Request) -> Response:
        ref = request.path_params["ref"]
        if not _REF.fullmatch(ref):
            return Response("not a blob reference", status_code=400, media_type="text/plain")
        try:
            width = int(request.query_params.get("w", "0"))
        except ValueError:
            width = -1
        if width != 0 and not 32 <= width <= 1920:
            return Response("w: 0 (original) or 32..1920", status_code=400, media_type="text/plain")
        etag = f'"{ref[7:]}-{width}"'
        headers = {"Cache-Control": _IMMUTABLE, "ETag": etag, "X-Content-Type-Options": "nosniff"}
        if request.headers.get("if-none-match") == etag:
            return Response(status_code=304, headers=headers)
        if blobs is None:
            return Response("no blob store", status_code=404, media_type="text/plain")
        cached = thumbs.get((ref, width)) if width else None
        if cached is not None:
            return Response(cached, media_type="image/jpeg", headers=headers)
        return await _answer(blobs, thumbs, ref, width, headers)

    return [Route("/blob/{ref}", blob)]


async def _answer(
    blobs: BlobStore, thumbs: _Thumbnails, ref: str, width: int, headers: dict[str, str]
) -> Response:
    """A blob not cached here: the original image, or shrunk (and then cached)."""
    try:
        data = await blobs.aget(ref)
    except BlobNotFound:
        return Response(f"no blob {ref}", status_code=404, media_type="text/plain")
    except BlobCorrupt as exc:
        return Response(str(exc), status_code=502, media_type="text/plain")
    kind = _image_type(data)
    if kind is None:
        return Response("not an image", status_code=415, media_type="text/plain")
    if not width:
        return Response(data, media_type=kind, headers=headers)
    try:
        small = await asyncio.to_thread(_thumbnail, data, width)
    except (UnidentifiedImageError, OSError, Image.DecompressionBombError) as exc:
        return Response(f"unreadable image: {exc}", status_code=415, media_type="text/plain")
    thumbs.put((ref, width), small)
    return Response(small, media_type="image/jpeg", headers=headers)
