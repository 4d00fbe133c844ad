"""Learning on a laptop: does the recipe raise a held-out pass rate on 2 CPU cores?

Every stage runs the services the loop uses everywhere else, each phase on an embedded log
of its own (so no episode of one phase can reach another's segmenter or trainer):

1. warm start: SmolLM2-135M-Instruct with the compact prompt and compact text observations
   (its policy card, runtime/policy/card.py, travels into every checkpoint). The rollout
   worker plays `--warm-n` train instances of the task families with their reference
   solutions (the scripted policy), the judge scores them, the segmenter cuts them and
   the trainer takes `--warm-steps` SFT steps on the successes. `--warm-start DIR` reuses
   a warm-start checkpoint instead (so the main run and the ablations start from the
   same weights);
2. held-out pass rate of that checkpoint (`scalecua eval`'s code: greedy, on a log and
   desktops of its own; held-out instances never reach a training log);
3. RL for `--minutes` of wall clock, from the warm-start weights (a fresh optimizer; the
   warm start is the base): the sampler (Frontier Sampling, or uniform with `--ablation
   uniform`) requests groups of n rollouts of `--rl-n` other train instances, SmolLM2
   plays them, the judge scores, the segmenter cuts (VCS, or step-wise with `--ablation
   stepwise`), the trainer takes GRPO steps and the worker loads each new checkpoint;
4. held-out pass rate of the final checkpoint and of `--curve-points` checkpoints along
   the way; the learning curve (held-out pass rate and train reward against minutes of
   RL) as a PNG, and the figures as JSON.

    python bench/learning.py --minutes 60 --json out.json
    python bench/learning.py --minutes 60 --ablation uniform --warm-start var/learning/warm/policy
    python bench/learning.py --quick          # every stage once (RL to its first GRPO step)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cli.evaluation.run import EvalConfig, evaluate_policy  # noqa: E402
from cli.evaluation.stats import summarize_outcomes  # noqa: E402
from runtime.config import BusSettings  # noqa: E402
from runtime.process_memory import few_malloc_arenas  # noqa: E402
from runtime.service import ServiceRunner  # noqa: E402

OBSERVE = "compact"  # what the laptop policy sees (runtime/policy/observation.py)
PROMPT = "compact"  # its system prompt (runtime/policy/prompts.py)


def _say(msg: str) -> None:
    print(f"[learning] {msg}", file=sys.stderr, flush=True)


# -- the log of one phase and its services ------------------------------------------------
class _Phase:
    """An embedded broker and the service runners started on it; stops them all on exit."""

    def __init__(self, settings: BusSettings) -> None:
        self.settings = settings
        self._runners: list[tuple[Any, asyncio.Task]] = []

    def start(self, runner: Any) -> Any:
        """Run a service runner in the background until the phase ends (or `stop`)."""
        task = asyncio.create_task(runner.run(install_signal_handlers=False))
        self._runners.append((runner, task))
        return runner

    async def stop(self, runner: Any) -> None:
        """Stop one runner and wait for it."""
        for r, task in self._runners:
            if r is runner:
                r.stop()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(task, 120)

    async def stop_all(self) -> None:
        """Stop every runner still going."""
        for runner, _ in self._runners:
            runner.stop()
        await asyncio.gather(*(t for _, t in self._runners), return_exceptions=True)


@contextlib.asynccontextmanager
async def _phase() -> AsyncIterator[_Phase]:
    from runtime.broker import private_log

    async with private_log() as settings:
        phase = _Phase(settings)
        try:
            yield phase
        finally:
            await phase.stop_all()


class _Progress:
    """Follows `reward` and `policy-updates`: train reward per policy version, checkpoint times."""

    def __init__(self, settings: BusSettings) -> None:
        self.settings = settings
        self.points: list[dict[str, Any]] = []
        self.checkpoints: list[tuple[float, int, str]] = []  # (minutes, version, uri)
        self._since: list[float] = []
        self.started = time.monotonic()

    def minutes(self) -> float:
        """Minutes since the follower started."""
        return (time.monotonic() - self.started) / 60

    async def run(self) -> None:
        """Read both topics until cancelled."""
        from runtime.bus import EventConsumer
        from topics.events import PolicyUpdate, Reward

        topics = ["reward", "policy-updates"]
        async with EventConsumer(self.settings, topics, group_id=None) as consumer:
            await consumer.read_all(*topics, from_beginning=True)
            while True:
                for record in await consumer.getmany(timeout_ms=500):
                    event = record.event
                    if isinstance(event, Reward) and event.scored:
                        self._since.append(event.score)
                    elif isinstance(event, PolicyUpdate) and event.policy_version > 0:
                        self._update(event.policy_version, event.checkpoint_uri)

    async def seen(self, version: int, timeout: float = 10.0) -> None:
        """Wait until the policy update of `version` has been read (at most `timeout` s)."""
        deadline = time.monotonic() + timeout
        while version > 0 and time.monotonic() < deadline:
            if any(v >= version for _, v, _ in self.checkpoints):
                return
            await asyncio.sleep(0.05)

    def _update(self, version: int, uri: str) -> None:
        scores, self._since = self._since, []
        self.checkpoints.append((self.minutes(), version, uri))
        if not scores:
            return
        point = {
            "minutes": round(self.minutes(), 2),
            "policy_version": version,
            "train_reward": sum(scores) / len(scores),
            "train_pass_rate": sum(s >= 1.0 for s in scores) / len(scores),
            "rollouts": len(scores),
        }
        self.points.append(point)
        _say(f"RL step v{version} at {point['minutes']:.1f} min: {len(scores)} rollouts, "
             f"reward {point['train_reward']:+.3f}, pass {point['train_pass_rate']:.0%}")  # fmt: skip


def _backend(args: argparse.Namespace, lr: float) -> dict[str, Any]:
    """The torch backend's options. Compact segments are a few hundred tokens, so no
    gradient checkpointing by default (`--checkpointing` turns it on: long text segments
    need it — two 3,600-token rows of the a11y view peaked at 16.4 GB without it)."""
    return {"lr": lr, "gradient_checkpointing": args.checkpointing}


def _base_policy(out: Path) -> Path:
    """SmolLM2-135M-Instruct with a card for the compact prompt and observation."""
    from runtime.policy.card import PolicyCard, write_card
    from runtime.policy.model import smollm2_policy

    base = out / "base"
    if not (base / "config.json").exists():
        base.mkdir(parents=True, exist_ok=True)
        for f in smollm2_policy().iterdir():
            if f.is_file() and not (base / f.name).exists():
                (base / f.name).symlink_to(f)
    write_card(base, PolicyCard(prompt_variant=PROMPT, observe=OBSERVE))
    return base


def _splits(args: argparse.Namespace) -> tuple[list, list, list]:
    """Warm-start instances, the RL pool (other train instances) and the held-out set."""
    from runtime.envs.tasks import families

    train = families.generate("train", args.warm_n + args.rl_n)
    heldout = families.generate("heldout", args.heldout_n)
    return train[: args.warm_n], train[args.warm_n :], heldout


# -- 1. warm start -------------------------------------------------------------------------
async def warm_start(args: argparse.Namespace, warm_tasks: list) -> Path:
    """SFT on scripted episodes of train instances, through the log; the checkpoint folder."""
    from consumers.judge.service import Judge, JudgeConfig
    from consumers.rollout.episode import EpisodeConfig
    from consumers.rollout.players import build_player
    from consumers.rollout.service import RolloutConfig, rollout_service
    from consumers.segmenter.service import Segmenter, SegmenterConfig
    from consumers.trainer.batching import PlanConfig
    from consumers.trainer.checkpoints import CheckpointStore
    from consumers.trainer.grpo import GRPOConfig
    from consumers.trainer.service import TrainerConfig
    from consumers.trainer.startup import trainer_service
    from producers.rollout_requests import publish_requests
    from producers.task_import import publish_tasks
    from runtime.blobstore import open_blob_store
    from runtime.envs.tasks import families
    from topics.events import RolloutRequest

    out = args.out / "warm"
    base = _base_policy(args.out)
    blobs = open_blob_store(str(args.out / "blobs"))
    k, delta = args.context
    wanted = args.warm_steps * args.warm_batch
    _say(f"warm start: {args.warm_steps} SFT steps of {args.warm_batch} scripted episodes "
         f"({len(warm_tasks)} train instances)")  # fmt: skip
    done_before = CheckpointStore(str(out / "checkpoints")).latest()
    if done_before is not None:  # the trainer resumes its folder, as after a crash
        _say(f"warm start: resuming {out} at step {done_before.version} of {args.warm_steps} "
             f"(delete it to start over)")  # fmt: skip
    async with _phase() as phase:
        settings = phase.settings
        await publish_tasks(settings, families.task_events(warm_tasks))
        scripted = build_player("scripted", tokenizer=str(base), context_window=(k, delta))
        phase.start(ServiceRunner(Judge(JudgeConfig(), blobs), settings, metrics_interval_s=600))
        segmenter = Segmenter(SegmenterConfig(mode="vcs", k=k, delta=delta), scripted.processor,
                              blobs)  # fmt: skip
        phase.start(ServiceRunner(segmenter, settings, metrics_interval_s=600))
        sft = TrainerConfig(
            policy=str(base), checkpoints=str(out / "checkpoints"), batch_groups=args.warm_batch,
            max_steps=args.warm_steps, micro_batch_tokens=args.micro_batch_tokens,
            keep_states=0 if args.quick else TrainerConfig.keep_states,  # --quick never resumes: no optimizer state
            plan=PlanConfig(objective="sft", sft_threshold=1.0),
            grpo=GRPOConfig(kl_coef=0.0),
        )  # fmt: skip
        async with trainer_service(settings, sft, blobs=blobs, metrics_interval_s=600,
                                   backend_options=_backend(args, args.warm_lr)) as trainer:  # fmt: skip
            phase.start(trainer)
            cfg = RolloutConfig(desktops=args.desktops, episode=EpisodeConfig(observe=OBSERVE),
                                checkpoints=str(out / "checkpoints"))  # fmt: skip
            async with rollout_service(settings, cfg, scripted, blobs) as worker:
                phase.start(worker)
                ids = [g.task_id for g in warm_tasks]
                await publish_requests(settings, [
                    RolloutRequest(task_id=ids[i % len(ids)], group_id=f"warm-{i:04d}",
                                   group_size=1, sample_index=0, policy_version=0,
                                   max_steps=args.max_steps)
                    for i in range(wanted)
                ])  # fmt: skip
                done = await _until_steps(trainer.processor, wanted, args)
                await phase.stop(worker)
            await phase.stop(trainer)
    if not done:
        stats = trainer.processor.stats()
        raise RuntimeError(
            f"the warm start took {stats['steps']} of {args.warm_steps} SFT steps: of "
            f"{wanted} scripted episodes, {stats.get('rollouts_below_threshold', 0)} did not "
            "succeed (SFT trains on successes only)"
        )
    return _link(out / "policy", CheckpointStore(str(out / "checkpoints")).latest().uri)


def _real(path: str | Path) -> str:
    """The path with every symlink resolved (a policy folder that outlives the `policy` link)."""
    return os.path.realpath(path)


def _link(link: Path, uri: str) -> Path:
    """Point `link` at a checkpoint folder; return the link."""
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(Path(uri.removeprefix("file://")).resolve())
    return link


async def _until_steps(trainer: Any, wanted: int, args: argparse.Namespace) -> bool:
    """Wait for the trainer's SFT steps; give up once every reward is in and no step follows."""
    deadline = time.monotonic() + args.warm_timeout
    quiet_since: float | None = None
    while time.monotonic() < deadline:
        if trainer.finished_steps():
            return True
        if trainer.stats().get("rewards_read", 0) >= wanted and not trainer.stats()["step_running"]:
            quiet_since = quiet_since or time.monotonic()
            if time.monotonic() - quiet_since > 120:
                return False
        await asyncio.sleep(0.2)
    return False


