"""`scalecua` subcommands for the task area: the built-in pool, task families, one task;
a benchmark's files and coverage (cli/files_commands.py)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from cli import files_commands
from cli.rollout_commands import add_desktops_kind
from cli.settings import integer

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the task subcommands to the `scalecua` parser."""
    tasks = subparsers.add_parser(
        "tasks",
        help="the built-in task pool, task families, import, a benchmark's files and coverage",
    )
    tasks_sub = tasks.add_subparsers(dest="tasks_command", metavar="SUBCOMMAND")
    for add in (_add_list, _add_check, _add_import, _add_families, _add_generate):
        add(tasks_sub)
    files_commands.register(tasks_sub)
    tasks.set_defaults(func=_help(tasks))
    _add_task(subparsers)


def _add_list(tasks_sub: argparse._SubParsersAction) -> None:
    listing = tasks_sub.add_parser("list", help="print the built-in task ids, one per line")
    listing.set_defaults(func=_tasks_list)


def _add_check(tasks_sub: argparse._SubParsersAction) -> None:
    check = tasks_sub.add_parser(
        "check",
        help="check that tasks score 0.0 untouched and 1.0 with their reference solution",
        description="Prints one JSON line per task; exit code 1 if any task is unsound.",
    )
    check.add_argument("ids", nargs="*", help="built-in task ids (default: all)")
    check.add_argument("--desktops", type=integer(1), default=2, help="desktops used at once")
    add_desktops_kind(check)
    check.set_defaults(func=_tasks_check)


def _add_import(tasks_sub: argparse._SubParsersAction) -> None:
    imp = tasks_sub.add_parser(
        "import",
        help="publish tasks to the `tasks` topic (OSWorld-format files/folders, or the built-in pool)",
    )
    imp.add_argument("paths", nargs="*", type=Path, help="task files or folders (recursive)")
    imp.add_argument("--builtin", action="store_true", help="import the built-in pool")
    imp.add_argument("--index", type=Path, default=None,
                     help="with one folder: only the tasks an OSWorld index lists "
                     "(test_all.json: <folder>/<domain>/<id>.json)")  # fmt: skip
    imp.add_argument("--split", choices=("train", "heldout", "benchmark"), default="train",
                     help="benchmark tasks are kept out of training (default: train)")  # fmt: skip
    imp.add_argument(
        "--source", default="import", help="provenance tag (e.g. osworld, scienceboard)"
    )
    imp.add_argument(
        "--include-unsupported", action="store_true",
        help="also publish tasks whose setup steps, getters or metrics are not implemented "
        "(by default they are listed and skipped)",
    )  # fmt: skip
    imp.add_argument(
        "--bootstrap", default=None, help="bootstrap servers (default: $SCALECUA_BOOTSTRAP)"
    )
    imp.set_defaults(func=_tasks_import)


def _add_families(tasks_sub: argparse._SubParsersAction) -> None:
    fams = tasks_sub.add_parser(
        "families", help="list the task families: app, reference turns, held-out mark, what varies"
    )
    fams.add_argument("--json", action="store_true", help="one JSON object per family")
    fams.set_defaults(func=_tasks_families)


def _add_generate(tasks_sub: argparse._SubParsersAction) -> None:
    gen = tasks_sub.add_parser(
        "generate",
        help="generate task-family instances: OSWorld JSON files and/or `tasks` events",
        description=(
            "Writes <out>/<family>-<seed>.json (OSWorld JSON, the reference solution under "
            "`solution`) and/or publishes them to `tasks` with their split (train or heldout)."
        ),
    )
    gen.add_argument("--split", choices=("train", "heldout"), required=True)
    gen.add_argument(
        "--n", type=integer(1), required=True, help="instances, families taken in turn"
    )
    gen.add_argument("--families", nargs="*", default=None, help="only these families")
    gen.add_argument("--out", type=Path, default=None, help="write the task files here")
    gen.add_argument("--publish", action="store_true", help="publish them to the `tasks` topic")
    gen.add_argument(
        "--bootstrap", default=None, help="bootstrap servers (default: $SCALECUA_BOOTSTRAP)"
    )
    gen.set_defaults(func=_tasks_generate)


def _add_task(subparsers: argparse._SubParsersAction) -> None:
    task = subparsers.add_parser("task", help="run one task on a fresh desktop")
    task_sub = task.add_subparsers(dest="task_command", metavar="SUBCOMMAND")
    run = task_sub.add_parser(
        "run",
        help="start a desktop, run the task's setup, play actions, evaluate, print JSON",
        description="Prints one JSON object with at least `score` and `steps`.",
    )
    run.add_argument("task", help="an OSWorld-format TASK.json, or a built-in task id")
    source = run.add_mutually_exclusive_group()
    source.add_argument("--actions", type=Path, help="JSON list of actions to play (default: none)")
    source.add_argument(
        "--reference",
        action="store_true",
        help="play the task's reference solution (its embedded `solution`, else the built-in one)",
    )
    run.add_argument("--screenshots", type=Path, help="save a PNG after setup and every action")
    run.set_defaults(func=_task_run)
    task.set_defaults(func=_help(task))


def _help(parser: argparse.ArgumentParser):
    def show(args: argparse.Namespace) -> int:
        parser.print_help()
        return 2

    return show


