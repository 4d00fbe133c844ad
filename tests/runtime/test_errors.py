"""One error tree: every exception class the project defines descends from ScaleCUAError."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

from runtime.errors import OutcomeError, ScaleCUAError

PACKAGES = ("topics", "runtime", "consumers", "producers", "cli")
# Modules that need what only a desktop's system has (pyatspi comes with the distribution).
SYSTEM_ONLY = {"runtime.envs.desktop.a11y_dump"}


def _modules() -> list[str]:
    names = []
    for package in PACKAGES:
        path = importlib.import_module(package).__path__
        for info in pkgutil.walk_packages(path, f"{package}."):
            if info.name.rsplit(".", 1)[-1] != "__main__" and info.name not in SYSTEM_ONLY:
                names.append(info.name)
    return names


def _exception_classes() -> list[type[BaseException]]:
    found = []
    for name in _modules():
        module = importlib.import_module(name)
        found += [
            value
            for value in vars(module).values()
            if inspect.isclass(value)
            and issubclass(value, BaseException)
            and value.__module__ == module.__name__
        ]
    return found


def test_every_exception_class_of_the_project_is_a_scalecua_error() -> None:
    classes = _exception_classes()
    assert len(classes) > 20  # the walk found the project's modules
    outside = [
        f"{c.__module__}.{c.__qualname__}" for c in classes if not issubclass(c, ScaleCUAError)
    ]
    assert outside == []


@pytest.mark.parametrize(
    ("module", "name", "builtin"),
    [
        ("runtime.envs.desktop.actions", "ActionError", ValueError),
        ("runtime.envs.tasks.metrics.sheet_formula", "FormulaError", ValueError),
        ("producers.verigen.agents", "ParseError", ValueError),
        ("producers.verigen.compose", "CompositionError", ValueError),
    ],
)
def test_an_error_callers_catch_by_its_builtin_base_keeps_it(
    module: str, name: str, builtin: type[Exception]
) -> None:
    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, ScaleCUAError) and issubclass(cls, builtin)


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("runtime.envs.desktop.cdp", "ChromeError"),
        ("runtime.envs.tasks.metrics.judge", "JudgeFailed"),
        ("runtime.envs.tasks.metrics.sheet_formula", "FormulaError"),
    ],
)
def test_what_a_getter_or_metric_raises_on_the_agents_doing_scores_zero(
    module: str, name: str
) -> None:
    from runtime.envs.tasks.evaluate import breaks_evaluation

    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, OutcomeError) and not breaks_evaluation(cls("x"))
