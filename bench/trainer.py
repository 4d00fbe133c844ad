"""The trainer's step on CPU: one GRPO optimisation step of the torch backend, tiny Qwen2.5-VL.

B groups x n rollouts, each one segment of `turns` turns (a screenshot per turn at 112x112,
`response` sampled tokens per turn), the paper's objective constants. Rows, measured in the
same run on the same data:

- forward only (no gradients): the logprob recompute alone, the baseline;
- a GRPO step with λ = 0 (no reference forward) and with the paper's λ = 1e-4 (the frozen
  reference's forward added), micro-batches of 4 rows and of 1 row;
- writing the checkpoint (safetensors + processor files + optimizer state).

    python bench/trainer.py --quick --json bench-trainer.json
"""

from __future__ import annotations

import argparse
import json
import resource
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


def make_samples(processor, groups: int, n: int, turns: int, response: int) -> tuple[list, dict]:  # noqa: ANN001
    """Samples with random screenshots and responses, advantages normalised per group."""
    from PIL import Image

    rng = np.random.default_rng(0)
    samples, images = [], {}
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
            s = Sample(ids, mask, np.zeros(len(ids), np.float32), advantage=float(adv[i]),
                       temperature=0.8, trajectory_id=f"{g}/{i}")  # fmt: skip
            samples.append(s)
            images[s.trajectory_id] = r.images
    return samples, images


def main() -> int:
    """Run the benchmark and print its table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 groups x 4 rollouts (< 1 min)")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    args = parser.parse_args()
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    groups, n, turns, response = (2, 4, 2, 16) if args.quick else (4, 8, 3, 32)
    base = default_tiny_policy()
    backend = make_backend("torch", lr=3e-6)
    backend.load(base, reference=base)
    samples, images = make_samples(backend.processor, groups, n, turns, response)
    loader = lambda s: images[s.trajectory_id]  # noqa: E731
    tokens = sum(len(s.ids) for s in samples)
    trained = sum(s.tokens for s in samples)
    rows = []

    def record(name: str, seconds: float) -> None:
        rows.append({"method": name, "seconds": round(seconds, 3),
                     "trained_tokens_per_s": round(trained / seconds, 1),
                     "tokens_per_s": round(tokens / seconds, 1)})  # fmt: skip

    # Forward only: also fills in the "rollout" logprobs (the ratio then starts at 1).
    started = time.perf_counter()
    filled = []
    for batch in pack_micro_batches(samples, 1 << 30, 4):
        tb = backend.forward_logprobs(batch, loader)
        for row, s in enumerate(batch.samples):
            old = np.zeros(len(s.ids), np.float32)
            old[s.mask] = tb.logp[row][tb.mask[row] > 0].numpy()
            filled.append(Sample(s.ids, s.mask, old, s.advantage, temperature=0.8,
                                 trajectory_id=s.trajectory_id))  # fmt: skip
    record("forward only (no grad), 4 rows", time.perf_counter() - started)
    samples = filled
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
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "segments": len(samples),
                                         "tokens": tokens, "trained_tokens": trained,
                                         "peak_rss_mib": peak}, indent=2))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
