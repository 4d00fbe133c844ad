"""How the suite's files are dealt to the xdist workers: longest first, and files that share an
expensive session fixture on one worker.

xdist's `loadfile` deals files in order of their test count, so a one-test file of minutes
(the compose loop, which on a fresh machine also builds the images) could start last and
leave the other worker idle for its whole length. Dealing the longest files first (from the
per-file times of a full run in tests/durations.json) ends both workers close together.
Files that start the same heavy session fixture (the vLLM server, ~40 s a start) form one
unit, so one worker starts it once. A file missing from the table counts as short: it is dealt
last, which only costs balance, never correctness.

Refresh the table after a full run with `--junitxml`:
    .venv/bin/python -m pytest --junitxml=/tmp/run.xml && .venv/bin/python -m tests.scheduling /tmp/run.xml
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import pytest
from xdist.scheduler import LoadFileScheduling

DURATIONS = Path(__file__).with_name("durations.json")
# Files that use one session fixture too heavy to start on both workers: dealt as one unit.
SHARED = {
    "tests/runtime/engines/test_vllm_integration.py": "vllm-server",
    "tests/producers/verigen/test_real_model.py": "vllm-server",
}


def file_seconds() -> dict[str, float]:
    """The per-file seconds of the last recorded full run (empty when there is none)."""
    try:
        return json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        return {}


def unit_of(nodeid: str) -> str:
    """The unit a test is dealt in: its file, or the SHARED group its file belongs to."""
    path = nodeid.split("::", 1)[0]
    return SHARED.get(path, path)


def longest_first(items: list[pytest.Item]) -> None:
    """Order the collected tests by their unit's recorded seconds, longest first (in place)."""
    units: Counter[str] = Counter()
    for path, seconds in file_seconds().items():
        units[unit_of(path)] += seconds
    # Stable: a file's tests keep their order, and units of equal seconds their file order.
    items.sort(key=lambda item: -units[unit_of(item.nodeid)])


class LongestFirst(LoadFileScheduling):
    """`loadfile` scheduling in the collection's order (longest_first), SHARED files as one unit."""

    def __init__(self, config: pytest.Config, log=None) -> None:  # noqa: ANN001 - xdist's Producer
        super().__init__(config, log)
        # xdist would deal by test count; the workers' collection is already in the order wanted.
        config.option.loadscopereorder = False

    def _split_scope(self, nodeid: str) -> str:
        return unit_of(nodeid)


def _seconds_of(junit_xml: Path, root: Path) -> dict[str, float]:
    """Seconds per test file (setup, call and teardown of its tests) from a JUnit XML report."""
    seconds: Counter[str] = Counter()
    for case in ET.parse(junit_xml).iter("testcase"):
        parts = (case.get("classname") or "").split(".")
        # The class name is the module's dotted path, plus a test class's name when there is one.
        for end in range(len(parts), 0, -1):
            path = "/".join(parts[:end]) + ".py"
            if (root / path).is_file():
                seconds[path] += float(case.get("time") or 0.0)
                break
    return {path: round(s, 1) for path, s in sorted(seconds.items())}


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m tests.scheduling JUNIT_XML  (writes tests/durations.json)")
    table = _seconds_of(Path(sys.argv[1]), DURATIONS.parents[1])
    if not table:
        sys.exit(f"{sys.argv[1]}: no test case of this repository's files")
    DURATIONS.write_text(json.dumps(table, indent=0, sort_keys=True) + "\n")
    print(f"{DURATIONS}: {len(table)} files, {sum(table.values()):.0f} s in all")
