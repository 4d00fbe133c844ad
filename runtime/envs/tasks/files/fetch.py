"""Fetch a URL's bytes over http(s) on the host: redirects, retries with backoff, a size limit.

    fetched = await fetch_url(url, FetchLimits(max_bytes=64 << 20), mode="on")
    fetched.data, fetched.sha256, fetched.final_url

Only the host process fetches; a desktop only ever receives the bytes (the `download` step
uploads them). Every hop of a redirect chain is checked before it is sent: http(s) only;
in `on` mode only public addresses (never loopback, a private or link-local network such as
a cloud's instance metadata at 169.254.169.254, nor this host's own addresses: a task's URL
is as untrusted as its judge), and in `loopback` mode nothing but 127.0.0.0/8 and ::1. A transient failure (a connection or read
error, a timeout, 408, 429 or a 5xx) is retried with exponential backoff; any other status,
a body over the size limit or a refused host fails at once with FetchError.

Google Drive answers a download link for a file it cannot virus-scan with a web page
holding a confirmation form instead of the file; that form is followed once, and a Drive
answer that is still a web page (quota, sign-in) is an error rather than cached as the file.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import logging
import socket
from dataclasses import dataclass
from html.parser import HTMLParser
from urllib.parse import urlencode, urljoin, urlparse

import httpx

from runtime.addresses import host_addresses, is_loopback, is_public
from runtime.errors import FetchError

__all__ = [
    "FetchLimits",
    "Fetched",
    "Fetcher",
    "check_fetchable",
    "drive_confirm_url",
    "fetch_url",
]

log = logging.getLogger(__name__)

_TRANSIENT_STATUS = {408, 429, 500, 502, 503, 504}
_DRIVE_HOSTS = {"drive.google.com", "drive.usercontent.google.com", "docs.google.com"}
_USER_AGENT = "scalecua-files/0.1"


@dataclass(frozen=True)
class FetchLimits:
    """How hard and how far one fetch goes."""

    max_bytes: int = 512 * 1024 * 1024  # a larger body fails (OSWorld's files are far smaller)
    retries: int = 3  # further attempts after a transient failure
    backoff_s: float = 0.5  # the first wait; it doubles with each retry
    max_backoff_s: float = 30.0
    timeout_s: float = 60.0  # connect, and each read
    max_redirects: int = 10


@dataclass(frozen=True)
class Fetched:
    """A fetched body with its sha256 and where the redirects led."""

    url: str
    final_url: str
    data: bytes
    sha256: str
    content_type: str = ""


def check_fetchable(url: str, mode: str) -> None:
    """Raise FetchError unless `url` is an http(s) URL that `mode` ("on", "loopback") may fetch."""
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise FetchError(f"cannot fetch {url}: only http(s) URLs are fetched")
    if mode == "off":
        raise FetchError(f"refusing to fetch {url}: fetching is off (SCALECUA_FILES_FETCH=off)")
    if mode == "loopback" and not is_loopback(parsed.hostname):
        raise FetchError(
            f"refusing to fetch {url}: only loopback URLs are fetched here "
            "(SCALECUA_FILES_FETCH=loopback)"
        )


class Fetcher:
    """Fetches many URLs through one HTTP client (its TLS set-up, ~40 ms, is paid once).

    async with Fetcher(limits, mode="on") as fetcher:
        fetched = await fetcher.fetch(url)
    """

    def __init__(self, limits: FetchLimits | None = None, mode: str = "on") -> None:
        self.limits = limits or FetchLimits()
        self.mode = mode
        self._client: httpx.AsyncClient | None = None

    async def __aenter__(self) -> Fetcher:
        async def check_hop(request: httpx.Request) -> None:
            await _check_hop(str(request.url), self.mode)

        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(self.limits.timeout_s),
            follow_redirects=True,
            max_redirects=self.limits.max_redirects,
            event_hooks={"request": [check_hop]},
            headers={"User-Agent": _USER_AGENT},
            trust_env=self.mode != "loopback",  # a proxy from the environment would leave loopback
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._client is not None:
            await self._client.aclose()

    async def fetch(self, url: str) -> Fetched:
        """Fetch `url` within the limits, following redirects, retrying transient failures."""
        check_fetchable(url, self.mode)
        fetched = await self._with_retries(url)
        if _is_drive(url) and fetched.content_type.startswith("text/html"):
            confirm = drive_confirm_url(fetched.data.decode("utf-8", "replace"), fetched.final_url)
            if confirm is not None:
                log.info("%s: following Google Drive's download confirmation", url)
                fetched = await self._with_retries(confirm)
            if fetched.content_type.startswith("text/html"):
                raise FetchError(
                    f"cannot fetch {url}: Google Drive answered with a web page, not the file "
                    "(a quota, sign-in or virus-scan page); download it in a browser and seed "
                    "it with `scalecua tasks files add URL FILE`"
                )
            fetched = Fetched(url, fetched.final_url, fetched.data, fetched.sha256,
                              fetched.content_type)  # fmt: skip
        return fetched

    async def _with_retries(self, url: str) -> Fetched:
        if self._client is None:
            raise RuntimeError("use the Fetcher inside `async with`")
        limits = self.limits
        attempt = 0
        while True:
            try:
                return await _fetch_once(self._client, url, limits)
            except _Transient as exc:
                if attempt >= limits.retries:
                    raise FetchError(
                        f"cannot fetch {url}: {exc} (gave up after {attempt + 1} attempts)"
                    ) from None
                wait = min(limits.max_backoff_s, limits.backoff_s * 2**attempt)
                log.info("fetch %s: %s; retrying in %.1fs", url, exc, wait)
                await asyncio.sleep(wait)
                attempt += 1


async def fetch_url(url: str, limits: FetchLimits | None = None, mode: str = "on") -> Fetched:
    """Fetch one URL within `limits` (see `Fetcher`)."""
    check_fetchable(url, mode)  # refused before a client is even built
    async with Fetcher(limits, mode) as fetcher:
        return await fetcher.fetch(url)


class _Transient(FetchError):
    """A failure worth another attempt."""


async def _fetch_once(client: httpx.AsyncClient, url: str, limits: FetchLimits) -> Fetched:
    try:
        async with client.stream("GET", url) as response:
            if response.status_code in _TRANSIENT_STATUS:
                raise _Transient(f"HTTP {response.status_code}")
            if response.status_code >= 400:
                raise FetchError(f"cannot fetch {url}: HTTP {response.status_code}")
            declared = response.headers.get("content-length")
            if declared is not None and declared.isdigit() and int(declared) > limits.max_bytes:
                raise FetchError(_too_large(url, int(declared), limits))
            digest = hashlib.sha256()
            chunks: list[bytes] = []
            size = 0
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > limits.max_bytes:
                    raise FetchError(_too_large(url, size, limits, at_least=True))
                digest.update(chunk)
                chunks.append(chunk)
            return Fetched(url, str(response.url), b"".join(chunks), digest.hexdigest(),
                           response.headers.get("content-type", ""))  # fmt: skip
    except httpx.TooManyRedirects:
        raise FetchError(
            f"cannot fetch {url}: more than {limits.max_redirects} redirects"
        ) from None
    except httpx.TransportError as exc:  # connect, read, timeouts, protocol errors
        raise _Transient(f"{type(exc).__name__}: {exc}".rstrip(": ")) from None
    except httpx.HTTPError as exc:  # e.g. a body that does not decode
        raise FetchError(f"cannot fetch {url}: {type(exc).__name__}: {exc}") from None


def _too_large(url: str, size: int, limits: FetchLimits, at_least: bool = False) -> str:
    if at_least:  # no Content-Length: stopped as soon as the body passed the limit
        return (f"cannot fetch {url}: its body is over the limit of {limits.max_bytes} bytes "
                f"(stopped after {size} bytes)")  # fmt: skip
    return (
        f"cannot fetch {url}: its body is {size} bytes, over the limit of {limits.max_bytes} bytes"
    )


async def _check_hop(url: str, mode: str) -> None:
    """Refuse a request (a redirect hop too) to a scheme or address the mode does not allow."""
    check_fetchable(url, mode)
    host = urlparse(url).hostname or ""
    addresses = await _addresses(host)
    own = host_addresses()
    for address in addresses:
        if mode == "loopback":
            if not address.is_loopback:
                raise FetchError(f"refusing to fetch {url}: {host} is {address}, not loopback")
        elif not is_public(address, own):
            # A task's URLs are as untrusted as its judge: fetching them must not read this
            # host's services (the broker, the dashboard, a cloud's metadata) into a desktop.
            raise FetchError(
                f"refusing to fetch {url}: {host} is {address}, not a public host "
                "(loopback mirrors: SCALECUA_FILES_FETCH=loopback)"
            )


async def _addresses(host: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return []  # the request itself then fails with a connect error, retried as transient
    return [ipaddress.ip_address(info[4][0].split("%")[0]) for info in infos]


def _is_drive(url: str) -> bool:
    return (urlparse(url).hostname or "") in _DRIVE_HOSTS


def drive_confirm_url(html: str, base_url: str) -> str | None:
    """The URL Google Drive's "download anyway" form submits to, or None if the page has none."""
    parser = _DownloadForm()
    parser.feed(html)
    if parser.action is None:
        return None
    action = urljoin(base_url, parser.action)
    return f"{action}?{urlencode(parser.fields)}" if parser.fields else action


class _DownloadForm(HTMLParser):
    """Collects the action and hidden inputs of the page's `download-form`."""

    def __init__(self) -> None:
        super().__init__()
        self.action: str | None = None
        self.fields: list[tuple[str, str]] = []
        self._inside = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form" and a.get("id") == "download-form" and self.action is None:
            self.action = a.get("action", "")
            self._inside = True
        elif tag == "input" and self._inside and a.get("type") == "hidden" and a.get("name"):
            self.fields.append((a["name"], a.get("value", "")))

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._inside = False
