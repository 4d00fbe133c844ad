"""The file cache and the host's fetcher, against a real HTTP server on loopback (and a real S3
server for a cluster's cache): redirects, retries, the size limit, sha256, refused hosts,
offline misses, and the `scalecua tasks files` commands."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.envs.tasks.files import FetchLimits, FileCache, fetch_url, url_bytes
from runtime.envs.tasks.files.fetch import _check_hop, drive_confirm_url
from runtime.errors import FetchError, FileNotCached
from tests.runtime.envs.tasks.loopback_http import Route, loopback_server

SCALECUA = [sys.executable, "-m", "cli"]
FAST = FetchLimits(retries=3, backoff_s=0.01, timeout_s=10)
DRIVE = "https://drive.usercontent.google.com/download?id=TEST-{}&export=download"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def cache(tmp_path: Path) -> FileCache:
    return FileCache(str(tmp_path / "files"))


async def test_redirects_are_followed_and_the_sha256_recorded(cache: FileCache) -> None:
    body = os.urandom(5000)
    routes = {"/a": Route(redirect="/b"), "/b": Route(redirect="/file"), "/file": Route(body)}
    with loopback_server(routes) as server:
        data = await url_bytes(f"{server.url}/a", cache, mode="loopback", limits=FAST)
        again = await url_bytes(f"{server.url}/a", cache, mode="off")  # served from the cache
    assert data == again == body
    entry = cache.entry(f"{server.url}/a")
    assert (entry.sha256, entry.size, entry.how) == (_sha(body), 5000, "fetched")
    assert entry.final_url == f"{server.url}/file"
    assert server.hits["/file"] == 1


async def test_transient_failures_are_retried_with_backoff(cache: FileCache) -> None:
    routes = {"/flaky": Route(b"at last", fail_first=2), "/down": Route(b"x", fail_first=99)}
    with loopback_server(routes) as server:
        fetched = await fetch_url(f"{server.url}/flaky", FAST, mode="loopback")
        assert fetched.data == b"at last" and server.hits["/flaky"] == 3
        with pytest.raises(FetchError, match=r"HTTP 503 \(gave up after 2 attempts\)"):
            await fetch_url(f"{server.url}/down", FetchLimits(retries=1, backoff_s=0.01),
                            mode="loopback")  # fmt: skip
        assert server.hits["/down"] == 2
        with pytest.raises(FetchError, match="HTTP 404"):  # not transient: asked once
            await fetch_url(f"{server.url}/absent", FAST, mode="loopback")
        assert server.hits["/absent"] == 1
    closed = server.url  # the server is gone: connection refused, retried, then an error
    with pytest.raises(FetchError, match="ConnectError.*gave up after 4 attempts"):
        await fetch_url(f"{closed}/flaky", FAST, mode="loopback")


async def test_bodies_over_the_size_limit_are_refused(cache: FileCache) -> None:
    body = os.urandom(10_000)
    routes = {"/declared": Route(body), "/streamed": Route(body, chunked=True),
              "/fits": Route(body, chunked=True)}  # fmt: skip
    small = FetchLimits(max_bytes=4096, backoff_s=0.01)
    with loopback_server(routes) as server:
        with pytest.raises(FetchError, match="10000 bytes, over the limit of 4096"):
            await fetch_url(f"{server.url}/declared", small, mode="loopback")
        with pytest.raises(FetchError, match=r"over the limit of 4096 bytes \(stopped after"):
            await url_bytes(f"{server.url}/streamed", cache, mode="loopback", limits=small)
        assert not cache.has(f"{server.url}/streamed")  # nothing half-stored
        assert (await fetch_url(f"{server.url}/fits", FAST, mode="loopback")).data == body


async def test_every_hop_is_checked_and_nothing_leaves_loopback() -> None:
    routes = {"/ftp": Route(redirect="ftp://127.0.0.1/x"), "/loop": Route(redirect="/loop")}
    with loopback_server(routes) as server:
        with pytest.raises(FetchError, match="only http"):  # a redirect hop, checked
            await fetch_url(f"{server.url}/ftp", FAST, mode="loopback")
        with pytest.raises(FetchError, match="more than 3 redirects"):
            await fetch_url(f"{server.url}/loop", FetchLimits(max_redirects=3), mode="loopback")
    # Checked before any connection is made, so these send nothing.
    for url in (
        "http://169.254.169.254/latest/meta-data/",
        "http://127.0.0.1:9092/",  # a task's URL must not read the host's services
        "http://localhost:8080/",
        "http://[::ffff:127.0.0.1]/",
        "http://10.1.2.3/x",
    ):
        with pytest.raises(FetchError, match="not a public host"):
            await _check_hop(url, "on")
    with pytest.raises(FetchError, match="only loopback URLs"):
        await _check_hop("https://example.com/file", "loopback")
    with pytest.raises(FetchError, match="fetching is off"):
        await fetch_url("http://127.0.0.1:9/x", mode="off")


async def test_a_miss_that_may_not_be_fetched_names_the_url(cache: FileCache) -> None:
    url = DRIVE.format("missing")
    with pytest.raises(FileNotCached) as caught:
        await url_bytes(url, cache, mode="loopback")
    assert url in str(caught.value) and "scalecua tasks files add URL FILE" in str(caught.value)
    with pytest.raises(FileNotCached, match="fetching is off"):
        await url_bytes(url, cache, mode="off")
    cache.put(url, b"seeded by hand")  # what `scalecua tasks files add` does
    assert await url_bytes(url, cache, mode="off") == b"seeded by hand"
    assert cache.entry(url).how == "added"


async def test_setups_starting_together_fetch_a_url_once(cache: FileCache) -> None:
    with loopback_server({"/f": Route(b"shared" * 1000)}) as server:
        got = await asyncio.gather(
            *(url_bytes(f"{server.url}/f", cache, mode="loopback") for _ in range(8))
        )
    assert all(g == b"shared" * 1000 for g in got) and server.hits["/f"] == 1


def test_a_damaged_file_in_the_cache_counts_as_missing(cache: FileCache) -> None:
    entry = cache.put("http://127.0.0.1:1/f", b"good bytes")
    blob = Path(cache.objects.url_for(entry.ref).removeprefix("file://"))
    blob.write_bytes(b"evil bytes")
    assert cache.get("http://127.0.0.1:1/f") is None
    cache.put("http://127.0.0.1:1/f", b"good bytes")  # seeding again repairs it
    assert cache.get("http://127.0.0.1:1/f") == b"good bytes"


def test_the_cache_on_s3_is_shared_like_the_blob_store(s3_endpoint: str) -> None:
    import boto3

    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket="files")
    writer = FileCache("s3://files/osworld", endpoint_url=s3_endpoint)
    reader = FileCache("s3://files/osworld", endpoint_url=s3_endpoint)  # another machine
    writer.put(DRIVE.format("s3"), b"on a bucket")
    assert reader.has(DRIVE.format("s3")) and reader.get(DRIVE.format("s3")) == b"on a bucket"
    assert reader.entry(DRIVE.format("s3")).sha256 == _sha(b"on a bucket")
    assert reader.get(DRIVE.format("other")) is None


def test_google_drives_download_confirmation_form_is_read() -> None:
    page = """<html><body><form id="download-form"
      action="https://drive.usercontent.google.com/download" method="get">
      <input type="submit" value="Download anyway"/>
      <input type="hidden" name="id" value="1AbC"><input type="hidden" name="export"
      value="download"><input type="hidden" name="confirm" value="t">
      <input type="hidden" name="uuid" value="u-1"></form></body></html>"""
    assert drive_confirm_url(page, "https://drive.google.com/uc?id=1AbC") == (
        "https://drive.usercontent.google.com/download?id=1AbC&export=download&confirm=t&uuid=u-1"
    )
    assert drive_confirm_url("<html>quota exceeded</html>", "https://drive.google.com/") is None


# -- `scalecua tasks files fetch | add | missing` ---------------------------------------------


def _task(task_id: str, urls: list[str], expected: str | None = None) -> dict:
    files = [{"url": u, "path": f"/home/user/{i}.bin"} for i, u in enumerate(urls)]
    evaluator: dict = {"func": "infeasible"}
    if expected:
        evaluator = {"func": "compare_text_file",
                     "result": {"type": "vm_file", "path": "/home/user/0.bin", "dest": "r"},
                     "expected": {"type": "cloud_file", "path": expected, "dest": "e"}}  # fmt: skip
    return {"id": task_id, "instruction": "x", "config": [
        {"type": "download", "parameters": {"files": files}}], "evaluator": evaluator}  # fmt: skip


def _files(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([*SCALECUA, "tasks", "files", *argv], env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip


def test_files_commands_fill_resume_and_seed(tmp_path: Path) -> None:
    routes = {f"/f{i}": Route(f"file {i}\n".encode()) for i in range(4)}
    routes["/f3"] = Route(b"", status=404)  # fails until the test fixes it
    with loopback_server(routes) as server:
        u = [f"{server.url}/f{i}" for i in range(4)]
        for domain, task_id, task in (
            ("os", "t1", _task("t1", [u[0], u[1]])),
            ("os", "t2", _task("t2", [u[1], u[2]], expected=u[3])),
        ):
            (tmp_path / "examples" / domain).mkdir(parents=True, exist_ok=True)
            (tmp_path / "examples" / domain / f"{task_id}.json").write_text(json.dumps(task))
        (tmp_path / "examples" / "test_all.json").write_text('{"os": ["t1", "t2"]}')  # skipped
        env = {**os.environ, "SCALECUA_FILES": str(tmp_path / "cache")}
        examples = str(tmp_path / "examples")

        missing = _files("missing", examples, env=env)
        assert missing.returncode == 1, missing.stderr
        lines = missing.stdout.strip().splitlines()
        assert [line.split("\t")[0] for line in lines] == u
        assert lines[1].split("\t")[1] == "os/t1 os/t2"  # the keys of the tasks naming it
        assert "4 of 4 URLs not in" in missing.stderr

        first = _files("fetch", examples, "--retries", "0", env=env)
        assert first.returncode == 1, first.stderr  # /f3 failed
        report = json.loads(first.stdout)
        assert (report["urls"], report["fetched"], report["failed"]) == (4, 3, 1)
        assert "HTTP 404" in report["errors"][u[3]] and "tasks files fetch" in first.stderr

        routes["/f3"] = Route(b"file 3\n")
        second = _files("fetch", examples, env=env)  # resumes: only what is missing
        assert second.returncode == 0, second.stderr
        report = json.loads(second.stdout)
        assert (report["fetched"], report["already_cached"], report["failed"]) == (1, 3, 0)
        assert all(server.hits[f"/f{i}"] == 1 for i in range(3))

        done = _files("missing", examples, "--json", env=env)
        assert done.returncode == 0 and json.loads(done.stdout)["missing"] == 0

    seed = tmp_path / "poster.webp"
    seed.write_bytes(b"RIFF....WEBP")
    added = _files("add", DRIVE.format("poster"), str(seed), env=env)
    assert added.returncode == 0, added.stderr
    entry = json.loads(added.stdout)
    assert (entry["sha256"], entry["size"], entry["how"]) == (_sha(b"RIFF....WEBP"), 12, "added")
    assert FileCache(env["SCALECUA_FILES"]).get(DRIVE.format("poster")) == b"RIFF....WEBP"
    refused = _files("add", "ftp://example.com/x", str(seed), env=env)
    assert refused.returncode == 2 and "expected an http(s) URL" in refused.stderr


def test_a_fetch_mode_the_setting_does_not_take_is_refused(tmp_path: Path) -> None:
    (tmp_path / "t.json").write_text(json.dumps(_task("t", [DRIVE.format("x")])))
    env = {
        **os.environ,
        "SCALECUA_FILES": str(tmp_path / "cache"),
        "SCALECUA_FILES_FETCH": "always",
    }
    run = _files("fetch", str(tmp_path), env=env)
    assert run.returncode == 2 and run.stdout == "", run.stderr
    assert "$SCALECUA_FILES_FETCH = always: choose one of on, loopback, off" in run.stderr
