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
from dataclasses import dataclass, field
from shlex import quote
from typing import Any

import orjson

from cli.bus_tools import start_embedded
from cli.up.console import UpConsole
from cli.up.progress import Progress
from consumers.archiver.service import Archiver, ArchiverConfig
from runtime.broker import EmbeddedBroker, create_topics
from runtime.config import BusSettings, broker_state_file, home_dir
from runtime.errors import ConfigError
from runtime.runs import ensure_run, log_ends, log_history, run_resolver
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
    _check(config)
    up = _UpRun(config)
    try:
        await up.open_log(logs)
        async with contextlib.AsyncExitStack() as stack:
            up.stack = stack
            await up.start_scoring()
            await up.start_trainer()
            await up.start_sampler()
            await up.start_rollout()
            _console.phase("RL", f"running {config.iterations} iterations (Ctrl-C stops cleanly)")
            up.outcome = await _wait(up.tasks, up.stop_requested)
            await up.stop_in_order()
    finally:
        await up.close()
    up.report(logs is not None)
    return {"done": 0, "interrupted": 130}.get(up.outcome, 1)


def _check(config: UpConfig) -> None:
    """Refuse what `up` cannot run before anything starts."""
    from runtime.envs.tasks.builtin import builtin_ids

    rollout_args = config.services["rollout"]
    if rollout_args.policy == "scripted":
        raise ConfigError("`up` trains the policy it plays: use tiny, smollm2 or a model folder")
    if rollout_args.context[0] <= 0:
        raise ConfigError("`up` segments with the rollout's context window: set K > 0")
    unknown = sorted(set(config.tasks or []) - set(builtin_ids()))
    if unknown:
        raise ConfigError(f"not built-in tasks: {', '.join(unknown)}")


