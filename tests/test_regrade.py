"""`difficulty regrade`: a stored run graded again without sampling, as a run of its own."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pipeline.flows import executors
from typer.testing import CliRunner

from pipeline import grade, run
from pipeline.cli import app
from pipeline.errors import ConfigError
from pipeline.ingest import ImportConfig, import_rollouts
from pipeline.regrade import regrade, regrade_id
from pipeline.store import Store

ROLLOUTS = [
    {"problem": "half of one", "answer": "\\frac{1}{2}", "completion": "so \\boxed{\\dfrac12}"},
    {"problem": "half of one", "answer": "\\frac{1}{2}", "completion": "so \\boxed{0.5}"},
    {"problem": "root two", "answer": "\\sqrt{2}", "completion": "it is \\boxed{\\sqrt 2}"},
    {"problem": "root two", "answer": "\\sqrt{2}", "completion": "it is \\boxed{2}"},
]


def _imported(tmp_path) -> tuple[Store, str]:
    path = tmp_path / "rollouts.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in ROLLOUTS))
    store = Store.open(tmp_path / "data")
    info = import_rollouts(ImportConfig(input=str(path), report=False, grade_workers=1), store)
    return store, info.run_id


def _verdicts(store: Store, run_id: str) -> dict:
    rows = store.query(
        "select prompt_id, sample_idx, grade_status, grader from samples where run_id = $r", {"r": run_id}
    ).to_pylist()
    return {(r["prompt_id"], r["sample_idx"]): (r["grade_status"], r["grader"]) for r in rows}


def test_regrade_changes_verdicts_and_keeps_the_source(tmp_path):
    store, source = _imported(tmp_path)
    before = _verdicts(store, source)
    files = {p: p.stat().st_mtime_ns for p in store.shard_files(source).values()}
    config = grade.GradeConfig(workers=1, use_math_verify=False)  # exact numeric + string matching
    info = regrade(store, source, config, report=False)
    new = info.run_id
    assert new == regrade_id(source, grade.grader_version(config)) != source
    after = _verdicts(store, new)
    assert after.keys() == before.keys()
    assert {g for _, g in after.values()} == {grade.grader_version(config)}
    assert {g for _, g in before.values()} == {grade.grader_version(grade.GradeConfig())}
    # \dfrac12 and \sqrt 2 are right for math-verify, not as strings: two verdicts change.
    assert info.details["changed"] == {"correct -> incorrect": 2}
    assert sum(before[k][0] != after[k][0] for k in before) == 2
    # The source run is untouched; the regrade has its own analysis and allocation.
    assert _verdicts(store, source) == before
    assert {p: p.stat().st_mtime_ns for p in store.shard_files(source).values()} == files
    stats = store.query("select run_id, sum(c) c from prompt_stats group by 1 order by 1").to_pylist()
    assert stats == [{"run_id": source, "c": 3}, {"run_id": new, "c": 1}]
    assert store.read_table("allocation", {"run_id": new}).num_rows == 2
    assert store.get_run(new).params["regraded_from"] == source
    with pytest.raises(ConfigError, match=re.escape(f"graded by {grade.grader_version(config)} already")):
        regrade(store, new, config)


def test_regrade_command(tmp_path):
    store, source = _imported(tmp_path)
    out = CliRunner().invoke(
        app, ["regrade", "--run", source, "--no-math-verify", "--no-report", "--data-dir", str(store.root)]
    )
    assert out.exit_code == 0, out.output
    assert "verdicts changed: correct -> incorrect: 2" in out.output
    missing = CliRunner().invoke(app, ["regrade", "--run", "nope", "--data-dir", str(store.root)])
    assert missing.exit_code == 1 and "unknown run 'nope'" in missing.output


@pytest.mark.slow
@pytest.mark.faults
def test_a_killed_regrade_resumes_without_mixing_gradings(tmp_path):
    store = Store.open(tmp_path / "data")
    cfg = run.ProfileConfig.build(backend="simulate", limit=3000, n=8, shard_size=10, grade_workers=1, report=False)
    source = executors.profile_direct(cfg, store).run_id
    grader = grade.grader_version(grade.GradeConfig(use_math_verify=False))
    new = regrade_id(source, grader)
    cmd = [str(Path(sys.executable).parent / "difficulty"), "regrade", "--run", source, "--no-math-verify"]
    cmd += ["--no-report", "--grade-workers", "1", "--data-dir", str(store.root)]
    proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    folder = store.partition_dir("samples", {"run_id": new})
    try:
        deadline = time.monotonic() + 120
        while not list(folder.glob("shard-*.parquet")):
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "no regraded shard in time"
            time.sleep(0.01)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    written = len(list(folder.glob("shard-*.parquet")))
    assert 1 <= written < 300, f"the kill came too late to test anything: {written} shards"
    assert {r["run_id"]: r["status"] for r in store.list_runs().to_pylist()}[new] == "interrupted"

    rerun = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    samples = store.read_table("samples", {"run_id": new})
    keys = set(zip(samples.column("prompt_id").to_pylist(), samples.column("sample_idx").to_pylist(), strict=True))
    assert samples.num_rows == len(keys) == 3000 * 8
    assert set(samples.column("grader").to_pylist()) == {grader}
    assert store.get_run(new).status == "done"
    assert store.read_table("samples", {"run_id": source}).num_rows == 3000 * 8
