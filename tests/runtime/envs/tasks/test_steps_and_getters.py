"""Setup steps and getters against a real desktop (and a real HTTP server on loopback)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from aiohttp import web

from runtime.envs.tasks.files import open_file_cache
from runtime.envs.tasks.getters import TERMINAL_LOG_DIR, EvalContext, get_state
from runtime.envs.tasks.setup import run_steps
from runtime.errors import TaskError

pytestmark = pytest.mark.desktop


@pytest.fixture
async def ctl(task_desktop):
    await task_desktop.reset()
    async with task_desktop.controller() as controller:
        yield controller


@pytest.fixture
async def http_url():
    """A real HTTP server on 127.0.0.1 serving two small files."""
    files = {"data.csv": "a,b\n1,2\n", "expected.txt": "served\n"}

    async def serve(request: web.Request) -> web.Response:
        return web.Response(text=files[request.match_info["name"]])

    app = web.Application()
    app.router.add_get("/{name}", serve)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


def _text(path: str) -> str:
    return Path(path).read_text()


def _ctx(ctl, tmp_path: Path, base_dir: Path | None = None, actions=None) -> EvalContext:
    cache = tmp_path / "cache"
    cache.mkdir(exist_ok=True)
    return EvalContext(ctl, cache, base_dir, actions or [])


async def test_file_steps_and_file_getters(ctl, tmp_path, http_url):
    (tmp_path / "inputs").mkdir()
    (tmp_path / "inputs" / "local.txt").write_text("from the task folder\n")
    steps = [
        {"type": "upload_file", "parameters": {"files": [{"local_path": "inputs/local.txt", "path": "/home/user/up.txt"}]}},
        {"type": "download", "parameters": {"files": [
            {"url": "file://inputs/local.txt", "path": "/home/user/Documents/rel.txt"},
            {"url": f"file://{tmp_path}/inputs/local.txt", "path": "/home/user/abs.txt"},
            {"url": f"{http_url}/data.csv", "path": "/home/user/data.csv"},
        ]}},
        {"type": "execute", "parameters": {"command": "echo made > ~/made.txt", "shell": True}},
        {"type": "command", "parameters": {"command": ["mkdir", "-p", "/home/user/newdir/sub"]}},
        {"type": "sleep", "parameters": {"seconds": 0.1}},
    ]  # fmt: skip
    await run_steps(ctl, steps, tmp_path)
    ctx = _ctx(ctl, tmp_path, tmp_path)
    up = await get_state(ctx, {"type": "vm_file", "path": "/home/user/up.txt", "dest": "up.txt"})
    assert _text(up) == "from the task folder\n"
    multi = await get_state(ctx, {
        "type": "vm_file", "multi": True, "gives": [0, 2],
        "path": ["/home/user/Documents/rel.txt", "/home/user/abs.txt", "/home/user/data.csv", "/home/user/nope"],
        "dest": ["rel.txt", "abs.txt", "data.csv", "nope"],
    })  # fmt: skip
    assert _text(multi[0]) == "from the task folder\n"
    assert _text(multi[1]) == "a,b\n1,2\n"
    assert await get_state(ctx, {"type": "vm_file", "path": "/home/user/nope", "dest": "n"}) is None
    served = await get_state(
        ctx, {"type": "cloud_file", "path": f"{http_url}/expected.txt", "dest": "e.txt"}
    )
    assert _text(served) == "served\n"
    cached = await get_state(ctx, {"type": "cache_file", "path": "e.txt"})
    assert _text(cached) == "served\n"
    assert (
        await get_state(
            ctx, {"type": "vm_command_line", "command": "cat ~/made.txt", "shell": True}
        )
        == "made\n"
    )
    error = await get_state(
        ctx, {"type": "vm_command_error", "command": ["ls", "/home/user/absent"]}
    )
    assert "absent" in error
    listing = await get_state(ctx, {"type": "list_directory", "path": "/home/user/newdir"})
    assert listing["children"] == [{"type": "directory", "name": "sub", "children": []}]
    assert await get_state(ctx, {"type": "vm_screen_size"}) == {"width": 1280, "height": 800}
    assert await get_state(ctx, {"type": "rule", "rules": {"x": 1}}) == {"x": 1}


async def test_bad_steps_raise_task_error(ctl, tmp_path):
    with pytest.raises(TaskError, match="unsupported"):
        await run_steps(ctl, [{"type": "no_such_step", "parameters": {}}], tmp_path)
    with pytest.raises(TaskError, match="urls_to_open"):
        await run_steps(ctl, [{"type": "chrome_open_tabs", "parameters": {}}], tmp_path)
    with pytest.raises(TaskError, match="cannot read"):
        await run_steps(ctl, [{"type": "upload_file", "parameters": {"files": [
            {"local_path": "missing.bin", "path": "/home/user/x"}]}}], tmp_path)  # fmt: skip
    with pytest.raises(TaskError, match="not in the file cache.*only loopback URLs"):
        await run_steps(ctl, [{"type": "download", "parameters": {"files": [
            {"url": "http://example.com/x", "path": "/home/user/x"}]}}], tmp_path)  # fmt: skip


async def test_download_steps_and_cloud_files_come_from_the_file_cache(ctl, tmp_path, monkeypatch):
    # OSWorld's files are on Google Drive: the host serves them from its cache (seeded here
    # as `scalecua tasks files add` does) and the desktop receives the bytes. Tests only ever
    # fetch loopback URLs (SCALECUA_FILES_FETCH=loopback), so a miss is a clear error.
    monkeypatch.setenv("SCALECUA_FILES", str(tmp_path / "files"))
    drive = "https://drive.usercontent.google.com/download?id=scalecua-test-{}&export=download"
    cache = open_file_cache()
    cache.put(drive.format("report"), b"quarterly report\n")
    cache.put(drive.format("expected"), b"expected text\n")
    # A task from the `tasks` topic has no folder: its files come by URL only.
    await run_steps(ctl, [_download(drive.format("report"), "/home/user/Documents/r.txt")], None)
    assert await ctl.get_file("/home/user/Documents/r.txt") == b"quarterly report\n"
    expected = await get_state(_ctx(ctl, tmp_path), {
        "type": "cloud_file", "path": drive.format("expected"), "dest": "e.txt"})  # fmt: skip
    assert _text(expected) == "expected text\n"
    missing = drive.format("missing")
    with pytest.raises(TaskError) as caught:
        await run_steps(ctl, [_download(missing, "/home/user/missing.txt")], None)
    assert missing in str(caught.value) and "scalecua tasks files add URL FILE" in str(caught.value)
    assert await ctl.get_file("/home/user/missing.txt") is None
    with pytest.raises(TaskError, match="not in the file cache"):
        await get_state(_ctx(ctl, tmp_path), {"type": "cloud_file", "path": missing, "dest": "m"})


async def _windows(ctl) -> str:
    return (await ctl.execute(["wmctrl", "-l"]))["output"]


async def test_window_steps_open_launch_activate_close(ctl, tmp_path):
    (tmp_path / "memo.txt").write_text("window steps\n")
    await run_steps(ctl, [
        {"type": "upload_file", "parameters": {"files": [{"local_path": "memo.txt", "path": "/home/user/memo.txt"}]}},
        {"type": "open", "parameters": {"path": "/home/user/memo.txt"}},
        {"type": "launch", "parameters": {"command": "xterm -T second-window", "shell": True}},
        {"type": "sleep", "parameters": {"seconds": 1.0}},
        {"type": "activate_window", "parameters": {"window_name": "memo.txt"}},
    ], tmp_path)  # fmt: skip
    assert "memo.txt" in await _windows(ctl) and "second-window" in await _windows(ctl)
    active = await ctl.execute(["xdotool", "getactivewindow", "getwindowname"])
    assert "memo.txt" in active["output"]
    await run_steps(ctl, [
        {"type": "close_window", "parameters": {"window_name": "second-window", "strict": True}},
        {"type": "sleep", "parameters": {"seconds": 0.5}},
    ], tmp_path)  # fmt: skip
    assert "second-window" not in await _windows(ctl)
    tree = await get_state(_ctx(ctl, tmp_path), {"type": "accessibility_tree"})
    assert "memo.txt" in tree  # mousepad's window, seen through AT-SPI


async def test_terminal_output_and_agent_answer(ctl, tmp_path):
    ctx = _ctx(
        ctl,
        tmp_path,
        actions=[{"action": "answer", "text": "41"}, {"action": "answer", "text": "42"}],
    )
    assert await get_state(ctx, {"type": "agent_answer"}) == "42"
    assert await get_state(ctx, {"type": "vm_terminal_output"}) is None  # no terminal yet
    log = f"{TERMINAL_LOG_DIR}/1.log"
    await ctl.execute(["mkdir", "-p", TERMINAL_LOG_DIR])
    await ctl.launch(["xterm", "-l", "-lf", log])
    await asyncio.sleep(1.5)
    await ctl.step({"action": "type", "text": "echo terminal-$((6 * 7))\n"})
    await asyncio.sleep(0.8)
    text = await get_state(ctx, {"type": "vm_terminal_output"})
    assert "terminal-42" in text and "\x1b" not in text
    json.dumps(text)


def _download(url: str, path: str = "/home/user/fetched") -> dict:
    return {"type": "download", "parameters": {"files": [{"url": url, "path": path}]}}


def _upload(local_path: str, path: str = "/home/user/fetched") -> dict:
    return {
        "type": "upload_file",
        "parameters": {"files": [{"local_path": local_path, "path": path}]},
    }


async def test_file_urls_reach_only_the_task_folder_and_the_home(ctl, tmp_path):
    # A task's setup and getters are as untrusted as its judge: they must not read host files.
    task_dir = tmp_path / "task"
    (task_dir / "inputs").mkdir(parents=True)
    (task_dir / "inputs" / "ok.txt").write_text("inside the task folder\n")
    secret = tmp_path / "secret.txt"  # beside the task folder, not in it
    secret.write_text("host secret\n")
    (task_dir / "inputs" / "link.txt").symlink_to(secret)
    for step in (
        _download("file:///etc/shadow"),
        _download(secret.as_uri()),
        _download("file://../secret.txt"),
        _download("file://inputs/link.txt"),
        _upload("/etc/shadow"),
        _upload(str(secret)),
        _upload("../secret.txt"),
        _upload("inputs/link.txt"),
    ):
        with pytest.raises(TaskError, match="outside the task folder"):
            await run_steps(ctl, [step], task_dir)
    assert await ctl.get_file("/home/user/fetched") is None
    ctx = _ctx(ctl, tmp_path, task_dir)
    for spec in (
        {"type": "cloud_file", "path": "file:///etc/shadow", "dest": "shadow"},
        {"type": "cloud_file", "path": secret.as_uri(), "dest": "s.txt"},
        {"type": "cloud_file", "path": "../secret.txt", "dest": "s.txt"},
        {"type": "cloud_file", "path": "inputs/link.txt", "dest": "s.txt"},
        {"type": "cache_file", "path": "/etc/shadow"},
        {"type": "cache_file", "path": "../secret.txt"},
    ):
        with pytest.raises(TaskError, match="outside the task folder"):
            await get_state(ctx, spec)
    # A task without a folder (one from the tasks topic) reads no host file at all.
    with pytest.raises(TaskError, match="outside the task folder"):
        await run_steps(ctl, [_download("file://inputs/ok.txt")], None)
    # The task folder (relative or absolute) and the desktop's own home are fine.
    await run_steps(ctl, [_download("file://inputs/ok.txt", "/home/user/a.txt")], task_dir)
    ok_uri = (task_dir / "inputs" / "ok.txt").as_uri()
    await run_steps(ctl, [_upload(ok_uri[len("file://") :], "/home/user/b.txt")], task_dir)
    await run_steps(ctl, [_download("file:///home/user/a.txt", "/home/user/c.txt")], None)
    for name in ("a", "b", "c"):
        assert await ctl.get_file(f"/home/user/{name}.txt") == b"inside the task folder\n"
    home = await get_state(
        ctx, {"type": "cloud_file", "path": "file:///home/user/c.txt", "dest": "c.txt"}
    )
    assert _text(home) == "inside the task folder\n"
    with pytest.raises(TaskError, match="cannot read"):
        await get_state(ctx, {"type": "cloud_file", "path": "file:///home/user/none", "dest": "n"})
