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

Two more cases share one data directory between runs (``--cases``):

- ``datasets``: two profiles of one dataset (``--prompts`` at seed 41 and three quarters of it,
  half the samples, at seed 42: other problems), one after the other and then both at once as
  separate processes, each compared with the same run alone in a fresh data directory. Counted per
  run: samples lost, duplicated or mismatched; its prompts without a problem row (lost), extra
  problem rows of a prompt (duplicated), problem rows whose problem, answer or status differ from
  the run alone's (mismatched; labels a later load updated are counted apart); and the rows its
  ``export`` writes and the prompts its ``regrade`` grades, against its prompts.
- ``copy``: a finished shard copied under an unplanned shard's name and under another planned
  shard's name; ``samples`` counted through the view, then ``doctor`` run (it must report both and
  exit 1, a second ``doctor`` 0), then the run resumed; each time compared with the clean run.
- ``track``: ``difficulty track`` importing a verl rollout folder of ``--steps`` steps (300: 8
  prompts of the bundled arithmetic set x 4 rollouts a step, lines of ``--line-bytes``, over 8 KB
  so each write ends on a line boundary) while a writer process is still writing it, as verl
  does (mode "w", one line per rollout, flushed; every tenth step paused 2 s halfway, on a line
  boundary). ``--track-kills`` imports (10), spread over the writer's run, are each killed with
  SIGKILL at a random moment, every second one followed by an import run to its end (as
  ``track --interval`` would); imports go on until the writer is done, then the last one runs
  with ``--final``. Counted against what the writer wrote: steps lost, rollouts duplicated,
  steps stored partial (fewer rollouts than written), counts mismatched.
- ``rewrite``: ``--rewrite-steps`` steps (40, as ``track``'s) written and stored with ``--final``,
  then written again by a writer process with every reward flipped (mode "w": each file truncated,
  then rewritten line by line, halfway through each step a 0.3 s pause on a line boundary) while
  imports run one after another; then an import and one with ``--final``. Counted against the
  rewritten steps: steps lost, rollouts duplicated, steps partial (fewer rollouts stored than a
  step holds, after any import), counts mismatched, imports that failed.
- ``order``: the same steps written in pairs out of order (2, 1, 4, 3, ...), each paused halfway,
  while imports with ``--settle 0`` run one after another (the newest whole step stored at once);
  then one with ``--final``; counted as ``rewrite``.
- ``sigint``: ``difficulty sql`` and ``pipeline.open(d).sql(q).fetchall()`` running a query of
  hours, each sent SIGINT ``--sigints`` times (5) at a random moment 1 to 3 s in: seconds from
  the signal to the process's exit (stopped within a second) and whether it stopped.
    python bench/faults.py [--kills 20] [--prompts 2000] [--n 8] [--shard-size 50] [--seed 0]
                           [--steps 300] [--track-kills 10] [--line-bytes 9000]
                           [--rewrite-steps 40] [--sigints 5]
                           [--cases kills,datasets,copy,track,rewrite,order,sigint]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
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


def compare(reference: dict, got: pa.Table) -> tuple[int, int, int]:
    """Samples lost, duplicated and mismatched in ``got`` against ``reference`` (``keyed``)."""
    keys = keyed(got)
    bad = sum(1 for key in reference.keys() & keys.keys() if reference[key] != keys[key])
    return len(reference.keys() - keys.keys()), got.num_rows - len(keys), bad


def graded(rows: list[tuple]) -> list[tuple]:
    """What a run's grading reads of its problem rows: the problem, its gold answer and status. (A
    later load may update the other fields, labels such as ``difficulty``: the same problem text
    generated at two difficulties has one prompt id, and the latest load's labels.)"""
    return [tuple(item for item in row if item[0] in ("problem", "answer", "status")) for row in rows]


def problem_rows(store: Store, prompts: set[str]) -> dict[str, list[tuple]]:
    """Every stored problem row of ``prompts`` (as the ``problems`` view gives them)."""
    rows: dict[str, list[tuple]] = {}
    for row in store.query("select * from problems").to_pylist():
        if row["prompt_id"] in prompts:
            rows.setdefault(row["prompt_id"], []).append(tuple(sorted(row.items())))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--prompts", type=int, default=2000)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--shard-size", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=300, help="track: verl steps the writer writes")
    ap.add_argument("--track-kills", type=int, default=10, help="track: imports killed while the writer writes")
    ap.add_argument("--line-bytes", type=int, default=9000, help="track: bytes of each rollout's line")
    ap.add_argument("--rewrite-steps", type=int, default=40, help="rewrite, order: steps written")
    ap.add_argument("--sigints", type=int, default=5, help="sigint: interrupts of each kind")
    ap.add_argument(
        "--cases", default="kills,datasets,copy,track,rewrite,order,sigint", help="which cases, comma-separated"
    )
    args = ap.parse_args()
    cases = set(args.cases.split(","))
    work = Path(tempfile.mkdtemp(prefix="faults-"))
    base_env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "DIFFICULTY_GUARD")}
    base_env.update(PREFECT_HOME=str(work / "prefect"), PREFECT_SERVER_ANALYTICS_ENABLED="false")
    if "datasets" in cases:
        shared_dataset(args, work, base_env)
    if "copy" in cases:
        copied_shard(args, work, base_env)
    if "track" in cases:
        track_kills(args, work, base_env)
    if "rewrite" in cases:
        rewritten(args, work, base_env, "rewrite")
    if "order" in cases:
        rewritten(args, work, base_env, "order")
    if "sigint" in cases:
        interrupts(args, work, base_env)
    if "kills" in cases:
        kills(args, work, base_env)


