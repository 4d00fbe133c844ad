"""kill -9 of a `scalecua sample` process, three times, while an unfinished group holds the
commit of a partition that also carries rewards of finished groups: every group is counted
in task-stats exactly once, and once the last group finishes the commits reach the end."""

from __future__ import annotations

from pathlib import Path

from producers.task_import import publish_tasks
from runtime.config import BusSettings
from tests.consumers.sampler.harness import (
    SamplerProcess,
    commits_reach,
    latest_stats,
    reward_on,
    write_rewards,
)
from topics.events import TaskEvent

# The sampler only folds here: it requests no batches (its batches are tested elsewhere).
ARGS = ("--n", "2", "--max-batches", "0")


async def test_three_kill_9_restarts_count_every_group_once_and_leave_no_commit_pinned(
    bus_settings: BusSettings, cli_env: dict[str, str], tmp_path: Path
) -> None:
    tasks = ["hold", "whole", "split", "marker"]
    await publish_tasks(bus_settings, [TaskEvent(task_id=t, task={"id": t}) for t in tasks])
    # On reward[1]: `hold` (unfinished: its other reward comes at the end) pins the commit;
    # after it, `whole` lies entirely above that commit and `split` straddles it (its other
    # reward is on reward[0], whose commit moves past it once the group is folded).
    first = [
        reward_on(1, "hold", "g-hold", 0),
        reward_on(1, "whole", "g-whole", 0),
        reward_on(1, "whole", "g-whole", 1),
        reward_on(0, "split", "g-split", 0),
        reward_on(1, "split", "g-split", 1),
    ]
    where = await write_rewards(bus_settings, first)  # trajectory -> (partition, offset)
    split0 = where[first[3].trajectory_id]
    sampler = SamplerProcess(cli_env, tmp_path / "sampler-1.log", *ARGS)
    try:
        await latest_stats(bus_settings, lambda s: {"whole", "split"} <= set(s))
        # The window: reward[0] is committed past `split`, reward[1] is still held by `hold`.
        offsets = await commits_reach(bus_settings, {0: split0[1] + 1})
        assert offsets[0] > split0[1] and offsets[1] == where[first[0].trajectory_id][1]
        for restart in range(1, 4):
            sampler.kill9()
            sampler = SamplerProcess(cli_env, tmp_path / f"sampler-{restart + 1}.log", *ARGS)
            # A complete group written after the restart: once it is folded, the restarted
            # sampler has read everything before it on reward[1] (the re-read groups).
            marker = [reward_on(1, "marker", f"g-marker-{restart}", i) for i in range(2)]
            where |= await write_rewards(bus_settings, marker)
            await latest_stats(
                bus_settings,
                lambda s, n=restart: any(x.attempts == n for x in s.get("marker", [])),
            )  # fmt: skip
        # `hold` gets its last reward: every group is finished, nothing holds a commit.
        where |= await write_rewards(bus_settings, [reward_on(2, "hold", "g-hold", 1)])
        await latest_stats(bus_settings, lambda s: "hold" in s)
        ends: dict[int, int] = {}
        for partition, offset in where.values():
            ends[partition] = max(ends.get(partition, 0), offset + 1)
        offsets = await commits_reach(bus_settings, ends)
        assert sampler.terminate() == 0, sampler.text()[-3000:]
    finally:
        sampler.close()

    # Not pinned: the commits reached the end of every partition the rewards went to.
    assert all(offsets[p] >= end for p, end in ends.items()), (offsets, ends)
    # Each group once: attempts rise by one per record, and the latest counts every group once.
    stats = await latest_stats(bus_settings, lambda s: "hold" in s and "marker" in s)
    expected = {"hold": 1, "whole": 1, "split": 1, "marker": 3}
    for task, records in stats.items():
        assert [r.attempts for r in records] == list(range(1, len(records) + 1)), task
        latest = records[-1]
        assert (latest.attempts, latest.rollouts) == (expected[task], 2 * expected[task]), task
    assert set(stats) == set(expected)
