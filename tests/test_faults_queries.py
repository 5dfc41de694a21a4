"""Faults a user hit with queries and outputs, each reproduced with a real process: a runaway query
stops on SIGINT within a second (``difficulty sql`` and the notebook API alike) or at ``--timeout``;
``sql --output`` is written by DuckDB, streamed; a killed command's temporary file is removed by the
next run or by ``doctor``, which counts the ones it keeps."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.store import Store, fs

pytestmark = pytest.mark.faults

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]
RUNAWAY = "select sum(a.range * b.range) from range(100000000) a, range(100000) b"  # hours of work
STOPPED_WITHIN_S = 1.0


def _env(data_dir: Path) -> dict[str, str]:
    return {**os.environ, "DIFFICULTY_DATA": str(data_dir), "PYTHONPATH": str(ROOT)}


def _interrupted(cmd: list[str], data_dir: Path, started: str | None = None) -> tuple[int, float, str, str]:
    """Start ``cmd``, let its query run, send SIGINT: (exit status, seconds from SIGINT to exit,
    stdout, stderr). ``started``: the line the process prints when its query is under way."""
    proc = subprocess.Popen(cmd, env=_env(data_dir), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        if started is not None:
            assert proc.stdout.readline().strip() == started
        time.sleep(2.0)  # DuckDB deep in the join
        assert proc.poll() is None, proc.communicate()
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=10)  # before, it ran on for minutes
        return proc.returncode, time.monotonic() - sent, out, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_runaway_query_stops_on_sigint_within_a_second_in_the_cli(store, data_dir):
    code, took, _, err = _interrupted([sys.executable, "-m", "pipeline", "sql", RUNAWAY], data_dir)
    assert took < STOPPED_WITHIN_S, (took, err)
    assert code != 0 and "Traceback" not in err


NOTEBOOK = r"""
import sys
import pipeline
tables = pipeline.open(sys.argv[1])
print("running", flush=True)
try:
    tables.sql(sys.argv[2]).fetchall()
except KeyboardInterrupt:
    print("interrupted", flush=True)
    print(tables.sql("select 41 + 1").fetchall()[0][0], flush=True)  # the connection still works
"""


def test_a_runaway_query_stops_on_sigint_within_a_second_in_a_notebook(store, data_dir):
    cmd = [sys.executable, "-c", NOTEBOOK, str(data_dir), RUNAWAY]
    code, took, out, err = _interrupted(cmd, data_dir, started="running")
    assert took < STOPPED_WITHIN_S, (took, err)
    assert out.split() == ["interrupted", "42"] and code == 0, err


def test_sql_stops_a_query_at_its_time_limit(store, data_dir):
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pipeline", "sql", RUNAWAY, "--timeout", "1.5"],
        env=_env(data_dir),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1 and time.monotonic() - started < 1.5 + 5  # the start-up included
    assert done.stderr.strip() == ("error: the query ran past its time limit of 1.5 s (--timeout) and was stopped"), (
        done.stderr
    )
    out = runner.invoke(app, ["sql", "select 1", "--timeout", "0"])
    assert out.exit_code == 1 and "--timeout" in out.output and "0" in out.output
    assert runner.invoke(app, ["sql", "select 7 as x", "--timeout", "30", "--format", "csv"]).stdout.split() == [
        "x",
        "7",
    ]


def test_sql_output_is_streamed_by_duckdb(store, data_dir, tmp_path):
    """Two million rows of 200 bytes to Parquet: held whole in Python this peaked past 600 MB."""
    target = tmp_path / "rows.parquet"
    probe = (
        "import resource, subprocess, sys\n"
        "subprocess.run(sys.argv[1:], check=True)\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    query = "select range as i, repeat('x', 200) as s from range(2000000)"
    args = [sys.executable, "-m", "pipeline", "sql", query, "--format", "parquet", "--output", str(target)]
    done = subprocess.run([sys.executable, "-c", probe, *args], env=_env(data_dir), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    peak_mb = int(done.stdout.split()[-1]) / 1024
    assert peak_mb < 250, peak_mb
    got = pq.read_table(target)
    assert got.num_rows == 2_000_000 and got.column("i")[-1].as_py() == 1_999_999
    assert not list(target.parent.glob(".*.tmp")) and not list(data_dir.rglob("*.tmp"))
    ordered = "select range as i from range(200000) order by i desc"  # streamed, an ORDER BY still holds
    for fmt in ("csv", "json", "parquet"):
        small = tmp_path / f"ordered.{fmt}"
        out = runner.invoke(app, ["sql", ordered, "--format", fmt, "--output", str(small)])
        assert out.exit_code == 0, out.output
        if fmt == "parquet":
            rows = pq.read_table(small).column("i").to_pylist()
        elif fmt == "csv":
            rows = [int(v) for v in small.read_text().split()[1:]]
        else:
            rows = [r["i"] for r in json.loads(small.read_text())]
        assert rows == list(range(199_999, -1, -1))


KILLED_WRITER = r"""
import os, signal, sys
from pipeline.store import fs
with fs.replacing(sys.argv[1]) as tmp:
    tmp.write_bytes(b"half an export")
    os.kill(os.getpid(), signal.SIGKILL)  # kill -9 while the temporary file exists
"""


def test_a_killed_export_leaves_no_temporary_file_beside_its_output(tmp_path, data_dir):
    out = runner.invoke(app, ["profile", "--backend", "simulate", "--no-prefect", "--limit", "12", "--n", "4"])
    assert out.exit_code == 0, out.output
    [run_id] = Store(data_dir).list_runs().column("run_id").to_pylist()
    target = tmp_path / "exports" / "out.parquet"
    target.parent.mkdir()
    killed = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(target)], env=_env(data_dir))
    assert killed.returncode == -signal.SIGKILL
    assert len(list(target.parent.glob(".out.parquet.*.tmp"))) == 1  # what the kill left
    out = runner.invoke(app, ["export", "--run", run_id, "--output", str(target)])
    assert out.exit_code == 0, out.output
    assert sorted(p.name for p in target.parent.iterdir()) == ["out.parquet"]


def test_doctor_removes_a_dead_writers_temporary_at_once_and_counts_those_it_keeps(store, tmp_path):
    folder = store.root / "samples" / "run_id=R"
    folder.mkdir(parents=True)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = fs.temporary(folder / "shard-00000.parquet")
    gone = gone.with_name(gone.name.replace(f"-{os.getpid()}.", f"-{int(dead.stdout)}."))
    live = fs.temporary(folder / "shard-00001.parquet")  # this process: still writing
    for path in (gone, live):
        path.write_bytes(b"half a shard")
    out = runner.invoke(app, ["doctor", "--format", "json", "--data-dir", str(store.root)])
    assert out.exit_code == 1, out.output
    rows = json.loads(out.stdout)
    assert [(r["file"], r["action"]) for r in rows] == [(f"samples/run_id=R/{gone.name}", "removed")]
    assert "1 temporary file kept" in out.stderr and live.name in out.stderr
    assert not gone.exists() and live.exists()
