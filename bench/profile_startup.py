"""Benchmark: a one-off ``difficulty profile`` through Prefect against the same with ``--no-prefect``.

Each round runs the same command twice in fresh processes, taking turns (which goes first
alternates), each into a data directory of its own: a 50-prompt simulate profile by default (real
grading, storage, analysis and report; the bundled arithmetic set, or ``--data-file``). Prints
each side's wall and CPU time (user + system, children included: the API server, the grading
workers) as medians over the rounds with their range, the difference and the ratio, and the load
average before and after. Then where Prefect's extra time goes, each part in a fresh process:
importing Prefect, importing its server module (what Prefect itself does before starting its
temporary server, and what ``pipeline.flows.api_server`` spares the command), and the time until
a server started by ``api_server`` answers.

    python bench/profile_startup.py [--rounds 5] [--limit 50] [--data-file path/to/test.jsonl] [--served]

``--served`` adds a third side: the same command through Prefect against a server that is already
running (``PREFECT_API_URL``; here one the bench starts), what a long-lived ``prefect server start``
gives every run.

Target (issue 34): through Prefect at most 5 s slower than ``--no-prefect``.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 5.0


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def cpu_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of one command (its waited-for children included)."""
    cpu = cpu_children()
    t = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t
    if done.returncode:
        sys.exit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return wall, cpu_children() - cpu


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} s (range {min(values):.2f} to {max(values):.2f})"


def part(code: str, env: dict[str, str]) -> float:
    """Wall seconds of ``python -c code`` in a fresh process, less the bare interpreter's start."""
    bare, _ = timed([sys.executable, "-c", "pass"], env)
    wall, _ = timed([sys.executable, "-c", code], env)
    return wall - bare


# One profile through the flow in a fresh process, as the command runs it, with the time of each
# step: the server launched, Prefect imported, the run's engines and modules warmed up, the wait
# for the server, the flow, the server's stop.
TIMELINE = """
import sys, time
t0 = time.perf_counter()
marks = []
def mark(what):
    marks.append((what, time.perf_counter()))
from pipeline.flows import api_server
api_server.start(); mark("api_server.start (launch)")
from pipeline import run
from pipeline.flows.executors import warm_up
from pipeline.store import Store
with api_server.gc_paused():
    from pipeline.flows import prefect_flows
mark("import the run's modules, Prefect and the flows")
cfg = run.ProfileConfig.build(**eval(sys.argv[2]))
warm_up(cfg); mark("warm-up (sampler, scipy, pandas)")
api_server.ensure(); mark("wait for the server to answer")
prefect_flows.profile_flow(cfg, Store(sys.argv[1])); mark("the flow (the run itself)")
api_server.stop(); mark("stop the server")
last = t0
for what, t in marks:
    print(f"    {what}: {t - last:.2f} s")
    last = t
print(f"    total {last - t0:.2f} s")
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--limit", type=int, default=50)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--data-file", help="a dataset file (default: the bundled arithmetic set)")
    ap.add_argument("--no-parts", action="store_true", help="skip the breakdown of Prefect's start-up")
    ap.add_argument("--served", action="store_true", help="also time runs against a running server")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="profile-startup-"))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PREFECT_HOME": str(work / "prefect")}
    env.pop("PREFECT_API_URL", None)  # a one-off run: Prefect's own temporary server, as a first user has
    env.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    base = [sys.executable, "-m", "pipeline", "profile", "--backend", "simulate"]
    base += ["--limit", str(args.limit), "--n", str(args.n)]
    if args.data_file:
        base += ["--data-file", args.data_file]

    sides = {"without Prefect": ([*base, "--no-prefect"], env), "through Prefect": ([*base, "--prefect"], env)}
    if args.served:
        # A long-running server of the user's (as `prefect server start` gives): here one started
        # by api_server in this process and named to the commands by PREFECT_API_URL.
        from pipeline.flows import api_server

        os.environ["PREFECT_HOME"] = env["PREFECT_HOME"]
        api_server.start()
        served_env = {**env, "PREFECT_API_URL": api_server.ensure()}
        sides["Prefect, running server"] = ([*base, "--prefect"], served_env)

    # One untimed run each way: .pyc files written, Prefect's database created and migrated.
    for name, (command, side_env) in sides.items():
        timed([*command, "--data-dir", str(work / f"warm-{len(name)}")], side_env)

    print(f"load before: {load()}")
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
    names = list(sides)
    for r in range(args.rounds):
        for name in names if r % 2 == 0 else names[::-1]:  # which side goes first alternates
            command, side_env = sides[name]
            times[name].append(timed([*command, "--data-dir", str(work / f"{r}-{len(name)}")], side_env))
    print(f"load after:  {load()}")

    what = f"{args.limit} prompts x n={args.n}, simulate, {args.data_file or 'bundled arithmetic'}"
    print(f"difficulty profile ({what}), {args.rounds} rounds taking turns; medians:")
    for name, got in times.items():
        walls, cpus = zip(*got, strict=True)
        print(f"  {name:24} wall {spread(list(walls))}, CPU {spread(list(cpus))}")
    direct = statistics.median(w for w, _ in times["without Prefect"])
    for name in names[1:]:
        flow = statistics.median(w for w, _ in times[name])
        pairs = [f - d for (f, _), (d, _) in zip(times[name], times["without Prefect"], strict=True)]
        print(
            f"  {name} - without: {flow - direct:+.2f} s (medians; per round "
            f"{', '.join(f'{p:+.2f}' for p in pairs)}); ratio {flow / direct:.2f}x  [target: at most +{TARGET_S:g} s]"
        )

    if args.no_parts:
        return
    print("where Prefect's start-up goes (fresh processes, bare interpreter start subtracted):")
    print(f"  import prefect: {part('import prefect', env):.2f} s")
    print(
        f"  import prefect + its server module (what Prefect's own start costs the command's process, "
        f"spared by api_server): {part('import prefect.server.api.server', env):.2f} s"
    )
    settings = {"backend": "simulate", "limit": args.limit, "n": args.n}
    if args.data_file:
        settings["data_file"] = args.data_file
    timeline = [sys.executable, "-c", TIMELINE, str(work / "timeline"), repr(settings)]
    done = subprocess.run(timeline, env=env, capture_output=True, text=True, cwd=ROOT)
    print("  one profile through the flow, step by step (in one process, as the command runs it):")
    print(done.stdout.rstrip() or done.stderr[-2000:])
    print(f"load at the end: {load()}")


if __name__ == "__main__":
    main()
