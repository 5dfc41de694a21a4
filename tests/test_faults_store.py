"""Faults a new user hit in the data directory and in ``difficulty sql``, each reproduced.

A truncated or foreign file under a table is quarantined (moved to ``<root>/quarantine/``, never
deleted) and left out, so queries over everything else keep working and a quarantined shard is
sampled again; ``difficulty sql`` runs one read-only statement confined to the data directory.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from pipeline import store as store_module
from pipeline.cli import app
from pipeline.errors import StoreError
from pipeline.store import Store

pytestmark = pytest.mark.faults

runner = CliRunner()


def _samples(run_id: str, shard: int, n: int = 24) -> pa.Table:
    """``n`` samples of one shard, with completions long enough that the file is over 1000 bytes."""
    return pa.table(
        {
            "run_id": [run_id] * n,
            "prompt_id": [f"p{shard}-{i // 8}" for i in range(n)],
            "sample_idx": [i % 8 for i in range(n)],
            "completion": [f"shard {shard} sample {i}: the answer is {i * 7919 % 1000}" for i in range(n)],
            "correct": [i % 3 == 0 for i in range(n)],
        }
    )


def _three_shards(store: Store, run_id: str = "R") -> list[Path]:
    return [store.write_shard(run_id, s, _samples(run_id, s)) for s in range(3)]


def _quarantined(store: Store) -> list[str]:
    """Relative paths (under the timestamp folder) of the files in quarantine."""
    root = store.root / "quarantine"
    if not root.exists():
        return []
    return sorted(str(p.relative_to(root).relative_to(p.relative_to(root).parts[0])) for p in root.rglob("*.parquet"))


def _sql(*args: str):
    return runner.invoke(app, ["sql", *args, "--format", "csv"])


# --- corrupt and foreign files -----------------------------------------------------------------


def test_truncated_shard_is_quarantined_and_queries_work(store):
    paths = _three_shards(store)
    assert paths[1].stat().st_size > 1000
    os.truncate(paths[1], 1000)  # `truncate -s 1000`
    out = _sql("select 1 as one")
    assert out.exit_code == 0, out.output
    assert out.stdout.splitlines() == ["one", "1"]
    out = _sql("select count(*) as n from samples")
    assert out.exit_code == 0, out.output
    assert out.stdout.splitlines() == ["n", "48"]
    assert _quarantined(store) == ["samples/run_id=R/shard-00001.parquet"]
    assert not paths[1].exists()
    assert store.finished_shards("R") == {0, 2}
    assert store.read_table("samples").num_rows == 48
    assert store.sample_counts("R", answers=False).column("n").to_pylist() == [8] * 6
    log = [json.loads(line) for line in (store.root / "quarantine" / "log.jsonl").read_text().splitlines()]
    assert [e["file"] for e in log] == ["samples/run_id=R/shard-00001.parquet"]
    assert "Parquet" in log[0]["reason"]


def test_connect_quarantines_before_creating_the_view(store, caplog):
    paths = _three_shards(store)
    paths[0].write_bytes(b"not parquet at all")
    with caplog.at_level("WARNING", logger="pipeline.store"):
        con = store.connect()
    try:
        assert con.sql("select count(*) from samples").fetchall() == [(48,)]
    finally:
        con.close()
    assert any("shard-00000.parquet" in r.getMessage() and "quarantine" in r.getMessage() for r in caplog.records)
    assert _quarantined(store) == ["samples/run_id=R/shard-00000.parquet"]


def test_foreign_names_in_a_samples_partition_are_quarantined(store):
    paths = _three_shards(store)
    folder = paths[0].parent
    (folder / "shard-00000 (copy).parquet").write_bytes(paths[0].read_bytes())
    (folder / "notes.parquet").write_bytes(paths[2].read_bytes())
    assert store.finished_shards("R") == {0, 1, 2}  # the code before this crashed on int("00000 (copy)")
    assert sorted(_quarantined(store)) == [
        "samples/run_id=R/notes.parquet",
        "samples/run_id=R/shard-00000 (copy).parquet",
    ]
    assert store.query("select count(*) n from samples").to_pylist() == [{"n": 72}]


def test_a_folder_that_is_not_a_partition_is_foreign(store):
    paths = _three_shards(store)
    backup = paths[0].parent / "backup"
    backup.mkdir()
    (backup / "shard-00000.parquet").write_bytes(paths[0].read_bytes())
    assert store.query("select count(*) n from samples").to_pylist() == [{"n": 72}]
    assert _quarantined(store) == ["samples/run_id=R/backup/shard-00000.parquet"]


def test_foreign_schema_in_problems_is_quarantined(store):
    good = pa.table({"dataset": ["d"], "prompt_id": ["p1"], "problem": ["1+1"], "answer": ["2"], "status": ["ok"]})
    store.write_table("problems", good, {"dataset": "d"})
    folder = store.partition_dir("problems", {"dataset": "d"})
    pq.write_table(pa.table({"question": ["2+2"], "final": ["4"]}), folder / "other.parquet")  # another tool's output
    pq.write_table(pa.table({"dataset": ["d"], "prompt_id": [["a"]], "status": ["ok"]}), folder / "typed.parquet")
    assert store.query("select prompt_id from problems").to_pylist() == [{"prompt_id": "p1"}]
    assert _quarantined(store) == ["problems/dataset=d/other.parquet", "problems/dataset=d/typed.parquet"]
    assert store.read_table("problems").num_rows == 1


def test_schema_check_accepts_what_conform_reads():
    stored = pa.schema([("run_id", pa.dictionary(pa.int32(), pa.string())), ("prompt_id", pa.large_string())])
    stored = stored.append(pa.field("sample_idx", pa.int64()))
    assert store_module.schema_problem(stored, "samples") is None
    assert "missing required" in store_module.schema_problem(stored.remove(2), "samples")
    assert "unknown columns" in store_module.schema_problem(stored.append(pa.field("x", pa.int8())), "samples")
    wrong = stored.set(2, pa.field("sample_idx", pa.string()))
    assert "sample_idx is string" in store_module.schema_problem(wrong, "samples")


def test_footer_checks_are_cached_until_the_file_changes(store, monkeypatch):
    paths = _three_shards(store)
    store.connect().close()  # every table's files checked once
    calls = []
    real = pq.read_metadata
    monkeypatch.setattr(pq, "read_metadata", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    store.files("samples")
    store.connect().close()
    assert calls == []
    store.write_shard("R", 1, _samples("R", 1, n=16))  # a rewrite: new size and mtime
    assert store.files("samples") == paths
    assert calls == [paths[1]]


def _verdicts(store: Store) -> Path:
    from pipeline.store import files

    return files.verdicts_path(str(store.root))


def _another_process(monkeypatch) -> list:
    """Forget what this process checked (as a new process would) and count the footers read after."""
    from pipeline.store import files, fs

    for cache in ("CHECKED", "FOOTERS", "LATEST"):
        monkeypatch.setattr(fs, cache, {})
    monkeypatch.setattr(files, "_VERDICTS_READ", set())
    monkeypatch.setattr(files, "_VERDICTS_NEW", set())
    calls = []
    real = pq.read_metadata
    monkeypatch.setattr(pq, "read_metadata", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    return calls


def test_saved_verdicts_spare_the_next_process_its_footer_reads(store, monkeypatch):
    _three_shards(store)
    store.connect().close()  # checks every file and saves the verdicts
    assert _verdicts(store).exists()
    assert not [p for p in store.root.rglob(".*")]  # nothing of the cache's in the data directory
    calls = _another_process(monkeypatch)
    assert store.finished_shards("R") == {0, 1, 2}  # the footers' digests come from the saved verdicts
    assert store.query("select count(*) as n from samples").to_pylist() == [{"n": 72}]
    assert calls == []


def test_a_file_changed_after_its_verdict_is_checked_again(store, monkeypatch):
    """Same size, same inode, bytes changed in place: the new modification time voids the verdict."""
    paths = _three_shards(store)
    store.connect().close()
    data = bytearray(paths[1].read_bytes())
    data[-5] ^= 0xFF  # the footer's length: no longer a Parquet file
    with open(paths[1], "r+b") as fh:
        fh.write(data)
    later = paths[1].stat().st_mtime + 5
    os.utime(paths[1], (later, later))
    calls = _another_process(monkeypatch)
    assert store.query("select count(*) as n from samples").to_pylist() == [{"n": 48}]
    assert calls == [paths[1]]
    assert _quarantined(store) == ["samples/run_id=R/shard-00001.parquet"]
    saved = json.loads(_verdicts(store).read_text())["files"]
    assert sorted(saved) == [store.relative(p) for p in (paths[0], paths[2])]


def _planned_shards(store: Store, digests: dict[int, str], write: bool = True) -> list[Path]:
    """Run R's plan (one prompt per shard) and, with ``write``, its shards carrying those digests."""
    rows = [dict(run_id="R", shard=k, prompt_id=f"p{k}", first_idx=0, count=8, digest=d) for k, d in digests.items()]
    store.write_table("plans", pa.Table.from_pylist(rows), {"run_id": "R"})
    return [store.write_shard("R", k, _samples("R", k), digest=d) for k, d in digests.items()] if write else []


