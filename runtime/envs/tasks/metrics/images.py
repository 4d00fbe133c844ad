"""Image metrics with OSWorld's names (its GIMP tasks, and the image checks of VLC, Impress
and multi-app tasks): structural similarity, brightness, saturation, contrast, palettes,
mirroring, sizes, and where a shape or text sits.

Every metric takes the fetched image paths (`result`, then `expected` or a rule) and
returns a float in [0, 1]; a missing file (None) scores 0.

Structural similarity is computed as OSWorld computes it, so that scores agree: SSIM
(scikit-image, 7-pixel uniform window) over the images' pixel arrays with the last axis
taken as channels. For an RGB(A) image that is the usual per-channel SSIM, averaged; for
a single-band image (grayscale, one HSV band, palette indices) the last axis is the
width, so each pixel column is compared as a 1-D signal and the columns averaged.

Two checks follow what OSWorld's code means rather than what it does, where the latter
could not tell a solved task from an untouched one (both noted at the function).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from PIL import Image, ImageChops, ImageStat

__all__ = [
    "METRICS",
    "SIMILAR",
    "check_brightness_decrease_and_structure_sim",
    "check_contrast_increase_and_structure_sim",
    "check_file_exists_and_structure_sim",
    "check_green_background",
    "check_image_file_size",
    "check_image_mirror",
    "check_image_size",
    "check_palette_and_structure_sim",
    "check_saturation_increase_and_structure_sim",
    "check_structure_sim",
    "check_structure_sim_resized",
    "check_textbox_on_leftside",
    "check_triangle_position",
    "compare_image_list",
    "compare_images",
    "ssim",
]

SIMILAR = 0.9  # OSWorld's SSIM threshold for "the same picture"


def _open(path: str) -> Image.Image:
    """The image at path, decoded now (so the file is closed at once)."""
    with Image.open(path) as image:
        image.load()
        return image


def ssim(a: Image.Image | np.ndarray, b: Image.Image | np.ndarray) -> float:
    """OSWorld's structural similarity of two same-shaped images (last axis as channels)."""
    from skimage.metrics import structural_similarity

    return float(structural_similarity(np.asarray(a), np.asarray(b), channel_axis=-1))


def _similar(a: Image.Image, b: Image.Image, threshold: float = SIMILAR) -> bool:
    return ssim(a, b) >= threshold


def compare_images(result: str | None, expected: str | None, **options: Any) -> float:
    """The SSIM of two images in grayscale, both resized to the smaller size (a score, not 0/1)."""
    from skimage.metrics import structural_similarity

    if not result or not expected:
        return 0.0
    a, b = _open(result).convert("L"), _open(expected).convert("L")
    size = min(a.size, b.size)  # as OSWorld: the smaller (width, height) tuple, width first
    a = a.resize(size, Image.Resampling.LANCZOS)
    b = b.resize(size, Image.Resampling.LANCZOS)
    return float(structural_similarity(np.asarray(a), np.asarray(b)))


def compare_image_list(result: Any, expected: Any) -> float:
    """1.0 when every image of the result list is pixel-identical to its expected image."""
    results = result if isinstance(result, list) else [result]
    expecteds = expected if isinstance(expected, list) else [expected]
    for got, want in zip(results, expecteds, strict=False):  # as OSWorld: up to the shorter
        if not got or not want:
            return 0.0
        if ImageChops.difference(_open(got), _open(want)).getbbox():
            return 0.0
    return 1.0


def check_structure_sim(result: str | None, expected: str | None) -> float:
    """1.0 when the two images are structurally the same (SSIM >= 0.9)."""
    if result is None or expected is None:
        return 0.0
    return float(_similar(_open(result), _open(expected)))


def check_structure_sim_resized(result: str | None, expected: str | None) -> float:
    """1.0 when the result, resized to the expected image's size, is structurally the same."""
    if result is None or expected is None:
        return 0.0
    target = _open(expected)
    return float(_similar(_open(result).resize(target.size), target))


def check_file_exists_and_structure_sim(result: str | None, expected: str | None) -> float:
    """1.0 when the result file exists and is structurally the same as the expected image."""
    if result is None or expected is None or not os.path.isfile(result):
        return 0.0
    return float(_similar(_open(result), _open(expected)))


def _brightness(image: Image.Image) -> float:
    return float(ImageStat.Stat(image.convert("L")).mean[0])


def _at_brightness(image: Image.Image, target: float) -> Image.Image:
    """The image with every band scaled so its mean brightness becomes `target`."""
    factor = target / _brightness(image)
    return image.point(lambda x: min(255, max(0, int(x * factor))))


def check_brightness_decrease_and_structure_sim(result: str | None, expected: str | None) -> float:
    """1.0 when the result is darker than the original and the same picture once both are
    brought to one brightness (mean squared difference below 0.03)."""
    if result is None or expected is None:
        return 0.0
    got, original = _open(result), _open(expected)
    darker = _brightness(original) > _brightness(got)
    a = np.asarray(_at_brightness(got, 128), dtype=np.float32) / 255
    b = np.asarray(_at_brightness(original, 128), dtype=np.float32) / 255
    return float(darker and float(np.mean((a - b) ** 2)) < 0.03)


