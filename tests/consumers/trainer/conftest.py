"""Fixtures for trainer tests: the tiny policy (for making data) and a blob store."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.blobstore import BlobStore, open_blob_store
from runtime.policy.model import Policy, load_policy


@pytest.fixture(scope="session")
def tiny() -> Policy:
    """The tiny Qwen2.5-VL policy, loaded once, to render data and recompute its logprobs."""
    return load_policy("tiny")


@pytest.fixture
def blobs(tmp_path: Path) -> BlobStore:
    """A fresh local blob store."""
    return open_blob_store(str(tmp_path / "blobs"))
