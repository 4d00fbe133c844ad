"""Desktop server overhead against the raw tools, on the same desktops in the same run.

Measures on real desktops (Xvfb 1280x800):
  * start: one desktop from nothing to its server answering (sequential starts, median);
  * screenshot: mss raw grab, mss grab + PNG (what the server does), and the server's
    /screenshot round trip through the controller;
  * actions: a click by xdotool (a process per click, 100 ms built-in delay) and by XTEST
    in-process, against `controller.step(left_click)`; likewise a key and typing 20 chars;
  * reset: `Desktop.reset()` with a text editor and a terminal open and files written;
  * throughput: screenshot+click steps/s with 1, 4 and 8 desktops acting at once, through
    the servers and with the raw tools in-process (one process per desktop);
  * apps: each of OSWorld's apps, and ScienceBoard's TeXstudio, started on a desktop as its
    tasks start it (`open` of a file of its type, or the command they launch), from the
    request to its window, and the desktop's memory (PSS of its whole process tree) with it,
    against a plain desktop.
A desktop's X server is reachable only from inside the desktop (its own /tmp, a cookie),
so the raw tools run there: a Python program started through /execute times them.
Prints a table of medians and the server/raw ratios; `--json PATH` writes them. `--quick`
(under a minute) takes fewer samples, 1 and 4 desktops, and each app once.

    python bench/desktop.py --quick --json bench-desktop.json
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runtime.envs.desktop.lifecycle import Desktop  # noqa: E402
from runtime.envs.desktop.pool import DesktopPool  # noqa: E402

TEXT20 = "bench typing 20 char"
DESKTOP_DIR = "/home/user/Desktop"
# (app, how its tasks start it: a file `open`ed or a command launched, the window to wait for)
APP_CASES = (
    ("mousepad", {"open": "notes.txt"}),
    ("LibreOffice Calc", {"open": "sheet.xlsx"}),
    ("LibreOffice Writer", {"open": "letter.docx"}),
    ("LibreOffice Impress", {"open": "talk.pptx"}),
    ("GIMP", {"launch": ["gimp", f"{DESKTOP_DIR}/picture.png"], "title": "[picture]"}),
    ("VLC", {"open": "clip.mp4"}),
    ("Thunderbird", {"launch": ["thunderbird"], "title": "Mozilla Thunderbird"}),
    ("Chrome (chromium)", {"open": "page.html"}),
    ("Nautilus", {"open": "folder"}),
    ("Evince (pdf)", {"open": "paper.pdf"}),
    ("eog (image)", {"open": "picture.png"}),
    ("VS Code (code-server)", {"launch": ["code"], "title": "Visual Studio Code"}),
    (
        "TeXstudio",
        {"launch": ["texstudio", f"{DESKTOP_DIR}/paper.tex"], "title": "paper.tex - TeXstudio"},
    ),
)
APP_SETTLE_S = 1.5  # after its window shows, before the memory is read

# Runs inside a desktop (its `python` is the project's): times the raw tools there and
# prints one JSON object. argv[1]: {"mode": "latency", "n": N} or {"mode": "loop", "seconds": S, "x": X}.
RAW_TOOLS = r"""
import json, os, statistics, subprocess, sys, time
import mss, mss.tools
from Xlib import XK, X, display
from Xlib.ext import xtest

args = json.loads(sys.argv[1])
d = os.environ["DISPLAY"]
sct = (getattr(mss, "MSS", None) or mss.mss)(display=d, with_cursor=args["mode"] == "loop")
conn = display.Display(d)

def grab_png():
    shot = sct.grab(sct.monitors[0])
    return mss.tools.to_png(shot.rgb, shot.size, level=1)

def click(x=640, y=400):
    xtest.fake_input(conn, X.MotionNotify, x=x, y=y)
    xtest.fake_input(conn, X.ButtonPress, 1)
    xtest.fake_input(conn, X.ButtonRelease, 1)
    conn.sync()

if args["mode"] == "loop":
    count, started = 0, time.perf_counter()
    while time.perf_counter() - started < args["seconds"]:
        grab_png()
        click(args["x"], 400)
        count += 1
    print(json.dumps({"steps": count, "seconds": time.perf_counter() - started}))
    sys.exit(0)

def median_ms(fn, n):
    fn()
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000

code = conn.keysym_to_keycode(XK.string_to_keysym("a"))

def xtest_key():
    xtest.fake_input(conn, X.KeyPress, code)
    xtest.fake_input(conn, X.KeyRelease, code)
    conn.sync()

