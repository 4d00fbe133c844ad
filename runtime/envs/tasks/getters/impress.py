"""Impress getters with OSWorld's names: media a slide of a presentation on the desktop uses.

`audio_in_slide` (the first audio file a slide refers to) and `background_image_in_slide`
(the picture filling a slide's background) read the .pptx from the desktop. Media embedded
in the file come out of it; media it only links to (`file://` targets) are fetched from the
desktop. Either lands in the evaluation's cache under the spec's `dest`; no slide, no such
media, or no presentation gives None.
"""

from __future__ import annotations

import asyncio
import io
import posixpath
import xml.etree.ElementTree as ET
import zipfile
from typing import Any
from urllib.parse import unquote, urlparse

from runtime.envs.tasks.getters.context import EvalContext, FetchedFile, Getter, dest_path

__all__ = ["GETTERS", "slide_media_target", "get_audio_in_slide", "get_background_image_in_slide"]

_P = "http://schemas.openxmlformats.org/presentationml/2006/main"
_A = "http://schemas.openxmlformats.org/drawingml/2006/main"
_R = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
_RELS = "http://schemas.openxmlformats.org/package/2006/relationships"


def _relationships(archive: zipfile.ZipFile, slide: int) -> list[dict[str, str]]:
    name = f"ppt/slides/_rels/slide{slide}.xml.rels"
    if name not in archive.namelist():
        return []
    root = ET.fromstring(archive.read(name))
    return [dict(rel.attrib) for rel in root.iter(f"{{{_RELS}}}Relationship")]


def _background_image_id(archive: zipfile.ZipFile, slide: int) -> str | None:
    """The relationship id of the picture in a slide's background properties, if any."""
    root = ET.fromstring(archive.read(f"ppt/slides/slide{slide}.xml"))
    for props in root.iter(f"{{{_P}}}bgPr"):
        for blip in props.iter(f"{{{_A}}}blip"):
            embed = blip.get(f"{{{_R}}}embed")
            if embed is not None:
                return embed
    return None


def slide_media_target(pptx: bytes, slide_index: int, kind: str) -> str | None:
    """Where slide `slide_index` (from 0) finds its media of `kind` ("audio" or "background"):
    a member of the .pptx (`ppt/media/...`) or a `file://` URL; None when it has none."""
    slide = slide_index + 1
    with zipfile.ZipFile(io.BytesIO(pptx)) as archive:
        if f"ppt/slides/slide{slide}.xml" not in archive.namelist():
            return None
        rels = _relationships(archive, slide)
        if kind == "background":
            wanted = _background_image_id(archive, slide)
            if wanted is None:
                return None
            found = [r for r in rels if "image" in r.get("Type", "") and r.get("Id") == wanted]
        else:
            found = [r for r in rels if "audio" in r.get("Type", "")]
    if not found:
        return None
    target = found[0].get("Target", "")
    if target.startswith("file://"):
        return target
    return posixpath.normpath(posixpath.join("ppt/slides", target))


async def _slide_media(ctx: EvalContext, config: dict[str, Any], kind: str) -> FetchedFile | None:
    pptx = await ctx.controller.get_file(config["ppt_file_path"])
    if pptx is None:
        return None
    target = await asyncio.to_thread(slide_media_target, pptx, int(config["slide_index"]), kind)
    if target is None:
        return None
    if target.startswith("file://"):
        data = await ctx.controller.get_file(unquote(urlparse(target).path))
    else:
        data = await asyncio.to_thread(_member, pptx, target)
    if data is None:
        return None
    local = dest_path(ctx, config.get("dest"), target)
    await asyncio.to_thread(local.write_bytes, data)
    return FetchedFile(local)


def _member(pptx: bytes, name: str) -> bytes | None:
    with zipfile.ZipFile(io.BytesIO(pptx)) as archive:
        return archive.read(name) if name in archive.namelist() else None


async def get_audio_in_slide(ctx: EvalContext, config: dict[str, Any]) -> FetchedFile | None:
    """The first audio file slide `slide_index` of the desktop's `ppt_file_path` refers to."""
    return await _slide_media(ctx, config, "audio")


async def get_background_image_in_slide(
    ctx: EvalContext, config: dict[str, Any]
) -> FetchedFile | None:
    """The picture filling the background of slide `slide_index` of `ppt_file_path`."""
    return await _slide_media(ctx, config, "background")


GETTERS: dict[str, Getter] = {
    "audio_in_slide": get_audio_in_slide,
    "background_image_in_slide": get_background_image_in_slide,
}