# -- 2./4. held-out evaluation --------------------------------------------------------------
async def evaluate(policy: Path | str, heldout: list, args: argparse.Namespace) -> dict[str, Any]:
    """Greedy held-out pass rate of a policy folder (its own log and desktops)."""
    from runtime.envs.tasks import families

    config = EvalConfig(policy=str(policy), desktops=args.eval_desktops,
                        max_steps=args.max_steps, max_tokens=args.max_tokens)  # fmt: skip
    t0 = time.monotonic()
    outcomes = await evaluate_policy(config, families.task_events(heldout), families.family_of,
                                     progress=_say)  # fmt: skip
    summary = summarize_outcomes(outcomes, 1.0, list(families.HELDOUT_FAMILIES))
    summary["eval_minutes"] = round((time.monotonic() - t0) / 60, 2)
    _say(f"held-out pass rate of {Path(policy).name}: {summary['pass_rate']} {summary['ci95']} "
         f"({summary['eval_minutes']} min)")  # fmt: skip
    return summary


# -- 3. RL ----------------------------------------------------------------------------------
async def reinforce(
    args: argparse.Namespace, warm: Path, pool: list, final: asyncio.Future[str] | None = None
) -> dict[str, Any]:
    """GRPO for `--minutes` of wall clock from the warm-start weights; the run's figures.

    `final` gets the final checkpoint's folder as soon as it is known, before the phase's
    other services have stopped (so the evaluation of it can start meanwhile).
    """
    from consumers.judge.service import Judge, JudgeConfig
    from consumers.rollout.episode import EpisodeConfig
    from consumers.rollout.players import build_player
    from consumers.rollout.service import RolloutConfig, rollout_service
    from consumers.sampler.frontier import FrontierConfig
    from consumers.sampler.service import SamplerConfig, sampler_service
    from consumers.segmenter.service import Segmenter, SegmenterConfig
    from consumers.trainer.batching import PlanConfig
    from consumers.trainer.grpo import GRPOConfig
    from consumers.trainer.service import TrainerConfig
    from consumers.trainer.startup import trainer_service
    from producers.task_import import publish_tasks
    from runtime.blobstore import open_blob_store
    from runtime.engines.base import SamplingParams
    from runtime.envs.tasks import families

    out = args.out / "rl"
    if out.exists():  # a run starts from the warm start, never from an earlier run's steps
        shutil.rmtree(out)
    blobs = open_blob_store(str(args.out / "blobs"))
    k, delta = args.context
    mode = "stepwise" if args.ablation == "stepwise" else "vcs"
    strategy = "uniform" if args.ablation == "uniform" else "frontier"
    _say(f"RL for {args.minutes:g} min: {strategy} sampling, {mode} segments, B={args.batch} "
         f"x n={args.n}, {len(pool)} train instances, lr {args.lr:g}")  # fmt: skip
    async with _phase() as phase:
        settings = phase.settings
        await publish_tasks(settings, families.task_events(pool))
        sampling = SamplingParams(temperature=args.temperature, max_tokens=args.max_tokens)
        player = build_player(str(warm), sampling=sampling, context_window=(k, delta),
                              max_batch=args.max_batch)  # fmt: skip
        phase.start(ServiceRunner(Judge(JudgeConfig(), blobs), settings, metrics_interval_s=600))
        segmenter = Segmenter(SegmenterConfig(mode=mode, k=k, delta=delta), player.processor,
                              blobs)  # fmt: skip
        phase.start(ServiceRunner(segmenter, settings, metrics_interval_s=600))
        progress = _Progress(settings)
        follower = asyncio.create_task(progress.run())
        rl = TrainerConfig(
            policy=_real(warm), checkpoints=str(out / "checkpoints"),
            batch_groups=args.batch, micro_batch_tokens=args.micro_batch_tokens,
            max_steps=1 if args.quick else None,  # --quick: no second step while stopping
            keep_states=0 if args.quick else TrainerConfig.keep_states,
            # --quick trains its one group even if all-equal: the step is what it checks
            plan=PlanConfig(objective="grpo", max_lag=args.max_lag,
                            skip_equal_groups=not args.quick),
            grpo=GRPOConfig(kl_coef=args.kl_coef),
        )  # fmt: skip
        sampler_cfg = SamplerConfig(
            frontier=FrontierConfig(strategy=strategy), batch_tasks=args.batch,
            group_size=args.n, max_steps=args.max_steps, max_in_flight=args.in_flight,
            max_ahead=args.in_flight, seed=args.seed,
            # --quick: one batch for its one step, all-equal or not (the trainer's pairing above)
            refill_unusable=not args.quick, max_batches=1 if args.quick else None,
        )  # fmt: skip
        started = time.monotonic()
        async with trainer_service(settings, rl, blobs=blobs, metrics_interval_s=600,
                                   backend_options=_backend(args, args.lr)) as trainer:  # fmt: skip
            phase.start(trainer)
            async with sampler_service(settings, sampler_cfg) as sampler:
                phase.start(sampler)
                cfg = RolloutConfig(desktops=args.desktops, episode=EpisodeConfig(observe=OBSERVE),
                                    checkpoints=str(out / "checkpoints"))  # fmt: skip
                async with rollout_service(settings, cfg, player, blobs) as worker:
                    phase.start(worker)
                    await _rl_clock(trainer.processor, args)
                    if trainer.processor.finished_steps():
                        # a trainer done with its steps has written its last checkpoint
                        _settle(final, _final_checkpoint(out, warm)[1])
                    await phase.stop(sampler)
                    await phase.stop(worker)
            await phase.stop(trainer)
            rl_steps, checkpoint = _final_checkpoint(out, warm)
            _settle(final, checkpoint)
            stats = trainer.processor.stats()
        rl_minutes = (time.monotonic() - started) / 60
        await progress.seen(int(stats.get("policy_version", 0)))  # the last step's point
        follower.cancel()
    return {
        "rl_minutes": round(rl_minutes, 2),
        "rl_steps": rl_steps,
        "checkpoint": checkpoint,
        "curve": progress.points,
        "checkpoints": progress.checkpoints,
        "trainer": {k: v for k, v in stats.items() if isinstance(v, int | float)},
    }


