"""Learning on a laptop: does the recipe raise a held-out pass rate on 2 CPU cores?

One run, every stage on one log (an embedded broker in this process) with the services the
loop uses everywhere else:

1. warm start: the rollout worker plays `train` instances of the task families with their
   reference solutions (the scripted policy, rendered with SmolLM2's tokenizer and text
   observations), the judge scores them, the segmenter cuts them, and the trainer takes
   `--warm-steps` SFT steps on the successful ones;
2. held-out pass rate of that checkpoint (`scalecua eval`'s code: greedy, on a log and
   desktops of its own, so no held-out episode ever reaches the training log);
3. RL for `--minutes` of wall clock: the sampler (Frontier Sampling, or uniform with
   `--ablation uniform`) requests groups of n rollouts of `train` instances, SmolLM2 plays
   them, the judge scores, the segmenter cuts (VCS, or step-wise with `--ablation
   stepwise`), the trainer takes GRPO steps and the worker loads each new checkpoint;
4. held-out pass rate of the final checkpoint; a learning curve (train reward per iteration
   and held-out pass rate against minutes) as a PNG.

    python bench/learning.py --minutes 60 --json out.json
    python bench/learning.py --quick          # every stage once, as small as it goes (~5 min:
                                              # SmolLM2 on CPU cannot do it in one)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from consumers.evaluation.run import EvalConfig, evaluate_policy  # noqa: E402
from consumers.evaluation.stats import summarize_outcomes  # noqa: E402
from runtime.config import BusSettings  # noqa: E402


def _say(msg: str) -> None:
    print(f"[learning] {msg}", file=sys.stderr, flush=True)


class _Rewards:
    """Follows `reward` and `policy-updates`: train reward per trainer step, for the curve."""

    def __init__(self, settings: BusSettings) -> None:
        self.settings = settings
        self.points: list[dict[str, float]] = []
        self._since: list[float] = []
        self.started = time.monotonic()

    async def run(self) -> None:
        """Read both topics until cancelled."""
        from runtime.bus import EventConsumer
        from topics.events import PolicyUpdate, Reward

        topics = ["reward", "policy-updates"]
        async with EventConsumer(self.settings, topics, group_id=None) as consumer:
            await consumer.read_all(*topics, from_beginning=False)
            while True:
                for record in await consumer.getmany(timeout_ms=500):
                    event = record.event
                    if isinstance(event, Reward) and event.scored:
                        self._since.append(event.score)
                    elif isinstance(event, PolicyUpdate) and self._since:
                        scores, self._since = self._since, []
                        self.points.append({
                            "minutes": (time.monotonic() - self.started) / 60,
                            "policy_version": event.policy_version,
                            "train_reward": sum(scores) / len(scores),
                            "train_pass_rate": sum(s >= 1.0 for s in scores) / len(scores),
                            "rollouts": len(scores),
                        })  # fmt: skip
                        _say(f"RL step v{event.policy_version}: {len(scores)} rollouts, reward "
                             f"{self.points[-1]['train_reward']:+.3f}, pass "
                             f"{self.points[-1]['train_pass_rate']:.0%}")  # fmt: skip


def _backend(lr: float) -> dict[str, Any]:
    """The torch backend's options: text segments run to thousands of tokens, and without
    gradient checkpointing SmolLM2 keeps every layer's attention for the backward pass
    (measured: two 3,600-token rows peak at 16.4 GB, 4.5 GB with it, at about the same
    time; a full warm start without it was OOM-killed at 24 GB)."""
    return {"lr": lr, "gradient_checkpointing": True}


async def _warm_steps(trainer: Any, args: argparse.Namespace, wanted: int) -> bool:
    """Wait for the SFT steps; give up once every episode's reward is in and no step follows."""
    deadline = time.monotonic() + args.warm_timeout
    quiet_since: float | None = None
    while time.monotonic() < deadline:
        if trainer.steps >= args.warm_steps:
            return True
        if trainer.stats().get("rewards_read", 0) >= wanted and not trainer.stats()["step_running"]:
            quiet_since = quiet_since or time.monotonic()
            if time.monotonic() - quiet_since > 120:
                return False
        await asyncio.sleep(1.0)
    return False


