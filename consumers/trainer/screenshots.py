"""A training sample's screenshots from the blob store, as the rollout worker showed them."""

from __future__ import annotations

import io
from typing import Any

from consumers.trainer.backends.base import Sample
from runtime.blobstore import BlobStore
from runtime.errors import BlobCorrupt, BlobNotFound, RecordError, StorageError

__all__ = ["MissingImage", "load_images"]


class MissingImage(RecordError):
    """A screenshot of a trajectory is missing or corrupt in the blob store."""

    def __init__(self, trajectory_id: str, reason: str) -> None:
        super().__init__(f"{trajectory_id}: {reason}")
        self.trajectory_id = trajectory_id
        self.reason = reason

    def __reduce__(self) -> tuple[Any, ...]:
        # Raised on one rank, re-raised on every rank of a process group: it is pickled.
        return (MissingImage, (self.trajectory_id, self.reason))


def load_images(blobs: BlobStore, sample: Sample) -> list[Any]:
    """A sample's screenshots from the blob store, resized to the sizes they were rendered at.

    The same decode and resize as the rollout worker's `fit_image` (RGB, bilinear), so the
    pixels equal what the rollout engine was given.
    """
    from PIL import Image

    images = []
    for ref, (width, height) in zip(sample.image_refs, sample.image_sizes, strict=True):
        try:
            data = blobs.get(ref)
        except (BlobNotFound, BlobCorrupt, ValueError) as exc:
            raise MissingImage(sample.trajectory_id, str(exc)) from exc
        except Exception as exc:  # the store itself (a network or disk failure): retried
            raise StorageError(f"reading {ref} from {blobs.url}: {exc}") from exc
        try:
            image = Image.open(io.BytesIO(data)).convert("RGB")
        except (OSError, ValueError) as exc:  # stored intact, but not an image
            raise MissingImage(sample.trajectory_id, f"{ref} does not decode: {exc}") from exc
        if image.size != (width, height):
            image = image.resize((width, height), Image.BILINEAR)
        images.append(image)
    return images
