"""The policy's processor: a tokenizer plus, for vision-language models, an image processor.

The stock `Qwen2_5_VLProcessor` builds a video processor that needs torchvision, which does
not import beside the CPU torch here, and `AutoProcessor` on a saved folder then falls back
to the bare tokenizer. `PolicyProcessor` holds exactly what rendering, generation and
recompute need (the tokenizer, the image processor, the image placeholder ids) and loads
any Qwen-VL-style model folder: its own image processor settings (patch size, merge size,
pixel bounds) decide how many `<|image_pad|>` tokens an image becomes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformers import Qwen2_5_VLProcessor

from runtime.errors import PolicyError
from runtime.policy.tokenizer import load_tokenizer

__all__ = ["ImageOnlyQwen25VLProcessor", "PolicyProcessor", "load_processor"]


class ImageOnlyQwen25VLProcessor(Qwen2_5_VLProcessor):
    """Qwen2.5-VL's processor without the video part, so it works without torchvision."""

    def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
        super().__init__(
            image_processor=image_processor,
            tokenizer=tokenizer,
            video_processor=None,
            chat_template=chat_template,
            **kwargs,
        )


@dataclass
class PolicyProcessor:
    """Tokenizer, optional image processor and the image placeholder tokens of one policy."""

    tokenizer: Any
    image_processor: Any | None = None  # None for a text-only policy
    image_token: str = "<|image_pad|>"
    vision_start: str = "<|vision_start|>"
    vision_end: str = "<|vision_end|>"
    # Ids of the texts every prompt repeats (system prompt, chat markers), filled by rendering.
    fixed_ids: dict[str, tuple[int, ...]] = field(default_factory=dict, repr=False, compare=False)

    @property
    def is_multimodal(self) -> bool:
        """Whether the policy takes images."""
        return self.image_processor is not None

    @property
    def image_token_id(self) -> int:
        """The id of the placeholder token repeated once per merged image patch."""
        return int(self.tokenizer.convert_tokens_to_ids(self.image_token))

    def image_token_count(self, width: int, height: int) -> int:
        """How many placeholder tokens an image of this size becomes."""
        if self.image_processor is None:
            raise PolicyError("this policy is text-only: it takes no images")
        ip = self.image_processor
        patches = ip.get_number_of_image_patches(height, width, {})
        return int(patches) // (int(ip.merge_size) ** 2)

    def image_inputs(self, images: list[Any]) -> dict[str, Any]:
        """Pixel values and grid sizes (torch tensors) for the images, in order."""
        if not images:
            return {}
        if self.image_processor is None:
            raise PolicyError("this policy is text-only: it takes no images")
        out = self.image_processor(
            images=[img.convert("RGB") for img in images], return_tensors="pt"
        )
        return {"pixel_values": out["pixel_values"], "image_grid_thw": out["image_grid_thw"]}

    def hf_processor(self) -> ImageOnlyQwen25VLProcessor:
        """The equivalent Hugging Face processor (text + images -> model inputs)."""
        return ImageOnlyQwen25VLProcessor(
            image_processor=self.image_processor,
            tokenizer=self.tokenizer,
            chat_template=getattr(self.tokenizer, "chat_template", None),
        )


def _image_processor_settings(path: Path) -> dict | None:
    for name in ("preprocessor_config.json", "processor_config.json"):
        file = path / name
        if file.exists():
            data = json.loads(file.read_text())
            data = data.get("image_processor", data)
            if "patch_size" in data and "merge_size" in data:
                return data
    return None


def load_processor(path: Path | str) -> PolicyProcessor:
    """Load the processor of a local model folder: image-aware when the folder configures images."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    path = Path(path)
    tokenizer = load_tokenizer(path)
    settings = _image_processor_settings(path)
    if settings is None:
        return PolicyProcessor(tokenizer=tokenizer)
    # The PIL image processor needs no torchvision; it takes the folder's own settings, so a
    # real checkpoint's pixel bounds and patch sizes are honoured.
    keys = (
        "size",
        "min_pixels",
        "max_pixels",
        "patch_size",
        "temporal_patch_size",
        "merge_size",
        "image_mean",
        "image_std",
        "do_resize",
        "do_rescale",
        "do_normalize",
        "rescale_factor",
        "resample",
    )
    image_processor = Qwen2VLImageProcessorPil(**{k: settings[k] for k in keys if k in settings})
    processor = PolicyProcessor(tokenizer=tokenizer, image_processor=image_processor)
    if tokenizer.convert_tokens_to_ids(processor.image_token) is None:
        raise PolicyError(f"{path}: tokenizer has no {processor.image_token} token")
    return processor
