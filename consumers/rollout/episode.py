"""The one episode loop: a rollout request played on a desktop, every turn written to the log.

    setup → [observe → render → generate → parse → act → rollout-step] × ≤ max_steps
          → collect the evaluation on the live desktop → trajectory-complete

Each turn's event carries what the policy was shown (screenshot, accessibility tree and the
observation text, all as blob refs), its response ids and logprobs, the parsed action or
the parse error, and the time spent in each phase. A malformed response is a failed turn,
not a crash. The desktop failing (DesktopError) propagates, so the worker can retry the
request on a fresh desktop; the engine failing ends the episode as status `error`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from consumers.rollout.players import EngineUnavailable, Player
from runtime.blobstore import BlobStore
from runtime.envs.desktop.wrappers import TERMINAL_LOG_DIR
from runtime.envs.tasks.collect import collect
from runtime.envs.tasks.model import Task
from runtime.envs.tasks.setup import run_setup
from runtime.errors import DesktopError, StorageError, TaskError
from runtime.policy.actions import ParseError, parse_action
from runtime.policy.observation import (
    IMAGE_MODES,
    TEXT_MODES,
    compact_observation,
    fit_image,
    linearize_a11y,
    text_observation,
)
from topics.events import Event, RolloutRequest, RolloutStep, TrajectoryComplete

__all__ = ["EpisodeConfig", "EpisodeResult", "run_episode", "TERMINAL_STATUS"]

TERMINAL_STATUS = {"done": "done", "fail": "fail", "answer": "answer"}
# The newest terminal session's last bytes, only while a terminal window is open.
_TERMINAL_TAIL = (
    f"pgrep -x xterm >/dev/null && f=$(ls -t {TERMINAL_LOG_DIR}/*.log 2>/dev/null | head -n 1) "
    '&& [ -n "$f" ] && tail -c 16384 "$f"'
)


@dataclass(frozen=True)
class EpisodeConfig:
    """How episodes observe and how long their phases may take."""

    observe: str = "screenshot"  # "screenshot", "a11y" or "compact" (text only), or "both"
    image_max_side: int = 1280  # the screenshot is shrunk to fit this before the policy sees it
    blob_timeout_s: float = 30.0  # a blob-store write that takes longer is an outage


@dataclass
class EpisodeResult:
    """How an episode ended."""

    trajectory_id: str
    status: str
    steps: int
    error: str | None = None
    answer: str | None = None
    artifacts: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    policy_versions: tuple[int, int] = (0, 0)


Emit = Callable[[str, Event], None]


async def _put(blobs: BlobStore, data: bytes, timeout_s: float) -> str:
    try:
        return await asyncio.wait_for(blobs.aput(data), timeout_s)
    except TimeoutError as exc:
        raise StorageError(f"the blob store took over {timeout_s:g} s to store a blob") from exc
    except OSError as exc:
        raise StorageError(f"the blob store failed: {exc}") from exc


async def _observe(controller: Any, config: EpisodeConfig) -> dict[str, Any]:
    """Fetch the raw observation: screenshot, and for text modes the tree and terminal tail."""
    screenshot, size = await controller.screenshot(), await controller.screen_size()
    out: dict[str, Any] = {"screenshot": screenshot, "size": size}
    if config.observe in TEXT_MODES:
        compact = config.observe == "compact"
        tree, tail = await asyncio.gather(
            controller.accessibility_tree(compact=compact),
            controller.execute(_TERMINAL_TAIL, shell=True),
        )
        out["a11y"] = tree
        log = ((tail.get("output") or "") if tail.get("returncode") == 0 else "").encode() or None
        if compact:
            out["text"] = compact_observation(tree, size, log)
        else:
            out["text"] = text_observation(linearize_a11y(tree, size), log)
    return out


async def run_episode(
    controller: Any,
    request: RolloutRequest,
    task: Task,
    player: Player,
    blobs: BlobStore,
    emit: Emit,
    *,
    trajectory_id: str,
    attempt: int,
    config: EpisodeConfig,
    worker_id: str = "",
    solution: list[dict[str, Any]] | None = None,
) -> EpisodeResult:
    """Play one request on a desktop and emit its steps and completion; see the module doc."""
    started = time.monotonic()
    common = {
        "task_id": request.task_id,
        "group_id": request.group_id,
        "request_id": request.trajectory(),
        "attempt": attempt,
        "worker_id": worker_id,
    }
    system_ref = await _put(blobs, player.system_prompt.encode(), config.blob_timeout_s)
    try:
        await run_setup(controller, task)
    except TaskError as exc:  # the task's own setup is broken: no episode to play
        result = EpisodeResult(trajectory_id, "error", 0, error=f"setup failed: {exc}")
        _complete(emit, request, result, common)
        return result
    episode = player.start(task.instruction, solution)
    try:
        return await _play(
            controller, request, task, player, episode, blobs, emit, trajectory_id, config,
            common, started, system_ref,
        )  # fmt: skip
    finally:
        episode.close()


async def _play(
    controller: Any, request: RolloutRequest, task: Task, player: Player, episode: Any,
    blobs: BlobStore, emit: Emit, trajectory_id: str, config: EpisodeConfig,
    common: dict[str, Any], started: float, system_ref: str,
) -> EpisodeResult:  # fmt: skip
    """The turns, the collection and the completion of one episode whose setup succeeded."""
    actions: list[dict[str, Any]] = []
    status, error, answer = "max_steps", None, None
    versions: list[int] = []
    use_image = config.observe in IMAGE_MODES
    for step in range(request.max_steps):
        t0 = time.monotonic()
        obs = await _observe(controller, config)
        t1 = time.monotonic()
        shot_put = _put(blobs, obs["screenshot"], config.blob_timeout_s)
        if use_image:
            # Decoding and shrinking the PNG (10-15 ms; PIL releases the GIL) runs in a
            # thread beside the blob write, not on the event loop every episode shares.
            shot_ref, image = await asyncio.gather(
                shot_put, asyncio.to_thread(fit_image, obs["screenshot"], config.image_max_side)
            )
        else:
            shot_ref, image = await shot_put, None
        a11y_ref = text_ref = None
        if "a11y" in obs:
            a11y_ref = await _put(blobs, obs["a11y"].encode(), config.blob_timeout_s)
            text_ref = await _put(blobs, obs["text"].encode(), config.blob_timeout_s)
        t2 = time.monotonic()
        try:
            reply = await episode.act(image, obs.get("text", ""))
        except EngineUnavailable as exc:
            status, error = "error", f"engine unavailable: {exc}"
            break
        versions.append(reply.policy_version)
        t3 = time.monotonic()
        parsed = parse_action(reply.text)
        action_error = None
        action = None
        if isinstance(parsed, ParseError):
            action_error = str(parsed)
        else:
            action = parsed
            outcome = await controller.step(action)
            actions.append(action)
            if not outcome.ok:
                action_error = f"the desktop refused the action: {outcome.error}"
            elif outcome.terminal:
                status = TERMINAL_STATUS.get(outcome.action, "done")
                answer = outcome.answer
        t4 = time.monotonic()
        emit(
            "rollout-step",
            RolloutStep(
                trajectory_id=trajectory_id,
                step=step,
                policy_version=reply.policy_version,
                response_ids=reply.ids,
                response_logprobs=reply.logprobs,
                response_text=reply.text,
                action=action,
                action_error=action_error,
                observation_ref=shot_ref,
                observation_size=list(image.size) if image is not None else [],
                a11y_ref=a11y_ref,
                observation_text_ref=text_ref,
                instruction=task.instruction,
                prompt_variant=player.prompt_variant,
                system_prompt_ref=system_ref,
                temperature=player.sampling.temperature,
                top_p=player.sampling.top_p,
                context_window=list(player.context_window or ()),
                prompt_tokens=reply.prompt_tokens,
                finish_reason=reply.finish_reason,
                latency_ms=(time.monotonic() - t0) * 1000,
                timings_ms={
                    "observe": round((t1 - t0) * 1000, 2),
                    "blobs": round((t2 - t1) * 1000, 2),
                    "render": round(reply.render_ms, 2),
                    "generate": round(reply.generate_ms, 2),
                    "act": round((t4 - t3) * 1000, 2),
                    "bus": round((time.monotonic() - t4) * 1000, 3),
                },
                **common,
            ),
        )
        if status != "max_steps":
            break
    episode.close()  # no more turns: the engine need not wait for this episode's next one
    artifacts: dict[str, str] = {}
    if status != "error":
        try:
            manifest = await collect(controller, task, actions, blobs)
        except TaskError as exc:
            status, error = "error", f"evaluation could not be collected: {exc}"
        else:
            artifacts["evaluation"] = await _put(
                blobs, orjson.dumps(manifest), config.blob_timeout_s
            )
    try:
        final = await controller.screenshot()
        artifacts["final_screenshot"] = await _put(blobs, final, config.blob_timeout_s)
    except DesktopError:
        if status != "error":
            raise
    result = EpisodeResult(
        trajectory_id,
        status,
        len(versions),
        error=error,
        answer=answer,
        artifacts=artifacts,
        seconds=time.monotonic() - started,
        policy_versions=(versions[0], versions[-1]) if versions else (player.policy_version,) * 2,
    )
    _complete(emit, request, result, common)
    return result


def _complete(emit: Emit, request: RolloutRequest, result: EpisodeResult, common: dict) -> None:
    emit(
        "trajectory-complete",
        TrajectoryComplete(
            trajectory_id=result.trajectory_id,
            status=result.status,
            num_steps=result.steps,
            group_size=request.group_size,
            sample_index=request.sample_index,
            max_steps=request.max_steps,
            policy_version=result.policy_versions[0],
            policy_version_last=result.policy_versions[1],
            answer=result.answer,
            artifacts=result.artifacts,
            error=result.error,
            seconds=round(result.seconds, 3),
            **common,
        ),
    )


def error_result(trajectory_id: str, reason: str) -> EpisodeResult:
    """An episode that could not be played (unknown task, the desktop died twice)."""
    return EpisodeResult(trajectory_id, "error", 0, error=reason)


def complete_with_error(
    emit: Emit, request: RolloutRequest, result: EpisodeResult, *, attempt: int, worker_id: str
) -> None:
    """Emit the trajectory-complete of an episode that could not be played."""
    common = {
        "task_id": request.task_id,
        "group_id": request.group_id,
        "request_id": request.trajectory(),
        "attempt": attempt,
        "worker_id": worker_id,
    }
    _complete(emit, request, result, common)
