"""Getters of ScienceBoard's checks: a LaTeX project compiled in the desktop (`tex_check`,
its /tex/check) and how the agent ended the episode (`agent_stop`: DONE, FAIL, ANS with its
arguments, or TIMEOUT when it never said)."""

from __future__ import annotations

from typing import Any

from runtime.envs.tasks.getters.context import EvalContext, Getter

__all__ = ["GETTERS", "get_agent_stop", "get_tex_check", "stop_of"]

_STOPS = {"done": "DONE", "fail": "FAIL", "answer": "ANS"}


async def get_tex_check(ctx: EvalContext, config: dict[str, Any]) -> dict[str, Any]:
    """Whether the project compiles: {"pass": bool} (with the failing pass's log)."""
    return await ctx.controller.tex_check(
        str(config["path"]), str(config.get("file", "main")), bool(config.get("bibtex"))
    )


async def get_agent_stop(ctx: EvalContext, config: dict[str, Any]) -> dict[str, Any]:
    """How the episode ended, as ScienceBoard's stop: {"value": "ANS", "args": [...]}."""
    return stop_of(ctx.actions)


def stop_of(actions: list[dict[str, Any]]) -> dict[str, Any]:
    """The stop of an episode's actions: its first done/fail/answer, else TIMEOUT.

    ScienceBoard's ANS arguments are the answer split at single blanks (`ANS Vigili del
    Fuoco` is three), compared as a list."""
    for action in actions:
        value = _STOPS.get(str(action.get("action")))
        if value == "ANS":
            return {"value": value, "args": str(action.get("text") or "").strip().split(" ")}
        if value:
            return {"value": value, "args": []}
    return {"value": "TIMEOUT", "args": []}


GETTERS: dict[str, Getter] = {"tex_check": get_tex_check, "agent_stop": get_agent_stop}
