"""Visual Context Segmentation against step-wise and trajectory-level training, in one run.

The paper's §3.4 claim is about training cost: a 50-turn episode cut into O(T/Δ) segments
trains faster than one item per turn (2.83x from step-wise to VCS on GPUs), and one item
for the whole episode is too long. This bench measures the three modes of
`consumers/segmenter/vcs.py` (`stepwise`, `vcs`, both with the rollout's window K = Δ = 5,
and `trajectory`) on the same synthetic trajectories. Step-wise and VCS train the same
responses on contexts the engine saw: step-wise one item per turn (that turn's windowed
prompt, 6 to 10 screenshots once past the first ten turns), VCS one per Δ turns.

- a GRPO group of 8 episodes of 50 turns, each turn a 1280x800 screenshot (real PIL
  images, random pixels cycled from a pool of ten: content changes no cost) and a sampled
  reply of one to three sentences of reasoning plus one tool call (~64 ids of the tiny
  policy's real Qwen tokenizer, random rollout logprobs), under the OSWorld system prompt;
- items, images, tokens per trajectory and peak tokens per item;
- segmenter throughput: rollout steps per second through `segment_trajectory` (the whole
  group, median of passes);
- trainer step time: one GRPO step of the torch backend (tiny Qwen2.5-VL on CPU, the
  paper's clipping constants; the KL term is off unless `--kl-coef 1e-4`, since its frozen
  reference forward would push a loaded run past ten minutes) over the items of the group's
  first trajectory (`--step-trajectories`), packed as the trainer service packs them; the
  fastest of two steps per mode, taken in turns (`--repeats`); split into image
  preprocessing, vision tower and the rest (language model forward/backward, vocabulary
  head, optimizer), in wall and CPU time (the machine may be shared: the load average is
  printed), with the screenshots it loaded and encoded (each once per step). A mode whose
  items exceed the paper's 40K max sequence length is n/a;
- the language model's causal attention alone over each mode's items (forward and
  backward, every layer, each item one row): the part of a step that grows with the square
  of an item's length, which a 128-wide model feels far more than a 7B one;
- what a micro-batch costs whatever its length and what a trained token adds, from small
  text-only steps of the same backend (best of three). The explanation of the step-wise /
  VCS ratio printed at the end is built from these figures.

`--quick` (under a minute) is a smoke run with smaller inputs: 2 trajectories of 11 turns
(VCS cuts once), 320x200 screenshots, one sentence of reasoning per reply.

    python bench/segmentation.py --quick --json bench-segmentation.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.segmentation_report import PAPER_RATIO, explanation, print_table, step_ratios  # noqa: E402
from consumers.segmenter.vcs import Segment, TurnRecord, segment_trajectory  # noqa: E402
from consumers.trainer.backends import MicroBatch, Sample, make_backend  # noqa: E402
from consumers.trainer.backends.torch_backend import TorchBackend  # noqa: E402
from consumers.trainer.batching import pack_micro_batches  # noqa: E402
from consumers.trainer.grpo import GRPOConfig, group_advantages, grpo_token_loss  # noqa: E402
from consumers.trainer.service import TrainerConfig  # noqa: E402
from runtime.engines.base import SamplingParams  # noqa: E402
from runtime.policy.model import resolve_policy  # noqa: E402
from runtime.policy.processor import PolicyProcessor  # noqa: E402
from runtime.policy.prompts import system_prompt  # noqa: E402

MAX_SEQUENCE = 40_000  # the paper's max sequence length: longer items are not trained
ORDER = ("stepwise", "vcs", "trajectory")
INSTRUCTION = "Sum the monthly totals in column B into cell B14 and save the spreadsheet."
THOUGHTS = [
    "The spreadsheet is open and column B holds the monthly totals.",
    "The cell cursor is on B13, right below the last value.",
    "The Save dialog is showing and the file name field has the focus.",
    "A context menu opened where I expected the toolbar, so I will close it first.",
    "The formula bar shows what I typed, so the entry went into the right cell.",
    "Nothing changed after the last click; the window may not have had the focus.",
    "The sheet scrolled down and the header row is no longer visible.",
    "A dialog asks whether to keep the current format.",
]
ACTIONS = [
    '{{"action": "left_click", "coordinate": [{x}, {y}]}}',
    '{{"action": "double_click", "coordinate": [{x}, {y}]}}',
    '{{"action": "type", "text": "=SUM(B2:B13)\\n"}}',
    '{{"action": "key", "text": "ctrl+s"}}',
    '{{"action": "scroll", "coordinate": [{x}, {y}], "scroll_direction": "down", '
    '"scroll_amount": 3}}',
]


@dataclass(frozen=True)
class Workload:
    """What the bench trains on (defaults: the full run)."""

    turns: int = 50  # turns per trajectory (the paper's OSWorld budget)
    size: tuple[int, int] = (1280, 800)  # screenshot width, height
    trajectories: int = 8  # one GRPO group (the paper's n = 8) for items, tokens, throughput
    step_trajectories: int = 1  # of which the trainer step trains this many (CPU time)
    thoughts: int = 3  # a reply reasons in 1..thoughts sentences before its tool call
    k: int = 5  # VCS window: K observations kept...
    delta: int = 5  # ...plus up to Δ more before the oldest Δ are dropped


QUICK = Workload(turns=11, size=(320, 200), trajectories=2, step_trajectories=1, thoughts=1)


def make_screenshots(count: int, size: tuple[int, int], seed: int = 0) -> list[Any]:
    """Random-pixel RGB PIL images of one size."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    width, height = size
    return [
        Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))
        for _ in range(count)
    ]


