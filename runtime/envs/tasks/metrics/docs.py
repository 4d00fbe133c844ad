"""Document metrics with OSWorld's names: what text files, Writer documents (.docx through
python-docx, .odt read directly), their tables and references, and e-books say.

How documents look (fonts, spacing, highlighting, images) is in `writer.py`.
"""

from __future__ import annotations

import difflib
import re
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path
from typing import Any

__all__ = [
    "METRICS",
    "check_highlighted_words",
    "check_no_duplicates",
    "compare_docx_files",
    "compare_docx_files_and_ignore_new_lines",
    "compare_docx_lines",
    "compare_docx_tables",
    "compare_epub",
    "compare_init_lines",
    "compare_references",
    "compare_text_file",
    "document_paragraphs",
]

_ODT_TEXT = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
_ODT_STYLE = "urn:oasis:names:tc:opendocument:xmlns:style:1.0"
_ODT_OFFICE = "urn:oasis:names:tc:opendocument:xmlns:office:1.0"
_ODT_FO = "urn:oasis:names:tc:opendocument:xmlns:xsl-fo-compatible:1.0"


def _normalise(text: str, ignore_blanks: bool, ignore_case: bool) -> str:
    if ignore_blanks:
        text = re.sub(r"\s+", " ", text).strip()
    return text.lower() if ignore_case else text


def compare_text_file(
    result: str | None, expected: str | None, ignore_blanks: bool = False, ignore_case: bool = False
) -> float:
    """1.0 when two text files hold the same text (optionally ignoring blanks or case)."""
    if result is None or expected is None or not Path(result).is_file():
        return 0.0
    a = Path(result).read_text(encoding="utf-8", errors="replace")
    b = Path(expected).read_text(encoding="utf-8", errors="replace")
    return float(
        _normalise(a, ignore_blanks, ignore_case) == _normalise(b, ignore_blanks, ignore_case)
    )


def _docx(path: str) -> Any:
    import docx

    return docx.Document(path)


def _odt_paragraphs(path: str) -> list[str]:
    """The text of every `text:p` of an .odt's content, as OSWorld's odfpy reading gives it:
    the paragraph's own text and its spans' own text (spaces, tabs and links left out)."""
    with zipfile.ZipFile(path) as archive:
        root = ET.fromstring(archive.read("content.xml"))
    span = f"{{{_ODT_TEXT}}}span"
    paragraphs = []
    for p in root.iter(f"{{{_ODT_TEXT}}}p"):
        parts = [p.text or ""]
        for child in p:
            if child.tag == span:
                parts.append(child.text or "")
                parts.extend(grandchild.tail or "" for grandchild in child)
            parts.append(child.tail or "")
        paragraphs.append("".join(parts))
    return paragraphs


def document_paragraphs(path: str) -> list[str] | None:
    """The body paragraph texts of a .docx or .odt (tables aside); None for another file type."""
    if path.endswith(".docx"):
        return [p.text for p in _docx(path).paragraphs]
    if path.endswith(".odt"):
        return _odt_paragraphs(path)
    return None


def compare_docx_files(result: str | None, expected: str | None, **options: Any) -> float:
    """1.0 when two Writer documents (both .docx or both .odt) hold the same text.

    OSWorld's options: `ignore_blanks` (default true: the paragraphs joined, runs of
    whitespace as one space), `ignore_case`, `ignore_order` (paragraphs sorted first) and
    `content_only` (the rapidfuzz ratio of the joined texts, a score in [0, 1]).
    """
    if not result or not expected or Path(result).suffix != Path(expected).suffix:
        return 0.0
    ours, theirs = document_paragraphs(result), document_paragraphs(expected)
    if ours is None or theirs is None:
        return 0.0
    case = bool(options.get("ignore_case", False))
    if options.get("ignore_order", False):
        ours, theirs = sorted(ours), sorted(theirs)
    if options.get("content_only", False):
        from rapidfuzz import fuzz

        a, b = _normalise("\n".join(ours), True, case), _normalise("\n".join(theirs), True, case)
        return fuzz.ratio(a, b) / 100.0
    if options.get("ignore_blanks", True):
        a, b = _normalise("\n".join(ours), True, case), _normalise("\n".join(theirs), True, case)
        return float(a == b)
    if len(ours) != len(theirs):
        return 0.0
    return float(
        all(
            _normalise(a, False, case) == _normalise(b, False, case)
            for a, b in zip(ours, theirs, strict=True)
        )
    )


