"""Scheduled profiling: a real `prefect server start` and a served deployment on an interval."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest
from pipeline.flows import schedule
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.errors import ConfigError
from pipeline.store import Store

DIFFICULTY = [os.path.join(os.path.dirname(sys.executable), "difficulty")]


def test_schedule_needs_exactly_one_schedule_and_a_server(monkeypatch):
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    runner = CliRunner()
    both = runner.invoke(app, ["schedule", "--cron", "0 3 * * *", "--interval", "60"])
    assert both.exit_code == 1 and "exactly one of --cron" in both.output
    none = runner.invoke(app, ["schedule", "--cron", "0 3 * * *"])
    assert none.exit_code == 1 and "prefect server start" in none.output


def test_deployment_has_module_entrypoint_and_schedule():
    params = {"config": {"dataset": "arithmetic", "n": 2}, "store": {"root": "/tmp/x"}}
    dep = schedule.make_deployment("profile", "nightly", params, cron="0 3 * * *", timezone="Europe/Paris")
    assert dep.entrypoint == "pipeline.flows.prefect_flows.profile"
    assert dep.parameters == params
    [sched] = dep.schedules
    assert sched.schedule.cron == "0 3 * * *" and sched.schedule.timezone == "Europe/Paris"
    dep2 = schedule.make_deployment("checkpoints", "ck", params, interval=90)
    assert dep2.entrypoint == "pipeline.flows.prefect_flows.profile_checkpoints"
    assert dep2.schedules[0].schedule.interval.total_seconds() == 90
    with pytest.raises(ConfigError, match="exactly one"):
        schedule.make_deployment("profile", "x", params)
    with pytest.raises(ConfigError, match="flow='nope'"):
        schedule.make_deployment("nope", "x", params, interval=5)
    assert schedule.default_name("checkpoints", "my data/set") == "checkpoints-my-data-set"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc: subprocess.Popen, sig: int = signal.SIGTERM, grace_s: float = 15) -> float | None:
    """Send ``sig`` to the process group (a terminal's Ctrl-C reaches the whole group): the seconds it
    took to exit, or None where it had to be killed."""
    if proc.poll() is not None:
        return 0.0
    start = time.monotonic()
    os.killpg(proc.pid, sig)
    try:
        proc.wait(timeout=grace_s)
        return time.monotonic() - start
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return None


@pytest.mark.slow
def test_served_deployment_runs_on_its_schedule(tmp_path):
    port = _free_port()
    api = f"http://127.0.0.1:{port}/api"
    data_dir = tmp_path / "data"
    env = {
        **os.environ,
        "PREFECT_HOME": str(tmp_path / "prefect"),
        "PREFECT_API_URL": api,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_UI_ENABLED": "false",
        "PREFECT_RUNNER_POLL_FREQUENCY": "1",
        "DIFFICULTY_DATA": str(data_dir),
    }
    server_log = open(tmp_path / "server.log", "wb")  # noqa: SIM115 - closed in finally
    serve_log = open(tmp_path / "serve.log", "wb")  # noqa: SIM115
    prefect_cli = os.path.join(os.path.dirname(sys.executable), "prefect")
    server = subprocess.Popen(
        [prefect_cli, "server", "start", "--host", "127.0.0.1", "--port", str(port), "--no-ui"],
        env=env,
        stdout=server_log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    served = None
    try:
        deadline = time.monotonic() + 180
        while True:
            assert server.poll() is None, (tmp_path / "server.log").read_text()[-3000:]
            try:
                if httpx.get(f"{api}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)  # not listening yet
            assert time.monotonic() < deadline, "prefect server did not start"
            time.sleep(0.5)
        served = subprocess.Popen(
            [
                *DIFFICULTY,
                "schedule",
                "--interval",
                "5",
                "--name",
                "tiny",
                "--backend",
                "simulate",
                "--limit",
                "4",
                "--n",
                "2",
                "--max-tokens",
                "12",
                "--shard-size",
                "2",
                "--grade-workers",
                "1",
                "--no-report",
            ],
            env=env,
            cwd=tmp_path,
            stdout=serve_log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 300
        done = []
        while not done:
            assert served.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
            assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()[-3000:]
            time.sleep(1)
            if (data_dir / "runs").exists():
                runs = Store(data_dir).list_runs()
                done = [r for r in runs.to_pylist() if r["status"] == "done"]
        run_id = done[0]["run_id"]
        assert Store(data_dir).read_table("samples", {"run_id": run_id}).num_rows == 8
        assert Store(data_dir).read_table("prompt_stats", {"run_id": run_id}).num_rows == 4
        # The server saw it: a completed flow run of the deployment, named after the run. The run is
        # marked done before its flow ends (the flow still records it and writes its verdict and report).
        named = []
        while not named:
            assert served.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
            assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()[-3000:]
            flow_runs = httpx.post(f"{api}/flow_runs/filter", json={}, timeout=10).json()
            completed = [r for r in flow_runs if r["state_type"] == "COMPLETED"]
            named = [r for r in completed if r["name"].endswith(run_id) and r["deployment_id"]]
            time.sleep(0.5)
        assert named[0]["name"].startswith("arithmetic/")  # named after the dataset
    finally:
        stopped = _stop(served, signal.SIGINT) if served is not None else None  # Ctrl-C: pause and exit
        _stop(server)
        server_log.close()
        serve_log.close()
    assert served.returncode is not None and server.returncode is not None
    assert stopped is not None, (
        "Ctrl-C did not stop `difficulty schedule`: " + (tmp_path / "serve.log").read_text()[-2000:]
    )
