"""Training data for trainer tests: rendered histories of the tiny policy as SegmentReady events.

Screenshots are small random PNGs in a real blob store; responses are random text tokens whose
logprobs are the policy's own (recomputed exactly as the rollout engine reports them).
"""

from __future__ import annotations

import asyncio
import io
import subprocess
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from PIL import Image

from runtime.blobstore import BlobStore
from runtime.bus import EventProducer
from runtime.config import BusSettings
from runtime.policy.logprobs import recompute_logprobs
from runtime.policy.model import Policy
from runtime.policy.render import Turn, render_history
from topics.events import Reward, SegmentReady

JUDGE = "osworld-metrics-v1"
SYSTEM = "You operate a computer with one tool call per turn."
INSTRUCTION = "Sum the column."


@dataclass
class Rollout:
    """One trajectory's events."""

    trajectory_id: str
    segments: list[SegmentReady]
    reward: Reward


def screenshot_png(seed: int, size: tuple[int, int] = (224, 224)) -> bytes:
    """A random RGB screenshot as PNG bytes."""
    pixels = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


def make_rollout(
    policy: Policy,
    blobs: BlobStore | None,
    *,
    group_id: str,
    sample_index: int,
    score: float,
    group_size: int = 2,
    scored: bool = True,
    turns: int = 2,
    segments: int = 1,
    response_tokens: int = 4,
    image_size: tuple[int, int] | None = (112, 112),
    temperature: float = 0.8,
    policy_version: int = 0,
    judge_version: str = JUDGE,
    seed: int = 0,
    trajectory_id: str | None = None,
) -> Rollout:
    """A trajectory of `turns` turns cut into 1 (all turns) or `turns` (one per turn) segments.

    Screenshots are stored as 224x224 PNGs and shown at `image_size` (resized like the rollout
    worker does), or left out when `image_size` is None (a text-only rollout).
    """
    rng = np.random.default_rng(seed)
    trajectory_id = trajectory_id or f"{group_id}/{sample_index}@0{seed:06x}"
    refs, shots = [], []
    for turn in range(turns):
        if image_size is None:
            refs.append(None)
            shots.append(None)
            continue
        data = screenshot_png(seed * 1000 + turn)
        refs.append(blobs.put(data))
        image = Image.open(io.BytesIO(data)).convert("RGB")
        shots.append(image.resize(image_size, Image.BILINEAR))
    responses = [
        tuple(int(x) for x in rng.integers(300, 20_000, response_tokens)) for _ in range(turns)
    ]
    history = [
        Turn(screenshot=shots[t], observation=f"turn {t}", response_ids=responses[t])
        for t in range(turns)
    ]
    cuts = [turns] if segments == 1 else list(range(1, turns + 1))
    events = []
    for index, last in enumerate(cuts):
        rendered = render_history(SYSTEM, INSTRUCTION, history[:last], policy.processor)
        mask = list(rendered.loss_mask)
        if segments > 1:  # one turn trained per segment: only the last response
            first_trained = _last_response_start(mask)
            mask = [m if i >= first_trained else 0 for i, m in enumerate(mask)]
        positions = [i for i, m in enumerate(mask) if m]
        lps = recompute_logprobs(
            policy.model, policy.processor, rendered.ids, rendered.images, temperature, positions
        )
        logprobs = [0.0] * len(mask)
        for position, lp in zip(positions, lps, strict=True):
            logprobs[position] = lp
        n_images = sum(1 for s in shots[:last] if s is not None)
        events.append(
            SegmentReady(
                trajectory_id=trajectory_id,
                segment_index=index,
                input_ids=rendered.ids,
                loss_mask=mask,
                logprobs=logprobs,
                image_refs=[r for r in refs[:last] if r is not None],
                image_sizes=[list(image_size)] * n_images if image_size else [],
                task_id="task",
                group_id=group_id,
                group_size=group_size,
                sample_index=sample_index,
                request_id=f"{group_id}/{sample_index}",
                policy_version=policy_version,
                num_segments=len(cuts),
                is_last=index == len(cuts) - 1,
                mode="stepwise" if segments > 1 else "trajectory",
                temperature=temperature,
                trained_tokens=sum(mask),
            )  # fmt: skip
        )
    reward = Reward(
        trajectory_id=trajectory_id, task_id="task", group_id=group_id, group_size=group_size,
        score=score, scored=scored, judge_version=judge_version, sample_index=sample_index,
        request_id=f"{group_id}/{sample_index}", policy_version=policy_version,
        status="done" if scored else "error",
    )  # fmt: skip
    return Rollout(trajectory_id, events if scored else [], reward)


def _last_response_start(mask: list[int]) -> int:
    end = max(i for i, m in enumerate(mask) if m)
    start = end
    while start > 0 and mask[start - 1]:
        start -= 1
    return start


def make_group(
    policy: Policy, blobs: BlobStore | None, group_id: str, scores: list[float | None], **kw: object
) -> list[Rollout]:
    """A group of rollouts with these scores (None: an environment failure)."""
    return [
        make_rollout(
            policy,
            blobs,
            group_id=group_id,
            sample_index=i,
            group_size=len(scores),
            score=s if s is not None else 0.0,
            scored=s is not None,
            seed=zlib.crc32(f"{group_id}/{i}".encode()) % 100_000,
            **kw,
        )  # fmt: skip
        for i, s in enumerate(scores)
    ]


async def publish(
    settings: BusSettings, rollouts: list[Rollout], rewards_first: bool = False
) -> None:
    """Write rollouts' segments and rewards and wait for the broker's acknowledgements."""
    async with EventProducer(settings) as producer:
        futures = []
        for rollout in rollouts:
            items = [("segment-ready", s) for s in rollout.segments]
            items.append(("reward", rollout.reward))
            if rewards_first:
                items.reverse()
            for topic_name, event in items:
                futures.append(await producer.send(topic_name, event))
        await producer.wait_acks(futures)


async def wait_while_running(
    done: Callable[[], bool], procs: list[subprocess.Popen], timeout: float, what: str
) -> None:
    """Wait until `done()` holds, failing if a trainer process exits first or time runs out."""
    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(done):
        for proc in procs:
            assert proc.poll() is None, f"a trainer exited early ({proc.returncode}) before {what}"
        assert time.monotonic() < deadline, f"no {what} after {timeout} s"
        await asyncio.sleep(0.01)