def _final_checkpoint(out: Path, warm: Path) -> tuple[int, str]:
    """The newest RL checkpoint's version and folder (symlinks resolved); 0 and the warm
    start if there is none."""
    from consumers.trainer.checkpoints import CheckpointStore

    latest = CheckpointStore(str(out / "checkpoints")).latest()
    if latest is None:
        return 0, _real(warm)
    return latest.version, _real(latest.uri.removeprefix("file://"))


def _settle(final: asyncio.Future[str] | None, checkpoint: str) -> None:
    """Hand the final checkpoint's folder to whoever waits for it (once)."""
    if final is not None and not final.done():
        final.set_result(checkpoint)


async def _rl_clock(trainer: Any, args: argparse.Namespace) -> None:
    """Wait out RL: `--minutes` of wall clock, or until a trainer with a step bound (--quick:
    one GRPO step) has taken its steps."""
    deadline = time.monotonic() + args.minutes * 60
    while time.monotonic() < deadline:
        if trainer.finished_steps():
            return
        await asyncio.sleep(min(0.2, max(0.0, deadline - time.monotonic())))


async def _reinforce_and_evaluate(
    args: argparse.Namespace, warm: Path, pool: list, heldout: list
) -> tuple[dict[str, Any], dict[str, Any]]:
    """RL, and the held-out pass rate of its final checkpoint, evaluated while RL's
    remaining services stop (seconds of shutdown off the critical path)."""
    final: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    rl_task = asyncio.create_task(reinforce(args, warm, pool, final))
    await asyncio.wait({final, rl_task}, return_when=asyncio.FIRST_COMPLETED)
    if not final.done():  # RL failed before its last step: its error
        await rl_task
    after_task = asyncio.create_task(evaluate(final.result(), heldout, args))
    try:
        run_ = await rl_task
    except BaseException:
        after_task.cancel()
        with contextlib.suppress(BaseException):
            await after_task
        raise
    return run_, await after_task


