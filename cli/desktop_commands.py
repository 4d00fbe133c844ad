"""`scalecua` subcommands for the desktop area.

scalecua desktop up --n 2     # start 2 desktops; one JSON line each; Ctrl-C stops them
"""

from __future__ import annotations

import argparse

from cli.settings import integer

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the desktop subcommands to the `scalecua` parser."""
    desktop = subparsers.add_parser("desktop", help="real Linux desktops for agents")
    sub = desktop.add_subparsers(dest="desktop_command", metavar="COMMAND")
    up = sub.add_parser(
        "up",
        help="start N desktops and keep them running until Ctrl-C or SIGTERM",
        description=(
            "Start N isolated desktops, print one JSON line per desktop "
            '({"id", "url", "token", "display", "home"}) on stdout, and keep them '
            "running until interrupted; then stop them cleanly."
        ),
    )
    up.add_argument("--n", type=integer(1), default=1, help="how many desktops (default 1)")
    up.add_argument("--width", type=integer(1), default=1280)
    up.add_argument("--height", type=integer(1), default=800)
    up.set_defaults(func=_up)
    desktop.set_defaults(func=lambda _args: desktop.print_help() or 2)


def _up(args: argparse.Namespace) -> int:
    import asyncio

    return asyncio.run(_serve(args.n, args.width, args.height))


async def _serve(n: int, width: int, height: int) -> int:
    import asyncio
    import json
    import logging
    import signal
    import sys

    from runtime.envs.desktop import DesktopPool

    log = logging.getLogger("scalecua.desktop")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    log.info("starting %d desktop(s)", n)
    pool = DesktopPool(n, width=width, height=height)
    await pool.start()
    try:
        for desktop in sorted(pool.desktops, key=lambda d: d.display):
            line = {
                "id": desktop.desktop_id,
                "url": desktop.base_url,
                "token": desktop.token,
                "display": desktop.display,
                "home": str(desktop.home),
            }
            sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()
        log.info("%d desktop(s) up; Ctrl-C to stop", n)
        await stop.wait()
        log.info("stopping %d desktop(s)", n)
    finally:
        await pool.close()
    return 0
