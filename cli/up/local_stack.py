"""The local stack behind `scalecua up`: the whole online-RL loop in one process.

    broker ─ tasks ─▶ sampler ─ rollout-requests ─▶ rollout worker (desktops, policy)
                        ▲                               │ rollout-step, trajectory-complete
                   reward, policy-updates               ▼
                        │            judge ◀────────────┤
                        │              │ reward         ▼
                        └──────────────┴──────▶ segmenter ─ segment-ready ─▶ trainer
                                                                              │
          archiver (every topic → Parquet)   dashboard (reads, never commits)  ▼ policy-updates

Every service is the same class its own command runs (`scalecua rollout|judge|segment|
sample|train|archive|dashboard`), here sharing one event loop; each still talks to the
others only through the log. One iteration is one trainer step (B groups of n rollouts);
the stack stops once the trainer has taken `iterations` steps, or on Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import time
from collections import defaultdict
from dataclasses import dataclass, field
from shlex import quote
from typing import Any

import orjson

from cli.bus_tools import start_embedded
from cli.up.console import UpConsole
from consumers.archiver.service import Archiver, ArchiverConfig
from runtime.broker import EmbeddedBroker, create_topics
from runtime.config import BusSettings, broker_state_file, home_dir
from runtime.errors import ConfigError
from runtime.runs import RunWatch, ensure_run, log_ends, log_history, run_resolver
from runtime.service import ServiceRunner
from runtime.service_logs import ServiceLogs, as_service
from topics.events import RunStarted

__all__ = ["UpConfig", "run_up"]

_console = UpConsole(0, live=False)  # the run's console; run_up sets the real one


def _say(msg: str) -> None:
    _console.say(msg)


@dataclass
class UpConfig:
    """What `scalecua up` runs: the loop's size, and each service's own settings."""

    iterations: int = 3  # trainer steps, then stop
    desktops: int = 2
    tasks: list[str] | None = None  # built-in task ids imported into `tasks` (None: all)
    families: list[str] | None = None  # instead: train instances of these task families
    pool: int = 24  # ...this many of them
    warm_steps: int = 0  # SFT steps on scripted episodes before RL (0: none)
    warm_episodes: int = 8  # scripted episodes per SFT step
    warm_lr: float = 2e-5
    archive: str | None = None  # default $SCALECUA_HOME/archive
    checkpoints: str | None = None  # default $SCALECUA_HOME/checkpoints/<run>
    bootstrap: str | None = None  # an external cluster instead of the embedded broker
    resume: str | None = None  # an archived run to re-seed the embedded broker from
    dashboard_port: int | None = 8080  # None: no dashboard; 0: any free port
    # Each service's settings, as its own command parses them ([rollout], [train], ... tables).
    services: dict[str, argparse.Namespace] = field(default_factory=dict)


async def _start_broker(
    bootstrap: str | None, resume: str | None, archive: str
) -> tuple[str, EmbeddedBroker | None]:
    explicit = bootstrap or os.environ.get("SCALECUA_BOOTSTRAP")
    if explicit:
        if resume:
            raise ConfigError("--resume re-seeds a fresh embedded broker; a cluster keeps its log")
        await create_topics(explicit)
        settings = BusSettings(bootstrap=explicit)
        run = await ensure_run(settings, origin="cluster")
        _refuse_history(explicit, run, await log_history(settings))
        _say(f"using the Kafka cluster at {explicit} (run {run.run_id})")
        return explicit, None
    broker, _ = await start_embedded(None, resume, archive)
    broker_state_file().write_bytes(
        orjson.dumps({"bootstrap": broker.bootstrap, "pid": os.getpid()})
    )
    _say(f"embedded broker at {broker.bootstrap}, run {broker.run_id} "
         "(other shells: scalecua tail reward)")  # fmt: skip
    return broker.bootstrap, broker


def _refuse_history(bootstrap: str, run: RunStarted, history: dict[str, int]) -> None:
    """Refuse a log that already holds a run's records: `up` would take them for its own."""
    # Every reader of the stack starts at the log's beginning (or its groups' commits there):
    # the console counted another trainer's updates as iterations, the worker played
    # another trainer's newest policy, the services resumed another run's groups. What a
    # resumed log was re-seeded with (`scalecua broker --resume`) is where its run starts.
    written = {t: n - run.seeded.get(t, 0) for t, n in history.items()}
    held = ", ".join(f"{n} {name}" for name, n in written.items() if n > 0)
    if not held:
        return
    raise ConfigError(
        f"the log at {bootstrap} already holds run {run.run_id}'s records ({held}): `up` runs "
        "a training run of its own and would take them for its own. Give it a log of its own "
        "(an empty cluster, or no --bootstrap: the embedded broker; `--resume` re-seeds one "
        "from the archive), or go on with that run by starting its services (scalecua rollout, "
        f"judge, segment, sample and train --bootstrap {bootstrap})"
    )


