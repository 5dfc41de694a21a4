"""Benchmark of the analysis stage at Big-Math scale; prints ratios against in-process baselines.

Builds a synthetic run (default 250,000 prompts x 64 samples, pass rates from a U-shaped
Beta(0.3, 0.3), extracted answers: the right one or one of five wrong ones) as samples Parquet
in a child process, then in this process times:

1. the floor: a bare DuckDB ``GROUP BY prompt_id`` count over the samples;
2. the full analysis: ``counts_from_samples`` (with answer histograms) + ``analyze`` with every
   default estimator and G in 4, 8, 16, 32, 64 (and, separately, without answers);
3. ``allocate`` of a 16M-rollout budget (64 per prompt on average) by the fast method and by the
   reference greedy, checking both reach the same value.

Targets (issue 3): analysis within 5x the floor, peak memory under 3 GB; fast allocator at least
20x faster than greedy with the same value to 1e-9 relative.

    python bench/analysis.py                 # full scale
    python bench/analysis.py --prompts 20000 # quicker
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RUN_ID = "bench"


def generate(data_dir: Path, prompts: int, samples: int, seed: int = 0) -> None:
    """Write the synthetic samples in shards (runs in a child process, see ``main``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    folder = data_dir / "samples" / f"run_id={RUN_ID}"
    folder.mkdir(parents=True, exist_ok=True)
    p = rng.beta(0.3, 0.3, prompts)
    # 16 hex characters, like a content hash
    ids = pa.array([f"{(i * 11400714819323198485) % 2**64:016x}" for i in range(prompts)])
    answers = pa.array(["42", "w0", "w1", "w2", "w3", "w4"])
    per_shard = max(1, -(-prompts // 8))
    for shard, start in enumerate(range(0, prompts, per_shard)):
        stop = min(prompts, start + per_shard)
        m = stop - start
        correct = rng.random((m, samples)) < p[start:stop, None]
        wrong = rng.integers(1, 6, (m, samples))
        ans_idx = np.where(correct, 0, wrong).astype(np.int32).ravel()
        pid = np.repeat(np.arange(start, stop, dtype=np.int32), samples)
        table = pa.table(
            {
                "run_id": pa.DictionaryArray.from_arrays(np.zeros(m * samples, np.int32), pa.array([RUN_ID])),
                "prompt_id": pa.DictionaryArray.from_arrays(pid, ids),
                "sample_idx": pa.array(np.tile(np.arange(samples, dtype=np.int32), m)),
                "extracted_answer": pa.DictionaryArray.from_arrays(ans_idx, answers),
                "grade_status": pa.DictionaryArray.from_arrays(
                    np.where(correct, 0, 1).astype(np.int32).ravel(), pa.array(["correct", "incorrect"])
                ),
                "correct": pa.array(correct.ravel()),
            }
        )
        pq.write_table(table, folder / f"shard-{shard:05d}.parquet", row_group_size=1 << 20)


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # ru_maxrss is KiB on Linux


def timed(fn, repeat: int = 1):
    """Best wall time of ``repeat`` calls (the previous result is freed before each call)."""
    best, out = float("inf"), None
    for _ in range(repeat):
        out = None
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=250_000)
    ap.add_argument("--samples", type=int, default=64)
    ap.add_argument("--budget", type=int, default=None, help="default: 64 per prompt (16M at 250k)")
    ap.add_argument("--n-max", type=int, default=512)
    ap.add_argument(
        "--greedy-prompts",
        type=int,
        default=None,
        help="run the greedy on the first N prompts only (with a scaled budget)",
    )
    ap.add_argument("--data-dir", type=Path, default=None, help="keep the data here")
    ap.add_argument("--generate-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()

    tmp = None
    if args.data_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="bench-analysis-")
        args.data_dir = Path(tmp.name)
    if args.generate_only:
        generate(args.data_dir, args.prompts, args.samples)
        return
    if not (args.data_dir / "samples" / f"run_id={RUN_ID}").exists():
        t0 = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                __file__,
                "--generate-only",
                "--prompts",
                str(args.prompts),
                "--samples",
                str(args.samples),
                "--data-dir",
                str(args.data_dir),
            ],
            check=True,
        )
        print(
            f"generated {args.prompts:,} prompts x {args.samples} samples "
            f"in {time.perf_counter() - t0:.1f} s (child process)"
        )

    import duckdb

    from pipeline import allocate as alloc
    from pipeline import analyze
    from pipeline.store import Store

    glob = str(args.data_dir / "samples" / f"run_id={RUN_ID}" / "*.parquet")
    con = duckdb.connect(":memory:")
    floor_s, floor = timed(
        lambda: con.read_parquet(glob).aggregate("prompt_id, count(*) AS n", "prompt_id").to_arrow_table(),
        repeat=3,
    )
    con.close()
    assert floor.num_rows == args.prompts
    print(f"floor  DuckDB GROUP BY prompt_id count      {floor_s:8.3f} s")

    cfg = analyze.AnalyzeConfig(group_sizes=(4, 8, 16, 32, 64))

    def full(answers: bool):
        counts = analyze.counts_from_samples(Store(args.data_dir), RUN_ID, answers=answers)
        return counts, analyze.analyze(counts, RUN_ID, cfg)

    t_plain, (counts, res) = timed(lambda: full(False), repeat=2)
    del res
    t_full, (counts_a, res_a) = timed(lambda: full(True), repeat=2)
    t_counts, _ = timed(lambda: analyze.counts_from_samples(Store(args.data_dir), RUN_ID, answers=True))
    print(
        f"analyze (counts + {len(cfg.estimators)} estimators x {len(cfg.group_sizes)} G,"
        f" no answers) {t_plain:8.3f} s  = {t_plain / floor_s:5.2f} x floor"
    )
    print(
        f"analyze full (with answer histograms)     {t_full:8.3f} s  = "
        f"{t_full / floor_s:5.2f} x floor   (of which counts query {t_counts:.3f} s)"
    )
    print(
        f"  tables: prompt_stats {res_a.prompt_stats.num_rows:,} rows, weights "
        f"{res_a.weights.num_rows:,} rows ({res_a.weights.nbytes / 2**20:.0f} MiB), summary "
        f"{res_a.summary.num_rows:,} rows"
    )
    print(f"peak memory (RSS, this process so far)    {peak_rss_gb():8.2f} GB  (target < 3 GB)")
    del res_a, counts_a

    n = counts.column("n").to_numpy()
    c = counts.column("c").to_numpy()
    budget = args.budget or 64 * len(n)
    acfg = alloc.AllocationConfig(budget=budget, objective="signal", estimator="grpo", n_min=2, n_max=args.n_max)
    t_fast, fast = timed(lambda: alloc.allocate(n, c, acfg), repeat=2)
    print(
        f"allocate fast  budget {budget:,} (signal, grpo, n in [2, {args.n_max}])"
        f" {t_fast:8.3f} s   value {fast.total:.10g}  (uniform {fast.uniform_total:.10g},"
        f" x{fast.improvement:.3f})"
    )
    gp = args.greedy_prompts
    if gp and gp < len(n):
        gb = budget * gp // len(n)
        small = alloc.AllocationConfig(budget=gb, objective="signal", estimator="grpo", n_min=2, n_max=args.n_max)
        t_fs, fs = timed(lambda: alloc.allocate(n[:gp], c[:gp], small), repeat=2)
        gcfg = alloc.AllocationConfig(
            budget=gb, objective="signal", estimator="grpo", n_min=2, n_max=args.n_max, method="greedy"
        )
        t_g, g = timed(lambda: alloc.allocate(n[:gp], c[:gp], gcfg))
        print(f"greedy on a SCALED instance: first {gp:,} prompts, budget {gb:,}")
        print(
            f"  fast {t_fs:.3f} s vs greedy {t_g:.3f} s = {t_g / t_fs:.1f}x; "
            f"value rel diff {abs(fs.total - g.total) / abs(g.total):.2e}"
        )
    else:
        gcfg = alloc.AllocationConfig(
            budget=budget, objective="signal", estimator="grpo", n_min=2, n_max=args.n_max, method="greedy"
        )
        t_g, g = timed(lambda: alloc.allocate(n, c, gcfg))
        rel = abs(fast.total - g.total) / abs(g.total)
        same = bool((fast.n == g.n).all())
        print(f"allocate greedy (heap, reference)         {t_g:8.3f} s   value {g.total:.10g}")
        print(
            f"  fast is {t_g / t_fast:.1f}x faster than greedy (target >= 20x); value rel diff"
            f" {rel:.2e} (target <= 1e-9); identical allocation: {same}"
        )
    print(f"peak memory (RSS, whole benchmark)        {peak_rss_gb():8.2f} GB")
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
