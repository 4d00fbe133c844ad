"""PDF metrics on PDFs the tests write (text with a standard font, or images saved by PIL)."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from runtime.envs.tasks.metrics import METRICS
from runtime.envs.tasks.metrics.pdf import pdf_text
from runtime.errors import TaskError


def _pdf(path: Path, pages: list[str]) -> str:
    """A minimal PDF: one page per string, set in Helvetica (no font file needed)."""
    objects = ["<< /Type /Catalog /Pages 2 0 R >>", ""]
    kids = []
    for text in pages:
        stream = f"BT /F1 18 Tf 72 720 Td ({text}) Tj ET".encode()
        content = len(objects) + 1
        objects.append(f"<< /Length {len(stream)} >>\nstream\n{stream.decode()}\nendstream")
        kids.append(len(objects) + 1)
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {content} 0 R "
            "/Resources << /Font << /F1 << /Type /Font /Subtype /Type1 /BaseFont /Helvetica >> >> >> >>"
        )
    objects[1] = (
        f"<< /Type /Pages /Kids [{' '.join(f'{k} 0 R' for k in kids)}] /Count {len(kids)} >>"
    )
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n{body}\nendobj\n".encode()
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += "".join(f"{o:010d} 00000 n \n" for o in offsets).encode()
    out += (
        f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    )
    path.write_bytes(bytes(out))
    return str(path)


def test_page_count_relations(tmp_path):
    one, three = _pdf(tmp_path / "one.pdf", ["a"]), _pdf(tmp_path / "three.pdf", ["a", "b", "c"])
    metric = METRICS["check_pdf_pages"]
    assert metric(one, {"relation": "eq", "ref_value": 1}) == 1.0
    assert metric(three, {"relation": "eq", "ref_value": 1}) == 0.0
    assert metric(three, {"relation": "gt", "ref_value": 2}) == 1.0
    assert metric(None, {"relation": "eq", "ref_value": 1}) == 0.0
    with pytest.raises(TaskError):
        metric(one, {"relation": "setitem", "ref_value": 1})


def test_text_similarity_of_pdfs(tmp_path):
    gold = _pdf(tmp_path / "gold.pdf", ["Meeting agenda", "Budget review"])
    same = _pdf(tmp_path / "same.pdf", ["Meeting agenda", "Budget review"])
    close = _pdf(tmp_path / "close.pdf", ["Meeting agenda", "Budget reviews"])
    garbage = tmp_path / "garbage.pdf"
    garbage.write_text("not a pdf")
    assert "Budget review" in pdf_text(gold)
    metric = METRICS["compare_pdfs"]
    assert metric(same, gold) == 1.0
    assert 0.9 < metric(close, gold) < 1.0
    assert metric(str(garbage), gold) == 0.0
    assert metric(None, gold) == 0.0
    # Lists are paired in order and averaged over the expected files.
    assert metric([same, str(garbage)], [gold, gold]) == 0.5


def test_page_images_of_pdfs(tmp_path):
    def image_pdf(name, colour):
        path = tmp_path / name
        Image.new("RGB", (120, 80), colour).save(path, "PDF")
        return str(path)

    red, red2, blue = (
        image_pdf("r.pdf", "red"),
        image_pdf("r2.pdf", "red"),
        image_pdf("b.pdf", "blue"),
    )
    metric = METRICS["compare_pdf_images"]
    assert metric(red, red2) == 1.0
    assert metric(red, blue) == 0.0
    assert metric(red, _pdf(tmp_path / "two.pdf", ["x", "y"])) == 0.0  # page counts differ
    assert metric(None, red) == 0.0
