"""Benchmark: the grading stage (process pool + numeric fast path) vs single-process math-verify.

Items are made here, deterministically: prompts with a gold answer and G completions each, half
with numeric golds (GSM8K-like: ``#### 72``, ``\\boxed{72}``, ``The answer is 72.``) and half with
symbolic golds (surds, multiples of pi, polynomials, intervals, fractions of surds), the
completions a mix of equivalent forms and wrong answers, boxed or in a ``$...$`` span. Everything
runs in this process (the pool's workers are its children), on the same items:

1. ``mixed``: ``grade_table`` with a warm pool against the baseline, a plain loop of the reference
   ``verify(parse("\\boxed{" + gold + "}"), parse(completion))`` in this process on every item
   (math-verify on the whole completion, with its own signal timeouts). Target: at least 1.6x on
   2 cores. Also printed: how often the two agree (any difference must be one of docs/guide/grading.md's
   deliberate differences) and the share of items the numeric fast path decided.
2. ``pool``: symbolic pairs only, each pair unique, ``GradingPool.grade`` against the same
   function (:func:`pipeline.grade.math_verify_grade`, same gold cache) called in this process:
   the parallel speed-up of the pool alone, without the fast path or de-duplication.
3. ``numeric``: ``grade_table`` on numeric items only (no worker is started), in samples per
   second, with the share the fast path decided. Target: at least 50,000/s.

    python bench/grading.py [--prompts 200] [--g 8] [--workers 2] [--rounds 2]

The two sides of a comparison run in alternating rounds and each keeps its best round; CPU
seconds per item (this process plus the workers) are printed too, since on a machine shared with
other work the wall-clock ratio also measures how many cores were free.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from pipeline.grade import (
    GradeConfig,
    GradingPool,
    grade_table,
    grader_version,
    math_verify_grade,
)
from pipeline.grade.extract import latex_wrap


def _symbolic(k: int, rng: random.Random) -> tuple[str, list[str]]:
    """A symbolic gold answer and candidate predictions (equivalent forms and wrong ones)."""
    kind = k % 5
    if kind == 0:
        gold = f"\\frac{{\\sqrt{{{k}}}}}{{2}}"
        preds = [gold, f"\\sqrt{{{k}}}/2", f"\\frac{{1}}{{2}}\\sqrt{{{k}}}", f"\\sqrt{{{k + 1}}}/2"]
    elif kind == 1:
        gold = f"{k}\\pi"
        preds = [gold, f"\\pi \\cdot {k}", f"{k + 1}\\pi", f"\\frac{{{2 * k}\\pi}}{{2}}"]
    elif kind == 2:
        gold = f"x^2 + {k}x"
        preds = [gold, f"x(x+{k})", f"x^2+{k + 1}x", f"{k}x + x^{{2}}"]
    elif kind == 3:
        gold = f"({k}, {k + 2}]"
        preds = [gold, f"({k},{k + 2}]", f"[{k}, {k + 2}]", f"({k + 1}, {k + 2}]"]
    else:
        gold = f"\\frac{{{k}}}{{\\sqrt{{3}}}}"
        preds = [gold, f"\\frac{{{k}\\sqrt{{3}}}}{{3}}", f"{k}/\\sqrt{{3}}", f"\\frac{{{k}}}{{3}}"]
    rng.shuffle(preds)
    return gold, preds


def make_items(prompts: int, g: int, seed: int = 0, numeric_share: float = 0.5) -> pa.Table:
    """Items of ``prompts`` prompts x ``g`` samples; a new seed gives new expressions."""
    rng = random.Random(seed)
    rows: dict[str, list] = {"prompt_id": [], "sample_idx": [], "completion": [], "gold": []}
    for p in range(prompts):
        numeric = rng.random() < numeric_share
        if numeric:
            n = rng.randint(2, 5000)
            gold = str(n)
            preds = [f"{n:,}", str(n), str(n + rng.randint(1, 9)), str(n - 1)]
        else:
            gold, preds = _symbolic(seed * 100_003 + p, rng)
        for s in range(g):
            pred = preds[rng.randrange(len(preds))]
            style = rng.randrange(4)
            if style == 0:
                text = f"Let me work it out step by step.\nSo the answer is $\\boxed{{{pred}}}$."
            elif style == 1 and numeric:
                text = f"First we add things up, {n // 2} and more.\n#### {pred}"
            elif style == 3 and numeric:
                text = f"We add {n // 2} and the rest. The answer is {pred}."
            elif style == 3:
                text = f"Simplifying once more, we find ${pred}$."
            else:
                text = f"We compute carefully ... therefore the result is \\boxed{{{pred}}}"
            rows["prompt_id"].append(f"p{p}")
            rows["sample_idx"].append(s)
            rows["completion"].append(text)
            rows["gold"].append(gold)
    return pa.table(rows)


def baseline(items: pa.Table) -> list[bool]:
    """Single-process math-verify on every whole completion: the reference, as a loop."""
    from math_verify import parse, verify

    out = []
    for completion, gold in zip(items.column("completion").to_pylist(), items.column("gold").to_pylist(), strict=True):
        out.append(bool(verify(parse(latex_wrap(gold)), parse(completion))))
    return out


def fast_share(table: pa.Table) -> float:
    """Share of rows the numeric fast path decided (no math-verify worker involved)."""
    reasons = table.column("grade_reason").to_pylist()
    return sum(r.startswith("numeric exact") for r in reasons) / max(1, len(reasons))


def _workers_cpu(pool: GradingPool) -> float:
    """CPU seconds used so far by the pool's workers (Linux /proc; 0 elsewhere)."""
    total = 0.0
    for pid in pool.worker_pids():
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except OSError:
            return 0.0
    return total


