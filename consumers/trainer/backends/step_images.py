"""A step's screenshots on one rank: decoded and preprocessed once, encoded once, then dropped.

The segments of a trajectory repeat its screenshots: a VCS window keeps the previous
window's last Δ, so a 50-turn episode cut at K = Δ = 5 carries 90 image slots for 50
screenshots. A step therefore loads each screenshot (blob store, decode, resize) and runs
the image processor on it once, however many of its segments show it; with the vision tower
frozen (the default) the tower's output is computed once per screenshot too, inside the
model's forward (where a sharded model has its weights gathered), and reused by every later
micro-batch. An image is dropped after the last micro-batch of this rank that shows it,
so memory holds what is still to come, not the whole step.

Keys are (blob ref, width, height); a sample without refs (images given directly by the
loader) is keyed by itself and shares nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from consumers.trainer.backends.base import ImageLoader, MicroBatch, Sample
from runtime.policy.processor import PolicyProcessor

__all__ = ["StepImages", "ImageBatch", "Key"]

Key = tuple[Any, ...]


class StepImages:
    """Pixels (and, for a frozen tower, vision features per model) of a step's images."""

    def __init__(
        self,
        processor: PolicyProcessor,
        loader: ImageLoader,
        batches: Sequence[MicroBatch] = (),
        reuse_features: bool = True,
    ) -> None:
        self.processor = processor
        self.loader = loader
        self.reuse_features = reuse_features  # the vision tower is frozen: its output is too
        self.pixels: dict[Key, tuple[Any, Any]] = {}  # key -> (pixel rows, grid [1, 3])
        self.features: dict[tuple[str, Key], Any] = {}  # (model role, key) -> [tokens, hidden]
        self.loaded = 0  # images loaded and preprocessed (one per key)
        self.encoded = 0  # images put through a vision tower
        self._last: dict[Key, int] = {}
        self._counts: dict[int, int] = {}  # images the loader gave a sample without refs
        for round_, batch in enumerate(batches):
            for sample in batch.samples:
                for key in self.keys(sample):
                    self._last[key] = round_

    def keys(self, sample: Sample) -> list[Key]:
        """One key per image of the sample, in order."""
        if sample.image_refs:
            sizes = sample.image_sizes
            return [(ref, int(w), int(h)) for ref, (w, h) in zip(sample.image_refs, sizes,
                                                                  strict=True)]  # fmt: skip
        count = self._counts.get(id(sample), len(sample.image_sizes))
        return [(id(sample), i) for i in range(count)]

    def load(self, samples: Sequence[Sample]) -> None:
        """Load and preprocess the samples' images not held yet (the loader's errors pass)."""
        for sample in samples:
            if not sample.image_refs and id(sample) not in self._counts:
                images = list(self.loader(sample))  # the loader alone knows how many
                self._counts[id(sample)] = len(images)
                keys = self.keys(sample)
                missing = list(range(len(keys)))
            else:
                keys = self.keys(sample)
                missing = [i for i, key in enumerate(keys) if key not in self.pixels]
                if not missing:
                    continue
                view = dataclasses.replace(  # only what is missing
                    sample,
                    image_refs=tuple(sample.image_refs[i] for i in missing),
                    image_sizes=tuple(sample.image_sizes[i] for i in missing),
                )
                images = list(self.loader(view))
            if not images:
                continue
            vision = self.processor.image_inputs(images)
            grids = vision["image_grid_thw"]
            rows = grids.prod(-1).tolist()
            start = 0
            for j, i in enumerate(missing):
                self.pixels[keys[i]] = (vision["pixel_values"][start : start + rows[j]],
                                        grids[j : j + 1])  # fmt: skip
                start += rows[j]
            self.loaded += len(missing)

    def batch(self, samples: Sequence[Sample]) -> ImageBatch | None:
        """What one forward over these samples needs (None: no images); `load` them first."""
        keys = [key for s in samples for key in self.keys(s)]
        if not keys:
            return None
        return ImageBatch(self, keys)

    def release(self, round_: int) -> None:
        """Drop the images no micro-batch after `round_` shows."""
        for key in [k for k, last in self._last.items() if last <= round_]:
            del self._last[key]
            self.pixels.pop(key, None)
            for role in ("policy", "reference"):
                self.features.pop((role, key), None)


@dataclasses.dataclass
class ImageBatch:
    """The images of one forward, in order, and how to get their vision features."""

    store: StepImages
    keys: list[Key]

    @property
    def grid(self) -> Any:
        """image_grid_thw of every image in order."""
        import torch

        return torch.cat([self.store.pixels[k][1] for k in self.keys])

    def pixel_values(self) -> Any:
        """Pixel rows of every image in order (what the vision tower takes)."""
        import torch

        return torch.cat([self.store.pixels[k][0] for k in self.keys])

    def features(self, model: Any, role: str) -> tuple[Any, ...]:
        """Vision features per image, in order: computed by `model` for the images it has
        not encoded this step (call inside the forward, without gradients), reused otherwise."""
        import torch

        store = self.store.features
        todo = list(dict.fromkeys(k for k in self.keys if (role, k) not in store))
        if todo:
            base = model.model
            device = next(base.visual.parameters()).device
            pixels = torch.cat([self.store.pixels[k][0] for k in todo]).to(device)
            grid = torch.cat([self.store.pixels[k][1] for k in todo]).to(device)
            with torch.no_grad():
                out = base.get_image_features(pixels, grid, return_dict=True).pooler_output
            for key, value in zip(todo, out, strict=True):
                store[(role, key)] = value.detach()
            self.store.encoded += len(todo)
        return tuple(store[(role, k)] for k in self.keys)
