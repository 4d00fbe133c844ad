"""The report of `bench/segmentation.py`: its comparison table and the paragraph that explains
the step-wise / VCS ratio from the run's own figures."""

from __future__ import annotations

__all__ = ["PAPER_RATIO", "explanation", "print_table", "step_ratios"]

PAPER_RATIO = 2.83  # the paper's step-wise / VCS training time, on GPUs


def explanation(rows: dict[str, dict], costs: dict[str, float], vocab_share: float) -> str:
    """One paragraph: why our step-wise / VCS ratio differs from the paper's, with this run's figures."""
    s, v = rows["stepwise"], rows["vcs"]
    token_ratio = s["tokens_per_trajectory"] / v["tokens_per_trajectory"]
    if "step_s" not in s or "step_s" not in v:
        return f"Token counts alone give {token_ratio:.2f}x; no step time to compare (see above)."
    ratio = s["step_s"] / v["step_s"]
    batch_s, head_ms = costs["micro_batch_s"], costs["trained_token_ms"]
    saved = (s["micro_batches"] - v["micro_batches"]) * batch_s
    image_s, image_v = s["image_prep_s"] + s["vision_s"], v["image_prep_s"] + v["vision_s"]
    encoded_s, encoded_v = s["step_images_encoded"], v["step_images_encoded"]
    per_image = (image_s + image_v) / max(encoded_s + encoded_v, 1)

    def context_ms(r: dict) -> float:  # the rest, less the vocabulary head and fixed costs
        fixed = r["micro_batches"] * batch_s + r["step_head_positions"] * head_ms / 1000
        return max(0.0, r["rest_s"] - fixed) / r["step_tokens"] * 1000

    ctx_s, ctx_v = context_ms(s), context_ms(v)
    longer = ""
    if ctx_v > 1.25 * ctx_s and v["mean_tokens_per_item"] >= 8192:  # long enough to tell
        longer = "; attention, quadratic in length, is a large share of a 128-wide model"
    attention = ""
    if v.get("attention_s", 0.0) > s.get("attention_s", float("inf")):  # VCS pays more of it
        bound = s["step_s"] / v["attention_s"]
        attention = (
            f" Causal attention alone, forward and backward in every layer with each item as "
            f"one row, takes {s['attention_s']:.0f} s over step-wise's items and "
            f"{v['attention_s']:.0f} s over VCS's ({v['attention_s'] / s['attention_s']:.2f}x: "
            f"VCS's {v['mean_tokens_per_item']:,.0f}-token items pay length squared): even "
            f"with everything else free, VCS could step at most {bound:.2f}x faster than "
            f"step-wise's measured step here."
        )
    return (
        f"Token counts alone give {token_ratio:.2f}x: step-wise trains "
        f"{s['tokens_per_trajectory']:,.0f} tokens per trajectory, VCS "
        f"{v['tokens_per_trajectory']:,.0f}. The paper's {PAPER_RATIO}x on GPUs adds what an "
        f"item costs whatever its length (kernel launches, a GPU under-filled by a short item, "
        f"padding, collation, per-micro-batch scheduling and communication), paid "
        f"{s['items_per_trajectory']:.0f} times per trajectory by step-wise and "
        f"{v['items_per_trajectory']:.0f} times by VCS. On this CPU, with the tiny model, a "
        f"micro-batch costs {batch_s:.2f} s whatever its length, so step-wise's "
        f"{s['micro_batches'] - v['micro_batches']} extra micro-batches cost {saved:.0f} s of "
        f"its {s['step_s']:.0f} s step ({saved / s['step_s']:.0%}): here a step costs by the "
        f"token and by the image, not by the item. The language model's part (forward/backward, "
        f"vocabulary head, optimizer) takes {s['rest_s']:.0f} s against VCS's {v['rest_s']:.0f} s "
        f"({s['rest_s'] / v['rest_s']:.2f}x); less its fixed and vocabulary-head costs, a token "
        f"costs {ctx_s:.2f} ms in step-wise's items ({s['mean_tokens_per_item']:,.0f} tokens on "
        f"average) and {ctx_v:.2f} ms in VCS's ({v['mean_tokens_per_item']:,.0f}){longer}. "
        f"VCS's items hold {v['step_images']} screenshots against step-wise's "
        f"{s['step_images']} (a screenshot is in every item whose window holds it); each is loaded and "
        f"encoded once per step ({encoded_v} against {encoded_s}), at {per_image:.2f} s each "
        f"for preprocessing and the vision tower: {image_v:.0f} s against {image_s:.0f} s. The "
        f"trained tokens are the same {s['step_trained_tokens']:,} in every mode and cost "
        f"{head_ms:.1f} ms per position the vocabulary head ({vocab_share:.0%} of the tiny "
        f"model's weights) projects: {s['step_head_positions']:,} positions for step-wise, "
        f"{v['step_head_positions']:,} for VCS (each row's own trained positions).{attention} "
        f"Our step-wise / VCS ratio: {ratio:.2f}x."
    )


def print_table(rows: dict[str, dict]) -> None:
    """The comparison table, one row per mode."""
    columns = [
        ("mode", "mode", "{}"),
        ("items/traj", "items_per_trajectory", "{:.0f}"),
        ("images/traj", "images_per_trajectory", "{:.0f}"),
        ("tokens/traj", "tokens_per_trajectory", "{:,.0f}"),
        ("peak tokens/item", "peak_tokens_per_item", "{:,}"),
        ("segmenter steps/s", "segmenter_steps_per_s", "{:,.0f}"),
        ("micro-batches", "micro_batches", "{}"),
        ("encoded", "step_images_encoded", "{}"),
        ("head positions", "step_head_positions", "{:,}"),
        ("step s", "step_s", "{:.1f}"),
        ("cpu s", "step_cpu_s", "{:.1f}"),
        ("image prep s", "image_prep_s", "{:.1f}"),
        ("vision s", "vision_s", "{:.1f}"),
        ("rest s", "rest_s", "{:.1f}"),
        ("attention alone s", "attention_s", "{:.1f}"),
    ]
    cells = [[h for h, _, _ in columns]]
    for row in rows.values():
        cells.append(["n/a" if row.get(k) is None else f.format(row[k]) for _, k, f in columns])
    widths = [max(len(c[i]) for c in cells) for i in range(len(columns))]
    for line in cells:
        print("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(line, widths, strict=True))))  # fmt: skip
    for mode, row in rows.items():
        if row.get("step_na"):
            print(f"{mode}: no step time: {row['step_na']}")
        elif len(row.get("step_s_runs", ())) > 1:
            print(f"{mode}: step s of each run {row['step_s_runs']} (the table: the fastest)")


def step_ratios(rows: dict[str, dict]) -> dict[str, float | None]:
    """Step-wise / VCS in step time and CPU time (None without both steps), and in tokens."""
    s, v = rows["stepwise"], rows["vcs"]
    token_ratio = s["tokens_per_trajectory"] / v["tokens_per_trajectory"]
    ratio = s["step_s"] / v["step_s"] if "step_s" in s and "step_s" in v else None
    cpu_ratio = s["step_cpu_s"] / v["step_cpu_s"] if ratio is not None else None
    return {
        "stepwise_vs_vcs_step_time": ratio,
        "stepwise_vs_vcs_cpu_time": cpu_ratio,
        "stepwise_vs_vcs_tokens": token_ratio,
    }
