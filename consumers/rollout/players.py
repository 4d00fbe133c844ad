"""Who answers each turn of an episode: a model behind a rollout engine, or a script.

A `Player` is shared by every episode of a worker; `start()` gives one episode its own
conversation. Both kinds render the history with the policy's `HistoryRenderer` (token-diff
appends, the same function the segmenter re-renders with), so a scripted episode is logged
exactly like a sampled one and can serve as supervised data:

- `ModelPlayer`: the rendered prompt goes to the engine; concurrent episodes' requests are
  batched by the engine (TransformersEngine coalesces them; vLLM batches on its server).
- `ScriptedPlayer`: replays a task's reference solution, one action per turn, as the
  tool-call text the policy is prompted to write (its ids are that text tokenised; it has
  no logprobs, since nothing was sampled).
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from runtime.engines.base import GenerationRequest, RolloutEngine, SamplingParams
from runtime.errors import PolicyError
from runtime.policy.actions import format_action
from runtime.policy.processor import PolicyProcessor
from runtime.policy.prompts import response_style, system_prompt
from runtime.policy.render import HistoryRenderer

__all__ = [
    "Reply",
    "Player",
    "EpisodePlayer",
    "ModelPlayer",
    "ScriptedPlayer",
    "EngineUnavailable",
    "build_player",
    "default_observe",
    "prompt_sha",
]


class EngineUnavailable(PolicyError):
    """The engine gave no answer within its bound (down, overloaded, or failing)."""


@dataclass
class Reply:
    """One turn's answer: the text, its token ids and logprobs, and how it was made."""

    text: str
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str = "stop"
    policy_version: int = 0
    prompt_tokens: int = 0
    render_ms: float = 0.0
    generate_ms: float = 0.0


class EpisodePlayer(Protocol):
    """The player's side of one episode."""

    async def act(self, image: Any | None, observation: str) -> Reply:
        """Answer the next turn, given the (resized) screenshot and the observation text."""
        ...

    def close(self) -> None:
        """The episode is over (it sends no more turns)."""
        ...


class Player(Protocol):
    """Answers turns for every episode of a worker."""

    prompt_variant: str
    system_prompt: str
    processor: PolicyProcessor | None  # None: the history is not rendered to ids
    sampling: SamplingParams
    policy_version: int
    context_window: tuple[int, int] | None  # (K, Δ) of Visual Context Segmentation; None: all

    def start(self, instruction: str, solution: list[dict[str, Any]] | None) -> EpisodePlayer:
        """Begin an episode."""
        ...

    async def load_weights(self, checkpoint_uri: str, policy_version: int) -> None:
        """Switch to newer weights (between turns or episodes; the worker decides)."""
        ...

    async def close(self) -> None:
        """Release the engine."""
        ...


def prompt_sha(text: str) -> str:
    """Return a short content hash of a system prompt (its version)."""
    return hashlib.sha256(text.encode()).hexdigest()[:12]


class _Rendering:
    """The token-diff rendering of one episode (absent when the player has no processor).

    With a context window (K, Δ) — the paper's 5, 5 by default — the history holds at most
    K+Δ observations, exactly as the segmenter will cut it (consumers/segmenter/vcs.py).
    """

    def __init__(self, player: Player, instruction: str) -> None:
        self.renderer = (
            HistoryRenderer(
                player.system_prompt, instruction, player.processor, window=player.context_window
            )
            if player.processor is not None
            else None
        )

    def observe(self, image: Any | None, observation: str) -> tuple[list[int], list[Any]]:
        if self.renderer is None:
            return [], []
        prompt = self.renderer.observe(image, observation)
        return prompt.ids, prompt.images


