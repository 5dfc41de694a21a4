"""Benchmark: the profile through the Prefect flow vs the same stages called directly.

Everything runs in this process on the bundled model. The model and the grading workers are
loaded once before either side, so neither pays them. Then:

1. direct: ``prepare_run``, ``run_shard`` per shard and ``finish_run`` called in a loop;
2. a throwaway tiny flow run, which starts Prefect's ephemeral API server (the cold start a
   ``difficulty profile`` command pays once);
3. the flow: the same profile through ``profile_flow`` into a fresh data directory, with each
   task timed twice: from the flow body (what the flow waits for) and inside the task (the stage's
   own work). The difference is Prefect's per-task overhead.

    python bench/flow_overhead.py [--limit 72] [--n 8] [--max-tokens 48] [--shard-size 24]

Defaults are the default profile (72 bundled problems, n = 8, 48 tokens) cut into 3 shards so
the per-shard overhead is measured more than once. Prints the fixed start-up and the per-shard
overhead as a share of the shard's own work (target: under 5%).
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit", type=int, default=72)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--shard-size", type=int, default=24)
    ap.add_argument("--report", action="store_true", help="also render the HTML report")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="flow-overhead-"))
    os.environ.setdefault("PREFECT_HOME", str(work / "prefect"))
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")

    import pyarrow as pa

    from pipeline import grade, reports
    from pipeline import run as stages
    from pipeline.store import Store

    cfg = stages.ProfileConfig.build(
        limit=args.limit, n=args.n, max_tokens=args.max_tokens, shard_size=args.shard_size, report=args.report
    )

    # Warm-up: load the model and start the grading workers (cached per process).
    t = time.perf_counter()
    warm = cfg.with_settings(limit=2, n=1, max_tokens=4, shard_size=2)
    executor = stages.local_executor(cfg)
    plan = stages.prepare_run(warm, Store(work / "warm"), executor.model_name)
    stages.sample_and_grade(warm, stages.shard_job(plan, 0))
    items = pa.table(
        {"prompt_id": ["w"], "sample_idx": [0], "completion": ["\\boxed{x+1}"], "gold": ["1+x"]}
    )  # not numeric: goes to (and starts) the math-verify workers
    grade.grade_table(items, cfg.grading, pool=stages.get_grading_pool(cfg.grading))
    print(f"warm-up (model load, grading workers): {time.perf_counter() - t:.2f} s")

    # 1. direct
    d_dir = Store(work / "direct")
    t0 = time.perf_counter()
    plan = stages.prepare_run(cfg, d_dir, executor.model_name)
    t_prepare = time.perf_counter() - t0
    direct_shards = []
    for shard in range(len(plan.shards)):
        t = time.perf_counter()
        stages.run_shard(d_dir, plan, shard, executor)
        direct_shards.append(time.perf_counter() - t)
    t = time.perf_counter()
    stages.finish_run(d_dir, plan)
    if cfg.execution.report:
        reports.write_run_report(d_dir, plan.run_id)
    t_finish = time.perf_counter() - t
    t_direct = time.perf_counter() - t0

    # 2. cold start of Prefect (imports, ephemeral server, first flow run)
    t = time.perf_counter()
    from pipeline.flows import prefect_flows

    t_import = time.perf_counter() - t
    t = time.perf_counter()
    prefect_flows.profile_flow(warm, Store(work / "cold"))
    t_cold = time.perf_counter() - t

    # 3. the flow, each task timed from outside (flow body) and inside (the stage itself)
    timings: dict[str, list[tuple[float, float]]] = {"load": [], "shard": [], "finish": []}
    inner: list[float] = []

    def timed_fn(fn):
        @functools.wraps(fn)
        def wrapper(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                inner.append(time.perf_counter() - t)

        return wrapper

    class Timed:
        def __init__(self, task, key):
            self.task, self.key = task, key
            task.fn = timed_fn(task.fn)

        def __call__(self, *a, **k):
            t = time.perf_counter()
            out = self.task(*a, **k)
            timings[self.key].append((time.perf_counter() - t, inner.pop()))
            return out

    originals = {}
    for name, key in (("load_task", "load"), ("shard_task", "shard"), ("finish_task", "finish")):
        originals[name] = getattr(prefect_flows, name)
        setattr(prefect_flows, name, Timed(originals[name], key))
    try:
        t = time.perf_counter()
        prefect_flows.profile_flow(cfg, Store(work / "flow"))
        t_flow = time.perf_counter() - t
    finally:
        for name, task in originals.items():
            setattr(prefect_flows, name, task)
        stages.close_engines()

    calls = [o for v in timings.values() for o, _ in v]
    fixed = t_flow - sum(calls)
    per_shard = [o - i for o, i in timings["shard"]]
    shard_work = [i for _, i in timings["shard"]]
    share = statistics.mean(per_shard) / statistics.mean(shard_work)

    n_shards = len(plan.shards)
    print(
        f"profile: {args.limit} problems x n={args.n}, max_tokens={args.max_tokens}, "
        f"{n_shards} shards of {args.shard_size}"
    )
    print(
        f"direct: total {t_direct:.2f} s (prepare {t_prepare:.2f}, shards "
        f"{', '.join(f'{s:.2f}' for s in direct_shards)}, finish {t_finish:.2f})"
    )
    print(f"flow:   total {t_flow:.2f} s (tasks as waited for by the flow: {', '.join(f'{o:.2f}' for o in calls)})")
    print(
        f"cold start, once per process: import Prefect {t_import:.2f} s + ephemeral server and "
        f"first (tiny) flow run {t_cold:.2f} s"
    )
    print(f"fixed start-up per flow run (warm server; flow total - task calls): {fixed:.3f} s")
    for k in ("load", "finish"):
        o, i = timings[k][0]
        print(f"  {k} task overhead: {o - i:.3f} s ({(o - i) / i:.1%} of its {i:.2f} s)")
    print(
        f"per-shard overhead: {statistics.mean(per_shard):.3f} s mean "
        f"(max {max(per_shard):.3f} s) = {share:.2%} of the shard's own work "
        f"({statistics.mean(shard_work):.2f} s)  [target < 5%]"
    )
    print(
        f"flow / direct total: {t_flow / t_direct:.3f}; (flow - direct) / direct: {(t_flow - t_direct) / t_direct:.2%}"
    )


if __name__ == "__main__":
    main()
