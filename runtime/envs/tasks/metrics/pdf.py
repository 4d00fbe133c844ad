"""PDF metrics with OSWorld's names: page counts, text similarity and page images.

PDFium (pypdfium2) reads and renders the files: OSWorld uses PyMuPDF, whose licence (AGPL)
does not fit this project; both sides of a comparison go through the same reader, so a
score compares the documents, not the readers. PDFium is not thread-safe and metrics run
in worker threads, so every use holds one lock.
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Callable
from typing import Any

from runtime.errors import TaskError

__all__ = ["METRICS", "check_pdf_pages", "compare_pdf_images", "compare_pdfs", "pdf_text"]

_PDFIUM = threading.Lock()
_RELATIONS: dict[str, Callable[[Any, Any], bool]] = {
    "lt": operator.lt,
    "le": operator.le,
    "eq": operator.eq,
    "ne": operator.ne,
    "ge": operator.ge,
    "gt": operator.gt,
}


def _page_count(path: str) -> int:
    import pypdfium2 as pdfium

    with _PDFIUM:
        document = pdfium.PdfDocument(path)
        try:
            return len(document)
        finally:
            document.close()


def check_pdf_pages(pdf: str | None, rules: dict[str, Any]) -> float:
    """1.0 when the PDF's page count stands in `relation` (lt, le, eq, ne, ge, gt) to `ref_value`."""
    relation = _RELATIONS.get(str(rules["relation"]))
    if relation is None:
        raise TaskError(f"check_pdf_pages: relation must be one of {sorted(_RELATIONS)}")
    if not pdf:
        return 0.0
    return float(relation(_page_count(pdf), rules["ref_value"]))


def pdf_text(path: str) -> str:
    """The text of every page of a PDF, pages joined, lines separated by newlines."""
    import pypdfium2 as pdfium

    with _PDFIUM:
        document = pdfium.PdfDocument(path)
        try:
            pages = []
            for page in document:
                textpage = page.get_textpage()
                pages.append(textpage.get_text_range().replace("\r\n", "\n"))
                textpage.close()
                page.close()
        finally:
            document.close()
    return "\n".join(pages).strip()


def compare_pdfs(result: str | list[str] | None, expected: str | list[str] | None) -> float:
    """Mean text similarity (rapidfuzz ratio) of PDFs paired in order; an unreadable pair adds 0."""
    from rapidfuzz import fuzz

    results = result if isinstance(result, list) else [result]
    expecteds = expected if isinstance(expected, list) else [expected]
    if not expecteds:
        return 0.0
    total = 0.0
    for ours, theirs in zip(results, expecteds, strict=False):
        if not ours or not theirs:
            continue
        try:
            total += fuzz.ratio(pdf_text(ours), pdf_text(theirs)) / 100.0
        except Exception:  # pdfium raises its own errors: a file that is no PDF scores 0
            continue
    return total / len(expecteds)


def _page_images(path: str) -> list[bytes]:
    """Each page rendered at 72 dpi as raw RGB bytes (with its size, so sizes differ too)."""
    import pypdfium2 as pdfium

    images = []
    with _PDFIUM:
        document = pdfium.PdfDocument(path)
        try:
            for page in document:
                image = page.render(scale=1).to_pil().convert("RGB")
                images.append(repr(image.size).encode() + image.tobytes())
                page.close()
        finally:
            document.close()
    return images


def compare_pdf_images(result: str | None, expected: str | None, **_: Any) -> float:
    """1.0 when two PDFs have as many pages and every page renders to the same pixels."""
    if not result or not expected:
        return 0.0
    return float(_page_images(result) == _page_images(expected))


METRICS = {
    "check_pdf_pages": check_pdf_pages,
    "compare_pdfs": compare_pdfs,
    "compare_pdf_images": compare_pdf_images,
}