def make_response(rng: random.Random, processor: PolicyProcessor, thoughts: int = 3) -> list[int]:
    """Token ids of one sampled reply: a few sentences of reasoning, one tool call, <|im_end|>."""
    thought = " ".join(rng.sample(THOUGHTS, rng.randint(1, thoughts)))
    action = rng.choice(ACTIONS).format(x=rng.randint(0, 1000), y=rng.randint(0, 1000))
    text = (
        f'{thought}\n<tool_call>\n{{"name": "computer_use", "arguments": {action}}}\n</tool_call>'
    )
    im_end = processor.tokenizer.convert_tokens_to_ids("<|im_end|>")
    return [*processor.tokenizer(text, add_special_tokens=False)["input_ids"], im_end]


def make_trajectories(
    processor: PolicyProcessor, workload: Workload, screenshots: list[Any], seed: int = 0
) -> list[list[TurnRecord]]:
    """The group's trajectories: a screenshot and a sampled response per turn."""
    rng = random.Random(seed)
    trajectories = []
    for i in range(workload.trajectories):
        turns = []
        for t in range(workload.turns):
            ids = make_response(rng, processor, workload.thoughts)
            turns.append(
                TurnRecord(
                    screenshot=screenshots[(i + t) % len(screenshots)],
                    observation="",
                    response_ids=ids,
                    logprobs=[-rng.uniform(0.0, 1.5) for _ in ids],
                    image_ref=f"{i}/{t}",
                )
            )
        trajectories.append(turns)
    return trajectories


def segment_group(
    trajectories: list[list[TurnRecord]], processor: PolicyProcessor, mode: str, workload: Workload
) -> list[list[Segment]]:
    """Every trajectory of the group cut in one mode."""
    prompt = system_prompt("osworld")
    return [
        segment_trajectory(prompt, INSTRUCTION, turns, processor, mode, workload.k, workload.delta)
        for turns in trajectories
    ]


def segmenter_rate(
    trajectories: list[list[TurnRecord]],
    processor: PolicyProcessor,
    mode: str,
    workload: Workload,
    min_seconds: float,
) -> float:
    """Rollout steps per second through `segment_trajectory`: median of passes over the group."""
    steps = sum(len(turns) for turns in trajectories)
    passes: list[float] = []
    started = time.perf_counter()
    while len(passes) < 3 or time.perf_counter() - started < min_seconds:
        t = time.perf_counter()
        segment_group(trajectories, processor, mode, workload)
        passes.append(time.perf_counter() - t)
    return steps / statistics.median(passes)


