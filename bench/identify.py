"""What the ranges of an adaptive run's summary cost (docs/adaptive.md §7, "What the counts allow").

For adaptive runs in process (``frontier.simulate``, defaults) of a U-shaped and a spiky truth, the
time of ``identify.likelihood_bounds`` for every range a summary stores (D(G) and each default
estimator's mean mass, at every G above some prompt's n), against a baseline in the same process: one
grid-prior fit of the same counts (``prior.fit_grid_prior``, which every adaptive round already runs).

    PYTHONPATH=$PWD python bench/identify.py [--prompts 20000,2000]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from verl_curriculum import best  # noqa: E402 - bench/verl_curriculum.py: the best of repeated timings

from pipeline import adaptive, analyze, frontier  # noqa: E402
from pipeline import prior as priors  # noqa: E402

TRUTHS = {
    "u-shaped": lambda rng, N: rng.beta(0.35, 0.35, N),
    "spiky": lambda rng, N: np.where(rng.random(N) < 0.5, 0.05, 0.95),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", default="20000,2000")
    args = ap.parse_args()
    acfg = adaptive.AdaptiveConfig.from_specs("band", 4, 64, "auto")
    for N in (int(x) for x in args.prompts.split(",")):
        for name, draw in TRUTHS.items():
            rng = np.random.default_rng(100)
            p = draw(rng, N)
            n, c, prior = frontier.simulate(rng.random((N, 64)) < p[:, None], acfg)
            pairs = analyze._Pairs(n, c, analyze.posterior_config(analyze.AnalyzeConfig(), prior))
            ranges = analyze._extrapolation_bounds(pairs, pairs.mult)
            ends = 2 * len(ranges) * (1 + len(pairs.estimators))
            bounds = best(lambda pairs=pairs: analyze._extrapolation_bounds(pairs, pairs.mult), 3)
            fit = best(lambda n=n, c=c: priors.fit_grid_prior(n, c), 3)
            print(
                f"{name:9s} {N:>6,} prompts: {len(pairs.n_u)} distinct (n, c), G {sorted(ranges)}, {ends} ends: "
                f"ranges {bounds:.2f} s, grid fit {fit:.3f} s, ratio {bounds / fit:.1f}x",
                flush=True,
            )


if __name__ == "__main__":
    main()