def test_a_plan_is_read_once_per_version(store, monkeypatch):
    _planned_shards(store, {0: "a", 1: "b", 2: "c"})
    assert store.query("select count(*) as n from samples").to_pylist() == [{"n": 72}]
    _another_process(monkeypatch)
    read = []
    real = Store.files_rows
    monkeypatch.setattr(Store, "files_rows", lambda self, name, *a, **k: read.append(name) or real(self, name, *a, **k))
    assert store.query("select count(*) as n from samples").to_pylist() == [{"n": 72}]
    assert read == []  # the planned digests saved with the plan file's verdict
    _planned_shards(store, {0: "a", 1: "another", 2: "c"}, write=False)  # the plan file replaced
    assert store.query("select count(*) as n from samples").to_pylist() == [{"n": 48}]
    assert read == ["plan_digests"]
    assert _quarantined(store) == ["samples/run_id=R/shard-00001.parquet"]


@pytest.mark.parametrize("saved", ["unreadable", "another version", "no files"])
def test_saved_verdicts_of_another_version_or_unreadable_are_ignored(store, monkeypatch, saved):
    paths = _three_shards(store)
    store.connect().close()
    verdicts = _verdicts(store)
    good = json.loads(verdicts.read_text())
    text = {
        "unreadable": "{not json",
        "another version": json.dumps({**good, "version": "another"}),  # other checks or schemas decided them
        "no files": json.dumps({"version": good["version"]}),
    }[saved]
    verdicts.write_text(text)
    calls = _another_process(monkeypatch)
    assert store.query("select count(*) as n from samples").to_pylist() == [{"n": 72}]
    assert sorted(calls) == sorted(paths)  # every footer read again
    assert json.loads(verdicts.read_text()) == good  # and saved anew