def samples_of(
    segments: list[Segment], turns: list[TurnRecord], advantage: float, trajectory_id: str
) -> list[Sample]:
    """A trajectory's segments as the trainer's samples (refs and sizes of their screenshots)."""
    sampling = SamplingParams()  # the rollout's temperature and top-p: the logprobs' settings
    return [
        Sample(
            ids=np.asarray(s.ids, np.int32),
            mask=np.asarray(s.loss_mask, bool),
            old_logprobs=np.asarray(s.logprobs, np.float32),
            advantage=advantage,
            image_refs=tuple(turns[t].image_ref or "" for t in s.image_turns),
            image_sizes=tuple(turns[t].screenshot.size for t in s.image_turns),
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            trajectory_id=trajectory_id,
            group_id="bench",
        )
        for s in segments
        if any(s.loss_mask)
    ]


class StepClock:
    """Seconds a backend spends preprocessing images and in its vision towers, summed."""

    def __init__(self, backend: TorchBackend) -> None:
        self.image_prep = 0.0
        self.vision = 0.0
        self._entered = 0.0
        processor = backend.processor
        image_inputs = processor.image_inputs

        def timed_image_inputs(images: list[Any]) -> dict[str, Any]:
            started = time.perf_counter()
            try:
                return image_inputs(images)
            finally:
                self.image_prep += time.perf_counter() - started

        # The instance attribute shadows the method: every call the backend makes is timed.
        processor.image_inputs = timed_image_inputs  # type: ignore[method-assign]
        for model in (backend.model, backend.reference):
            for name, module in model.named_modules() if model is not None else ():
                if name.rsplit(".", 1)[-1] in ("visual", "vision_tower", "vision_model"):
                    module.register_forward_pre_hook(self._enter)
                    module.register_forward_hook(self._leave)

    def _enter(self, *_: Any) -> None:
        self._entered = time.perf_counter()

    def _leave(self, *_: Any) -> None:
        self.vision += time.perf_counter() - self._entered

    def reset(self) -> None:
        """Start counting from zero."""
        self.image_prep = self.vision = 0.0


def head_positions(batches: list[MicroBatch]) -> int:
    """Positions the vocabulary head projects: each row's own trained positions."""
    return sum(s.tokens for batch in batches for s in batch.samples)


def train_step(
    backend: TorchBackend,
    samples: list[Sample],
    loader: Callable[[Sample], list[Any]],
    config: GRPOConfig,
    clock: StepClock | None = None,
) -> dict[str, float]:
    """One GRPO step over the samples, packed as the trainer service packs them; its timings."""
    service = TrainerConfig()
    batches = pack_micro_batches(samples, service.micro_batch_tokens, service.micro_batch_rows)
    trained = sum(s.tokens for s in samples)

    def loss_fn(tb: Any) -> tuple[Any, dict[str, float]]:
        return grpo_token_loss(tb.logp, tb.old_logp, tb.advantages, tb.mask, config,
                               num_tokens=trained, ref_logp=tb.ref_logp, weights=tb.weights,
                               entropy=tb.entropy)  # fmt: skip

    if clock is not None:
        clock.reset()
    started, cpu = time.perf_counter(), time.process_time()
    result = backend.step(batches, loss_fn, loader)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    image_prep = clock.image_prep if clock is not None else 0.0
    vision = clock.vision if clock is not None else 0.0
    return {
        "step_s": seconds,
        "step_cpu_s": cpu,
        "forward_backward_s": result["forward_backward_s"],
        "image_prep_s": image_prep,
        "vision_s": vision,
        "rest_s": seconds - image_prep - vision,
        "micro_batches": len(batches),
        "step_tokens": int(sum(len(s.ids) for s in samples)),
        "step_trained_tokens": trained,
        "step_head_positions": head_positions(batches),
        "step_images": sum(len(s.image_refs) for s in samples),  # image slots of the items
        # ...and screenshots the step loaded and put through the vision tower (each once)
        "step_images_loaded": int(result.get("images_loaded", 0)),
        "step_images_encoded": int(result.get("images_encoded", 0)),
    }


