"""Bench: peak memory of ``profile``, ``report`` and ``export`` as the run grows.

    python bench/memory_curves.py [--sizes 10000,100000] [--n 8] [--work DIR]

For each size, in a fresh data directory under ``--work`` (default: a temporary folder, removed
after), three commands, each a child process of its own as a user runs them: ``difficulty profile
--backend simulate --no-prefect --no-report`` of that many distinct sums (a JSON Lines file; the
bundled set stops at 87,135 problems) at ``--n`` samples each, then ``difficulty report`` and
``difficulty export`` (verl Parquet, every row) of that run. Printed per size and command: wall
seconds and peak resident memory, ``ru_maxrss`` of the child as ``os.wait4`` reports it (the largest
of the command's process and the processes it waited for, e.g. grading workers; not their sum), in
MB and in KB per prompt.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def problems_file(size: int, folder: Path) -> Path:
    """``size`` distinct sums as a JSON Lines file (``bench/scale.py``'s)."""
    path = folder / f"sums-{size}.jsonl"
    with path.open("w") as f:
        for i in range(size):
            a, b = 1000 + 7919 * i % 1_000_003, 17 + i
            f.write(json.dumps({"problem": f"What is {a} + {b}?", "answer": str(a + b)}) + "\n")
    return path


def peak(command: list[str]) -> tuple[float, float]:
    """Run ``python -m pipeline COMMAND...``; its wall seconds and peak resident memory in MB."""
    start = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-m", "pipeline", *command], stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        sys.exit(f"{' '.join(command[:1])} exited with status {child.returncode}")
    return time.perf_counter() - start, usage.ru_maxrss / 1024  # Linux: KB


def run_id_of(data_dir: Path) -> str:
    from pipeline.store import Store

    return Store.open(data_dir).list_runs().column("run_id")[0].as_py()


def measure(size: int, n: int, work: Path) -> dict[str, tuple[float, float]]:
    data_dir = work / f"data-{size}"
    source = problems_file(size, work)
    out: dict[str, tuple[float, float]] = {}
    common = ["--data-dir", str(data_dir)]
    out["profile"] = peak(
        ["profile", "--backend", "simulate", "--no-prefect", "--no-report", "--data-file", str(source), "--n", str(n)]
        + common
    )
    run_id = run_id_of(data_dir)
    out["report"] = peak(["report", "--run", run_id, *common])
    out["export"] = peak(["export", "--run", run_id, "--output", str(work / f"export-{size}.parquet"), *common])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="10000,100000", help="prompts per run, comma-separated")
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--work", type=Path, help="folder for the runs (default: a temporary one, removed after)")
    args = ap.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="memory-curves-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        print(f"{'prompts':>9} {'command':>8} {'wall s':>7} {'peak MB':>8} {'KB/prompt':>10}")
        for size in sorted(int(s) for s in args.sizes.split(",")):
            for name, (wall, mb) in measure(size, args.n, work).items():
                print(f"{size:>9,} {name:>8} {wall:>7.1f} {mb:>8.0f} {mb * 1024 / size:>10.1f}", flush=True)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
