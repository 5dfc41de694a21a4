"""Benchmark: curriculum policies replayed on a synthetic drifting training log (docs/curriculum.md §6).

``--prompts`` prompts x ``--steps`` steps, groups of ``--G``, every prompt observed at every step (a
log where the trainer drew every prompt, so any policy can be replayed on it). True pass rates move
like a training run's: at the start a U-shaped ``Beta(0.35, 0.35)``; ``--improving`` of the prompts
gain a random logit rate per step (0.02 to 0.2) with noise, the rest stay flat up to noise. Each
policy picks ``--batch-size`` prompts a step (``curriculum.replay``); the oracle sees the step's
outcomes. Prints signal yield and coverage (prompts picked in the last 10 steps) per policy and the
ratio default / uniform (target >= 1.4 at coverage >= 0.7).

    PYTHONPATH=$PWD python bench/curriculum.py [--prompts 2000] [--steps 50] [--batch-size 256]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pyarrow as pa

from pipeline import curriculum, specs


def drifting_log(prompts: int, steps: int, G: int, *, improving: float = 0.7, seed: int = 0) -> pa.Table:
    """The synthetic log (``step, prompt_id, n, c``) and nothing else: rates never leave the log."""
    rng = np.random.default_rng(seed)
    p0 = np.clip(rng.beta(0.35, 0.35, prompts), 1e-4, 1 - 1e-4)
    logit = np.log(p0 / (1 - p0))
    rate = np.where(rng.random(prompts) < improving, rng.uniform(0.02, 0.2, prompts), 0.0)
    ids = np.array([f"p{i:05d}" for i in range(prompts)])
    cols: dict[str, list] = {"step": [], "prompt_id": [], "n": [], "c": []}
    for t in range(steps):
        p = 1 / (1 + np.exp(-logit))
        cols["step"].append(np.full(prompts, t))
        cols["prompt_id"].append(ids)
        cols["n"].append(np.full(prompts, G))
        cols["c"].append(rng.binomial(G, p))
        logit = logit + rate + rng.normal(0, 0.1, prompts)
    return pa.table({k: np.concatenate(v) for k, v in cols.items()})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--G", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--policies", default=",".join(curriculum.ALL_POLICIES))
    args = parser.parse_args()
    log = drifting_log(args.prompts, args.steps, args.G, seed=args.seed)
    results = {}
    for name in specs.split_specs(args.policies):
        start = time.perf_counter()
        r = curriculum.replay(log, name, args.batch_size, seed=args.seed, G=args.G)
        results[name] = r
        mark = " (default)" if r["default"] else ""
        print(
            f"{name + mark:34s} yield {r['signal_yield']:.3f}  coverage {r['coverage']:.3f}  "
            f"{time.perf_counter() - start:.2f} s"
        )
    if "uniform" in results and curriculum.DEFAULT_POLICY in results:
        u, d = results["uniform"], results[curriculum.DEFAULT_POLICY]
        print(f"default / uniform yield: {d['signal_yield'] / u['signal_yield']:.3f}x at coverage {d['coverage']:.3f}")


if __name__ == "__main__":
    main()
