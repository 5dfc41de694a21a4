"""Benchmark: the zero-one-inflated Beta fit with its analytic gradient against the same fit with a
finite-difference gradient (the baseline, in the same process), on counts of the truths of
``bench/truths.py`` (docs/performance.md).

Each fit is ``prior.fit_inflated_prior``'s optimisation: L-BFGS-B on ``prior.inflated_nll`` from its
two starts. The baseline hands L-BFGS-B the value alone, so scipy differences it (five evaluations a
gradient). Printed per truth and size: the best of ``--repeats`` timings of each, their ratio, and
the log-likelihoods reached (the analytic fit must reach the baseline's, to rounding). Then what the
plan's hedge adds to a round (``prior.plausible_priors`` at the default ``hedge``: the inflated Beta's
profile in a + b, both ends) against the round's own prior (``prior.choose_prior``, the ``auto``
prior every round fits), on the same counts.

    PYTHONPATH=$PWD python bench/prior_fit.py [--prompts 4000,20000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import truths  # noqa: E402

from pipeline import adaptive  # noqa: E402
from pipeline import prior as priors  # noqa: E402


def fit(n_u, c_u, mult, analytic: bool) -> float:
    """The best negative log-likelihood from ``fit_inflated_prior``'s starts and bounds."""
    from scipy.optimize import minimize

    lo, hi = math.log(priors.PRIOR_FLOOR), math.log(priors.PRIOR_CEIL)
    args = (n_u, c_u, mult, lo, hi)
    bounds = priors.inflated_bounds(lo, hi)
    best = math.inf
    for start in priors.inflated_starts(n_u, c_u, mult):
        if analytic:
            res = minimize(priors.inflated_nll, start, args=args, jac=True, method="L-BFGS-B", bounds=bounds)
        else:
            res = minimize(lambda t: priors.inflated_nll(t, *args)[0], start, method="L-BFGS-B", bounds=bounds)
        best = min(best, float(res.fun))
    return best


def timed(fn, repeats: int) -> tuple[float, float]:
    times, out = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", default="4000,20000")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--truths", default="u-shaped,mixture,edge-hard,hard")
    args = ap.parse_args()
    head = f"{'truth':12s} {'prompts':>7s} {'pairs':>5s} {'analytic ms':>11s} {'differenced ms':>14s} {'ratio':>6s}"
    print(head + "  -loglik")
    ratios = []
    for size in (int(x) for x in args.prompts.split(",")):
        for name in args.truths.split(","):
            rng = np.random.default_rng(size + sum(map(ord, name)))
            p = truths.get(name).draw(size, rng)
            n = rng.integers(4, 33, size)  # counts as after a few adaptive rounds
            c = rng.binomial(n, p)
            n_u, c_u, mult = priors._counted_pairs(n, c)
            fast, f_fast = timed(lambda n_u=n_u, c_u=c_u, mult=mult: fit(n_u, c_u, mult, True), args.repeats)
            slow, f_slow = timed(lambda n_u=n_u, c_u=c_u, mult=mult: fit(n_u, c_u, mult, False), args.repeats)
            ratios.append(slow / fast)
            print(
                f"{name:12s} {size:7d} {len(n_u):5d} {1e3 * fast:11.1f} {1e3 * slow:14.1f} {slow / fast:5.1f}x"
                f"  {f_fast:.4f} vs {f_slow:.4f}"
            )
    print(f"the analytic gradient: {min(ratios):.1f}x to {max(ratios):.1f}x faster than differencing")
    print(f"\n{'truth':12s} {'prompts':>7s} {'auto prior ms':>13s} {'hedge ms':>9s} {'ratio':>6s}  ends")
    for size in (int(x) for x in args.prompts.split(",")):
        for name in args.truths.split(","):
            rng = np.random.default_rng(size + sum(map(ord, name)))
            n = rng.integers(4, 33, size)
            c = rng.binomial(n, truths.get(name).draw(size, rng))
            auto_t, prior = timed(lambda n=n, c=c: priors.choose_prior(n, c), args.repeats)
            hedge_t, ends = timed(
                lambda n=n, c=c, prior=prior: priors.plausible_priors(prior, n, c, adaptive.PLAN_HEDGE), args.repeats
            )
            said = "; ".join(e.selection.split("part at ")[1] for e in ends) if ends else "none (inflated weight < 1%)"
            print(f"{name:12s} {size:7d} {1e3 * auto_t:13.1f} {1e3 * hedge_t:9.1f} {hedge_t / auto_t:5.2f}x  {said}")


if __name__ == "__main__":
    main()
