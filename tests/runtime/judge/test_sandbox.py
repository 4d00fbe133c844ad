"""The judge sandbox contains hostile judges within its limits and scores honest ones."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runtime.judge import FileArtifact, JudgeLimits, arun_judge, run_judge
from runtime.judge.sandbox import SANDBOX_UIDS

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root (namespaces)")

LIMITS = JudgeLimits(wall_seconds=4, cpu_seconds=3)

HOSTILE = """
import os

def infinite_loop(artifacts):
    while True:
        pass

def allocate_50_gb(artifacts):
    hoard = bytearray(50 * 2**30)
    return 1.0

def fork_bomb(artifacts):
    while True:
        try:
            os.fork()
        except OSError:
            pass

def open_sockets(artifacts):
    import socket
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(1)
    s.connect(("127.0.0.1", 22))
    return 1.0

def write_outside(artifacts):
    with open(artifacts["escape_to"], "w") as f:
        f.write("escaped")
    return 1.0
"""

HONEST = """
import json
import openpyxl

def judge(artifacts):
    wb = openpyxl.load_workbook(artifacts["sheet"])
    total = sum(c.value for c in wb.active["A"])
    with open("scratch.json", "w") as f:  # its own directory is writable
        json.dump({"total": total}, f)
    return 1.0 if total == artifacts["expected_total"] else 0.25

def says_yes(artifacts):
    return True

def returns_text(artifacts):
    return "1.0"

def out_of_range(artifacts):
    return 3

def raises(artifacts):
    raise ValueError("judge bug")
"""


def _no_runner_left(uids: set[int]) -> bool:
    """No process runs as a uid this test's judges leased (other tests' judges may run)."""
    assert uids and uids <= set(SANDBOX_UIDS)
    ps = subprocess.run(["ps", "-eo", "uid=,cmd="], capture_output=True, text=True)
    return not any(int(line.split()[0]) in uids for line in ps.stdout.splitlines() if line.strip())


@pytest.fixture
def leased_uids(monkeypatch: pytest.MonkeyPatch) -> set[int]:
    """The uids the sandbox leases during the test (tests on other workers lease others)."""
    import runtime.judge.sandbox as sandbox

    uids: set[int] = set()
    real = sandbox.lease_ids

    def recording(*args, **kwargs):  # noqa: ANN202 - the same signature as lease_ids
        lease = real(*args, **kwargs)
        uids.update(range(lease.first, lease.first + lease.count))
        return lease

    monkeypatch.setattr(sandbox, "lease_ids", recording)
    return uids


@pytest.fixture
def escape_path(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("escape")
    folder.chmod(0o777)  # even a world-writable host folder must stay untouched
    return folder / "escaped.txt"


@pytest.mark.parametrize("guard", [True, False], ids=["guarded", "kernel-only"])
@pytest.mark.parametrize(
    ("function", "statuses"),
    [
        ("infinite_loop", {"timeout"}),
        ("allocate_50_gb", {"memory"}),
        ("fork_bomb", {"forbidden", "timeout"}),
        ("open_sockets", {"forbidden"}),
        ("write_outside", {"forbidden"}),
    ],
)
def test_hostile_judges_are_contained(function, statuses, guard, escape_path, leased_uids):
    started = time.monotonic()
    result = run_judge(HOSTILE, function, {"escape_to": str(escape_path)}, LIMITS, guard=guard)
    elapsed = time.monotonic() - started
    if function == "write_outside" and not guard:
        statuses = statuses | {"crash"}  # the host folder is not in its root: ENOENT
    assert result.status in statuses, result
    assert result.score is None
    assert elapsed < LIMITS.wall_seconds + 2.0
    assert not escape_path.exists()
    assert _no_runner_left(leased_uids)


def test_guarded_fork_bomb_and_write_name_the_violation(escape_path):
    bomb = run_judge(HOSTILE, "fork_bomb", {}, LIMITS)
    assert (bomb.status, bomb.detail) == ("forbidden", "forked")
    write = run_judge(HOSTILE, "write_outside", {"escape_to": str(escape_path)}, LIMITS)
    assert write.status == "forbidden" and "outside" in write.detail


def test_honest_judge_reads_artifacts_and_scores(tmp_path):
    import openpyxl

    wb = openpyxl.Workbook()
    for v in (1, 2, 3):
        wb.active.append([v])
    wb.save(tmp_path / "s.xlsx")
    artifacts = {"sheet": FileArtifact(path=tmp_path / "s.xlsx"), "expected_total": 6}
    assert run_judge(HONEST, "judge", artifacts, LIMITS).score == 1.0
    artifacts["expected_total"] = 7
    assert run_judge(HONEST, "judge", artifacts, LIMITS).score == 0.25


@pytest.mark.parametrize(
    ("function", "status", "score"),
    [
        ("says_yes", "ok", 1.0),
        ("returns_text", "bad_return", None),
        ("out_of_range", "bad_return", None),
        ("raises", "crash", None),
        ("missing", "bad_source", None),
    ],
)
def test_return_values_are_checked(function, status, score):
    result = run_judge(HONEST, function, {}, LIMITS)
    assert (result.status, result.score) == (status, score), result


def test_source_that_does_not_compile():
    assert run_judge("def judge(:\n", "judge", {}, LIMITS).status == "bad_source"


async def test_caller_goes_on_while_hostile_judges_run():
    import asyncio

    results = await asyncio.gather(
        arun_judge(HOSTILE, "infinite_loop", {}, LIMITS),
        arun_judge(HONEST, "says_yes", {}, LIMITS),
    )
    assert [r.status for r in results] == ["timeout", "ok"]


FORKING = """
import os
import time

