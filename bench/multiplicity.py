"""Benchmark: multiplicity, a prompt given several groups in a step, against selection alone (docs/curriculum.md §9).

A replay cannot measure multiplicity: a log holds the one group each prompt had per step. So this bench
runs each policy against the truths of ``bench/curriculum.py`` directly: at every step the policy hands
out ``--batch-size`` groups of ``--G`` rollouts (``choose_groups``), each group's outcome is drawn at
the prompt's true pass rate of that step, and the policy learns each prompt's summed counts. Per 1,000
rollouts it reports the non-silent groups (``0 < c < G``) and the expected update mass, the GRPO
update mass ``w(p, G) p q`` at the true ``p`` of every group trained on (docs/estimators.md §1; the
expectation over the outcomes, so it does not depend on the draw), with the coverage (the share of
prompts given a group in the last 10 steps) and the distinct prompts per step. Policies: ``uniform``,
selection only (``signal``, the default, and the same ranking by expected mass), and selection with
multiplicity (``max_groups`` of them). Mean and spread over ``--seeds``.

Three scales by default: the curriculum bench's (2,000 prompts, 256 groups a step), where the prompts
worth a group outnumber the free groups of a batch; 1,000 prompts; and a batch of half the dataset
(500 prompts: a small dataset, or one mostly solved), where they do not and selection alone must fill
the batch with worse prompts. About 6 CPU minutes.

    PYTHONPATH=$PWD python bench/multiplicity.py [--prompts 2000,1000,500] [--steps 50] [--batch-size 256] [--seeds 3]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from curriculum import POLICY_SEED, TRUTHS  # noqa: E402 - bench/curriculum.py, run as a script beside this one

from pipeline import curriculum, estimators  # noqa: E402

#: Row label -> policy spec; ``selection`` rows pick each prompt at most once a step.
POLICIES = {
    "uniform": "uniform",
    "selection (signal, default)": "signal",
    "selection (signal, mass)": "signal:objective=mass",
    "multiplicity (signal, mass, max_groups=2)": "signal:objective=mass,max_groups=2",
    "multiplicity (signal, mass, max_groups=4)": "signal:objective=mass,max_groups=4",
}
#: The rows the bench's verdict compares: selection with multiplicity against selection alone.
SELECTION, MULTIPLICITY = "selection (signal, default)", "multiplicity (signal, mass, max_groups=4)"
HARD_SKEWED = "mostly-hard"  # 90% never solved: fewer prompts worth a group than a batch has groups
COVERAGE_WINDOW = curriculum.COVERAGE_WINDOW


def truth_rates(truth: str, prompts: int, steps: int, G: int, seed: int) -> np.ndarray:
    """The truth's pass rate of every prompt at every step, ``(steps, prompts)``."""
    log = TRUTHS[truth](prompts, steps, G, seed=seed)
    return log.column("p").to_numpy().reshape(steps, prompts)


def simulate(rates: np.ndarray, spec: str, batch: int, G: int, seed: int) -> dict:
    """Run ``spec`` for every step of ``rates``: ``batch`` groups a step, outcomes drawn at the true rates."""
    steps, prompts = rates.shape
    ids = [f"p{i:05d}" for i in range(prompts)]
    policy = curriculum.make_policy(spec, ids, seed=POLICY_SEED + seed, G=G)  # apart from the truth's seed
    grpo = estimators.get("grpo")
    rng = np.random.default_rng(10_000 + seed)  # outcomes: the same stream for every policy's first draws
    everyone = np.arange(prompts)
    groups = nonsilent = 0
    mass = 0.0
    distinct = []
    seen = np.zeros(prompts, dtype=bool)
    for t in range(steps):
        slots = policy.choose_groups_index(batch, everyone)
        p = rates[t, slots]
        c = rng.binomial(G, p)
        groups += len(slots)
        nonsilent += int(((c > 0) & (c < G)).sum())
        mass += float(grpo.mass(p, G).sum())
        uniq, inv = np.unique(slots, return_inverse=True)
        distinct.append(len(uniq))
        policy.update_index(uniq, G * np.bincount(inv).astype(float), np.bincount(inv, weights=c), t)
        if t >= steps - COVERAGE_WINDOW:
            seen[uniq] = True
    rollouts = groups * G
    return {
        "nonsilent_per_1k": 1000 * nonsilent / rollouts,
        "mass_per_1k": 1000 * mass / rollouts,
        "coverage": float(seen.mean()),
        "distinct": float(np.mean(distinct)),
    }


def run(args) -> dict:
    out: dict = {}
    truths = args.truths.split(",") if args.truths else list(TRUTHS)
    for prompts in (int(x) for x in str(args.prompts).split(",")):
        for truth in truths:
            rows = out[(prompts, truth)] = {label: [] for label in POLICIES}
            for seed in range(args.seeds):
                rates = truth_rates(truth, prompts, args.steps, args.G, seed)
                for label, spec in POLICIES.items():
                    rows[label].append(simulate(rates, spec, args.batch_size, args.G, seed))
    return out


def report(out: dict, batch: int) -> bool:
    """Prints every table; True when multiplicity is never below selection and, on the hard-skewed truth,
    at least 1.15x it."""
    ok = True
    for (prompts, truth), rows in out.items():
        print(f"\n== {truth}, {prompts} prompts, {batch} groups a step == per 1,000 rollouts (mean +- sd over seeds)")
        print(
            f"  {'policy':44s} {'non-silent groups':>18s} {'update mass':>16s} {'coverage':>9s} {'prompts/step':>12s}"
        )
        mean = {}
        for label, runs in rows.items():
            col = {key: np.array([r[key] for r in runs]) for key in runs[0]}
            mean[label] = float(col["mass_per_1k"].mean())
            print(
                f"  {label:44s} {col['nonsilent_per_1k'].mean():9.1f} +- {col['nonsilent_per_1k'].std():5.1f}"
                f" {col['mass_per_1k'].mean():8.1f} +- {col['mass_per_1k'].std():4.1f}"
                f" {col['coverage'].mean():9.3f} {col['distinct'].mean():12.1f}"
            )
        ratio = mean[MULTIPLICITY] / mean[SELECTION]
        need = 1.15 if truth == HARD_SKEWED else 1.0
        print(f"  multiplicity / selection, update mass: {ratio:.3f}x (bar: at least {need}x)")
        ok &= ratio >= need
    print(f"\nmultiplicity meets the bench's bar on every truth: {'yes' if ok else 'NO'}")
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", default="2000,1000,500", help="comma-separated dataset sizes, one table each")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=256, help="groups per step")
    parser.add_argument("--G", type=int, default=8)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--truths", default=None, help="comma-separated subset of " + ", ".join(TRUTHS))
    args = parser.parse_args()
    start = time.perf_counter()
    report(run(args), args.batch_size)
    print(f"{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
