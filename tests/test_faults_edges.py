"""Faults at the edges of a run: an object store that accepts connections and never answers, a
report written to a local path from an s3:// data directory, a full disk, and outputs that cannot
be written. Each fails with a named error, no traceback, and the data stays as it was.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import s3fs
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.errors import StoreError
from pipeline.store import Store

pytestmark = pytest.mark.faults

runner = CliRunner()
DIFFICULTY = str(Path(sys.executable).parent / "difficulty")
PROFILE = ["profile", "--backend", "simulate", "--no-prefect", "--grade-workers", "1"]


def _cli(
    args: list[str], env: dict[str, str], cwd: Path, timeout: float = 300
) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    out = subprocess.run([DIFFICULTY, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    return out, time.monotonic() - start


# --- an object store that accepts connections and never answers ---------------------------------


@pytest.fixture
def silent_endpoint(tmp_path, s3_tools, monkeypatch):
    """A loopback TCP server that accepts every connection and never sends a byte, as the AWS
    endpoint, with a 2 s bound on each request; yields (endpoint, accepted connections)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    accepted: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:  # the server socket was closed: the test is over
                return
            accepted.append(conn)

    threading.Thread(target=accept, daemon=True).start()
    endpoint = f"http://127.0.0.1:{server.getsockname()[1]}"
    for name, value in {**s3_tools.aws_env(endpoint, tmp_path), "DIFFICULTY_S3_TIMEOUT": "2"}.items():
        monkeypatch.setenv(name, value)
    yield endpoint, accepted
    server.close()
    for conn in accepted:
        conn.close()


@pytest.mark.parametrize("operation", ["write", "read", "list"])
def test_silent_endpoint_fails_within_the_bound_naming_it(silent_endpoint, operation):
    """A write waited for "100 Continue" forever and a read retried 20 times its read timeout;
    each now ends with a StoreError naming the endpoint and the request within the bound."""
    endpoint, accepted = silent_endpoint
    store = Store("s3://difficulty-silent/data")
    start = time.monotonic()
    with pytest.raises(StoreError) as caught:
        if operation == "write":
            store.write_bytes(store.location("reports", "x.html"), b"<html>")
        elif operation == "read":
            store.read_bytes(store.location("runs", "x.json"))
        else:
            store.list_runs()
    elapsed = time.monotonic() - start
    text = str(caught.value)
    assert f"object store at {endpoint} endpoint did not answer" in text, text
    assert "DIFFICULTY_S3_TIMEOUT" in text
    assert "difficulty-silent" in text and "did not answer" in text
    if operation == "write":
        assert "did not answer put_object difficulty-silent/data/reports/x.html within 2 s" in text
    assert accepted, "the request never reached the endpoint"
    # The bound plus building the client (a second or two on a loaded machine); before, minutes.
    assert elapsed < 2 + 8, f"took {elapsed:.1f} s"


def test_profile_on_a_silent_endpoint_fails_fast_without_traceback(silent_endpoint, tmp_path):
    endpoint, _ = silent_endpoint
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect")}
    out, elapsed = _cli([*PROFILE, "--limit", "4", "--data-dir", "s3://difficulty-silent/data"], env, tmp_path, 120)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "Traceback" not in out.stderr, out.stderr[-2000:]
    assert f"the object store at {endpoint} endpoint did not answer put_object" in out.stderr
    assert elapsed < 30, f"took {elapsed:.1f} s to fail"


def test_s3_timeout_setting_is_checked(monkeypatch, s3_env):
    monkeypatch.setenv("DIFFICULTY_S3_TIMEOUT", "soon")
    out = runner.invoke(app, ["runs", "--data-dir", "s3://difficulty-any/data"])
    assert out.exit_code == 1
    assert "DIFFICULTY_S3_TIMEOUT='soon' must be a number of seconds > 0" in out.output


# --- report --output from an s3:// data directory -----------------------------------------------


@pytest.fixture
def s3_run(s3_data, tmp_path) -> tuple[str, str]:
    """One small simulated run in the loopback bucket; (data directory URL, run id)."""
    out = runner.invoke(app, [*PROFILE, "--limit", "8", "--n", "4", "--no-report"])
    assert out.exit_code == 0, out.output
    [run_id] = Store(s3_data).list_runs().column("run_id").to_pylist()
    return s3_data, run_id


def _keys(url: str) -> list[str]:
    bucket = url.split("://", 1)[1].split("/", 1)[0]
    return sorted(s3fs.S3FileSystem(skip_instance_cache=True, use_listings_cache=False).find(bucket))


def test_report_to_a_local_path_from_an_s3_data_dir(s3_run, tmp_path, monkeypatch):
    url, run_id = s3_run
    before = _keys(url)
    target = tmp_path / "out" / "report.html"
    out = runner.invoke(app, ["report", "--run", run_id, "--output", str(target)])
    assert out.exit_code == 0, out.output
    assert target.is_file() and b"Difficulty report" in target.read_bytes()
    assert f"report of {run_id}: {target}" in out.output
    assert _keys(url) == before, "the report went into the bucket"

    monkeypatch.chdir(tmp_path)  # a relative path is local too, printed absolute
    out = runner.invoke(app, ["report", "--run", run_id, "--output", "rel", "--plotly-js", "shared"])
    assert out.exit_code == 0, out.output
    assert (tmp_path / "rel" / f"{run_id}.html").is_file() and (tmp_path / "rel" / "plotly.min.js").is_file()
    assert str(tmp_path / "rel" / f"{run_id}.html") in out.output
    assert _keys(url) == before


def test_report_to_an_s3_url(s3_run, tmp_path):
    """A full s3:// URL is written there, from a remote or a local data directory."""
    url, run_id = s3_run
    bucket = url.split("://", 1)[1].split("/", 1)[0]
    target = f"s3://{bucket}/elsewhere/r.html"
    out = runner.invoke(app, ["report", "--run", run_id, "--output", target])
    assert out.exit_code == 0, out.output
    assert f"report of {run_id}: {target}" in out.output
    assert f"{bucket}/elsewhere/r.html" in _keys(url)

    local = tmp_path / "local"
    done = runner.invoke(app, [*PROFILE, "--limit", "4", "--n", "2", "--no-report", "--data-dir", str(local)])
    assert done.exit_code == 0, done.output
    [local_run] = Store(local).list_runs().column("run_id").to_pylist()
    target = f"s3://{bucket}/from-local/"
    out = runner.invoke(app, ["report", "--run", local_run, "--output", target, "--data-dir", str(local)])
    assert out.exit_code == 0, out.output
    assert f"{bucket}/from-local/{local_run}.html" in _keys(url)
    assert not list(local.rglob("*.html")) and not (tmp_path / "s3:").exists()
