"""The judge service: a consumer group on `trajectory-complete` writing one `reward` each.

Run by `scalecua judge` (cli/rollout_commands.py); `scalecua up` and `scalecua eval` run one too.

It scores from the evaluation manifest the rollout worker collected on the live desktop
(runtime.envs.tasks.collect): built-in OSWorld metrics run in-process, a task's own judge
code (`sandboxed_judge`) in the judge sandbox. The status rules (environment failures have
no score, incomplete episodes get −0.2) are in scoring.py. A reward's dedup id is
(trajectory, judge version), so rejudging history under a new version adds rewards next to
the old ones instead of replacing them.

Missing or corrupt artifacts make an unscored reward with the reason (the group still
completes); the blob store being unreachable is an infrastructure failure the runner
retries.
"""

from __future__ import annotations

import logging

import orjson

from consumers.judge.scoring import JudgeConfig, reward_for
from runtime.blobstore import BlobStore
from runtime.bus import Record
from runtime.envs.tasks.collect import score_collected
from runtime.errors import BlobCorrupt, BlobNotFound, StorageError, TaskError
from runtime.processor import Output, Processor
from topics.events import TrajectoryComplete

__all__ = ["Judge", "JudgeConfig", "score_trajectory"]

log = logging.getLogger(__name__)


async def score_trajectory(
    trajectory: TrajectoryComplete, blobs: BlobStore
) -> tuple[float | None, str]:
    """Return (metric score, reason) of a finished trajectory; None when it cannot be scored."""
    if trajectory.status == "error":
        return None, trajectory.error or "environment failure"
    ref = trajectory.artifacts.get("evaluation")
    if not ref:
        return None, "the trajectory carries no evaluation artifact"
    try:
        manifest = orjson.loads(await blobs.aget(ref))
        evaluation = await score_collected(manifest, blobs)
    except (BlobNotFound, BlobCorrupt) as exc:
        return None, f"artifacts unusable: {exc}"
    except (TaskError, orjson.JSONDecodeError) as exc:
        return None, f"evaluation manifest unusable: {exc}"
    except OSError as exc:  # the store itself: retried by the runner, never a score
        raise StorageError(f"reading artifacts of {trajectory.trajectory_id}: {exc}") from exc
    errors = "; ".join(f"{f.func}: {f.error}" for f in evaluation.funcs if f.error)
    reason = evaluation.reason + (f" ({errors})" if errors else "")
    return evaluation.score, reason


class Judge(Processor):
    """Processor that turns every finished trajectory into a reward."""

    topics = ["trajectory-complete"]
    dedup = True  # a redelivered trajectory is scored once per run of the judge

    def __init__(self, config: JudgeConfig, blobs: BlobStore) -> None:
        self.config = config
        self.name = config.group_id
        self.blobs = blobs
        self.judged = 0

    async def process(self, record: Record) -> list[Output]:
        """Score one trajectory and return its reward."""
        trajectory: TrajectoryComplete = record.event
        score, reason = await score_trajectory(trajectory, self.blobs)
        reward = reward_for(trajectory, score, reason, self.config)
        self.judged += 1
        log.debug("%s: %s %.2f (%s)", trajectory.trajectory_id, trajectory.status, reward.score,
                  reward.reason)  # fmt: skip
        return [Output("reward", reward)]
