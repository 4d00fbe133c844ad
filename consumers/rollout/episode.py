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
import contextlib
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

__all__ = [
    "EpisodeConfig",
    "EpisodeResult",
    "run_episode",
    "TERMINAL_STATUS",
    "Emit",
    "complete_with_error",
    "error_result",
]

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


@dataclass(frozen=True)
class _Episode:
    """What every phase of one episode shares, fixed before its first turn."""

    controller: Any
    request: RolloutRequest
    task: Task
    player: Player
    blobs: BlobStore
    emit: Emit
    trajectory_id: str
    config: EpisodeConfig
    common: dict[str, Any]  # the fields every event of this episode repeats
    system_ref: str


@dataclass
class _Progress:
    """What the turns so far leave for the collection and the completion."""

    status: str = "max_steps"  # stays so while the episode may take another turn
    error: str | None = None
    answer: str | None = None
    actions: list[dict[str, Any]] = field(default_factory=list)  # played, for the evaluation
    versions: list[int] = field(default_factory=list)  # the policy version of every reply


@dataclass(frozen=True)
class _Stored:
    """One observation in the blob store, and the image the policy is shown."""

    shot_ref: str
    image: Any  # the screenshot fitted to `image_max_side`, or None in text-only modes
    a11y_ref: str | None
    text_ref: str | None


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
    setup_slots: asyncio.Semaphore | None = None,
) -> EpisodeResult:
    """Play one request on a desktop and emit its steps and completion; see the module doc.

    `setup_slots`, shared by a worker's episodes, bounds how many run their task's setup
    (app starts, the CPU burst of an episode) at once.
    """
    started = time.monotonic()
    common = _common_fields(request, attempt, worker_id)
    system_ref = await _put(blobs, player.system_prompt.encode(), config.blob_timeout_s)
    try:
        async with setup_slots or contextlib.nullcontext():
            await run_setup(controller, task)
    except TaskError as exc:  # the task's own setup is broken: no episode to play
        result = EpisodeResult(trajectory_id, "error", 0, error=f"setup failed: {exc}")
        _complete(emit, request, result, common)
        return result
    episode = _Episode(
        controller, request, task, player, blobs, emit, trajectory_id, config, common, system_ref
    )
    session = player.start(task.instruction, solution)
    try:
        return await _play(episode, session, started)
    finally:
        session.close()


async def _play(episode: _Episode, session: Any, started: float) -> EpisodeResult:
    """The turns, the collection and the completion of one episode whose setup succeeded."""
    progress = _Progress()
    for step in range(episode.request.max_steps):
        await _turn(episode, session, step, progress)
        if progress.status != "max_steps":
            break
    session.close()  # no more turns: the engine need not wait for this episode's next one
    artifacts = await _collect_artifacts(episode, progress)
    versions = progress.versions
    result = EpisodeResult(
        episode.trajectory_id,
        progress.status,
        len(versions),
        error=progress.error,
        answer=progress.answer,
        artifacts=artifacts,
        seconds=time.monotonic() - started,
        policy_versions=(
            (versions[0], versions[-1]) if versions else (episode.player.policy_version,) * 2
        ),
    )
    _complete(episode.emit, episode.request, result, episode.common)
    return result


async def _turn(episode: _Episode, session: Any, step: int, progress: _Progress) -> None:
    """One turn: observe, store, generate, act, and emit its rollout-step.

    The engine failing ends the episode (status `error`) without a rollout-step.
    """
    t0 = time.monotonic()
    obs = await _observe(episode.controller, episode.config)
    t1 = time.monotonic()
    stored = await _store_observation(episode.blobs, obs, episode.config)
    t2 = time.monotonic()
    try:
        reply = await session.act(stored.image, obs.get("text", ""))
    except EngineUnavailable as exc:
        progress.status, progress.error = "error", f"engine unavailable: {exc}"
        return
    progress.versions.append(reply.policy_version)
    t3 = time.monotonic()
    action, action_error = await _act(episode.controller, reply.text, progress)
    t4 = time.monotonic()
    event = _step_event(episode, step, reply, stored, action, action_error, (t0, t1, t2, t3, t4))
    episode.emit("rollout-step", event)


async def _store_observation(
    blobs: BlobStore, obs: dict[str, Any], config: EpisodeConfig
) -> _Stored:
    """Write the observation's blobs and, in image modes, fit the screenshot for the policy."""
    shot_put = _put(blobs, obs["screenshot"], config.blob_timeout_s)
    if config.observe in IMAGE_MODES:
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
    return _Stored(shot_ref, image, a11y_ref, text_ref)


async def _act(
    controller: Any, text: str, progress: _Progress
) -> tuple[dict[str, Any] | None, str | None]:
    """Parse a reply and play its action: the action and its error, either may be None.

    A terminal action sets the episode's status (and answer), which ends its turns.
    """
    parsed = parse_action(text)
    if isinstance(parsed, ParseError):
        return None, str(parsed)
    outcome = await controller.step(parsed)
    progress.actions.append(parsed)
    if not outcome.ok:
        return parsed, f"the desktop refused the action: {outcome.error}"
    if outcome.terminal:
        progress.status = TERMINAL_STATUS.get(outcome.action, "done")
        progress.answer = outcome.answer
    return parsed, None


def _step_event(
    episode: _Episode, step: int, reply: Any, stored: _Stored,
    action: dict[str, Any] | None, action_error: str | None,
    marks: tuple[float, float, float, float, float],
) -> RolloutStep:  # fmt: skip
    """The rollout-step of one turn; `marks` are its phase boundaries (monotonic seconds)."""
    t0, t1, t2, t3, t4 = marks
    player = episode.player
    return RolloutStep(
        trajectory_id=episode.trajectory_id,
        step=step,
        policy_version=reply.policy_version,
        response_ids=reply.ids,
        response_logprobs=reply.logprobs,
        response_text=reply.text,
        action=action,
        action_error=action_error,
        observation_ref=stored.shot_ref,
        observation_size=list(stored.image.size) if stored.image is not None else [],
        a11y_ref=stored.a11y_ref,
        observation_text_ref=stored.text_ref,
        instruction=episode.task.instruction,
        prompt_variant=player.prompt_variant,
        system_prompt_ref=episode.system_ref,
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
        **episode.common,
    )


async def _collect_artifacts(episode: _Episode, progress: _Progress) -> dict[str, str]:
    """The evaluation (unless the episode already errored) and the final screenshot, as refs.

    A failed collection turns the episode into an error; a dead desktop propagates, unless
    the episode already errored (it may be why).
    """
    artifacts: dict[str, str] = {}
    timeout_s = episode.config.blob_timeout_s
    if progress.status != "error":
        try:
            manifest = await collect(
                episode.controller, episode.task, progress.actions, episode.blobs
            )
        except TaskError as exc:
            progress.status, progress.error = "error", f"evaluation could not be collected: {exc}"
        else:
            artifacts["evaluation"] = await _put(episode.blobs, orjson.dumps(manifest), timeout_s)
    try:
        final = await episode.controller.screenshot()
        artifacts["final_screenshot"] = await _put(episode.blobs, final, timeout_s)
    except DesktopError:
        if progress.status != "error":
            raise
    return artifacts


def _common_fields(request: RolloutRequest, attempt: int, worker_id: str) -> dict[str, Any]:
    """The fields every event of one episode repeats."""
    return {
        "task_id": request.task_id,
        "group_id": request.group_id,
        "request_id": request.trajectory(),
        "attempt": attempt,
        "worker_id": worker_id,
    }


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
    _complete(emit, request, result, _common_fields(request, attempt, worker_id))
