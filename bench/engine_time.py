"""Benchmark: fixed n against adaptive profiling in engine time, rollouts and tokens, on a real engine.

Users pay engine time, not rollouts: answers differ in length, and an adaptive run's rounds each wait
for their slowest answer. Both configurations profile the same prompts through the pipeline's own
driver (``run.profile``: shards, grading, rounds, finish) in this process, on one engine started once
and shared (the same weights, settings and memory on both sides), so each seed's comparison is paired:

- **fixed**: ``--n`` answers a prompt (8), one round;
- **adaptive**: ``--adaptive band`` (the default target and round rule, ``--n-min`` 4, ``--n-max`` 16).

The engine time is the wall time of the sampler's calls (``Sampler.sample``; grading and storage are
left out), round barriers included: a call lasts as long as its longest answer. Tokens are the sum
of the run's ``samples.n_tokens``. Per call the bench records its answers, tokens and steps (its
longest answer, in tokens: the engine decodes that many steps); per round it prints:

- *occupancy*: tokens / (answers x steps), the share of the batch's answer slots still generating
  at an average step (exact, from the counts);
- *barrier s*: an estimate of the time the call spends past its mean answer length, waiting for its
  longest: ``per_step_s x (steps - tokens / answers)``, where a call's time is fitted over every call
  of the process as ``per_step_s x steps + per_token_s x tokens`` (nonnegative least squares): the
  first term is what a decode step costs whatever the number of answers still in it.

The fixed run goes first on even seeds and the adaptive run first on odd ones (a drift in the
machine's load then favours neither); ratios are adaptive / fixed per seed, then mean and spread
(min to max) over the seeds.

    python bench/engine_time.py --backend vllm --data-file .../gsm8k/test.jsonl   # 16 prompts, 2 seeds
    python bench/engine_time.py --backend vllm --data-file F --prompts 24 --max-tokens 256 --seeds 3
    python bench/engine_time.py --backend xllamacpp                               # the bundled arithmetic set
    python bench/engine_time.py ... --price-unit tokens   # the adaptive rule pays tokens (where supported)

``--price-unit tokens`` passes ``price_unit=tokens`` into the adaptive target; a checkout whose band
rule does not take it stops with that error before any engine starts.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline.errors import ConfigError  # noqa: E402

FIXED, ADAPTIVE = "fixed", "adaptive"
PRICE_UNITS = ("rollouts", "tokens")


# --- accounting: pure functions over the calls and the samples -------------------------------------


@dataclass(frozen=True)
class Call:
    """One sampler call: which run and round it served, its answers, their tokens, its steps (the
    longest answer: the engine decodes that many steps before the call returns) and its wall time."""

    config: str
    seed: int
    round: int
    answers: int
    tokens: int
    steps: int
    wall_s: float


def call_of(config: str, seed: int, round_: int, n_tokens: Iterable[int | None], wall_s: float) -> Call:
    """The record of one call from its answers' token counts (``samples.n_tokens`` of its rows)."""
    counts = list(n_tokens)
    missing = [i for i, k in enumerate(counts) if k is None]
    if missing:
        raise ValueError(f"{config} seed {seed} round {round_}: answers {missing[:5]} have no n_tokens")
    return Call(config, seed, round_, len(counts), sum(counts), max(counts, default=0), wall_s)


def tokens_spent(n_tokens: Iterable[int | None]) -> int:
    """A run's tokens: the sum of its samples' ``n_tokens`` (every answer must have one)."""
    counts = list(n_tokens)
    if any(k is None for k in counts):
        raise ValueError(f"{sum(k is None for k in counts)} of {len(counts)} samples have no n_tokens")
    return sum(counts)


def fit_step_cost(calls: list[Call]) -> tuple[float, float]:
    """``(per_step_s, per_token_s)`` of ``wall_s ~ per_step_s * steps + per_token_s * tokens`` over
    the calls, both nonnegative (least squares; with one call, or calls whose steps and tokens are
    proportional, the fit puts the time where the minimum-norm solution does)."""
    from scipy.optimize import nnls

    if not calls:
        raise ValueError("no calls to fit")
    a = np.array([[c.steps, c.tokens] for c in calls], dtype=float)
    b = np.array([c.wall_s for c in calls], dtype=float)
    scale = a.max(axis=0)
    scale[scale == 0] = 1.0
    x, _ = nnls(a / scale, b)
    x = x / scale
    return float(x[0]), float(x[1])