def compare_docx_files_and_ignore_new_lines(
    result: str | None, expected: str | None, ignore_blanks: bool = True, **_: Any
) -> float:
    """1.0 when two .docx hold the same text once empty paragraphs are dropped."""
    if not result or not expected or not (result.endswith(".docx") and expected.endswith(".docx")):
        return 0.0
    ours = [p.text for p in _docx(result).paragraphs if p.text != ""]
    theirs = [p.text for p in _docx(expected).paragraphs if p.text != ""]
    if ignore_blanks:
        return float(
            _normalise("\n".join(ours), True, False) == _normalise("\n".join(theirs), True, False)
        )
    return float(ours == theirs)


def compare_init_lines(result: str | None, expected: str | None) -> float:
    """1.0 when the paragraphs two .docx have in common (the shorter's count) are equal."""
    if not result or not expected:
        return 0.0
    ours = [p.text for p in _docx(result).paragraphs]
    theirs = [p.text for p in _docx(expected).paragraphs]
    return float(all(a == b for a, b in zip(ours, theirs, strict=False)))


def compare_docx_lines(result: str | None, expected: str | None) -> float:
    """1.0 when two .docx hold the same set of non-empty lines (order and repeats ignored)."""
    if not result or not expected:
        return 0.0
    ours = {p.text.strip() for p in _docx(result).paragraphs if p.text.strip()}
    theirs = {p.text.strip() for p in _docx(expected).paragraphs if p.text.strip()}
    return float(ours == theirs)


def compare_docx_tables(result: str | None, expected: str | None) -> float:
    """1.0 when two .docx have as many tables, each of the same shape with the same cell texts."""
    if not result or not expected:
        return 0.0
    ours, theirs = _docx(result).tables, _docx(expected).tables
    if len(ours) != len(theirs):
        return 0.0
    for a, b in zip(ours, theirs, strict=True):
        rows, columns = len(a.rows), len(a.columns)
        if (rows, columns) != (len(b.rows), len(b.columns)):
            return 0.0
        for i in range(rows):
            for j in range(columns):
                if a.cell(i, j).text.strip() != b.cell(i, j).text.strip():
                    return 0.0
    return 1.0


def compare_references(
    result: str | None,
    expected: str | None,
    reference_indicator: str = "References",
    reference_base_result: float = 0.5,
    **_: Any,
) -> float:
    """How closely the reference lists (the paragraphs after a `reference_indicator` heading)
    of two .docx agree: their mean rapidfuzz ratio, rescaled so `reference_base_result` is 0."""
    from rapidfuzz import fuzz

    if not result or not expected or not (result.endswith(".docx") and expected.endswith(".docx")):
        return 0.0
    ours = [p.text for p in _docx(result).paragraphs]
    theirs = [p.text for p in _docx(expected).paragraphs]
    if reference_indicator not in ours and reference_indicator not in theirs:
        return 1.0
    if reference_indicator not in ours or reference_indicator not in theirs:
        return 0.0
    refs_a = [p for p in ours[ours.index(reference_indicator) + 1 :] if p.strip()]
    refs_b = [p for p in theirs[theirs.index(reference_indicator) + 1 :] if p.strip()]
    if len(refs_a) != len(refs_b):
        return 0.0
    if not refs_a:
        return 1.0
    mean = sum(fuzz.ratio(a, b) / 100.0 for a, b in zip(refs_a, refs_b, strict=True)) / len(refs_a)
    if mean < reference_base_result:
        return 0.0
    if reference_base_result >= 1.0:
        return 1.0
    return (mean - reference_base_result) / (1.0 - reference_base_result)


