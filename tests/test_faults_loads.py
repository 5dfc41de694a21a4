"""Faults of runs that share a data directory, each reproduced on a local folder and on the loopback
S3 server: a later load of a dataset must not drop the problems an earlier run uses (one after the
other, or two loads at once), a shard copied under another shard's name is never counted, and
``doctor`` finds the copy and the temporary leftovers of an interrupted upload."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.store import Store

pytestmark = pytest.mark.faults

runner = CliRunner()

PROFILE = ["profile", "--backend", "simulate", "--no-prefect", "--no-report", "--grade-workers", "1"]


# The S3 cases start moto's server (fetched by name below, so conftest cannot see it): slow tier.
@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.slow)])
def where(request) -> str:
    """The data directory of the test, a local folder or a fresh bucket on the loopback S3 server
    (``$DIFFICULTY_DATA`` either way)."""
    if request.param == "s3":
        return request.getfixturevalue("s3_data")
    return str(request.getfixturevalue("data_dir"))


def _invoke(*args: str):
    out = runner.invoke(app, list(args))
    assert out.exit_code == 0, out.output
    return out


def _profile(limit: int, n: int, *extra: str) -> str:
    """Profile arithmetic problems; the new run's id."""
    before = set(Store.open().list_runs().column("run_id").to_pylist())
    _invoke(*PROFILE, "--limit", str(limit), "--n", str(n), "--seed", "41", *extra)
    (run_id,) = set(Store.open().list_runs().column("run_id").to_pylist()) - before
    return run_id


def _prompts(store: Store, run_id: str) -> set[str]:
    return set(store.query("select distinct prompt_id from samples where run_id = ?", [run_id]).column(0).to_pylist())


# --- a load never drops another run's problems -------------------------------------------------


def test_a_smaller_later_load_keeps_the_problems_of_an_earlier_run(where, tmp_path):
    first = _profile(40, 4)
    second = _profile(20, 2)
    store = Store.open()
    problems = store.read_table("problems", {"dataset": "arithmetic"})
    ids = problems.column("prompt_id").to_pylist()
    assert len(ids) == len(set(ids)), "one row per prompt"
    assert _prompts(store, first) | _prompts(store, second) <= set(ids)
    assert len(_prompts(store, first)) == 40
    viewed = store.query("select count(*) n, count(distinct prompt_id) d from problems").to_pylist()
    assert viewed == [{"n": len(ids), "d": len(ids)}]

    # What reads the problems of the first run finds every one of its 40 prompts.
    _invoke("regrade", "--run", first, "--no-math-verify", "--no-report")
    out = _invoke("export", "--run", first, "--output", str(tmp_path / "first.jsonl"))
    rows = [json.loads(line) for line in (tmp_path / "first.jsonl").read_text().splitlines()]
    assert len(rows) == 40, out.output
    cal = _invoke("calibrate", "--run", first, "--label", "difficulty", "--format", "json", "--no-write")
    assert "over 40 prompts; 0 measured prompts without a label" in " ".join(cal.output.split())
    assert sum(group["prompts"] for group in json.loads(cal.stdout[cal.stdout.index("[") :])) == 40


def test_loading_the_same_problems_again_keeps_one_file_and_a_changed_row_wins(where):
    store = Store.open()
    _invoke("load", "arithmetic", "--limit", "30")
    first = store.read_table("problems", {"dataset": "arithmetic"})
    _invoke("load", "arithmetic", "--limit", "30")
    assert len(store.files("problems", {"dataset": "arithmetic"})) == 1
    assert store.read_table("problems", {"dataset": "arithmetic"}).equals(first)

    # A later load of some of the same prompts with another answer updates them; the rest stay.
    changed = first.slice(0, 5)
    changed = changed.set_column(changed.schema.get_field_index("answer"), "answer", pa.array(["-1"] * 5))
    store.add_problems(changed, "arithmetic")
    now = store.read_table("problems", {"dataset": "arithmetic"})
    answers = dict(zip(now.column("prompt_id").to_pylist(), now.column("answer").to_pylist(), strict=True))
    assert len(answers) == now.num_rows == 30
    assert all(answers[p] == "-1" for p in changed.column("prompt_id").to_pylist())
    assert [answers[p] for p in first.column("prompt_id").to_pylist()[5:]] == first.column("answer").to_pylist()[5:]
    viewed = store.query("select count(*) n, count(*) filter (where answer = '-1') c from problems").to_pylist()
    assert viewed == [{"n": 30, "c": 5}]


LOADER = """
import sys, time
from typer.testing import CliRunner
from pipeline.cli import app
limit, seed, start = sys.argv[1], sys.argv[2], float(sys.argv[3])
time.sleep(max(0.0, start - time.time()))
args = ["--backend", "simulate", "--no-prefect", "--no-report", "--grade-workers", "1", "--n", "1", "--seed", seed]
for command in (["profile", *args, "--limit", limit], *[["load", "arithmetic", "--limit", limit]] * 3):
    out = CliRunner().invoke(app, command)
    assert out.exit_code == 0, out.output
"""


