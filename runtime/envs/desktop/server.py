"""The HTTP server of one desktop: OSWorld's in-VM server API, plus a fast input endpoint.

Runs inside the desktop's PID and mount namespace (started by init.py) as root of a user
namespace of its own, in the host's network; boots the desktop's services on the agent's
side (namespaces.py), prints one JSON line `{"port", "display", "width", "height"}` on
stdout when it serves, and answers on 127.0.0.1 only. Every request must carry the
desktop's token (`Authorization: Bearer TOKEN`, or `X-Desktop-Token`), which the server
reads from a pipe (`--token-fd`) and keeps in memory only. The agent cannot reach the
server's process: another uid, in a user namespace above the agent's, not dumpable, and
hidden from the agent's /proc. OSWorld endpoints keep OSWorld's request and response
shapes; `/scalecua/*` are our additions (pixel-space actions via XTEST, reset, health)
that the controller prefers when present.

    python -m runtime.envs.desktop.server --id ID --run-dir DIR --token-fd N
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import hmac
import json
import logging
import os
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from aiohttp import web

from runtime.envs.desktop import chrome, commands, files, screen
from runtime.envs.desktop.actions import CLICKS
from runtime.envs.desktop.apps import Opener, missing_app
from runtime.envs.desktop.browser_net import GATEWAY_PORT, BrowserGateway, add_relay_routes
from runtime.envs.desktop.forward import PortForwarder
from runtime.envs.desktop.home import restore_home
from runtime.envs.desktop.namespaces import AgentSide, AgentSideError
from runtime.envs.desktop.scienceboard_routes import add_scienceboard_routes
from runtime.envs.desktop.session import DesktopSession
from runtime.envs.desktop.xinput import XInput

__all__ = [
    "A11Y_DEPTH",
    "A11Y_TIMEOUT",
    "DesktopServer",
    "EXECUTE_TIMEOUT",
    "HOME",
    "RUN_DIR",
    "main",
]

log = logging.getLogger("runtime.envs.desktop.server")

HOME = commands.HOME
EXECUTE_TIMEOUT = 120.0  # OSWorld's default for /execute
A11Y_TIMEOUT = 60.0
A11Y_DEPTH = 50  # OSWorld's MAX_DEPTH
_A11Y_SCRIPT = Path(__file__).with_name("a11y_dump.py")
_SYSTEM_PYTHON = "/usr/bin/python3"  # the only interpreter that can import Debian's pyatspi
_ALREADY_OPEN_SECONDS = 3.0  # open_file: then a window already titled with the file will do
_TITLE_SECONDS = 2.0  # open_file: a new window of the app's class not titled so by then will do
RUN_DIR = "/run/scalecua-desktop"  # the server's folder (init.py covers /run with its own)
_PR_SET_DUMPABLE = 4


class DesktopServer:
    """Routes of one desktop's server; X work runs on one thread that owns the X connection."""

    def __init__(self, session: DesktopSession, token: str) -> None:
        self.session = session
        self.token = token
        self._x = ThreadPoolExecutor(max_workers=1, thread_name_prefix="x11")
        self._input: XInput | None = None
        self._grabber: screen.Grabber | None = None
        assert session.agent is not None, "start the session first"
        self.agent: AgentSide = session.agent
        self.forwarder = PortForwarder(self.agent)
        self.a11y_depth = A11Y_DEPTH  # ScienceBoard's /opt sets it

    # -- plumbing -----------------------------------------------------------------------
    def app(self) -> web.Application:
        """Build the aiohttp application with every route."""
        app = web.Application(middlewares=[self._auth], client_max_size=1024**3)
        r = app.router
        r.add_get("/screenshot", self.screenshot)
        r.add_get("/accessibility", self.accessibility)
        r.add_get("/cursor_position", self.cursor_position)
        r.add_route("*", "/screen_size", self.screen_size)
        r.add_get("/platform", self.platform)
        r.add_post("/execute", self.execute)
        r.add_post("/setup/execute", self.execute)
        r.add_post("/run_python", self.run_python)
        r.add_post("/run_bash_script", self.run_bash_script)
        r.add_post("/file", self.file)
        r.add_post("/list_directory", self.list_directory)
        r.add_post("/setup/upload", self.upload)
        r.add_post("/setup/download_file", self.download_file)
        r.add_post("/setup/open_file", self.open_file)
        r.add_post("/setup/launch", self.launch)
        r.add_post("/setup/activate_window", self.activate_window)
        r.add_post("/setup/close_window", self.close_window)
        r.add_post("/scalecua/action", self.action)
        r.add_post("/scalecua/reset", self.reset)
        r.add_get("/scalecua/health", self.health)
        r.add_post("/scalecua/forward", self.forward)
        return app

    @web.middleware
    async def _auth(self, request: web.Request, handler: Any) -> web.StreamResponse:
        given = request.headers.get("X-Desktop-Token", "")
        auth = request.headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            given = auth[7:]
        if not given or not hmac.compare_digest(given.encode(), self.token.encode()):
            return web.json_response(
                {"status": "error", "message": "missing or wrong token"}, status=401
            )
        return await handler(request)

    async def _on_x(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._x, fn, *args)

    def _xinput(self) -> XInput:
        if self._input is None:
            self._input = XInput(self.session.display)
        return self._input

    def _grab_png(self) -> bytes:
        if self._grabber is None:
            self._grabber = screen.Grabber(self.session.display)
        return self._grabber.png()

    @property
    def _inside(self) -> dict[str, Any]:
        """How commands run: the desktop's environment, in the desktop's network."""
        return {"env": self.session.env, "enter": self.session.enter}

    async def _as_agent(self, fn: Any, *args: Any) -> Any:
        """Run fn(*args) on the agent's side (its rights, its files); AgentSideError if it fails."""
        return await asyncio.to_thread(self.agent.call, fn, *args)

    async def _json(self, request: web.Request) -> dict:
        try:
            data = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise web.HTTPBadRequest(text="request body must be JSON") from None
        if not isinstance(data, dict):
            raise web.HTTPBadRequest(text="request body must be a JSON object")
        return data

    # -- observation --------------------------------------------------------------------
    async def screenshot(self, request: web.Request) -> web.Response:
        """GET /screenshot: the screen as PNG."""
        png = await self._on_x(self._grab_png)
        return web.Response(body=png, content_type="image/png")

    async def accessibility(self, request: web.Request) -> web.Response:
        """GET /accessibility: {"AT": xml} in OSWorld's shape, dumped by Debian's python3.

        `?compact=1` (a scalecua extension) dumps only what is showing, and of a huge table
        its used block (see a11y_dump.py)."""
        compact = request.query.get("compact", "") in ("1", "true")
        proc = await asyncio.create_subprocess_exec(
            _SYSTEM_PYTHON,
            str(_A11Y_SCRIPT),
            *(["--compact"] if compact else []),
            f"--depth={self.a11y_depth}",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self.session.env,
            preexec_fn=self.session.enter,  # the AT-SPI bus may be an abstract socket
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), A11Y_TIMEOUT)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            return web.json_response(
                {"status": "error", "message": "a11y dump timed out"}, status=500
            )
        if proc.returncode != 0:
            message = err.decode(errors="replace").strip()[-500:]
            return web.json_response({"status": "error", "message": message}, status=500)
        return web.json_response({"AT": out.decode()})

    async def cursor_position(self, request: web.Request) -> web.Response:
        """GET /cursor_position: [x, y] in pixels."""
        x, y = await self._on_x(lambda: self._xinput().cursor())
        return web.json_response([x, y])

    async def screen_size(self, request: web.Request) -> web.Response:
        """POST|GET /screen_size: {"width", "height"}."""
        width, height = await self._on_x(lambda: self._xinput().screen_size())
        return web.json_response({"width": width, "height": height})

    async def platform(self, request: web.Request) -> web.Response:
        """GET /platform: "Linux"."""
        return web.Response(text="Linux")

    # -- commands -----------------------------------------------------------------------
    async def execute(self, request: web.Request) -> web.Response:
        """POST /execute {"command", "shell", "timeout"}: run and return its output."""
        data = await self._json(request)
        shell = bool(data.get("shell", False))
        command = data.get("command", "" if shell else [])
        try:
            argv = commands.argv_of(command, shell)
        except ValueError as exc:
            return web.json_response({"status": "error", "message": str(exc)}, status=400)
        timeout = float(data.get("timeout") or EXECUTE_TIMEOUT)
        result = await commands.run(argv, shell, timeout, **self._inside)
        return web.json_response(result, status=200 if result["status"] == "success" else 500)

    async def run_python(self, request: web.Request) -> web.Response:
        """POST /run_python {"code"}: run Python code with the desktop's `python`."""
        data = await self._json(request)
        code = data.get("code")
        if not isinstance(code, str):
            return web.json_response({"status": "error", "message": "code is required"}, status=400)
        result = await commands.run(["python", "-c", code], False, EXECUTE_TIMEOUT, **self._inside)
        ok = result["status"] == "success" and result.get("returncode") == 0
        return web.json_response(
            {
                "status": "success" if ok else "error",
                "message": "" if ok else result.get("message", result.get("error", "")),
                "output": result.get("output", ""),
                "error": result.get("error", ""),
                "return_code": result.get("returncode", -1),
            }
        )

    async def run_bash_script(self, request: web.Request) -> web.Response:
        """POST /run_bash_script {"script", "timeout", "working_dir"}: run a bash script."""
        data = await self._json(request)
        script = data.get("script")
        if not isinstance(script, str):
            return web.json_response(
                {"status": "error", "message": "script is required"}, status=400
            )
        cwd = data.get("working_dir") or str(HOME)
        timeout = float(data.get("timeout") or 30)
        result = await commands.run(["bash", "-c", script], False, timeout, cwd=cwd, **self._inside)
        if result["status"] != "success":
            return web.json_response(
                {"status": "error", "output": "", "error": result["message"], "returncode": -1}
            )
        ok = result["returncode"] == 0
        return web.json_response({**result, "status": "success" if ok else "error"})

    async def launch(self, request: web.Request) -> web.Response:
        """POST /setup/launch {"command", "shell"}: start a program and return at once."""
        data = await self._json(request)
        shell = bool(data.get("shell", False))
        try:
            argv = commands.argv_of(data.get("command", "" if shell else []), shell)
            await commands.spawn_detached(argv, shell, **self._inside)
        except (ValueError, OSError) as exc:
            return web.json_response({"status": "error", "message": str(exc)}, status=500)
        shown = argv if shell else " ".join(argv)
        return web.Response(text=f"{shown} launched successfully")

    # -- files --------------------------------------------------------------------------
    async def file(self, request: web.Request) -> web.StreamResponse:
        """POST /file (form file_path): the file's bytes, or 404."""
        form = await request.post()
        if "file_path" not in form:
            return web.json_response({"error": "file_path is required"}, status=400)
        path = Path(commands.expand(str(form["file_path"])))
        # A host file the desktop may not read is, as far as the desktop knows, not there.
        if not await asyncio.to_thread(_readable_file, path):
            return web.json_response({"error": "File not found"}, status=404)
        return web.FileResponse(path, headers={"Content-Type": "application/octet-stream"})

    async def upload(self, request: web.Request) -> web.Response:
        """POST /setup/upload (multipart file_path + file_data): write a file."""
        form = await request.post()
        if "file_path" not in form or "file_data" not in form:
            return web.json_response({"error": "file_path and file_data are required"}, status=400)
        path = Path(commands.expand(str(form["file_path"])))
        field = form["file_data"]
        data = field.file.read() if hasattr(field, "file") else str(field).encode()
        try:
            size = await self._as_agent(files.write_bytes, path, data)
        except AgentSideError as exc:
            return web.json_response({"error": f"Failed to upload file: {exc.args[0]}"}, status=500)
        return web.Response(text=f"File Uploaded: {size} bytes")

    async def download_file(self, request: web.Request) -> web.Response:
        """POST /setup/download_file {"url", "path"}: fetch a file:// or loopback URL."""
        data = await self._json(request)
        url, path = data.get("url"), data.get("path")
        if not url or not path:
            return web.Response(text="Path or URL not supplied!", status=400)
        try:
            size = await self._as_agent(files.download, str(url), Path(commands.expand(str(path))))
        except AgentSideError as exc:
            return web.Response(text=f"Failed to download {url}. Error: {exc.args[0]}", status=500)
        return web.Response(text=f"File downloaded successfully: {size} bytes")

    async def list_directory(self, request: web.Request) -> web.Response:
        """POST /list_directory {"path"}: {"directory_tree": {...}}."""
        data = await self._json(request)
        if "path" not in data:
            return web.json_response({"error": "Missing 'path' parameter"}, status=400)
        start = Path(commands.expand(str(data["path"])))
        if not await asyncio.to_thread(_is_dir, start):
            return web.json_response({"error": "The provided path is not a directory"}, status=400)
        tree = await asyncio.to_thread(files.directory_tree, start)
        return web.json_response({"directory_tree": tree})

    # -- windows ------------------------------------------------------------------------
    async def open_file(self, request: web.Request) -> web.Response:
        """POST /setup/open_file {"path"}: open in the app its type belongs to (apps.py), wait
        for the window showing it, activate it."""
        data = await self._json(request)
        path = data.get("path")
        if not path:
            return web.Response(text="Path not supplied!", status=400)
        target = Path(commands.expand(str(path)))
        timeout = float(data.get("timeout") or 60)
        try:
            opener = files.open_command(target)
        except FileNotFoundError:
            return web.Response(text=f"Application/file not found: {path}", status=404)
        if opener.app is not None and (why := missing_app(opener.app)):
            return web.Response(text=f"Cannot open {path}: {why}", status=500)
        before = {wid: title for wid, _, title in await commands.list_windows(**self._inside)}
        await commands.spawn_detached(opener.argv, False, **self._inside)
        started = time.monotonic()
        first_seen: dict[str, float] = {}
        while time.monotonic() - started < timeout:
            windows = await commands.list_windows(**self._inside)
            window = _window_showing(opener, before, windows, started, first_seen)
            if window:
                await commands.run(["wmctrl", "-i", "-a", window], False, 10, **self._inside)
                return web.Response(text="File opened and window activated successfully")
            await asyncio.sleep(0.2)
        return web.Response(
            text=f"Failed to find window for {opener.title} within {timeout} seconds.", status=500
        )

    async def activate_window(self, request: web.Request) -> web.Response:
        """POST /setup/activate_window {"window_name", "strict", "by_class"}."""
        return await self._wmctrl(request, "a", "Window activated successfully")

    async def close_window(self, request: web.Request) -> web.Response:
        """POST /setup/close_window {"window_name", "strict", "by_class"}."""
        return await self._wmctrl(request, "c", "Window closed successfully.")

    async def _wmctrl(self, request: web.Request, verb: str, done: str) -> web.Response:
        data = await self._json(request)
        name = data.get("window_name")
        if not name:
            return web.Response(text="window_name required", status=400)
        flags = ("x" if data.get("by_class") else "") + ("F" if data.get("strict") else "") + verb
        result = await commands.run(["wmctrl", f"-{flags}", str(name)], False, 10, **self._inside)
        if result.get("returncode") != 0:
            return web.Response(text=f"Window {name} not found", status=404)
        return web.Response(text=done)

    # -- scalecua extensions --------------------------------------------------------------
    async def action(self, request: web.Request) -> web.Response:
        """POST /scalecua/action: one parsed action in pixel coordinates, executed by XTEST."""
        data = await self._json(request)
        try:
            output = await self._on_x(self._perform, data)
        except (KeyError, TypeError, ValueError) as exc:
            return web.json_response(
                {"status": "error", "message": f"bad action: {exc}"}, status=400
            )
        return web.json_response({"status": "success", "output": output})

    def _perform(self, a: dict) -> Any:
        x = self._xinput()
        name = a["action"]
        point = a.get("coordinate")
        if name in ("left_click", "right_click", "middle_click", "double_click", "triple_click"):
            button, count = CLICKS[name]
            if point:
                x.move(*point)
            x.click(button, count, a.get("modifiers") or [])
        elif name == "mouse_move":
            x.move(*point)
        elif name in ("left_mouse_down", "left_mouse_up"):
            if point:
                x.move(*point)
            x.button(1, name == "left_mouse_down")
        elif name == "left_click_drag":
            x.drag(tuple(a["start_coordinate"]), tuple(point))
        elif name == "scroll":
            if point:
                x.move(*point)
            x.scroll(a["scroll_direction"], int(a["scroll_amount"]))
        elif name == "key":
            x.key_combos(a["combos"])
        elif name == "hold_key":
            x.hold(a["combos"], float(a["duration"]))
        elif name == "type":
            x.type_text(a["text"])
        elif name == "cursor_position":
            pass
        else:
            raise ValueError(f"the server does not execute {name!r}")
        return list(x.cursor())

    async def reset(self, request: web.Request) -> web.Response:
        """POST /scalecua/reset: kill the apps, release input, restore the home skeleton."""
        started = time.monotonic()
        killed = await asyncio.to_thread(self.session.kill_apps, set())
        width, height = self.session.width, self.session.height

        def settle_input() -> None:
            x = self._xinput()
            x.release_all()
            x.move(width // 2, height // 2)

        await self._on_x(settle_input)
        await self._as_agent(restore_home, HOME)
        alive = self.session.alive()
        if not all(alive.values()):
            # A dead service cannot be reset away: the owner should replace this desktop.
            dead = ", ".join(name for name, up in alive.items() if not up)
            return web.json_response({"status": "error", "message": f"{dead} died"}, status=500)
        return web.json_response(
            {"status": "success", "killed": killed, "seconds": time.monotonic() - started}
        )

    async def forward(self, request: web.Request) -> web.Response:
        """POST /scalecua/forward {"port"}: the host loopback port that reaches `port` inside
        the desktop's own network (VLC's 8080, Chrome's 9222), forwarding from now on."""
        data = await self._json(request)
        port = data.get("port")
        if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
            return web.json_response(
                {"status": "error", "message": "port must be an integer in 1-65535"}, status=400
            )
        host_port = await self.forwarder.forward(port)
        return web.json_response({"status": "success", "port": host_port})

    async def health(self, request: web.Request) -> web.Response:
        """GET /scalecua/health: which services are alive, and the display."""
        alive = self.session.alive()
        status = "success" if all(alive.values()) else "error"
        return web.json_response(
            {"status": status, "services": alive, "display": self.session.display}
        )

    def close(self) -> None:
        """Release the X connection and the screen grabber."""

        def close_x() -> None:
            if self._input is not None:
                self._input.close()
            if self._grabber is not None:
                self._grabber.close()

        self._x.submit(close_x).result(timeout=5)
        self._x.shutdown(wait=True)


def _window_showing(
    opener: Opener,
    before: dict[str, str],
    windows: list[tuple[str, str, str]],
    started: float,
    first_seen: dict[str, float],
) -> str | None:
    """The window that shows what `opener` opened: one whose title names the file and is new
    or newly so titled (or, after a few seconds, already was: the file was open), or else a
    new window of the app's class once it has had a moment to take the file's name (VLC
    titles a song by its tags; Evince and Nautilus show a placeholder title at first)."""
    now = time.monotonic()
    settled = now - started > _ALREADY_OPEN_SECONDS
    wanted_class = opener.window_class.lower()
    by_class = None
    for wid, wm_class, title in windows:
        if opener.title in title and (before.get(wid) != title or settled):
            return wid
        if wid not in before and wanted_class and wm_class.lower().endswith("." + wanted_class):
            if now - first_seen.setdefault(wid, now) > _TITLE_SECONDS:
                by_class = by_class or wid
    return by_class


def _readable_file(path: Path) -> bool:
    try:
        return path.is_file() and os.access(path, os.R_OK)
    except OSError:  # a folder on the way that the desktop may not enter
        return False


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:
        return False


async def _serve(args: argparse.Namespace) -> int:
    # Nothing of the agent's may read this process's memory or descriptors, nor trace it.
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    token = _read_token(args.token_fd)
    if not token:
        print("desktop server: no token on --token-fd", file=sys.stderr)
        return 64
    # Every process of this desktop inherits its id: operators (and tests) can find them.
    os.environ["SCALECUA_DESKTOP_ID"] = args.id
    session = DesktopSession(args.id, Path(args.run_dir), args.width, args.height)
    try:
        await asyncio.to_thread(session.start)
        assert session.agent is not None
        # The desktop's way out, listening in its own network (browser_net.py).
        gateway = BrowserGateway.listening(session.agent.socket)
    except Exception as exc:
        session.stop()
        print(f"desktop server: {exc}", file=sys.stderr, flush=True)
        return 70
    chrome.write_wrappers(session.run_dir / "bin", GATEWAY_PORT)
    os.environ.clear()
    os.environ.update(session.env)
    await asyncio.to_thread(session.agent.call, restore_home, HOME)
    server = DesktopServer(session, token)
    app = server.app()
    add_relay_routes(app, session.agent.socket)
    add_scienceboard_routes(app, server)
    await gateway.start()
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(sig, stop.set)
    ready = {"port": port, "display": session.display, "width": args.width, "height": args.height}
    print(json.dumps(ready), flush=True)
    await stop.wait()
    await server.forwarder.close()
    await runner.cleanup()
    await gateway.close()
    server.close()
    await asyncio.to_thread(session.kill_apps, set())
    session.stop()
    return 0


def _read_token(fd: int) -> str:
    """The token init writes to `fd` (then closed), or "" if there is none."""
    try:
        with os.fdopen(fd, "rb") as pipe:
            return pipe.read(4096).decode().strip()
    except (OSError, UnicodeDecodeError):
        return ""


def main() -> int:
    """Entry point inside the desktop namespace."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--id", required=True)
    parser.add_argument("--run-dir", default=RUN_DIR)
    parser.add_argument("--token-fd", type=int, required=True)
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=800)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    return asyncio.run(_serve(args))


if __name__ == "__main__":
    sys.exit(main())