def check_saturation_increase_and_structure_sim(result: str | None, expected: str | None) -> float:
    """1.0 when the result is more saturated than the original and keeps its hue and value
    structure (SSIM >= 0.9 on the H and on the V band)."""
    if result is None or expected is None:
        return 0.0
    got, original = _open(result).convert("HSV"), _open(expected).convert("HSV")
    h1, s1, v1 = got.split()
    h2, s2, v2 = original.split()
    more_saturated = float(np.mean(np.asarray(s1))) > float(np.mean(np.asarray(s2)))
    return float(more_saturated and _similar(h1, h2) and _similar(v1, v2))


def check_contrast_increase_and_structure_sim(result: str | None, expected: str | None) -> float:
    """1.0 when the result has more contrast (pixel standard deviation) than the original
    and is structurally close to it (SSIM >= 0.65)."""
    if result is None or expected is None:
        return 0.0
    got, original = _open(result), _open(expected)
    contrast = float(np.std(np.asarray(got, dtype=np.float32)))
    more_contrast = contrast > float(np.std(np.asarray(original, dtype=np.float32)))
    return float(more_contrast and _similar(got, original, 0.65))


def check_palette_and_structure_sim(result: str | None, expected: str | None) -> float:
    """1.0 when the result is a palette (indexed) image and, in RGB, the same picture."""
    if result is None or expected is None:
        return 0.0
    got = _open(result)
    indexed = got.mode == "P"
    return float(indexed and _similar(got.convert("RGB"), _open(expected)))


def check_image_mirror(result: str | None, expected: str | None) -> float:
    """1.0 when the result is the original flipped left to right (SSIM >= 0.99)."""
    if result is None or expected is None:
        return 0.0
    original = _open(expected).transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return float(_similar(original, _open(result), 0.99))


def check_green_background(result: str | None, expected: str | None) -> float:
    """1.0 when every pixel that is not black in the original is green in the result
    (its green above its red and its blue).

    OSWorld walks the pixels with x and y swapped, which covers every pixel of a square
    image and fails on others; this checks every pixel of any shape.
    """
    if result is None or expected is None:
        return 0.0
    got = np.asarray(_open(result).convert("RGB")).astype(np.int16)
    original = np.asarray(_open(expected).convert("RGB"))
    background = np.any(original != 0, axis=-1)
    r, g, b = got[..., 0], got[..., 1], got[..., 2]
    green = (g > r) & (g > b)
    return float(bool(np.all(green[background])))


def check_triangle_position(result: str | None) -> float:
    """1.0 when the shape (the second most common colour, the background being the most
    common) has its centroid within 5% of the image's centre on both axes.

    OSWorld's code takes the second *least* common colour, which on a two-colour image is
    the background and puts it in the middle whatever the agent did; this takes the colour
    its comments describe.
    """
    if result is None:
        return 0.0
    pixels = np.asarray(_open(result))
    if pixels.ndim != 3:
        raise ValueError(f"expected a colour image, got a {pixels.ndim}-D array")
    colours, counts = np.unique(pixels.reshape(-1, pixels.shape[2]), axis=0, return_counts=True)
    if len(colours) < 2:
        return 0.0
    shape_colour = colours[np.argsort(counts)[-2]]
    where = np.argwhere(np.all(pixels == shape_colour, axis=-1))
    size = np.array(pixels.shape[:2], dtype=float)
    off_centre = np.abs(where.mean(axis=0) - size / 2)
    return float(bool(np.all(off_centre < 0.05 * size)))


def check_textbox_on_leftside(result: str | None) -> float:
    """1.0 when the leftmost dark pixel (gray < 128, the text) is in the left 5% of the image."""
    if result is None:
        return 0.0
    image = _open(result)
    dark_columns = np.flatnonzero(np.any(np.asarray(image.convert("L")) < 128, axis=0))
    leftmost = int(dark_columns[0]) if dark_columns.size else image.width
    return float(leftmost < image.width * 0.05)


def check_image_size(result: str | None, rule: dict[str, Any]) -> float:
    """1.0 when the image has the rule's `width` and/or `height` in pixels."""
    if result is None:
        return 0.0
    width, height = _open(result).size
    ok_w = rule.get("width") is None or width == rule["width"]
    ok_h = rule.get("height") is None or height == rule["height"]
    return float(ok_w and ok_h)


def check_image_file_size(result: str | None, rule: dict[str, Any]) -> float:
    """1.0 when the file is smaller than the rule's `max_size` bytes."""
    if result is None:
        return 0.0
    return float(os.path.getsize(result) < rule["max_size"])


METRICS = {
    "compare_images": compare_images,
    "compare_image_list": compare_image_list,
    "check_structure_sim": check_structure_sim,
    "check_structure_sim_resized": check_structure_sim_resized,
    "check_file_exists_and_structure_sim": check_file_exists_and_structure_sim,
    "check_brightness_decrease_and_structure_sim": check_brightness_decrease_and_structure_sim,
    "check_saturation_increase_and_structure_sim": check_saturation_increase_and_structure_sim,
    "check_contrast_increase_and_structure_sim": check_contrast_increase_and_structure_sim,
    "check_palette_and_structure_sim": check_palette_and_structure_sim,
    "check_image_mirror": check_image_mirror,
    "check_green_background": check_green_background,
    "check_triangle_position": check_triangle_position,
    "check_textbox_on_leftside": check_textbox_on_leftside,
    "check_image_size": check_image_size,
    "check_image_file_size": check_image_file_size,
}
