"""Faults at the edges of a run: an object store that accepts connections and never answers, a
report written to a local path from an s3:// data directory, a full disk, and outputs that cannot
be written. Each fails with a named error, no traceback, and the data stays as it was.
"""

from __future__ import annotations

import json
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
    # The kernel completes the connection before the accepting thread runs: on a loaded machine the
    # error can come back first, so give that thread a moment to record it.
    waited = time.monotonic() + 5
    while not accepted and time.monotonic() < waited:
        time.sleep(0.05)
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


# --- a full disk (a real tmpfs in a private mount namespace) --------------------------------------

FULL_DISK = """
set -e
mount -t tmpfs -o size=3m tmpfs "$DISK"
mkdir -p "$DISK/data"
head -c 2900000 /dev/zero > "$DISK/filler"   # leaves some 200 KB for a run that needs some 500 KB
set +e
"$DIFFICULTY" profile $ARGS --no-report > "$OUT/first.out" 2> "$OUT/first.err"; echo $? > "$OUT/first.rc"
"$DIFFICULTY" runs --format json > "$OUT/runs-after-first.json"
rm "$DISK/filler"
"$DIFFICULTY" profile $ARGS --no-report > "$OUT/rerun.out" 2> "$OUT/rerun.err"; echo $? > "$OUT/rerun.rc"
head -c 1500000 /dev/zero > "$DISK/filler"   # the run fits; its 5 MB report does not
"$DIFFICULTY" report > "$OUT/report.out" 2> "$OUT/report.err"; echo $? > "$OUT/report.rc"
"$DIFFICULTY" sql "select count(*) as n, count(distinct (prompt_id, sample_idx)) as d from samples" \
    --format json > "$OUT/counts.json"
"$DIFFICULTY" runs --format json > "$OUT/runs.json"
"$DIFFICULTY" doctor > "$OUT/doctor.out" 2>&1; echo $? > "$OUT/doctor.rc"
"""


@pytest.mark.slow  # a whole profile on a small tmpfs, twice
def test_full_disk_names_the_error_records_failed_and_a_rerun_completes(tmp_path):
    """A 3 MiB tmpfs as the data directory (mounted in a private user and mount namespace, so no
    privilege is needed and nothing outlives the test): sampling stops with a named error, no
    traceback, the run reads failed (not interrupted); with room again a rerun completes, every
    sample once; the report on a full disk is named too."""
    if subprocess.run(["unshare", "-rm", "true"], capture_output=True, check=False).returncode != 0:
        pytest.fail("this test mounts a small tmpfs with `unshare -rm` (user namespaces); the kernel refused it")
    out = tmp_path / "out"
    out.mkdir()
    disk = tmp_path / "disk"
    disk.mkdir()
    env = {
        **os.environ,
        "DISK": str(disk),
        "OUT": str(out),
        "DIFFICULTY": DIFFICULTY,
        "ARGS": "--backend simulate --no-prefect --limit 2000 --n 8 --grade-workers 1",
        "DIFFICULTY_DATA": str(disk / "data"),
        "PREFECT_HOME": str(tmp_path / "prefect"),
    }
    done = subprocess.run(
        ["unshare", "-rm", "sh", "-c", FULL_DISK], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    first = (out / "first.err").read_text()
    assert (out / "first.rc").read_text().strip() == "1", first[-2000:]
    assert "Traceback" not in first and "Errno 28" not in first, first[-2000:]
    assert "error: no space left on the device writing " in first and "bytes free in " in first
    assert "it needs " in first and "run the command again" in first
    [row] = json.loads((out / "runs-after-first.json").read_text())
    assert row["status"] == "failed"

    assert (out / "rerun.rc").read_text().strip() == "0", (out / "rerun.err").read_text()[-2000:]
    [counts] = json.loads((out / "counts.json").read_text())
    assert counts == {"n": 16000, "d": 16000}
    [row] = json.loads((out / "runs.json").read_text())
    assert row["status"] == "done"

    report = (out / "report.err").read_text()
    assert (out / "report.rc").read_text().strip() == "1"
    assert "Traceback" not in report and f"no space left on the device writing reports/{row['run_id']}.html" in report
    assert (out / "doctor.rc").read_text().strip() == "0", (out / "doctor.out").read_text()


# --- export and calibrate: bad outputs and an empty label ----------------------------------------


@pytest.fixture
def labelled_run(tmp_path, data_dir) -> tuple[str, Path]:
    """A simulated run of 6 problems whose ``level`` is null in every row; (run id, data file)."""
    rows = [{"problem": f"What is {i} + {i}?", "answer": str(2 * i), "level": None} for i in range(6)]
    data = tmp_path / "nolevel.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = runner.invoke(app, [*PROFILE, "--data-file", str(data), "--n", "4", "--no-report"])
    assert out.exit_code == 0, out.output
    [run_id] = Store(data_dir).list_runs().column("run_id").to_pylist()
    return run_id, data


def test_calibrate_on_a_label_null_in_every_row_is_a_named_error(labelled_run, data_dir):
    run_id, _ = labelled_run
    out = runner.invoke(app, ["calibrate", "--run", run_id, "--label", "level", "--bootstrap", "100"])
    assert out.exit_code == 1, out.output
    assert "label 'level' (original field) is empty in every one of the run's 6 prompts" in out.output
    summary = Store(data_dir).read_table("summary")
    assert "calibration" not in summary.column("section").to_pylist()


@pytest.mark.parametrize("bad", ["parent_is_file", "read_only"])
def test_export_checks_every_output_before_writing_any(labelled_run, tmp_path, bad):
    """An --output under a file, or an --exclude-list on a read-only disk: a named error and no
    file written (before, a traceback after the export and its .meta.json were written)."""
    run_id, _ = labelled_run
    target = tmp_path / "exports"
    target.mkdir()
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    if bad == "parent_is_file":
        out = runner.invoke(app, ["export", "--run", run_id, "--output", str(blocker / "x.jsonl")])
        assert out.exit_code == 1, out.output
        assert f"--output {str(blocker / 'x.jsonl')!r} cannot be written: {str(blocker)!r} is a file" in out.output
        out = runner.invoke(
            app, ["export", "--run", run_id, "--output", str(target / "x.jsonl"), "--exclude-list", str(blocker / "e")]
        )
        assert out.exit_code == 1 and "--exclude-list" in out.output and "is a file" in out.output, out.output
    else:  # a read-only bind mount of the exclude list's folder, in a private namespace (root ignores modes)
        locked = tmp_path / "locked"
        locked.mkdir()
        script = 'mount --bind "$L" "$L" && mount -o remount,bind,ro "$L" && exec "$D" "$@"'
        args = ["export", "--run", run_id, "--output", str(target / "x.jsonl"), "--exclude-list", str(locked / "e")]
        env = {**os.environ, "L": str(locked), "D": DIFFICULTY, "PREFECT_HOME": str(tmp_path / "prefect")}
        done = subprocess.run(
            ["unshare", "-rm", "sh", "-c", script, "sh", *args], env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 1, done.stdout + done.stderr
        assert "Traceback" not in done.stderr
        assert f"--exclude-list {str(locked / 'e')!r} cannot be written: folder {str(locked)!r}" in done.stderr
        assert "Read-only file system" in done.stderr
    assert list(target.iterdir()) == [], "an output was written before every output was checked"
    assert blocker.read_text() == "not a folder"
