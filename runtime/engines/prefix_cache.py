"""Reuse of keys and values across generate calls: the longest common prefix is never recomputed.

An agent's prompts grow turn by turn: the prompt of turn t+1 is the prompt of turn t, the
sampled response and a new observation, and every prompt of a run starts with the same
system prompt (the n rollouts of a GRPO group share their whole first prompt). Without
reuse, a transformers engine recomputes all of it at every turn: on 2 CPU cores, prefill
was ~60% of a batch's time in the laptop recipe (docs/learning.md).

`PrefixCache` keeps the keys and values of recent sequences (one entry per finished row:
its prompt and the tokens it sampled) under a token budget, least recently used first
out. For a new prompt it finds the entry with the longest common prefix (any entry: keys
and values at position j depend only on tokens 0..j, so a shared prefix is reusable even
when the entry then diverges) and `assemble` builds a batch from the matches:

    columns:  [ cached part, left-padded to C ][ uncached suffix, left-padded to S ]
    row i:    [ 0 … 0 | K/V of c_i tokens    ][ pad … pad | s_i suffix tokens      ]

with an attention mask that is 1 exactly on real tokens. Position ids follow the mask
(transformers derives them from its cumulative sum), so the gap between a row's cached
part and its suffix is invisible to the model: the suffix continues at position c_i.
Measured: the same greedy ids and logprobs within 2e-5 of a plain generate.

Entries are only valid for the weights that made them: `clear()` on every weight load.
Only for text-only decoder models (images need multimodal positions).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["CachedBatch", "PrefixCache"]


@dataclass
class _Entry:
    ids: np.ndarray  # int64: the tokens whose keys/values are held
    layers: list[tuple[Any, Any]]  # per layer (keys, values), each [kv_heads, len, head_dim]
    used: float = field(default_factory=time.monotonic)


@dataclass
class CachedBatch:
    """Model inputs for a batch whose rows reuse cached prefixes (see the module doc)."""

    input_ids: Any  # [B, C + S] (cached columns hold the cached ids, for the record)
    attention_mask: Any  # [B, C + S], 1 on real tokens
    past_key_values: Any  # a transformers DynamicCache of C columns, or None when C == 0
    cached: list[int]  # c_i: tokens of row i taken from the cache
    width: int  # C + S: where the generated tokens start


class PrefixCache:
    """Keys and values of recent sequences under a token budget; see the module doc."""

    def __init__(self, max_tokens: int = 32_768) -> None:
        self.max_tokens = max_tokens
        self._entries: list[_Entry] = []
        self.tokens = 0  # tokens held
        self.hits = 0  # prompt tokens served from the cache (a metric)
        self.misses = 0  # prompt tokens computed

    def clear(self) -> None:
        """Forget every entry (the weights changed)."""
        self._entries.clear()
        self.tokens = 0

    def match(self, prompt: list[int]) -> tuple[int, _Entry | None]:
        """The longest reusable prefix of `prompt` (at most all but its last token) and its entry."""
        limit = len(prompt) - 1  # the last prompt token must be fed to get the next logits
        if limit <= 0 or not self._entries:
            return 0, None
        query = np.asarray(prompt[:limit], dtype=np.int64)
        best, found = 0, None
        for entry in self._entries:
            n = min(limit, len(entry.ids))
            if n <= best:
                continue
            same = entry.ids[:n] == query[:n]
            length = n if same.all() else int(np.argmin(same))
            if length > best:
                best, found = length, entry
        return best, found

    def add(self, ids: list[int], layers: list[tuple[Any, Any]]) -> None:
        """Hold the keys/values of `ids` (one sequence), evicting the least recently used."""
        if not ids or len(ids) > self.max_tokens:
            return
        self._entries.append(_Entry(np.asarray(ids, dtype=np.int64), layers))
        self.tokens += len(ids)
        while self.tokens > self.max_tokens and self._entries:
            oldest = min(range(len(self._entries)), key=lambda i: self._entries[i].used)
            self.tokens -= len(self._entries.pop(oldest).ids)

    def assemble(self, prompts: list[list[int]], pad_id: int) -> CachedBatch:
        """Inputs for generating after `prompts`, reusing each one's longest cached prefix."""
        import torch
        from transformers import DynamicCache

        matches = [self.match(p) for p in prompts]
        cached = [c for c, _ in matches]
        big_c = max(cached)
        big_s = max(len(p) - c for p, c in zip(prompts, cached, strict=True))
        rows = len(prompts)
        input_ids = torch.full((rows, big_c + big_s), pad_id, dtype=torch.long)
        mask = torch.zeros((rows, big_c + big_s), dtype=torch.long)
        for i, (prompt, c) in enumerate(zip(prompts, cached, strict=True)):
            suffix = prompt[c:]
            input_ids[i, big_c - c : big_c] = torch.tensor(prompt[:c], dtype=torch.long)
            mask[i, big_c - c : big_c] = 1
            input_ids[i, big_c + big_s - len(suffix) :] = torch.tensor(suffix, dtype=torch.long)
            mask[i, big_c + big_s - len(suffix) :] = 1
        self.hits += sum(cached)
        self.misses += sum(len(p) for p in prompts) - sum(cached)
        past = None
        if big_c > 0:
            now = time.monotonic()
            template = next(e for _, e in matches if e is not None).layers
            layers = []
            for li, (k0, v0) in enumerate(template):
                keys = k0.new_zeros((rows, k0.shape[0], big_c, k0.shape[2]))
                values = v0.new_zeros((rows, v0.shape[0], big_c, v0.shape[2]))
                for i, (c, entry) in enumerate(matches):
                    if entry is not None and c > 0:
                        keys[i, :, big_c - c :] = entry.layers[li][0][:, :c]
                        values[i, :, big_c - c :] = entry.layers[li][1][:, :c]
                        entry.used = now
                layers.append((keys, values))
            past = DynamicCache(ddp_cache_data=layers)
        return CachedBatch(input_ids, mask, past, cached, big_c + big_s)

    def keep_rows(
        self,
        batch: CachedBatch,
        cache: Any,
        prompts: list[list[int]],
        generated: list[list[int]],
    ) -> None:
        """Hold each row's prompt and sampled tokens from a finished generate's cache."""
        if cache is None:
            return
        layers = [(layer.keys, layer.values) for layer in cache.layers]
        held = layers[0][0].shape[2]  # columns with keys/values: width + steps − 1
        big_c = max(batch.cached)
        big_s = batch.width - big_c
        for i, (prompt, new) in enumerate(zip(prompts, generated, strict=True)):
            c, s = batch.cached[i], len(prompt) - batch.cached[i]
            fed = min(len(new), held - batch.width)  # sampled tokens fed back (not the last)
            cols = [*range(big_c - c, big_c), *range(big_c + big_s - s, batch.width),
                    *range(batch.width, batch.width + fed)]  # fmt: skip
            index = _index(cols, layers[0][0].device)
            self.add(
                [*prompt, *new[:fed]],
                [(k[i].index_select(1, index), v[i].index_select(1, index)) for k, v in layers],
            )


def _index(cols: list[int], device: Any) -> Any:
    import torch

    return torch.tensor(cols, dtype=torch.long, device=device)