def _checkpoint_root(explicit: str | None, run_id: str, resumed_from: str | None) -> str:
    """Checkpoints of this run's lineage: a resumed run continues its source's folder."""
    if explicit:
        return explicit
    root = home_dir() / "checkpoints"
    mine = root / run_id
    if resumed_from and (root / resumed_from).exists() and not mine.exists():
        root.mkdir(parents=True, exist_ok=True)
        mine.symlink_to((root / resumed_from).resolve(), target_is_directory=True)
    return str(mine)


class _Progress:
    """Follows `reward`, `trajectory-complete` and `policy-updates`: one row per iteration."""

    TOPICS = ("reward", "trajectory-complete", "policy-updates")

    def __init__(
        self,
        settings: BusSettings,
        iterations: int,
        judge_version: str,
        starts: dict[Any, int] | None = None,
    ) -> None:
        self.settings = settings
        self.iterations = iterations
        self.judge_version = judge_version
        # Where the run's own records begin (log_ends before any service wrote): what is
        # below is another run's (a resumed run's re-seeded update is not an iteration).
        self.starts = starts or {}
        self.run_check_interval_s = 5.0  # how often the log's run is re-read
        self.started = time.monotonic()
        self.rows: list[dict[str, Any]] = []
        self.rewards: list[Any] = []  # every reward of this judge version
        self._since: list[Any] = []  # rewards since the last update
        self.played = 0  # trajectories completed
        self.trajectories_by_version: dict[int, int] = defaultdict(int)
        self.last_uri: str | None = None
        self._wanted = float("inf")  # shown() waits for this version
        self._shown = asyncio.Event()
        self._last_at = self.started
        self.warm_steps = 0  # versions up to this one are the warm start's SFT steps (planned,
        # then as taken: the RL trainer's first version follows the last one taken)
        self.warm_rows: list[dict[str, Any]] = []

    async def run(self) -> None:
        """Read the topics from the run's start until cancelled, and a new log from its own."""
        from runtime.bus import EventConsumer

        topics = list(self.TOPICS)
        watch = await RunWatch(self.settings).start()
        try:
            async with EventConsumer(self.settings, topics, group_id=None) as consumer:
                for tp in await consumer.read_all(*topics):
                    if self.starts.get(tp):
                        consumer.raw.seek(tp, self.starts[tp])
                checked = time.monotonic()
                while True:
                    self._read(await consumer.getmany(timeout_ms=500))
                    if time.monotonic() - checked >= self.run_check_interval_s:
                        checked = time.monotonic()
                        # A restarted broker's log starts at 0 again: positions of the old
                        # one would skip its first records (the console stood still).
                        if await watch.verdict() == RunWatch.CHANGED:
                            watch.accept()
                            for tp in consumer.raw.assignment():
                                consumer.raw.seek(tp, 0)
        finally:
            await watch.stop()

    def _read(self, records: list[Any]) -> None:
        from topics.events import PolicyUpdate, Reward, TrajectoryComplete

        for record in records:
            event = record.event
            if isinstance(event, Reward) and event.judge_version == self.judge_version:
                self.rewards.append(event)
                self._since.append(event)
                self.trajectories_by_version[event.policy_version] += 1
            elif isinstance(event, TrajectoryComplete):
                self.played += 1
            elif isinstance(event, PolicyUpdate) and event.policy_version > 0:
                self._iteration(event)
                if self.last_version >= self._wanted:
                    self._shown.set()
        _console.counts(played=self.played, scored=len(self.rewards))

    def _elapsed(self) -> str:
        seconds = int(time.monotonic() - self.started)
        return f"{seconds // 60}m{seconds % 60:02d}s"

    @property
    def last_version(self) -> int:
        """The newest policy version read and shown (warm start or RL)."""
        return max((r["policy_version"] for r in [*self.warm_rows, *self.rows]), default=0)

    async def shown(self, version: int, timeout_s: float = 15.0) -> None:
        """Wait until `version`'s update has been read and shown, or `timeout_s` seconds."""
        self._wanted = version
        if self.last_version < version:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._shown.wait(), timeout_s)

    def _iteration(self, update: Any) -> None:
        if any(r["policy_version"] == update.policy_version for r in self.rows):
            return  # a re-announcement (trainer restart)
        scored = [r for r in self._since if r.scored]
        self._since = []
        m = update.metrics
        now = time.monotonic()
        row = {
            "iteration": len(self.rows) + 1,
            "label": str(len(self.rows) + 1),
            "policy_version": update.policy_version,
            **_trained_on(update.policy_version, m, scored),
            "step_time_s": round(m.get("step_time_s", 0.0), 1),
            "loss": round(m.get("loss", 0.0), 5),
            "groups": int(m.get("groups", 0)),
            "groups_all_equal": int(m.get("groups_all_equal", 0)),
            "elapsed_s": round(now - self.started, 1),
            "duration_s": round(now - self._last_at, 1),
        }
        self._last_at = now
        self.last_uri = update.checkpoint_uri
        _console.counts(version=update.policy_version)
        reward = "n/a" if row["mean_reward"] is None else f"{row['mean_reward']:+.2f}"
        passed = "n/a" if row["pass_rate"] is None else f"{row['pass_rate']:.0%}"
        if update.policy_version <= self.warm_steps:
            # Its rollouts are the scripted episodes the step trained on, not rewards since.
            row.update(phase="warm start", label=f"warm {update.policy_version}",
                       rollouts=int(m.get("rollouts", 0)), pass_rate=None, mean_reward=None)  # fmt: skip
            self.warm_rows.append(row)
            _console.iteration(row, (
                f"warm start step {update.policy_version}: SFT on {row['rollouts']} scripted "
                f"episodes, loss {row['loss']}, step {row['step_time_s']}s; policy "
                f"v{update.policy_version}; {self._elapsed()}"
            ))  # fmt: skip
            return
        row["iteration"] = len(self.rows) + 1
        row["phase"] = "rl"
        self.rows.append(row)
        _console.iteration(row, (
            f"iteration {row['iteration']}/{self.iterations}: policy v{update.policy_version} "
            f"from {row['rollouts']} rollouts in {row['groups']} groups "
            f"({row['groups_all_equal']} all-equal; played by "
            f"v{','.join(map(str, row['rollout_versions'])) or '-'}): reward {reward}, pass "
            f"{passed}; step {row['step_time_s']}s, loss {row['loss']}; {self._elapsed()}"
        ))  # fmt: skip