def probe_costs(
    backend: TorchBackend, config: GRPOConfig, trained: int, repeats: int = 3
) -> dict[str, float]:
    """What a micro-batch costs whatever its length, and what a trained token adds (best of repeats)."""
    rng = np.random.default_rng(1)
    sampling = SamplingParams()

    def forward_backward(length: int, n: int) -> float:
        ids = rng.integers(300, 20_000, length).astype(np.int32)  # ordinary text, no images
        mask = np.zeros(length, bool)
        mask[length - n :] = True
        old = np.where(mask, -1.0, 0.0).astype(np.float32)
        sample = Sample(ids, mask, old, advantage=1.0, temperature=sampling.temperature)
        step = train_step(backend, [sample], lambda s: [], config)
        return step["forward_backward_s"]

    forward_backward(64, 1)  # warm-up: the first step pays one-time costs
    # The best of a few runs: on a shared machine, slower runs are other jobs' time.
    tiny = min(forward_backward(64, 1) for _ in range(repeats))
    length = 64 + trained
    untrained = min(forward_backward(length, 1) for _ in range(repeats))
    with_trained = min(forward_backward(length, trained + 1) for _ in range(repeats))
    return {
        "micro_batch_s": tiny,
        "trained_token_ms": max(0.0, with_trained - untrained) / trained * 1000,
    }


def attention_cost(backend: TorchBackend, lengths: list[int], repeats: int = 2) -> float:
    """Seconds the language model's causal attention alone takes, forward and backward, over
    items of these lengths (one row each, every decoder layer; best of `repeats` per length)."""
    import torch

    config = backend.model.config.get_text_config()
    heads, layers = config.num_attention_heads, config.num_hidden_layers
    dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    timed: dict[int, float] = {}
    for length in sorted(set(lengths)):
        q, k, v = (torch.randn(1, heads, length, dim, requires_grad=True) for _ in range(3))
        best = float("inf")
        for _ in range(repeats):
            started = time.perf_counter()
            torch.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=True
            ).sum().backward()
            best = min(best, time.perf_counter() - started)
        timed[length] = best
    return layers * sum(timed[n] for n in lengths)


def summarize(segmented: list[list[Segment]]) -> dict[str, float]:
    """Items, images and tokens of a segmented group: totals and per-trajectory means."""
    items = [s for segments in segmented for s in segments]
    tokens = [len(s.ids) for s in items]
    n = len(segmented)
    return {
        "items": len(items),
        "items_per_trajectory": len(items) / n,
        "images_per_trajectory": sum(len(s.image_turns) for s in items) / n,
        "total_tokens": sum(tokens),
        "tokens_per_trajectory": sum(tokens) / n,
        "trained_tokens": sum(s.trained_tokens for s in items),
        "peak_tokens_per_item": max(tokens),
        "mean_tokens_per_item": sum(tokens) / len(tokens),
    }


@dataclass(frozen=True)
class Options:
    """The command line, resolved."""

    workload: Workload
    quick: bool
    kl_coef: float  # λ of the KL term; 0 loads no reference
    repeats: int  # steps per mode; the fastest counts
    threads: int  # torch threads (0: torch's default)
    json_path: Path | None  # write the figures here


@dataclass(frozen=True)
class Inputs:
    """The group every mode is measured on, and the backend that trains it."""

    backend: TorchBackend
    trajectories: list[list[TurnRecord]]
    loader: Callable[[Sample], list[Any]]  # a sample's screenshots, by their refs
    advantages: list[float | None]  # one per trajectory: half the group passes
    response_ids: float  # mean response ids per turn


