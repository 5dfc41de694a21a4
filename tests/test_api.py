"""``pipeline.open``: a data directory read-only from Python, as a notebook user calls it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import pipeline
from pipeline.cli import app
from pipeline.errors import StoreError

runner = CliRunner()


def simulate(data_dir: str | Path, *extra: str) -> str:
    """A finished simulate run of 12 prompts x 4 samples in ``data_dir``; its run id."""
    args = ["profile", "--backend", "simulate", "--no-prefect", "--limit", "12", "--n", "4", "--grade-workers", "1"]
    out = runner.invoke(app, [*args, "--data-dir", str(data_dir), *extra])
    assert out.exit_code == 0, out.output
    return re.search(r"^run (\S+) done", out.output, re.M).group(1)  # the verdict follows that line


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory) -> tuple[Path, str, str]:
    """A data directory with two runs (the second with its report); read-only for the tests."""
    path = tmp_path_factory.mktemp("api") / "data"
    first = simulate(path, "--no-report")
    second = simulate(path, "--seed", "1", "--n", "6")
    return path, first, second


def files_under(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def test_sql_is_a_duckdb_relation_over_every_view(two_runs):
    path, first, second = two_runs
    with pipeline.open(path) as data:
        counts = data.sql("select run_id, count(*) as n from samples group by run_id order by n")
        assert counts.fetchall() == [(first, 12 * 4), (second, 12 * 6)]
        frame = counts.pl()
        assert isinstance(frame, pl.DataFrame) and frame["n"].to_list() == [48, 72]
        assert counts.df()["n"].tolist() == [48, 72]
        assert counts.to_arrow_table().column("run_id").to_pylist() == [first, second]
        assert isinstance(counts.arrow(), pa.RecordBatchReader | pa.Table)
        bound = data.sql("select count(*) from prompt_stats where run_id = $run", {"run": second})
        assert bound.fetchall() == [(12,)]
        for view in pipeline.Tables.views:  # every table and derived view is there, even when empty
            assert data.sql(f"select count(*) from {view}").fetchall()[0][0] >= 0


def test_runs_analysis_and_report_path(two_runs):
    path, first, second = two_runs
    data = pipeline.open(path)
    runs = data.runs()
    assert runs.pl()["run_id"].to_list() == [second, first]  # newest first, as `difficulty runs`
    assert set(runs.pl()["status"]) == {"done"}
    analysis = data.analysis(first)
    assert isinstance(analysis, pipeline.Analysis)
    stats = analysis.prompt_stats.pl()
    assert stats.height == 12 and set(stats["run_id"]) == {first} and set(stats["n"]) == {4}
    for table in (analysis.weights, analysis.summary, analysis.allocation):
        rows = table.pl()
        assert rows.height > 0 and set(rows["run_id"]) == {first}
    assert data.analysis(second).prompt_stats.pl()["n"].unique().to_list() == [6]
    # The notebook page's example: relations build on each other in DuckDB.
    observed = analysis.summary.filter("section = 'zero_signal' and metric = 'observed'").pl()
    assert observed.height > 0 and set(observed["metric"]) == {"observed"}
    bands = analysis.prompt_stats.aggregate("round(pass_rate, 1) as band, count(*) as prompts").pl()
    assert bands["prompts"].sum() == 12
    report = data.report_path(second)
    assert Path(report) == path / "reports" / f"{second}.html" and Path(report).is_file()
    with pytest.raises(StoreError, match=f"no report.*difficulty report --run {first}"):
        data.report_path(first)
    with pytest.raises(StoreError, match=rf"no run 'nope'.*newest runs: \['{second}', '{first}'\]"):
        data.analysis("nope")
    data.close()


def test_read_only_and_confined(two_runs, tmp_path):
    path, first, _ = two_runs
    before = files_under(path)
    outside = tmp_path / "outside.parquet"
    pq.write_table(pa.table({"secret": [1]}), outside)
    data = pipeline.open(path)
    with pytest.raises(StoreError, match="refused.*outside.parquet.*may only use the views and files under"):
        data.sql(f"select * from read_parquet('{outside}')").fetchall()
    with pytest.raises(StoreError, match="refused COPY statement: sql is read-only"):
        data.sql(f"copy (select * from runs) to '{path}/copy.csv'")
    with pytest.raises(StoreError, match="refused CREATE statement"):
        data.sql("create table t as select 1")
    with pytest.raises(StoreError, match="exactly one statement, got 2"):
        data.sql("select 1; select 2")
    with pytest.raises(StoreError, match="refused SET statement"):
        data.sql("set enable_external_access = true")
    # Files inside the directory stay readable by path, as in `difficulty sql`.
    inside = data.sql(f"select count(*) from read_parquet('{path}/samples/run_id={first}/*.parquet')")
    assert inside.fetchall() == [(48,)]
    data.close()
    assert files_under(path) == before  # nothing written, nothing moved


def test_open_creates_nothing_and_names_the_missing_directory(tmp_path, monkeypatch):
    missing = tmp_path / "no-such-dir"
    with pytest.raises(StoreError, match="no data directory at .*no-such-dir"):
        pipeline.open(missing)
    assert not missing.exists()
    monkeypatch.setenv("DIFFICULTY_DATA", str(missing))  # the default is the command line's
    with pytest.raises(StoreError, match="no-such-dir"):
        pipeline.open()


def test_import_pipeline_stays_cheap():
    code = (
        "import sys, pipeline\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'duckdb', 'pyarrow', 'numpy', 'typer', 'polars'}))\n"
        "print(pipeline.open.__module__, pipeline.Tables.__name__)\n"
        "try:\n    pipeline.nope\nexcept AttributeError as exc:\n    print(exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines() == ["[]", "pipeline.api Tables", "module 'pipeline' has no attribute 'nope'"]


def test_open_on_s3(s3_data, tmp_path):
    run_id = simulate(s3_data, "--no-report")
    outside = tmp_path / "local.parquet"
    pq.write_table(pa.table({"x": [1]}), outside)
    with pipeline.open(s3_data) as data:
        assert str(data.root) == s3_data
        assert data.sql("select count(*) from samples").fetchall() == [(48,)]
        assert data.runs().pl()["run_id"].to_list() == [run_id]
        assert data.analysis(run_id).prompt_stats.pl().height == 12
        with pytest.raises(StoreError, match="refused.*local.parquet"):
            data.sql(f"select * from read_parquet('{outside}')").fetchall()
    with pytest.raises(StoreError, match="no data directory"):
        pipeline.open(s3_data.rsplit("/", 1)[0] + "/elsewhere")
    assert os.environ["DIFFICULTY_DATA"] == s3_data
