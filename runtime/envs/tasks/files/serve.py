"""A task's URL served from the file cache, fetched by the host on a miss when allowed.

`url_bytes(url)` is what setup steps (`download`) and file getters (`cloud_file`) call for an
http(s) URL. The cache answers first; on a miss the host fetches the URL if
SCALECUA_FILES_FETCH allows it (`on`: any host, the default; `loopback`: 127.0.0.1 only; `off`:
none), stores it and serves it. Otherwise, or when the fetch fails, the step fails with a
TaskError that names the URL and how to seed it, never with a silent 0.0 score. Concurrent
setups of one URL in a process (a GRPO group starting together) fetch it once.
"""

from __future__ import annotations

import asyncio
import logging
import weakref

from runtime.config import file_fetch_mode
from runtime.envs.tasks.files.cache import FileCache, open_file_cache
from runtime.envs.tasks.files.fetch import FetchLimits, check_fetchable, fetch_url
from runtime.errors import FetchError, FileNotCached

__all__ = ["SEED_HINT", "url_bytes"]

log = logging.getLogger(__name__)

SEED_HINT = (
    "seed it with `scalecua tasks files add URL FILE`, or fill the cache with "
    "`scalecua tasks files fetch DIR` on a connected machine"
)

# One lock per URL and event loop (a lock belongs to the loop it first waited in).
_inflight: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Lock]] = (
    weakref.WeakKeyDictionary()
)


async def url_bytes(
    url: str,
    cache: FileCache | None = None,
    *,
    mode: str | None = None,
    limits: FetchLimits | None = None,
) -> bytes:
    """The bytes behind an http(s) URL: cached, else fetched and cached if `mode` allows."""
    cache = cache or open_file_cache()
    data = await cache.aget(url)
    if data is not None:
        return data
    mode = mode or file_fetch_mode()
    try:
        check_fetchable(url, mode)
    except FetchError as exc:
        raise FileNotCached(
            f"{url} is not in the file cache ({cache.url}): {exc}; {SEED_HINT}"
        ) from None
    locks = _inflight.setdefault(asyncio.get_running_loop(), {})
    async with locks.setdefault(url, asyncio.Lock()):
        data = await cache.aget(url)  # another setup may have fetched it meanwhile
        if data is not None:
            return data
        try:
            fetched = await fetch_url(url, limits, mode)
        except FetchError as exc:
            raise FetchError(
                f"{url} is not in the file cache ({cache.url}) and fetching it failed: {exc}; "
                f"{SEED_HINT}"
            ) from None
        entry = await cache.aput(url, fetched.data, how="fetched", final_url=fetched.final_url)
        log.info("fetched %s: %d bytes, sha256 %s", url, entry.size, entry.sha256)
        return fetched.data
