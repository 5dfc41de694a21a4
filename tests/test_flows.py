"""The profile under Prefect and without it: retries, resume after failure or kill -9, status,
and the two allocation and report-status bugs of the old flows package."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pipeline.flows import executors, prefect_flows

from pipeline import allocate, run
from pipeline.errors import ConfigError, SamplingError
from pipeline.store import Store

# Model-free runs: the simulate backend answers right with a per-prompt probability; grading,
# storage, analysis and the report are real.
SIM = {"backend": "simulate", "limit": 6, "n": 3, "shard_size": 2, "grade_workers": 1, "report": False}


@pytest.mark.slow
def test_profile_flow_end_to_end_with_llama_cpp(prefect_api, store, tiny, check_complete, close_engines, task_runs):
    cfg = run.ProfileConfig.build(**{**tiny, "report": True})
    result = prefect_flows.profile_flow(cfg, store)
    run_id = result.run_id
    check_complete(store, run_id, cfg.sampling.n, 4)
    assert store.get_run(run_id).status == "done"
    assert store.finished_shards(run_id) == {0, 1}
    for table in ("prompt_stats", "weights", "summary", "allocation"):
        assert store.read_table(table, {"run_id": run_id}).num_rows > 0, table
    # The profile is the observations source profile:<run id>, step 0: each prompt's samples.
    observed = store.read_table("observations", {"source": f"profile:{run_id}"})
    assert observed.num_rows == 4 and set(observed.column("n").to_pylist()) == {cfg.sampling.n}
    assert observed.column("step").to_pylist() == [0] * 4
    assert Path(result.report).is_file()

    # The flow run is named after dataset, model and run id, and has coarse tasks only.
    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName

    with get_client(sync_client=True) as client:
        [fr] = client.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(like_=run_id)))
        assert fr.name == f"arithmetic/{run.run_label(cfg).split('/')[1]}/{run_id}"
        assert fr.state.is_completed()
    runs = task_runs(fr.id, lambda runs: len(runs) >= 5)
    names = sorted(t.name.rsplit("-", 1)[0] if not t.name.startswith("shard") else t.name for t in runs)
    assert names == ["analyze-allocate", "load-and-register", "observe-and-report", "shard-0", "shard-1"]

    # A rerun of the same profile writes nothing new and completes.
    before = {p: p.stat().st_mtime_ns for p in (store.root / "samples").rglob("*.parquet")}
    again = prefect_flows.profile_flow(cfg, store)
    assert again.run_id == run_id
    assert {p: p.stat().st_mtime_ns for p in (store.root / "samples").rglob("*.parquet")} == before


def _prompt_ids(cfg: run.ProfileConfig, store: Store) -> list[str]:
    with executors.open_executor(cfg) as executor:
        return run.prepare_run(cfg, store, executor.model_name).problems.column("prompt_id").to_pylist()


def test_shard_task_is_retried(prefect_api, store, check_complete, close_engines, task_runs):
    ids = _prompt_ids(run.ProfileConfig.build(**SIM), store)
    cfg = run.ProfileConfig.build(**SIM, backend_options={"fail_once": [ids[3]]})  # shard 1 fails once
    result = prefect_flows.profile_flow(cfg, store)
    check_complete(store, result.run_id, 3, 6)
    assert store.get_run(result.run_id).status == "done"
    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName

    with get_client(sync_client=True) as client:
        [fr] = client.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(like_=result.run_id)))

    def shard_1_retried(runs) -> bool:
        return any(t.name == "shard-1" and t.run_count == 2 for t in runs)

    assert shard_1_retried(task_runs(fr.id, shard_1_retried)), "shard 1 was not retried by Prefect"


class FlakyExecutor:
    """The local executor, failing every batch that holds one given prompt (a dead GPU, say)."""

    def __init__(self, inner: run.InlineExecutor, bad_prompt: str) -> None:
        self.inner, self.bad_prompt = inner, bad_prompt
        self.model_name, self.concurrency = inner.model_name, inner.concurrency

    def write_shard(self, store, job):
        if self.bad_prompt in job.problems.column("prompt_id").to_pylist():
            raise SamplingError(f"engine lost on {self.bad_prompt}")
        return self.inner.write_shard(store, job)


def test_failed_run_is_marked_and_rerun_completes(store, check_complete, close_engines):
    """Without Prefect: a shard that keeps failing marks the run failed; a rerun resumes."""
    cfg = run.ProfileConfig.build(**SIM)
    local = run.local_executor(cfg)
    plan = run.prepare_run(cfg, store, local.model_name)
    with pytest.raises(SamplingError, match="engine lost"):
        run.profile(cfg, store, FlakyExecutor(local, plan.problems.column("prompt_id")[4].as_py()))  # shard 2
    assert store.get_run(plan.run_id).status == "failed"
    assert store.finished_shards(plan.run_id) == {0, 1}
    first = (store.root / "samples" / f"run_id={plan.run_id}" / "shard-00000.parquet").stat().st_mtime_ns
    executors.profile_direct(cfg, store)
    check_complete(store, plan.run_id, 3, 6)
    assert store.get_run(plan.run_id).status == "done"
    again = (store.root / "samples" / f"run_id={plan.run_id}" / "shard-00000.parquet").stat().st_mtime_ns
    assert again == first, "a finished shard was redone"


def test_direct_and_prefect_runs_give_the_same_tables(prefect_api, tmp_path, close_engines):
    cfg = run.ProfileConfig.build(**SIM)
    a, b = Store.open(tmp_path / "direct"), Store.open(tmp_path / "prefect")
    ra = executors.profile_direct(cfg, a)
    rb = prefect_flows.profile_flow(cfg, b)
    assert ra.run_id == rb.run_id
    order = [("prompt_id", "ascending"), ("sample_idx", "ascending")]
    sa = (
        a.read_table("samples")
        .sort_by(order)
        .drop_columns(["graded_at"] if "graded_at" in a.read_table("samples").column_names else [])
    )
    sb = (
        b.read_table("samples")
        .sort_by(order)
        .drop_columns(["graded_at"] if "graded_at" in b.read_table("samples").column_names else [])
    )
    assert sa.equals(sb)


def test_report_run_card_shows_done(store, close_engines):
    """Bug of the old flows: the report was rendered before the run was marked done."""
    result = executors.profile_direct(run.ProfileConfig.build(**{**SIM, "report": True}), store)
    html = Path(result.report).read_text()
    assert store.get_run(result.run_id).status == "done"
    assert re.search(r"<dt>Status</dt><dd>(.*?)</dd>", html).group(1) == "done"


def test_two_allocations_of_a_run_never_merge(store, close_engines):
    """Bug of the old flows: profile's default and `allocate --budget 500` summed under one label."""
    cfg = run.ProfileConfig.build(**SIM)
    run_id = executors.profile_direct(cfg, store).run_id
    counts = store.sample_counts(run_id, answers=False)
    custom = allocate.AllocationConfig(budget=50)
    table, _ = allocate.allocate_prompts(
        run_id, counts.column("prompt_id"), counts.column("n").to_numpy(), counts.column("c").to_numpy(), custom
    )
    allocate.write_allocation(store, run_id, table, custom)
    got = store.query(
        "select objective, estimator, budget, posterior, count(*) n, sum(n_rollouts) total "
        "from allocation where run_id = $r group by all order by budget",
        {"r": run_id},
    ).to_pylist()
    default_budget = allocate.DEFAULT_BUDGET_PER_PROMPT * 6
    assert [(g["budget"], g["posterior"], g["n"], g["total"]) for g in got] == sorted(
        [(50, False, 6, 50), (default_budget, True, 6, default_budget)]
    )
    # Computing either again replaces it instead of adding a third.
    executors.profile_direct(cfg, store)
    allocate.write_allocation(store, run_id, table, custom)
    assert store.query("select count(*) n from allocation").to_pylist() == [{"n": 12}]


