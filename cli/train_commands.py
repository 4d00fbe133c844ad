"""`scalecua train`: the GRPO (or SFT) trainer service on segment-ready + reward."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from cli.settings import PORT, integer, number, require

__all__ = ["register", "trainer_config", "rank_threads"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the train command to the `scalecua` parser."""
    p = subparsers.add_parser(
        "train",
        help="the trainer: GRPO steps on complete groups, checkpoints, policy-updates",
        description=(
            "Join segment-ready with reward by trajectory, wait for complete groups, train one "
            "step per B groups, write an HF checkpoint and announce it on policy-updates. "
            "Restarting resumes from the newest checkpoint. Run one trainer per job."
        ),
    )
    _model_args(p)
    _objective_args(p)
    _step_args(p)
    _compute_args(p)
    _service_args(p)
    p.set_defaults(func=_train)


def _model_args(p: argparse.ArgumentParser) -> None:
    """What is trained, where its checkpoints go, and on which rewards."""
    p.add_argument(
        "--backend", default="torch", choices=("torch", "megatron"), help="training backend"
    )
    p.add_argument("--policy", default="tiny", help="base policy: tiny | smollm2 | a model folder")
    p.add_argument("--objective", default="grpo", choices=("grpo", "sft"))
    p.add_argument(
        "--checkpoints", default=None,
        help="checkpoint root: a folder or s3://... (default $SCALECUA_HOME/checkpoints)",
    )  # fmt: skip
    p.add_argument("--judge-version", default="osworld-metrics-v1", help="train on these rewards")


def _objective_args(p: argparse.ArgumentParser) -> None:
    """The batch, the optimizer, the GRPO (or SFT) objective and stale rollouts."""
    p.add_argument(
        "--batch-groups", type=integer(1), default=32, help="B: groups per step (paper: 32)"
    )
    p.add_argument(
        "--lr", type=number(above=0), default=3e-6, help="AdamW learning rate (paper: 3e-6)"
    )
    p.add_argument("--weight-decay", type=number(0), default=0.0)
    p.add_argument("--grad-clip", type=number(0), default=1.0, help="max gradient norm (0: off)")
    p.add_argument("--clip-low", type=number(0, below=1), default=0.2, help="ε_l (paper: 0.2)")
    p.add_argument("--clip-high", type=number(0), default=0.28, help="ε_h (paper: 0.28)")
    p.add_argument(
        "--dual-clip", type=number(above=1), default=3.0, help="c for Â < 0 (paper: 3.0)"
    )
    p.add_argument("--kl-coef", type=number(0), default=1e-4, help="λ, k3 KL to the base (1e-4)")
    p.add_argument("--entropy-coef", type=number(0), default=0.0, help="entropy bonus (paper: 0)")
    p.add_argument(
        "--max-lag", type=integer(-1), default=4,
        help="rollouts more than this many versions old are stale (-1: no bound)",
    )  # fmt: skip
    p.add_argument("--staleness", default="drop", choices=("drop", "downweight"))
    p.add_argument(
        "--stale-weight", type=number(above=0, high=1), default=0.5,
        help="downweight: weight = stale_weight ** (lag - max_lag)",
    )  # fmt: skip
    p.add_argument(
        "--sft-threshold", type=number(above=0, high=1), default=1.0, help="sft: minimum reward"
    )
    p.add_argument(
        "--skip-equal-groups", action="store_true",
        help="leave all-equal groups out of the batch (default: train them with Â = 0)",
    )  # fmt: skip


def _step_args(p: argparse.ArgumentParser) -> None:
    """How a step is cut into passes, when groups and the run end, and what is kept."""
    p.add_argument(
        "--micro-batch-tokens", type=integer(1), default=8192, help="padded tokens per pass"
    )
    p.add_argument("--micro-batch-rows", type=integer(1), default=4, help="sequences per pass")
    p.add_argument(
        "--group-timeout", type=number(0), default=900.0,
        help="drop a group idle this many seconds while incomplete and dead-letter its records "
        "(0: wait forever; keep it above the longest episode)",
    )  # fmt: skip
    p.add_argument("--max-steps", type=integer(1), default=None, help="stop after this many steps")
    p.add_argument("--keep-states", type=integer(0), default=2, help="optimizer states kept")
    p.add_argument(
        "--keep-checkpoints", type=integer(0), default=0,
        help="model versions kept, the newest (0: all; at least 2: a restart resumes from the "
        "last announced one while the next is written)",
    )  # fmt: skip
    require(p, ("keep_checkpoints",), lambda keep: keep != 1,
            "keep 0 checkpoints (all) or at least 2: a restart resumes from the last announced "
            "version while the next is written")  # fmt: skip


def _compute_args(p: argparse.ArgumentParser) -> None:
    """Precision, device, threads, and how the trainer's ranks split the model."""
    p.add_argument(
        "--dtype",
        default="float32",
        choices=("float32", "bfloat16", "float16"),
        help="parameters' dtype (bfloat16 on a GPU)",
    )
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=integer(0), default=0, help="torch CPU threads (0: default)")
    p.add_argument(
        "--nproc", type=integer(1), default=1,
        help="ranks of the trainer's process group, started here: this process is rank 0 and "
        "drives the others (1: one process; under torchrun the group is torchrun's)",
    )  # fmt: skip
    p.add_argument("--tensor-parallel", type=integer(1), default=1,
                   help="megatron: TP, ranks each layer is split across")  # fmt: skip
    p.add_argument("--pipeline-parallel", type=integer(1), default=1,
                   help="megatron: PP, stages the layers are split across")  # fmt: skip
    p.add_argument("--distributed-optimizer", action="store_true",
                   help="megatron: shard the optimizer state over data-parallel ranks")  # fmt: skip
    require(p, ("backend", "tensor_parallel", "pipeline_parallel"),
            lambda backend, tp, pp: backend == "megatron" or tp == pp == 1,
            "tensor and pipeline parallelism are the megatron backend's (the torch backend "
            "shards every layer over all ranks instead)")  # fmt: skip