def shared_dataset(args, work: Path, base_env: dict) -> None:
    """Two profiles of one dataset in one data directory, one after the other, then at once."""
    quarter = max(1, args.prompts * 3 // 4)
    runs = {
        "A": ["--limit", str(args.prompts), "--n", str(args.n), "--seed", "41"],
        "B": ["--limit", str(quarter), "--n", str(max(1, args.n // 2)), "--seed", "42"],
    }

    def start(data: Path, name: str) -> subprocess.Popen:
        cmd = [DIFFICULTY, "profile", "--backend", "simulate", "--shard-size", str(args.shard_size), *runs[name]]
        env = {**base_env, "DIFFICULTY_DATA": str(data)}
        return subprocess.Popen(cmd, env=env, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def finish(proc: subprocess.Popen) -> None:
        _, err = proc.communicate()
        assert proc.returncode == 0, err.decode()[-2000:]

    def cli(data: Path, *cmd: str) -> str:
        env = {**base_env, "DIFFICULTY_DATA": str(data)}
        out = subprocess.run([DIFFICULTY, *cmd], env=env, cwd=work, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr[-2000:]
        return out.stdout

    alone = {}
    for name in runs:  # each run alone in a fresh data directory: the reference
        t = time.perf_counter()
        finish(start(work / f"alone-{name}", name))
        store = Store(work / f"alone-{name}")
        samples = store.read_table("samples")
        prompts = set(samples.column("prompt_id").to_pylist())
        run_id = store.list_runs().column("run_id")[0].as_py()
        alone[name] = (run_id, keyed(samples), problem_rows(store, prompts))
        print(f"run {name} alone: {time.perf_counter() - t:.1f} s, {len(prompts)} prompts, {samples.num_rows} samples")

    for how in ("one after the other", "at once"):
        data = work / f"shared-{how.replace(' ', '-')}"
        t = time.perf_counter()
        if how == "at once":
            for proc in [start(data, name) for name in runs]:
                finish(proc)
        else:
            for name in runs:
                finish(start(data, name))
        elapsed = time.perf_counter() - t
        store = Store(data)
        totals = [0, 0, 0]
        for name, (run_id, reference, problems) in alone.items():
            samples = store.query("select * from samples where run_id = ?", [run_id])
            s_lost, s_dup, s_bad = compare(reference, samples)
            stored = problem_rows(store, set(problems))
            p_lost = len(problems.keys() - stored.keys())
            p_dup = sum(len(rows) - 1 for rows in stored.values())
            p_bad = sum(1 for pid, rows in stored.items() if graded(rows[:1]) != graded(problems[pid]))
            p_new = sum(1 for pid, rows in stored.items() if rows[:1] != problems[pid]) - p_bad
            export = work / f"export-{how.replace(' ', '-')}-{name}.jsonl"
            cli(data, "export", "--run", run_id, "--output", str(export))
            exported = sum(1 for _ in export.open())
            cli(data, "regrade", "--run", run_id, "--no-math-verify", "--no-report")
            regraded = (
                store.query(
                    "select count(distinct prompt_id) n from samples where starts_with(run_id, ?)", [f"{run_id}-g"]
                )
                .column(0)[0]
                .as_py()
            )
            e_lost = (len(problems) - exported) + (len(problems) - regraded)
            print(
                f"  {how}, run {name}: samples lost {s_lost}, duplicated {s_dup}, mismatched {s_bad}; "
                f"problems lost {p_lost}, duplicated {p_dup}, mismatched {p_bad}, labels updated {p_new}; "
                f"export {exported} of {len(problems)} rows; regrade {regraded} prompts"
            )
            for i, k in enumerate((s_lost + p_lost + e_lost, s_dup + p_dup, s_bad + p_bad)):
                totals[i] += k
        print(
            f"two runs of one dataset, {how} ({elapsed:.1f} s): lost {totals[0]}, duplicated {totals[1]}, "
            f"mismatched {totals[2]}"
        )


def copied_shard(args, work: Path, base_env: dict) -> None:
    """A finished shard copied under an unplanned name and under another planned shard's name."""
    data = work / "copied"
    env = {**base_env, "DIFFICULTY_DATA": str(data)}
    profile = [DIFFICULTY, "profile", "--backend", "simulate", "--limit", str(args.prompts), "--n", str(args.n)]
    profile += ["--shard-size", str(args.shard_size)]

    def run(cmd: list[str], rc: int = 0) -> str:
        out = subprocess.run(cmd, env=env, cwd=work, capture_output=True, text=True)
        assert out.returncode == rc, f"{cmd[1]} exited {out.returncode}: {out.stderr[-2000:]}"
        return out.stdout

    run(profile)
    store = Store(data)
    run_id = store.list_runs().column("run_id")[0].as_py()
    clean = keyed(store.read_table("samples"))
    folder = data / "samples" / f"run_id={run_id}"
    n_shards = len(list(folder.glob("shard-*.parquet")))
    stray, planned = folder / f"shard-{n_shards + 2:05d}.parquet", folder / "shard-00001.parquet"
    totals = [0, 0, 0]

    def counted(when: str, total: bool = True) -> None:
        view = Store(data)  # a new process's view: nothing cached
        got = view.query("select * from samples")
        k = compare(clean, got)
        for i in range(3):
            totals[i] += k[i] if total else 0
        print(f"  {when}: samples through the view lost {k[0]}, duplicated {k[1]}, mismatched {k[2]}")

    shutil.copyfile(folder / "shard-00000.parquet", stray)
    counted(f"shard-00000 copied to {stray.name}, no doctor yet")
    shutil.copyfile(folder / "shard-00000.parquet", stray)
    shutil.copyfile(folder / "shard-00000.parquet", planned)
    found = json.loads(run([DIFFICULTY, "doctor", "--format", "json"], rc=1))
    again = json.loads(run([DIFFICULTY, "doctor", "--format", "json"]))
    print(f"  doctor found {sorted(r['file'].rsplit('/', 1)[-1] for r in found)}; a second doctor found {len(again)}")
    counted("after doctor (shard-00001 was overwritten by the copy: quarantined, not counted)", total=False)
    run(profile)
    counted("after the run resumed")
    print(
        f"copied shard: lost {totals[0]}, duplicated {totals[1]}, mismatched {totals[2]} "
        "(before doctor and after the resume)"
    )


TRACK_PROMPTS, TRACK_G = 8, 4

# The writer: verl's ``_write_generations`` per step (mode "w", one JSON line per rollout), each line
# flushed, a pause halfway through every tenth step so that imports find steps half written. Its argument: a JSON
# object with the folder, steps, problems, answers, line length and pause.
WRITER = r"""
import json, sys, time
spec = json.loads(sys.argv[1])
pad = "x" * spec["line_bytes"]
for step in range(1, spec["steps"] + 1):
    with open(f"{spec['folder']}/{step}.jsonl", "w") as out:
        for i, (text, gold) in enumerate(zip(spec["problems"], spec["answers"])):
            for r in range(spec["G"]):
                ok = (i * 7 + r + step) % 3 == 0
                row = {"input": f"user\n{text}\nassistant\n", "output": pad, "gts": gold, "score": float(ok),
                       "step": step, "acc": ok}
                out.write(json.dumps(row) + "\n")
                out.flush()
                if step % spec["pause_every"] == 0 and i == len(spec["problems"]) // 2 and r == 0:
                    time.sleep(spec["pause_s"])  # half a step on disk, ending on a line boundary
"""


def expected_counts(steps: int, ids: list[str]) -> dict[tuple[int, str], tuple[int, int]]:
    """What the writer writes: per (step, prompt) the rollouts and the correct ones (its rule)."""
    out = {}
    for step in range(1, steps + 1):
        for i, pid in enumerate(ids):
            c = sum((i * 7 + r + step) % 3 == 0 for r in range(TRACK_G))
            out[step, pid] = (TRACK_G, c)
    return out


def track_kills(args, work: Path, base_env: dict) -> None:
    """The ``track`` case (see the module's docstring)."""
    rng = random.Random(args.seed)
    data, folder = work / "track-data", work / "track-rollouts"
    folder.mkdir()
    env = {**base_env, "DIFFICULTY_DATA": str(data)}
    load = subprocess.run([DIFFICULTY, "load", "arithmetic", "--limit", str(TRACK_PROMPTS)], env=env, cwd=work,
                          capture_output=True, text=True)  # fmt: skip
    assert load.returncode == 0, load.stderr[-2000:]
    problems = Store(data).read_table("problems")
    ids = problems.column("prompt_id").to_pylist()
    spec = {
        "folder": str(folder),
        "steps": args.steps,
        "problems": problems.column("problem").to_pylist(),
        "answers": problems.column("answer").to_pylist(),
        "G": TRACK_G,
        "line_bytes": args.line_bytes,
        "pause_s": 2.0,
        "pause_every": 10,
    }
    track = [DIFFICULTY, "track", str(folder), "--dataset", "arithmetic", "--source", "verl:bench"]
    t = time.perf_counter()
    writer = subprocess.Popen([sys.executable, "-c", WRITER, json.dumps(spec)])
    killed = finished = 0
    moments: list[str] = []
    full_imports: list[int] = []  # steps left pending by each import that ran to its end

    def stored() -> int:
        return len(list((data / "observations").rglob("step-*.parquet"))) if (data / "observations").exists() else 0

    k = 0
    while k < args.track_kills or writer.poll() is None:  # the kills, then imports until the writer is done
        k += 1
        if k > args.track_kills:
            done = subprocess.run([*track, "--format", "json"], env=env, cwd=work, capture_output=True, text=True)
            assert done.returncode == 0, done.stderr[-2000:]
            full_imports.append(json.loads(done.stdout)[0]["steps_pending"])
            continue
        # The kills spread over the writer's run: kill k once k / (kills + 1) of the steps are on disk.
        while writer.poll() is None and len(list(folder.glob("*.jsonl"))) < k * args.steps // (args.track_kills + 1):
            time.sleep(0.05)
        backlog = len(list(folder.glob("*.jsonl"))) - stored()
        proc = subprocess.Popen(track, env=env, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        t0 = time.perf_counter()
        if k % 3:  # two kills in three right after a random number of the waiting steps were stored
            target = stored() + rng.randrange(1, max(2, backlog))
            while proc.poll() is None and stored() < target:
                time.sleep(0.002)
        else:  # the rest at any moment (start-up, reading, writing)
            time.sleep(rng.uniform(0.2, 4.0))
        if proc.poll() is None:
            proc.kill()  # SIGKILL
            killed += 1
        else:
            finished += 1
        proc.wait()
        err = proc.stderr.read().decode()
        assert proc.returncode in (0, -signal.SIGKILL), err[-2000:]
        moments.append(f"{time.perf_counter() - t0:.1f} s: {stored()} of {len(list(folder.glob('*.jsonl')))}")
        if k % 2:
            continue
        # after every second kill, one import left to finish, as `track --interval` runs
        done = subprocess.run([*track, "--format", "json"], env=env, cwd=work, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
        full_imports.append(json.loads(done.stdout)[0]["steps_pending"])
    assert writer.wait() == 0
    t_writer = time.perf_counter() - t
    last = subprocess.run([*track, "--format", "json"], env=env, cwd=work, capture_output=True, text=True)
    assert last.returncode == 0, last.stderr[-2000:]
    pending = json.loads(last.stdout)[0]["steps_pending"]  # the newest, unless it settled meanwhile
    final = subprocess.run([*track, "--final", "--format", "json"], env=env, cwd=work, capture_output=True, text=True)
    assert final.returncode == 0, final.stderr[-2000:]
    again = subprocess.run([*track, "--final", "--format", "json"], env=env, cwd=work, capture_output=True, text=True)
    rerun_written = json.loads(again.stdout)[0]["steps_written"]

    want = expected_counts(args.steps, ids)
    rows = Store(data).query("select step, prompt_id, n, c from observations where source = 'verl:bench'").to_pylist()
    got: dict[tuple[int, str], tuple[int, int]] = {}
    duplicated = 0
    for r in rows:
        key = (r["step"], r["prompt_id"])
        duplicated += r["n"] if key in got else 0
        got[key] = (r["n"], r["c"])
    per_step: dict[int, int] = {}
    for (step, _), (n, _) in got.items():
        per_step[step] = per_step.get(step, 0) + n
    full = TRACK_PROMPTS * TRACK_G
    lost = sum(1 for step in range(1, args.steps + 1) if step not in per_step)
    partial = sum(1 for n in per_step.values() if n < full)
    duplicated += sum(max(0, n - full) for n in per_step.values())
    mismatched = sum(1 for key, value in want.items() if key in got and got[key] != value)
    print(f"track: {args.steps} steps of {full} rollouts ({args.line_bytes} B lines) written in {t_writer:.1f} s")
    print(f"  imports while it wrote: {killed} killed with SIGKILL, {finished} finished; steps stored of step files")
    print("  at each kill: " + "; ".join(moments))
    print(f"  imports run to the end between kills: {len(full_imports)}, steps they left pending: {full_imports}")
    print(f"  writer done: an import left {pending} step pending; after --final, a second one wrote {rerun_written}")
    print(
        f"track under kill -9 and a concurrent writer: steps lost {lost}, rollouts duplicated {duplicated}, "
        f"steps partial {partial}, counts mismatched {mismatched} (of {args.steps} steps)"
    )


# The rewriting writer: each step of ``order`` written in mode "w" (truncated first), one flushed
# JSON line per rollout, rewards flipped when ``flip``, a pause halfway through each step.
REWRITER = r"""
import json, sys, time
spec = json.loads(sys.argv[1])
pad = "x" * spec["line_bytes"]
for step in spec["order"]:
    with open(f"{spec['folder']}/{step}.jsonl", "w") as out:
        for i, (text, gold) in enumerate(zip(spec["problems"], spec["answers"])):
            for r in range(spec["G"]):
                ok = ((i * 7 + r + step) % 3 == 0) != spec["flip"]
                row = {"input": f"user\n{text}\nassistant\n", "output": pad, "gts": gold, "score": float(ok),
                       "step": step, "acc": int(ok)}  # 0/1: a flipped step keeps its byte count
                out.write(json.dumps(row) + "\n")
                out.flush()
                if spec["pause_s"] and i == len(spec["problems"]) // 2 and r == 0:
                    time.sleep(spec["pause_s"])  # half a step on disk, ending on a line boundary
"""


def rewritten(args, work: Path, base_env: dict, case: str) -> None:
    """The ``rewrite`` and ``order`` cases (see the module's docstring)."""
    data, folder = work / f"{case}-data", work / f"{case}-rollouts"
    folder.mkdir()
    env = {**base_env, "DIFFICULTY_DATA": str(data)}
    load = subprocess.run([DIFFICULTY, "load", "arithmetic", "--limit", str(TRACK_PROMPTS)], env=env, cwd=work,
                          capture_output=True, text=True)  # fmt: skip
    assert load.returncode == 0, load.stderr[-2000:]
    problems = Store(data).read_table("problems")
    ids = problems.column("prompt_id").to_pylist()
    steps = args.rewrite_steps
    spec = {
        "folder": str(folder),
        "problems": problems.column("problem").to_pylist(),
        "answers": problems.column("answer").to_pylist(),
        "G": TRACK_G,
        "line_bytes": args.line_bytes,
    }
    track = [
        DIFFICULTY,
        "track",
        str(folder),
        "--dataset",
        "arithmetic",
        "--source",
        f"verl:{case}",
        "--format",
        "json",
    ]
    full = TRACK_PROMPTS * TRACK_G

    def run(*extra: str) -> dict | None:
        done = subprocess.run([*track, *extra], env=env, cwd=work, capture_output=True, text=True)
        return json.loads(done.stdout)[0] if done.returncode == 0 else None

    def stored() -> dict[tuple[int, str], tuple[int, int]]:
        rows = (
            Store(data)
            .query("select step, prompt_id, n, c from observations where source = ?", [f"verl:{case}"])
            .to_pylist()
        )
        return {(r["step"], r["prompt_id"]): (r["n"], r["c"]) for r in rows}

    def short(got: dict) -> int:
        per_step: dict[int, int] = {}
        for (step, _), (n, _) in got.items():
            per_step[step] = per_step.get(step, 0) + n
        return sum(1 for n in per_step.values() if n < full)

    if case == "rewrite":  # the steps as first written, stored
        first = subprocess.run([sys.executable, "-c", REWRITER, json.dumps(
            {**spec, "order": list(range(1, steps + 1)), "flip": False, "pause_s": 0})])  # fmt: skip
        assert first.returncode == 0
        assert run("--final")["steps_written"] == steps
        order, flip, during = list(range(1, steps + 1)), True, ()
    else:
        order = [s for pair in range(1, steps + 1, 2) for s in (pair + 1, pair) if s <= steps]
        flip, during = False, ("--settle", "0")
    t = time.perf_counter()
    writer = subprocess.Popen([sys.executable, "-c", REWRITER, json.dumps({**spec, "order": order, "flip": flip,
                                                                           "pause_s": 0.3})])  # fmt: skip
    imports = failed = partial_seen = 0
    while writer.poll() is None:
        got = run(*during)
        imports += 1
        failed += got is None
        partial_seen = max(partial_seen, short(stored()))
    assert writer.wait() == 0
    t_writer = time.perf_counter() - t
    after = run()
    final = run("--final")
    failed += (after is None) + (final is None)
    got = stored()
    want = {}
    for step in range(1, steps + 1):
        for i, pid in enumerate(ids):
            c = sum(((i * 7 + r + step) % 3 == 0) != flip for r in range(TRACK_G))
            want[step, pid] = (TRACK_G, c)
    per_step: dict[int, int] = {}
    for (step, _), (n, _) in got.items():
        per_step[step] = per_step.get(step, 0) + n
    lost = sum(1 for step in range(1, steps + 1) if step not in per_step)
    duplicated = sum(max(0, n - full) for n in per_step.values())
    partial = max(partial_seen, short(got))
    mismatched = sum(1 for key, value in want.items() if key in got and got[key] != value)
    what = "written again, rewards flipped" if case == "rewrite" else "written out of order (2, 1, 4, 3, ...)"
    print(f"{case}: {steps} steps of {full} rollouts {what} in {t_writer:.1f} s; {imports} imports meanwhile")
    print(
        f"{case} beside a live writer: steps lost {lost}, rollouts duplicated {duplicated}, steps partial {partial}, "
        f"counts mismatched {mismatched}, imports failed {failed} (of {steps} steps)"
    )


RUNAWAY = "select sum(a.range * b.range) from range(100000000) a, range(100000) b"  # hours of work
NOTEBOOK = r"""
import sys, pipeline
tables = pipeline.open(sys.argv[1])
print("running", flush=True)
tables.sql(sys.argv[2]).fetchall()
"""


def interrupts(args, work: Path, base_env: dict) -> None:
    """The ``sigint`` case (see the module's docstring)."""
    rng = random.Random(args.seed)
    data = work / "sigint-data"
    env = {**base_env, "DIFFICULTY_DATA": str(data)}
    load = subprocess.run([DIFFICULTY, "load", "arithmetic", "--limit", "8"], env=env, cwd=work, capture_output=True)
    assert load.returncode == 0
    kinds = {
        "difficulty sql": [DIFFICULTY, "sql", RUNAWAY],
        "pipeline.open(d).sql(q).fetchall()": [sys.executable, "-c", NOTEBOOK, str(data), RUNAWAY],
    }
    for kind, cmd in kinds.items():
        took, running = [], 0
        for _ in range(args.sigints):
            proc = subprocess.Popen(cmd, env=env, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            if kind != "difficulty sql":
                proc.stdout.readline()
            time.sleep(rng.uniform(1.0, 3.0))
            sent = time.perf_counter()
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
                took.append(time.perf_counter() - sent)
            except subprocess.TimeoutExpired:
                running += 1
                proc.kill()
                proc.wait()
        slowest = max(took) if took else float("nan")
        print(
            f"sigint: {kind}: {len(took)} of {args.sigints} stopped, the slowest {slowest:.2f} s after SIGINT, "
            f"still running 30 s later {running}; stopped within a second: {running == 0 and slowest < 1.0}"
        )


def kills(args, work: Path, base_env: dict) -> None:
    """The kill -9 case (see the module's docstring)."""
    rng = random.Random(args.seed)
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
