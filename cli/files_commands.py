"""`scalecua tasks files fetch | add | missing` and `scalecua tasks coverage`: a benchmark's
files and whether its tasks run here (the work is in runtime/envs/tasks/files and coverage)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from cli.settings import integer, number

__all__ = ["register"]

_CACHE_HELP = "the file cache: a folder or s3://bucket/prefix (default: $SCALECUA_FILES, else $SCALECUA_HOME/files)"  # fmt: skip


def register(tasks_sub: argparse._SubParsersAction) -> None:
    """Add `files` and `coverage` under `scalecua tasks`."""
    files = tasks_sub.add_parser(
        "files",
        help="the file cache tasks' URLs are served from: fetch, add, missing",
        description=(
            "A task's http(s) files (download steps, cloud_file getters) come from a content "
            "cache that the host fills: `fetch` on a connected machine, `add` by hand "
            "(air-gapped machines, tests). Setup fetches a file it misses when "
            "$SCALECUA_FILES_FETCH allows (on: any URL, the default; loopback; off)."
        ),
    )
    sub = files.add_subparsers(dest="files_command", metavar="SUBCOMMAND")
    fetch = sub.add_parser(
        "fetch",
        help="fetch every URL the tasks in DIR name into the cache (skips what is cached)",
        description="Prints a progress bar, then one JSON summary; exit status 1 if a URL failed. "
        "Stopped half-way, it resumes where it stopped.",
    )
    _folder_args(fetch)
    fetch.add_argument("--jobs", type=integer(1, 64), default=4, help="fetches at once")
    fetch.add_argument("--max-mb", type=number(above=0), default=512.0,
                       help="refuse a file larger than this many MiB")  # fmt: skip
    fetch.add_argument("--retries", type=integer(0, 20), default=3,
                       help="further attempts after a transient failure (backoff doubles)")  # fmt: skip
    fetch.add_argument("--timeout", type=number(above=0), default=60.0,
                       help="seconds to connect, and for each read")  # fmt: skip
    fetch.add_argument("--refresh", action="store_true", help="fetch cached URLs again too")
    fetch.set_defaults(func=_fetch)
    add = sub.add_parser(
        "add", help="seed the cache with the bytes of FILE as the content of URL",
        description="Prints the cache entry as JSON (url, sha256, size, ...).",
    )  # fmt: skip
    add.add_argument("url", help="the http(s) URL a task names")
    add.add_argument("file", type=Path, help="a local file with its content")
    add.add_argument("--cache", default=None, help=_CACHE_HELP)
    add.set_defaults(func=_add)
    missing = sub.add_parser(
        "missing",
        help="list the URLs the tasks in DIR name that the cache lacks",
        description="One line per missing URL (the URL, then the keys of the tasks naming it); "
        "exit status 1 if any is missing.",
    )
    _folder_args(missing)
    missing.add_argument("--json", action="store_true", help="one JSON document instead")
    missing.set_defaults(func=_missing)
    files.set_defaults(func=lambda _args: files.print_help() or 2)

    coverage = tasks_sub.add_parser(
        "coverage",
        help="for every task in DIR: runnable here, or precisely why not; per-domain totals",
        description=(
            "DIR is laid out as OSWorld's evaluation_examples/examples/<domain>/<id>.json. "
            "Supported: every setup step, getter and metric implemented and every app "
            "installed. Runnable: supported, every file cached, no live web and no account. "
            "Prints a table per domain and what blocks most tasks; --json writes every task's "
            "verdict and reasons."
        ),
    )
    coverage.add_argument("dir", type=Path, help="a folder of task JSON (<domain>/<id>.json)")
    coverage.add_argument("--index", type=Path, default=None,
                          help="only the tasks an OSWorld index lists (test_all.json)")  # fmt: skip
    coverage.add_argument("--json", type=Path, default=None, help="write the full report here")
    coverage.add_argument("--cache", default=None, help=_CACHE_HELP)
    coverage.set_defaults(func=_coverage)


def _folder_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", type=Path, help="a folder of task JSON (recursively), or one file")
    p.add_argument("--index", type=Path, default=None,
                   help="only the tasks an OSWorld index lists (test_all.json)")  # fmt: skip
    p.add_argument("--cache", default=None, help=_CACHE_HELP)


def _urls(args: argparse.Namespace) -> dict[str, list[str]]:
    from runtime.envs.tasks.catalog import read_index, read_task_folder
    from runtime.envs.tasks.files.fill import needed_urls

    index = read_index(args.index) if args.index is not None else None
    entries = read_task_folder(args.dir, index)
    for entry in entries:
        if entry.task is None:
            print(f"skipped {entry.key}: {entry.error}", file=sys.stderr)
    return needed_urls(entries)


def _fetch(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from cli.bus_commands import _run
    from runtime.config import file_fetch_mode
    from runtime.envs.tasks.files import FetchLimits, open_file_cache
    from runtime.envs.tasks.files.fill import fill_cache

    urls = _urls(args)
    cache = open_file_cache(args.cache)
    # This command is the explicit way to fetch, so `off` (which stops setup fetching) does
    # not stop it; `loopback` still keeps it on this machine.
    mode = "loopback" if file_fetch_mode() == "loopback" else "on"
    limits = FetchLimits(max_bytes=int(args.max_mb * 1024 * 1024), retries=args.retries,
                         timeout_s=args.timeout)  # fmt: skip
    bar = tqdm(total=len(urls), unit="file", file=sys.stderr, desc="tasks files fetch")
    fetched_bytes = 0

    def done(url: str, size: int | None, error: str) -> None:
        nonlocal fetched_bytes
        if error:
            bar.write(f"failed: {error}", file=sys.stderr)
        fetched_bytes += size or 0
        bar.set_postfix_str(f"{fetched_bytes / 1e6:.1f} MB fetched")
        bar.update(1)

    report: dict = {}

    async def main() -> int:
        filled = await fill_cache(cache, urls, limits=limits, mode=mode, jobs=args.jobs,
                                  refresh=args.refresh, on_done=done)  # fmt: skip
        report.update(urls=len(urls), fetched=filled.fetched, bytes=filled.bytes,
                      already_cached=filled.cached, failed=len(filled.failed),
                      errors=filled.failed, cache=cache.url)  # fmt: skip
        return 0

    try:
        _run(main())
    finally:
        bar.close()
    print(json.dumps(report))
    print(f"{report['fetched']} fetched ({report['bytes'] / 1e6:.1f} MB), "
          f"{report['already_cached']} already cached, {report['failed']} failed, of "
          f"{report['urls']} URLs in {cache.url}", file=sys.stderr)  # fmt: skip
    return 1 if report["failed"] else 0


def _add(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from runtime.envs.tasks.files import is_web_url, open_file_cache
    from runtime.errors import ConfigError, SettingError

    if not is_web_url(args.url):
        raise SettingError(f"[tasks files add] url = {args.url}: expected an http(s) URL")
    try:
        data = args.file.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {args.file}: {exc.strerror or exc}") from exc
    entry = open_file_cache(args.cache).put(args.url, data, how="added")
    print(json.dumps(asdict(entry)))
    return 0


def _missing(args: argparse.Namespace) -> int:
    from cli.bus_commands import _run
    from runtime.envs.tasks.files import open_file_cache
    from runtime.envs.tasks.files.fill import missing_urls

    urls = _urls(args)
    cache = open_file_cache(args.cache)
    absent: list[str] = []

    async def main() -> int:
        absent.extend(await missing_urls(cache, urls))
        return 0

    _run(main())
    tasks = sorted({key for url in absent for key in urls[url]})
    if args.json:
        print(json.dumps({"urls": len(urls), "missing": len(absent), "tasks": len(tasks),
                          "cache": cache.url,
                          "missing_urls": {u: urls[u] for u in absent}}))  # fmt: skip
    else:
        for url in absent:
            print(f"{url}\t{' '.join(urls[url])}")
    print(f"{len(absent)} of {len(urls)} URLs not in {cache.url} ({len(tasks)} tasks need them)",
          file=sys.stderr)  # fmt: skip
    return 1 if absent else 0


def _coverage(args: argparse.Namespace) -> int:
    from runtime.envs.tasks.catalog import read_index, read_task_folder
    from runtime.envs.tasks.coverage import assess, render_table, summarize
    from runtime.envs.tasks.files import open_file_cache

    index = read_index(args.index) if args.index is not None else None
    entries = read_task_folder(args.dir, index)
    cache = open_file_cache(args.cache)
    items = [assess(e, is_cached=cache.has) for e in entries]
    summary = {"dir": str(args.dir), "index": str(args.index or ""), "cache": cache.url,
               **summarize(items)}  # fmt: skip
    print(render_table(summary))
    if args.json is not None:
        args.json.write_text(json.dumps(summary, indent=1) + "\n")
    return 0
