"""Render an agent's chat history to token ids, a loss mask and the image list.

The conversation is ChatML, as Qwen2.5-VL's chat template writes it:

    <|im_start|>system\\n{system prompt}<|im_end|>\\n
    <|im_start|>user\\n<|vision_start|><|image_pad|>xN<|vision_end|>{instruction}\\n{observation}<|im_end|>\\n
    <|im_start|>assistant\\n{response}<|im_end|>\\n
    <|im_start|>user\\n<|vision_start|><|image_pad|>xN<|vision_end|>{observation}<|im_end|>\\n
    ...

Each message is tokenised on its own and the pieces concatenated. Every piece boundary
sits next to a special token, which the tokenizer splits out before BPE, so this equals
tokenising the whole text at once (`retokenize`, the reference), except where a response
starts with a newline. It also lets a rollout append each new turn as a token diff
(`HistoryRenderer`) instead of re-tokenising the whole history, and lets sampled response
ids enter the history verbatim: the trainer then sees exactly the tokens the engine sampled.

The loss mask is 1 on response tokens: the sampled ids when a turn carries `response_ids`,
or the response text plus its `<|im_end|>` when it carries only text. A closing
`<|im_end|>` the template adds after a sampled response cut at max tokens is not sampled,
so its mask is 0.

A context window (Visual Context Segmentation, the paper's §3.4): `omit_before=i` renders
turns before i without their observation — no screenshot, no observation text, only the
`OMITTED` note (the first turn keeps its instruction) — so a long episode holds a bounded
number of images. `HistoryRenderer(window=(K, Δ))` keeps at most K+Δ observations: when a
new one would exceed that, it omits the oldest Δ and re-renders the history once, then
goes back to token-diff appends. The segmenter replays the same renderer, so every
training segment is exactly a context the rollout engine was given.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from runtime.errors import PolicyError
from runtime.policy.processor import PolicyProcessor

__all__ = [
    "OMITTED",
    "Turn",
    "Rendered",
    "render_history",
    "render_response",
    "render_text",
    "retokenize",
    "HistoryRenderer",
]

OMITTED = "[earlier observation omitted]"  # stands in for an observation outside the window


@dataclass(frozen=True)
class Turn:
    """One agent step: what the policy observed and, once it answered, its response."""

    screenshot: Any | None = None  # anything with .size == (width, height), e.g. a PIL image
    observation: str = ""  # text shown with the screenshot (or instead of it: an a11y tree)
    response: str | None = None  # None while the policy has not answered yet
    response_ids: tuple[int, ...] | None = None  # the sampled ids, used verbatim when given


@dataclass
class Rendered:
    """Token ids, loss mask (1 on response tokens) and the images the ids refer to, in order."""

    ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    images: list[Any] = field(default_factory=list)

    def extend(self, other: Rendered) -> None:
        """Append another rendering in place."""
        self.ids.extend(other.ids)
        self.loss_mask.extend(other.loss_mask)
        self.images.extend(other.images)

    def copy(self) -> Rendered:
        """An independent copy."""
        return Rendered(list(self.ids), list(self.loss_mask), list(self.images))


def _encode(processor: PolicyProcessor, text: str) -> list[int]:
    # The Rust tokenizer behind a fast HF tokenizer gives the same ids as calling the HF
    # wrapper, at a fraction of its per-call overhead (this runs several times per turn).
    backend = getattr(processor.tokenizer, "_tokenizer", None)
    if backend is not None and hasattr(backend, "encode_batch"):
        return backend.encode(text, add_special_tokens=False).ids
    return list(processor.tokenizer(text, add_special_tokens=False)["input_ids"])


def _user_text(turn: Turn, instruction: str | None, omitted: bool = False) -> str:
    observation = OMITTED if omitted else turn.observation
    if instruction is None:
        return observation
    if not observation:
        return instruction
    return f"{instruction}\n{observation}"


# Texts every prompt repeats (the system prompt, the chat markers), encoded once per processor:
# encoding a system prompt of a few hundred tokens was a fifth of a segmenter's time.
_FIXED_CAP = 64  # distinct fixed texts kept per processor


def _encode_fixed(processor: PolicyProcessor, text: str) -> list[int]:
    known = processor.fixed_ids
    ids = known.get(text)
    if ids is None:
        ids = tuple(_encode(processor, text))
        if len(known) >= _FIXED_CAP:
            known.pop(next(iter(known)))
        known[text] = ids
    return list(ids)


def _system_piece(system_prompt: str, processor: PolicyProcessor) -> Rendered:
    tok = processor.tokenizer
    for marker in ("<|im_start|>", "<|im_end|>"):
        token_id = tok.convert_tokens_to_ids(marker)
        if token_id is None or token_id == tok.unk_token_id:
            raise PolicyError(f"rendering needs a ChatML tokenizer; this one has no {marker} token")
    ids = _encode_fixed(processor, f"<|im_start|>system\n{system_prompt}<|im_end|>\n")
    return Rendered(ids, [0] * len(ids), [])


def _user_piece(
    turn: Turn,
    instruction: str | None,
    processor: PolicyProcessor,
    cache: dict | None = None,
    omitted: bool = False,
) -> Rendered:
    """The user message of a turn and the assistant header that opens the reply."""
    ids = _encode_fixed(processor, "<|im_start|>user\n")
    images = []
    if turn.screenshot is not None and not omitted:
        width, height = turn.screenshot.size
        key = (width, height)
        if cache is not None and key in cache:
            vision = cache[key]
        else:
            count = processor.image_token_count(width, height)
            tok = processor.tokenizer
            vision = [
                tok.convert_tokens_to_ids(processor.vision_start),
                *([processor.image_token_id] * count),
                tok.convert_tokens_to_ids(processor.vision_end),
            ]
            if cache is not None:
                cache[key] = vision
        ids += vision
        images.append(turn.screenshot)
    text = _user_text(turn, instruction, omitted)
    ids += _encode(processor, f"{text}<|im_end|>\n<|im_start|>assistant\n")
    return Rendered(ids, [0] * len(ids), images)


def _response_piece(turn: Turn, processor: PolicyProcessor) -> Rendered:
    """The assistant's reply, its closing <|im_end|> and the newline after it."""
    im_end = processor.tokenizer.convert_tokens_to_ids("<|im_end|>")
    newline = _encode_fixed(processor, "\n")
    if turn.response_ids is not None:
        ids = list(turn.response_ids)
        mask = [1] * len(ids)
        if not ids or ids[-1] != im_end:
            ids.append(im_end)
            mask.append(0)
    else:
        ids = _encode(processor, turn.response or "") + [im_end]
        mask = [1] * len(ids)
    return Rendered(ids + newline, mask + [0] * len(newline), [])