class _UpRun:
    """One `up` run in phases: the log, the services in the order they start, the stop in
    order, the summary. The services it starts, their tasks and the exit stack live here."""

    def __init__(self, config: UpConfig) -> None:
        self.config = config
        self.svc = config.services
        self.started = time.monotonic()
        self.archive = config.archive or str(home_dir() / "archive")
        self.tasks: dict[str, asyncio.Task] = {}
        self.runners: dict[str, ServiceRunner] = {}
        self.stack: contextlib.AsyncExitStack
        self.stop_requested = asyncio.Event()
        self.outcome = "failed"
        self.url: str | None = None
        self.checkpoints: str | None = None
        self.broker: EmbeddedBroker | None = None
        self.signals = False

    async def open_log(self, logs: ServiceLogs | None) -> None:
        """The broker, the run, the service log folder, the signals and what reads the log."""
        from runtime.blobstore import open_blob_store

        boot, self.broker = await _start_broker(
            self.config.bootstrap, self.config.resume, self.archive
        )
        self.settings = BusSettings(bootstrap=boot)
        self.blobs = open_blob_store()
        self.run = await ensure_run(self.settings)
        self.log_dir = home_dir() / "runs" / self.run.run_id / "logs"
        if logs is not None:
            logs.open(self.log_dir)
            _say(f"service logs: {quote(str(self.log_dir))}/<service>.log "
                 "(warnings and errors also here)")  # fmt: skip
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self.stop_requested.set)
        self.signals = True
        self.archiver = Archiver(ArchiverConfig(root=self.archive), run_resolver(self.settings))
        starts = await log_ends(self.settings, Progress.TOPICS)
        self.progress = Progress(self.settings, self.config.iterations,
                                 self.svc["train"].judge_version, starts, _console)  # fmt: skip

    def start(self, name: str, runner: ServiceRunner) -> None:
        """Run a service's runner as a task of this run."""
        self.runners[name] = runner
        self.tasks[name] = asyncio.create_task(runner.run(install_signal_handlers=False))

    async def start_scoring(self) -> None:
        """The archiver, the run's tasks, the judge, the segmenter, the dashboard, progress."""
        from cli.rollout_commands import rollout_setup
        from cli.segment_commands import segmenter_config
        from consumers.judge.service import Judge, JudgeConfig
        from consumers.segmenter.service import Segmenter

        self.start("archiver", ServiceRunner(self.archiver, self.settings, metrics_interval_s=60))
        await asyncio.wait_for(self.runners["archiver"].ready.wait(), 60)
        _say(f"archiver writing every topic to {quote(self.archive)}")
        self.ids = await _publish_pool(self.settings, self.config)
        judge_args = self.svc["judge"]
        judge_config = JudgeConfig(
            judge_args.judge_version, judge_args.incomplete_reward, judge_args.group
        )
        self.start("judge", ServiceRunner(Judge(judge_config, self.blobs), self.settings,
                                          metrics_interval_s=60))  # fmt: skip
        self.player, self.rollout_config = rollout_setup(self.svc["rollout"])
        k, delta = self.svc["rollout"].context
        segmenter = Segmenter(segmenter_config(self.svc["segment"], k, delta),
                              self.player.processor, self.blobs)  # fmt: skip
        self.start("segmenter", ServiceRunner(segmenter, self.settings, metrics_interval_s=60))
        if self.config.dashboard_port is not None:
            self.url = await _start_dashboard(self.stack, self.settings, self.config.dashboard_port,
                                              self.svc["sample"].mu, self.svc["sample"].sigma)  # fmt: skip
            _say(f"dashboard: {self.url}")
        self.tasks["progress"] = asyncio.create_task(self.progress.run())

    async def start_trainer(self) -> None:
        """The warm start when there is one, then the RL trainer that continues it."""
        from cli.train_commands import rank_threads, trainer_config
        from consumers.trainer.startup import trainer_service

        rollout_args, train_args = self.svc["rollout"], self.svc["train"]
        trainer_cfg, options = trainer_config(train_args)
        self.checkpoints = _checkpoint_root(
            self.config.checkpoints or train_args.checkpoints, self.run.run_id,
            self.run.resumed_from,
        )  # fmt: skip
        warm_steps = 0
        self.progress.warm_steps = self.config.warm_steps
        if self.config.warm_steps > 0:
            warm_steps = await _warm_start(
                self.settings, self.config, self.blobs, self.ids, self.checkpoints, rollout_args,
                self.rollout_config, options, self.start, _stopper(self.runners, self.tasks),
            )  # fmt: skip
        self.progress.warm_steps = warm_steps
        self.trainer_cfg = _replace(trainer_cfg, policy=rollout_args.policy,
                                    checkpoints=self.checkpoints,
                                    max_steps=warm_steps + self.config.iterations)  # fmt: skip
        with as_service("trainer"):
            self.trainer = await self.stack.enter_async_context(
                trainer_service(
                    self.settings,
                    self.trainer_cfg,
                    backend_options=options,
                    blobs=self.blobs,
                    metrics_interval_s=60,
                    nproc=train_args.nproc,
                    rank_threads=rank_threads(train_args, train_args.nproc),
                )  # fmt: skip
            )
        self.start("trainer", self.trainer)
        ranks = f" on {train_args.nproc} ranks" if train_args.nproc > 1 else ""
        _say(f"trainer: {self.trainer_cfg.plan.objective} on {rollout_args.policy}{ranks}, "
             f"{self.trainer_cfg.batch_groups} groups per step, from version "
             f"{self.trainer.processor.version}; "
             f"checkpoints in {quote(str(self.checkpoints))}")  # fmt: skip

    async def start_sampler(self) -> None:
        """The sampler, on the trainer's B."""
        from cli.sample_commands import sampler_config
        from consumers.sampler.service import sampler_service

        sampler_cfg = sampler_config(self.svc["sample"])
        if sampler_cfg.batch_tasks != self.trainer_cfg.batch_groups:
            raise ConfigError(
                f"the sampler's batch ({sampler_cfg.batch_tasks} tasks) and the trainer's "
                f"step ({self.trainer_cfg.batch_groups} groups) must be the same B"
            )
        self.start("sampler", await self.stack.enter_async_context(
            sampler_service(self.settings, sampler_cfg)))  # fmt: skip
        _say(f"sampler: {sampler_cfg.frontier.strategy}, B={sampler_cfg.batch_tasks} tasks "
             f"x n={sampler_cfg.group_size} rollouts, at most {sampler_cfg.max_steps} turns")  # fmt: skip

    async def start_rollout(self) -> None:
        """The rollout worker, on this run's checkpoints only."""
        from consumers.rollout.service import rollout_service

        # The worker adopts only this run's checkpoints, whatever else the log announces.
        config = _replace(self.rollout_config, checkpoints=self.checkpoints)
        with as_service("rollout"):
            self.start("rollout", await self.stack.enter_async_context(
                rollout_service(self.settings, config, self.player, self.blobs)))  # fmt: skip
        _say(f"rollout worker: policy {self.svc['rollout'].policy} on {config.desktops} "
             f"desktops, observing {config.episode.observe}; screenshots -> "
             f"{self.blobs.url}")  # fmt: skip

    async def stop_in_order(self) -> None:
        """Stop every service in order: producers of work first, the archiver last."""
        if self.outcome == "done":  # the last iteration's line first: it reads the update back
            await self.progress.shown(self.trainer.processor.version)
            _say("the trainer took its last step: stopping every service")
        # After the trainer's last step, the judge, the segmenter and the archiver first
        # finish what the stages before them wrote, so the archive holds a reward and
        # segments for every trajectory that completed. After Ctrl-C they stop at once: what
        # they hold stays uncommitted and a resumed run re-reads it.
        # (services, whether they first finish their backlog)
        _console.phase("stopping")
        stages = ((("sampler",), False), (("rollout",), False),
                  (("judge", "segmenter"), True), (("trainer",), False),
                  (("archiver",), True))  # fmt: skip
        for stage, drain in stages:
            if drain and self.outcome == "done":
                await asyncio.gather(*(_drain(self.runners[name], name) for name in stage))
            for name in stage:
                self.runners[name].stop()
                await _join(self.tasks, name)

    async def close(self) -> None:
        """Whatever still runs stops, the signals are given back, the embedded broker ends."""
        for name in list(self.tasks):
            if name in self.runners:
                self.runners[name].stop()
            elif not self.tasks[name].done():
                self.tasks[name].cancel()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)
        if self.signals:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
        if self.broker:
            self.broker.stop()
            with contextlib.suppress(FileNotFoundError):
                broker_state_file().unlink()

    def report(self, logged: bool) -> None:
        """Where the run's results are, and the JSON summary on stdout."""
        archive, run_id, progress = quote(self.archive), self.archiver.run_id, self.progress
        if progress.last_uri:
            _say(f"trained checkpoint: {quote(progress.last_uri)}")
            _say(f"  evaluate it: scalecua eval --policy {quote(progress.last_uri)} "
                 "--split heldout --n 20")  # fmt: skip
        _say(f"archive: {archive} (run {run_id}); see it: scalecua dashboard "
             f"--archive {archive} --run {run_id}")  # fmt: skip
        if logged:
            _say(f"service logs: {quote(str(self.log_dir))}")
        summary = {
            "outcome": self.outcome,
            "warm_start": progress.warm_rows,
            "iterations": progress.rows,
            "rollouts_by_policy_version": {
                str(v): n for v, n in sorted(progress.trajectories_by_version.items())
            },
            "checkpoint": progress.last_uri,
            "checkpoints": self.checkpoints,
            "dashboard": self.url,
            "archive": self.archive,
            "logs": str(self.log_dir),
            "run": run_id,
            "archived_rows": self.archiver.rows_written,
            "seconds": round(time.monotonic() - self.started, 1),
            "replay": f"scalecua replay reward --archive {archive} --run {run_id} "
            "--out rewards.parquet",
        }
        print(orjson.dumps(summary).decode(), flush=True)


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
