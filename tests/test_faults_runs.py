"""Faults around a run's life: resume with another shard size, copied shards, kill -9, engines.

Each test reproduces a case a user hit; model-free runs use the simulate backend (real grading,
storage and analysis).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pipeline.flows import executors, prefect_flows, watchdog

from pipeline import finish, run
from pipeline.errors import BackendUnavailableError, SamplingError, StoreError
from pipeline.store import RunRecord, Store

pytestmark = pytest.mark.faults

SIM = {"backend": "simulate", "limit": 6, "n": 4, "grade_workers": 1, "report": False}


def _interrupted_then_resumed(store: Store, first: dict, then: dict, dies_after) -> str:
    with pytest.raises(SamplingError, match="killed"):
        run.profile(
            run.ProfileConfig.build(**SIM, **first), store, dies_after(run.ProfileConfig.build(**SIM, **first), 1)
        )
    return executors.profile_direct(run.ProfileConfig.build(**SIM, **then), store).run_id


def test_resume_with_a_larger_shard_size_loses_nothing(store, check_complete, close_engines, dies_after):
    """Was: `--shard-size 2`, killed after shard 0, rerun without it: done with 8 of 24 samples."""
    run_id = _interrupted_then_resumed(store, {"shard_size": 2}, {}, dies_after)
    check_complete(store, run_id, 4, 6)
    assert store.get_run(run_id).status == "done"


def test_resume_with_a_smaller_shard_size_duplicates_nothing(store, check_complete, close_engines):
    """Was: a finished run rerun with `--shard-size 2`: 40 samples, 24 distinct, n = 8."""
    cfg = run.ProfileConfig.build(**SIM)
    run_id = executors.profile_direct(cfg, store).run_id
    before = {p.name: p.stat().st_mtime_ns for p in store.shard_files(run_id).values()}
    assert executors.profile_direct(run.ProfileConfig.build(**SIM, shard_size=2), store).run_id == run_id
    check_complete(store, run_id, 4, 6)
    assert {p.name: p.stat().st_mtime_ns for p in store.shard_files(run_id).values()} == before
    stats = store.query("select n from prompt_stats where run_id = $r", {"r": run_id}).column("n")
    assert set(stats.to_pylist()) == {4}


def test_an_interrupted_plan_with_other_shards_is_kept(store, check_complete, close_engines, dies_after):
    run_id = _interrupted_then_resumed(store, {"shard_size": 4}, {"shard_size": 1}, dies_after)
    check_complete(store, run_id, 4, 6)
    assert len(store.shard_files(run_id)) == 2  # the stored plan's two shards, not six


def test_a_copied_shard_is_quarantined_not_counted(store, check_complete, close_engines):
    """Was: a copied shard file doubled every count silently, then crashed the next rerun."""
    cfg = run.ProfileConfig.build(**SIM, shard_size=2)
    run_id = executors.profile_direct(cfg, store).run_id
    folder = store.partition_dir("samples", {"run_id": run_id})
    shutil.copy(folder / "shard-00000.parquet", folder / "shard-00007.parquet")  # no such shard
    shutil.copy(folder / "shard-00000.parquet", folder / "shard-00001.parquet")  # another's content
    counts = finish.counts_from_samples(store, run_id)  # analysis reads only the plan's files
    assert set(counts.column("n").to_pylist()) == {4} and counts.num_rows == 4
    moved = sorted(p.name for p in (store.root / "quarantine").rglob("shard-*.parquet"))
    assert moved == ["shard-00001.parquet", "shard-00007.parquet"]
    executors.profile_direct(cfg, store)  # the rerun samples shard 1 again
    check_complete(store, run_id, 4, 6)
    assert store.finished_shards(run_id) == {0, 1, 2}


def test_a_run_is_locked_while_worked_on(store):
    store.register_run(RunRecord("r1", status="sampling"))
    assert store.list_runs().column("status").to_pylist() == ["interrupted"]
    with store.lock_run("r1"):
        assert store.list_runs().column("status").to_pylist() == ["sampling"]
        with pytest.raises(StoreError, match=f"r1 is being worked on by pid {os.getpid()}"):
            with store.lock_run("r1"):
                pass
    assert store.list_runs().column("status").to_pylist() == ["interrupted"]


def test_prefect_does_not_retry_a_server_that_never_answered():
    from prefect.states import Failed

    assert not prefect_flows._worth_retrying(None, None, Failed(data=BackendUnavailableError("gone")))
    assert prefect_flows._worth_retrying(None, None, Failed(data=SamplingError("flaky")))


def test_the_watchdog_ends_what_its_process_started(tmp_path):
    """A guarded process killed with SIGKILL: its marked child (a stand-in server) is ended."""
    script = tmp_path / "guarded.py"
    script.write_text(
        "import subprocess, sys, time\n"
        "from pipeline.flows import watchdog\n"
        "watchdog.guard()\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(300)\n"
    )
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    child = int(proc.stdout.readline())
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 15
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(child), "the child outlived its killed parent"


def test_the_watchdog_ends_an_unmarked_process_named_by_a_folder_it_holds_open(tmp_path):
    """Was: a local Ray cluster's two agents, started with an environment of their own (no
    marker), outlived a kill -9 of the driver by about a minute. A process holding a file open in
    a folder named with ``also_end`` (the cluster's session folder) is ended with the rest."""
    session = tmp_path / "session_1234"
    session.mkdir()
    script = tmp_path / "guarded.py"
    script.write_text(
        "import os, subprocess, sys, time\n"
        "from pipeline.flows import watchdog\n"
        "session = sys.argv[1]\n"
        "watchdog.guard()\n"
        "watchdog.also_end(session)\n"
        "env = {k: v for k, v in os.environ.items() if k != watchdog.MARKER}\n"
        "agent = 'import sys, time; log = open(sys.argv[1], \"a\"); time.sleep(300)'\n"
        "log = os.path.join(session, 'agent.log')\n"
        "child = subprocess.Popen([sys.executable, '-c', agent, log], env=env, start_new_session=True)\n"
        "other = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'], env=env)\n"
        "time.sleep(1)\n"
        "print(child.pid, other.pid, flush=True)\n"
        "time.sleep(300)\n"
    )
    proc = subprocess.Popen([sys.executable, str(script), str(session)], stdout=subprocess.PIPE, text=True)
    child, other = map(int, proc.stdout.readline().split())
    try:
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 15
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(child), "the unmarked process outlived its killed parent"
        assert _alive(other), "a process that holds nothing in the folder is not the watchdog's"
    finally:
        for pid in (child, other):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow
def test_kill_9_of_the_cli_leaves_no_server_and_shows_interrupted(tmp_path):
    """Was: kill -9 left Prefect's ephemeral API server running (3 of 3), the run `sampling`."""
    data = tmp_path / "data"
    env = {**os.environ, "DIFFICULTY_DATA": str(data), "PREFECT_HOME": str(tmp_path / "prefect")}
    env.pop("PREFECT_API_URL", None)
    env.pop(watchdog.MARKER, None)
    cmd = [str(Path(sys.executable).parent / "difficulty"), "profile", "--backend", "simulate"]
    cmd += ["--limit", "2000", "--n", "8", "--shard-size", "50", "--no-report"]
    proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, start_new_session=True, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 240
        while not list((data / "samples").rglob("shard-*.parquet")):
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "no shard written in time"
            time.sleep(0.05)
        session = os.getsid(proc.pid)
        proc.kill()  # the CLI alone, as `kill -9 PID` does: not its process group
        proc.wait()
        deadline = time.monotonic() + 20
        while _session_members(session) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _session_members(session) == [], "processes outlived the killed CLI"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for pid in _session_members(os.getsid(proc.pid) if proc.poll() is None else proc.pid):
            os.kill(pid, signal.SIGKILL)
    [row] = Store(data).list_runs().to_pylist()
    assert row["status"] == "interrupted"


def _session_members(session: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getsid(int(entry.name)) == session and _alive(int(entry.name)):
                    out.append(int(entry.name))
            except ProcessLookupError:
                continue
    return out


@pytest.mark.slow
def test_a_finished_run_frees_its_model(tmp_path, tiny):
    """Served runs printed `Exception ignored in: <function Llama.__del__>` at exit because the
    model was left for interpreter shutdown to free: a run now frees its engines when it ends."""
    code = (
        "from pipeline import run\n"
        "from pipeline.flows import executors\n"
        "from pipeline.store import Store\n"
        f"cfg = run.ProfileConfig.build(**{tiny!r})\n"
        f"executors.profile_direct(cfg, Store.open({str(tmp_path / 'data')!r}))\n"
        "from pipeline.run import shards\n"
        "assert not shards._ENGINES, shards._ENGINES\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Exception ignored" not in out.stderr, out.stderr[-3000:]