def forks_twenty(artifacts):
    children = []
    for _ in range(20):
        pid = os.fork()
        if pid == 0:
            time.sleep(1.0)
            os._exit(0)
        children.append(pid)
    return float(all(os.waitpid(pid, 0)[1] == 0 for pid in children))
"""


async def test_process_limits_are_per_judge_not_shared():
    import asyncio

    # Three judges with 21 processes each exceed one 32-process budget together, not alone.
    results = await asyncio.gather(
        *(
            asyncio.to_thread(run_judge, FORKING, "forks_twenty", {}, LIMITS, False)
            for _ in range(3)
        )
    )
    assert [(r.status, r.score) for r in results] == [("ok", 1.0)] * 3, results


def test_importing_uncached_modules_is_not_a_forbidden_write():
    import shutil
    import tempfile

    # Under the interpreter's prefix: one of the few host folders the judge's root holds.
    folder = Path(tempfile.mkdtemp(prefix=".judge-lib-", dir=sys.prefix))
    try:
        folder.chmod(0o755)
        (folder / "fresh_helper.py").write_text("def answer():\n    return 1.0\n")
        (folder / "fresh_helper.py").chmod(0o644)
        source = (
            "import sys\n"
            f"sys.path.insert(0, {str(folder)!r})\n"
            "def judge(artifacts):\n"
            "    import fresh_helper\n"
            "    return fresh_helper.answer()\n"
        )
        result = run_judge(source, "judge", {}, LIMITS)
        assert (result.status, result.score) == ("ok", 1.0), result
        assert not (folder / "__pycache__").exists()
    finally:
        shutil.rmtree(folder)


def test_endless_printing_is_capped_on_disk_not_in_memory():
    source = "def judge(artifacts):\n    while True:\n        print('x' * 4096)\n"
    limits = JudgeLimits(wall_seconds=4, cpu_seconds=3, file_bytes=1 << 20, output_bytes=1000)
    result = run_judge(source, "judge", {}, limits)
    assert result.status in ("crash", "timeout"), result  # killed by SIGXFSZ at 1 MiB
    assert 0 < len(result.stderr) <= 1000


def test_judge_cannot_read_root_only_files():
    source = "def judge(artifacts):\n    return float(len(open('/etc/shadow').read()) > 0)\n"
    result = run_judge(source, "judge", {}, LIMITS)
    assert result.status == "forbidden" and "Permission denied" in result.detail, result
