"""Bench: the start-up of the quick commands against a bare DuckDB process.

Makes a data directory with one simulate run (or takes ``--data-dir``), then times, in fresh
processes taking turns so that the machine's load hits all alike:

- baseline: ``python -c "import duckdb; duckdb.sql(select count(*) from read_parquet(<the run's
  sample files>))"``: the same query on the same Parquet files, with nothing of the pipeline;
- ``difficulty sql "select count(*) from samples"`` (``python -m pipeline``), over files whose
  checks an earlier process decided and saved (the warm-up run, as a profile's own queries do);
- the same, first after new files: every file's footer read and checked (an empty folder of saved
  verdicts each time, ``$DIFFICULTY_CHECKS_CACHE``; a version that saves none ignores it);
- ``difficulty --help``;
- ``difficulty tries`` (a calculator: NumPy and the allocation module, no data directory).

It prints each one's median wall and CPU time and their ratios to the baseline's; the goal is ``sql`` within 1.5x of
the baseline and ``--help`` under 0.5 s on a quiet machine. Runs against whichever ``pipeline`` is
importable, so ``PYTHONPATH=<other checkout>`` measures another version::

    python bench/cli_startup.py --repeat 9
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

UNCHECKED = "difficulty sql, files unchecked"


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system) of one process; CPU time is what a busy
    machine inflates least, since waiting for a core is not counted. Run from the temporary
    folder: ``python -m`` puts its working directory first on the path, before ``PYTHONPATH``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tempfile.gettempdir())
    elapsed = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {done.stderr}")
    return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, help="An existing data directory (default: a new simulate run).")
    parser.add_argument("--prompts", type=int, default=2000, help="Prompts of the simulate run.")
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    env = {**os.environ, "COLUMNS": "100"}
    tmp = Path(tempfile.mkdtemp(prefix="bench-cli-startup-"))
    try:
        data = args.data_dir or tmp / "data"
        if args.data_dir is None:
            profile = [sys.executable, "-m", "pipeline", "profile", "--backend", "simulate", "--no-prefect"]
            profile += ["--dataset", "arithmetic", "--limit", str(args.prompts), "--n", "16", "--no-report"]
            timed([*profile, "--data-dir", str(data)], env)
        files = sorted(str(p) for p in (data / "samples").rglob("*.parquet"))
        bare = (
            "import duckdb; print(duckdb.sql('select count(*) from read_parquet($files)', "
            f"params={{'files': {files!r}}}).fetchall())"
        )
        commands = {
            "baseline: python + duckdb": [sys.executable, "-c", bare],
            "difficulty sql": [sys.executable, "-m", "pipeline", "sql", "select count(*) from samples"],
            UNCHECKED: [sys.executable, "-m", "pipeline", "sql", "select count(*) from samples"],
            "difficulty --help": [sys.executable, "-m", "pipeline", "--help"],
            "difficulty tries": [sys.executable, "-m", "pipeline", "tries"],
        }
        run_env = {**env, "DIFFICULTY_DATA": str(data), "DIFFICULTY_CHECKS_CACHE": str(tmp / "checks")}

        def env_of(name: str) -> dict[str, str]:
            if name != UNCHECKED:
                return run_env
            return {**run_env, "DIFFICULTY_CHECKS_CACHE": tempfile.mkdtemp(dir=tmp, prefix="checks-")}

        times: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
        for name, argv in commands.items():  # one warm-up each: the page cache, .pyc files, the saved checks
            timed(argv, env_of(name))
        for _ in range(args.repeat):
            for name, argv in commands.items():
                times[name].append(timed(argv, env_of(name)))
        base = [statistics.median(t[i] for t in times["baseline: python + duckdb"]) for i in (0, 1)]
        load = os.getloadavg()[0]
        print(f"{len(files)} sample files; {args.repeat} runs each, taking turns; load average {load:.2f}")
        print(f"{'':32s} {'wall (median)':>22s}   {'CPU (median)':>22s}")
        for name, values in times.items():
            wall, cpu = (statistics.median(t[i] for t in values) for i in (0, 1))
            print(f"{name:32s} {wall:7.3f} s  x{wall / base[0]:5.2f}       {cpu:7.3f} s  x{cpu / base[1]:5.2f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
