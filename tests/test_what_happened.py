"""What a command says it did: the rows a profile read, collapsed and skipped; a run it reused or
resumed; shards small enough that a killed slow run keeps work; no data directory left behind by a
command that fails or only reads."""

from __future__ import annotations

import json

import pytest
from pipeline.flows import executors
from typer.testing import CliRunner

from pipeline import run
from pipeline.cli import app
from pipeline.cli.commands.profile import reuse_line
from pipeline.errors import SamplingError
from pipeline.run.config import default_shard_size
from pipeline.sample.gguf import BUNDLED_NAME
from pipeline.store import Store

runner = CliRunner()
SIM = ["--backend", "simulate", "--no-prefect", "--no-report", "--grade-workers", "1"]


def _profile(*args: str) -> list[str]:
    out = runner.invoke(app, ["profile", *SIM, *args])
    assert out.exit_code == 0, out.output
    return out.output.splitlines()


# --- the load -------------------------------------------------------------------------------------


def test_profile_says_what_its_load_read_collapsed_and_skipped(data_dir, tmp_path, close_engines):
    rows = [
        {"problem": "What is 2 + 2?", "answer": "4"},
        {"problem": "What is  2 + 2? ", "answer": "4"},  # the same problem once whitespace is collapsed
        {"problem": "What is 3 + 5?", "answer": "8"},
        {"problem": "What is 7 x 6?", "answer": " "},  # no gold answer
        {"problem": "", "answer": "5"},  # no problem
        {"problem": "What is 9 - 4?", "answer": "5"},
    ]
    path = tmp_path / "mixed.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    lines = _profile("--data-file", str(path), "--n", "2")
    assert (
        lines[0]
        == "read 6 rows: 1 duplicate collapsed, 2 skipped (empty_answer: 1, empty_problem: 1); profiled 3 prompts"
    )
    lines = _profile("--data-file", str(path), "--n", "2", "--limit", "2")
    assert lines[0] == "read 6 rows: 1 duplicate collapsed, 3 past --limit; profiled 2 prompts"


