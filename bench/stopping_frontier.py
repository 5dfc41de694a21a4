"""What any stopping rule can save, computed exactly under the true distribution of pass rates
(docs/adaptive.md §4): the rule of stopping as soon as decided at several delta, and the priced
rule at several costs, each with one sample per round (the cheapest a rule can be: rounds only add
overshoot), against the fixed n with the same expected misclassification.

The priced rule at cost ``lambda`` is the Bayes-optimal stopping rule for "misclassified plus
lambda per rollout": no rule with the same expected misclassification spends fewer rollouts, so its
curve over lambda is the frontier. Everything is an expectation under the truth held as a prior
(the oracle): no sampling, no fit.

    python bench/stopping_frontier.py
    python bench/stopping_frontier.py --truths mixture --costs 0.004,0.002,0.001,0.0005
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline import adaptive, frontier  # noqa: E402
from pipeline import prior as priors  # noqa: E402

N_MIN, N_MAX = 4, 64


def truth(name: str) -> adaptive.Prior:
    """The benchmark's truths (bench/adaptive.py) as priors; the mixture held on the grid."""
    betas = {"u-shaped": (0.3, 0.4), "uniform": (1.0, 1.0), "easy-skewed": (4.0, 1.0)}
    if name in betas:
        return adaptive.Prior(*betas[name])
    pts = priors.grid_points()
    dens = pts * (1 - pts)  # Beta(2, 2) on the interior points
    w = 0.45 * dens / dens.sum()
    w[0], w[-1] = 0.30, 0.25
    return adaptive.Prior(0.5, 0.5, method="grid", points=tuple(pts), weights=tuple(w))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--truths", default="u-shaped,uniform,easy-skewed,mixture")
    ap.add_argument("--deltas", default="0.05,0.02,0.01")
    ap.add_argument("--costs", default="0.004,0.002,0.001,0.0005")
    args = ap.parse_args()
    start = time.perf_counter()
    rules = [f"band:delta={d},cost=0" for d in args.deltas.split(",")]
    rules += [f"band:cost={c}" for c in args.costs.split(",")]
    print(f"one sample per round, n {N_MIN}..{N_MAX}, expectations under the truth")
    print(f"{'truth':12s} {'rule':28s} {'rollouts':>9s} {'misclass':>9s} {'fixed n*':>9s} {'saved':>7s}")
    for name in args.truths.split(","):
        prior = truth(name)
        ns = list(range(1, N_MAX + 1))
        for spec in rules:
            target = adaptive.Target.parse(spec)
            curve = [frontier.fixed_n_expected(n, prior, target)[0] for n in ns]
            cost, err = frontier.one_sample_rule(prior, target, N_MIN, N_MAX)
            n_star, where = frontier.log_n_crossing(ns, curve, err)
            saved = f"{1 - cost / n_star:7.1%}" if n_star is not None else "   n/a"
            n_text = f"{n_star:9.1f}" if n_star is not None else f"{'>' + str(N_MAX):>9s}"
            print(f"{name:12s} {spec:28s} {cost:9.2f} {err:9.4f} {n_text} {saved}")
    print(f"total {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
