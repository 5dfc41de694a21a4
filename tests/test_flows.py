"""The profile flow under Prefect, retries, resume after kill -9 (real llama.cpp sampling)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import ClassVar

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from pipeline import store
from pipeline.flows import profile as stages
from pipeline.sample.base import derive_seed, rows_to_table

ROOT = Path(__file__).resolve().parents[1]

# Tiny real runs: 4 to 6 problems, 2 samples each, a few tokens, 2 prompts per shard.
TINY = {"limit": 4, "n": 2, "max_tokens": 12, "shard_size": 2, "grade_workers": 1, "report": False}


# Real llama.cpp runs (the cpu extra; conftest fails the session when it is missing).
llama = pytest.mark.slow


_HARNESS: dict = {}


@pytest.fixture(scope="session")
def prefect_api(tmp_path_factory):
    """Prefect's test harness (a temporary database behind an ephemeral API server), started
    once per session: test_checkpoints and test_ray import this fixture, and its start costs
    10 to 60 seconds on a 2-core machine."""
    if not _HARNESS:
        os.environ.setdefault("PREFECT_HOME", str(tmp_path_factory.mktemp("prefect-home")))
        from prefect.testing.utilities import prefect_test_harness

        harness = prefect_test_harness(server_startup_timeout=120)
        harness.__enter__()
        _HARNESS.update(cm=harness, users=0)
    _HARNESS["users"] += 1
    yield
    _HARNESS["users"] -= 1
    if not _HARNESS["users"]:
        _HARNESS.pop("cm").__exit__(None, None, None)
        _HARNESS.clear()


class FakeSampler:
    """A deterministic sampler for retry logic (no model): right answer 2 times in 3."""

    backend = "fake"
    fail_on: ClassVar[set[str]] = set()  # prompt ids that fail once

    def __init__(self, model=None, **options):
        self.model_name = f"fake-{model or 'default'}"

    def sample(self, problems, params, progress=None, *, template=None):
        rows = []
        for pid, ans in zip(
            problems.column("prompt_id").to_pylist(), problems.column("answer").to_pylist(), strict=True
        ):
            if pid in FakeSampler.fail_on:
                FakeSampler.fail_on.discard(pid)
                raise RuntimeError(f"transient failure on {pid}")
            for i in range(params.n):
                ok = derive_seed(params.seed, pid, i) % 3 != 0
                rows.append((pid, i, f"so \\boxed{{{ans if ok else ans + '1'}}}", "stop", 4))
        if progress:
            progress(problems.num_rows * params.n)
        return rows_to_table(rows)

    def close(self):
        pass


def check_complete(data_dir: Path, run_id: str, n: int, prompts: int) -> pa.Table:
    samples = store.read_table(data_dir, "samples", {"run_id": run_id})
    assert samples.num_rows == n * prompts
    keys = pc.binary_join_element_wise(
        samples.column("prompt_id"), pc.cast(samples.column("sample_idx"), pa.string()), "#"
    )
    assert pc.count_distinct(keys).as_py() == samples.num_rows, "duplicated samples"
    per_prompt = samples.group_by("prompt_id").aggregate([("sample_idx", "count")])
    assert per_prompt.num_rows == prompts
    assert set(per_prompt.column("sample_idx_count").to_pylist()) == {n}
    return samples


def flow_runs(name_prefix: str = ""):
    from prefect import get_client

    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs()
        return [r for r in runs if r.name.startswith(name_prefix)], client


@pytest.mark.slow
@llama
def test_profile_flow_end_to_end(prefect_api, data_dir):
    cfg = stages.ProfileConfig(**{**TINY, "report": True})
    run = stages.profile_flow(cfg, data_dir)
    stages.close_samplers()
    run_id = run["run_id"]
    check_complete(data_dir, run_id, cfg.n, 4)
    assert store.get_run(data_dir, run_id)["status"] == "done"
    assert store.finished_shards(data_dir, run_id) == {0, 1}
    for table in ("prompt_stats", "weights", "summary", "allocation"):
        assert store.read_table(data_dir, table, {"run_id": run_id}).num_rows > 0, table
    if run["report"] is not None:
        assert Path(run["report"]).is_file()

    # The flow run is named after dataset, model and run id, and has coarse tasks only.
    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName

    with get_client(sync_client=True) as client:
        [fr] = client.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(like_=run_id)))
        assert fr.name == f"arithmetic/{stages.run_label(cfg).split('/')[1]}/{run_id}"
        assert fr.state.is_completed()
        tasks = client.read_task_runs()
        names = sorted(
            t.name.rsplit("-", 1)[0] if not t.name.startswith("shard") else t.name
            for t in tasks
            if t.flow_run_id == fr.id
        )
    assert names == ["analyze-allocate-report", "load-and-register", "shard-0", "shard-1"]

    # A rerun of the same profile writes nothing new and completes.
    before = {p: p.stat().st_mtime_ns for p in (data_dir / "samples").rglob("*.parquet")}
    again = stages.profile_flow(cfg, data_dir)
    stages.close_samplers()
    assert again["run_id"] == run_id
    after = {p: p.stat().st_mtime_ns for p in (data_dir / "samples").rglob("*.parquet")}
    assert after == before


def test_shard_task_is_retried(prefect_api, data_dir, monkeypatch):
    monkeypatch.setattr(stages, "make_sampler", lambda backend, model=None, **o: FakeSampler(model))
    stages.close_samplers()
    cfg = stages.ProfileConfig(limit=6, n=3, shard_size=2, report=False, grade_workers=1)
    plan_ids = stages.prepare_run(cfg, data_dir).problems.column("prompt_id").to_pylist()
    FakeSampler.fail_on = {plan_ids[3]}  # shard 1 fails on its first attempt
    run = stages.profile_flow(cfg, data_dir)
    stages.close_samplers()
    assert not FakeSampler.fail_on, "the failing prompt was never sampled"
    check_complete(data_dir, run["run_id"], 3, 6)
    from prefect import get_client

    with get_client(sync_client=True) as client:
        retried = [
            t for t in client.read_task_runs() if t.name == "shard-1" and t.flow_run_id is not None and t.run_count == 2
        ]
    assert retried, "shard 1 was not retried by Prefect"


def test_failed_run_is_marked_and_rerun_completes(data_dir, monkeypatch):
    """Without Prefect: a shard that keeps failing marks the run failed; a rerun resumes."""
    monkeypatch.setattr(stages, "make_sampler", lambda backend, model=None, **o: FakeSampler(model))
    stages.close_samplers()
    cfg = stages.ProfileConfig(limit=6, n=2, shard_size=2, report=False, grade_workers=1)
    plan = stages.prepare_run(cfg, data_dir)
    FakeSampler.fail_on = {plan.problems.column("prompt_id")[4].as_py()}  # shard 2
    with pytest.raises(RuntimeError, match="transient"):
        stages.profile_direct(cfg, data_dir)
    assert store.get_run(data_dir, plan.run_id)["status"] == "failed"
    assert store.finished_shards(data_dir, plan.run_id) == {0, 1}
    first = (data_dir / "samples" / f"run_id={plan.run_id}" / "shard-00000.parquet").stat().st_mtime_ns
    stages.profile_direct(cfg, data_dir)
    stages.close_samplers()
    check_complete(data_dir, plan.run_id, 2, 6)
    assert store.get_run(data_dir, plan.run_id)["status"] == "done"
    again = (data_dir / "samples" / f"run_id={plan.run_id}" / "shard-00000.parquet").stat().st_mtime_ns
    assert again == first, "a finished shard was redone"


def test_run_label_and_config_checks():
    assert stages.run_label({"dataset": "gsm8k", "model": "/m/ckpt-7.gguf"}, "abc") == "gsm8k/ckpt-7.gguf/abc"
    assert stages.run_label(stages.ProfileConfig()) == "arithmetic/llamacpp-default/pending"
    with pytest.raises(ValueError, match="executor='dask'"):
        stages.ProfileConfig(executor="dask")
    with pytest.raises(ValueError, match="replicas=0"):
        stages.ProfileConfig(replicas=0)


@pytest.mark.slow
@llama
def test_kill_9_then_rerun_completes_without_gaps_or_duplicates(prefect_api, tmp_path):
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
    cmd = [
        str(Path(sys.executable).parent / "difficulty"),
        "profile",
        "--limit",
        "6",
        "--n",
        "2",
        "--max-tokens",
        "12",
        "--shard-size",
        "2",
        "--grade-workers",
        "1",
        "--no-report",
    ]
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
    [run_dir] = samples_dir.iterdir()
    run_id = run_dir.name.split("=", 1)[1]
    written = store.finished_shards(data_dir, run_id)
    assert 1 <= len(written) < 3, f"kill came too late to test anything: shards {written}"
    assert store.get_run(data_dir, run_id)["status"] == "sampling"
    first = {p.name: p.stat().st_mtime_ns for p in run_dir.glob("*.parquet")}

    rerun = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=400, check=False)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert run_id in rerun.stdout
    check_complete(data_dir, run_id, 2, 6)
    assert store.finished_shards(data_dir, run_id) == {0, 1, 2}
    assert store.get_run(data_dir, run_id)["status"] == "done"
    for name, mtime in first.items():  # shards finished before the kill were not redone
        assert (run_dir / name).stat().st_mtime_ns == mtime