def test_run_label_and_config_checks():
    assert (
        run.run_label(run.ProfileConfig.build(dataset="gsm8k", model="/m/ckpt-7.gguf"), "abc")
        == "gsm8k/ckpt-7.gguf/abc"
    )
    assert run.run_label(run.ProfileConfig()) == "arithmetic/xllamacpp-default/pending"
    # a schedule of a local file is named after the file, not the bundled set's default name
    gsm8k = run.ProfileConfig.build(data_file="data/gsm8k/test.jsonl", backend="simulate")
    assert run.run_label(gsm8k) == "local-gsm8k-test/simulate-default/pending"
    assert run.run_label(gsm8k, "abc", "gsm8k") == "gsm8k/simulate-default/abc"
    with pytest.raises(ConfigError, match="executor='dask'"):
        run.ProfileConfig.build(executor="dask")
    with pytest.raises(ConfigError, match="replicas=0"):
        run.ProfileConfig.build(replicas=0)
    cfg = run.ProfileConfig.build(**SIM)
    assert run.ProfileConfig.from_dict(cfg.to_dict()) == cfg == run.ProfileConfig.build(**cfg.flat())


@pytest.mark.slow
def test_kill_9_then_rerun_completes_without_gaps_or_duplicates(prefect_api, tmp_path, check_complete):
    """`difficulty profile` killed with SIGKILL after its first shard; the same command resumes.

    Both runs report to the session's Prefect API (as with a `prefect server start`), which
    spares each command the start of its own ephemeral server.
    """
    from prefect.settings import PREFECT_API_URL

    data_dir = tmp_path / "data"
    env = {
        **os.environ,
        "DIFFICULTY_DATA": str(data_dir),
        "PREFECT_HOME": str(tmp_path / "prefect"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_API_URL": PREFECT_API_URL.value(),
    }
    cmd = [str(Path(sys.executable).parent / "difficulty"), "profile", "--limit", "6", "--n", "2"]
    cmd += ["--max-tokens", "12", "--shard-size", "2", "--grade-workers", "1", "--no-report"]
    samples_dir = data_dir / "samples"
    # Its own session: kill -9 takes the whole process group (the CLI and its ephemeral
    # Prefect server and grading workers), as a crash of the machine or container would.
    proc = subprocess.Popen(
        cmd, env=env, cwd=tmp_path, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 240
        while not list(samples_dir.rglob("shard-*.parquet")):
            assert proc.poll() is None, f"profile ended early: {proc.stderr.read().decode()[-2000:]}"
            assert time.monotonic() < deadline, "no shard written in time"
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    store = Store(data_dir)
    [run_dir] = samples_dir.iterdir()
    run_id = run_dir.name.split("=", 1)[1]
    written = store.finished_shards(run_id)
    assert 1 <= len(written) < 3, f"kill came too late to test anything: shards {written}"
    assert store.get_run(run_id).status == "sampling"
    first = {p.name: p.stat().st_mtime_ns for p in run_dir.glob("*.parquet")}

    rerun = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=400, check=False)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert run_id in rerun.stdout
    check_complete(store, run_id, 2, 6)
    assert store.finished_shards(run_id) == {0, 1, 2}
    assert store.get_run(run_id).status == "done"
    for name, mtime in first.items():  # shards finished before the kill were not redone
        assert (run_dir / name).stat().st_mtime_ns == mtime