def test_rerun_resamples_a_quarantined_shard(data_dir):
    args = ["profile", "--backend", "simulate", "--no-prefect", "--limit", "30", "--n", "8", "--shard-size", "10"]
    args += ["--grade-workers", "1", "--no-report"]
    out = runner.invoke(app, args)
    assert out.exit_code == 0, out.output
    store = Store(data_dir)
    run_id = store.list_runs().column("run_id")[0].as_py()
    shard = store.partition_dir("samples", {"run_id": run_id}) / "shard-00001.parquet"
    os.truncate(shard, 1000)
    out = _sql("select count(*) as n from samples")
    assert out.exit_code == 0, out.output
    assert out.stdout.splitlines() == ["n", "160"]
    assert store.finished_shards(run_id) == {0, 2}
    out = runner.invoke(app, args)
    assert out.exit_code == 0, out.output
    assert shard.exists() and store.finished_shards(run_id) == {0, 1, 2}
    assert store.query("select count(*) n from samples").to_pylist() == [{"n": 240}]
    assert _quarantined(store) == [f"samples/run_id={run_id}/shard-00001.parquet"]


# --- difficulty doctor -------------------------------------------------------------------------


def test_doctor_reports_moves_and_is_idempotent(store):
    paths = _three_shards(store)
    os.truncate(paths[1], 1000)
    (paths[0].parent / "notes.parquet").write_bytes(paths[2].read_bytes())
    folder = store.partition_dir("problems", {"dataset": "d"})
    folder.mkdir(parents=True)
    pq.write_table(pa.table({"question": ["2+2"]}), folder / "part-0.parquet")
    stale = paths[0].parent / f".shard-00003.{'a' * 32}.tmp"
    fresh = paths[0].parent / f".shard-00004.{'b' * 32}.tmp"
    stale.write_bytes(b"half a file")
    fresh.write_bytes(b"being written")
    two_hours_ago = time.time() - 7200
    os.utime(stale, (two_hours_ago, two_hours_ago))

    out = runner.invoke(app, ["doctor", "--format", "json", "--data-dir", str(store.root)])
    assert out.exit_code == 1, out.output
    rows = json.loads(out.stdout)
    by_file = {r["file"]: r for r in rows}
    assert set(by_file) == {
        "problems/dataset=d/part-0.parquet",
        "samples/run_id=R/notes.parquet",
        "samples/run_id=R/shard-00001.parquet",
        f"samples/run_id=R/{stale.name}",
    }
    assert by_file["samples/run_id=R/shard-00001.parquet"]["table"] == "samples"
    assert "Parquet" in by_file["samples/run_id=R/shard-00001.parquet"]["reason"]
    assert "unknown columns" in by_file["problems/dataset=d/part-0.parquet"]["reason"]
    assert by_file[f"samples/run_id=R/{stale.name}"]["action"] == "removed"
    assert all(r["action"].startswith("moved to quarantine/") for f, r in by_file.items() if f.endswith(".parquet"))
    assert not stale.exists() and fresh.exists()
    assert _quarantined(store) == [
        "problems/dataset=d/part-0.parquet",
        "samples/run_id=R/notes.parquet",
        "samples/run_id=R/shard-00001.parquet",
    ]

    out = runner.invoke(app, ["doctor", "--format", "json", "--data-dir", str(store.root)])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout) == []
    out = runner.invoke(app, ["doctor", "--data-dir", str(store.root)])
    assert out.exit_code == 0 and "nothing to do" in out.output