def barrier_s(call: Call, per_step_s: float) -> float:
    """Time the call spends decoding past its mean answer length while its longest answer finishes."""
    if call.answers == 0:
        return 0.0
    return per_step_s * (call.steps - call.tokens / call.answers)


def round_table(calls: list[Call], per_step_s: float) -> list[dict[str, Any]]:
    """Per (config, seed, round): calls, answers, tokens, steps (summed over its calls: they run one
    after another), the steps had the round been one call (its longest answer), wall time, occupancy
    and the barrier estimate; in first-appearance order."""
    rows: dict[tuple[str, int, int], dict[str, Any]] = {}
    for c in calls:
        row = rows.setdefault(
            (c.config, c.seed, c.round),
            {"config": c.config, "seed": c.seed, "round": c.round, "calls": 0, "answers": 0, "tokens": 0,
             "steps": 0, "steps_one_call": 0, "slots": 0, "wall_s": 0.0, "barrier_s": 0.0},
        )  # fmt: skip
        row["calls"] += 1
        row["answers"] += c.answers
        row["tokens"] += c.tokens
        row["steps"] += c.steps
        row["steps_one_call"] = max(row["steps_one_call"], c.steps)
        row["slots"] += c.answers * c.steps
        row["wall_s"] += c.wall_s
        row["barrier_s"] += barrier_s(c, per_step_s)
    out = []
    for row in rows.values():
        slots = row.pop("slots")
        row["occupancy"] = row["tokens"] / slots if slots else 0.0
        out.append(row)
    return out


def run_summary(rounds: list[dict[str, Any]], prompts: int, tokens: int) -> dict[str, Any]:
    """One run's line from its rounds (all of one config and seed) and the tokens its samples hold."""
    if len({(r["config"], r["seed"]) for r in rounds}) != 1:
        raise ValueError("run_summary takes the rounds of one run")
    engine_s = sum(r["wall_s"] for r in rounds)
    counted = sum(r["tokens"] for r in rounds)
    if counted != tokens:
        raise ValueError(f"the sampler's calls returned {counted} tokens but the run's samples hold {tokens}")
    return {
        "config": rounds[0]["config"],
        "seed": rounds[0]["seed"],
        "prompts": prompts,
        "rollouts": sum(r["answers"] for r in rounds),
        "tokens": tokens,
        "engine_s": engine_s,
        "tokens_per_s": tokens / engine_s if engine_s > 0 else float("nan"),
        "rounds": len(rounds),
        "steps": sum(r["steps"] for r in rounds),
        "steps_one_call": sum(r["steps_one_call"] for r in rounds),
        "barrier_s": sum(r["barrier_s"] for r in rounds),
    }


RATIO_KEYS = ("rollouts", "tokens", "engine_s")


