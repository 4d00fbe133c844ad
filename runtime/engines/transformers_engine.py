"""The transformers rollout engine: batched sampling with per-token logprobs, on CPU by default.

Concurrent `generate` calls are coalesced: requests queue up while a batch runs, and the next
batch takes everything pending (up to `max_batch`), so many episodes sharing one engine are
served in batches without any caller waiting for a fixed window. Generation runs in a worker
thread, so the event loop never blocks.

Logprobs are those of the distribution each token was sampled from: logits / temperature,
renormalised over the top-p nucleus when top_p < 1 (greedy counts as temperature 1), as
vLLM's `processed_logprobs`; `runtime.policy.logprobs.token_logprobs` recomputes them. A sampled stop token (eos or one of
`stop_token_ids`) is included in `token_ids` with its logprob; a stop string ends the
output at the token that completes it. A request with a `seed` is generated in a batch of
its own, so it samples the same tokens whatever else is queued.

Two things keep a CPU busy with useful work when many agents share the engine:

- a text-only policy reuses keys and values across calls (`prefix_cache_tokens`; see
  prefix_cache.py): each turn computes only what its prompt adds to the last one, and the
  duplicate prompts of a batch (a GRPO group's first turn) are computed once;
- a batch that is not full waits (at most `batch_wait_s`) for the requests its callers
  are about to send: `expected()`, when set (the model player sets it to its number of
  running episodes), says how many requests a full round holds. Without the wait, agents
  that finished their turns a moment apart split into a batch of one and a batch of the
  rest, over and over (measured with 8 agents: batches of 1 and 7 alternating, the engine
  busy 257 s of 265); decoding is bound by reading the weights, so a batch of 1 costs
  nearly what a batch of 8 does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from runtime.engines.base import GenerationRequest, GenerationResult, SamplingParams
from runtime.engines.prefix_cache import PrefixCache
from runtime.errors import PolicyError
from runtime.policy.logprobs import model_inputs, sampling_logprobs
from runtime.policy.model import Policy, load_policy, model_construction

__all__ = ["TransformersEngine"]

log = logging.getLogger(__name__)


class TransformersEngine:
    """A RolloutEngine on a Hugging Face model (transformers `generate`, any device)."""

    def __init__(
        self,
        policy: Policy | str | Path = "tiny",
        *,
        dtype: str = "float32",
        device: str = "cpu",
        max_batch: int = 8,
        policy_version: int = 0,
        prefix_cache_tokens: int = 32_768,
        batch_wait_s: float = 0.0,
    ) -> None:
        self.policy = policy if isinstance(policy, Policy) else load_policy(policy, dtype, device)
        self.max_batch = max_batch
        self.batch_wait_s = batch_wait_s
        self.expected: Callable[[], int] | None = None  # requests a full round holds
        self.policy_version = policy_version
        # Keys/values of recent sequences (text-only policies; 0 turns it off): ~46 KB a token
        # for SmolLM2-135M in fp32, so the default holds ~1.5 GB at most.
        text_only = not self.policy.processor.is_multimodal
        self.prefix_cache = (
            PrefixCache(prefix_cache_tokens) if text_only and prefix_cache_tokens > 0 else None
        )
        self.batches = 0  # model.generate calls so far (a metric; batching shows in it)
        self._lock = threading.Lock()  # one generate or weight swap at a time on the model
        self._queue: list[tuple[GenerationRequest, asyncio.Future]] = []
        self._arrived = asyncio.Event()  # set whenever a request is queued
        self._worker: asyncio.Task | None = None
        tok = self.policy.processor.tokenizer
        self._pad_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        self._eos_ids = _eos_ids(self.policy.model, tok)
        self._stop_criteria: dict[tuple, Any] = {}

    # ---- async interface -------------------------------------------------------------
    async def generate(self, requests: list[GenerationRequest]) -> list[GenerationResult]:
        """Generate one completion per request, batched with other concurrent callers."""
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in requests]
        self._queue.extend(zip(requests, futures, strict=True))
        self._arrived.set()
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._drain())
        return list(await asyncio.gather(*futures))

    async def load_weights(self, checkpoint_uri: str, policy_version: int) -> None:
        """Swap in the weights of an HF checkpoint folder and tag later results with the version."""
        await asyncio.to_thread(self._load_weights_sync, checkpoint_uri, policy_version)

    async def close(self) -> None:
        """Stop the batching task; requests not yet answered fail with PolicyError."""
        if self._worker is not None:
            self._worker.cancel()
            try:
                await self._worker
            except asyncio.CancelledError:
                pass
        _fail(self._queue, PolicyError("engine closed"))
        self._queue.clear()

    async def _drain(self) -> None:
        while self._queue:
            await self._gather()
            batch, self._queue = self._queue[: self.max_batch], self._queue[self.max_batch :]
            try:
                results = await asyncio.to_thread(self.generate_sync, [r for r, _ in batch])
            except asyncio.CancelledError:
                _fail(batch, PolicyError("engine closed"))
                raise
            except Exception as exc:  # a failed batch must fail its callers, not the worker
                log.exception("generation failed")
                version = self.policy_version
                results = [_error_result(f"generation failed: {exc}", version) for _ in batch]
            for (_, future), result in zip(batch, results, strict=True):
                if not future.done():
                    future.set_result(result)

    async def _gather(self) -> None:
        """Wait (at most batch_wait_s) until a full round of requests is queued."""
        deadline = time.monotonic() + self.batch_wait_s
        while len(self._queue) < self._round():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._arrived.clear()
            # Short waits: an episode that ends shrinks the round without a new request.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), min(left, 0.05))

    def _round(self) -> int:
        """How many queued requests make a batch worth starting without waiting."""
        expected = self.expected() if self.expected is not None else self.max_batch
        return max(1, min(self.max_batch, expected))

    # ---- synchronous core --------------------------------------------------------------
    def generate_sync(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """Generate completions in the calling thread (requests with equal sampling share a batch)."""
        results: list[GenerationResult | None] = [None] * len(requests)
        groups: dict[tuple, list[int]] = defaultdict(list)
        for i, request in enumerate(requests):
            s = request.sampling
            # A seeded request runs alone: its sample then depends on its seed only, not on
            # which other requests happened to share its batch.
            alone = i if s.seed is not None else None
            groups[(s.temperature, s.top_p, s.seed, s.stop, s.stop_token_ids, alone)].append(i)
        with self._lock:
            # Read under the lock: a weight swap cannot slip between the tag and the weights.
            version = self.policy_version
            for indices in groups.values():
                for start in range(0, len(indices), self.max_batch):
                    chunk = indices[start : start + self.max_batch]
                    outs = self._generate_isolated([requests[i] for i in chunk], version)
                    for i, out in zip(chunk, outs, strict=True):
                        results[i] = out
        return [r for r in results if r is not None]

    def _generate_isolated(
        self, requests: list[GenerationRequest], version: int
    ) -> list[GenerationResult]:
        # A bad request (say, image tokens that do not match its images) fails alone.
        try:
            return self._generate_group(requests, version)
        except PolicyError as exc:
            if len(requests) == 1:
                return [_error_result(str(exc), version)]
        return [self._generate_isolated([r], version)[0] for r in requests]

    def _stops(self, stop: Sequence[str]) -> Any:
        """Stopping criteria for stop strings, built once per set of strings."""
        from transformers import StoppingCriteriaList, StopStringCriteria

        if not stop:
            return None
        tokenizer = self.policy.processor.tokenizer
        key = (id(tokenizer), *stop)  # a reload may bring another tokenizer
        if key not in self._stop_criteria:
            # Building one reads and embeds the whole vocabulary (~3 s for Qwen's 151K
            # tokens): per call, it cost more than generating 48 tokens with the tiny model.
            criteria = StopStringCriteria(tokenizer, list(stop))
            self._stop_criteria[key] = StoppingCriteriaList([criteria])
        return self._stop_criteria[key]

    def _generate_group(
        self, requests: list[GenerationRequest], version: int
    ) -> list[GenerationResult]:
        import torch
        from transformers import GenerationConfig

        sampling: SamplingParams = requests[0].sampling
        model = self.policy.model
        for r in requests:
            if not r.prompt_ids:
                raise PolicyError("empty prompt")
        prompts = [list(r.prompt_ids) for r in requests]
        device = next(model.parameters()).device
        cached = None
        if self.prefix_cache is not None and not any(r.images for r in requests):
            self._share_prefixes(prompts, device)
            cached = self.prefix_cache.assemble(prompts, self._pad_id)
            inputs: dict[str, Any] = {
                "input_ids": cached.input_ids.to(device),
                "attention_mask": cached.attention_mask.to(device),
            }
            if cached.past_key_values is not None:
                inputs["past_key_values"] = cached.past_key_values
        else:
            inputs = model_inputs(
                self.policy.processor, prompts, [r.images for r in requests], self._pad_id
            )
            if "pixel_values" in inputs:
                inputs["pixel_values"] = inputs["pixel_values"].to(self.policy.dtype)
            inputs = {k: v.to(device) for k, v in inputs.items()}
        greedy = sampling.temperature <= 0
        stop_ids = [*self._eos_ids, *sampling.stop_token_ids]
        # Every warper set explicitly: a checkpoint's defaults or transformers' own (top_k=50
        # when unset) would otherwise change the distribution the logprobs describe.
        config = GenerationConfig(
            do_sample=not greedy,
            temperature=1.0 if greedy else sampling.temperature,
            top_p=1.0 if greedy else sampling.top_p,
            top_k=None if greedy else 0,  # greedy ignores warpers; None avoids a warning
            min_p=None,
            typical_p=1.0,
            repetition_penalty=1.0,
            no_repeat_ngram_size=0,
            max_new_tokens=max(r.sampling.max_tokens for r in requests),
            eos_token_id=stop_ids,
            pad_token_id=self._pad_id,
            output_logits=True,
            return_dict_in_generate=True,
        )
        if sampling.seed is not None:
            torch.manual_seed(sampling.seed)
        self.batches += 1
        with torch.no_grad():
            out = model.generate(
                **inputs, generation_config=config, stopping_criteria=self._stops(sampling.stop)
            )
        prompt_len = inputs["input_ids"].shape[1]
        new = out.sequences[:, prompt_len:]
        past = out.past_key_values if cached is not None else None
        temperature = 0.0 if greedy else sampling.temperature
        # Step by step: the [batch, vocab] raw logits of one step at a time, never the whole
        # [batch, steps, vocab] block (233 MB at batch 8 x 48 steps for a Qwen vocabulary).
        chosen = torch.stack(
            [
                sampling_logprobs(step_logits, temperature, sampling.top_p)
                .gather(-1, new[:, t : t + 1])
                .squeeze(-1)
                for t, step_logits in enumerate(out.logits)
            ],
            dim=1,
        )
        results = [
            self._finish(requests[i], new[i].tolist(), chosen[i].tolist(), stop_ids, version)
            for i in range(len(requests))
        ]
        if cached is not None and self.prefix_cache is not None:
            self.prefix_cache.keep_rows(cached, past, prompts, [r.token_ids for r in results])
        return results

    def _share_prefixes(self, prompts: list[list[int]], device: Any) -> None:
        """Compute once, into the prefix cache, the prompts that several rows of a batch share."""
        import torch

        cache = self.prefix_cache
        assert cache is not None
        shared = [
            list(p) for p, k in Counter(map(tuple, prompts)).items()
            if k > 1 and len(p) - 1 - cache.match(list(p))[0] > 8
        ]  # fmt: skip
        if not shared:
            return
        batch = cache.assemble(shared, self._pad_id)
        width = max(batch.cached)
        mask = batch.attention_mask.to(device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, width:]
        with torch.no_grad():
            out = self.policy.model(
                input_ids=batch.input_ids[:, width:].to(device), attention_mask=mask,
                past_key_values=batch.past_key_values, position_ids=positions, use_cache=True,
                logits_to_keep=1,
            )  # fmt: skip
        cache.keep_rows(batch, out.past_key_values, shared, [[] for _ in shared])

    def _finish(
        self,
        request: GenerationRequest,
        ids: list[int],
        logprobs: list[float],
        stop_ids: list[int],
        version: int,
    ) -> GenerationResult:
        """Cut one row at its stop token, stop string or max tokens."""
        end, reason = len(ids), "length"
        for i, token in enumerate(ids):
            if token in stop_ids:
                end, reason = i + 1, "stop"
                break
        if request.sampling.stop:
            cut = _stop_string_end(
                self.policy.processor.tokenizer, ids[:end], request.sampling.stop
            )
            if cut is not None:
                end, reason = cut, "stop"
        if end > request.sampling.max_tokens:
            end, reason = request.sampling.max_tokens, "length"
        return GenerationResult(
            token_ids=ids[:end],
            logprobs=logprobs[:end],
            finish_reason=reason,
            policy_version=version,
        )

    def _load_weights_sync(self, checkpoint_uri: str, policy_version: int) -> None:
        with _local_checkpoint(checkpoint_uri) as path:
            self._load_from_folder(path, checkpoint_uri, policy_version)

    def _load_from_folder(self, path: Path, checkpoint_uri: str, policy_version: int) -> None:
        model = self.policy.model
        # from_pretrained applies the architecture's checkpoint key mapping (saved names differ
        # from module names in the VL models); the weights are then copied in place.
        try:
            with model_construction():
                loaded, info = type(model).from_pretrained(
                    str(path),
                    config=model.config,
                    dtype=self.policy.dtype,
                    local_files_only=True,
                    output_loading_info=True,
                )
        except Exception as exc:  # transformers raises many types for a broken folder
            raise PolicyError(f"cannot load checkpoint {checkpoint_uri}: {exc}") from exc
        missing = [k for k in info.get("missing_keys", ()) if not k.endswith("lm_head.weight")]
        wrong = [*info.get("unexpected_keys", ()), *info.get("mismatched_keys", ())]
        if missing or wrong:
            raise PolicyError(
                f"checkpoint {checkpoint_uri} does not match the model: "
                f"missing {sorted(missing)[:3]}, unexpected {sorted(map(str, wrong))[:3]}"
            )
        with self._lock:
            model.load_state_dict(loaded.state_dict())
            model.eval()
            self.policy_version = policy_version
            if self.prefix_cache is not None:
                self.prefix_cache.clear()  # keys and values of the old weights


def _eos_ids(model: Any, tokenizer: Any) -> list[int]:
    ids: list[int] = []
    for source in (getattr(model, "generation_config", None), model.config, tokenizer):
        value = getattr(source, "eos_token_id", None)
        for v in value if isinstance(value, list | tuple) else [value]:
            if v is not None and int(v) not in ids:
                ids.append(int(v))
    return ids


def _stop_string_end(tokenizer: Any, ids: list[int], stops: Sequence[str]) -> int | None:
    """Smallest prefix length whose decoded text contains a stop string, if any."""
    if not any(s in tokenizer.decode(ids) for s in stops):
        return None
    for end in range(1, len(ids) + 1):
        text = tokenizer.decode(ids[:end])
        if any(s in text for s in stops):
            return end
    return None


@contextlib.contextmanager
def _local_checkpoint(uri: str) -> Iterator[Path]:
    """The checkpoint as a local folder: itself, or a temporary download of a remote URL."""
    if "://" in uri and not uri.startswith("file://"):
        import fsspec

        with tempfile.TemporaryDirectory(prefix="scalecua-ckpt-") as tmp:
            try:
                fs, root = fsspec.core.url_to_fs(uri)
                files = [f for f in fs.find(root) if not f.endswith("/")]
                if not files:
                    raise PolicyError(f"checkpoint {uri} is empty or missing")
                for remote in files:
                    target = Path(tmp) / Path(remote).relative_to(root.rstrip("/"))
                    target.parent.mkdir(parents=True, exist_ok=True)
                    fs.get_file(remote, str(target))
            except (OSError, ValueError, ImportError) as exc:
                raise PolicyError(f"cannot fetch checkpoint {uri}: {exc}") from exc
            yield Path(tmp)
        return
    path = Path(uri.removeprefix("file://"))
    if not path.is_dir():
        raise PolicyError(f"checkpoint {uri} is not a folder")
    yield path


def _fail(pending: list[tuple[GenerationRequest, asyncio.Future]], exc: Exception) -> None:
    for _, future in pending:
        if not future.done():
            future.set_exception(exc)


def _error_result(message: str, version: int) -> GenerationResult:
    return GenerationResult(
        token_ids=[], logprobs=[], finish_reason="error", policy_version=version, error=message
    )
