"""Benchmark: how the pipeline's own cost grows with the run, from simulate profiles through the
Prefect flow (sampling is the simulator, so what is timed is the pipeline: grading, storage,
analysis, allocation, then the report and one SQL query).

    python bench/scale.py [--sizes 10000,40000,160000] [--n 16] [--profile SIZE]

Each size runs in a child process of its own (its peak memory is its own), into a fresh data
directory: a tiny flow first (Prefect's server starts, untimed), then ``profile_flow`` without the
report, ``write_run_report`` timed on its own, and ``difficulty sql``'s query path on ``select
count(*) from samples``. A first, smaller size (a quarter of the smallest) takes out what fixed
cost is left (the grading workers' start), so each size's marginal cost per sample is (its time -
the previous size's) / (its samples - the previous size's). Printed: per size the flow's time, the
report's and the query's, the peak memory, and the marginal cost per sample, wall and CPU (CPU,
the child's and its grading workers', is steadier on a shared machine); last, the ratio of the
largest size's marginal cost to the smallest's (target: at most 1.2) and the report's growth
against the prompts' (target: less than linear). ``--profile SIZE`` runs one size under cProfile
instead and prints the top functions by cumulative time.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _cpu_s() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def problems_file(size: int, work: Path) -> Path:
    """``size`` distinct sums as a JSON Lines file (the bundled arithmetic set stops at 87,135)."""
    path = work / f"sums-{size}.jsonl"
    with path.open("w") as f:
        for i in range(size):
            a, b = 1000 + 7919 * i % 1_000_003, 17 + i
            f.write(json.dumps({"problem": f"What is {a} + {b}?", "answer": str(a + b)}) + "\n")
    return path


def child(size: int, n: int, work: Path) -> dict:
    """One size, in this (child) process: flow, report, one query."""
    os.environ.setdefault("PREFECT_HOME", str(work / "prefect"))
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    from pipeline.flows.prefect_flows import profile_flow

    from pipeline import reports, run
    from pipeline.store import Store

    # Prefect's ephemeral server starts with the first flow of the process (tens of seconds on a
    # busy machine, whatever the size): a tiny flow pays it before the clock starts.
    profile_flow(run.ProfileConfig.build(backend="simulate", limit=4, n=1, report=False), Store.open(work / "warm"))
    store = Store.open(work / "data")
    cfg = run.ProfileConfig.build(backend="simulate", data_file=str(problems_file(size, work)), n=n, report=False)
    t, c = time.perf_counter(), _cpu_s()
    run_id = profile_flow(cfg, store).run_id
    flow_s, flow_cpu = time.perf_counter() - t, _cpu_s() - c
    flow_peak = _peak_mb()
    t, c = time.perf_counter(), _cpu_s()
    path = reports.write_run_report(store, run_id)
    report_s, report_cpu = time.perf_counter() - t, _cpu_s() - c
    t = time.perf_counter()
    rows = Store.open(work / "data").user_query("select count(*) as n from samples").column("n")[0].as_py()
    sql_s = time.perf_counter() - t
    assert rows == size * n, f"{rows} samples, expected {size * n}"
    return {
        "size": size,
        "samples": rows,
        "flow_s": flow_s,
        "flow_cpu": flow_cpu,
        "report_s": report_s,
        "report_cpu": report_cpu,
        "sql_s": sql_s,
        "flow_peak_mb": flow_peak,
        "peak_mb": _peak_mb(),
        "report_mb": Path(path).stat().st_size / 1e6,
        "disk_mb": sum(p.stat().st_size for p in (work / "data").rglob("*") if p.is_file()) / 1e6,
    }


def run_size(size: int, n: int) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"scale-{size}-") as tmp:
        out = subprocess.run(
            [sys.executable, __file__, "--child", str(size), "--n", str(n), "--work", tmp],
            capture_output=True,
            text=True,
        )
    if out.returncode:
        sys.exit(f"size {size} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="10000,40000,160000", help="prompts per run, comma-separated")
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--profile", type=int, help="run this size under cProfile and print the top functions")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.child:
        print(json.dumps(child(args.child, args.n, args.work)))
        return
    if args.profile:
        import cProfile
        import pstats

        with tempfile.TemporaryDirectory() as tmp:
            prof = cProfile.Profile()
            result = prof.runcall(child, args.profile, args.n, Path(tmp))
        print(json.dumps(result))
        pstats.Stats(prof).sort_stats("cumulative").print_stats(45)
        return

    sizes = sorted(int(s) for s in args.sizes.split(","))
    rows = [run_size(max(sizes[0] // 4, 1), args.n)]
    print(
        f"{'prompts':>8} {'samples':>10} {'flow s':>8} {'report s':>9} {'sql s':>6} {'peak MB':>8} "
        f"{'us/sample':>10} {'CPU us/sample':>14} {'report MB':>10} {'disk MB':>8}"
    )
    for size in sizes:
        rows.append(run_size(size, args.n))
        prev, cur = rows[-2], rows[-1]
        d = cur["samples"] - prev["samples"]
        cur["marginal_us"] = 1e6 * ((cur["flow_s"] + cur["report_s"]) - (prev["flow_s"] + prev["report_s"])) / d
        cur["marginal_cpu_us"] = (
            1e6 * ((cur["flow_cpu"] + cur["report_cpu"]) - (prev["flow_cpu"] + prev["report_cpu"])) / d
        )
        print(
            f"{size:>8,} {cur['samples']:>10,} {cur['flow_s']:>8.1f} {cur['report_s']:>9.1f} {cur['sql_s']:>6.2f} "
            f"{cur['peak_mb']:>8.0f} {cur['marginal_us']:>10.1f} {cur['marginal_cpu_us']:>14.1f} "
            f"{cur['report_mb']:>10.1f} {cur['disk_mb']:>8.0f}",
            flush=True,
        )
    first, last = rows[1], rows[-1]
    if len(rows) > 2:
        growth = last["size"] / first["size"]
        print(
            f"marginal cost per sample, {last['size']:,} vs {first['size']:,} prompts: "
            f"{last['marginal_us'] / first['marginal_us']:.2f}x wall, "
            f"{last['marginal_cpu_us'] / first['marginal_cpu_us']:.2f}x CPU (target <= 1.2x)"
        )
        print(
            f"{growth:.0f}x the prompts: report {last['report_s'] / first['report_s']:.2f}x the time, "
            f"peak memory {last['peak_mb'] / first['peak_mb']:.2f}x (targets: less than {growth:.0f}x)"
        )


if __name__ == "__main__":
    main()
