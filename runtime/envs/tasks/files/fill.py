"""Fill the file cache for a set of tasks: what `scalecua tasks files fetch/missing` run.

`needed_urls(tasks)` maps every http(s) URL the tasks name to the keys of the tasks that
name it; `missing_urls` keeps those the cache lacks; `fill_cache` fetches those, a few at a
time, and reports each as it ends. A run stopped half-way resumes where it stopped: a URL
is in the index only once its whole body is stored, so the next run fetches the rest.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from runtime.envs.tasks.catalog import TaskFile
from runtime.envs.tasks.files.cache import FileCache
from runtime.envs.tasks.files.fetch import Fetcher, FetchLimits
from runtime.envs.tasks.files.urls import task_files
from runtime.errors import FetchError

__all__ = ["FillReport", "fill_cache", "missing_urls", "needed_urls"]


def needed_urls(tasks: Iterable[TaskFile]) -> dict[str, list[str]]:
    """Every http(s) URL the loaded tasks name -> the keys of the tasks naming it (in order)."""
    urls: dict[str, list[str]] = {}
    for entry in tasks:
        if entry.task is None:
            continue
        for ref in task_files(entry.task):
            if ref.is_url:
                urls.setdefault(ref.source, []).append(entry.key)
    return urls


async def missing_urls(cache: FileCache, urls: Iterable[str], jobs: int = 8) -> list[str]:
    """The URLs (in the order given) whose bytes the cache does not hold."""
    urls = list(urls)
    gate = asyncio.Semaphore(jobs)

    async def has(url: str) -> bool:
        async with gate:
            return await cache.ahas(url)

    held = await asyncio.gather(*(has(u) for u in urls))
    return [u for u, h in zip(urls, held, strict=True) if not h]


@dataclass
class FillReport:
    """What one fill did: URLs fetched (and bytes), already cached, and failed with why."""

    fetched: int = 0
    bytes: int = 0
    cached: int = 0
    failed: dict[str, str] = field(default_factory=dict)  # url -> error


async def fill_cache(
    cache: FileCache,
    urls: Iterable[str],
    *,
    limits: FetchLimits | None = None,
    mode: str = "on",
    jobs: int = 4,
    refresh: bool = False,
    on_done: Callable[[str, int | None, str], None] | None = None,
) -> FillReport:
    """Fetch every URL the cache lacks (all of them with `refresh`), `jobs` at a time.

    `on_done(url, size, error)` is called as each URL ends: size None and an error when it
    failed; size 0 and no error when it was cached already.
    """
    report = FillReport()
    urls = list(dict.fromkeys(urls))
    todo = urls if refresh else await missing_urls(cache, urls)
    report.cached = len(urls) - len(todo)
    gate = asyncio.Semaphore(jobs)

    async def one(url: str) -> None:
        async with gate:
            try:
                fetched = await fetcher.fetch(url)
                await cache.aput(url, fetched.data, how="fetched", final_url=fetched.final_url)
            except FetchError as exc:
                report.failed[url] = str(exc)
                if on_done:
                    on_done(url, None, str(exc))
                return
        report.fetched += 1
        report.bytes += len(fetched.data)
        if on_done:
            on_done(url, len(fetched.data), "")

    if on_done:
        pending = set(todo)
        for url in urls:
            if url not in pending:
                on_done(url, 0, "")
    async with Fetcher(limits, mode) as fetcher:  # one client: connections and TLS reused
        await asyncio.gather(*(one(u) for u in todo))
    return report
