"""Benchmark: the peak memory of ``difficulty sql --output`` writing a run's samples.

A simulate profile of ``--prompts`` prompts x ``--n`` samples (default 100,000 x 8; no Prefect, no
report) fills a data directory; then ``difficulty sql "select * from samples" --format F --output
FILE`` runs for each format F, each in a child process of its own whose peak resident memory
(``ru_maxrss`` of its children, read by a parent that runs nothing else) is printed with the
time and the file's size. ``--code PATH`` (repeatable): run the command from these checkouts in
turn (an older commit, to compare: its ``pipeline`` on ``PYTHONPATH``; default this one).

    PYTHONPATH=$PWD python bench/sql_output.py                  # 100,000 x 8
    PYTHONPATH=$PWD python bench/sql_output.py --prompts 10000  # quicker
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# A parent that only runs the command: its children's peak is the command's own.
PEAK = """
import json, resource, subprocess, sys, time
t = time.perf_counter()
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
print(json.dumps({"rc": done.returncode, "err": done.stderr[-500:], "s": time.perf_counter() - t,
                  "peak_kb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=100_000)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--formats", default="parquet,csv,json")
    ap.add_argument("--code", type=Path, action="append", help="a checkout whose `difficulty sql` runs (repeatable)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sql-output-"))
    data = work / "data"
    env = {**os.environ, "DIFFICULTY_DATA": str(data), "PYTHONPATH": str(ROOT)}
    rows = [{"problem": f"What is {i} + {i + 1}?", "answer": str(2 * i + 1)} for i in range(args.prompts)]
    problems = work / "problems.jsonl"
    problems.write_text("".join(json.dumps(r) + "\n" for r in rows))
    t = time.perf_counter()
    profile = [sys.executable, "-m", "pipeline", "profile", "--backend", "simulate", "--no-prefect", "--no-report",
               "--data-file", str(problems), "--n", str(args.n), "--shard-size", "10000"]  # fmt: skip
    done = subprocess.run(profile, env=env, cwd=work, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    print(f"data: {args.prompts:,} prompts x {args.n} samples profiled in {time.perf_counter() - t:.1f} s")
    for code in args.code or [ROOT]:
        env["PYTHONPATH"] = str(code.resolve())
        for fmt in args.formats.split(","):
            out = work / f"samples.{fmt}"
            query = "select * from samples"
            cmd = [sys.executable, "-m", "pipeline", "sql", query, "--format", fmt, "--output", str(out)]
            # cwd outside any checkout: ``python -m`` puts the working directory first on the path
            got = json.loads(subprocess.run([sys.executable, "-c", PEAK, *cmd], env=env, cwd=work, capture_output=True,
                                            text=True, check=True).stdout)  # fmt: skip
            assert got["rc"] == 0, got["err"]
            print(
                f"sql --output ({fmt}){'' if code.resolve() == ROOT else f' from {code}'}: peak RSS "
                f"{got['peak_kb'] / 1024:,.0f} MB, {got['s']:.1f} s, file {out.stat().st_size / 1e6:,.1f} MB"
            )


if __name__ == "__main__":
    main()