def parse_options() -> Options:
    """The bench's flags, with the quick or full workload they adjust."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="11 turns, 320x200, shorter replies, 2 trajectories (< 1 min)")  # fmt: skip
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    parser.add_argument("--turns", type=int, default=None, help="turns per trajectory")
    parser.add_argument("--trajectories", type=int, default=None, help="trajectories (a group)")
    parser.add_argument("--step-trajectories", type=int, default=None,
                        help="trajectories the trainer step trains")  # fmt: skip
    parser.add_argument("--kl-coef", type=float, default=0.0,
                        help="λ of the KL term (paper: 1e-4, which adds the frozen reference's "
                        "forward to every micro-batch; off by default to fit the time budget)")  # fmt: skip
    parser.add_argument("--repeats", type=int, default=None,
                        help="steps per mode, taking turns; the fastest counts (2; quick: 1)")  # fmt: skip
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    args = parser.parse_args()
    workload = QUICK if args.quick else Workload()
    overrides = {"turns": args.turns, "trajectories": args.trajectories,
                 "step_trajectories": args.step_trajectories}  # fmt: skip
    workload = replace(workload, **{k: v for k, v in overrides.items() if v})
    if workload.step_trajectories > workload.trajectories:
        parser.error("--step-trajectories cannot exceed --trajectories")
    repeats = args.repeats or (1 if args.quick else 2)
    return Options(workload, args.quick, args.kl_coef, repeats, args.threads, args.json)


def load_inputs(workload: Workload, kl_coef: float) -> Inputs:
    """Load the tiny policy and make the group's trajectories, scores and screenshot loader."""
    backend = make_backend("torch", lr=3e-6)
    base = resolve_policy("tiny")
    backend.load(base, reference=base if kl_coef else None)  # the KL term's reference
    assert isinstance(backend, TorchBackend)
    screenshots = make_screenshots(10, workload.size)
    trajectories = make_trajectories(backend.processor, workload, screenshots)
    by_ref = {turn.image_ref: turn.screenshot for turns in trajectories for turn in turns}
    loader = lambda s: [by_ref[ref] for ref in s.image_refs]  # noqa: E731
    scores = [float(i % 2 == 0) for i in range(workload.trajectories)]  # half the group passes
    advantages = group_advantages(scores).advantages
    response = statistics.mean(len(t.response_ids) for turns in trajectories for t in turns)
    return Inputs(backend, trajectories, loader, advantages, response)


def print_workload(options: Options, inputs: Inputs, load_before: float) -> None:
    """The line that says what this run measures, and on how loaded a machine."""
    import torch

    workload, processor = options.workload, inputs.backend.processor
    print(f"{workload.trajectories} trajectories of {workload.turns} turns, "
          f"{workload.size[0]}x{workload.size[1]} screenshots "
          f"({processor.image_token_count(*workload.size)} image tokens each), "
          f"{inputs.response_ids:.0f} "
          f"response ids per turn; VCS K={workload.k}, Δ={workload.delta}; the trainer step "
          f"trains the first {workload.step_trajectories} in every mode (best of "
          f"{options.repeats}), "
          f"λ = {options.kl_coef:g}; "
          f"torch threads "
          f"{torch.get_num_threads()}, load average {load_before:.1f}", flush=True)  # fmt: skip


def segment_modes(
    options: Options, inputs: Inputs
) -> tuple[dict[str, dict], dict[str, list[Sample]]]:
    """Each mode's row (item figures, segmenter rate) and the samples its trainer step trains."""
    workload, trajectories = options.workload, inputs.trajectories
    processor = inputs.backend.processor
    rows: dict[str, dict] = {}
    samples: dict[str, list[Sample]] = {}
    for mode in ORDER:
        segmented = segment_group(trajectories, processor, mode, workload)
        rows[mode] = {"mode": mode, **summarize(segmented)}
        rows[mode]["segmenter_steps_per_s"] = segmenter_rate(
            trajectories, processor, mode, workload, min_seconds=0.3 if options.quick else 2.0
        )
        samples[mode] = [
            s
            for i in range(workload.step_trajectories)
            for s in samples_of(segmented[i], trajectories[i], inputs.advantages[i] or 0.0, f"t{i}")
        ]
        print(f"  {mode}: {rows[mode]['items']} items, "
              f"{rows[mode]['segmenter_steps_per_s']:,.0f} steps/s", flush=True)  # fmt: skip
    return rows, samples


def measure_costs(
    backend: TorchBackend,
    config: GRPOConfig,
    rows: dict[str, dict],
    samples: dict[str, list[Sample]],
    quick: bool,
) -> dict[str, float]:
    """The fixed and per-token costs of a step; each mode's attention-alone time into its row."""
    print("  probing the cost of a micro-batch and of a trained token ...", flush=True)
    costs = probe_costs(backend, config, trained=64 if quick else 256)
    print("  timing the causal attention of every item alone ...", flush=True)
    for mode in ("stepwise", "vcs"):
        # rounded to 100 tokens: one timing serves items of about the same length
        lengths = [round(len(s.ids), -2) or 100 for s in samples[mode]]
        rows[mode]["attention_s"] = attention_cost(backend, lengths)
    return costs