def _trained_on(version: int, metrics: dict[str, float], since: list[Any]) -> dict[str, Any]:
    """What a step trained on: its groups' rollouts, their rewards and the versions that
    played them (from the step's metrics; else the rewards scored since the last update)."""
    if "pass_rate" in metrics and "reward_mean" in metrics:
        lo, hi = int(metrics.get("lag_min", 0)), int(metrics.get("lag_max", 0))
        return {
            "rollouts": int(metrics.get("rollouts", 0)),
            "mean_reward": round(metrics["reward_mean"], 3),
            "pass_rate": round(metrics["pass_rate"], 3),
            # a step turns version - 1 into version; a rollout `lag` behind was played by
            "rollout_versions": list(range(max(0, version - 1 - hi), version - lo)),
        }
    n = len(since)
    return {
        "rollouts": n,
        "mean_reward": round(sum(r.score for r in since) / n, 3) if n else None,
        "pass_rate": round(sum(r.score >= 1.0 for r in since) / n, 3) if n else None,
        "rollout_versions": sorted({r.policy_version for r in since}),
    }


async def _start_dashboard(
    stack: contextlib.AsyncExitStack, settings: BusSettings, port: int, mu: float, sigma: float
) -> str:
    """Serve the dashboard on `port`, or on any free port when that one is taken."""
    from consumers.dashboard.service import serve_dashboard
    from consumers.dashboard.state import DashboardConfig

    config = DashboardConfig(mu=mu, sigma=sigma)
    try:
        return await stack.enter_async_context(serve_dashboard(settings, port=port, config=config))
    except ConfigError as exc:
        if port == 0:
            raise
        _say(f"dashboard: {exc}; using a free port instead")
        return await stack.enter_async_context(serve_dashboard(settings, port=0, config=config))


