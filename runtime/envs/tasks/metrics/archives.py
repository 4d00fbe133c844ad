"""Archive metrics with OSWorld's names: zip and tar archives compared member by member.

Archives come from the agent (and tasks are untrusted), so they are unpacked with limits:
no member outside the target folder, no links, at most `MAX_MEMBERS` members and
`MAX_BYTES` unpacked.
"""

from __future__ import annotations

import difflib
import io
import os
import tarfile
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from runtime.errors import TaskError

__all__ = [
    "MAX_BYTES",
    "MAX_MEMBERS",
    "METRICS",
    "compare_archive",
    "compare_zip_files",
    "unpack",
]

MAX_MEMBERS = 10_000
MAX_BYTES = 512 * 1024**2

# compare_archive's `file_type` -> the metric that compares one pair of members.
_MEMBER_METRICS = {
    "text": "compare_text_file",
    "pdf": "compare_pdfs",
    "docx": "compare_docx_files",
    "ppt": "compare_pptx_files",
    "image": "compare_images",
    "csv": "compare_csv",
    "table": "compare_table",
    "audio": "compare_audios",
    "video": "compare_videos",
}


def unpack(archive: str | Path, folder: str | Path) -> None:
    """Unpack a zip or tar archive (any compression) into folder, within the limits."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as z:
            infos = [i for i in z.infolist() if not i.is_dir()]
            _check_limits(len(infos), sum(i.file_size for i in infos))
            root = os.path.realpath(folder)
            for info in infos:
                target = os.path.realpath(os.path.join(root, info.filename))
                if os.path.commonpath([root, target]) != root:
                    raise ValueError(f"archive member {info.filename!r} points outside")
                z.extract(info, root)
        return
    if tarfile.is_tarfile(archive):
        with tarfile.open(archive) as t:
            members = [m for m in t.getmembers() if m.isfile() or m.isdir()]
            _check_limits(len(members), sum(m.size for m in members if m.isfile()))
            t.extractall(folder, members=members, filter="data")
        return
    raise ValueError(f"{Path(archive).name} is neither a zip nor a tar archive")


def _check_limits(members: int, size: int) -> None:
    if members > MAX_MEMBERS or size > MAX_BYTES:
        raise ValueError(f"archive too large to compare: {members} members, {size} bytes")


def compare_archive(result: str | None, expected: str | None, **options: Any) -> float:
    """Mean score of the archives' members compared pairwise with the metric for
    `file_type` (text by default); 0 when their member names (in `file_path`) differ.

    Further options go to that metric.
    """
    from runtime.envs.tasks.metrics import METRICS as ALL  # the merged registry, at call time

    if not result or not expected or not Path(result).is_file():
        return 0.0
    options = dict(options)
    sub = str(options.pop("file_path", ""))
    file_type = str(options.pop("file_type", "text"))
    name = _MEMBER_METRICS.get(file_type)
    if name is None:
        raise TaskError(f"compare_archive: unknown file_type {file_type!r}")
    if name not in ALL:
        raise TaskError(f"compare_archive: file_type {file_type!r} needs metric `{name}`")
    with tempfile.TemporaryDirectory(prefix="scalecua-archive-") as tmp:
        got, want = Path(tmp, "result"), Path(tmp, "expected")
        unpack(result, got)
        unpack(expected, want)
        got_names = sorted(os.listdir(got / sub)) if (got / sub).is_dir() else []
        want_names = sorted(os.listdir(want / sub))
        if got_names != want_names or not want_names:
            return 0.0
        scores = [
            float(ALL[name](str(got / sub / n), str(want / sub / n), **options)) for n in want_names
        ]
    return sum(scores) / len(scores)


def compare_zip_files(result: str | None, expected: str | None, **options: Any) -> float:
    """1.0 when two zip files hold the same member names with the same bytes (PDF members:
    text at least 95% similar)."""
    if not result or not expected or not zipfile.is_zipfile(result):
        return 0.0
    with zipfile.ZipFile(result) as a, zipfile.ZipFile(expected) as b:
        names = {i.filename for i in a.infolist()}
        if names != {i.filename for i in b.infolist()}:
            return 0.0
        _check_limits(len(names), sum(i.file_size for i in a.infolist()))
        for member in names:
            got, want = a.read(member), b.read(member)
            if member.lower().endswith(".pdf"):
                ratio = difflib.SequenceMatcher(None, _pdf_text(got), _pdf_text(want)).ratio()
                if ratio < 0.95:
                    return 0.0
            elif got != want:
                return 0.0
    return 1.0


def _pdf_text(data: bytes) -> str:
    from pypdf import PdfReader

    return "".join(page.extract_text() or "" for page in PdfReader(io.BytesIO(data)).pages)


METRICS: dict[str, Any] = {
    "compare_archive": compare_archive,
    "compare_zip_files": compare_zip_files,
}
