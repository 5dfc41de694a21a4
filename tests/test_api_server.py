"""Prefect's API server for one-off runs (``pipeline.flows.api_server``): started before Prefect is
imported, reused by a second flow of the same process, stopped at exit or by the watchdog after a
kill -9, and a server that does not start is named with its reason."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pipeline.flows import api_server

from pipeline.errors import ConfigError, OrchestrationError

ROOT = Path(__file__).resolve().parents[1]

# Two profiles through the flow in one process, as the command line starts them (server first).
TWO_RUNS = """
import json, os, sys
from pipeline.flows import api_server
api_server.start()
started = api_server.running().process.pid
from pipeline import run
from pipeline.flows import prefect_flows
from pipeline.store import Store

cfg = run.ProfileConfig.build(backend="simulate", limit=4, n=2, shard_size=2, grade_workers=1, report=False)
first = prefect_flows.profile_flow(cfg, Store(sys.argv[1])).run_id
second = prefect_flows.profile_flow(cfg.with_settings(n=3), Store(sys.argv[1])).run_id
server = api_server.running()

from prefect import get_client
with prefect_flows.prefect_settings(), get_client(sync_client=True) as client:
    names = sorted(fr.name for fr in client.read_flow_runs())
    url = client.api_url

servers = []
for entry in os.listdir("/proc"):
    try:
        stat = open(f"/proc/{entry}/stat").read()
        cmdline = open(f"/proc/{entry}/cmdline", "rb").read()
    except OSError:
        continue
    is_server = b"uvicorn" in cmdline or b"pipeline.flows.api_server" in cmdline  # Prefect's own, or ours
    if int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid() and is_server:
        servers.append(int(entry))

print(json.dumps({
    "started": started, "server": server.process.pid, "url": server.url, "client_url": str(url),
    "runs": [first, second], "flow_runs": names, "servers": servers,
    "server_module_imported": "prefect.server.api.server" in sys.modules,
}))
"""

WAIT_FOREVER = """
import sys, time
from pipeline.flows import api_server
api_server.start()
api_server.ensure()
print(api_server.running().process.pid, flush=True)
time.sleep(600)
"""


@pytest.fixture
def env(tmp_path, monkeypatch):
    """A Prefect home of the test's own, and no server of the user's."""
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    # Earlier tests of the session import Prefect and may leave its settings pointing at their own
    # harness's server, which `user_url` would take for the user's: only the environment counts here.
    monkeypatch.setattr(api_server, "user_url", lambda: os.environ.get("PREFECT_API_URL") or None)
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "prefect"))
    monkeypatch.setenv("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    yield {**os.environ, "PYTHONPATH": str(ROOT)}
    api_server.stop()


def gone(pid: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        # a zombie of an ended child of this process also counts as gone
        stat = Path(f"/proc/{pid}/stat")
        if stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return True
        time.sleep(0.1)
    return False


@pytest.mark.slow
def test_two_flows_share_one_server_and_it_ends_with_the_process(env, tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", TWO_RUNS, str(tmp_path / "data")], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    # One server: the one started before Prefect was imported, used by both flows (Prefect started
    # none of its own), and Prefect's server module never imported in the command's process.
    assert got["server"] == got["started"]
    assert got["servers"] == [got["server"]]
    assert got["client_url"].rstrip("/") == got["url"]
    assert not got["server_module_imported"]
    assert len(set(got["runs"])) == 2
    assert len(got["flow_runs"]) == 2 and all(any(r in name for name in got["flow_runs"]) for r in got["runs"])
    # Stopped at exit: nothing left running.
    assert gone(got["server"], within_s=api_server.STOP_GRACE_S + 5)


@pytest.mark.slow
def test_a_killed_command_leaves_no_server(env):
    proc = subprocess.Popen(
        [sys.executable, "-c", WAIT_FOREVER], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        line = proc.stdout.readline()
        assert line.strip().isdigit(), proc.stderr.read()[-3000:] if proc.poll() is not None else line
        server = int(line)
        os.kill(server, 0)  # it runs
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        assert gone(server, within_s=5 + 10)  # the watchdog's SIGTERM, SIGKILL after its grace
    finally:
        proc.kill()
        proc.wait()


def test_a_server_that_does_not_answer_in_time_is_named_and_stopped(env):
    api_server.start()
    process = api_server.running().process
    with pytest.raises(OrchestrationError, match=r"did not answer within 0.01 s.*--no-prefect"):
        api_server.ensure(timeout_s=0.01)
    assert process.poll() is not None  # stopped, not left behind
    assert api_server.running() is None


@pytest.mark.slow
def test_a_server_that_exits_is_named_with_its_reason(env, monkeypatch, tmp_path):
    monkeypatch.setenv("PREFECT_API_DATABASE_CONNECTION_URL", f"sqlite+aiosqlite:///{tmp_path}/no/such/dir/prefect.db")
    api_server.start()
    process = api_server.running().process
    with pytest.raises(OrchestrationError) as caught:
        api_server.ensure()
    message = str(caught.value)
    assert "exited with status 3" in message
    assert "unable to open database file" in message  # the reason, in one line, not the traceback
    assert "Traceback" not in message and "\n" not in message
    assert "--no-prefect" in message and "PREFECT_API_URL" in message
    assert process.poll() == 3 and api_server.running() is None


def test_a_server_of_the_users_is_used_and_none_started(env, monkeypatch):
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")
    api_server.start()
    assert api_server.running() is None
    assert api_server.ensure() is None  # the flow then uses the user's URL as it is
    assert api_server.running() is None


def test_prefects_startup_timeout_is_honoured_when_longer_and_checked(env, monkeypatch):
    assert api_server.startup_timeout_s() == api_server.STARTUP_TIMEOUT_S
    monkeypatch.setenv(api_server.TIMEOUT_ENV, "300")
    assert api_server.startup_timeout_s() == 300
    monkeypatch.setenv(api_server.TIMEOUT_ENV, "5")  # shorter than a busy machine needs: ours
    assert api_server.startup_timeout_s() == api_server.STARTUP_TIMEOUT_S
    monkeypatch.setenv(api_server.TIMEOUT_ENV, "soon")
    with pytest.raises(ConfigError, match="'soon'"):
        api_server.startup_timeout_s()
