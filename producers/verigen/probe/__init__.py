"""The shared interaction probe: many agent workers, few desktops.

A VeriGen worker spends most of its time waiting for the model; it needs a desktop only to
look at an app, to prove a candidate's setup and verifier, or to act as the checker. The
probe owns a warm DesktopPool and lends desktops out as *sessions*: a session leases a
freshly reset desktop, runs a task's setup on it, and then executes the worker's
observations, actions and evaluations until the worker closes it (or it sits idle too
long). Waiting sessions get the next free desktop by purpose, then arrival (a checker before
a validation before a proposer's look at the app: see `scheduler.PRIORITY`), so 100
workers share a handful of desktops without every stage of every candidate waiting for the
whole queue; the waits are measured (`stats()`).

Two transports, one interface (`ProbeAPI`):

- `Probe`: in-process, for workers in the process that owns the desktops (no overhead).
- `ProbeServer` / `ProbeClient`: HTTP on 127.0.0.1 with a bearer token, for workers in
  other processes or on other hosts (desktop servers listen on loopback only, so remote
  workers cannot reach a desktop except through the probe; they never see its token).
  Every reply carries `server_ms`, so a client separates transport overhead from work.

A session's task is untrusted (LLM-written): it runs with no task folder (no host file is
readable), its setup inside the desktop, its judges in the sandbox. What a candidate does
wrong comes back as data (`setup_error`, `failed_commands`, `task_error`); a desktop or
probe failure raises `ProbeError`.

One module per role: `api` (the interface and its error), `scheduler` (`Probe`, which
schedules sessions onto desktops), `server` (`ProbeServer`) and `client` (`ProbeClient`).
"""

from producers.verigen.probe.api import ProbeAPI, ProbeError, SessionInfo, probe_session
from producers.verigen.probe.client import ProbeClient
from producers.verigen.probe.scheduler import Probe
from producers.verigen.probe.server import ProbeServer

__all__ = [
    "Probe",
    "ProbeAPI",
    "ProbeClient",
    "ProbeError",
    "ProbeServer",
    "SessionInfo",
    "probe_session",
]
