import json
import subprocess
import sys
import textwrap
from dataclasses import replace

import pyarrow as pa
import pytest

from pipeline import adaptive, datasets, schema
from pipeline.errors import RunRecordError, StoreError
from pipeline.prior import Prior
from pipeline.store import RoundCount, RunRecord, Store, load_sql


def _problems(n=5):
    return datasets.load("arithmetic", limit=n).problems


def test_parquet_and_duckdb_round_trip(data_dir):
    Store.open(data_dir)
    table = _problems()
    Store(data_dir).write_table("problems", table, {"dataset": "arithmetic"})
    back = Store(data_dir).read_table("problems")
    assert back.equals(table)
    got = Store(data_dir).query("select prompt_id, answer from problems where difficulty = ? order by prompt_id", [1.0])
    want = sorted((r["prompt_id"], r["answer"]) for r in table.to_pylist() if r["difficulty"] == 1.0)
    assert list(zip(got.column("prompt_id").to_pylist(), got.column("answer").to_pylist(), strict=False)) == want


def test_numeric_looking_partition_values_stay_strings(data_dir):
    samples = pa.table({"run_id": ["0123"], "prompt_id": ["007"], "sample_idx": [0]})
    Store(data_dir).write_shard("0123", 0, samples)
    got = Store(data_dir).query("select run_id, typeof(run_id) t from samples")
    assert got.to_pylist() == [{"run_id": "0123", "t": "VARCHAR"}]


def test_empty_views_exist_on_fresh_dir(data_dir):
    Store.open(data_dir)
    assert Store(data_dir).query("select count(*) n from samples").to_pylist() == [{"n": 0}]


def test_empty_views_have_the_types_of_written_tables(data_dir):
    """An empty table's view is built from the declared columns without pyarrow; a table written
    with the pyarrow schema must read back with the same DuckDB types, every table, every column."""
    store = Store.open(data_dir)
    con = store.connect()
    for table, columns in schema.TABLES.items():
        empty = con.sql(f"describe {table}").fetchall()
        assert [(name, kind) for name, kind, *_ in empty] == [(c.name, schema.duckdb_type(c.type)) for c in columns]
        written = con.from_arrow(schema.SCHEMAS[table].empty_table())
        assert [str(t) for t in written.types] == [kind for _, kind, *_ in empty], table
        assert schema.SCHEMAS[table].names == [c.name for c in columns]
        assert [f.nullable for f in schema.SCHEMAS[table]] == [c.nullable for c in columns]
    con.close()