def _service_args(p: argparse.ArgumentParser) -> None:
    """The consumer group, the metrics, and the broker."""
    p.add_argument("--group", default="trainer", help="consumer group (default trainer)")
    p.add_argument(
        "--metrics-port", type=integer(*PORT), default=None, help="serve Prometheus /metrics here"
    )
    p.add_argument(
        "--metrics-interval", type=number(above=0), default=30.0, help="seconds between lines"
    )
    p.add_argument(
        "--bootstrap", default=None,
        help="bootstrap servers (default: $SCALECUA_BOOTSTRAP or the embedded broker)",
    )  # fmt: skip


def trainer_config(args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    """Build the TrainerConfig and the backend's options from parsed `train` arguments."""
    from consumers.trainer.batching import PlanConfig
    from consumers.trainer.grpo import GRPOConfig
    from consumers.trainer.service import TrainerConfig

    config = TrainerConfig(
        policy=args.policy,
        backend=args.backend,
        checkpoints=args.checkpoints,
        judge_version=args.judge_version,
        batch_groups=args.batch_groups,
        micro_batch_tokens=args.micro_batch_tokens,
        micro_batch_rows=args.micro_batch_rows,
        group_timeout_s=args.group_timeout or None,
        max_steps=args.max_steps,
        keep_states=args.keep_states,
        keep_checkpoints=args.keep_checkpoints,
        group_id=args.group,
        plan=PlanConfig(
            objective=args.objective,
            max_lag=None if args.max_lag < 0 else args.max_lag,
            staleness=args.staleness,
            stale_weight=args.stale_weight,
            sft_threshold=args.sft_threshold,
            skip_equal_groups=args.skip_equal_groups,
        ),
        grpo=GRPOConfig(
            clip_low=args.clip_low,
            clip_high=args.clip_high,
            dual_clip=args.dual_clip,
            kl_coef=args.kl_coef,
            entropy_coef=args.entropy_coef,
        ),
    )
    options = {
        "lr": args.lr, "weight_decay": args.weight_decay, "grad_clip": args.grad_clip,
        "dtype": args.dtype, "device": args.device,
    }  # fmt: skip
    if args.backend == "megatron":
        options.update(tensor_parallel=args.tensor_parallel,
                       pipeline_parallel=args.pipeline_parallel,
                       distributed_optimizer=args.distributed_optimizer)  # fmt: skip
    elif args.distributed_optimizer:
        from runtime.errors import ConfigError

        raise ConfigError("--distributed-optimizer is the megatron backend's (the torch "
                          "backend shards the optimizer state over every rank already)")  # fmt: skip
    return config, options


def rank_threads(args: argparse.Namespace, nproc: int) -> int:
    """torch CPU threads for each rank above 0: --threads, else the cores shared out."""
    import os

    if args.threads or not str(args.device).startswith("cpu"):
        return int(args.threads)
    return max(1, (os.cpu_count() or 1) // nproc)


def _train(args: argparse.Namespace) -> int:
    from transformers.utils import logging as hf_logging

    from cli.bus_commands import _run
    from consumers.trainer.ranks import RankSpec, serve, torchrun_rank
    from consumers.trainer.startup import trainer_service
    from runtime.config import BusSettings

    hf_logging.disable_progress_bar()  # a service logs lines, not progress bars per checkpoint
    config, options = trainer_config(args)
    launched = torchrun_rank()
    nproc = launched[1] if launched is not None else args.nproc
    threads = rank_threads(args, nproc) if nproc > 1 else args.threads
    if threads:  # ranks on one machine share its cores
        import torch

        torch.set_num_threads(threads)
    if launched is not None and launched[0] > 0:  # torchrun: rank 0 drives, this rank serves
        from runtime.blobstore import open_blob_store

        return serve(RankSpec(config.backend, options, open_blob_store().url, threads=threads))
    if launched is not None and args.nproc > 1:
        from runtime.errors import ConfigError

        raise ConfigError("under torchrun the process group is torchrun's: drop --nproc")
    settings = BusSettings.from_env(args.bootstrap)

    async def main() -> int:
        async with trainer_service(
            settings, config, backend_options=options, metrics_port=args.metrics_port,
            metrics_interval_s=args.metrics_interval, nproc=args.nproc, rank_threads=threads,
        ) as runner:  # fmt: skip
            trainer = runner.processor
            ranks = f" on {nproc} ranks" if nproc > 1 else ""
            print(f"trainer: {config.plan.objective} on {args.policy} with the {args.backend} "
                  f"backend{ranks} at version {trainer.version}, {config.batch_groups} groups "
                  f"per step, checkpoints in {trainer.store.root}", file=sys.stderr)  # fmt: skip
            await runner.run()
        return 0

    return _run(main())