async def run_up(
    config: UpConfig, console: UpConsole | None = None, logs: ServiceLogs | None = None
) -> int:
    """Run the whole loop until `iterations` trainer steps, Ctrl-C or a failed service.

    `console` tells a person what happens (default: plain lines on stderr); `logs`, when
    given, gets a folder of the run's own for the services' log files.
    """
    global _console
    _console = console or UpConsole(config.iterations)
    _console.start()
    try:
        return await _run_up(config, logs)
    finally:
        _console.stop()


async def _run_up(config: UpConfig, logs: ServiceLogs | None) -> int:
    from cli.rollout_commands import rollout_setup
    from cli.sample_commands import sampler_config
    from cli.segment_commands import segmenter_config
    from cli.train_commands import rank_threads, trainer_config
    from consumers.judge.service import Judge, JudgeConfig
    from consumers.rollout.service import rollout_service
    from consumers.sampler.service import sampler_service
    from consumers.segmenter.service import Segmenter
    from consumers.trainer.service import trainer_service
    from runtime.blobstore import open_blob_store
    from runtime.envs.tasks.builtin import builtin_ids

    svc = config.services
    rollout_args, train_args = svc["rollout"], svc["train"]
    if rollout_args.policy == "scripted":
        raise ConfigError("`up` trains the policy it plays: use tiny, smollm2 or a model folder")
    if rollout_args.context[0] <= 0:
        raise ConfigError("`up` segments with the rollout's context window: set K > 0")
    unknown = sorted(set(config.tasks or []) - set(builtin_ids()))
    if unknown:
        raise ConfigError(f"not built-in tasks: {', '.join(unknown)}")
    started = time.monotonic()
    archive = config.archive or str(home_dir() / "archive")
    boot, broker = await _start_broker(config.bootstrap, config.resume, archive)
    settings = BusSettings(bootstrap=boot)
    blobs = open_blob_store()
    run = await ensure_run(settings)
    log_dir = home_dir() / "runs" / run.run_id / "logs"
    if logs is not None:
        logs.open(log_dir)
        _say(f"service logs: {quote(str(log_dir))}/<service>.log (warnings and errors also here)")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    archiver = Archiver(ArchiverConfig(root=archive), run_resolver(settings))
    starts = await log_ends(settings, _Progress.TOPICS)
    progress = _Progress(settings, config.iterations, train_args.judge_version, starts)
    tasks: dict[str, asyncio.Task] = {}
    runners: dict[str, ServiceRunner] = {}
    outcome, url, checkpoints = "failed", None, None
    try:
        async with contextlib.AsyncExitStack() as stack:

            def start(name: str, runner: ServiceRunner) -> None:
                runners[name] = runner
                tasks[name] = asyncio.create_task(runner.run(install_signal_handlers=False))

            start("archiver", ServiceRunner(archiver, settings, metrics_interval_s=60))
            await asyncio.wait_for(runners["archiver"].ready.wait(), 60)
            _say(f"archiver writing every topic to {quote(archive)}")
            ids = await _publish_pool(settings, config)

            judge_args = svc["judge"]
            judge_config = JudgeConfig(
                judge_args.judge_version, judge_args.incomplete_reward, judge_args.group
            )
            start("judge", ServiceRunner(Judge(judge_config, blobs), settings,
                                         metrics_interval_s=60))  # fmt: skip

            player, rollout_config = rollout_setup(rollout_args)
            k, delta = rollout_args.context
            segmenter = Segmenter(segmenter_config(svc["segment"], k, delta), player.processor,
                                  blobs)  # fmt: skip
            start("segmenter", ServiceRunner(segmenter, settings, metrics_interval_s=60))
            if config.dashboard_port is not None:
                url = await _start_dashboard(stack, settings, config.dashboard_port,
                                             svc["sample"].mu, svc["sample"].sigma)  # fmt: skip
                _say(f"dashboard: {url}")
            tasks["progress"] = asyncio.create_task(progress.run())

            trainer_cfg, options = trainer_config(train_args)
            checkpoints = _checkpoint_root(
                config.checkpoints or train_args.checkpoints, run.run_id, run.resumed_from
            )
            warm_steps = 0
            progress.warm_steps = config.warm_steps
            if config.warm_steps > 0:
                warm_steps = await _warm_start(
                    settings, config, blobs, ids, checkpoints, rollout_args, rollout_config,
                    options, start, _stopper(runners, tasks),
                )  # fmt: skip
            progress.warm_steps = warm_steps
            trainer_cfg = _replace(trainer_cfg, policy=rollout_args.policy, checkpoints=checkpoints,
                                   max_steps=warm_steps + config.iterations)  # fmt: skip
            with as_service("trainer"):
                trainer_runner = await stack.enter_async_context(
                    trainer_service(
                        settings,
                        trainer_cfg,
                        backend_options=options,
                        blobs=blobs,
                        metrics_interval_s=60,
                        nproc=train_args.nproc,
                        rank_threads=rank_threads(train_args, train_args.nproc),
                    )  # fmt: skip
                )
            start("trainer", trainer_runner)
            ranks = f" on {train_args.nproc} ranks" if train_args.nproc > 1 else ""
            _say(f"trainer: {trainer_cfg.plan.objective} on {rollout_args.policy}{ranks}, "
                 f"{trainer_cfg.batch_groups} groups per step, from version "
                 f"{trainer_runner.processor.version}; "
                 f"checkpoints in {quote(str(checkpoints))}")  # fmt: skip

            sample_args = svc["sample"]
            sampler_cfg = sampler_config(sample_args)
            if sampler_cfg.batch_tasks != trainer_cfg.batch_groups:
                raise ConfigError(
                    f"the sampler's batch ({sampler_cfg.batch_tasks} tasks) and the trainer's "
                    f"step ({trainer_cfg.batch_groups} groups) must be the same B"
                )
            start("sampler", await stack.enter_async_context(
                sampler_service(settings, sampler_cfg)))  # fmt: skip
            _say(f"sampler: {sampler_cfg.frontier.strategy}, B={sampler_cfg.batch_tasks} tasks "
                 f"x n={sampler_cfg.group_size} rollouts, at most {sampler_cfg.max_steps} turns")  # fmt: skip

            # The worker adopts only this run's checkpoints, whatever else the log announces.
            rollout_config = _replace(rollout_config, checkpoints=checkpoints)
            with as_service("rollout"):
                start("rollout", await stack.enter_async_context(
                    rollout_service(settings, rollout_config, player, blobs)))  # fmt: skip
            _say(f"rollout worker: policy {rollout_args.policy} on {rollout_config.desktops} "
                 f"desktops, observing {rollout_config.episode.observe}; screenshots -> "
                 f"{blobs.url}")  # fmt: skip

            _console.phase("RL", f"running {config.iterations} iterations (Ctrl-C stops cleanly)")
            outcome = await _wait(tasks, stop)
            if outcome == "done":  # the last iteration's line first: it reads the update back
                await progress.shown(trainer_runner.processor.version)
                _say("the trainer took its last step: stopping every service")
            # Stop in order: producers of work first, the archiver last. After the trainer's
            # last step, the judge, the segmenter and the archiver first finish what the
            # stages before them wrote, so the archive holds a reward and segments for every
            # trajectory that completed. After Ctrl-C they stop at once: what they hold stays
            # uncommitted and a resumed run re-reads it.
            # (services, whether they first finish their backlog)
            _console.phase("stopping")
            stages = ((("sampler",), False), (("rollout",), False),
                      (("judge", "segmenter"), True), (("trainer",), False),
                      (("archiver",), True))  # fmt: skip
            for stage, drain in stages:
                if drain and outcome == "done":
                    await asyncio.gather(*(_drain(runners[name], name) for name in stage))
                for name in stage:
                    runners[name].stop()
                    await _join(tasks, name)
    finally:
        for name in list(tasks):
            if name in runners:
                runners[name].stop()
            elif not tasks[name].done():
                tasks[name].cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        if broker:
            broker.stop()
            with contextlib.suppress(FileNotFoundError):
                broker_state_file().unlink()
    final = progress.last_uri
    if final:
        _say(f"trained checkpoint: {quote(final)}")
        _say(f"  evaluate it: scalecua eval --policy {quote(final)} --split heldout --n 20")
    _say(f"archive: {quote(archive)} (run {archiver.run_id}); see it: scalecua dashboard "
         f"--archive {quote(archive)} --run {archiver.run_id}")  # fmt: skip
    if logs is not None:
        _say(f"service logs: {quote(str(log_dir))}")
    summary = {
        "outcome": outcome,
        "warm_start": progress.warm_rows,
        "iterations": progress.rows,
        "rollouts_by_policy_version": {
            str(v): n for v, n in sorted(progress.trajectories_by_version.items())
        },
        "checkpoint": progress.last_uri,
        "checkpoints": checkpoints,
        "dashboard": url,
        "archive": archive,
        "logs": str(log_dir),
        "run": archiver.run_id,
        "archived_rows": archiver.rows_written,
        "seconds": round(time.monotonic() - started, 1),
        "replay": f"scalecua replay reward --archive {quote(archive)} --run {archiver.run_id} "
        "--out rewards.parquet",
    }
    print(orjson.dumps(summary).decode(), flush=True)
    return {"done": 0, "interrupted": 130}.get(outcome, 1)


