"""A small Chrome DevTools Protocol client that reaches a desktop's browser through its server.

The debugging port lives in the desktop's browser network (browser_net.py), which the host
cannot enter: the client talks to the desktop server's relay (`/scalecua/chrome/{port}/...`,
with the desktop's token). A server without the relay (an OSWorld VM) is reached directly
at its host, port 9222, as OSWorld does.

    async with await Browser.connect(controller) as browser:
        tabs = await browser.pages()                      # [{"targetId", "url", "title"}, ...]
        page = await browser.new_page("https://example.com/")
        title = await page.evaluate("document.title")

Why not Playwright: its `connect_over_cdp` drives a Node.js process (the package is
~165 MB) and attaches to every target on connect; what the getters and setup steps need is
a dozen CDP commands, which this module sends over one WebSocket with flattened sessions.

Errors are `ChromeError` (no browser answering, a protocol error, the connection lost): an
OutcomeError, not a DesktopError, because a browser the agent closed is an outcome to score,
not a broken desktop; setup steps turn it into a TaskError.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import time
from typing import Any
from urllib.parse import urlparse

import aiohttp

from runtime.errors import OutcomeError

__all__ = ["DEBUG_PORT", "Browser", "ChromeError", "Page"]

DEBUG_PORT = 9222  # where OSWorld's socat forwards Chrome's debugging port (1337)
_POLL = 0.1


class ChromeError(OutcomeError):
    """The desktop's Chrome could not be reached, or refused a DevTools command."""