def ratios(runs: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Adaptive / fixed per seed for rollouts, tokens and engine time, then over the seeds: mean, min,
    max (``{key: {"per_seed": [...], "mean", "min", "max"}}``). Every seed must have both runs."""
    by = {(r["config"], r["seed"]): r for r in runs}
    seeds = sorted({s for _, s in by})
    missing = [(cfg, s) for s in seeds for cfg in (FIXED, ADAPTIVE) if (cfg, s) not in by]
    if missing:
        raise ValueError(f"runs missing for a paired ratio: {missing}")
    out = {}
    for key in RATIO_KEYS:
        per = [by[(ADAPTIVE, s)][key] / by[(FIXED, s)][key] for s in seeds]
        out[key] = {"per_seed": per, "mean": statistics.fmean(per), "min": min(per), "max": max(per)}
    return out


# --- the runs ---------------------------------------------------------------------------------------


class TimedSampler:
    """A sampler whose calls are timed and recorded (``calls``) under the run and round now set in
    ``where`` (config, seed, round)."""

    def __init__(self, sampler: Any) -> None:
        self.sampler = sampler
        self.model_name = sampler.model_name
        self.where: tuple[str, int, int] = ("", 0, 0)
        self.calls: list[Call] = []
        if not hasattr(sampler, "sample_batches"):  # the shard then calls ``sample`` once per group
            self.sample_batches = None

    def sample(self, problems: Any, params: Any, progress: Callable[[int], None] | None = None, *, template=None):
        return self._timed(self.sampler.sample, problems, params, progress, template=template)

    def sample_batches(self, batches: list, progress: Callable[[int], None] | None = None, *, template=None):
        """A round's groups in one engine call (the vLLM sampler's), timed as one call."""
        return self._timed(self.sampler.sample_batches, batches, progress, template=template)

    def _timed(self, call: Callable, *args, **kwargs):
        t0 = time.perf_counter()
        table = call(*args, **kwargs)
        wall = time.perf_counter() - t0
        config, seed, round_ = self.where
        self.calls.append(call_of(config, seed, round_, table.column("n_tokens").to_pylist(), wall))
        return table


def target_spec(target: str, price_unit: str) -> str:
    """The adaptive target with ``price_unit=tokens`` added when the rule pays tokens."""
    if price_unit not in PRICE_UNITS:
        raise ConfigError(f"--price-unit {price_unit!r}: allowed {list(PRICE_UNITS)}")
    if price_unit == "rollouts":
        return target
    return f"{target}{',' if ':' in target else ':'}price_unit={price_unit}"


def build_configs(args, seed: int) -> dict[str, Any]:
    """The two profile configs of one seed (``ConfigError`` where this checkout refuses a setting)."""
    from pipeline.run import ProfileConfig

    common = {
        "backend": args.backend,
        "model": args.model,
        "limit": args.prompts,
        "max_tokens": args.max_tokens,
        "seed": seed,
        "report": False,
    }
    if args.data_file:
        common["data_file"] = args.data_file
    fixed = ProfileConfig.build(**common, n=args.n)
    spec = target_spec(args.target, args.price_unit)
    try:
        adaptive = ProfileConfig.build(**common, adaptive=spec, n_min=args.n_min, n_max=args.n_max)
    except ConfigError as exc:
        if args.price_unit != "rollouts" and "price_unit" in str(exc):
            raise ConfigError(
                f"--price-unit {args.price_unit}: this checkout's adaptive rule does not take a price unit "
                f"({exc}); run without --price-unit, or on a checkout whose band target takes price_unit"
            ) from exc
        raise
    return {FIXED: fixed, ADAPTIVE: adaptive}


def profile_one(config, store, timed: TimedSampler, label: str, seed: int) -> dict[str, Any]:
    """One run through the pipeline's driver on the shared engine; each round's sampler calls are
    recorded under the round's index. Returns the run id, its prompts and its samples' tokens."""
    from pipeline import run
    from pipeline.run.shards import InlineExecutor, run_pending_shards, sample_job

    def run_shards(store, plan, executor):
        timed.where = (label, seed, plan.rounds[-1] if plan.rounds else 0)
        return run_pending_shards(store, plan, executor)

    executor = InlineExecutor(timed.model_name, lambda job: sample_job(config, job, timed), config.grading)
    done = run.profile(config, store, executor, run.Steps(run_shards=run_shards))
    run_id = done.plan.run_id
    samples = store.read_table("samples", {"run_id": run_id})
    tokens = tokens_spent(samples["n_tokens"].to_pylist())
    return {"run_id": run_id, "prompts": done.plan.problems.num_rows, "tokens": tokens}


def fmt_runs(runs: list[dict[str, Any]]) -> str:
    lines = [
        f"{'run':<9}{'seed':>5}{'prompts':>8}{'rollouts':>9}{'tokens':>8}{'engine s':>10}{'tok/s':>8}"
        f"{'rounds':>7}{'steps':>7}{'1-call':>7}{'barrier s':>10}"
    ]
    for r in runs:
        lines.append(
            f"{r['config']:<9}{r['seed']:>5}{r['prompts']:>8}{r['rollouts']:>9}{r['tokens']:>8}{r['engine_s']:>10.1f}"
            f"{r['tokens_per_s']:>8.1f}{r['rounds']:>7}{r['steps']:>7}{r['steps_one_call']:>7}{r['barrier_s']:>10.1f}"
        )
    return "\n".join(lines)


def fmt_rounds(rounds: list[dict[str, Any]]) -> str:
    lines = [
        f"{'run':<9}{'seed':>5}{'round':>6}{'calls':>6}{'answers':>8}{'tokens':>8}{'steps':>6}{'1-call':>7}"
        f"{'wall s':>8}{'occup.':>7}{'barrier s':>10}"
    ]
    for r in rounds:
        lines.append(
            f"{r['config']:<9}{r['seed']:>5}{r['round']:>6}{r['calls']:>6}{r['answers']:>8}{r['tokens']:>8}"
            f"{r['steps']:>6}{r['steps_one_call']:>7}{r['wall_s']:>8.1f}{r['occupancy']:>7.2f}{r['barrier_s']:>10.1f}"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=("vllm", "xllamacpp"), default="vllm")
    ap.add_argument("--model", default=None, help="default: the bundled model (converted for vLLM on the CPU)")
    ap.add_argument("--data-file", default=None, help="a dataset file (GSM8K, MATH-500, ...); default: arithmetic")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--n", type=int, default=8, help="the fixed run's answers a prompt")
    ap.add_argument("--target", default="band", help="the adaptive target (as profile --adaptive takes it)")
    ap.add_argument("--n-min", type=int, default=4)
    ap.add_argument("--n-max", type=int, default=16)
    ap.add_argument("--price-unit", choices=PRICE_UNITS, default="rollouts")
    ap.add_argument("--seeds", type=int, default=2)
    args = ap.parse_args()

    from pipeline.run.shards import close_engines, get_sampler
    from pipeline.sample import SamplingParams, template_for
    from pipeline.store import Store

    configs = {seed: build_configs(args, seed) for seed in range(args.seeds)}  # a refused setting stops here
    load_before = os.getloadavg()[0]
    engine = configs[0][FIXED].engine
    t0 = time.perf_counter()
    sampler = get_sampler(engine.backend, engine.model, engine.backend_options)
    start_s = time.perf_counter() - t0
    print(f"engine: {args.backend} {sampler.model_name}, started in {start_s:.1f}s (import included)", flush=True)
    # A fresh engine's first step allocates its buffers: not charged to either side.
    sampler.sample([{"prompt_id": "warm-up", "problem": "1 + 1"}], SamplingParams(n=1, max_tokens=8),
                   template=template_for("arithmetic"))  # fmt: skip
    timed = TimedSampler(sampler)
    summaries = []
    with tempfile.TemporaryDirectory(prefix="engine-time-") as tmp:
        for seed in range(args.seeds):
            order = (FIXED, ADAPTIVE) if seed % 2 == 0 else (ADAPTIVE, FIXED)
            for label in order:
                store = Store(Path(tmp) / f"{label}-{seed}")
                t1 = time.perf_counter()
                out = profile_one(configs[seed][label], store, timed, label, seed)
                print(f"{label} seed {seed}: run {out['run_id']} in {time.perf_counter() - t1:.1f}s wall", flush=True)
                summaries.append((label, seed, out))
        close_engines()
    per_step_s, per_token_s = fit_step_cost(timed.calls)
    rounds = round_table(timed.calls, per_step_s)
    runs = []
    for label, seed, out in summaries:
        mine = [r for r in rounds if r["config"] == label and r["seed"] == seed]
        runs.append(run_summary(mine, out["prompts"], out["tokens"]))
    runs.sort(key=lambda r: (r["seed"], r["config"] != FIXED))
    data = Path(args.data_file).name if args.data_file else "the bundled arithmetic set"
    print(
        f"\nsettings: {args.prompts} prompts of {data}, max_tokens={args.max_tokens}, fixed n={args.n}, "
        f"adaptive {target_spec(args.target, args.price_unit)} n_min={args.n_min} n_max={args.n_max}, "
        f"{args.seeds} seeds, one {args.backend} engine shared by both sides; {os.cpu_count()} cores, "
        f"load {load_before:.1f} before, {os.getloadavg()[0]:.1f} after"
    )
    print(f"call time fit: {per_step_s * 1000:.1f} ms a step + {per_token_s * 1000:.2f} ms a token\n")
    print(fmt_rounds(rounds) + "\n")
    print(fmt_runs(runs) + "\n")
    for key, r in ratios(runs).items():
        seeds = ", ".join(f"{v:.3f}" for v in r["per_seed"])
        spread = f"spread {r['min']:.3f} to {r['max']:.3f}"
        print(f"adaptive / fixed {key:<9}: mean {r['mean']:.3f} (seeds {seeds}; {spread})")


if __name__ == "__main__":
    main()
