"""`scalecua dashboard`: the live web page over the log, or an archived run."""

from __future__ import annotations

import argparse
import sys

from cli.settings import PORT, integer, number

__all__ = ["register"]


class _ExplicitHost(argparse.Action):
    """Remember that --host was typed: only then may the page listen beyond loopback."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, values)
        namespace.host_typed = True


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the dashboard command to the `scalecua` parser."""
    p = subparsers.add_parser(
        "dashboard",
        help="a web page following rewards, task stats, trajectories, training and lag live",
        description=(
            "Serve a page on 127.0.0.1 that follows reward, task-stats, trajectory-complete, "
            "rollout-step and policy-updates live (a reader outside every consumer group: it "
            "never commits), with each service's throughput and consumer lag; or, with "
            "--archive, one archived run (no broker needed)."
        ),
    )
    p.add_argument("--port", type=integer(*PORT), default=8080, help="port (0: any free one)")
    p.add_argument(
        "--host", default="127.0.0.1", action=_ExplicitHost,
        help="listen address; beyond loopback only when typed on the command line",
    )  # fmt: skip
    p.add_argument("--archive", default=None, help="show an archived run from this folder or URL")
    p.add_argument("--run", default="latest", help="with --archive: the run id, or latest")
    p.add_argument(
        "--threshold", type=number(above=0, high=1), default=1.0, help="a score >= this is a pass"
    )
    p.add_argument(
        "--mu", type=number(0, 1), default=0.5, help="frontier band centre (sampler's μ)"
    )
    p.add_argument(
        "--sigma", type=number(above=0), default=0.25, help="frontier band half-width (σ)"
    )
    p.add_argument(
        "--judge-version", default=None,
        help="chart rewards of this judge version (default: the one with most rewards)",
    )  # fmt: skip
    p.add_argument(
        "--trajectories", type=integer(1), default=6, help="finished episodes in the filmstrip"
    )
    p.add_argument("--poll", type=number(above=0), default=2.0, help="seconds between lag samples")
    p.add_argument("--blobs", default=None, help="blob store (default $SCALECUA_BLOBS)")
    p.add_argument(
        "--bootstrap", default=None,
        help="bootstrap servers (default: $SCALECUA_BOOTSTRAP or the embedded broker)",
    )  # fmt: skip
    p.set_defaults(func=_dashboard, host_typed=False)


def _dashboard(args: argparse.Namespace) -> int:
    import asyncio
    import signal

    from cli.bus_commands import _run
    from consumers.dashboard.service import is_loopback, serve_dashboard
    from consumers.dashboard.state import DashboardConfig
    from runtime.blobstore import open_blob_store
    from runtime.config import BusSettings
    from runtime.errors import ConfigError

    if not is_loopback(args.host) and not args.host_typed:
        raise ConfigError(
            f"the dashboard has no login: it listens on {args.host} only when "
            f"`--host {args.host}` is typed on the command line (a config file cannot open it)"
        )
    config = DashboardConfig(
        pass_threshold=args.threshold, mu=args.mu, sigma=args.sigma,
        judge_version=args.judge_version, trajectories=args.trajectories,
    )  # fmt: skip
    settings = None if args.archive else BusSettings.from_env(args.bootstrap)

    async def main() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        async with serve_dashboard(
            settings, archive=args.archive, run=args.run, host=args.host, port=args.port,
            config=config, blobs=open_blob_store(args.blobs), poll_s=args.poll,
        ) as url:  # fmt: skip
            what = f"archive {args.archive}" if args.archive else f"broker {settings.bootstrap}"
            print(f"dashboard: {url} ({what}; Ctrl-C stops)", file=sys.stderr, flush=True)
            if not is_loopback(args.host):
                print(f"dashboard: WARNING: listening on {args.host} with no login; anyone who "
                      "reaches this port sees the run and its screenshots", file=sys.stderr)  # fmt: skip
            print(url, flush=True)
            await stop.wait()
        return 0

    return _run(main())
