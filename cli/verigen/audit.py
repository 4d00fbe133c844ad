"""`scalecua verigen audit`: training tasks' overlap with a benchmark pool."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

__all__ = ["audit_main"]


async def audit_main(args: argparse.Namespace) -> int:
    """Audit, print the table (stderr) and the JSON report (stdout); `--filter` re-publishes."""
    from producers.verigen.audit import AuditSettings, audit
    from producers.verigen.embedding import default_embedder
    from producers.verigen.sources import (
        load_task_folder,
        publish_benchmark_split,
        read_tasks,
    )
    from runtime.config import BusSettings

    benchmark, skipped = load_task_folder(args.benchmark)
    topic: dict[str, Any] = {}
    if args.tasks is None or args.filter:
        settings = BusSettings.from_env(args.bootstrap)
        topic = {k: e for k, e in (await read_tasks(settings)).items() if e.split == "train"}
    if args.tasks is not None:
        pool, _ = load_task_folder(args.tasks)
    else:
        pool = [{**e.task, "id": k} for k, e in sorted(topic.items())]
    print(f"verigen audit: {len(pool)} training tasks against {len(benchmark)} benchmark tasks "
          f"({len(skipped)} files that are no task skipped)", file=sys.stderr)  # fmt: skip
    texts = [str(t.get("instruction", "")) for t in pool + benchmark]
    vectors = await asyncio.to_thread(default_embedder().encode, texts)
    report = audit(pool, benchmark, vectors[: len(pool)], vectors[len(pool) :],
                   AuditSettings(near_threshold=args.threshold))  # fmt: skip
    out = report.to_dict() | {"benchmark_dir": str(args.benchmark), "skipped_files": skipped}
    if args.filter:
        flagged = report.flagged()
        events = [topic[t] for t in flagged if t in topic]
        records = {
            t: {"checks": sorted(report.findings[t]),
                "benchmark": sorted({m["benchmark"] for ms in report.findings[t].values()
                                     for m in ms})}
            for t in flagged
        }  # fmt: skip
        await publish_benchmark_split(settings, events, records)
        out["filtered"] = sorted(e.task_id for e in events)
        out["not_on_topic"] = sorted(set(flagged) - set(topic))
    print(report.table(), file=sys.stderr)
    if args.filter:
        print(f"filtered: {len(out['filtered'])} tasks re-published under split `benchmark`",
              file=sys.stderr)  # fmt: skip
    text = json.dumps(out)
    if args.out is not None:
        args.out.write_text(text)
    print(text)
    return 0
