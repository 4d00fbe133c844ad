"""Writer formatting metrics with OSWorld's names: how a .docx looks (fonts, sizes, spacing,
alignment, tab stops, colours, strike-through, highlighting, subscripts) and what it holds
besides text (images, equations, page breaks, page numbers), read with python-docx.

Most check a formatting rule on the agent's document after `compare_docx_files` has found
its text unchanged, as OSWorld's do.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
import zipfile
from io import BytesIO
from typing import Any

from runtime.envs.tasks.metrics.docs import compare_docx_files

__all__ = [
    "METRICS",
    "check_italic_font_size_14",
    "check_tabstops",
    "compare_contains_image",
    "compare_docx_images",
    "compare_font_names",
    "compare_highlighted_text",
    "compare_insert_equation",
    "compare_line_spacing",
    "compare_subscript_contains",
    "contains_page_break",
    "delta_e_2000",
    "evaluate_alignment",
    "evaluate_colored_words_in_tables",
    "evaluate_conversion",
    "evaluate_spacing",
    "evaluate_strike_through_last_paragraph",
    "has_page_numbers_in_footers",
    "is_first_line_centered",
    "srgb_to_lab",
]

_W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"


def _docx(path: str) -> Any:
    import docx

    return docx.Document(path)


def _run_pairs(a: Any, b: Any) -> Any:
    """Runs of two documents paired by paragraph and run position, as OSWorld pairs them."""
    for p1, p2 in zip(a.paragraphs, b.paragraphs, strict=False):
        yield from zip(p1.runs, p2.runs, strict=False)


def compare_line_spacing(result: str | None, expected: str | None) -> float:
    """1.0 when two .docx hold the same text and every paragraph has the same line spacing."""
    if not compare_docx_files(result, expected):
        return 0.0
    ours, theirs = _docx(result).paragraphs, _docx(expected).paragraphs
    if len(ours) != len(theirs):
        return 0.0
    return float(
        all(
            a.paragraph_format.line_spacing == b.paragraph_format.line_spacing
            for a, b in zip(ours, theirs, strict=True)
        )
    )


def compare_insert_equation(result: str | None, expected: str | None) -> float:
    """1.0 when two .docx hold the same text and an equation object sits in the same run of both."""
    if not compare_docx_files(result, expected):
        return 0.0
    for r1, r2 in _run_pairs(_docx(result), _docx(expected)):
        if r1.element.xpath(".//w:object") and r2.element.xpath(".//w:object"):
            return 1.0
    return 0.0


def compare_font_names(docx_file: str | None, rules: dict[str, Any]) -> float:
    """1.0 when every run of the body paragraphs names the font `font_name`."""
    if not docx_file:
        return 0.0
    font = rules["font_name"]
    runs = (run for p in _docx(docx_file).paragraphs for run in p.runs)
    return float(all(run.font.name == font for run in runs))


def compare_subscript_contains(result: str | None, expected: str | None) -> float:
    """1.0 when some run is a subscript in both documents at the same paragraph and run position."""
    if not result or not expected:
        return 0.0
    pairs = _run_pairs(_docx(result), _docx(expected))
    return float(any(r1.font.subscript and r2.font.subscript for r1, r2 in pairs))


def has_page_numbers_in_footers(docx_file: str | None) -> float:
    """1.0 when the first footer paragraph of every section shows a digit (a page number)."""
    if not docx_file:
        return 0.0
    for section in _docx(docx_file).sections:
        paragraphs = section.footer.paragraphs
        text = paragraphs[0].text if paragraphs else ""
        if not any(ch.isdigit() for ch in text):
            return 0.0
    return 1.0


def is_first_line_centered(docx_file: str | None) -> float:
    """1.0 when the first paragraph is centred."""
    from docx.enum.text import WD_PARAGRAPH_ALIGNMENT

    if not docx_file:
        return 0.0
    paragraphs = _docx(docx_file).paragraphs
    if not paragraphs:
        return 0.0
    return float(paragraphs[0].paragraph_format.alignment == WD_PARAGRAPH_ALIGNMENT.CENTER)


def check_tabstops(result: str | None, expected: str | None, **options: Any) -> float:
    """How closely the tab stops of the non-empty paragraphs match: 1 minus their mean offset
    as a share of the text width (0 on a different count or alignment).

    `word_number_split_by_tabstop` (with `index`, default 0): each paragraph of the result
    must have that many words in its `index`-th tab-separated part.
    """
    from docx.enum.text import WD_TAB_ALIGNMENT

    if not result or not expected:
        return 0.0
    ours = [p for p in _docx(result).paragraphs if p.text.strip()]
    document = _docx(expected)
    theirs = [p for p in document.paragraphs if p.text.strip()]
    if len(ours) != len(theirs) or not ours:
        return 0.0
    words_wanted = options.get("word_number_split_by_tabstop")
    if words_wanted is not None:
        index = int(options.get("index", 0))
        for paragraph in ours:
            parts = paragraph.text.split("\t")
            if index >= len(parts) or len(parts[index].split()) != words_wanted:
                return 0.0

    def counted(tab: Any) -> bool:  # cleared stops and the default left stop at 0 do not count
        return not (
            tab.alignment == WD_TAB_ALIGNMENT.CLEAR
            or (tab.alignment == WD_TAB_ALIGNMENT.LEFT and tab.position == 0)
        )

    section = document.sections[0]
    width = section.page_width - section.left_margin - section.right_margin
    lost = 0.0
    for a, b in zip(ours, theirs, strict=True):
        tabs_a = [t for t in a.paragraph_format.tab_stops if counted(t)]
        tabs_b = [t for t in b.paragraph_format.tab_stops if counted(t)]
        if len(tabs_a) != len(tabs_b):
            return 0.0
        if any(t1.alignment != t2.alignment for t1, t2 in zip(tabs_a, tabs_b, strict=True)):
            return 0.0
        lost += (
            sum(abs(t1.position - t2.position) for t1, t2 in zip(tabs_a, tabs_b, strict=True))
            / width
        )
    return 1.0 - lost / len(ours)


def compare_contains_image(result: str | None, expected: str | None) -> float:
    """1.0 when no run holds a drawing in one document but not at the same position in the other."""
    if not result or not expected:
        return 0.0
    for r1, r2 in _run_pairs(_docx(result), _docx(expected)):
        if ("graphicData" in r1.element.xml) != ("graphicData" in r2.element.xml):
            return 0.0
    return 1.0


def _images(document: Any) -> list[tuple[Any, bytes]]:
    from PIL import Image

    out = []
    for rel in document.part.rels.values():
        if "image" in rel.reltype:
            with Image.open(BytesIO(rel.target_part.blob)) as image:
                out.append((image.size, image.tobytes()))
    return out


def compare_docx_images(result: str | None, expected: str | None) -> float:
    """1.0 when two .docx embed as many images, pairwise of the same pixels."""
    if not result or not expected:
        return 0.0
    return float(_images(_docx(result)) == _images(_docx(expected)))


def srgb_to_lab(rgb: tuple[float, float, float]) -> tuple[float, float, float]:
    """CIE L*a*b* (D65, 2° observer) of an 8-bit sRGB colour."""

    def linear(c: float) -> float:
        c /= 255.0
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (linear(c) for c in rgb)
    x = (0.412453 * r + 0.357580 * g + 0.180423 * b) / 0.95047
    y = 0.212671 * r + 0.715160 * g + 0.072169 * b
    z = (0.019334 * r + 0.119193 * g + 0.950227 * b) / 1.08883

    def f(t: float) -> float:
        return t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116

    fx, fy, fz = f(x), f(y), f(z)
    return 116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)


def delta_e_2000(lab1: tuple[float, float, float], lab2: tuple[float, float, float]) -> float:
    """The CIEDE2000 colour difference of two L*a*b* colours (kL = kC = kH = 1)."""
    (l1, a1, b1), (l2, a2, b2) = lab1, lab2
    c_mean = (math.hypot(a1, b1) + math.hypot(a2, b2)) / 2
    g = 0.5 * (1 - math.sqrt(c_mean**7 / (c_mean**7 + 25**7)))
    a1p, a2p = (1 + g) * a1, (1 + g) * a2
    c1p, c2p = math.hypot(a1p, b1), math.hypot(a2p, b2)
    h1p = math.degrees(math.atan2(b1, a1p)) % 360 if c1p else 0.0
    h2p = math.degrees(math.atan2(b2, a2p)) % 360 if c2p else 0.0
    dl, dc = l2 - l1, c2p - c1p
    if c1p * c2p == 0:
        dh = 0.0
    else:
        dh = h2p - h1p
        if dh > 180:
            dh -= 360
        elif dh < -180:
            dh += 360
    big_dh = 2 * math.sqrt(c1p * c2p) * math.sin(math.radians(dh / 2))
    l_mean, cp_mean = (l1 + l2) / 2, (c1p + c2p) / 2
    if c1p * c2p == 0:
        h_mean = h1p + h2p
    elif abs(h1p - h2p) <= 180:
        h_mean = (h1p + h2p) / 2
    else:
        h_mean = (h1p + h2p + 360) / 2 if h1p + h2p < 360 else (h1p + h2p - 360) / 2
    t = (
        1
        - 0.17 * math.cos(math.radians(h_mean - 30))
        + 0.24 * math.cos(math.radians(2 * h_mean))
        + 0.32 * math.cos(math.radians(3 * h_mean + 6))
        - 0.20 * math.cos(math.radians(4 * h_mean - 63))
    )
    d_theta = 30 * math.exp(-(((h_mean - 275) / 25) ** 2))
    r_c = 2 * math.sqrt(cp_mean**7 / (cp_mean**7 + 25**7))
    s_l = 1 + 0.015 * (l_mean - 50) ** 2 / math.sqrt(20 + (l_mean - 50) ** 2)
    s_c = 1 + 0.045 * cp_mean
    s_h = 1 + 0.015 * cp_mean * t
    r_t = -math.sin(math.radians(2 * d_theta)) * r_c
    return math.sqrt(
        (dl / s_l) ** 2 + (dc / s_c) ** 2 + (big_dh / s_h) ** 2 + r_t * (dc / s_c) * (big_dh / s_h)
    )


_RED, _BLUE = srgb_to_lab((255, 0, 0)), srgb_to_lab((0, 0, 255))


def evaluate_colored_words_in_tables(
    result: str | None, expected: str | None, threshold: float = 3.5, **_: Any
) -> float:
    """1.0 when the text is unchanged and, in every table, words starting with a vowel are red
    and the others blue (CIEDE2000 distance at most `threshold`)."""
    if not compare_docx_files(result, expected):
        return 0.0
    for table in _docx(result).tables:
        for row in table.rows:
            for cell in row.cells:
                for paragraph in cell.paragraphs:
                    for run in paragraph.runs:
                        if not run.text:
                            continue
                        rgb = run.font.color.rgb
                        if rgb is None:
                            return 0.0
                        target = _RED if run.text[0].lower() in "aeiou" else _BLUE
                        if delta_e_2000(srgb_to_lab(tuple(rgb)), target) > threshold:
                            return 0.0
    return 1.0


def evaluate_strike_through_last_paragraph(result: str | None, expected: str | None) -> float:
    """1.0 when the text is unchanged and every run of the last paragraph is struck through."""
    if not compare_docx_files(result, expected):
        return 0.0
    paragraphs = _docx(result).paragraphs
    return float(bool(paragraphs) and all(run.font.strike for run in paragraphs[-1].runs))


def check_italic_font_size_14(result: str | None, expected: str | None) -> float:
    """1.0 when the text is unchanged and every italic run is 14 pt."""
    if not compare_docx_files(result, expected):
        return 0.0
    runs = (run for p in _docx(result).paragraphs for run in p.runs if run.italic)
    return float(all(run.font.size is not None and run.font.size.pt == 14 for run in runs))


def evaluate_conversion(docx_file: str | None) -> float:
    """1.0 when no run, in tables or paragraphs, is all upper case."""
    if not docx_file:
        return 0.0
    document = _docx(docx_file)
    cells = (c for t in document.tables for row in t.rows for c in row.cells)
    paragraphs = [*(p for c in cells for p in c.paragraphs), *document.paragraphs]
    return float(not any(run.text.isupper() for p in paragraphs for run in p.runs))


def evaluate_spacing(docx_file: str | None) -> float:
    """1.0 when the first three paragraphs are spaced 1, 2 and 1.5 lines."""
    if not docx_file:
        return 0.0
    paragraphs = _docx(docx_file).paragraphs[:3]
    spacing = [p.paragraph_format.line_spacing for p in paragraphs]
    return float(spacing == [1.0, 2.0, 1.5])


def evaluate_alignment(docx_file: str | None) -> float:
    """1.0 when, in every sentence of three words or more, the first three words appear
    single-spaced before the rest (OSWorld's check of a first-three-words layout)."""
    if not docx_file:
        return 0.0
    for paragraph in _docx(docx_file).paragraphs:
        for sentence in paragraph.text.split("."):
            words = sentence.strip().split()
            if len(words) < 3:
                continue
            head, rest = " ".join(words[:3]), " ".join(words[3:])
            if not (
                head in sentence and rest in sentence and sentence.find(head) < sentence.find(rest)
            ):
                return 0.0
    return 1.0


def contains_page_break(docx_file: str | None) -> float:
    """1.0 when a run of the body holds a page break."""
    if not docx_file:
        return 0.0
    for paragraph in _docx(docx_file).paragraphs:
        for run in paragraph.runs:
            for br in run.element.iter(f"{{{_W}}}br"):
                if br.get(f"{{{_W}}}type") == "page":
                    return 1.0
    return 0.0


def _highlighted_texts(path: str) -> set[str]:
    with zipfile.ZipFile(path) as archive:
        root = ET.fromstring(archive.read("word/document.xml"))
    texts = set()
    for run in root.iter(f"{{{_W}}}r"):
        mark = next(run.iter(f"{{{_W}}}highlight"), None)
        if mark is not None and mark.get(f"{{{_W}}}val") != "none":
            text = next(run.iter(f"{{{_W}}}t"), None)
            if text is not None:
                texts.add(text.text or "")
    return texts


def compare_highlighted_text(result: str | None, expected: str | None) -> float:
    """1.0 when two .docx highlight the same set of run texts."""
    if not result or not expected:
        return 0.0
    return float(_highlighted_texts(result) == _highlighted_texts(expected))


METRICS = {
    "compare_line_spacing": compare_line_spacing,
    "compare_insert_equation": compare_insert_equation,
    "compare_font_names": compare_font_names,
    "compare_subscript_contains": compare_subscript_contains,
    "has_page_numbers_in_footers": has_page_numbers_in_footers,
    "is_first_line_centered": is_first_line_centered,
    "check_tabstops": check_tabstops,
    "compare_contains_image": compare_contains_image,
    "compare_docx_images": compare_docx_images,
    "evaluate_colored_words_in_tables": evaluate_colored_words_in_tables,
    "evaluate_strike_through_last_paragraph": evaluate_strike_through_last_paragraph,
    "check_italic_font_size_14": check_italic_font_size_14,
    "evaluate_conversion": evaluate_conversion,
    "evaluate_spacing": evaluate_spacing,
    "evaluate_alignment": evaluate_alignment,
    "contains_page_break": contains_page_break,
    "compare_highlighted_text": compare_highlighted_text,
}
