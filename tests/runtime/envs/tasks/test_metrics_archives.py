"""Archive metrics: zip and tar archives member by member, and the limits an agent's
archive is unpacked within."""

from __future__ import annotations

import io
import tarfile
import zipfile

import pytest

from runtime.envs.tasks.metrics import METRICS
from runtime.envs.tasks.metrics.archives import unpack
from runtime.errors import TaskError


def _zip(path, members: dict[str, bytes]) -> str:
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return str(path)


def _tar(path, members: dict[str, bytes]) -> str:
    with tarfile.open(path, "w:gz") as t:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return str(path)


def _pdf(text: str) -> bytes:
    """A one-page PDF showing `text` (pypdf's text extraction reads it back)."""
    stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for i, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


def test_compare_zip_files(tmp_path):
    gold = {"essay.docx": b"docx bytes", "essay.pdf": _pdf("Recruitment and retention")}
    m = METRICS["compare_zip_files"]
    expected = _zip(tmp_path / "gold.zip", gold)
    assert m(_zip(tmp_path / "same.zip", gold), expected) == 1.0
    # PDFs compare by their text: other bytes with the same text are the same PDF.
    regenerated = {**gold, "essay.pdf": _pdf("Recruitment and retention") + b"\n% again\n"}
    assert m(_zip(tmp_path / "regen.zip", regenerated), expected) == 1.0
    assert m(_zip(tmp_path / "text.zip", {**gold, "essay.pdf": _pdf("Other")}), expected) == 0.0
    assert m(_zip(tmp_path / "less.zip", {"essay.docx": b"docx bytes"}), expected) == 0.0
    assert m(_zip(tmp_path / "bytes.zip", {**gold, "essay.docx": b"other"}), expected) == 0.0
    (tmp_path / "not.zip").write_text("not a zip")
    assert m(str(tmp_path / "not.zip"), expected) == 0.0


def test_compare_archive_by_file_type(tmp_path):
    m = METRICS["compare_archive"]
    gold = _tar(tmp_path / "gold.tar.gz", {"a.txt": b"one\n", "b.txt": b"two\n"})
    good = _zip(tmp_path / "good.zip", {"a.txt": b"one\n", "b.txt": b"two\n"})
    half = _zip(tmp_path / "half.zip", {"a.txt": b"one\n", "b.txt": b"three\n"})
    named = _zip(tmp_path / "named.zip", {"a.txt": b"one\n", "c.txt": b"two\n"})
    assert m(good, gold) == 1.0
    assert m(half, gold) == 0.5  # the mean over members
    assert m(named, gold) == 0.0
    blanks = _zip(tmp_path / "blanks.zip", {"a.txt": b" one \n\n", "b.txt": b"two"})
    assert m(blanks, gold, file_type="text", ignore_blanks=True) == 1.0
    inner = _zip(tmp_path / "inner.zip", {"book/a.txt": b"one\n", "book/b.txt": b"two\n"})
    assert m(inner, _zip(tmp_path / "g2.zip", {"book/a.txt": b"one\n", "book/b.txt": b"two\n"}),
             file_path="book") == 1.0  # fmt: skip
    with pytest.raises(TaskError):
        m(good, gold, file_type="hologram")


def test_unpack_refuses_members_outside_and_oversized_archives(tmp_path, monkeypatch):
    evil = _zip(tmp_path / "evil.zip", {"../escaped.txt": b"x"})
    with pytest.raises(ValueError, match="outside"):
        unpack(evil, tmp_path / "out")
    assert not (tmp_path / "escaped.txt").exists()
    evil_tar = _tar(tmp_path / "evil.tar.gz", {"../escaped.txt": b"x"})
    with pytest.raises(tarfile.TarError):
        unpack(evil_tar, tmp_path / "out2")
    assert not (tmp_path / "escaped.txt").exists()
    monkeypatch.setattr("runtime.envs.tasks.metrics.archives.MAX_BYTES", 10)
    with pytest.raises(ValueError, match="too large"):
        unpack(_zip(tmp_path / "big.zip", {"big": b"x" * 11}), tmp_path / "out3")