async def _publish_pool(settings: BusSettings, config: UpConfig) -> list[str]:
    """Import the run's training tasks into `tasks`: built-in ones or task-family instances."""
    from producers.task_import import publish_tasks, task_event
    from runtime.envs.tasks import families
    from runtime.envs.tasks.builtin import builtin_ids, load_builtin

    if config.families:
        generated = families.generate("train", config.pool, config.families)
        await publish_tasks(settings, families.task_events(generated))
        _say(f"imported {len(generated)} train instances of {len(config.families)} task "
             f"families into `tasks`: {', '.join(config.families)}")  # fmt: skip
        return [g.task_id for g in generated]
    ids = config.tasks or builtin_ids()
    await publish_tasks(settings, [task_event(load_builtin(i), source="builtin", split="train")
                                   for i in ids])  # fmt: skip
    _say(f"imported {len(ids)} built-in tasks into `tasks`")
    return ids


def _stopper(runners: dict[str, ServiceRunner], tasks: dict[str, asyncio.Task]):  # noqa: ANN202
    async def stop(name: str) -> None:
        runners[name].stop()
        await _join(tasks, name)
        del tasks[name], runners[name]  # done with: not a service that "stopped unexpectedly"

    return stop


async def _warm_start(
    settings: BusSettings, config: UpConfig, blobs: Any, ids: list[str], checkpoints: str,
    rollout_args: Any, rollout_config: Any, options: dict[str, Any], start: Any, stop: Any,
) -> int:  # fmt: skip
    """SFT steps on scripted episodes through the log, before RL; the steps taken."""
    from cli.sample_commands import sampler_config
    from cli.up.warm_start import WarmStartPlan, commit_group_at_end, warm_start

    plan = WarmStartPlan(
        policy=rollout_args.policy, checkpoints=checkpoints, task_ids=ids,
        steps=config.warm_steps, episodes_per_step=config.warm_episodes,
        desktops=rollout_config.desktops, max_steps=config.services["sample"].max_steps,
        observe=rollout_config.episode.observe, context=tuple(rollout_args.context),
        lr=config.warm_lr, backend_options=options,
    )  # fmt: skip
    _console.phase("warm start", (
        f"warm start: {plan.steps} SFT steps, each on {plan.episodes_per_step} episodes the "
        "scripted policy plays (reference solutions), judged and segmented like any other"
    ))  # fmt: skip
    result = await warm_start(settings, plan, blobs, start=start, stop=stop)
    if result.steps < plan.steps:
        _say(f"warning: the warm start took {result.steps} of {plan.steps} SFT steps")
    # The RL sampler starts after the warm start: its scripted episodes are no pass rates.
    sampler_group = sampler_config(config.services["sample"]).group_id
    await commit_group_at_end(settings, sampler_group, ["reward", "policy-updates"])
    _say(f"warm start done in {result.seconds:.0f}s: policy v{result.steps}; RL continues it")
    return result.steps


