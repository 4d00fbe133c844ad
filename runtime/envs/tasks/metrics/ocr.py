"""OSWorld's OCR metric, `compare_image_text`, read with Tesseract: Debian's `tesseract-ocr`
and its English model `tesseract-ocr-eng` (infra/install.sh), nothing downloaded at run time.

OSWorld reads the image with EasyOCR and scores 1.0 when the rule's text is a substring of
the readings joined by blanks. Its one task (multi_apps 02ce9a50: run `ls` in a terminal and
save a screenshot) expects `" Ls"`, evidently how EasyOCR read the command `ls` in the Ubuntu
VM's terminal font (nobody types `Ls`). On this project's terminals EasyOCR's own models read
`ls`, `1s` or nothing there, never `Ls`, and Tesseract reads `ls` or `1s`; so the text is
matched after folding letter case and the digit 1 into a lower-case l on both sides: what the
task means (the command is in the picture), not one engine's spelling of it. Blanks stay
significant, as in OSWorld (`" Ls"` needs a word boundary before the command).

Screen text is small for Tesseract (trained on print at about 300 dpi), so an image is read
at twice its size, as one block of text (`--psm 6`), one thread per reading.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from PIL import Image

from runtime.errors import TaskError

__all__ = ["METRICS", "compare_image_text", "ocr_fold", "ocr_unavailable", "read_image_text"]

_SCALE = 2  # screen text read at twice its size
_SCALE_UP_TO = 4_000_000  # pixels (a 1920x1080 screen has 2.1 M); larger ones are read as they are
_TIMEOUT = 120.0  # seconds for one reading
_FOLD = str.maketrans({"1": "l"})  # Tesseract's usual reading of a terminal's l


def ocr_unavailable() -> str | None:
    """Why `compare_image_text` cannot score on this host, or None when Tesseract is here."""
    if shutil.which("tesseract"):
        return None
    return (
        "compare_image_text reads the image with Tesseract, which is not installed here "
        "(Debian: tesseract-ocr tesseract-ocr-eng; infra/install.sh installs them)"
    )


def read_image_text(path: str | Path) -> str:
    """The text Tesseract reads in an image, its words joined by single blanks."""
    return _tesseract(_load(path))


def _load(path: str | Path) -> Image.Image:
    """The image as RGB pixels, at twice its size unless it is already large."""
    with Image.open(path) as opened:
        image = opened.convert("RGB")
    if image.width * image.height <= _SCALE_UP_TO:
        image = image.resize(
            (image.width * _SCALE, image.height * _SCALE), Image.Resampling.LANCZOS
        )
    return image


def _tesseract(image: Image.Image) -> str:
    tesseract = shutil.which("tesseract")
    if tesseract is None:
        raise TaskError(ocr_unavailable() or "tesseract not found")
    pixels = io.BytesIO()
    image.save(pixels, "PPM")  # decoded here: Tesseract parses only this trivial format
    done = subprocess.run(
        [tesseract, "stdin", "stdout", "-l", "eng", "--psm", "6"],
        input=pixels.getvalue(),
        capture_output=True,
        timeout=_TIMEOUT,
        env={**os.environ, "OMP_THREAD_LIMIT": "1"},
        check=False,
    )
    if done.returncode != 0:
        error = done.stderr.decode(errors="replace").strip()[-500:]
        raise TaskError(f"tesseract failed (exit {done.returncode}): {error}")
    return " ".join(done.stdout.decode(errors="replace").split())


def ocr_fold(text: str) -> str:
    """Text with the differences OCR engines make in reading it folded away (case, 1 for l)."""
    return text.lower().translate(_FOLD)


def compare_image_text(image: str | None, rule: dict[str, Any]) -> float:
    """1.0 when the rule's `text` is read in the image (OCR; case and 1/l folded), else 0.0."""
    if rule.get("type") != "text":
        raise TaskError(f"compare_image_text: unknown rule type {rule.get('type')!r}")
    if not image or not Path(image).is_file():
        return 0.0
    try:
        pixels = _load(image)
    except (OSError, ValueError, Image.DecompressionBombError):
        return 0.0  # not an image PIL can read: the agent's output, scored 0
    return float(ocr_fold(str(rule["text"])) in ocr_fold(_tesseract(pixels)))


METRICS = {"compare_image_text": compare_image_text}
