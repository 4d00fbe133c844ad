"""The trainer's GRPO step on SmolLM2-135M with a group's shared prompt computed once, vs as rows.

The laptop recipe's groups (docs/learning.md): B groups x n rollouts of SmolLM2 in the
compact format, each rollout one segment of `turns` turns (the compact system prompt, the
task's instruction and a terminal-like observation of about `obs` tokens per turn, replies
of 7-20 sampled tokens). The n rollouts of a group share their first prompt (the same
task, reset to the same desktop) and then diverge. Rows, measured in the same run on the
same samples and weights:

- rows: every segment a left-padded row of its own (`pack_micro_batches`), the baseline;
- shared prefix: the first prompt computed once per group (`pack_shared`), every
  rollout's branch attending to it, the branches packed into rows of about 512 tokens
  (the backend's default `branch_row_tokens`);
- shared prefix, all of a pass's branches in one row (`branch_row_tokens` unbounded): the
  same tokens, but the dense attention of one long row;

each as one GRPO step (forward, backward, AdamW) with micro-batches of `--micro-batch-tokens`.
The table gives the tokens each layout computes and the step's seconds; `speedup` is rows'
seconds over shared's.

    python bench/shared_prefix.py --quick --json bench-shared-prefix.json
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from consumers.trainer.backends import Sample, make_backend  # noqa: E402
from consumers.trainer.batching import pack_micro_batches  # noqa: E402
from consumers.trainer.grpo import GRPOConfig, grpo_token_loss  # noqa: E402
from consumers.trainer.shared_prefix import batch_cost, pack_shared  # noqa: E402
from runtime.policy.model import smollm2_policy  # noqa: E402
from runtime.policy.prompts import system_prompt  # noqa: E402
from runtime.policy.render import Turn, render_history  # noqa: E402

_WORDS = (
    "notes.txt report.csv projects Documents total drwxr-xr-x user 4096 Nov 25 ok $ ls cat".split()
)


def _observation(rng: np.random.Generator, tokens: int, tok: object) -> str:
    """Terminal-like text of about `tokens` SmolLM2 tokens."""
    words: list[str] = []
    while len(tok.encode(" ".join(words))) < tokens:  # type: ignore[attr-defined]
        words.append(str(rng.choice(_WORDS)))
    return "Window: xterm\n" + " ".join(words)


def make_groups(
    processor, groups: int, n: int, turns: int, obs: int, seed: int = 0
) -> list[Sample]:  # noqa: ANN001
    """B groups x n one-segment rollouts: a shared first prompt, then each its own turns."""
    rng = np.random.default_rng(seed)
    tok = processor.tokenizer
    system = system_prompt("compact")
    samples = []
    for g in range(groups):
        instruction = f"Task {g}: append the line 'done {g}' to ~/notes.txt in the terminal."
        first = _observation(rng, obs, tok)
        scores = rng.integers(0, 2, n).astype(float)
        scores[0], scores[1] = 0.0, 1.0  # every group informative, as the trainer keeps them
        adv = (scores - scores.mean()) / (scores.std(ddof=1) + 1e-6)
        for i in range(n):
            history = []
            for t in range(int(rng.integers(1, turns + 1))):
                reply = tuple(int(x) for x in rng.integers(300, 20_000, int(rng.integers(7, 21))))
                text = first if t == 0 else _observation(rng, obs, tok)
                history.append(Turn(observation=text, response_ids=reply))
            r = render_history(system, instruction, history, processor)
            ids = np.asarray(r.ids, np.int32)
            mask = np.asarray(r.loss_mask, bool)
            old = np.where(mask, -2.0, 0.0).astype(np.float32)
            samples.append(Sample(ids, mask, old, advantage=float(adv[i]), temperature=1.0,
                                  trajectory_id=f"{g}/{i}", group_id=str(g)))  # fmt: skip
    return samples


def main() -> int:
    """Run the benchmark and print its table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 groups x 4 rollouts (< 1 min)")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    parser.add_argument("--micro-batch-tokens", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=0, help="steps per layout (0: 1 quick, 2)")
    args = parser.parse_args()
    import torch

    groups, n, turns, obs = (2, 4, 2, 40) if args.quick else (4, 8, 5, 80)
    repeats = args.repeats or (1 if args.quick else 2)
    backend = make_backend("torch", lr=1e-6)
    backend.load(smollm2_policy())
    assert backend.shares_prefixes
    samples = make_groups(backend.processor, groups, n, turns, obs)
    trained = sum(s.tokens for s in samples)
    config = GRPOConfig(kl_coef=0.0)

    def loss_fn(tb):  # noqa: ANN001, ANN202
        return grpo_token_loss(tb.logp, tb.old_logp, tb.advantages, tb.mask, config,
                               num_tokens=trained, weights=tb.weights, entropy=tb.entropy)  # fmt: skip

    shared = pack_shared(samples, args.micro_batch_tokens, 4)
    layouts = {  # name: (micro-batches, branch_row_tokens)
        "rows (each segment its own row)": (
            pack_micro_batches(samples, args.micro_batch_tokens, 4),
            512,
        ),
        "shared prefix, branch rows of 512": (shared, 512),
        "shared prefix, branches in one row": (shared, 1 << 30),
    }
    rows = []
    # Alternate the layouts so drift in the machine's speed hits both alike.
    times: dict[str, list[float]] = {name: [] for name in layouts}
    # Warm-up on one short sample: AdamW allocates its state at its first step.
    backend.step(pack_micro_batches(samples[:1], 1 << 30, 1), loss_fn, lambda s: [])
    for _ in range(repeats):
        for name, (batches, row_tokens) in layouts.items():
            backend.config = replace(backend.config, branch_row_tokens=row_tokens)
            started = time.perf_counter()
            result = backend.step(batches, loss_fn, lambda s: [])
            times[name].append(time.perf_counter() - started)
            del result
    for name, (batches, _) in layouts.items():
        seconds = min(times[name])
        rows.append({"layout": name, "micro_batches": len(batches),
                     "computed_tokens": sum(batch_cost(b) for b in batches),
                     "seconds": round(seconds, 2),
                     "trained_tokens_per_s": round(trained / seconds, 1)})  # fmt: skip
    base = rows[0]["seconds"]
    for row in rows:
        row["speedup"] = round(base / row["seconds"], 2)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    tokens = sum(len(s.ids) for s in samples)
    print(f"SmolLM2-135M GRPO step: {groups} groups x {n} rollouts, 1-{turns} turns, "
          f"~{obs}-token observations: {len(samples)} segments, {tokens} tokens, {trained} "
          f"trained; best of {repeats}; torch threads {torch.get_num_threads()}, "
          f"peak RSS {peak:.0f} MiB")  # fmt: skip
    header = ("layout", "micro_batches", "computed_tokens", "seconds", "trained_tokens_per_s",
              "speedup")  # fmt: skip
    widths = [max(len(h), *(len(str(r[h])) for r in rows)) for h in header]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    for r in rows:
        print("  ".join(str(r[h]).ljust(w) for h, w in zip(header, widths, strict=True)))
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "segments": len(samples),
                                         "tokens": tokens, "trained_tokens": trained,
                                         "speedup": rows[1]["speedup"],
                                         "peak_rss_mib": peak}, indent=2))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
