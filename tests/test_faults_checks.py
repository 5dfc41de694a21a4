"""Faults the file checks' cache hid, and errors that surfaced as tracebacks, each reproduced.

``doctor`` reads every footer and plan again, whatever the saved verdicts say: a file rewritten in
place with its size, modification time and inode kept (bit rot, ``rsync --inplace -t``, ``cat a >
b`` with the time restored) keeps its stamp, which only a fresh read sees through. Every error a
user can cause is one named line, never a traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from pipeline import api
from pipeline.cli import app
from pipeline.errors import StoreError
from pipeline.store import Store

pytestmark = pytest.mark.faults

runner = CliRunner()
PROFILE = ["profile", "--backend", "simulate", "--no-prefect", "--grade-workers", "1", "--no-report"]


def _profile(shards: int = 6) -> str:
    out = runner.invoke(app, [*PROFILE, "--limit", str(4 * shards), "--n", "4", "--shard-size", "4"])
    assert out.exit_code == 0, out.output
    return Store(os.environ["DIFFICULTY_DATA"]).list_runs().column("run_id")[0].as_py()


def _count() -> int:
    out = runner.invoke(app, ["sql", "select count(*) as n from samples", "--format", "csv"])
    assert out.exit_code == 0, out.output
    return int(out.stdout.splitlines()[1])


def _rewrite_in_place(path: Path, data: bytes) -> None:
    """``data`` written into ``path`` in place (its inode kept), then its times restored."""
    st = path.stat()
    assert len(data) == st.st_size
    with path.open("r+b") as fh:
        fh.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (st.st_size, st.st_mtime_ns, st.st_ino)


def _same_size_copy(source: Path, size: int) -> bytes | None:
    """``source``'s table as Parquet bytes of exactly ``size`` (a footer key padded), or None."""
    table = pq.read_table(source)
    meta = table.schema.metadata or {}
    for pad in range(0, 4096):
        sink = Path(f"{source}.pad")
        pq.write_table(table.replace_schema_metadata({**meta, b"pad": b"x" * pad}), sink, compression="zstd")
        data = sink.read_bytes()
        sink.unlink()
        if len(data) == size:
            return data
        if len(data) > size:
            return None
    return None


def test_doctor_sees_a_zeroed_footer_the_cache_called_good(data_dir):
    run_id = _profile()
    total = _count()  # every shard checked and its verdict saved
    shard = data_dir / "samples" / f"run_id={run_id}" / "shard-00002.parquet"
    data = bytearray(shard.read_bytes())
    data[-8:] = bytes(8)  # the footer's length and magic zeroed: bit rot at the end of the file
    _rewrite_in_place(shard, bytes(data))
    out = runner.invoke(app, ["doctor", "--format", "json"])
    assert out.exit_code == 1, out.output
    assert "shard-00002.parquet" in out.stdout and "not a complete Parquet file" in out.stdout
    assert not shard.exists()
    again = runner.invoke(app, ["doctor"])
    assert again.exit_code == 0 and "nothing to do" in again.stdout
    assert _count() == total - 4 * 4  # the shard's samples left out until the run resumes
    assert runner.invoke(app, [*PROFILE, "--limit", "24", "--n", "4", "--shard-size", "4"]).exit_code == 0
    assert _count() == total


def test_doctor_sees_a_same_size_swap_the_cache_called_good(data_dir):
    """``cat shard-A > shard-B`` (same size, inode kept, old time restored): the views, trusting the
    cache, count A twice; doctor reads B's footer, finds A's plan digest and quarantines it."""
    run_id = _profile(shards=10)
    folder = data_dir / "samples" / f"run_id={run_id}"
    total = _count()
    shards = sorted(folder.glob("shard-*.parquet"))
    pair = next(
        ((a, b, data) for a in shards for b in shards if a != b and (data := _same_size_copy(a, b.stat().st_size))),
        None,
    )
    assert pair is not None, [p.stat().st_size for p in shards]
    source, target, data = pair
    _rewrite_in_place(target, data)
    assert _count() == total  # the cached verdict: the copy counted in place of the shard it hides
    out = runner.invoke(app, ["doctor", "--format", "json"])
    assert out.exit_code == 1, out.output
    assert target.name in out.stdout and "is not what run" in out.stdout
    assert source.exists() and not target.exists()
    assert runner.invoke(app, ["doctor"]).exit_code == 0
    assert _count() == total - 16


