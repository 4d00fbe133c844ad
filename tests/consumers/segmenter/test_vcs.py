"""Visual Context Segmentation's invariants on many random trajectories, with the real tokenizer."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from consumers.segmenter.vcs import TurnRecord, expected_segments, segment_trajectory
from runtime.policy.model import resolve_policy
from runtime.policy.processor import PolicyProcessor, load_processor
from runtime.policy.render import HistoryRenderer, Turn, render_history, retokenize

SYSTEM = "You operate a desktop. Answer with one tool call."
WORDS = ["click", "the", "Save", "button", "ß", "日本語", "✓", "cell", "B7", "=SUM(B2:B6)", "  ",
         "\t", "ok", "[]", "{}", '"x"', "...", "\n", "é", "tab"]  # fmt: skip


@dataclass(frozen=True)
class Size:
    """A screenshot stand-in: rendering reads only the size."""

    size: tuple[int, int]


@pytest.fixture(scope="module")
def processor() -> PolicyProcessor:
    """The tiny policy's real Qwen2 tokenizer and Qwen2.5-VL image processor."""
    return load_processor(resolve_policy("tiny"))


def _text(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(WORDS) + rng.choice(["", " "]) for _ in range(n)).strip("\n")


def _trajectory(rng: random.Random, processor: PolicyProcessor, images: bool) -> list[TurnRecord]:
    im_end = processor.tokenizer.convert_tokens_to_ids("<|im_end|>")
    turns = []
    for t in range(rng.randint(1, 28)):
        text = _text(rng, rng.randint(1, 12)) or "ok"
        ids = processor.tokenizer(text, add_special_tokens=False)["input_ids"]
        if rng.random() < 0.8:  # most responses end with <|im_end|>; some were cut at max tokens
            ids = [*ids, im_end]
        size = (rng.choice([112, 224, 336]), rng.choice([112, 168, 224]))
        turns.append(
            TurnRecord(
                screenshot=Size(size) if images or rng.random() < 0.2 else None,
                observation=_text(rng, rng.randint(0, 8)),
                response_ids=ids,
                logprobs=[-rng.random() for _ in ids],
                policy_version=t // 10,
            )
        )
    return turns


def _history(turns: list[TurnRecord], upto: int) -> list[Turn]:
    return [
        Turn(x.screenshot, x.observation, None, tuple(x.response_ids)) for x in turns[: upto + 1]
    ]


@pytest.mark.parametrize("mode", ["vcs", "stepwise", "trajectory"])
@pytest.mark.parametrize("images", [True, False], ids=["screenshots", "text-only"])
def test_invariants_hold_on_random_trajectories(
    processor: PolicyProcessor, mode: str, images: bool
) -> None:
    rng = random.Random(f"{mode}-{images}")
    for trial in range(25):
        k, delta = rng.randint(1, 5), rng.randint(1, 5)
        instruction = _text(rng, 6) or "do it"
        turns = _trajectory(rng, processor, images)
        segments = segment_trajectory(SYSTEM, instruction, turns, processor, mode, k, delta)
        assert len(segments) == expected_segments(len(turns), mode, k, delta), (trial, len(turns))

        # Every response token is trained in exactly one segment, with its rollout logprob.
        trained = [i for s in segments for i, m in zip(s.ids, s.loss_mask, strict=True) if m]
        logprobs = [
            lp for s in segments for lp, m in zip(s.logprobs, s.loss_mask, strict=True) if m
        ]
        assert trained == [i for x in turns for i in x.response_ids]
        assert logprobs == [lp for x in turns for lp in x.logprobs]
        assert all(
            lp == 0.0
            for s in segments
            for lp, m in zip(s.logprobs, s.loss_mask, strict=True)
            if not m
        )

        for s in segments:
            assert len(s.ids) == len(s.loss_mask) == len(s.logprobs)
            # Bounded context: at most K+Δ observations (vcs and stepwise), and step-wise's
            # items hold at least K of them once the trajectory has had K turns.
            held = s.last_turn + 1 - s.omit_before
            if mode in ("vcs", "stepwise"):
                assert held <= k + delta
            if mode == "stepwise":
                assert held >= min(k, s.last_turn + 1)
            # The segment is a fresh rendering of the history it stands for, and equals the
            # whole text tokenised at once: no BPE drift at the diff boundaries.
            fresh = render_history(
                SYSTEM, instruction, _history(turns, s.last_turn), processor,
                omit_before=s.omit_before,
            )  # fmt: skip
            assert s.ids == fresh.ids
            im_end = processor.tokenizer.convert_tokens_to_ids("<|im_end|>")
            if all(x.response_ids[-1:] == [im_end] for x in turns[: s.last_turn + 1]):
                as_text = [
                    Turn(x.screenshot, x.observation,
                         processor.tokenizer.decode(list(x.response_ids[:-1])))
                    for x in turns[: s.last_turn + 1]
                ]  # fmt: skip
                reference = retokenize(
                    SYSTEM, instruction, as_text, processor, omit_before=s.omit_before
                )
                assert s.ids == reference
            image_token = processor.image_token_id
            images_in = sum(1 for i in s.ids if i == processor.tokenizer.convert_tokens_to_ids(
                processor.vision_start))  # fmt: skip
            assert images_in == len(s.image_turns) and (images_in == 0 or image_token in s.ids)


@pytest.mark.parametrize("mode", ["vcs", "stepwise"])
def test_segments_are_the_contexts_the_windowed_rollout_renderer_produced(
    processor: PolicyProcessor, mode: str
) -> None:
    """With the same window, each item's prompt part for a turn is what the engine was given."""
    rng = random.Random(7)
    turns = _trajectory(rng, processor, images=True)
    while len(turns) < 20:
        turns = _trajectory(rng, processor, images=True)
    renderer = HistoryRenderer(SYSTEM, "task", processor, window=(5, 5))
    prompts = []
    for x in turns:
        prompts.append(renderer.observe(x.screenshot, x.observation).ids)
        renderer.respond(x.response_ids)
    segments = segment_trajectory(SYSTEM, "task", turns, processor, mode, 5, 5)
    for s in segments:
        for t, length in zip(s.trained_turns, s.prompt_tokens, strict=True):
            assert length == len(prompts[t])
            assert s.ids[: len(prompts[t])] == prompts[t], f"turn {t} in segment {s.index}"


def test_paper_settings_cut_a_fifty_turn_episode_into_nine_segments(
    processor: PolicyProcessor,
) -> None:
    rng = random.Random(50)
    turns = [
        TurnRecord(Size((1280, 800)), "obs", [rng.randint(100, 5000) for _ in range(20)],
                   [-0.5] * 20)
        for _ in range(50)
    ]  # fmt: skip
    segments = segment_trajectory(SYSTEM, "task", turns, processor, "vcs", 5, 5)
    assert len(segments) == 1 + (50 - 10) // 5 == 9
    assert [len(s.image_turns) for s in segments] == [10] + [10] * 8
    assert [len(s.trained_turns) for s in segments] == [10] + [5] * 8
    # Step-wise trains each turn on its own windowed context: 50 items, 370 screenshots.
    items = segment_trajectory(SYSTEM, "task", turns, processor, "stepwise", 5, 5)
    assert [len(s.image_turns) for s in items] == list(range(1, 11)) + [6, 7, 8, 9, 10] * 8
    assert [s.trained_turns for s in items] == [[t] for t in range(50)]
    with pytest.raises(ValueError, match="logprobs"):
        bad = [TurnRecord(None, "o", [1, 2], [-0.1])]
        segment_trajectory(SYSTEM, "task", bad, processor)