def render_response(response_ids: Sequence[int], processor: PolicyProcessor) -> Rendered:
    """The piece a sampled response adds after an open assistant header (mask 1 on its ids)."""
    return _response_piece(Turn(response="", response_ids=tuple(response_ids)), processor)


def _check_turns(turns: Sequence[Turn]) -> None:
    for i, turn in enumerate(turns[:-1]):
        if turn.response is None and turn.response_ids is None:
            raise PolicyError(f"turn {i} has no response but is not the last turn")


def render_history(
    system_prompt: str,
    instruction: str,
    turns: Sequence[Turn],
    processor: PolicyProcessor,
    *,
    omit_before: int = 0,
) -> Rendered:
    """Render a history; a last turn without a response ends with the assistant header open.

    Turns before `omit_before` appear without their observation (see OMITTED).
    """
    _check_turns(turns)
    out = _system_piece(system_prompt, processor)
    cache: dict = {}
    for i, turn in enumerate(turns):
        instruction_i = instruction if i == 0 else None
        out.extend(_user_piece(turn, instruction_i, processor, cache, i < omit_before))
        if turn.response is not None or turn.response_ids is not None:
            out.extend(_response_piece(turn, processor))
    return out


def render_text(
    system_prompt: str, instruction: str, turns: Sequence[Turn], omit_before: int = 0
) -> tuple[list[dict], list[Any]]:
    """The same history as chat messages (for a chat template) and its images."""
    messages: list[dict] = [{"role": "system", "content": system_prompt}]
    images = []
    for i, turn in enumerate(turns):
        content: list[dict] = []
        omitted = i < omit_before
        if turn.screenshot is not None and not omitted:
            content.append({"type": "image"})
            images.append(turn.screenshot)
        text = _user_text(turn, instruction if i == 0 else None, omitted)
        content.append({"type": "text", "text": text})
        messages.append({"role": "user", "content": content})
        if turn.response is not None:
            messages.append({"role": "assistant", "content": turn.response})
    return messages, images


