"""The trainer's step on CPU: one GRPO optimisation step of the torch backend, tiny Qwen2.5-VL.

B groups x n rollouts, each one segment of `turns` turns (a screenshot per turn at 112x112,
`response` sampled tokens per turn), the paper's objective constants. Rows, measured in the
same run on the same data:

- forward only (no gradients): the logprob recompute alone, the baseline;
- a GRPO step with λ = 0 (no reference forward) and with the paper's λ = 1e-4 (the frozen
  reference's forward added), micro-batches of 4 rows and of 1 row;
- writing the checkpoint (safetensors + processor files + optimizer state).

With `--nproc N`, the same step (λ = 1e-4, micro-batches of 4 rows) is also timed on one
rank and on N ranks (FSDP2 over gloo, driven from rank 0 as the trainer service drives it),
each in a fresh process: step time and peak memory (RSS) per rank. Screenshots live in a
blob store, where every rank loads its own.

    python bench/trainer.py --quick --json bench-trainer.json
    python bench/trainer.py --quick --nproc 2
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from consumers.trainer.backends import Sample, make_backend  # noqa: E402
from consumers.trainer.batching import pack_micro_batches  # noqa: E402
from consumers.trainer.checkpoints import CheckpointStore  # noqa: E402
from consumers.trainer.grpo import GRPOConfig, finish_stats, grpo_token_loss  # noqa: E402
from runtime.policy.model import default_tiny_policy  # noqa: E402
from runtime.policy.render import Turn, render_history  # noqa: E402


def make_samples(
    processor,
    blobs,
    groups: int,
    n: int,
    turns: int,
    response: int,  # noqa: ANN001
) -> list[Sample]:
    """Samples with random screenshots (PNG in the blob store) and responses, advantages
    normalised per group."""
    import io

    from PIL import Image

    rng = np.random.default_rng(0)
    samples = []
    for g in range(groups):
        scores = rng.integers(0, 2, n).astype(float)
        adv = (scores - scores.mean()) / (scores.std(ddof=1) + 1e-6) if scores.std() else scores * 0
        for i in range(n):
            shots = [
                Image.fromarray(rng.integers(0, 256, (112, 112, 3), dtype=np.uint8))
                for _ in range(turns)
            ]
            history = [
                Turn(shots[t], f"turn {t}", response_ids=tuple(rng.integers(300, 20_000, response)))
                for t in range(turns)
            ]
            r = render_history("You operate a computer.", "Sum the column.", history, processor)
            ids = np.asarray(r.ids, np.int32)
            mask = np.asarray(r.loss_mask, bool)
            refs = []
            for shot in shots:
                png = io.BytesIO()
                shot.save(png, format="PNG")
                refs.append(blobs.put(png.getvalue()))
            s = Sample(ids, mask, np.zeros(len(ids), np.float32), advantage=float(adv[i]),
                       image_refs=tuple(refs), image_sizes=tuple(im.size for im in shots),
                       temperature=0.8, trajectory_id=f"{g}/{i}")  # fmt: skip
            samples.append(s)
    return samples


def with_rollout_logprobs(backend, samples: list[Sample], loader) -> list[Sample]:  # noqa: ANN001
    """The samples with the backend's own logprobs as the rollout's (the ratio starts at 1)."""
    filled = []
    for batch in pack_micro_batches(samples, 1 << 30, 4):
        tb = backend.forward_logprobs(batch, loader)
        for row, s in enumerate(batch.samples):
            old = np.zeros(len(s.ids), np.float32)
            old[s.mask] = tb.logp[row][tb.mask[row] > 0].numpy()
            filled.append(dataclasses.replace(s, old_logprobs=old))
    return filled


def _peak_mib(pid: int | None = None) -> float:
    """Peak resident memory (VmHWM) of a process on this machine, in MiB."""
    status = Path(f"/proc/{pid or os.getpid()}/status").read_text()
    return (
        int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM")))
        / 1024
    )


def rank_run(nproc: int, quick: bool, threads: int) -> dict:
    """Time one GRPO step (λ = 1e-4, 4 rows) on `nproc` ranks; peak RSS per rank (fresh process)."""
    import torch

    from consumers.trainer.grpo import StepObjective
    from consumers.trainer.ranks import RankGroup, RankSpec
    from consumers.trainer.screenshots import load_images
    from runtime.blobstore import open_blob_store

    if threads:
        torch.set_num_threads(threads)
    groups, n, turns, response = (2, 4, 2, 16) if quick else (4, 8, 3, 32)
    base = default_tiny_policy()
    with tempfile.TemporaryDirectory() as tmp:
        blobs = open_blob_store(str(Path(tmp) / "blobs"))
        loader = lambda s: load_images(blobs, s)  # noqa: E731
        group = None
        if nproc > 1:
            group = RankGroup.spawn(nproc, RankSpec("torch", {"lr": 3e-6}, blobs=blobs.url,
                                                    threads=threads))  # fmt: skip
            group.connect()
            backend = group.backend()
        else:
            backend = make_backend("torch", lr=3e-6)
        try:
            backend.load(base, reference=base)
            samples = make_samples(backend.processor, blobs, groups, n, turns, response)
            samples = with_rollout_logprobs(backend, samples, loader)
            batches = pack_micro_batches(samples, 1 << 30, 4)
            loss = StepObjective("grpo", sum(s.tokens for s in samples), GRPOConfig())
            seconds = []
            for _ in range(2):  # the first step also pays one-time costs
                started = time.perf_counter()
                result = backend.step(batches, loss, loader)
                seconds.append(time.perf_counter() - started)
            pids = [os.getpid(), *(p.pid for p in (group.workers if group else []))]
            peaks = [round(_peak_mib(pid), 0) for pid in pids]
        finally:
            if group is not None:
                group.close()
    return {"ranks": nproc, "threads": torch.get_num_threads(), "step_s": round(min(seconds), 3),
            "step_s_runs": [round(x, 3) for x in seconds], "peak_rss_mib": peaks,
            "micro_batches": len(batches), "grad_norm": result["grad_norm"],
            "tokens": sum(len(s.ids) for s in samples)}  # fmt: skip


def compare_ranks(nproc: int, quick: bool) -> list[dict]:
    """rank_run for 1 and `nproc` ranks, each in a fresh process (clean peaks); CPU cores are
    shared out: one rank takes them all, N ranks take cores / N threads each."""
    cores = os.cpu_count() or 1
    out = []
    for ranks in (1, nproc):
        threads = max(1, cores // ranks)
        command = [sys.executable, __file__, "--rank-run", str(ranks), "--threads", str(threads)]
        done = subprocess.run([*command, *(["--quick"] if quick else [])], capture_output=True,
                              text=True, check=True)  # fmt: skip
        out.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return out


def main() -> int:
    """Run the benchmark and print its table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 groups x 4 rollouts (< 1 min)")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument("--nproc", type=int, default=1,
                        help="also time the step on this many ranks against one rank")  # fmt: skip
    parser.add_argument("--rank-run", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    import torch

    if args.rank_run:  # a child of --nproc: one measurement, as JSON on the last line
        print(json.dumps(rank_run(args.rank_run, args.quick, args.threads)))
        return 0
    if args.threads:
        torch.set_num_threads(args.threads)
    groups, n, turns, response = (2, 4, 2, 16) if args.quick else (4, 8, 3, 32)
    base = default_tiny_policy()
    backend = make_backend("torch", lr=3e-6)
    backend.load(base, reference=base)
    from consumers.trainer.screenshots import load_images
    from runtime.blobstore import open_blob_store

    scratch = tempfile.TemporaryDirectory()
    blobs = open_blob_store(str(Path(scratch.name) / "blobs"))
    samples = make_samples(backend.processor, blobs, groups, n, turns, response)
    loader = lambda s: load_images(blobs, s)  # noqa: E731
    tokens = sum(len(s.ids) for s in samples)
    trained = sum(s.tokens for s in samples)
    rows = []

    def record(name: str, seconds: float) -> None:
        rows.append({"method": name, "seconds": round(seconds, 3),
                     "trained_tokens_per_s": round(trained / seconds, 1),
                     "tokens_per_s": round(tokens / seconds, 1)})  # fmt: skip

    # Forward only: also fills in the "rollout" logprobs (the ratio then starts at 1).
    started = time.perf_counter()
    samples = with_rollout_logprobs(backend, samples, loader)
    record("forward only (no grad), 4 rows", time.perf_counter() - started)
    stats = {}
    for name, kl, rows_per in (
        ("GRPO step, λ=0 (no reference), 4 rows", 0.0, 4),
        ("GRPO step, λ=1e-4 (reference), 4 rows", 1e-4, 4),
        ("GRPO step, λ=1e-4 (reference), 1 row", 1e-4, 1),
    ):
        config = GRPOConfig(kl_coef=kl)
        reference, backend.reference = backend.reference, (backend.reference if kl else None)

        def loss_fn(tb, config=config):  # noqa: ANN001, ANN202
            return grpo_token_loss(tb.logp, tb.old_logp, tb.advantages, tb.mask, config,
                                   num_tokens=trained, ref_logp=tb.ref_logp, weights=tb.weights,
                                   entropy=tb.entropy)  # fmt: skip

        started = time.perf_counter()
        result = backend.step(pack_micro_batches(samples, 1 << 30, rows_per), loss_fn, loader)
        record(name, time.perf_counter() - started)
        stats = finish_stats(result["parts"])
        backend.reference = reference
    with tempfile.TemporaryDirectory() as tmp:
        store = CheckpointStore(tmp)
        started = time.perf_counter()
        store.write(1, backend.save, backend.save_state, {"step": 1})
        record("write checkpoint (weights + optimizer)", time.perf_counter() - started)
    baseline = rows[0]["seconds"]
    for row in rows:
        row["vs_forward"] = round(row["seconds"] / baseline, 2)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{groups} groups x {n} rollouts, {turns} turns each (112x112 screenshots, {response} "
          f"sampled tokens per turn): {len(samples)} segments, {tokens} tokens, {trained} "
          f"trained; torch threads {torch.get_num_threads()}, peak RSS {peak:.0f} MiB")  # fmt: skip
    header = ("method", "seconds", "trained_tokens_per_s", "tokens_per_s", "vs_forward")
    widths = [max(len(h), *(len(str(r[h])) for r in rows)) for h in header]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    for r in rows:
        print("  ".join(str(r[h]).ljust(w) for h, w in zip(header, widths, strict=True)))
    print(f"last step: loss {stats.get('loss', 0):.4g}, kl {stats.get('kl', 0):.3g}, "
          f"clip_frac {stats.get('clip_frac', 0):.3g}")  # fmt: skip
    scratch.cleanup()
    ranks = compare_ranks(args.nproc, args.quick) if args.nproc > 1 else []
    if ranks:
        print(f"\nthe λ=1e-4 step, 4 rows, on 1 rank and on {args.nproc} (FSDP2, gloo), each in a "
              f"fresh process (best of 2 steps; {os.cpu_count()} cores shared out):")  # fmt: skip
        print("ranks  threads/rank  step s  vs 1 rank  peak RSS per rank (MiB)")
        for r in ranks:
            print(f"{r['ranks']:<5}  {r['threads']:<12}  {r['step_s']:<6}  "
                  f"{r['step_s'] / ranks[0]['step_s']:<9.2f}  {r['peak_rss_mib']}")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "segments": len(samples),
                                         "tokens": tokens, "trained_tokens": trained,
                                         "peak_rss_mib": peak, "ranks": ranks}, indent=2))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