class ModelPlayer:
    """A policy served by a rollout engine (transformers, vLLM over HTTP, vLLM in-process)."""

    def __init__(
        self,
        engine: RolloutEngine,
        processor: PolicyProcessor,
        *,
        prompt_variant: str = "osworld",
        sampling: SamplingParams | None = None,
        generate_timeout_s: float = 300.0,
        context_window: tuple[int, int] | None = (5, 5),
    ) -> None:
        self.engine = engine
        self.context_window = context_window
        self.processor = processor
        self.prompt_variant = prompt_variant
        self.system_prompt = system_prompt(prompt_variant)
        self.sampling = sampling or SamplingParams(stop=("</tool_call>",))
        self.generate_timeout_s = generate_timeout_s
        self.active = 0  # episodes started and not closed: the requests a full round holds
        if hasattr(engine, "expected"):
            engine.expected = lambda: self.active

    @property
    def policy_version(self) -> int:
        """The version of the weights the engine serves now."""
        return self.engine.policy_version

    def start(self, instruction: str, solution: list[dict[str, Any]] | None) -> EpisodePlayer:
        """Begin an episode (the solution is not shown to a model)."""
        return _ModelEpisode(self, instruction)

    async def load_weights(self, checkpoint_uri: str, policy_version: int) -> None:
        """Load newer weights into the engine."""
        await self.engine.load_weights(checkpoint_uri, policy_version)

    async def close(self) -> None:
        """Release the engine."""
        await self.engine.close()


class _ModelEpisode:
    def __init__(self, player: ModelPlayer, instruction: str) -> None:
        self.player = player
        self.rendering = _Rendering(player, instruction)
        self.closed = False
        player.active += 1

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.player.active -= 1

    async def act(self, image: Any | None, observation: str) -> Reply:
        t0 = time.monotonic()
        ids, images = self.rendering.observe(image, observation)
        t1 = time.monotonic()
        request = GenerationRequest(ids, images, self.player.sampling)
        try:
            (result,) = await asyncio.wait_for(
                self.player.engine.generate([request]), self.player.generate_timeout_s
            )
        except TimeoutError as exc:
            raise EngineUnavailable(
                f"the engine gave no answer in {self.player.generate_timeout_s:g} s"
            ) from exc
        except PolicyError as exc:
            raise EngineUnavailable(f"the engine failed: {exc}") from exc
        t2 = time.monotonic()
        if result.finish_reason == "error":
            raise EngineUnavailable(f"the engine failed on this prompt: {result.error}")
        self.rendering.renderer.respond(result.token_ids)
        text = self.player.processor.tokenizer.decode(result.token_ids, skip_special_tokens=True)
        return Reply(
            text=text,
            ids=list(result.token_ids),
            logprobs=list(result.logprobs),
            finish_reason=result.finish_reason,
            policy_version=result.policy_version,
            prompt_tokens=len(ids),
            render_ms=(t1 - t0) * 1000,
            generate_ms=(t2 - t1) * 1000,
        )


class ScriptedPlayer:
    """Plays a task's reference solution; renders like a policy when given a processor."""

    def __init__(
        self,
        processor: PolicyProcessor | None = None,
        *,
        prompt_variant: str = "osworld",
        context_window: tuple[int, int] | None = (5, 5),
    ) -> None:
        self.processor = processor
        self.context_window = context_window
        self.prompt_variant = prompt_variant
        self.system_prompt = system_prompt(prompt_variant)
        self.sampling = SamplingParams(temperature=1.0)
        self.policy_version = 0

    def start(self, instruction: str, solution: list[dict[str, Any]] | None) -> EpisodePlayer:
        """Begin an episode that plays `solution` (a task without one is answered with fail)."""
        return _ScriptedEpisode(self, instruction, list(solution or [{"action": "fail"}]))

    async def load_weights(self, checkpoint_uri: str, policy_version: int) -> None:
        """Record the version (a script has no weights)."""
        self.policy_version = policy_version

    async def close(self) -> None:
        """Nothing to release."""


