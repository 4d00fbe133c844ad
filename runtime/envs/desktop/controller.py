"""The host-side client of one desktop server: OSWorld's calls plus the agent's step/observe.

Every call has a bounded timeout and is retried (with backoff) when the request cannot have
reached the server (connection refused) or, for calls without side effects, when it timed
out. Infrastructure failures raise `DesktopError`; an invalid agent action never raises,
it comes back as `StepResult(ok=False, error=...)`.

    async with DesktopController(url, token) as ctl:
        result = await ctl.step({"action": "type", "text": "héllo ✓"})
        obs = await ctl.observe(a11y=True)
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

import httpx

from runtime.envs.desktop.actions import (
    TERMINAL,
    ActionError,
    parse_action,
    pixels_to_grid,
    to_pixels,
)
from runtime.envs.desktop.pyautogui_actions import action_command
from runtime.errors import DesktopError

__all__ = ["DesktopController", "Observation", "StepResult"]

log = logging.getLogger(__name__)

_BACKOFF = 0.2  # seconds before the first retry; doubles each time


@dataclass
class StepResult:
    """What one action did: ok, or an error saying why not; terminal for done/answer/fail."""

    ok: bool
    error: str | None = None
    terminal: bool = False
    answer: str | None = None
    output: Any = None  # e.g. the cursor position on the grid, or screenshot PNG bytes
    action: str = ""  # the action's name ("fail" matters to scoring)


@dataclass
class Observation:
    """What the agent sees: a PNG screenshot, optionally the accessibility tree."""

    screenshot: bytes
    size: tuple[int, int]
    a11y_tree: str | None = None


class DesktopController:
    """Async client of a desktop server (ours, or any server speaking OSWorld's API)."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 30.0,
        retries: int = 2,
        native_actions: bool | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token  # also what the browser relay (runtime.envs.desktop.cdp) presents
        # None: use our /scalecua/action route if the server has it, else pyautogui code
        # through /execute (an OSWorld VM); False forces the latter.
        self._native = native_actions
        self.timeout = timeout
        self.retries = retries
        self._client = httpx.AsyncClient(
            base_url=self.base_url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout,
        )
        self._size: tuple[int, int] | None = None

    async def aclose(self) -> None:
        """Close the HTTP connection pool."""
        await self._client.aclose()

    async def __aenter__(self) -> DesktopController:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- transport ----------------------------------------------------------------------
    async def _request(
        self, method: str, path: str, *, idempotent: bool, wait: float | None = None, **kw: Any
    ) -> httpx.Response:
        delay = _BACKOFF
        for attempt in range(self.retries + 1):
            try:
                response = await self._client.request(
                    method, path, timeout=wait or self.timeout, **kw
                )
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                error: Exception = exc
            except (httpx.TimeoutException, httpx.RemoteProtocolError, httpx.ReadError) as exc:
                if not idempotent:
                    raise DesktopError(
                        f"{method} {path} on {self.base_url} failed: {exc!r}"
                    ) from exc
                error = exc
            else:
                if response.status_code == 401:
                    raise DesktopError(f"{self.base_url} rejected the desktop token")
                return response
            if attempt < self.retries:
                await asyncio.sleep(delay)
                delay *= 2
        raise DesktopError(f"{method} {path} on {self.base_url} failed: {error!r}")

    @staticmethod
    def _check(response: httpx.Response, what: str) -> httpx.Response:
        if response.status_code >= 400:
            raise DesktopError(f"{what} failed ({response.status_code}): {response.text[:300]}")
        return response

    # -- OSWorld's server API -----------------------------------------------------------
    async def screenshot(self) -> bytes:
        """Return the screen as PNG bytes."""
        r = await self._request("GET", "/screenshot", idempotent=True)
        return self._check(r, "screenshot").content

    async def accessibility_tree(self, *, compact: bool = False) -> str:
        """Return the accessibility tree as OSWorld-shaped XML (compact: only what is showing)."""
        r = await self._request(
            "GET",
            "/accessibility",
            idempotent=True,
            wait=max(self.timeout, 90),
            params={"compact": "1"} if compact else None,
        )
        return self._check(r, "accessibility tree").json()["AT"]

    async def screen_size(self) -> tuple[int, int]:
        """Return the screen's (width, height) in pixels (cached)."""
        if self._size is None:
            r = self._check(
                await self._request("POST", "/screen_size", idempotent=True), "screen size"
            )
            data = r.json()
            self._size = (int(data["width"]), int(data["height"]))
        return self._size

    async def cursor_position(self) -> tuple[int, int]:
        """Return the pointer position in pixels."""
        r = await self._request("GET", "/cursor_position", idempotent=True)
        x, y = self._check(r, "cursor position").json()
        return int(x), int(y)

    async def platform(self) -> str:
        """Return the desktop's OS name ("Linux")."""
        r = await self._request("GET", "/platform", idempotent=True)
        return self._check(r, "platform").text

    async def execute(
        self,
        command: str | list[str],
        shell: bool = False,
        timeout: float | None = None,  # noqa: ASYNC109 - the command's limit, as in OSWorld
    ) -> dict:
        """Run a command; return {"status", "output", "error", "returncode"} (status "error" on failure)."""
        body: dict[str, Any] = {"command": command, "shell": shell}
        if timeout is not None:
            body["timeout"] = timeout
        wait = max(self.timeout, (timeout or 120.0) + 10.0)
        r = await self._request("POST", "/execute", idempotent=False, wait=wait, json=body)
        return _command_result(r)

    async def run_python(self, code: str) -> dict:
        """Run Python code with the desktop's `python`; OSWorld's /run_python result."""
        r = await self._request(
            "POST",
            "/run_python",
            idempotent=False,
            wait=max(self.timeout, 130),
            json={"code": code},
        )
        return self._check(r, "run_python").json()

    async def run_bash_script(
        self,
        script: str,
        timeout: float = 30.0,  # noqa: ASYNC109 - the script's limit, as in OSWorld
        working_dir: str | None = None,
    ) -> dict:
        """Run a bash script; return {"status", "output", "error", "returncode"}."""
        body = {"script": script, "timeout": timeout, "working_dir": working_dir}
        r = await self._request(
            "POST",
            "/run_bash_script",
            idempotent=False,
            wait=max(self.timeout, timeout + 10),
            json=body,
        )
        return self._check(r, "run_bash_script").json()

    async def get_file(self, path: str) -> bytes | None:
        """Return a file's bytes, or None when it does not exist."""
        r = await self._request("POST", "/file", idempotent=True, data={"file_path": path})
        if r.status_code == 404:
            return None
        return self._check(r, f"get_file {path}").content

    async def list_directory(self, path: str) -> dict:
        """Return OSWorld's directory tree of `path`, or {"error": ...} if it is no folder."""
        r = await self._request("POST", "/list_directory", idempotent=True, json={"path": path})
        data = r.json()
        return data.get("directory_tree", data)

    async def upload_file(self, path: str, data: bytes) -> None:
        """Write `data` to `path` on the desktop (parents created)."""
        files = {"file_data": (PurePosixPath(path).name or "file", data)}
        r = await self._request(
            "POST", "/setup/upload", idempotent=True, data={"file_path": path}, files=files
        )
        self._check(r, f"upload {path}")

    async def download_file(self, url: str, path: str) -> None:
        """Have the desktop fetch `url` (file:// or loopback http) to `path`."""
        r = await self._request(
            "POST",
            "/setup/download_file",
            idempotent=True,
            wait=max(self.timeout, 310),
            json={"url": url, "path": path},
        )
        self._check(r, f"download {url}")

    async def open_file(self, path: str, timeout: float = 60.0) -> None:  # noqa: ASYNC109
        """Open a file with its app and wait until its window shows (OSWorld's open step)."""
        body = {"path": path, "timeout": timeout}
        r = await self._request(
            "POST",
            "/setup/open_file",
            idempotent=False,
            wait=max(self.timeout, timeout + 10),
            json=body,
        )
        self._check(r, f"open {path}")

    async def launch(self, command: str | list[str], shell: bool = False) -> None:
        """Start a program without waiting for it."""
        r = await self._request(
            "POST", "/setup/launch", idempotent=False, json={"command": command, "shell": shell}
        )
        self._check(r, f"launch {command}")

    async def activate_window(
        self, window_name: str, strict: bool = False, by_class: bool = False
    ) -> bool:
        """Raise and focus a window by title (or class); return whether one matched."""
        return await self._window("/setup/activate_window", window_name, strict, by_class)

    async def close_window(
        self, window_name: str, strict: bool = False, by_class: bool = False
    ) -> bool:
        """Close a window by title (or class); return whether one matched."""
        return await self._window("/setup/close_window", window_name, strict, by_class)

    async def _window(self, path: str, name: str, strict: bool, by_class: bool) -> bool:
        body = {"window_name": name, "strict": strict, "by_class": by_class}
        r = await self._request("POST", path, idempotent=True, json=body)
        if r.status_code == 404:
            log.info("%s: no window matches %r", path, name)
            return False
        self._check(r, path)
        return True

    # -- scalecua additions -------------------------------------------------------------
    async def wait_for_window(self, title: str, timeout: float = 30.0) -> bool:  # noqa: ASYNC109
        """Wait until the window holding the keyboard focus has `title` in its name."""
        # The X input focus, not _NET_ACTIVE_WINDOW: a new app reuses the X ids of a killed
        # one, so a stale active-window id can already carry the new title before the new
        # window is even mapped, and keys typed then are lost.
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            focus = await self.execute(["xdotool", "getwindowfocus", "getwindowname"])
            if focus.get("returncode") == 0 and title in focus.get("output", ""):
                return True
            if asyncio.get_running_loop().time() >= deadline:
                return False
            await asyncio.sleep(0.1)

    # -- ScienceBoard's additions (scienceboard_routes.py) ------------------------------
    async def read_text(self, path: str) -> str:
        """A text file's contents (ScienceBoard's /read: UTF-8, newlines as \\n)."""
        r = await self._request("GET", "/read", idempotent=True, params={"path": path})
        return self._check(r, f"read {path}").text

    async def write_text(self, path: str, content: str, append: bool = False) -> None:
        """Write (or append) text to a file on the desktop (ScienceBoard's /write, /append)."""
        route = "/append" if append else "/write"
        r = await self._request(
            "POST", route, idempotent=not append, json={"path": path, "content": content}
        )
        self._check(r, f"{route[1:]} {path}")

    async def set_a11y_depth(self, depth: int) -> None:
        """Make accessibility trees at most `depth` deep (ScienceBoard's /opt)."""
        r = await self._request("POST", "/opt", idempotent=True, json={"depth": depth})
        self._check(r, "opt")

    async def tex_check(self, path: str, file: str = "main", bibtex: bool = False) -> dict:
        """Compile `path/file.tex` (bibtex too when asked): {"pass": bool, "log"?: str}."""
        r = await self._request(
            "POST",
            "/tex/check",
            idempotent=True,
            wait=max(self.timeout, 4 * 130),
            json={"path": path, "file": file, "bibtex": bibtex},
        )
        return self._check(r, "tex/check").json()

    async def reset_desktop(self) -> dict:
        """Kill every app, release input and restore the home skeleton (fast; services stay)."""
        r = await self._request("POST", "/scalecua/reset", idempotent=True)
        return self._check(r, "reset").json()

    async def health(self) -> dict:
        """Return which of the desktop's services are alive."""
        r = await self._request("GET", "/scalecua/health", idempotent=True)
        return r.json()

    async def port_address(self, port: int) -> tuple[str, int]:
        """Return the (host, port) at which this machine reaches `port` of the desktop.

        A desktop of ours has a network of its own (VLC's HTTP interface on 8080 and
        Chrome's debugging port 9222 inside it, as on OSWorld's VM): its server forwards a
        host loopback port there. An OSWorld VM's ports are reached at its address directly.
        """
        r = await self._request("POST", "/scalecua/forward", json={"port": port}, idempotent=True)
        host = httpx.URL(self.base_url).host
        if r.status_code == 404:  # not our server: the VM's own port
            return host, port
        return host, int(self._check(r, "forward").json()["port"])

    # -- agent side ---------------------------------------------------------------------
    async def observe(self, a11y: bool = False) -> Observation:
        """Return the screenshot (and the a11y tree when asked) the agent acts on."""
        size = await self.screen_size()
        if not a11y:
            return Observation(screenshot=await self.screenshot(), size=size)
        shot, tree = await asyncio.gather(self.screenshot(), self.accessibility_tree())
        return Observation(screenshot=shot, size=size, a11y_tree=tree)

    async def reset(self, task: Any) -> None:
        """Run a task's `config` setup steps (via runtime.envs.tasks.setup.run_setup)."""
        from runtime.envs.tasks.setup import run_setup

        await run_setup(self, task)

    async def step(self, action: Any) -> StepResult:
        """Execute one action of the agent's action space (coordinates on the 1000 grid)."""
        try:
            parsed = parse_action(action)
        except ActionError as exc:
            return StepResult(ok=False, error=str(exc), action=_name(action))
        name = parsed["action"]
        if name in TERMINAL:
            answer = parsed.get("text") if name == "answer" else None
            return StepResult(ok=True, terminal=True, answer=answer, action=name)
        if name == "wait":
            await asyncio.sleep(parsed["duration"])
            return StepResult(ok=True, action=name)
        if name == "screenshot":
            return StepResult(ok=True, output=await self.screenshot(), action=name)
        if name == "write_file":
            await self.upload_file(parsed["text"], parsed["content"].encode())
            return StepResult(ok=True, action=name)
        size = await self.screen_size()
        pixel_action = to_pixels(parsed, size)
        # Holding a key sleeps on the server: give the request that much longer.
        wait = self.timeout + parsed.get("duration", 0.0) if name == "hold_key" else None
        if self._native is not False:
            r = await self._request(
                "POST", "/scalecua/action", idempotent=False, wait=wait, json=pixel_action
            )
            if r.status_code == 404 and self._native is None:
                log.info("%s has no /scalecua/action: acting through /execute", self.base_url)
                self._native = False
            else:
                self._native = True
                if r.status_code == 400:
                    return StepResult(ok=False, error=r.json().get("message", r.text), action=name)
                data = self._check(r, name).json()
                cursor = pixels_to_grid(tuple(data["output"]), size)
                return StepResult(ok=True, output=list(cursor), action=name)
        result = await self.execute(action_command(pixel_action), timeout=wait or self.timeout)
        if result.get("returncode") != 0:
            error = (result.get("error") or "").strip().splitlines()[-1:] or ["failed"]
            return StepResult(ok=False, error=f"{name} via /execute: {error[0]}", action=name)
        cursor = pixels_to_grid(await self.cursor_position(), size)
        return StepResult(ok=True, output=list(cursor), action=name)


def _name(action: Any) -> str:
    return str(action.get("action", "")) if isinstance(action, dict) else ""


def _command_result(response: httpx.Response) -> dict:
    try:
        data = response.json()
    except ValueError:
        data = {"status": "error", "message": response.text}
    if data.get("status") != "success":
        return {
            "status": "error",
            "output": data.get("output", ""),
            "error": data.get("message", data.get("error", "")),
            "returncode": data.get("returncode", -1),
        }
    return data
