"""Fixtures of the rollout tests (the harness is in harness.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.blobstore import BlobStore, open_blob_store


@pytest.fixture
def blobs(tmp_path: Path) -> BlobStore:
    """A blob store of the test's own."""
    return open_blob_store(str(tmp_path / "blobs"))
