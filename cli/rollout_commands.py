"""`scalecua rollout | judge | request | rejudge`: the services that produce data, and their tools."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from cli.bus_commands import add_bootstrap
from cli.settings import PORT, integer, items, number
from runtime.policy.prompts import VARIANTS

__all__ = ["register", "rollout_setup", "add_desktops_kind", "CONTEXT", "SMALLEST_IMAGE"]

# The policy's context window (K, DELTA): DELTA >= 1 when K >= 1 (the history renderer drops
# DELTA observations at once); K = 0 keeps every observation.
CONTEXT = items(integer(0), 2, lambda kd: kd[0] == 0 or kd[1] >= 1,
                "DELTA must be >= 1 when K >= 1 (0 0 keeps every observation)")  # fmt: skip
# Screenshots shrunk below one 28-pixel patch of Qwen2.5-VL's vision encoder show it nothing.
SMALLEST_IMAGE = 28


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the rollout and judge commands to the `scalecua` parser."""
    for add in (_add_rollout, _add_judge, _add_request, _add_rejudge):
        add(subparsers)


def _add_rollout(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "rollout",
        help="a rollout worker: play rollout-requests on desktops, write rollout-step",
        description=(
            "Join the `rollout` consumer group on rollout-requests and play each request on a "
            "warm desktop with the policy, writing one rollout-step per turn and a "
            "trajectory-complete per episode. Start more to scale out."
        ),
    )
    p.add_argument("--desktops", type=integer(1), default=2, help="episodes at once (default 2)")
    add_desktops_kind(p)
    _policy_args(p)
    _sampling_args(p)
    p.add_argument("--group", default="rollout", help="consumer group (default rollout)")
    p.add_argument(
        "--checkpoints", default=None,
        help="adopt policy updates only from checkpoints under this root, the trainer's "
        "(default $SCALECUA_CHECKPOINTS, else $SCALECUA_HOME/checkpoints)",
    )  # fmt: skip
    p.add_argument(
        "--metrics-port", type=integer(*PORT), default=None, help="serve Prometheus /metrics here"
    )
    add_bootstrap(p)
    p.set_defaults(func=_rollout)


def _policy_args(p: argparse.ArgumentParser) -> None:
    """The policy, its engine, and what it is shown."""
    p.add_argument(
        "--policy", default="tiny", help="scripted | tiny | smollm2 | a model folder (default tiny)"
    )
    p.add_argument(
        "--engine", default="transformers", choices=("transformers", "vllm-http", "vllm"),
        help="rollout engine for a model policy (default transformers, on CPU)",
    )  # fmt: skip
    p.add_argument("--engine-url", default=None, help="vLLM server URL for --engine vllm-http")
    p.add_argument(
        "--tokenizer", default="tiny",
        help="scripted policy only: whose processor renders its turns (tiny | smollm2 | folder "
        "| none; default tiny)",
    )  # fmt: skip
    p.add_argument(
        "--observe", default=None, choices=("screenshot", "a11y", "both", "compact"),
        help="what the policy sees (default: the policy card's, else screenshot for image "
        "models and a11y for text-only; compact: the short text view, docs/learning.md)",
    )  # fmt: skip
    p.add_argument(
        "--image-max-side", type=integer(SMALLEST_IMAGE), default=1280,
        help="shrink screenshots to fit this many pixels before the policy sees them",
    )  # fmt: skip
    p.add_argument(
        "--context", type=CONTEXT, nargs=2, default=(5, 5), metavar=("K", "DELTA"),
        help="context window: at most K+DELTA observations, the oldest DELTA omitted when "
        "full (Visual Context Segmentation; paper: 5 5; 0 0 keeps every observation)",
    )  # fmt: skip
    p.add_argument(
        "--prompt", default=None, choices=VARIANTS,
        help="system prompt variant (default: the policy card's, else osworld)",
    )  # fmt: skip


def _sampling_args(p: argparse.ArgumentParser) -> None:
    """How replies are sampled, how long they may take, and when new weights are loaded."""
    p.add_argument("--temperature", type=number(0), default=0.8, help="sampling temperature (0.8)")
    p.add_argument("--top-p", type=number(above=0, high=1), default=1.0)
    p.add_argument("--max-tokens", type=integer(1), default=256, help="tokens per turn (256)")
    p.add_argument(
        "--reload", default="episode", choices=("episode", "turn"),
        help="load announced weights between episodes (default) or between turns",
    )  # fmt: skip
    p.add_argument(
        "--generate-timeout",
        type=number(above=0),
        default=300.0,
        help="seconds an engine call may take",
    )


def _add_judge(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "judge", help="the judge: score trajectory-complete into reward (scale out: run more)"
    )
    p.add_argument("--judge-version", default="osworld-metrics-v1")
    p.add_argument(
        "--incomplete-reward", type=number(high=0), default=-0.2,
        help="reward of an episode that hit its step limit (paper: -0.2)",
    )  # fmt: skip
    p.add_argument("--group", default="judge", help="consumer group (default judge)")
    p.add_argument(
        "--metrics-port", type=integer(*PORT), default=None, help="serve Prometheus /metrics here"
    )
    add_bootstrap(p)
    p.set_defaults(func=_judge)