def interleaved(rounds: int, pool: GradingPool, sides: dict[str, Callable[[int], Any]]):
    """Runs the sides in turn, ``rounds`` times; keeps each side's best wall time.

    Each round passes its number to the sides, which grade that round's own items: a repeat of
    the same items would measure sympy's and math-verify's caches instead of grading.
    Alternating rounds spread a machine's load changes over both sides.

    Returns:
        ``{side: (wall_s, cpu_s, results)}``: the best round's times (cpu_s counts this process
        and the workers) and every round's result, in round order.
    """
    best: dict[str, tuple[float, float, list[Any]]] = {}
    results: dict[str, list[Any]] = {name: [] for name in sides}
    for r in range(rounds):
        for name, fn in sides.items():
            cpu0, wcpu0 = time.process_time(), _workers_cpu(pool)
            start = time.perf_counter()
            result = fn(r)
            wall = time.perf_counter() - start
            cpu = time.process_time() - cpu0 + _workers_cpu(pool) - wcpu0
            results[name].append(result)
            if name not in best or wall < best[name][0]:
                best[name] = (wall, cpu, results[name])
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=200)
    ap.add_argument("--g", type=int, default=8)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--numeric-items", type=int, default=50_000)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("math_verify").setLevel(logging.ERROR)

    config = GradeConfig(workers=args.workers, batch_size=args.batch_size)
    print(f"grader {grader_version(config)}; cpus {os.cpu_count()}; load average before {os.getloadavg()[0]:.2f}")
    items = [make_items(args.prompts, args.g, seed=1 + r) for r in range(args.rounds)]
    n = items[0].num_rows
    pairs = [
        sorted(
            {
                (gold, f"so the answer is $\\boxed{{{pred}}}$")
                for k in range(args.prompts)
                for gold, preds in [_symbolic(10_000_000 * (r + 1) + k, random.Random(k))]
                for pred in preds
            }
        )
        for r in range(args.rounds)
    ]

    def in_process(r: int) -> list[tuple[str, str]]:
        cache: dict = {}
        return [math_verify_grade(g, p, cache) for g, p in pairs[r]]

    baseline(make_items(10, 4, seed=0))  # import and warm math-verify in this process first
    start = time.perf_counter()
    with GradingPool(config) as pool:
        pool.grade([("1", "$\\sqrt{1}$")] * (2 * args.workers))  # wait until the workers are up
        t_start = time.perf_counter() - start

        # 1. mixed items: the stage against single-process math-verify.
        res = interleaved(
            args.rounds,
            pool,
            {
                "baseline": lambda r: baseline(items[r]),
                "stage": lambda r: grade_table(items[r], config, pool=pool),
            },
        )
        (t_base, c_base, base_correct), (t_stage, c_stage, graded) = res["baseline"], res["stage"]
        agree = sum(
            a == b
            for verdicts, table in zip(base_correct, graded, strict=True)
            for a, b in zip(verdicts, table.column("correct").to_pylist(), strict=True)
        )
        share = sum(fast_share(t) for t in graded) / len(graded)
        print(
            f"mixed    {n} items ({args.prompts} prompts x {args.g}, half symbolic): "
            f"single-process math-verify {n / t_base:,.0f}/s ({c_base / n * 1e3:.1f} ms cpu/item), "
            f"stage {n / t_stage:,.0f}/s ({c_stage / n * 1e3:.1f} ms cpu/item; warm pool of "
            f"{args.workers}, start-up {t_start:.2f}s): ratio {t_base / t_stage:.2f}x "
            f"(target >= 1.6); same verdict as baseline {agree}/{n * args.rounds}; "
            f"fast path decided {share:.1%}"
        )

        # 2. the pool alone: unique symbolic pairs, the same function on both sides.
        res = interleaved(args.rounds, pool, {"in-process": in_process, "pool": lambda r: pool.grade(pairs[r])})
        (t_one, c_one, one), (t_many, c_many, many) = res["in-process"], res["pool"]
        same = sum(a[0] == b[0] for x, y in zip(one, many, strict=True) for a, b in zip(x, y, strict=True))
        m = len(pairs[0])
        print(
            f"pool     {m} unique symbolic pairs: in-process {m / t_one:,.0f}/s "
            f"({c_one / m * 1e3:.1f} ms cpu/pair), pool {m / t_many:,.0f}/s "
            f"({c_many / m * 1e3:.1f} ms cpu/pair): ratio {t_one / t_many:.2f}x; "
            f"same status {same}/{sum(map(len, pairs))}"
        )

    # 3. the numeric fast path, end to end through grade_table (no worker starts).
    numeric = make_items(args.numeric_items // args.g, args.g, seed=1, numeric_share=1.0)
    t_num = float("inf")
    for _ in range(args.rounds):
        start = time.perf_counter()
        out = grade_table(numeric, config)
        t_num = min(t_num, time.perf_counter() - start)
    k = numeric.num_rows
    sample = numeric.slice(0, 1_000)
    start = time.perf_counter()
    baseline(sample)
    mv_rate = sample.num_rows / (time.perf_counter() - start)
    rate = k / t_num
    print(
        f"numeric  {k} items: fast path {rate:,.0f}/s (target >= 50,000; decided {fast_share(out):.1%} "
        f"of them); math-verify on the same kind {mv_rate:,.0f}/s: ratio {rate / mv_rate:.1f}x"
    )
    print(f"load average after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
