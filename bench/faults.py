"""Fault bench: kill -9 a profile at random moments, rerun it each time, compare with a clean run.

A simulate-backend profile (no model; real grading, storage, analysis and report) of 2,000
prompts x 8 samples runs once uninterrupted into one data directory; the same command then runs
into a fresh one ``--kills`` times, each killed with SIGKILL at a random moment and then rerun to
completion. Two kills in three fall right after a random number of shards landed, the rest at a
random moment of the run. Half the kills hit the CLI process alone (``kill -9 PID``:
its Prefect server and workers must not outlive it), half its whole process group. Printed:
samples lost, duplicated and mismatched against the clean run (all zero), processes left running
after the kills (none), and the run's status right after each kill (``interrupted``, never a
stale ``sampling``).

    python bench/faults.py [--kills 20] [--prompts 2000] [--n 8] [--shard-size 50] [--seed 0]
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa

from pipeline.store import Store

DIFFICULTY = str(Path(sys.executable).parent / "difficulty")


def session_members(session: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.getsid(int(entry.name)) != session:
                continue
            state = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0]
        except (ProcessLookupError, OSError):
            continue
        if state != "Z":
            out.append(int(entry.name))
    return out


def keyed(table: pa.Table) -> dict[tuple[str, int], tuple]:
    cols = ["prompt_id", "sample_idx", "completion", "correct", "grade_status"]
    rows = table.select(cols).to_pylist()
    return {(r["prompt_id"], r["sample_idx"]): (r["completion"], r["correct"], r["grade_status"]) for r in rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--prompts", type=int, default=2000)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--shard-size", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="faults-"))
    base_env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "DIFFICULTY_GUARD")}
    base_env.update(PREFECT_HOME=str(work / "prefect"), PREFECT_SERVER_ANALYTICS_ENABLED="false")
    cmd = [DIFFICULTY, "profile", "--backend", "simulate", "--limit", str(args.prompts), "--n", str(args.n)]
    cmd += ["--shard-size", str(args.shard_size)]

    def start(data: Path) -> subprocess.Popen:
        env = {**base_env, "DIFFICULTY_DATA": str(data)}
        return subprocess.Popen(
            cmd, env=env, cwd=work, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )

    t = time.perf_counter()
    clean = start(work / "clean")
    t_first = None
    while clean.poll() is None:  # when the first shard lands: the start of the window worth hitting
        if t_first is None and list((work / "clean").glob("samples/*/shard-*.parquet")):
            t_first = time.perf_counter() - t
        time.sleep(0.05)
    assert clean.returncode == 0, clean.stderr.read().decode()[-2000:]
    t_clean = time.perf_counter() - t
    t_first = t_first if t_first is not None else 0.0
    n_shards = -(-args.prompts // args.shard_size)
    print(
        f"clean run: {t_clean:.1f} s, first shard at {t_first:.1f} s "
        f"({args.prompts} prompts x {args.n}, shards of {args.shard_size})"
    )

    clean_samples = keyed(Store(work / "clean").read_table("samples"))
    lost = duplicated = mismatched = strays = quarantined = 0
    statuses: Counter = Counter()
    for k in range(args.kills):
        faulty = work / f"faulty-{k:02d}"  # each kill hits a fresh run at its own moment
        proc = start(faulty)
        t0 = time.perf_counter()
        if k % 3:  # two kills in three right after a random number of shards have landed
            target = rng.randrange(0, n_shards)
            while proc.poll() is None and len(list(faulty.glob("samples/*/shard-*.parquet"))) <= target:
                time.sleep(0.002)
        else:  # the rest at any moment of the run (start-up, sampling, analysis, report)
            time.sleep(rng.uniform(0.2, t_clean))
        moment = time.perf_counter() - t0
        session = os.getsid(proc.pid) if proc.poll() is None else None
        whole_group = k % 2 == 1
        if proc.poll() is None:
            (os.killpg if whole_group else os.kill)(proc.pid, signal.SIGKILL)
        proc.wait()
        left = []
        if session is not None:
            deadline = time.monotonic() + 20
            while (left := session_members(session)) and time.monotonic() < deadline:
                time.sleep(0.2)
            for pid in left:
                os.kill(pid, signal.SIGKILL)
        strays += len(left)
        store = Store(faulty)
        runs = store.list_runs().to_pylist() if (faulty / "runs").exists() else []
        status = runs[0]["status"] if runs else "(not registered yet)"
        statuses[status] += 1
        on_disk = len(list((faulty / "samples").rglob("shard-*.parquet"))) if (faulty / "samples").exists() else 0

        rerun = start(faulty)
        _, err = rerun.communicate()
        assert rerun.returncode == 0, err.decode()[-2000:]
        table = store.read_table("samples")
        got = keyed(table)
        k_lost = len(clean_samples.keys() - got.keys())
        k_dup = table.num_rows - len(got)
        k_bad = sum(1 for key in clean_samples.keys() & got.keys() if clean_samples[key] != got[key])
        lost, duplicated, mismatched = lost + k_lost, duplicated + k_dup, mismatched + k_bad
        quarantined += len(list((faulty / "quarantine").rglob("*.parquet"))) if (faulty / "quarantine").exists() else 0
        final = store.list_runs().column("status").to_pylist()
        how = "group" if whole_group else "pid"
        print(
            f"kill {k + 1:2d} at {moment:5.1f} s ({how}): then {status}, {on_disk} shards on disk, "
            f"{len(left)} processes left; rerun: {final[0]}, lost {k_lost}, duplicated {k_dup}, mismatched {k_bad}"
        )
    print(f"statuses seen right after a kill: {dict(statuses)}")
    print(
        f"over {args.kills} kills and reruns: lost {lost}, duplicated {duplicated}, mismatched {mismatched} "
        f"samples (of {len(clean_samples)} each); files quarantined {quarantined}; processes left running {strays}"
    )


if __name__ == "__main__":
    main()