@pytest.mark.parametrize("command", ["sql", "current"])
@pytest.mark.parametrize("where", ["missing folder", "a folder", "under a file"])
def test_output_to_a_bad_place_is_one_named_line(data_dir, tmp_path, command, where):
    store = Store.open(data_dir)
    if command == "current":
        from pipeline.observe import record

        rows = record.observation_rows("table:t", "training", 1, "d", ["a"], [4], [1], None)
        record.write_step(store, "table:t", 1, rows)
    (tmp_path / "file").write_text("x")
    target = {
        "missing folder": tmp_path / "new" / "deeper" / "out.csv",
        "a folder": tmp_path,
        "under a file": tmp_path / "file" / "out.csv",
    }[where]
    args = ["sql", "select 1 as one"] if command == "sql" else ["current"]
    out = runner.invoke(app, [*args, "--format", "csv", "--output", str(target)])
    if where == "missing folder":  # made, as export makes its folder
        assert out.exit_code == 0, out.output
        assert target.read_text().splitlines()[0].split(",")[0] in ("one", "dataset")
        return
    assert out.exit_code == 1 and out.exception is None or isinstance(out.exception, SystemExit), out.output
    assert out.stderr.startswith("error: --output") and len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_a_refused_sniff_csv_in_the_notebook_api_is_a_store_error(data_dir):
    _profile(shards=1)
    with api.open(data_dir) as tables:
        with pytest.raises(StoreError, match="refused"):
            tables.sql("select * from sniff_csv('/etc/passwd')").fetchall()
        with pytest.raises(StoreError, match="refused"):
            tables.sql("select * from read_csv('/etc/passwd')").arrow()
        assert tables.sql("select count(*) from samples").fetchall() == [(16,)]


FULL_DISK_PREFECT = """
set -e
mount -t tmpfs -o size=3m tmpfs "$DISK"
mkdir -p "$DISK/data"
head -c 2900000 /dev/zero > "$DISK/filler"   # leaves some 200 KB for a run that needs some 500 KB
set +e
"$DIFFICULTY" profile $ARGS --no-report > "$OUT/first.out" 2> "$OUT/first.err"; echo $? > "$OUT/first.rc"
"""


@pytest.mark.slow  # a profile under Prefect (its server started) on a small tmpfs
def test_a_full_disk_under_prefect_prints_no_traceback(tmp_path):
    """The same full disk as ``test_faults_edges``, the run under Prefect: its task and flow
    loggers keep their one-line records of the failure but not its traceback (``NamedFailure``);
    the command's last line names the error."""
    if subprocess.run(["unshare", "-rm", "true"], capture_output=True, check=False).returncode != 0:
        pytest.fail("this test mounts a small tmpfs with `unshare -rm` (user namespaces); the kernel refused it")
    out, disk = tmp_path / "out", tmp_path / "disk"
    out.mkdir()
    disk.mkdir()
    env = {
        **os.environ,
        "DISK": str(disk),
        "OUT": str(out),
        "DIFFICULTY": str(Path(sys.executable).parent / "difficulty"),
        "ARGS": "--backend simulate --limit 2000 --n 8 --grade-workers 1",
        "DIFFICULTY_DATA": str(disk / "data"),
        "PREFECT_HOME": str(tmp_path / "prefect"),
    }
    env.pop("PREFECT_API_URL", None)
    done = subprocess.run(
        ["unshare", "-rm", "sh", "-c", FULL_DISK_PREFECT], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    err = (out / "first.err").read_text()
    assert (out / "first.rc").read_text().strip() == "1", err[-2000:]
    assert "Traceback" not in err and "Errno 28" not in err, err[-3000:]
    # the plain progress lines a piped run prints are not part of the failure's report
    lines = [line for line in err.strip().splitlines() if not line.startswith("samples ")]
    assert lines[-1].startswith("error: no space left on the device writing ") and len(lines) <= 5, err[-3000:]


@pytest.mark.filterwarnings("ignore:Logger 'prefect:UserWarning")  # no flow run: Prefect's API handler says so
def test_prefect_loggers_keep_a_named_failure_to_one_line():
    """The filter itself, on the loggers Prefect's engines log through: a ``PipelineError`` loses
    its traceback, any other exception keeps it."""
    import io
    import logging

    from pipeline.flows import prefect_flows  # noqa: F401 - installs the filter

    from pipeline.errors import DiskFullError

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    for name in ("prefect.task_runs", "prefect.flow_runs"):
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        try:
            for exc in (DiskFullError("no space left"), ValueError("a bug")):
                try:
                    raise exc
                except Exception:
                    logger.error("Task run failed with exception: %r", exc, exc_info=True)
        finally:
            logger.removeHandler(handler)
    text = stream.getvalue()
    assert text.count("Traceback") == 2 and "ValueError: a bug" in text
    assert "DiskFullError: no space left" not in text and text.count("DiskFullError('no space left')") == 2