def _curve_checkpoints(run: dict[str, Any], points: int) -> list[tuple[float, str]]:
    """Up to `points` checkpoints spread over the run (the final one is scored apart)."""
    saved = [(m, uri) for m, _, uri in run["checkpoints"]]
    if points <= 0 or len(saved) < 2:
        return []
    total = run["rl_minutes"]
    chosen: list[tuple[float, str]] = []
    for i in range(1, points + 1):
        target = total * i / (points + 1)
        best = min(saved[:-1], key=lambda c: abs(c[0] - target))
        if best not in chosen:
            chosen.append(best)
    return chosen


# -- the experiment --------------------------------------------------------------------------
async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Warm start, evaluate, RL, evaluate; the figures."""
    os.environ["SCALECUA_HOME"] = str(args.out / "home")
    warm_tasks, pool, heldout = _splits(args)
    result: dict[str, Any] = {
        "ablation": args.ablation, "minutes": args.minutes, "warm_instances": len(warm_tasks),
        "train_instances": len(pool), "heldout_instances": len(heldout),
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
    }  # fmt: skip
    t0 = time.monotonic()
    if args.warm_start is not None:
        warm = Path(_real(args.warm_start))
        _say(f"warm start: reusing {warm}")
    else:
        warm = await warm_start(args, warm_tasks)
        result["warm_minutes"] = round((time.monotonic() - t0) / 60, 2)
        _say(f"warm start done: {warm} after {result['warm_minutes']} min")
    result["warm_checkpoint"] = str(warm)
    if args.quick:  # the evaluation's waits (desktops, groups, episodes) overlap RL's
        before_task = asyncio.create_task(evaluate(warm, heldout, args))
        run_, after = await _reinforce_and_evaluate(args, warm, pool, heldout)
        before = await before_task
    else:  # RL has the machine to itself: its minutes are what is compared
        before = await evaluate(warm, heldout, args)
        run_, after = await _reinforce_and_evaluate(args, warm, pool, heldout)
    result["heldout_before"] = before["pass_rate"]
    result["before"] = before
    result.update({k: v for k, v in run_.items() if k != "checkpoints"})
    result["heldout_after"] = after["pass_rate"]
    result["after"] = after
    curve = [{"minutes": 0.0, "pass_rate": before["pass_rate"], "ci95": before["ci95"]}]
    for minutes, uri in _curve_checkpoints(run_, args.curve_points):
        point = await evaluate(uri.removeprefix("file://"), heldout, args)
        curve.append({"minutes": round(minutes, 2), "pass_rate": point["pass_rate"],
                      "ci95": point["ci95"], "checkpoint": uri})  # fmt: skip
    curve.append({"minutes": run_["rl_minutes"], "pass_rate": after["pass_rate"],
                  "ci95": after["ci95"], "checkpoint": run_["checkpoint"]})  # fmt: skip
    result["heldout_curve"] = sorted(curve, key=lambda p: p["minutes"])
    result["seconds"] = round(time.monotonic() - t0, 1)
    _plot(result, args.out / "learning.png")
    result["png"] = str(args.out / "learning.png")
    return result


def _plot(result: dict[str, Any], path: Path) -> None:
    """The learning curve: held-out pass rate (with its 95% interval) and train reward."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    held = result.get("heldout_curve", [])
    if held:
        xs = [p["minutes"] for p in held]
        ys = [p["pass_rate"] for p in held]
        lo = [p["pass_rate"] - p["ci95"][0] for p in held]
        hi = [p["ci95"][1] - p["pass_rate"] for p in held]
        ax.errorbar(xs, ys, yerr=[lo, hi], fmt="s-", capsize=3,
                    label=f"held-out pass rate ({result['heldout_instances']} instances, greedy)")  # fmt: skip
    curve = result.get("curve", [])
    if curve:
        ax.plot([p["minutes"] for p in curve], [p["train_pass_rate"] for p in curve], ".",
                alpha=0.6, label="train pass rate per RL step (sampled)")  # fmt: skip
    ax.set_xlabel("minutes of RL (2 CPU cores)")
    ax.set_ylabel("pass rate")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"learning on a laptop: {result.get('ablation') or 'main run'}")
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> int:
    """Parse arguments, run, print a table and write the JSON."""
    few_malloc_arenas()  # a run reached 21 GB RSS before its first RL step without it
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=60.0, help="RL wall clock (default 60)")
    p.add_argument("--ablation", choices=("uniform", "stepwise"), default=None)
    p.add_argument("--quick", action="store_true", help="every stage once, as small as it goes")
    p.add_argument("--json", type=Path, default=None, help="write the figures here")
    p.add_argument("--out", type=Path, default=Path("var/learning"), help="checkpoints, PNG")
    p.add_argument("--warm-start", default=None, help="reuse this warm-start policy folder")
    p.add_argument("--warm-n", type=int, default=88, help="train instances of the warm start")
    p.add_argument("--rl-n", type=int, default=66, help="train instances of the RL pool")
    p.add_argument("--heldout-n", type=int, default=60, help="held-out instances (>= 50)")
    p.add_argument("--desktops", type=int, default=16, help="episodes at once in training")
    p.add_argument("--eval-desktops", type=int, default=16, help="episodes at once in eval")
    p.add_argument("--warm-steps", type=int, default=8, help="SFT steps")
    p.add_argument("--warm-batch", type=int, default=8, help="scripted episodes per SFT step")
    p.add_argument("--warm-lr", type=float, default=5e-5)
    p.add_argument("--warm-timeout", type=float, default=3600.0)
    p.add_argument("--lr", type=float, default=2e-5, help="RL learning rate")
    p.add_argument("--batch", type=int, default=4, help="B: groups per RL step")
    p.add_argument("--n", type=int, default=8, help="rollouts per group")
    p.add_argument("--in-flight", type=int, default=1, help="batches requested ahead")
    p.add_argument("--max-lag", type=int, default=2, help="staleness bound (policy versions)")
    p.add_argument("--kl-coef", type=float, default=0.0, help="KL penalty (paper 1e-4)")
    # 0.6, not 1.0: from a warm start whose greedy answers beat its samples, rollouts at
    # 1.0 trained a policy the greedy evaluation does not play (docs/learning.md).
    p.add_argument("--temperature", type=float, default=0.6, help="rollout temperature")
    p.add_argument("--max-steps", type=int, default=5, help="turns per episode")
    p.add_argument("--max-tokens", type=int, default=64, help="tokens per turn")
    p.add_argument("--max-batch", type=int, default=16, help="generation batch (engine)")
    p.add_argument("--context", type=int, nargs=2, default=(5, 5), metavar=("K", "DELTA"))
    p.add_argument("--curve-points", type=int, default=2, help="held-out evals along RL")
    # Peak memory of one SmolLM2-135M forward+backward, no checkpointing: 5.5 GB at 4 x 512
    # tokens, 17.3 GB at 4 x 2,048 (the trainer's default 8,192), which OOM-killed a run
    # beside the engine and the desktops; it is also slower per token (83 vs 130 tokens/s).
    p.add_argument("--micro-batch-tokens", type=int, default=2048,
                   help="padded tokens per trainer forward pass")  # fmt: skip
    p.add_argument("--checkpointing", action="store_true", help="gradient checkpointing")
    p.add_argument("--seed", type=int, default=0, help="the sampler's seed")
    args = p.parse_args()
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.quick:  # every stage once, as small as it goes: not a measurement of learning
        # RL stops at its first GRPO step; --minutes is only its bound
        args.minutes, args.warm_n, args.rl_n, args.heldout_n = min(args.minutes, 3.0), 2, 2, 2
        args.warm_steps, args.warm_batch, args.batch, args.n = 1, 2, 1, 2
        args.desktops = args.eval_desktops = 2
        args.max_steps, args.max_tokens, args.curve_points = 2, 12, 0
    result = asyncio.run(run(args))
    rows = [("held-out before RL", result.get("heldout_before")),
            ("held-out after RL", result.get("heldout_after")),
            ("RL steps", result.get("rl_steps")), ("RL minutes", result.get("rl_minutes")),
            ("warm-start minutes", result.get("warm_minutes")),
            ("checkpoint", result.get("checkpoint"))]  # fmt: skip
    print(f"{'learning on a laptop':<24}{result.get('ablation') or 'main run'}")
    for name, value in rows:
        print(f"{name:<24}{value}")
    if result.get("heldout_before") is not None and result.get("heldout_after") is not None:
        gain = 100 * (result["heldout_after"] - result["heldout_before"])
        print(f"{'gain (points)':<24}{gain:+.1f}")
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