async def _evaluate(policy: str, events: list, family_of: Any, held: list[str], args: Any) -> dict:
    config = EvalConfig(policy=policy, desktops=args.desktops, max_steps=args.max_steps,
                        max_tokens=args.max_tokens)  # fmt: skip
    outcomes = await evaluate_policy(config, events, family_of, progress=_say)
    return summarize_outcomes(outcomes, 1.0, held)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """The whole experiment; returns the figures."""
    from consumers.judge.service import Judge, JudgeConfig
    from consumers.rollout.episode import EpisodeConfig
    from consumers.rollout.players import build_player
    from consumers.rollout.service import RolloutConfig, rollout_service
    from consumers.sampler.frontier import FrontierConfig
    from consumers.sampler.service import SamplerConfig, sampler_service
    from consumers.segmenter.service import Segmenter, SegmenterConfig
    from consumers.trainer.batching import PlanConfig
    from consumers.trainer.checkpoints import CheckpointStore
    from consumers.trainer.service import TrainerConfig, trainer_service
    from producers.rollout_requests import publish_requests
    from producers.task_import import publish_tasks
    from runtime.blobstore import open_blob_store
    from runtime.broker import EmbeddedBroker, free_port
    from runtime.engines.base import SamplingParams
    from runtime.envs.tasks import families
    from runtime.service import ServiceRunner
    from topics.events import RolloutRequest

    out: Path = args.out
    os.environ["SCALECUA_HOME"] = str(out / "home")
    blobs = open_blob_store(str(out / "home" / "blobs"))
    checkpoints = str(out / "checkpoints")
    train = families.generate("train", args.train_n)
    heldout = families.generate("heldout", args.heldout_n)
    held_families = list(families.HELDOUT_FAMILIES)
    heldout_events = families.task_events(heldout)
    k, delta = args.context
    broker = EmbeddedBroker(free_port())
    await broker.start()
    settings = BusSettings(bootstrap=broker.bootstrap)
    runners: list[tuple[ServiceRunner, asyncio.Task]] = []

    def start(runner: ServiceRunner) -> ServiceRunner:
        runners.append((runner, asyncio.create_task(runner.run(install_signal_handlers=False))))
        return runner

    async def stop(runner: ServiceRunner) -> None:
        for r, task in runners:
            if r is runner:
                r.stop()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(task, 120)

    started = time.monotonic()
    result: dict[str, Any] = {"ablation": args.ablation, "minutes": args.minutes,
                              "train_instances": len(train), "heldout_instances": len(heldout)}  # fmt: skip
    try:
        await publish_tasks(settings, families.task_events(train))
        start(ServiceRunner(Judge(JudgeConfig(), blobs), settings, metrics_interval_s=600))
        scripted = build_player("scripted", tokenizer="smollm2", context_window=(k, delta))
        mode = "stepwise" if args.ablation == "stepwise" else "vcs"
        start(ServiceRunner(Segmenter(SegmenterConfig(mode=mode, k=k, delta=delta),
                                      scripted.processor, blobs), settings,
                            metrics_interval_s=600))  # fmt: skip

        # 1. Warm start: SFT on scripted successes of train instances, through the log.
        _say(f"warm start: {args.warm_steps} SFT steps of {args.warm_batch} scripted episodes")
        sft = TrainerConfig(
            policy="smollm2", checkpoints=checkpoints, batch_groups=args.warm_batch,
            max_steps=args.warm_steps, group_id="trainer-warm",
            plan=PlanConfig(objective="sft", sft_threshold=1.0),
        )  # fmt: skip
        async with trainer_service(settings, sft, blobs=blobs, metrics_interval_s=600,
                                   backend_options=_backend(args.warm_lr)) as trainer:  # fmt: skip
            start(trainer)
            warm_cfg = RolloutConfig(desktops=args.desktops, group_id="rollout-warm",
                                     episode=EpisodeConfig(observe="a11y"))  # fmt: skip
            async with rollout_service(settings, warm_cfg, scripted, blobs) as worker:
                start(worker)
                ids = [g.task_id for g in train]
                wanted = args.warm_steps * args.warm_batch
                requests = [
                    RolloutRequest(
                        task_id=ids[i % len(ids)],
                        group_id=f"warm-{i:04d}",
                        group_size=1,
                        sample_index=0,
                        policy_version=0,
                        max_steps=args.warm_max_steps,
                    )  # fmt: skip
                    for i in range(wanted)
                ]
                await publish_requests(settings, requests)
                done = await _warm_steps(trainer.processor, args, wanted)
                await stop(worker)
            await stop(trainer)
        if not done:
            stats = trainer.processor.stats()
            raise RuntimeError(
                f"the warm start took {stats['steps']} of {args.warm_steps} SFT steps: of "
                f"{wanted} scripted episodes, {stats.get('rollouts_below_threshold', 0)} did not "
                "succeed (SFT trains on successes only)"
            )
        store = CheckpointStore(checkpoints)
        warm = store.latest()
        result["warm_minutes"] = round((time.monotonic() - started) / 60, 2)
        _say(f"warm start done: {warm.uri} after {result['warm_minutes']} min")

        # 2. Held-out pass rate before RL.
        before = await _evaluate(warm.uri, heldout_events, families.family_of, held_families, args)
        result["heldout_before"] = before["pass_rate"]
        result["before"] = before
        _say(f"held-out before RL: {before['pass_rate']} {before['ci95']}")

        # 3. RL for --minutes of wall clock.
        rewards = _Rewards(settings)
        follower = asyncio.create_task(rewards.run())
        rl = TrainerConfig(
            policy="smollm2", checkpoints=checkpoints, batch_groups=args.batch,
            group_id="trainer-rl", plan=PlanConfig(objective="grpo", max_lag=2),
        )  # fmt: skip
        strategy = "uniform" if args.ablation == "uniform" else "frontier"
        sampler_cfg = SamplerConfig(
            frontier=FrontierConfig(strategy=strategy), batch_tasks=args.batch,
            group_size=args.n, max_steps=args.max_steps, max_in_flight=1, max_ahead=1,
        )  # fmt: skip
        sampling = SamplingParams(temperature=1.0, max_tokens=args.max_tokens,
                                  stop=("</tool_call>",))  # fmt: skip
        player = build_player(warm.uri, sampling=sampling, context_window=(k, delta))
        rl_started = time.monotonic()
        async with trainer_service(settings, rl, blobs=blobs, metrics_interval_s=600,
                                   backend_options=_backend(args.lr)) as trainer:  # fmt: skip
            start(trainer)
            async with sampler_service(settings, sampler_cfg) as sampler:
                start(sampler)
                rl_cfg = RolloutConfig(desktops=args.desktops, group_id="rollout-rl",
                                       episode=EpisodeConfig(observe="a11y"))  # fmt: skip
                async with rollout_service(settings, rl_cfg, player, blobs) as worker:
                    start(worker)
                    await asyncio.sleep(args.minutes * 60)
                    await stop(sampler)
                    await stop(worker)
            await stop(trainer)
        follower.cancel()
        result["rl_minutes"] = round((time.monotonic() - rl_started) / 60, 2)
        final = CheckpointStore(checkpoints).latest()
        result["checkpoint"] = final.uri
        result["rl_steps"] = final.version - warm.version
        result["curve"] = rewards.points

        # 4. Held-out pass rate after RL.
        after = await _evaluate(final.uri, heldout_events, families.family_of, held_families, args)
        result["heldout_after"] = after["pass_rate"]
        result["after"] = after
        _say(f"held-out after RL: {after['pass_rate']} {after['ci95']}")
    finally:
        for runner, _ in runners:
            runner.stop()
        await asyncio.gather(*(t for _, t in runners), return_exceptions=True)
        broker.stop()
    result["seconds"] = round(time.monotonic() - started, 1)
    _plot(result, out / "learning.png")
    result["png"] = str(out / "learning.png")
    return result