def _tasks_list(args: argparse.Namespace) -> int:
    from runtime.envs.tasks.builtin import builtin_ids

    for task_id in builtin_ids():
        print(task_id)
    return 0


def _tasks_import(args: argparse.Namespace) -> int:
    import asyncio

    from producers.task_import import (
        builtin_task_events,
        file_task_events,
        indexed_task_events,
        publish_tasks,
        split_supported,
    )
    from runtime.config import BusSettings
    from runtime.errors import SettingError

    if not args.paths and not args.builtin:
        print("scalecua: error: give task files/folders or --builtin", file=sys.stderr)
        return 2
    if args.index is not None:
        if len(args.paths) != 1:
            raise SettingError(f"[tasks import] index = {args.index}: give one folder with it")
        events = indexed_task_events(args.paths[0], args.index, source=args.source,
                                     split=args.split)  # fmt: skip
    else:
        events = file_task_events(args.paths, source=args.source, split=args.split)
    if args.builtin:
        events += builtin_task_events(args.split)
    supported, flagged = split_supported(events)
    for f in flagged:
        print(f"unsupported: {f.task_id}: {', '.join(f.missing)}", file=sys.stderr)
    if not args.include_unsupported:
        events = supported
    settings = BusSettings.from_env(args.bootstrap)
    n = asyncio.run(publish_tasks(settings, events))
    skipped = 0 if args.include_unsupported else len(flagged)
    note = (
        f"; {skipped} unsupported skipped (--include-unsupported publishes them)" if skipped else ""
    )
    flag = f"; {len(flagged)} of them unsupported" if flagged and not skipped else ""
    print(f"imported {n} tasks into `tasks` ({args.split}){note}{flag}", file=sys.stderr)
    return 0


def _tasks_families(args: argparse.Namespace) -> int:
    from runtime.envs.tasks.families import FAMILIES

    for name, family in FAMILIES.items():
        turns = len(family.draw(0).solution)
        if args.json:
            row = {"family": name, "app": family.app, "turns": turns, "heldout": family.heldout}
            print(json.dumps({**row, "varies": family.varies}))
        else:
            mark = "held-out" if family.heldout else "train"
            plural = "s" if turns > 1 else " "
            print(f"{name:<24}{family.app:<18}{turns} turn{plural}  {mark:<10}{family.varies}")
    return 0


def _tasks_generate(args: argparse.Namespace) -> int:
    import asyncio
    from collections import Counter

    from runtime.envs.tasks import families

    if args.out is None and not args.publish:
        print("scalecua: error: give --out DIR and/or --publish", file=sys.stderr)
        return 2
    generated = families.generate(args.split, args.n, args.families)
    per_family = Counter(g.family for g in generated)
    summary = ", ".join(f"{name} {n}" for name, n in per_family.items())
    if args.out is not None:
        families.write_tasks(generated, args.out)
        note = f"wrote {len(generated)} {args.split} tasks to {args.out} ({summary})"
        print(note, file=sys.stderr)
    if args.publish:
        from producers.task_import import publish_tasks
        from runtime.config import BusSettings

        settings = BusSettings.from_env(args.bootstrap)
        n = asyncio.run(publish_tasks(settings, families.task_events(generated)))
        print(f"published {n} tasks into `tasks` (split {args.split})", file=sys.stderr)
    return 0


def _tasks_check(args: argparse.Namespace) -> int:
    import asyncio

    from runtime.envs.tasks.builtin import builtin_ids, load_builtin

    ids = args.ids or builtin_ids()
    tasks = [load_builtin(i) for i in ids]  # unknown ids fail before any desktop starts
    unsound = asyncio.run(_check_all(tasks, args.desktops, args.desktops_kind))
    print(f"{len(ids) - unsound}/{len(ids)} tasks sound", file=sys.stderr)
    return 1 if unsound else 0


async def _check_all(tasks: list, desktops: int, kind: str | None = None) -> int:
    import asyncio

    from runtime.envs.desktop.pool import DesktopPool
    from runtime.envs.tasks.builtin import reference_solution
    from runtime.envs.tasks.runner import check_solution

    unsound = 0

    async def one(task) -> None:
        nonlocal unsound
        async with pool.acquire() as desktop:
            result = await check_solution(desktop, task, reference_solution(task.id))
        result["sound"] = result["untouched"] == 0.0 and result["solved"] == 1.0
        unsound += not result["sound"]
        print(json.dumps(result), flush=True)

    async with DesktopPool(max(1, desktops), kind=kind) as pool:
        await asyncio.gather(*(one(t) for t in tasks))
    return unsound


def _task_run(args: argparse.Namespace) -> int:
    import asyncio

    from runtime.envs.tasks.builtin import reference_solution, resolve_task
    from runtime.envs.tasks.runner import check_actions, run_task
    from runtime.errors import TaskError

    task = resolve_task(args.task)
    actions: list = []
    if args.reference:
        embedded = task.extra.get("solution")
        actions = embedded if isinstance(embedded, list) else reference_solution(task.id)
    elif args.actions is not None:
        try:
            actions = json.loads(args.actions.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise TaskError(f"cannot read actions from {args.actions}: {exc}") from exc
    actions = check_actions(actions)
    result = asyncio.run(run_task(task, actions, args.screenshots))
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
    return 0