def test_profile_of_the_verl_file_says_what_it_left_out_and_a_second_one_what_it_reused(
    data_dir, shared, close_engines
):
    verl = str(shared / "deepscaler" / "verl_train_sub.parquet")
    first = _profile("--data-file", verl, "--n", "1")
    assert first[0] == "read 1,209 rows: 2 duplicates collapsed, 1 skipped (empty_answer: 1); profiled 1,206 prompts"
    assert not any("already done" in line or "resumed" in line for line in first)
    second = _profile("--data-file", verl, "--n", "1")
    run_id = Store.open(data_dir).list_runs().column("run_id")[0].as_py()
    shards = -(-1206 // 256)
    assert second[0] == first[0]
    assert second[1] == (
        f"run {run_id} already done: nothing sampled, its {shards} stored shards reused "
        "(the analysis and verdict computed again from them)"
    )


def test_a_resumed_run_says_how_many_shards_it_reused(store, dies_after, close_engines):
    cfg = run.ProfileConfig.build(backend="simulate", limit=7, n=2, shard_size=2, grade_workers=1, report=False)
    with pytest.raises(SamplingError, match="killed"):
        run.profile(cfg, store, dies_after(cfg, 1))
    result = executors.profile_direct(cfg, store)
    reuse = result.details["reuse"]
    assert reuse == {"status_before": "failed", "shards": 4, "shards_reused": 1}
    assert reuse_line(result.run_id, reuse) == (
        f"run {result.run_id} resumed: 1 of 4 shards stored by an earlier start, 3 sampled now"
    )
    assert result.details["load"]["prompts"] == 7 and result.details["load"]["rows_read"] == 7
    fresh = executors.profile_direct(cfg.with_settings(seed=1), store)  # another run id: nothing reused
    assert fresh.details["reuse"] == {"status_before": None, "shards": 4, "shards_reused": 0}
    assert reuse_line(fresh.run_id, fresh.details["reuse"]) is None


# --- the shard size -------------------------------------------------------------------------------


def test_the_default_shard_size_follows_the_expected_work():
    assert default_shard_size("xllamacpp", 8, 1024) == 4  # MATH-500 on the bundled model: minutes a shard
    assert default_shard_size("xllamacpp", 8, 24) == 170  # the bundled set: its 45 prompts stay one shard
    assert default_shard_size("vllm", 16, 1024) == 64
    assert default_shard_size("openai", 8, 1024) == 128
    assert default_shard_size("simulate", 64, 4096) == 256  # no work per token
    assert default_shard_size("xllamacpp", 64, 4096) == 1  # never below one prompt
    assert default_shard_size("vllm", 1, 1) == 256  # never above the most
    assert run.ProfileConfig.build(shard_size=7).execution.shard_size == 7  # --shard-size wins
    assert run.ProfileConfig.build().execution.shard_size == 170
    adaptive = run.ProfileConfig.build(data_file="x.jsonl", adaptive="band", n_min=4)
    assert adaptive.execution.shard_size == 2**15 // (4 * 1024)


def test_ten_math500_prompts_on_the_bundled_model_are_several_shards_of_one_run_id(tmp_path, shared):
    """A kill after 10 minutes of 10 MATH-500 prompts kept nothing: they were one shard of 256."""
    settings = {"data_file": str(shared / "math500" / "test.jsonl"), "limit": 10}
    default = run.prepare_run(run.ProfileConfig.build(**settings), Store.open(tmp_path / "a"), BUNDLED_NAME)
    assert [len(shard) for shard in default.entries] == [4, 4, 2]
    one = run.prepare_run(run.ProfileConfig.build(**settings, shard_size=256), Store.open(tmp_path / "b"), BUNDLED_NAME)
    assert len(one.entries) == 1
    assert default.run_id == one.run_id  # the shard size is not the run's identity


# --- the data directory ---------------------------------------------------------------------------


@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    """A folder with no data directory, the default data directory (./difficulty-data) in it."""
    monkeypatch.delenv("DIFFICULTY_DATA", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_failing_or_reading_command_leaves_no_data_directory(elsewhere, close_engines):
    out = runner.invoke(app, ["export", "--run", "abc123", "--output", "o.parquet"])
    assert out.exit_code == 1 and "known runs: none (there is no data directory at" in out.output
    for args in (["runs"], ["sql", "select 1"], ["drift"]):
        out = runner.invoke(app, args)
        assert out.exit_code == 0, out.output
    out = runner.invoke(app, ["profile", *SIM, "--dataset", "no-such-set"])
    assert out.exit_code == 1 and "unknown dataset 'no-such-set'" in out.output
    out = runner.invoke(app, ["load", "--data-file", "missing.jsonl", "--data-dir", "a/b/c"])
    assert out.exit_code == 1 and "does not exist" in out.output
    assert sorted(p.name for p in elsewhere.iterdir()) == [], "a command that failed or only read made a folder"


def test_a_data_directory_that_holds_something_stays(elsewhere, close_engines):
    path = elsewhere / "a.jsonl"
    path.write_text(json.dumps({"problem": "What is 1 + 1?", "answer": "2"}) + "\n")
    assert runner.invoke(app, ["load", "--data-file", str(path)]).exit_code == 0
    assert (elsewhere / "difficulty-data" / "problems").is_dir()
    out = runner.invoke(app, ["profile", *SIM, "--dataset", "no-such-set"])
    assert out.exit_code == 1
    assert (elsewhere / "difficulty-data" / "problems").is_dir()  # made before this command: kept
    (elsewhere / "empty").mkdir()
    out = runner.invoke(app, ["profile", *SIM, "--dataset", "no-such-set", "--data-dir", "empty"])
    assert out.exit_code == 1 and (elsewhere / "empty").is_dir()  # an empty folder the user made: kept
