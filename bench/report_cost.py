"""Bench: what a run's report costs against its export, in one process.

    python bench/report_cost.py [--prompts 60000] [--n 8] [--data-dir DIR] [--rounds 3]

Takes the newest finished simulate run of ``--prompts`` prompts x ``--n`` samples in ``--data-dir``
(default: a folder in the system's temporary directory, kept for the next call), or makes one with
``difficulty profile --backend simulate --no-prefect --no-report`` (the bundled arithmetic set, up to
87,135 problems). Then, in this process, both modules imported first, ``export_run`` (verl Parquet, every
row, the CLI's defaults) and ``write_run_report`` (the HTML report) of that run take turns, ``--rounds``
times, the one that goes first alternating; the first round warms up (what either touches first:
the files' checks, DuckDB, modules imported on use) and is not counted. Printed: each round's wall and
CPU seconds (CPU: this process's, DuckDB's threads included), and the ratios report/export of the
timed rounds' medians. The goal: report/export <= 1.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def find_run(data_dir: Path, prompts: int, n: int) -> str | None:
    """The newest done simulate run of ``prompts`` prompts at ``n`` samples in ``data_dir``, if any."""
    import json

    from pipeline.store import Store

    if not data_dir.exists():
        return None
    for row in Store.open(data_dir).list_runs().to_pylist():
        params = json.loads(row["params"] or "{}")
        if row["status"] == "done" and row["backend"] == "simulate" and row["n_prompts"] == prompts:
            if params.get("n") == n:
                return row["run_id"]
    return None


def build_run(data_dir: Path, prompts: int, n: int) -> str:
    """A simulate run made by the command line, as a user makes one."""
    command = [sys.executable, "-m", "pipeline", "profile", "--backend", "simulate", "--no-prefect", "--no-report"]
    command += ["--limit", str(prompts), "--n", str(n), "--data-dir", str(data_dir)]
    print("making the run:", " ".join(command[1:]), flush=True)
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    run_id = find_run(data_dir, prompts, n)
    if run_id is None:
        sys.exit(f"no done run of {prompts} prompts in {data_dir} after the profile")
    return run_id


def timed(work) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    work()
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=60_000)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--data-dir", type=Path, help="where the run is (made if missing)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of both, the first a warm-up")
    args = ap.parse_args()
    if args.rounds < 2:
        sys.exit("--rounds must be at least 2: the first round is a warm-up")
    data_dir = args.data_dir or Path(tempfile.gettempdir()) / f"report-cost-{args.prompts}x{args.n}"
    run_id = find_run(data_dir, args.prompts, args.n) or build_run(data_dir, args.prompts, args.n)

    from pipeline import export, reports
    from pipeline.store import Store

    store = Store.open(data_dir)
    out = Path(tempfile.mkdtemp(prefix="report-cost-")) / "export.parquet"
    jobs = {
        "export": lambda: export.export_run(store, run_id, out, export.ExportConfig()),
        "report": lambda: reports.write_run_report(store, run_id),
    }
    print(f"run {run_id}: {args.prompts:,} prompts x {args.n} in {data_dir}")
    print(f"{'round':>5} {'export s':>9} {'report s':>9} {'export CPU':>11} {'report CPU':>11}")
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in jobs}
    for r in range(args.rounds):
        for name in sorted(jobs, reverse=bool(r % 2)):  # who goes first alternates
            times[name].append(timed(jobs[name]))
        (ew, ec), (rw, rc) = times["export"][-1], times["report"][-1]
        label = "warm" if r == 0 else str(r)
        print(f"{label:>5} {ew:>9.2f} {rw:>9.2f} {ec:>11.2f} {rc:>11.2f}", flush=True)
    wall = {name: statistics.median(t[0] for t in rows[1:]) for name, rows in times.items()}
    cpu = {name: statistics.median(t[1] for t in rows[1:]) for name, rows in times.items()}
    print(
        f"report/export over {args.rounds - 1} timed round(s), medians: {wall['report'] / wall['export']:.2f}x wall "
        f"({wall['report']:.2f} s against {wall['export']:.2f} s), {cpu['report'] / cpu['export']:.2f}x CPU "
        f"(target <= 1)"
    )


if __name__ == "__main__":
    main()