class Browser:
    """One DevTools connection to a desktop's Chrome (the browser target)."""

    def __init__(self, http: aiohttp.ClientSession, ws: aiohttp.ClientWebSocketResponse) -> None:
        self._http = http
        self._ws = ws
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future] = {}
        self._listeners: list[asyncio.Queue] = []
        self._reader = asyncio.get_running_loop().create_task(self._read())

    @classmethod
    async def connect(
        cls,
        controller: Any,
        port: int = DEBUG_PORT,
        timeout: float = 0.0,  # noqa: ASYNC109 - how long to wait for a starting browser
    ) -> Browser:
        """Connect to the browser behind a desktop controller; wait up to `timeout` s for it."""
        base = str(controller.base_url).rstrip("/")
        token = getattr(controller, "token", "")
        http = aiohttp.ClientSession(
            headers={"Authorization": f"Bearer {token}"} if token else {},
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
        )
        try:
            ws_url = await _browser_url(http, base, port, timeout)
            ws = await http.ws_connect(ws_url, max_msg_size=0)
        except BaseException:
            await http.close()
            raise
        return cls(http, ws)

    async def __aenter__(self) -> Browser:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Disconnect (the browser and its tabs stay as they are)."""
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._reader
        await self._ws.close()
        await self._http.close()

    # -- protocol ---------------------------------------------------------------------------
    async def send(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        session: str | None = None,
        timeout: float = 30.0,  # noqa: ASYNC109 - per command
    ) -> dict[str, Any]:
        """Send one command (to a page's `session`, else to the browser); return its result."""
        if self._reader.done():
            raise ChromeError("the DevTools connection is closed")
        ident = next(self._ids)
        message: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        self._waiting[ident] = future
        try:
            await self._ws.send_str(json.dumps(message))
            reply = await asyncio.wait_for(future, timeout)
        except TimeoutError:
            raise ChromeError(f"{method}: no answer in {timeout:g} s") from None
        except (aiohttp.ClientError, ConnectionError) as exc:
            raise ChromeError(f"{method}: {exc}") from exc
        finally:
            self._waiting.pop(ident, None)
        if "error" in reply:
            raise ChromeError(f"{method}: {reply['error'].get('message', reply['error'])}")
        return reply.get("result", {})

    def events(self) -> asyncio.Queue:
        """A queue that receives every event from now on (`{"method", "params", "sessionId"}`);
        `unlisten` it when done."""
        queue: asyncio.Queue = asyncio.Queue()
        self._listeners.append(queue)
        return queue

    def unlisten(self, queue: asyncio.Queue) -> None:
        """Stop feeding a queue from `events`."""
        with contextlib.suppress(ValueError):
            self._listeners.remove(queue)

    async def _read(self) -> None:
        try:
            async for message in self._ws:
                if message.type != aiohttp.WSMsgType.TEXT:
                    break
                data = json.loads(message.data)
                future = self._waiting.get(data.get("id", -1))
                if future is not None and not future.done():
                    future.set_result(data)
                elif "method" in data:
                    for queue in self._listeners:
                        queue.put_nowait(data)
        finally:
            lost = ChromeError("the DevTools connection was lost")
            for future in self._waiting.values():
                if not future.done():
                    future.set_exception(lost)

    # -- tabs -------------------------------------------------------------------------------
    async def pages(self) -> list[dict[str, Any]]:
        """The open tabs (page targets; not the browser's own UI), each with url and title."""
        targets = (await self.send("Target.getTargets"))["targetInfos"]
        return [t for t in targets if t.get("type") == "page"]

    async def attach(self, target_id: str) -> Page:
        """A handle on an open tab."""
        result = await self.send("Target.attachToTarget", {"targetId": target_id, "flatten": True})
        return Page(self, target_id, result["sessionId"])

    async def new_page(
        self,
        url: str,
        timeout: float = 60.0,  # noqa: ASYNC109 - for the page to load
        isolated: bool = False,
    ) -> Page:
        """Open `url` in a new tab and wait (up to timeout) for it to load.

        `isolated`: in a new browser context (its own window, no cookies or storage of the
        profile), as Playwright's `browser.new_page()`; `discard` it afterwards.
        """
        params: dict[str, Any] = {"url": "about:blank"}
        context = None
        if isolated:
            context = (await self.send("Target.createBrowserContext"))["browserContextId"]
            params["browserContextId"] = context
        target = await self.send("Target.createTarget", params)
        page = await self.attach(target["targetId"])
        page.context = context
        await page.goto(url, timeout)
        return page

    async def close_page(self, target_id: str) -> None:
        """Close one tab."""
        await self.send("Target.closeTarget", {"targetId": target_id})

    async def discard(self, page: Page) -> None:
        """Close a tab this client opened (and its browser context if it was isolated)."""
        with contextlib.suppress(ChromeError):
            await self.close_page(page.target_id)
        if page.context is not None:
            with contextlib.suppress(ChromeError):
                await self.send("Target.disposeBrowserContext", {"browserContextId": page.context})

    async def cookies(self) -> list[dict[str, Any]]:
        """Every cookie the browser holds (its live jar, written or not to its Cookies file)."""
        return (await self.send("Storage.getCookies"))["cookies"]


class Page:
    """One tab, attached through a flattened session."""

    def __init__(self, browser: Browser, target_id: str, session: str) -> None:
        self.browser = browser
        self.target_id = target_id
        self.session = session
        self.context: str | None = None  # the browser context this client made for it, if any

    async def send(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        timeout: float = 30.0,  # noqa: ASYNC109 - per command
    ) -> dict:
        """Send a command to this tab."""
        return await self.browser.send(method, params, self.session, timeout)

    async def evaluate(self, expression: str, timeout: float = 30.0) -> Any:  # noqa: ASYNC109
        """The JSON value of a JavaScript expression in the tab (promises awaited); it runs
        as if the user acted (a click it makes may open a new tab, as a real click would)."""
        params = {
            "expression": expression,
            "returnByValue": True,
            "awaitPromise": True,
            "userGesture": True,
        }
        result = await self.send("Runtime.evaluate", params, timeout)
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            raise ChromeError(f"script failed: {text}")
        return result.get("result", {}).get("value")

    async def goto(self, url: str, timeout: float = 60.0) -> bool:  # noqa: ASYNC109
        """Navigate and wait for the load event; False if it did not load in time."""
        deadline = time.monotonic() + timeout
        result = await self.send("Page.navigate", {"url": url}, timeout)
        if result.get("errorText"):  # an error page is loaded instead (unreachable host...)
            return False
        return await self.wait_loaded(max(0.0, deadline - time.monotonic()))

    async def act(
        self,
        expression: str,
        settle: float = 0.5,
        timeout: float = 60.0,  # noqa: ASYNC109 - for a navigation it starts to load
    ) -> Any:
        """Evaluate `expression` (a click...); if the tab starts navigating within `settle` s,
        wait for the new document to load. Returns the expression's value."""
        events = self.browser.events()
        try:
            await self.send("Page.enable")
            value = await self.evaluate(expression)
            if await _next_event(events, self.session, _NAVIGATING, settle):
                await _next_event(events, self.session, ("Page.frameNavigated",), timeout)
                await self.wait_loaded(timeout)
            return value
        finally:
            self.browser.unlisten(events)

    async def wait_loaded(self, timeout: float = 30.0) -> bool:  # noqa: ASYNC109
        """Wait until the document has loaded (readyState complete); False on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if await self.evaluate("document.readyState", timeout=5) == "complete":
                    return True
            except ChromeError:
                pass  # the document is being replaced by a navigation
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(_POLL)

    async def info(self) -> dict[str, str]:
        """{"title", "url", "content"}: the tab's title, URL and HTML (doctype included)."""
        return await self.evaluate(
            "({title: document.title, url: location.href, content: (document.doctype ?"
            " new XMLSerializer().serializeToString(document.doctype) : '') +"
            " document.documentElement.outerHTML})"
        )

    async def pdf(self) -> bytes:
        """The tab printed to PDF as Playwright's `page.pdf()` prints it (Letter, no margins,
        no backgrounds, no header or footer)."""
        options = {
            "paperWidth": 8.5,
            "paperHeight": 11,
            "marginTop": 0,
            "marginBottom": 0,
            "marginLeft": 0,
            "marginRight": 0,
            "printBackground": False,
        }
        result = await self.send("Page.printToPDF", options, timeout=120)
        return base64.b64decode(result["data"])


_NAVIGATING = (
    "Page.frameRequestedNavigation",
    "Page.frameStartedNavigating",
    "Page.frameStartedLoading",
)


async def _next_event(
    events: asyncio.Queue,
    session: str,
    methods: tuple[str, ...],
    timeout: float,  # noqa: ASYNC109
) -> bool:
    """Wait for one of `methods` from the tab's session (a main-frame event); False on timeout."""
    try:
        async with asyncio.timeout(timeout):
            while True:
                event = await events.get()
                frame = event.get("params", {}).get("frame", {})
                if (
                    event.get("sessionId") == session
                    and event.get("method") in methods
                    and not frame.get("parentId")
                ):
                    return True
    except TimeoutError:
        return False


async def _browser_url(http: aiohttp.ClientSession, base: str, port: int, timeout: float) -> str:  # noqa: ASYNC109
    """The browser target's WebSocket URL: through the server's relay, or directly (a VM)."""
    relay = f"{base}/scalecua/chrome/{port}"
    host = urlparse(base).hostname or "127.0.0.1"
    direct = f"http://{host}:{port}"
    deadline = time.monotonic() + timeout
    use = relay
    while True:
        error = ""
        try:
            async with http.get(f"{use}/json/version") as r:
                if r.status == 404 and use == relay:
                    use = direct  # no relay on this server: an OSWorld VM answers at its host
                    continue
                if r.status == 200:
                    path = urlparse((await r.json(content_type=None))["webSocketDebuggerUrl"]).path
                    return ("ws" + use[4:] if use.startswith("http") else use) + path
                error = (await r.text())[:200]
        except (aiohttp.ClientError, OSError, KeyError, ValueError) as exc:
            error = str(exc)
        if time.monotonic() >= deadline:
            raise ChromeError(f"Chrome's debugging port {port} does not answer: {error}")
        await asyncio.sleep(0.2)