# --- difficulty sql: one read-only statement, confined to the data directory -----------------


@pytest.fixture
def outside(tmp_path) -> Path:
    """A folder beside the data directory, with a Parquet file in it."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    pq.write_table(pa.table({"x": [1, 2, 3]}), folder / "x.parquet")
    return folder


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("select 1; select 2", "exactly one statement, got 2"),
        ("copy (select * from samples limit 1) to '{shard}'", "refused COPY statement"),
        ("attach '{root}/x.db' as x", "refused ATTACH statement"),
        ("install httpfs", "refused LOAD statement"),
        ("set threads = 1", "refused SET statement"),
        ("export database '{root}/export'", "refused EXPORT statement"),
        ("select * from read_text('/etc/hostname')", "/etc/hostname"),
        ("select * from read_csv('/etc/passwd')", "/etc/passwd"),
        ("select * from read_parquet('{outside}/x.parquet')", "x.parquet"),
        ("select * from read_parquet('{root}/../elsewhere/x.parquet')", "x.parquet"),
    ],
)
def test_sql_refuses_writes_and_files_outside(store, outside, sql, expected):
    shard = _three_shards(store)[0]
    before = {p: p.stat().st_mtime_ns for p in store.root.rglob("*")}
    text = sql.format(shard=shard, root=store.root, outside=outside)
    out = runner.invoke(app, ["sql", text])
    assert out.exit_code == 1, out.output
    message = " ".join(out.output.split())  # the error line is never wrapped, but be safe
    assert "error: refused" in message and expected in message
    if expected.startswith("refused"):
        assert "--write" in message
    assert {p: p.stat().st_mtime_ns for p in store.root.rglob("*")} == before
    assert pq.read_table(shard).num_rows == 24


def test_sql_refusal_is_a_store_error(store, outside):
    with pytest.raises(StoreError, match="refused.*outside|refused.*Permission"):
        store.user_query(f"select * from read_parquet('{outside}/x.parquet')")
    with pytest.raises(StoreError, match="refused"):
        store.user_query("select * from read_parquet('https://example.com/x.parquet')")


def test_sql_reads_the_data_directory(store):
    _three_shards(store)
    got = store.user_query("select count(*) n from samples")
    assert got.to_pylist() == [{"n": 72}]
    glob = f"{store.root}/samples/**/*.parquet"
    assert store.user_query(f"select count(*) n from read_parquet('{glob}')").to_pylist() == [{"n": 72}]
    assert store.user_query("explain select * from samples").num_rows >= 1
    assert store.user_query("describe samples").num_rows == len(store_module.schema.SAMPLES)


def test_sql_write_copies_inside_the_data_directory_only(store, outside):
    _three_shards(store)
    target = store.root / "exports" / "correct.csv"
    target.parent.mkdir()
    out = runner.invoke(app, ["sql", "--write", f"copy (select * from samples where correct) to '{target}'"])
    assert out.exit_code == 0, out.output
    assert len(target.read_text().splitlines()) == 1 + 24
    escaped = outside / "out.csv"
    out = runner.invoke(app, ["sql", "--write", f"copy (select * from samples) to '{escaped}'"])
    assert out.exit_code == 1 and "error: refused" in out.output
    assert not escaped.exists()
    out = runner.invoke(app, ["sql", "--write", "select 1; select 2"])
    assert out.exit_code == 1 and "exactly one statement" in out.output
    out = runner.invoke(app, ["sql", "--write", "set enable_external_access = true"])
    assert out.exit_code == 1 and "settings" in out.output


def test_sql_write_over_a_live_shard_is_caught_on_the_next_open(store):
    shard = _three_shards(store)[0]
    out = runner.invoke(app, ["sql", "--write", f"copy (select 1 as x) to '{shard}' (format parquet)"])
    assert out.exit_code == 0, out.output
    assert store.finished_shards("R") == {1, 2}
    assert _quarantined(store) == ["samples/run_id=R/shard-00000.parquet"]


# --- an object replaced while the tables open ---------------------------------------------------


def test_a_file_replaced_while_the_tables_open_is_listed_and_read_again(store, monkeypatch):
    """On S3 another process may rewrite an object between its listing and its read (a run's record:
    s3fs's FileExpired, "... no longer exists", seen once in six CI runs of the concurrent loads on
    S3). Opening the tables lists and reads them again, up to ``OPEN_ATTEMPTS`` times; any other
    error is raised at once."""
    import duckdb

    from pipeline.store import fs, query

    _three_shards(store)
    real = fs.duckdb_connection
    failing = {"left": 0, "message": "", "calls": 0}

    class Flaky:
        """A connection whose next reads of Parquet fail as a replaced object does."""

        def __init__(self, con):
            self._con = con

        def __getattr__(self, name):
            return getattr(self._con, name)

        def read_parquet(self, *args, **kwargs):
            failing["calls"] += 1
            if failing["left"]:
                failing["left"] -= 1
                raise duckdb.IOException(failing["message"])
            return self._con.read_parquet(*args, **kwargs)

    monkeypatch.setattr(fs, "duckdb_connection", lambda s: Flaky(real(s)))
    expired = "FileExpired: [Errno 16] The remote file corresponding to filename x/run.parquet no longer exists."
    expected = store.query("select count(*) as n from samples").to_pylist()
    assert expected == [{"n": 72}]
    failing.update(left=query.OPEN_ATTEMPTS - 1, message=expired, calls=0)
    assert store.query("select count(*) as n from samples").to_pylist() == expected
    assert failing["left"] == 0 and failing["calls"] == query.OPEN_ATTEMPTS
    failing.update(left=query.OPEN_ATTEMPTS, calls=0)
    with pytest.raises(StoreError, match="no longer exists"):
        store.query("select count(*) as n from samples")
    assert failing["calls"] == query.OPEN_ATTEMPTS
    failing.update(left=1, message="IO Error: the disk is on fire", calls=0)
    with pytest.raises(StoreError, match="the disk is on fire"):
        store.query("select count(*) as n from samples")
    assert failing["calls"] == 1