def _train_records(path: str) -> tuple[set[str], int, bool]:
    """Train ids of the `time, train_id, station, platform` lines of a .docx, the count of
    first sightings, and whether an id came twice."""
    ids: set[str] = set()
    repeated = False
    for paragraph in _docx(path).paragraphs:
        parts = paragraph.text.split(",")
        if len(parts) == 4:
            train = parts[1].strip()
            repeated = repeated or train in ids
            ids.add(train)
    return ids, len(ids), repeated


def check_no_duplicates(initial: str | None, processed: str | None) -> float:
    """1.0 when the processed train schedule lists each train of the initial one exactly once."""
    if not initial or not processed:
        return 0.0
    ids_before, count_before, _ = _train_records(initial)
    ids_after, count_after, repeated = _train_records(processed)
    return float(not repeated and ids_after == ids_before and count_after == count_before)


def check_highlighted_words(result: str | None, expected: str | None) -> float:
    """1.0 when an .odt holds the expected text and no span of it is highlighted yellow."""
    if not compare_docx_files(result, expected):
        return 0.0
    assert result is not None  # compare_docx_files scored 0 otherwise
    with zipfile.ZipFile(result) as archive:
        root = ET.fromstring(archive.read("content.xml"))
    yellow = set()
    automatic = root.find(f"{{{_ODT_OFFICE}}}automatic-styles")
    for style in automatic if automatic is not None else []:
        if any(
            (props.get(f"{{{_ODT_FO}}}background-color") or "").lower() == "#ffff00"
            for props in style
        ):
            yellow.add(style.get(f"{{{_ODT_STYLE}}}name"))
    spans = root.iter(f"{{{_ODT_TEXT}}}span")
    return float(not any(s.get(f"{{{_ODT_TEXT}}}style-name") in yellow for s in spans))


def _epub_parts(path: str) -> list[tuple[str, list[str]]] | None:
    """An e-book's comparable parts as (name, lines): its table of contents without nav
    points, its package file without identifiers, and each HTML page pretty-printed.
    None when the file is no zip archive."""
    import lxml.html

    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError):
        return None
    with archive:
        parts = [
            ("toc.ncx", [x for x in _lines(archive, "toc.ncx") if "navPoint" not in x]),
            (
                "content.opf",
                [x for x in _lines(archive, "content.opf") if "dc:identifier" not in x],
            ),
        ]
        for name in archive.namelist():
            if name.endswith(".html"):
                flat = archive.read(name).decode().replace("\n", "").replace("\r", "")
                tree = lxml.html.fromstring(flat.encode())
                pretty = lxml.html.tostring(tree, pretty_print=True, encoding="unicode")
                parts.append((name, pretty.splitlines()))
    return sorted(parts)


def _lines(archive: zipfile.ZipFile, name: str) -> list[str]:
    return archive.read(name).decode().splitlines()


def compare_epub(result: str | None, expected: str | None) -> float:
    """The product over an e-book's parts (pages, contents, package) of their line similarity."""
    if not result or not expected:
        return 0.0
    ours, theirs = _epub_parts(result), _epub_parts(expected)
    if ours is None or theirs is None:
        return 0.0
    score = 1.0
    for (_, a), (_, b) in zip(ours, theirs, strict=False):
        score *= difflib.SequenceMatcher(a=a, b=b).ratio()
    return score


METRICS = {
    "compare_text_file": compare_text_file,
    "compare_docx_files": compare_docx_files,
    "compare_docx_files_and_ignore_new_lines": compare_docx_files_and_ignore_new_lines,
    "compare_init_lines": compare_init_lines,
    "compare_docx_lines": compare_docx_lines,
    "compare_docx_tables": compare_docx_tables,
    "compare_references": compare_references,
    "check_no_duplicates": check_no_duplicates,
    "check_highlighted_words": check_highlighted_words,
    "compare_epub": compare_epub,
}