class _ScriptedEpisode:
    def __init__(self, player: ScriptedPlayer, instruction: str, actions: list[dict]) -> None:
        self.player = player
        self.rendering = _Rendering(player, instruction)
        self.actions = actions
        self.turn = 0

    def close(self) -> None:
        """Nothing to release."""

    async def act(self, image: Any | None, observation: str) -> Reply:
        t0 = time.monotonic()
        ids, _ = self.rendering.observe(image, observation)
        # Past the end of the script (a refused final action, say): declare it done.
        action = self.actions[self.turn] if self.turn < len(self.actions) else {"action": "done"}
        self.turn += 1
        text = format_action(action, response_style(self.player.prompt_variant))
        response_ids: list[int] = []
        renderer = self.rendering.renderer
        if renderer is not None:
            before = len(renderer.rendered.ids)
            renderer.respond(response=text)
            # What the renderer appended with mask 1: the text's ids and <|im_end|>.
            piece = renderer.rendered.ids[before:]
            mask = renderer.rendered.loss_mask[before:]
            response_ids = [i for i, m in zip(piece, mask, strict=True) if m]
        return Reply(
            text=text,
            ids=response_ids,
            policy_version=self.player.policy_version,
            prompt_tokens=len(ids),
            render_ms=(time.monotonic() - t0) * 1000,
        )


def build_player(
    policy: str,
    *,
    engine: str = "transformers",
    engine_url: str | None = None,
    tokenizer: str = "tiny",
    prompt_variant: str | None = None,
    sampling: SamplingParams | None = None,
    generate_timeout_s: float = 300.0,
    dtype: str = "float32",
    device: str = "cpu",
    max_batch: int = 8,
    context_window: tuple[int, int] | None = (5, 5),
    batch_wait_s: float = 3.0,
) -> Player:
    """Build a player from CLI-style settings.

    `policy`: "scripted", "tiny", "smollm2" or a model folder. A scripted player renders
    with `tokenizer`'s processor ("none" skips rendering). `engine`: "transformers" (CPU
    default), "vllm-http" (with `engine_url`) or "vllm" (in-process, GPU). The prompt
    variant defaults to the policy folder's card (runtime/policy/card.py), else "osworld".
    """
    from runtime.errors import ConfigError
    from runtime.policy.model import resolve_policy
    from runtime.policy.processor import load_processor

    if prompt_variant is None:
        card = _card(policy, tokenizer)
        prompt_variant = (card.prompt_variant if card else None) or "osworld"
    if policy == "scripted":
        processor = None if tokenizer == "none" else load_processor(resolve_policy(tokenizer))
        return ScriptedPlayer(
            processor, prompt_variant=prompt_variant, context_window=context_window
        )
    sampling = sampling or SamplingParams(stop=("</tool_call>",))
    if engine == "transformers":
        from runtime.engines.transformers_engine import TransformersEngine

        rollout_engine: Any = TransformersEngine(
            policy, dtype=dtype, device=device, max_batch=max_batch, batch_wait_s=batch_wait_s
        )
        processor = rollout_engine.policy.processor
    elif engine == "vllm-http":
        from runtime.engines.vllm_engine import VLLMHTTPConfig, VLLMHTTPEngine

        if not engine_url:
            raise ConfigError("--engine vllm-http needs --engine-url http://host:port")
        rollout_engine = VLLMHTTPEngine(VLLMHTTPConfig(engine_url))
        processor = load_processor(resolve_policy(policy))
    elif engine == "vllm":
        from runtime.engines.vllm_async import VLLMAsyncEngine

        path = resolve_policy(policy)
        rollout_engine = VLLMAsyncEngine(path, dtype=dtype)
        processor = load_processor(path)
    else:
        raise ConfigError(f"unknown engine {engine!r}: transformers, vllm-http or vllm")
    return ModelPlayer(
        rollout_engine,
        processor,
        prompt_variant=prompt_variant,
        sampling=sampling,
        generate_timeout_s=generate_timeout_s,
        context_window=context_window,
    )


def _card(policy: str, tokenizer: str = "none") -> Any:
    """The card of a policy's folder (a scripted policy's: its tokenizer's), if it has one."""
    from runtime.policy.card import read_card
    from runtime.policy.model import resolve_policy

    spec = tokenizer if policy == "scripted" else policy
    if spec in ("none", "scripted"):
        return None
    return read_card(resolve_policy(spec))


def default_observe(policy: str, player: Player, tokenizer: str = "none") -> str:
    """What a policy observes unless told: its card's mode, else a11y text for a text-only
    policy and the screenshot for a vision-language one."""
    card = _card(policy, tokenizer)
    if card is not None and card.observe:
        return str(card.observe)
    text_only = player.processor is not None and not player.processor.is_multimodal
    return "a11y" if text_only else "screenshot"