def test_interrupted_write_leaves_previous_table(data_dir):
    Store.open(data_dir)
    table = _problems(4)
    path = Store(data_dir).write_table("problems", table, {"dataset": "arithmetic"})
    # A second writer dies (kill -9) halfway through writing a bigger version.
    script = textwrap.dedent(
        f"""
        import os, pyarrow.parquet as pq
        from pipeline import datasets
        from pipeline.store import Store
        real = pq.ParquetWriter.write_table
        def die(self, *a, **k):
            real(self, *a, **k)
            os.kill(os.getpid(), 9)
        pq.ParquetWriter.write_table = die
        bigger = datasets.load("arithmetic", limit=50).problems
        Store({str(data_dir)!r}).write_table("problems", bigger, {{"dataset": "arithmetic"}})
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True)
    assert proc.returncode == -9
    assert Store(data_dir).read_table("problems").equals(table)
    assert path.exists()
    assert Store(data_dir).query("select count(*) n from problems").to_pylist() == [{"n": 4}]


def test_run_registry_and_shards(data_dir):
    Store.open(data_dir)
    Store(data_dir).register_run(RunRecord("r1", dataset="arithmetic", params={"n": 4}, n_prompts=3))
    run = Store(data_dir).get_run("r1")
    assert run.status == "created" and run.params == {"n": 4}
    assert Store(data_dir).list_runs().column("params").to_pylist() == ['{"n": 4}']  # stored as JSON
    Store(data_dir).set_run_status("r1", "done")
    assert Store(data_dir).get_run("r1").created_at == run.created_at
    assert Store(data_dir).list_runs().column("status").to_pylist() == ["done"]
    with pytest.raises(StoreError, match="unknown run 'nope'.*r1"):
        Store(data_dir).get_run("nope")
    assert Store(data_dir).finished_shards("r1") == set()
    Store(data_dir).write_shard("r1", 3, pa.table({"run_id": ["r1"], "prompt_id": ["p"], "sample_idx": [0]}))
    assert Store(data_dir).finished_shards("r1") == {3}


def _raw_row(store: Store, run_id: str, **columns) -> None:
    """Overwrite columns of a run's stored row as they are, past the encoder."""
    row = store.read_table("runs", {"run_id": run_id}).to_pylist()[0] | columns
    store.write_table("runs", pa.Table.from_pylist([row], schema=schema.RUNS), {"run_id": run_id}, part="run")


def test_run_record_round_trip(store):
    """Adaptive settings, prior and rounds go in typed and come back equal; the columns hold the
    JSON the pipeline has always written (so rows already stored read the same)."""
    acfg = adaptive.AdaptiveConfig.from_specs("band:cost=0", n_min=4, n_max=32, prior="grid")
    prior = Prior(0.4, 0.7, method="grid", n_prompts=3, points=(0.0, 0.5, 1.0), weights=(0.25, 0.5, 0.25))
    rounds = (RoundCount(0, 3, 12, 1, 2), RoundCount(1, 2, 8, 1, 0))
    store.register_run(RunRecord("r1", dataset="d", params={"b": 1, "a": [2]}, adaptive=acfg, status="sampling"))
    store.update_run("r1", prior=prior, rounds=rounds)
    run = store.get_run("r1")
    assert (run.adaptive, run.prior, run.rounds, run.params) == (acfg, prior, rounds, {"b": 1, "a": [2]})
    [row] = store.read_table("runs", {"run_id": "r1"}).to_pylist()
    assert row["adaptive"] == json.dumps(acfg.to_dict(), sort_keys=True)
    assert row["prior"] == json.dumps(prior.to_dict(), sort_keys=True)
    assert (row["prior_a"], row["prior_b"]) == (0.4, 0.7)
    assert json.loads(row["rounds"])[0] == {"round": 0, "prompts": 3, "rollouts": 12, "shards": 1, "open_after": 2}
    assert store.set_run_status("r1", "done") == replace(run, status="done", updated_at=store.get_run("r1").updated_at)
    # a later registration of the same run keeps what it does not give (the rounds so far)
    store.register_run(RunRecord("r1", status="sampling"))
    assert store.get_run("r1").rounds == rounds and store.get_run("r1").created_at == run.created_at


@pytest.mark.parametrize(
    ("column", "text"),
    [
        ("adaptive", "{not json"),
        ("adaptive", '{"target": "band", "n_min": 9, "n_max": 4}'),  # valid JSON, invalid settings
        ("prior", "[1, 2]"),
        ("prior", '{"a": "x", "b": 1.0}'),
        ("rounds", '[{"round": 0, "prompts": "many"}]'),
        ("params", "null-ish"),
    ],
)
def test_a_corrupt_run_row_is_one_named_error(store, column, text):
    store.register_run(RunRecord("r1", dataset="d", status="done"))
    _raw_row(store, "r1", **{column: text})
    with pytest.raises(RunRecordError, match=f"run r1: its registry field {column} = .* cannot be read"):
        store.get_run("r1")
    with pytest.raises(RunRecordError):  # the writers read the row first: nothing is written over it
        store.set_run_status("r1", "failed")
    assert store.read_table("runs", {"run_id": "r1"}).column(column).to_pylist() == [text]


def test_conform_rejects_unknown_and_missing_required(data_dir):
    with pytest.raises(StoreError, match="no columns"):
        Store(data_dir).write_table(
            "samples", pa.table({"run_id": ["r"], "prompt_id": ["p"], "sample_idx": [0], "bogus": [1]})
        )
    with pytest.raises(StoreError, match="needs column 'prompt_id'"):
        Store(data_dir).write_table("samples", pa.table({"run_id": ["r"]}))


def test_unsafe_partition_value_rejected(data_dir):
    with pytest.raises(StoreError, match="unsafe"):
        Store(data_dir).write_table("problems", _problems(1), {"dataset": "../escape"})


def test_unwritable_data_dir_file_in_the_way(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StoreError, match="not writable"):
        Store.open(blocker / "data")


def test_load_sql_by_name(data_dir):
    Store.open(data_dir)
    Store(data_dir).write_shard(
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
    files = [str(f) for f in Store(data_dir).files("samples", {"run_id": "r1"})]
    got = Store(data_dir).query(load_sql("prompt_counts"), {"files": files})
    assert got.to_pylist() == [{"prompt_id": "a", "n": 2, "c": 1}, {"prompt_id": "b", "n": 1, "c": 0}]
    with pytest.raises(StoreError, match="no query named"):
        load_sql("does_not_exist")


def test_pass_rate_spread_splits_at_the_bound_edges():
    """``sql/pass_rate_spread.sql`` takes the band edges as parameters (``schema.edge_params``, the
    default ones) and names each band by them."""
    prompt_stats = pa.table({"run_id": ["r"] * 6, "n": [10] * 6, "c": [0, 1, 3, 5, 8, 10]})

    def spread(edges: dict) -> dict:
        got = Store.tables_query("pass_rate_spread", {"prompt_stats": prompt_stats}, {"run_id": "r", **edges})
        return dict(zip(got.column("pass_rate").to_pylist(), got.column("prompts").to_pylist(), strict=True))

    assert spread(schema.edge_params()) == {
        "0 (all wrong)": 1,
        "[0.1, 0.4)": 2,
        "[0.4, 0.6]": 1,
        "(0.6, 0.9]": 1,
        "1 (all right)": 1,
    }
    assert spread({"lo": 0.2, "mid_lo": 0.3, "mid_hi": 0.7, "hi": 0.75}) == {
        "0 (all wrong)": 1,
        "(0, 0.2)": 1,
        "[0.3, 0.7]": 2,
        "(0.75, 1)": 1,
        "1 (all right)": 1,
    }


def test_schemas_cover_tables():
    for name in ("problems", "runs", "samples"):
        assert name in schema.SCHEMAS


def test_store_is_its_own_serialised_form(tmp_path):
    from dataclasses import asdict

    store = Store.open(tmp_path / "d")
    assert Store(**asdict(store)) == store
    assert Store(str(tmp_path / "d")).root == store.root
    assert store.report_path("r1") == store.root / "reports" / "r1.html"


def test_replace_partition_keeps_one_file(store):
    store.write_table("summary", pa.table({"run_id": ["r"], "section": ["a"], "metric": ["m"]}), {"run_id": "r"}, "old")
    store.replace_partition("summary", pa.table({"run_id": ["r"], "section": ["b"], "metric": ["m"]}), {"run_id": "r"})
    assert [f.name for f in store.files("summary", {"run_id": "r"})] == ["part-0.parquet"]
    assert store.read_table("summary").column("section").to_pylist() == ["b"]


def test_run_status_is_checked(store):
    store.register_run(RunRecord("r1"))
    with pytest.raises(StoreError, match="run status 'finished' is unknown"):
        store.set_run_status("r1", "finished")
    assert store.get_run("r1").status == "created"


def test_derived_views_exist_and_errors_are_named(store):
    assert store.query("select count(*) n from history_drift").to_pylist() == [{"n": 0}]
    with pytest.raises(StoreError, match="no_such_table"):
        store.query("select * from no_such_table")


def test_errors_share_one_base():
    from pipeline import errors

    for name in ("DatasetError", "SamplingError", "StoreError", "ReportError", "ConfigError", "MissingFileError"):
        assert issubclass(getattr(errors, name), errors.PipelineError), name
    assert issubclass(errors.ConfigError, ValueError) and issubclass(errors.MissingFileError, FileNotFoundError)
