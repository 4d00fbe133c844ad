"""Visual Context Segmentation (the paper's §3.4, Algorithm 1 and appendix C.1): pure, no I/O.

A trajectory becomes training items of bounded context. Three modes, for comparison:

- `vcs` (K, Δ): one token-id stream per trajectory — `ids`, `loss_mask`, `logprobs`.
    1. the initial history (system prompt, first observation) is tokenised with mask 0;
    2. each turn appends its observation as a token diff (mask 0) and its response ids
       (mask 1, with their rollout logprobs);
    3. when the stream holds K+Δ observations and another arrives, the stream is saved as
       a segment, the oldest Δ observations are replaced by a short text note, and the
       history is re-tokenised into a fresh stream, all mask 0 (those responses were
       trained in the segment just saved);
    4. the final stream is saved too.
  Every response token has mask 1 in exactly one segment; no segment holds more than K+Δ
  observations; a trajectory of T turns gives 1 + ⌈max(0, T − K − Δ) / Δ⌉ segments. The
  stream is driven by the policy's `HistoryRenderer` with `window=(K, Δ)` — the renderer
  the rollout worker generates with — so each segment is exactly a context the engine saw
  (when the rollout used the same window) and equals a fresh `render_history` of its turns.
- `stepwise` (K, Δ): one item per turn, holding the prompt the windowed rollout was given
  for that turn (K+1 to K+Δ observations after the first K+Δ turns) and
  mask 1 on that turn's response. Each item is exactly a context the engine saw, as in
  `vcs`, but the shared history is run through the model once per turn rather than once
  per segment: the baseline VCS saves on (the paper's step-wise training).
- `trajectory`: one item, every observation, mask 1 on every response.

Text-only (accessibility-tree) trajectories segment the same way: an observation is the
screenshot and/or the observation text of a turn.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from runtime.policy.processor import PolicyProcessor
from runtime.policy.render import HistoryRenderer

__all__ = ["MODES", "TurnRecord", "Segment", "segment_trajectory", "expected_segments"]

MODES = ("vcs", "stepwise", "trajectory")


@dataclass(frozen=True)
class TurnRecord:
    """One logged turn: what the policy observed and the ids and logprobs it sampled."""

    screenshot: Any | None  # anything with .size == (w, h); rendering reads only the size
    observation: str
    response_ids: Sequence[int]
    logprobs: Sequence[float] = ()  # one per response id; empty when nothing was sampled
    image_ref: str | None = None  # the screenshot's blob ref, carried into the segment
    policy_version: int = 0


@dataclass
class Segment:
    """One training item: a token stream with its loss mask and rollout logprobs."""

    index: int
    ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    image_turns: list[int] = field(default_factory=list)  # turns whose screenshots it holds
    last_turn: int = 0  # it renders turns 0..last_turn
    omit_before: int = 0  # its turns before this one appear without observations
    trained_turns: list[int] = field(default_factory=list)  # turns with mask-1 tokens here
    prompt_tokens: list[int] = field(default_factory=list)  # per trained turn: its prompt length

    @property
    def trained_tokens(self) -> int:
        """How many tokens this segment trains."""
        return sum(self.loss_mask)


def expected_segments(turns: int, mode: str, k: int = 5, delta: int = 5) -> int:
    """How many items a trajectory of `turns` turns gives in a mode."""
    if turns == 0:
        return 0
    if mode == "stepwise":
        return turns
    if mode == "trajectory":
        return 1
    return 1 + math.ceil(max(0, turns - k - delta) / delta)


def _respond(
    renderer: HistoryRenderer, turn: TurnRecord
) -> tuple[list[int], list[int], list[float]]:
    """Append a turn's response; return the ids appended, their mask and aligned logprobs."""
    start = len(renderer.rendered.ids)
    renderer.respond(turn.response_ids)
    ids, mask = renderer.rendered.ids[start:], renderer.rendered.loss_mask[start:]
    sampled = iter(turn.logprobs)
    return ids, mask, [next(sampled, 0.0) if m else 0.0 for m in mask]


def segment_trajectory(
    system_prompt: str,
    instruction: str,
    turns: Sequence[TurnRecord],
    processor: PolicyProcessor,
    mode: str = "vcs",
    k: int = 5,
    delta: int = 5,
) -> list[Segment]:
    """Cut a trajectory into training items (see the module docstring)."""
    if mode not in MODES:
        raise ValueError(f"unknown segmentation mode {mode!r}; choose one of {MODES}")
    for i, turn in enumerate(turns):
        if turn.logprobs and len(turn.logprobs) != len(turn.response_ids):
            raise ValueError(f"turn {i}: {len(turn.logprobs)} logprobs for "
                             f"{len(turn.response_ids)} response ids")  # fmt: skip
    if mode == "stepwise":
        return _stepwise(system_prompt, instruction, turns, processor, (k, delta))
    window = (k, delta) if mode == "vcs" else None
    renderer = HistoryRenderer(system_prompt, instruction, processor, window=window)
    segments: list[Segment] = []
    start = renderer.rendered.ids  # the system prompt: the stream begins with it, mask 0
    current = Segment(index=0, ids=list(start), loss_mask=[0] * len(start))
    current.logprobs = [0.0] * len(start)
    for t, turn in enumerate(turns):
        cut = renderer.would_cut()
        if cut:
            segments.append(current)
            current = Segment(index=len(segments))
        before = len(renderer.rendered.ids)
        prompt = renderer.observe(turn.screenshot, turn.observation)
        if cut:  # a fresh stream: the re-tokenised history, nothing in it trained again
            current.ids = list(prompt.ids)
            current.loss_mask = [0] * len(prompt.ids)
            current.logprobs = [0.0] * len(prompt.ids)
            current.omit_before = renderer.omit_before
            current.image_turns = [
                i for i in range(renderer.omit_before, t) if turns[i].screenshot is not None
            ]
        else:
            diff = prompt.ids[before:]
            current.ids += diff
            current.loss_mask += [0] * len(diff)
            current.logprobs += [0.0] * len(diff)
        if turn.screenshot is not None:
            current.image_turns.append(t)
        ids, mask, logprobs = _respond(renderer, turn)
        current.ids += ids
        current.loss_mask += mask
        current.logprobs += logprobs
        current.last_turn = t
        current.trained_turns.append(t)
        current.prompt_tokens.append(len(prompt.ids))
    if turns:
        segments.append(current)
    return segments


def _stepwise(
    system_prompt: str,
    instruction: str,
    turns: Sequence[TurnRecord],
    processor: PolicyProcessor,
    window: tuple[int, int],
) -> list[Segment]:
    """One item per turn: the prompt the windowed rollout was given for it, then its response."""
    renderer = HistoryRenderer(system_prompt, instruction, processor, window=window)
    items = []
    for t, turn in enumerate(turns):
        prompt = renderer.observe(turn.screenshot, turn.observation)
        ids, mask, logprobs = _respond(renderer, turn)
        n = len(prompt.ids)
        items.append(
            Segment(
                index=t,
                ids=prompt.ids + ids,
                loss_mask=[0] * n + mask,
                logprobs=[0.0] * n + logprobs,
                image_turns=[
                    i for i in range(renderer.omit_before, t + 1) if turns[i].screenshot is not None
                ],
                last_turn=t,
                omit_before=renderer.omit_before,
                trained_turns=[t],
                prompt_tokens=[n],
            )
        )
    return items
