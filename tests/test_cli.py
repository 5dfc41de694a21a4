import json

import pyarrow.parquet as pq
from typer.testing import CliRunner

from pipeline.cli import app

runner = CliRunner()


def test_load_then_sql_count(data_dir):
    out = runner.invoke(app, ["load", "arithmetic", "--limit", "20"])
    assert out.exit_code == 0, out.output
    assert "loaded 20 problems" in out.output
    out = runner.invoke(app, ["sql", "select count(*) as n from problems", "--format", "csv"])
    assert out.exit_code == 0, out.output
    assert out.output.splitlines() == ["n", "20"]


def test_sql_formats_and_output_file(data_dir, tmp_path):
    runner.invoke(app, ["load", "arithmetic", "--limit", "9"])
    out = runner.invoke(
        app, ["sql", "select difficulty, count(*) n from problems group by 1 order by 1", "--format", "json"]
    )
    rows = json.loads(out.output)
    assert [r["difficulty"] for r in rows] == list(range(1, 10)) and all(r["n"] == 1 for r in rows)
    target = tmp_path / "out.parquet"
    out = runner.invoke(app, ["sql", "select * from problems", "--format", "parquet", "--output", str(target)])
    assert out.exit_code == 0 and pq.read_table(target).num_rows == 9
    out = runner.invoke(app, ["sql", "select prompt_id from problems limit 3"])
    assert out.exit_code == 0 and "prompt_id" in out.output


def test_sql_error_exit_1_nothing_written(data_dir, tmp_path):
    target = tmp_path / "never.csv"
    out = runner.invoke(app, ["sql", "select nope from problems", "--format", "csv", "--output", str(target)])
    assert out.exit_code == 1
    assert "nope" in out.output
    assert not target.exists()


def test_load_offline_hub_name_fails_with_hint(data_dir):
    out = runner.invoke(app, ["load", "gsm8k"])
    assert out.exit_code == 1 and "--data-file" in out.output


def test_datasets_lists_adapters(data_dir):
    out = runner.invoke(app, ["datasets"])
    assert out.exit_code == 0
    for name in ("gsm8k", "bigmath", "deepmath", "arithmetic"):
        assert name in out.output


def test_runs_empty_and_bad_data_dir(data_dir, tmp_path):
    assert runner.invoke(app, ["runs"]).exit_code == 0
    blocker = tmp_path / "f"
    blocker.write_text("")
    out = runner.invoke(app, ["runs", "--data-dir", str(blocker / "d")])
    assert out.exit_code == 1 and "not writable" in out.output


def test_profile_missing_model_fails_before_any_work(data_dir, tmp_path):
    out = runner.invoke(app, ["profile", "--no-prefect", "--model", str(tmp_path / "missing.gguf"), "--limit", "2"])
    assert out.exit_code == 1
    assert "missing.gguf" in out.output
    assert not (data_dir / "problems").exists() and not (data_dir / "runs").exists()