def _plot(result: dict[str, Any], path: Path) -> None:
    """The learning curve: train reward per RL step and held-out pass rate, against minutes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    curve = result.get("curve", [])
    warm = result.get("warm_minutes", 0.0)
    if curve:
        xs = [warm + p["minutes"] for p in curve]
        ax.plot(xs, [p["train_pass_rate"] for p in curve], "o-", label="train pass rate (RL)")
    points = [(warm, result.get("heldout_before")),
              (warm + result.get("rl_minutes", 0.0), result.get("heldout_after"))]  # fmt: skip
    points = [(x, y) for x, y in points if y is not None]
    if points:
        ax.plot(*zip(*points, strict=True), "s--", label="held-out pass rate")
    ax.set_xlabel("minutes")
    ax.set_ylabel("pass rate")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"learning on 2 CPU cores ({result.get('ablation') or 'main run'})")
    ax.legend(loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> int:
    """Parse arguments, run, print a table and write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=60.0, help="RL wall clock (default 60)")
    parser.add_argument("--ablation", choices=("uniform", "stepwise"), default=None)
    parser.add_argument("--quick", action="store_true", help="a smoke run of every stage")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    parser.add_argument("--out", default="var/learning", help="checkpoints, blobs, the PNG")
    parser.add_argument("--train-n", type=int, default=400, help="train instances")
    parser.add_argument("--heldout-n", type=int, default=60, help="held-out instances (>= 50)")
    parser.add_argument("--desktops", type=int, default=2)
    parser.add_argument("--warm-steps", type=int, default=12, help="SFT steps")
    parser.add_argument("--warm-batch", type=int, default=8, help="scripted episodes per step")
    parser.add_argument("--warm-lr", type=float, default=5e-5)
    parser.add_argument("--warm-max-steps", type=int, default=6, help="turns of a scripted episode")
    parser.add_argument("--warm-timeout", type=float, default=3600.0)
    parser.add_argument("--lr", type=float, default=1e-5, help="RL learning rate")
    parser.add_argument("--batch", type=int, default=4, help="B: groups per RL step")
    parser.add_argument("--n", type=int, default=4, help="rollouts per group")
    parser.add_argument("--max-steps", type=int, default=3, help="turns per episode")
    parser.add_argument("--max-tokens", type=int, default=96, help="tokens per turn")
    parser.add_argument("--context", type=int, nargs=2, default=(5, 5), metavar=("K", "DELTA"))
    args = parser.parse_args()
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    args.out = Path(args.out).resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.quick:  # every stage once, as small as it goes: not a measurement of learning
        args.minutes, args.train_n, args.heldout_n = min(args.minutes, 0.25), 4, 2
        args.warm_steps, args.warm_batch, args.batch, args.n = 1, 2, 1, 2
        args.max_steps, args.max_tokens = 1, 24
    result = asyncio.run(run(args))
    rows = [("held-out before RL", result.get("heldout_before")),
            ("held-out after RL", result.get("heldout_after")),
            ("RL steps", result.get("rl_steps")), ("RL minutes", result.get("rl_minutes")),
            ("warm-start minutes", result.get("warm_minutes"))]  # fmt: skip
    print(f"{'learning on a laptop':<24}{result.get('ablation') or 'main run'}")
    for name, value in rows:
        print(f"{name:<24}{value}")
    if result.get("heldout_before") is not None and result.get("heldout_after") is not None:
        print(
            f"{'gain (points)':<24}{100 * (result['heldout_after'] - result['heldout_before']):+.1f}"
        )
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