def retokenize(
    system_prompt: str,
    instruction: str,
    turns: Sequence[Turn],
    processor: PolicyProcessor,
    *,
    omit_before: int = 0,
) -> list[int]:
    """Reference ids: the chat template's full text tokenised at once, image pads expanded."""
    _check_turns(turns)
    messages, images = render_text(system_prompt, instruction, turns, omit_before)
    pending = bool(turns) and turns[-1].response is None
    text = processor.tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=pending
    )
    pad = processor.image_token
    ids: list[int] = []
    parts = text.split(pad)
    for i, part in enumerate(parts):
        ids += _encode(processor, part)
        if i < len(images):
            width, height = images[i].size
            ids += [processor.image_token_id] * processor.image_token_count(width, height)
    return ids


class HistoryRenderer:
    """Grows a rendered history turn by turn by appending token diffs (ids equal render_history's).

    With `window=(K, Δ)` it holds at most K+Δ observations: the observation that would make
    K+Δ+1 first omits the oldest Δ and re-renders the history (`cuts` counts these).
    """

    def __init__(
        self,
        system_prompt: str,
        instruction: str,
        processor: PolicyProcessor,
        window: tuple[int, int] | None = None,
    ) -> None:
        if window is not None and (window[0] < 1 or window[1] < 1):
            raise PolicyError(f"a context window needs K >= 1 and delta >= 1, not {window}")
        self.system_prompt = system_prompt
        self.instruction = instruction
        self.processor = processor
        self.window = window
        self.rendered = _system_piece(system_prompt, processor)
        self.history: list[Turn] = []  # answered turns, as rendered
        self.omit_before = 0  # turns before this index are rendered without observations
        self.cuts = 0
        self._pending: Turn | None = None
        self._vision_cache: dict = {}

    @property
    def turns(self) -> int:
        """How many turns have been answered."""
        return len(self.history)

    def would_cut(self) -> bool:
        """Whether the next observe() omits old observations and re-renders."""
        if self.window is None:
            return False
        held = len(self.history) - self.omit_before
        return held >= self.window[0] + self.window[1]

    def observe(self, screenshot: Any | None = None, observation: str = "") -> Rendered:
        """Append the next observation and open the reply; return the prompt to generate from."""
        if self._pending is not None:
            raise PolicyError("observe() called twice without respond() in between")
        if self.would_cut():
            self.omit_before += self.window[1]
            self.rendered = render_history(
                self.system_prompt, self.instruction, self.history, self.processor,
                omit_before=self.omit_before,
            )  # fmt: skip
            self.cuts += 1
        turn = Turn(screenshot=screenshot, observation=observation)
        instruction = self.instruction if not self.history else None
        self.rendered.extend(_user_piece(turn, instruction, self.processor, self._vision_cache))
        self._pending = turn
        return self.rendered.copy()  # a snapshot: later turns must not change a sent prompt

    def respond(
        self, response_ids: Sequence[int] | None = None, response: str | None = None
    ) -> None:
        """Append the policy's reply to the open turn: sampled ids, or text."""
        if self._pending is None:
            raise PolicyError("respond() called without an open turn")
        ids = tuple(response_ids) if response_ids is not None else None
        reply = Turn(response=response if ids is None else (response or ""), response_ids=ids)
        self.rendered.extend(_response_piece(reply, self.processor))
        pending = self._pending
        self.history.append(
            Turn(pending.screenshot, pending.observation, reply.response, reply.response_ids)
        )
        self._pending = None
