"""Desktop server overhead against the raw tools, on the same desktops in the same run.

Measures on real desktops (Xvfb 1280x800):
  * start: one desktop from nothing to its server answering (sequential starts, median);
  * screenshot: mss raw grab, mss grab + PNG (what the server does), and the server's
    /screenshot round trip through the controller;
  * actions: a click by xdotool (a process per click, 100 ms built-in delay) and by XTEST
    in-process, against `controller.step(left_click)`; likewise a key and typing 20 chars;
  * reset: `Desktop.reset()` with a text editor and a terminal open and files written;
  * throughput: screenshot+click steps/s with 1, 4 and 8 desktops acting at once, through
    the servers and with the raw tools in-process (one process per desktop).
A desktop's X server is reachable only from inside the desktop (its own /tmp, a cookie),
so the raw tools run there: a Python program started through /execute times them.
Prints a table of medians and the server/raw ratios; `--json PATH` writes them.

    python bench/desktop.py --quick --json bench-desktop.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runtime.envs.desktop.lifecycle import Desktop  # noqa: E402
from runtime.envs.desktop.pool import DesktopPool  # noqa: E402

TEXT20 = "bench typing 20 char"

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
    n = 20 if args.quick else 100
    seconds = 3.0 if args.quick else 10.0
    levels = (1, 4, 8)

    started = time.perf_counter()
    starts = await start_seconds(3 if args.quick else 10)
    pool = DesktopPool(max(levels))
    boot = time.perf_counter()
    await pool.start()
    boot_s = time.perf_counter() - boot
    try:
        single = await bench_single(pool.desktops[0], n)
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
        f"\nstarting {max(levels)} desktops took {boot_s:.1f} s; bench {time.perf_counter() - started:.0f} s"
    )
    if args.json:
        result = {
            "single": single,
            "ratios": ratio,
            "steps_per_second": {str(k): v for k, v in throughput.items()},
            "raw_steps_per_second": {str(k): v for k, v in raw_throughput.items()},
            "boot_seconds": boot_s,
            "quick": args.quick,
        }
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
