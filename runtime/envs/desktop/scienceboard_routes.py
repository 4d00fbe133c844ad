"""The routes ScienceBoard's VM server adds to OSWorld's, on our desktop server.

ScienceBoard's tasks write and read text files through `/write`, `/append` and `/read`,
make accessibility trees shallower with `/opt`, and check a LaTeX project with
`/tex/check` (pdflatex, then bibtex and pdflatex twice when the task wrote a `.bib`). The
shapes are ScienceBoard's: `/read?path=` answers the text, the writes answer "OK",
`/tex/check` answers `{"pass": bool}` (and, our addition, the log's last lines). Files are
read and written on the agent's side, with its rights, like every file route; LaTeX runs
inside the desktop, as the agent, with no terminal to stop at (`-interaction=nonstopmode`
fails where ScienceBoard's pdflatex, reading EOF, fails). The app routes of ScienceBoard's
patched apps (`/chimerax/run`, `/lean/check`) need apps this host cannot have.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aiohttp import web

from runtime.envs.desktop import commands, files
from runtime.envs.desktop.namespaces import AgentSideError

__all__ = ["TEX_TIMEOUT", "add_scienceboard_routes"]

TEX_TIMEOUT = 120.0  # seconds for one pdflatex or bibtex pass
_LOG_TAIL = 2000  # characters of the failing pass's output returned with {"pass": false}


def add_scienceboard_routes(app: web.Application, server: Any) -> None:
    """Add `/read`, `/write`, `/append`, `/opt` and `/tex/check` to a DesktopServer's app."""

    async def read(request: web.Request) -> web.Response:
        path = request.query.get("path")
        if not path:
            return web.Response(text="path is required", status=400)
        try:
            text = await server._as_agent(files.read_text, Path(commands.expand(path)))
        except AgentSideError as exc:
            return web.Response(text=f"cannot read {path}: {exc.args[0]}", status=404)
        return web.Response(text=text)

    async def write(request: web.Request, append: bool) -> web.Response:
        data = await server._json(request)
        path, content = data.get("path"), data.get("content", "")
        if not isinstance(path, str) or not path or not isinstance(content, str):
            return web.Response(text="path and content (text) are required", status=400)
        target = Path(commands.expand(path))
        try:
            if append:
                await server._as_agent(files.append_text, target, content)
            else:
                await server._as_agent(files.write_bytes, target, content.encode("utf-8"))
        except AgentSideError as exc:
            return web.Response(text=f"cannot write {path}: {exc.args[0]}", status=500)
        return web.Response(text="OK")

    async def opt(request: web.Request) -> web.Response:
        data = await server._json(request)
        depth = data.get("depth", 50)
        if not isinstance(depth, int) or isinstance(depth, bool) or not 1 <= depth <= 1000:
            return web.Response(text="depth must be a whole number from 1 to 1000", status=400)
        server.a11y_depth = depth
        return web.Response(text="OK")

    async def tex_check(request: web.Request) -> web.Response:
        data = await server._json(request)
        folder, name = data.get("path", str(commands.HOME)), data.get("file", "main")
        if not isinstance(folder, str) or not isinstance(name, str) or not name:
            return web.json_response({"error": "path and file must be text"}, status=400)
        latex = ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", f"{name}.tex"]
        passes = [latex]
        if data.get("bibtex"):
            passes += [["bibtex", name], latex, latex]
        for argv in passes:
            result = await commands.run(
                argv, False, TEX_TIMEOUT, cwd=commands.expand(folder), **server._inside
            )
            if result.get("status") != "success" or result.get("returncode") != 0:
                log = str(result.get("output") or "") + str(result.get("error") or "")
                log = log or str(result.get("message") or "")
                return web.json_response({"pass": False, "log": log[-_LOG_TAIL:]})
        return web.json_response({"pass": True})

    r = app.router
    r.add_get("/read", read)
    r.add_post("/write", lambda request: write(request, append=False))
    r.add_post("/append", lambda request: write(request, append=True))
    r.add_post("/opt", opt)
    r.add_post("/tex/check", tex_check)