def run(*argv):
    subprocess.run(argv, check=True)

n = args["n"]
print(json.dumps({
    "mss_grab_ms": median_ms(lambda: sct.grab(sct.monitors[0]), n),
    "mss_png_ms": median_ms(grab_png, n),
    "xdotool_click_ms": median_ms(lambda: run("xdotool", "mousemove", "640", "400", "click", "1"), max(5, n // 4)),
    "xtest_click_ms": median_ms(click, n),
    "xdotool_key_ms": median_ms(lambda: run("xdotool", "key", "a"), n),
    "xtest_key_ms": median_ms(xtest_key, n),
    "xdotool_type20_ms": median_ms(lambda: run("xdotool", "type", "--delay", "0", args["text"]), n),
}))
"""


async def raw_tools(desktop: Desktop, **args: object) -> dict:
    """Run RAW_TOOLS inside the desktop and return what it measured."""
    async with desktop.controller(timeout=300.0) as ctl:
        done = await ctl.execute(["python", "-c", RAW_TOOLS, json.dumps(args)], timeout=300)
    if done.get("returncode") != 0:
        raise RuntimeError(f"raw tools failed in {desktop}: {done}")
    return json.loads(done["output"])


async def start_seconds(count: int) -> list[float]:
    """Start and stop `count` desktops one after another; return each start's duration."""
    out = []
    for _ in range(count):
        t = time.perf_counter()
        desktop = await Desktop.start()
        out.append(time.perf_counter() - t)
        await desktop.stop()
    return out


def median_ms(samples: list[float]) -> float:
    """Median of samples in seconds, as milliseconds."""
    return statistics.median(samples) * 1000


def time_sync(fn, n: int) -> list[float]:
    """Run fn n times; return each duration in seconds (after one warm-up)."""
    fn()
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


async def time_async(fn, n: int) -> list[float]:
    """Await fn() n times; return each duration in seconds (after one warm-up)."""
    await fn()
    out = []
    for _ in range(n):
        t = time.perf_counter()
        await fn()
        out.append(time.perf_counter() - t)
    return out


async def bench_single(desktop: Desktop, n: int) -> dict:
    """Latencies of raw tools (inside the desktop) and of the server on one desktop."""
    async with desktop.controller() as ctl:
        await ctl.launch(["xterm", "-T", "bench", "-e", "sh", "-c", "cat > /dev/null"])
        await asyncio.sleep(1.0)
        r: dict = await raw_tools(desktop, mode="latency", n=n, text=TEXT20)
        r["server_screenshot_ms"] = median_ms(await time_async(ctl.screenshot, n))
        click = {"action": "left_click", "coordinate": [500, 500]}
        r["step_click_ms"] = median_ms(await time_async(lambda: ctl.step(click), n))
        r["step_key_ms"] = median_ms(
            await time_async(lambda: ctl.step({"action": "key", "text": "a"}), n)
        )
        r["step_type20_ms"] = median_ms(
            await time_async(lambda: ctl.step({"action": "type", "text": TEXT20}), n)
        )

        async def dirty_then_reset() -> float:
            await ctl.launch(["mousepad"])
            await ctl.launch(["xterm"])
            await ctl.upload_file("/home/user/Documents/x.txt", b"x" * 10000)
            await asyncio.sleep(0.7)
            t = time.perf_counter()
            await desktop.reset()
            return time.perf_counter() - t

        resets = [await dirty_then_reset() for _ in range(max(3, n // 10))]
        r["reset_ms"] = median_ms(resets)
        r["reset_max_ms"] = max(resets) * 1000
    return r


def app_files() -> dict[str, bytes]:
    """A small file of each type the apps open."""
    import cv2
    import docx
    import numpy as np
    import openpyxl
    import pptx
    from PIL import Image

    out: dict[str, bytes] = {"notes.txt": b"notes\n", "page.html": b"<title>bench</title>hi"}
    out["paper.tex"] = b"\\documentclass{article}\n\\begin{document}\nbench\n\\end{document}\n"
    deck = pptx.Presentation()
    deck.slides.add_slide(deck.slide_layouts[0]).shapes.title.text = "bench"
    letter = docx.Document()
    letter.add_paragraph("bench")
    book = openpyxl.Workbook()
    book.active.append(["bench", 1])
    for name, doc in (("talk.pptx", deck), ("letter.docx", letter), ("sheet.xlsx", book)):
        buf = io.BytesIO()
        doc.save(buf)
        out[name] = buf.getvalue()
    for name, fmt in (("picture.png", "PNG"), ("paper.pdf", "PDF")):
        buf = io.BytesIO()
        Image.new("RGB", (320, 240), (200, 40, 40)).save(buf, fmt)
        out[name] = buf.getvalue()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "clip.mp4")
        video = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*"mp4v"), 10, (320, 240))
        for i in range(100):
            video.write(np.full((240, 320, 3), (i * 2) % 255, np.uint8))
        video.release()
        out["clip.mp4"] = Path(path).read_bytes()
    return out


async def start_app(desktop: Desktop, how: dict, files: dict[str, bytes]) -> float:
    """Start one app on a reset desktop as its tasks do; return seconds until its window shows."""
    async with desktop.controller(timeout=120.0) as ctl:
        for name, data in files.items():
            await ctl.upload_file(f"{DESKTOP_DIR}/{name}", data)
        await ctl.execute(["mkdir", "-p", f"{DESKTOP_DIR}/folder"])
        t = time.perf_counter()
        if "open" in how:
            await ctl.open_file(f"{DESKTOP_DIR}/{how['open']}", timeout=120)
            return time.perf_counter() - t
        await ctl.launch(how["launch"])
        while time.perf_counter() - t < 120:
            if how["title"] in (await ctl.execute(["wmctrl", "-l"]))["output"]:
                return time.perf_counter() - t
            await asyncio.sleep(0.1)
    raise RuntimeError(f"no window titled {how['title']!r} after 120 s")


async def bench_apps(desktop: Desktop, rounds: int) -> dict:
    """Each app's start time and the desktop's memory with it, against the plain desktop."""
    files = await asyncio.to_thread(app_files)

    async def measure(how: dict | None) -> tuple[float, dict[str, int]]:
        await desktop.reset()
        start = await start_app(desktop, how, files) if how else 0.0
        await asyncio.sleep(APP_SETTLE_S)
        return start, desktop.memory()

    result = {}
    for app, how in (("plain desktop", None), *APP_CASES):
        runs = [await measure(how) for _ in range(rounds)]
        result[app] = {
            "start_s": statistics.median(start for start, _ in runs),
            "pss_mib": statistics.median(mem["pss"] for _, mem in runs) / 2**20,
            "uss_mib": statistics.median(mem["uss"] for _, mem in runs) / 2**20,
        }
    await desktop.reset()
    for row in result.values():
        row["pss_ratio"] = row["pss_mib"] / result["plain desktop"]["pss_mib"]
        row["uss_ratio"] = row["uss_mib"] / result["plain desktop"]["uss_mib"]
    return result


async def steps_per_second(pool: DesktopPool, k: int, seconds: float) -> float:
    """Screenshot+click steps per second with k desktops acting at once."""
    desktops = pool.desktops[:k]
    stop = time.perf_counter() + seconds
    counts = [0] * k

    async def agent(i: int, desktop: Desktop) -> None:
        async with desktop.controller() as ctl:
            x = 100 + 80 * i
            while time.perf_counter() < stop:
                await ctl.screenshot()
                await ctl.step({"action": "left_click", "coordinate": [x, 500]})
                counts[i] += 1

    started = time.perf_counter()
    await asyncio.gather(*(agent(i, d) for i, d in enumerate(desktops)))
    return sum(counts) / (time.perf_counter() - started)


async def raw_steps_per_second(desktops: list[Desktop], seconds: float) -> float:
    """The same loop with the raw tools in-process (mss grab + PNG, XTEST click), in each desktop."""
    loops = await asyncio.gather(
        *(
            raw_tools(d, mode="loop", seconds=seconds, x=128 + 102 * i)
            for i, d in enumerate(desktops)
        )
    )
    return sum(loop["steps"] / loop["seconds"] for loop in loops)


async def main() -> int:
    """Run the bench and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples (under a minute)")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    n = 10 if args.quick else 100
    seconds = 1.5 if args.quick else 10.0
    levels = (1,) if args.quick else (1, 4, 8)

    started = time.perf_counter()
    starts = await start_seconds(2 if args.quick else 10)
    pool = DesktopPool(max(levels))
    boot = time.perf_counter()
    await pool.start()
    boot_s = time.perf_counter() - boot
    try:
        single = await bench_single(pool.desktops[0], n)
        apps = await bench_apps(pool.desktops[0], 1 if args.quick else 3)
        await pool.desktops[0].reset()
        throughput = {k: await steps_per_second(pool, k, seconds) for k in levels}
        raw_throughput = {k: await raw_steps_per_second(pool.desktops[:k], seconds) for k in levels}
    finally:
        await pool.close()

    ratio = {
        "screenshot_server_vs_mss_png": single["server_screenshot_ms"] / single["mss_png_ms"],
        "screenshot_server_vs_mss_grab": single["server_screenshot_ms"] / single["mss_grab_ms"],
        "click_step_vs_xtest": single["step_click_ms"] / single["xtest_click_ms"],
        "click_step_vs_xdotool": single["step_click_ms"] / single["xdotool_click_ms"],
        "key_step_vs_xdotool": single["step_key_ms"] / single["xdotool_key_ms"],
        "type20_step_vs_xdotool": single["step_type20_ms"] / single["xdotool_type20_ms"],
    }
    single["start_ms"] = median_ms(starts)
    single["start_max_ms"] = max(starts) * 1000
    rows = [
        ("start", "Desktop.start (median)", single["start_ms"], f"max {single['start_max_ms']:.0f} ms"),
        ("screenshot", "mss grab (raw)", single["mss_grab_ms"], ""),
        ("screenshot", "mss grab + PNG (raw)", single["mss_png_ms"], ""),
        ("screenshot", "server /screenshot", single["server_screenshot_ms"],
         f"{ratio['screenshot_server_vs_mss_png']:.2f}x grab + PNG (server adds the pointer)"),
        ("click", "xdotool (process)", single["xdotool_click_ms"], ""),
        ("click", "XTEST in-process", single["xtest_click_ms"], ""),
        ("click", "controller.step", single["step_click_ms"],
         f"{ratio['click_step_vs_xdotool']:.2f}x xdotool, "
         f"+{single['step_click_ms'] - single['xtest_click_ms']:.2f} ms over XTEST"),
        ("key", "xdotool (process)", single["xdotool_key_ms"], ""),
        ("key", "XTEST in-process", single["xtest_key_ms"], ""),
        ("key", "controller.step", single["step_key_ms"],
         f"{ratio['key_step_vs_xdotool']:.2f}x xdotool, "
         f"+{single['step_key_ms'] - single['xtest_key_ms']:.2f} ms over XTEST"),
        ("type 20 chars", "xdotool --delay 0", single["xdotool_type20_ms"], ""),
        ("type 20 chars", "controller.step", single["step_type20_ms"],
         f"{ratio['type20_step_vs_xdotool']:.2f}x xdotool"),
        ("reset", "Desktop.reset (median)", single["reset_ms"], f"max {single['reset_max_ms']:.0f} ms"),
    ]  # fmt: skip
    print(
        f"\nbench/desktop.py  ({'quick' if args.quick else 'full'}, n={n}, {os.cpu_count()} CPUs)"
    )
    print(f"{'what':<15}{'how':<26}{'median ms':>11}  vs baseline")
    for what, how, ms, note in rows:
        print(f"{what:<15}{how:<26}{ms:>11.2f}  {note}")
    print(f"\n{'desktops':<10}{'steps/s':>10}{'per desktop':>14}{'raw steps/s':>14}{'ratio':>8}")
    for k, sps in throughput.items():
        raw = raw_throughput[k]
        print(f"{k:<10}{sps:>10.1f}{sps / k:>14.1f}{raw:>14.1f}{sps / raw:>8.2f}")
    print("(one step = screenshot + click; raw = mss + XTEST in-process, one process per desktop)")
    print(
        f"\n{'app (as its tasks start it)':<28}{'to window s':>12}{'PSS MiB':>9}{'x plain':>9}"
        f"{'USS MiB':>9}{'x plain':>9}"
    )
    for app, row in apps.items():
        print(
            f"{app:<28}{row['start_s']:>12.2f}{row['pss_mib']:>9.0f}{row['pss_ratio']:>9.2f}"
            f"{row['uss_mib']:>9.0f}{row['uss_ratio']:>9.2f}"
        )
    print("(memory: the desktop's whole process tree, server included, 1.5 s after the window)")
    print(
        f"\nstarting {max(levels)} desktops took {boot_s:.1f} s; bench {time.perf_counter() - started:.0f} s"
    )
    if args.json:
        result = {
            "single": single,
            "ratios": ratio,
            "steps_per_second": {str(k): v for k, v in throughput.items()},
            "raw_steps_per_second": {str(k): v for k, v in raw_throughput.items()},
            "apps": apps,
            "boot_seconds": boot_s,
            "quick": args.quick,
        }
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