def _add_request(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("request", help="write one group of rollout requests for a task")
    p.add_argument("task_id")
    p.add_argument("--n", type=integer(1), default=8, help="rollouts in the group (default 8)")
    p.add_argument(
        "--max-steps", type=integer(1), default=50, help="turn limit per episode (paper: 50)"
    )
    p.add_argument("--group-id", default=None, help="group id (default: task id + random suffix)")
    add_bootstrap(p)
    p.set_defaults(func=_request)


def _add_rejudge(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "rejudge",
        help="score recorded trajectories again with the current metric code, under a new version",
    )
    p.add_argument("--judge-version", required=True, help="the version the new rewards carry")
    p.add_argument(
        "--from-beginning", action="store_true",
        help="the whole live log (default: resume the last rejudge under this version)",
    )  # fmt: skip
    p.add_argument("--archive", default=None, help="read trajectories from this archive instead")
    p.add_argument("--run", default=None, help="with --archive: only this run")
    p.add_argument("--incomplete-reward", type=number(high=0), default=-0.2)
    add_bootstrap(p)
    p.set_defaults(func=_rejudge)


def add_desktops_kind(p: argparse.ArgumentParser) -> None:
    """Add `--desktops-kind` (native or docker desktops) to a command that plays episodes."""
    p.add_argument(
        "--desktops-kind", default=None, choices=("native", "docker"),
        help="native (host namespaces, the default) | docker (a container each, from the image "
        "`bash infra/containers.sh images` builds; docs/desktops.md)",
    )  # fmt: skip


def rollout_setup(args: argparse.Namespace) -> tuple[Any, Any]:
    """Build the player and the RolloutConfig from parsed `rollout` arguments."""
    from consumers.rollout.episode import EpisodeConfig
    from consumers.rollout.players import build_player, default_observe
    from consumers.rollout.service import RolloutConfig
    from runtime.engines.base import SamplingParams
    from runtime.envs.desktop.pool import use_desktops_kind

    use_desktops_kind(args.desktops_kind)
    sampling = SamplingParams(
        temperature=args.temperature, top_p=args.top_p, max_tokens=args.max_tokens,
        stop=("</tool_call>",),
    )  # fmt: skip
    player = build_player(
        args.policy, engine=args.engine, engine_url=args.engine_url, tokenizer=args.tokenizer,
        prompt_variant=args.prompt, sampling=sampling, generate_timeout_s=args.generate_timeout,
        context_window=tuple(args.context) if args.context[0] > 0 else None,
    )  # fmt: skip
    observe = args.observe or default_observe(args.policy, player, args.tokenizer)
    config = RolloutConfig(
        desktops=args.desktops, reload=args.reload, group_id=args.group,
        episode=EpisodeConfig(observe=observe, image_max_side=args.image_max_side),
        checkpoints=getattr(args, "checkpoints", None),
    )  # fmt: skip
    return player, config


def _rollout(args: argparse.Namespace) -> int:
    from cli.bus_commands import _run
    from consumers.rollout.service import rollout_service
    from runtime.blobstore import open_blob_store
    from runtime.config import BusSettings

    settings = BusSettings.from_env(args.bootstrap)
    player, config = rollout_setup(args)
    observe = config.episode.observe

    async def main() -> int:
        async with rollout_service(
            settings, config, player, open_blob_store(), metrics_port=args.metrics_port
        ) as runner:
            print(f"rollout worker: policy {args.policy}, {args.desktops} desktops, "
                  f"observing {observe}", file=sys.stderr)  # fmt: skip
            await runner.run()
        return 0

    return _run(main())


def _judge(args: argparse.Namespace) -> int:
    from cli.bus_commands import _run
    from consumers.judge.service import Judge, JudgeConfig
    from runtime.blobstore import open_blob_store
    from runtime.config import BusSettings
    from runtime.service import ServiceRunner

    config = JudgeConfig(args.judge_version, args.incomplete_reward, args.group)
    runner = ServiceRunner(
        Judge(config, open_blob_store()), BusSettings.from_env(args.bootstrap),
        metrics_port=args.metrics_port,
    )  # fmt: skip
    print(f"judge {config.judge_version} (group {config.group_id})", file=sys.stderr)
    return _run(runner.run())


def _request(args: argparse.Namespace) -> int:
    from cli.bus_commands import _run
    from producers.rollout_requests import find_task_key, publish_requests, request_group
    from runtime.config import BusSettings
    from runtime.errors import SettingError, TaskError

    settings = BusSettings.from_env(args.bootstrap)
    group: list = []

    async def main() -> int:
        try:  # no worker could play a task it cannot find
            key = await find_task_key(settings, args.task_id)
        except TaskError as exc:
            raise SettingError(
                f"[request] task_id = {args.task_id} on the command line: {exc}"
            ) from None
        group.extend(request_group(key, args.n, max_steps=args.max_steps, group_id=args.group_id))
        return await publish_requests(settings, group)

    n = _run(main())
    print(json.dumps({"group_id": group[0].group_id, "task_id": group[0].task_id, "requests": n}))
    return 0


def _rejudge(args: argparse.Namespace) -> int:
    from cli.bus_commands import _run
    from consumers.judge.rejudge import rejudge_archive, rejudge_live
    from consumers.judge.service import JudgeConfig
    from runtime.blobstore import open_blob_store
    from runtime.config import BusSettings

    settings = BusSettings.from_env(args.bootstrap)
    config = JudgeConfig(args.judge_version, args.incomplete_reward)
    blobs = open_blob_store()
    summary: dict = {}

    async def main() -> int:
        if args.archive:
            runs = [args.run] if args.run else None
            summary.update(await rejudge_archive(settings, config, blobs, args.archive, runs))
        else:
            summary.update(
                await rejudge_live(settings, config, blobs, from_beginning=args.from_beginning)
            )
        return 0

    code = _run(main())
    print(json.dumps(summary))
    return code