def time_steps(
    inputs: Inputs,
    config: GRPOConfig,
    rows: dict[str, dict],
    samples: dict[str, list[Sample]],
    repeats: int,
) -> None:
    """Each mode's fastest trainer step into its row, or why it has none (`step_na`)."""
    clock = StepClock(inputs.backend)
    for mode, row in rows.items():
        longest = max(len(s.ids) for s in samples[mode])
        if longest > MAX_SEQUENCE:
            row["step_na"] = (f"its item has {longest:,} tokens, more than the paper's "
                              f"{MAX_SEQUENCE:,}-token max sequence length")  # fmt: skip
    # Modes take turns, and each keeps its fastest step: on a shared machine other jobs'
    # load comes and goes, and a single step per mode can land in a busy minute.
    for repeat in range(repeats):
        for mode, row in rows.items():
            if row.get("step_na"):
                continue
            print(f"  {mode}: training {len(samples[mode])} items "
                  f"({repeat + 1}/{repeats}) ...", flush=True)  # fmt: skip
            try:
                step = train_step(inputs.backend, samples[mode], inputs.loader, config, clock)
            except (RuntimeError, MemoryError) as exc:  # e.g. out of memory: report it, go on
                row["step_na"] = f"the step failed: {type(exc).__name__}: {exc}"[:300]
                continue
            row["step_s_runs"] = [*row.get("step_s_runs", []), round(step["step_s"], 2)]
            if step["step_s"] < row.get("step_s", float("inf")):
                row.update(step)


def vocabulary_share(backend: TorchBackend) -> float:
    """The share of the model's weights in its token embeddings."""
    weights = list(backend.model.parameters())
    return backend.model.get_input_embeddings().weight.numel() / sum(p.numel() for p in weights)


def report(
    options: Options,
    inputs: Inputs,
    rows: dict[str, dict],
    costs: dict[str, float],
    began: float,
    load_before: float,
) -> None:
    """Print the table, the ratios and their explanation; write the figures as JSON if asked."""
    import torch

    ratios = step_ratios(rows)
    ratio, cpu_ratio = ratios["stepwise_vs_vcs_step_time"], ratios["stepwise_vs_vcs_cpu_time"]
    token_ratio = ratios["stepwise_vs_vcs_tokens"]
    vocab_share = vocabulary_share(inputs.backend)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print()
    print_table(rows)
    print(f"\nstep-wise / VCS step time: {'n/a' if ratio is None else f'{ratio:.2f}x'} "
          f"(CPU time: {'n/a' if cpu_ratio is None else f'{cpu_ratio:.2f}x'}; tokens alone: "
          f"{token_ratio:.2f}x; paper, GPUs: {PAPER_RATIO}x)")  # fmt: skip
    print()
    print(explanation(rows, costs, vocab_share))
    elapsed = time.perf_counter() - began
    print(f"\n{elapsed:.0f} s in all; peak RSS {peak:.0f} MiB; load average "
          f"{load_before:.1f} before, {os.getloadavg()[0]:.1f} after")  # fmt: skip
    if options.json_path:
        options.json_path.write_text(json.dumps({
            **ratios,
            "segmenter_steps_per_s": rows["vcs"]["segmenter_steps_per_s"],
            "modes": rows,
            "costs": costs,
            "workload": {**asdict(options.workload), "quick": options.quick,
                         "response_ids_per_turn": inputs.response_ids},
            "paper_ratio": PAPER_RATIO,
            "kl_coef": options.kl_coef,
            "repeats": options.repeats,
            "torch_threads": torch.get_num_threads(),
            "peak_rss_mib": peak,
            "seconds": elapsed,
        }, indent=2))  # fmt: skip


def main() -> int:
    """Run the benchmark, print its table, the ratio and its explanation."""
    options = parse_options()
    import torch

    if options.threads:
        torch.set_num_threads(options.threads)
    began, load_before = time.perf_counter(), os.getloadavg()[0]
    inputs = load_inputs(options.workload, options.kl_coef)
    print_workload(options, inputs, load_before)
    rows, samples = segment_modes(options, inputs)
    config = GRPOConfig(kl_coef=options.kl_coef)  # otherwise the paper's constants
    costs = measure_costs(inputs.backend, config, rows, samples, options.quick)
    time_steps(inputs, config, rows, samples, options.repeats)
    report(options, inputs, rows, costs, began, load_before)
    return 0


if __name__ == "__main__":
    sys.exit(main())