@pytest.mark.slow
def test_concurrent_loads_of_one_dataset_lose_no_problem(where, tmp_path):
    """Two processes profiling 2,000 and 1,500 problems of one dataset at once (other seeds: other
    problems), then loading them again and again: every problem either loaded is stored once, the
    view agrees, and every prompt of both runs has its problem."""
    import pipeline
    from pipeline import datasets

    script = tmp_path / "loader.py"
    script.write_text(LOADER)
    start = time.time() + 8  # both past their imports, then at once
    env = {**os.environ, "PYTHONPATH": str(Path(pipeline.__file__).parents[1])}  # the package under test
    loads = [(2000, 1), (1500, 2)]
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(limit), str(seed), str(start)], env=env, stderr=subprocess.PIPE
        )
        for limit, seed in loads
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err.decode()[-2000:]
    profiled, loaded = set(), set()
    for limit, seed in loads:
        profiled |= set(datasets.load("arithmetic", limit=limit, seed=seed).problems.column("prompt_id").to_pylist())
        loaded |= set(datasets.load("arithmetic", limit=limit).problems.column("prompt_id").to_pylist())
    expected = profiled | loaded
    store = Store.open()
    ids = store.read_table("problems", {"dataset": "arithmetic"}).column("prompt_id").to_pylist()
    assert len(ids) == len(set(ids)) and set(ids) == expected
    assert store.query("select count(distinct prompt_id) d, count(*) n from problems").to_pylist() == [
        {"d": len(expected), "n": len(expected)}
    ]
    orphans = store.query("select count(distinct prompt_id) from samples anti join problems using (prompt_id)")
    assert orphans.column(0).to_pylist() == [0]
    assert store.query("select count(distinct prompt_id) from samples").column(0).to_pylist() == [len(profiled)]


# --- a copied shard ------------------------------------------------------------------------------


def _copy(store: Store, src, dst) -> None:
    store.write_bytes(dst, store.read_bytes(src))


def test_doctor_quarantines_a_shard_copied_under_another_name(where):
    run_id = _profile(12, 4, "--shard-size", "4")
    store = Store.open()
    _copy(store, store.shard_location(run_id, 0), store.shard_location(run_id, 7))
    _copy(store, store.shard_location(run_id, 0), store.shard_location(run_id, 2))  # another shard's name

    out = runner.invoke(app, ["doctor", "--format", "json"])
    assert out.exit_code == 1, out.output
    rows = {r["file"]: r for r in json.loads(out.stdout)}
    assert set(rows) == {f"samples/run_id={run_id}/shard-00007.parquet", f"samples/run_id={run_id}/shard-00002.parquet"}
    assert "no shard of that number" in rows[f"samples/run_id={run_id}/shard-00007.parquet"]["reason"]
    assert "another content" in rows[f"samples/run_id={run_id}/shard-00002.parquet"]["reason"]
    assert all(r["action"].startswith("moved to quarantine/") for r in rows.values())
    assert runner.invoke(app, ["doctor"]).exit_code == 0
    counts = store.query("select count(*) n, count(distinct (prompt_id, sample_idx)) d from samples").to_pylist()
    assert counts == [{"n": 32, "d": 32}]  # shard 2 is gone until a rerun samples it again
    _invoke(*PROFILE, "--limit", "12", "--n", "4", "--seed", "41", "--shard-size", "4")  # the rerun fills shard 2
    assert store.query("select count(*) n, count(distinct (prompt_id, sample_idx)) d from samples").to_pylist() == [
        {"n": 48, "d": 48}
    ]


def test_the_samples_view_never_counts_a_copied_shard(where):
    run_id = _profile(12, 4, "--shard-size", "4")
    store = Store.open()
    _copy(store, store.shard_location(run_id, 0), store.shard_location(run_id, 7))
    counts = store.partition_dir("answer_counts", {"run_id": run_id})
    _copy(store, store.as_location(f"{counts}/shard-00000.parquet"), store.as_location(f"{counts}/shard-00007.parquet"))
    out = _invoke("sql", "select count(*) n, count(distinct (prompt_id, sample_idx)) d from samples", "--format", "csv")
    assert out.stdout.splitlines() == ["n,d", "48,48"]
    assert store.query("select sum(cnt) n from answer_counts").to_pylist() == [{"n": 48}]
    assert not store.exists(store.shard_location(run_id, 7))  # quarantined by the first look
    assert sorted(store.finished_shards(run_id)) == [0, 1, 2]


# --- temporary leftovers -------------------------------------------------------------------------


def test_doctor_removes_a_stale_temporary_upload(where):
    store = Store.open()
    store.write_shard("R", 0, pa.table({"run_id": ["R"], "prompt_id": ["p"], "sample_idx": [0]}))
    stray = store.location("samples", "run_id=R", ".tmp-upload-4f2a")
    store.write_bytes(stray, b"half an upload")
    lease = store.location("runs", "run_id=R", ".lock")
    store.write_bytes(lease, b"{}")
    assert store.doctor() == []  # too fresh: it may be an upload under way
    found = store.doctor(tmp_max_age_s=0)
    assert [(f.file, f.table, f.action) for f in found] == [("samples/run_id=R/.tmp-upload-4f2a", "samples", "removed")]
    assert not store.exists(stray) and store.exists(lease)
    assert store.read_table("samples").num_rows == 1
    assert store.doctor(tmp_max_age_s=0) == []


def test_doctor_cli_removes_a_temporary_upload_older_than_an_hour(data_dir):
    store = Store.open()
    folder = Path(store.partition_dir("samples", {"run_id": "R"}))
    folder.mkdir(parents=True)
    stray = folder / ".tmp-upload-4f2a"
    stray.write_bytes(b"half an upload")
    pq.write_table(pa.table({"x": [1]}), folder.parent.parent / "not-a-table.parquet")  # outside every table
    two_hours_ago = time.time() - 7200
    os.utime(stray, (two_hours_ago, two_hours_ago))
    out = runner.invoke(app, ["doctor", "--format", "json"])
    assert out.exit_code == 1, out.output
    assert [(r["file"], r["action"]) for r in json.loads(out.stdout)] == [
        ("samples/run_id=R/.tmp-upload-4f2a", "removed")
    ]
    assert not stray.exists()
