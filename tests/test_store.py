import subprocess
import sys
import textwrap

import pyarrow as pa
import pytest

from pipeline import datasets, schema, store


def _problems(n=5):
    return datasets.load("arithmetic", limit=n).problems


def test_parquet_and_duckdb_round_trip(data_dir):
    store.resolve_data_dir(data_dir)
    table = _problems()
    store.write_table(data_dir, "problems", table, {"dataset": "arithmetic"})
    back = store.read_table(data_dir, "problems")
    assert back.equals(table)
    got = store.query(data_dir, "select prompt_id, answer from problems where difficulty = ? order by prompt_id", [1.0])
    want = sorted((r["prompt_id"], r["answer"]) for r in table.to_pylist() if r["difficulty"] == 1.0)
    assert list(zip(got.column("prompt_id").to_pylist(), got.column("answer").to_pylist(), strict=False)) == want


def test_numeric_looking_partition_values_stay_strings(data_dir):
    samples = pa.table({"run_id": ["0123"], "prompt_id": ["007"], "sample_idx": [0]})
    store.write_shard(data_dir, "0123", 0, samples)
    got = store.query(data_dir, "select run_id, typeof(run_id) t from samples")
    assert got.to_pylist() == [{"run_id": "0123", "t": "VARCHAR"}]


def test_empty_views_exist_on_fresh_dir(data_dir):
    store.resolve_data_dir(data_dir)
    assert store.query(data_dir, "select count(*) n from samples").to_pylist() == [{"n": 0}]


def test_interrupted_write_leaves_previous_table(data_dir):
    store.resolve_data_dir(data_dir)
    table = _problems(4)
    path = store.write_table(data_dir, "problems", table, {"dataset": "arithmetic"})
    # A second writer dies (kill -9) halfway through writing a bigger version.
    script = textwrap.dedent(
        f"""
        import os, pyarrow.parquet as pq
        from pipeline import datasets, store
        real = pq.ParquetWriter.write_table
        def die(self, *a, **k):
            real(self, *a, **k)
            os.kill(os.getpid(), 9)
        pq.ParquetWriter.write_table = die
        bigger = datasets.load("arithmetic", limit=50).problems
        store.write_table({str(data_dir)!r}, "problems", bigger, {{"dataset": "arithmetic"}})
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True)
    assert proc.returncode == -9
    assert store.read_table(data_dir, "problems").equals(table)
    assert path.exists()
    assert store.query(data_dir, "select count(*) n from problems").to_pylist() == [{"n": 4}]


def test_run_registry_and_shards(data_dir):
    store.resolve_data_dir(data_dir)
    store.register_run(data_dir, {"run_id": "r1", "dataset": "arithmetic", "params": {"n": 4}, "n_prompts": 3})
    run = store.get_run(data_dir, "r1")
    assert run["status"] == "created" and run["params"] == '{"n": 4}'
    store.set_run_status(data_dir, "r1", "done")
    assert store.get_run(data_dir, "r1")["created_at"] == run["created_at"]
    assert store.list_runs(data_dir).column("status").to_pylist() == ["done"]
    with pytest.raises(store.StoreError, match="unknown run 'nope'.*r1"):
        store.get_run(data_dir, "nope")
    assert store.finished_shards(data_dir, "r1") == set()
    store.write_shard(data_dir, "r1", 3, pa.table({"run_id": ["r1"], "prompt_id": ["p"], "sample_idx": [0]}))
    assert store.finished_shards(data_dir, "r1") == {3}


def test_conform_rejects_unknown_and_missing_required(data_dir):
    with pytest.raises(store.StoreError, match="no columns"):
        store.write_table(
            data_dir, "samples", pa.table({"run_id": ["r"], "prompt_id": ["p"], "sample_idx": [0], "bogus": [1]})
        )
    with pytest.raises(store.StoreError, match="needs column 'prompt_id'"):
        store.write_table(data_dir, "samples", pa.table({"run_id": ["r"]}))


def test_unsafe_partition_value_rejected(data_dir):
    with pytest.raises(store.StoreError, match="unsafe"):
        store.write_table(data_dir, "problems", _problems(1), {"dataset": "../escape"})


def test_unwritable_data_dir_file_in_the_way(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(store.StoreError, match="not writable"):
        store.resolve_data_dir(blocker / "data")


def test_load_sql_by_name(data_dir):
    store.resolve_data_dir(data_dir)
    store.write_shard(
        data_dir,
        "r1",
        0,
        pa.table(
            {
                "run_id": ["r1"] * 3,
                "prompt_id": ["a", "a", "b"],
                "sample_idx": [0, 1, 0],
                "correct": [True, False, None],
            }
        ),
    )
    files = [str(f) for f in store.partition_files(data_dir, "samples", {"run_id": "r1"})]
    got = store.query(data_dir, store.load_sql("prompt_counts"), {"files": files})
    assert got.to_pylist() == [{"prompt_id": "a", "n": 2, "c": 1}, {"prompt_id": "b", "n": 1, "c": 0}]
    with pytest.raises(store.StoreError, match="no query named"):
        store.load_sql("does_not_exist")


def test_schemas_cover_tables():
    for name in ("problems", "runs", "samples"):
        assert name in schema.SCHEMAS