def _replace(config: Any, **changes: Any) -> Any:
    import dataclasses

    return dataclasses.replace(config, **changes)


async def _wait(tasks: dict[str, asyncio.Task], stop: asyncio.Event) -> str:
    """Wait for the trainer's last step, Ctrl-C, or a service that ended on its own."""
    stopper = asyncio.create_task(stop.wait())
    try:
        done, _ = await asyncio.wait(
            {stopper, *tasks.values()}, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        stopper.cancel()
    if stopper in done:
        _say("interrupted: stopping every service")
        return "interrupted"
    for name, task in tasks.items():
        if task in done:
            if name == "trainer" and task.exception() is None:
                return "done"
            error = task.exception() if not task.cancelled() else None
            _say(f"the {name} service stopped unexpectedly: {error!r}")
    return "failed"


async def _drain(runner: ServiceRunner, name: str, timeout_s: float = 60.0) -> None:
    if not await runner.drain(timeout_s):
        _say(f"{name} did not finish its backlog within {timeout_s:.0f}s; stopping it anyway")


async def _join(tasks: dict[str, asyncio.Task], name: str, timeout_s: float = 60.0) -> None:
    task = tasks[name]
    try:
        await asyncio.wait_for(asyncio.shield(task), timeout_s)
    except TimeoutError:
        _say(f"{name} did not stop within {timeout_s:.0f}s; cancelling it")
        task.cancel()
    except Exception as exc:  # reported in the summary via the outcome; keep shutting down
        _say(f"{name} stopped with {exc!r}")
