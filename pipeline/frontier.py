"""What a stopping rule can save, and what a fixed n would have given (``docs/adaptive.md`` §10).

The adaptive rounds themselves are ``adaptive``'s; this module measures them, for the verdict, the
report's rounds section and the benches:

- ``simulate``: an adaptive run's rounds on known outcomes, without a store;
- the fixed-n equivalence: what a fixed ``n`` is expected to give under a prior (``fixed_n_expected``,
  ``fixed_n_curve``) and the fixed ``n`` expected to match a run (``equivalent_fixed_n``);
- the frontier: the least rollouts any stopping rule spends for a misclassification (``frontier``,
  the one-sample priced rule at each of ``FRONTIER_PRICES``), and a run's settings against it under
  one prior (``rule_under_prior``).

Every sum over a prompt's counts goes through the one predictive pmf (``prior.predictive_pmf``).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from pipeline import adaptive
from pipeline import prior as priors
from pipeline.adaptive import AdaptiveConfig, Target
from pipeline.errors import ConfigError
from pipeline.prior import Prior

__all__ = [
    "FRONTIER_PRICES",
    "equivalent_fixed_n",
    "expected_misclassification",
    "fixed_n_curve",
    "fixed_n_expected",
    "fixed_n_mis_at",
    "frontier",
    "frontier_cost_at",
    "frontier_mis_at",
    "log_n_crossing",
    "marginal_pmf",
    "one_sample_rule",
    "rule_under_prior",
    "simulate",
]


def simulate(
    outcomes: np.ndarray, acfg: AdaptiveConfig, held: Prior | None = None, lengths: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, Prior]:
    """The rounds of an adaptive run on known outcomes, without a store (bench, tests):
    ``outcomes[i, s]`` is whether sample ``s`` of prompt ``i`` is correct (``n_max`` columns).
    Each round refits the prior (``prior.state_prior``) and applies the round rule, exactly as
    ``run.plan_next_round`` does on stored samples; with ``held``, every round decides under that
    prior instead (the bench's measure of what fitting the prior costs). ``lengths[i, s]``: sample
    ``s``'s answer length in tokens, which a target priced in tokens learns each prompt's price from
    (``adaptive.token_price`` of the answers so far; without it every prompt pays 1). Returns the
    final ``n``, ``c`` and prior."""
    outcomes = np.asarray(outcomes, bool)
    csum = np.concatenate([np.zeros((len(outcomes), 1), np.int64), np.cumsum(outcomes, axis=1)], axis=1)
    rows = np.arange(len(outcomes))
    n = np.full(len(outcomes), acfg.n_min, np.int64)
    c0 = csum[:, acfg.n_min]
    tsum = t2sum = None
    if lengths is not None and acfg.target.price_unit == "tokens":
        lengths = np.asarray(lengths, float)
        if lengths.shape != outcomes.shape:
            raise ConfigError(f"lengths {lengths.shape} and outcomes {outcomes.shape} differ in shape")
        zero = np.zeros((len(outcomes), 1))
        tsum = np.concatenate([zero, np.cumsum(lengths, axis=1)], axis=1)
        t2sum = np.concatenate([zero, np.cumsum(lengths**2, axis=1)], axis=1)
    round_index = 1
    while True:
        c = csum[rows, n]
        prior = held or priors.state_prior(acfg.prior, n, c, np.full_like(n, acfg.n_min), c0)
        price = None if tsum is None else adaptive.token_price(n, tsum[rows, n], t2sum[rows, n])
        extra = adaptive.next_round(n, c, prior, acfg, round_index=round_index, price=price)
        if not extra.any():
            return n, c, prior
        n = n + extra
        round_index += 1


# --- what a fixed n would have given (report, bench) --------------------------------------------


def marginal_pmf(n: int, prior: Prior) -> np.ndarray:
    """``P(c)`` for ``c = 0..n`` at a fixed ``n`` under the prior (``prior.predictive_pmf`` from no
    samples: the beta-binomial law, or under a grid prior the grid mixture of binomials)."""
    return priors.predictive_pmf(prior, n, np.arange(n + 1))[0]


def fixed_n_expected(n: int, prior: Prior, target: Target) -> tuple[float, float]:
    """What a fixed-``n`` profile is expected to give under the prior: the band misclassification
    when each prompt gets its most probable band (``E[1 - max band probability]``; NaN for the
    width target), and the share of prompts decided."""
    c = np.arange(n + 1)
    pmf = marginal_pmf(n, prior)
    d = adaptive.decide(np.full(n + 1, n), c, prior, target)
    mis = float(pmf @ (1.0 - d.prob)) if target.kind == "band" else math.nan
    return mis, float(pmf @ d.decided)


def log_n_crossing(grid, values, level: float) -> tuple[float | None, str]:
    """Where a curve ``values`` over increasing ``grid`` values of n first comes down to ``level``,
    interpolated linearly in ``log n`` between the two grid points around the crossing.

    Returns ``(n, where)``: ``where`` is ``inside``; ``below`` when the first grid point is already
    at or under ``level`` (n is then that point: the crossing is at or below it); ``above`` when no
    grid point comes down to ``level`` (n is None: the crossing is beyond the grid).
    """
    grid = [float(g) for g in grid]
    values = [float(v) for v in values]
    for i, v in enumerate(values):
        if v <= level:
            if i == 0:
                return grid[0], "below"
            n1, n2, v1 = grid[i - 1], grid[i], values[i - 1]
            t = (v1 - level) / (v1 - v) if v1 != v else 1.0
            return float(math.exp(math.log(n1) + t * (math.log(n2) - math.log(n1)))), "inside"
    return None, "above"


def fixed_n_curve(prior: Prior, target: Target, n_top: int) -> list[tuple[int, float, float]]:
    """``(n, expected misclassification, expected decided share)`` of a fixed n, ``n = 1..n_top``."""
    return [(n, *fixed_n_expected(n, prior, target)) for n in range(1, n_top + 1)]


def equivalent_fixed_n(
    prior: Prior,
    target: Target,
    misclassification: float,
    decided_share: float,
    n_top: int,
    curve: list[tuple[int, float, float]] | None = None,
) -> tuple[float | None, str, list[tuple[int, float, float]]]:
    """The fixed n expected (under the prior) to match an adaptive run: for ``band``, the n whose
    expected misclassification equals the run's expected one; for ``width``, the n whose expected
    decided share equals the run's. Returns ``(n, where, curve)`` (see ``log_n_crossing``; the
    curve is ``fixed_n_curve``'s, computed unless given)."""
    curve = fixed_n_curve(prior, target, n_top) if curve is None else curve
    grid = [n for n, _, _ in curve]
    if target.kind == "band":
        n, where = log_n_crossing(grid, [m for _, m, _ in curve], misclassification)
    else:
        n, where = log_n_crossing(grid, [-s for _, _, s in curve], -decided_share)
    return n, where, curve


# --- the frontier: what any stopping rule can save (docs/adaptive.md §10) ----------------------------

#: The prices of one rollout the frontier is traced at: from where most prompts stop at n_min to where
#: most go on towards n_max, on every bench truth.
FRONTIER_PRICES = (0.016, 0.008, 0.004, 0.002, 0.001, 0.0005, 0.00025, 0.000125, 0.0000625)


def one_sample_rule(prior: Prior, target: Target, n_min: int, n_max: int) -> tuple[float, float]:
    """Expected rollouts per prompt and expected misclassification of the priced stop rule of
    ``target`` (``stop_grid``) taken one sample per round from ``n_min`` to ``n_max``, with pass rates
    drawn from ``prior``: no sampling, an exact forward pass over the reachable ``(n, c)``."""
    grid = adaptive.stop_grid(prior, target, n_max)
    reach = np.zeros(n_max + 2)
    reach[: n_min + 1] = marginal_pmf(n_min, prior)
    cost = err = 0.0
    for n in range(n_min, n_max + 1):
        cs = np.arange(n + 1)
        here = grid[n, : n + 1]
        prob = adaptive.decide(np.full(n + 1, n), cs, prior, target).prob
        err += float(reach[: n + 1][here] @ (1 - prob[here]))
        cost += n * float(reach[: n + 1][here].sum())
        go = np.where(here, 0.0, reach[: n + 1])
        right = adaptive.posterior_mean(np.full(n + 1, n), cs, prior)
        reach = np.zeros(n_max + 2)
        reach[1 : n + 2] += go * right
        reach[: n + 1] += go * (1 - right)
    return cost, err


def frontier(
    prior: Prior, target: Target, n_min: int, n_max: int, prices: tuple[float, ...] = FRONTIER_PRICES
) -> tuple[np.ndarray, np.ndarray]:
    """The frontier of expected rollouts against expected misclassification for a band target under
    ``prior``: the one-sample priced rule (Bayes-optimal for "misclassified + price per rollout", so
    no rule with the same misclassification spends less) at each price, and its cheap end, every
    prompt stopped at ``n_min``. ``(cost, err)``, by cost."""
    if target.kind != "band":
        raise ConfigError(f"the frontier is defined for the band target, not {target.kind!r}")
    points = [one_sample_rule(prior, replace(target, cost=price), n_min, n_max) for price in prices]
    # Its cheap end: a price so high that every prompt stops at n_min (the fixed n_min).
    points = sorted({(float(n_min), fixed_n_expected(n_min, prior, target)[0]), *points})
    return np.array([p[0] for p in points]), np.array([p[1] for p in points])


def frontier_cost_at(cost: np.ndarray, err: np.ndarray, misclassification: float) -> tuple[float | None, str]:
    """The frontier's rollouts per prompt at a misclassification (log-cost interpolation between
    its points): ``(cost, "inside")``, or ``(None, "below" | "above")`` when the misclassification is
    below the frontier's least (more than its dearest point buys) or above its most."""
    order = np.argsort(err)
    e, lc = err[order], np.log(cost[order])
    if misclassification < e[0]:
        return None, "below"
    if misclassification > e[-1]:
        return None, "above"
    return float(np.exp(np.interp(misclassification, e, lc))), "inside"


def frontier_mis_at(cost: np.ndarray, err: np.ndarray, rollouts: float) -> float | None:
    """The frontier's misclassification at a number of rollouts per prompt (None outside its range)."""
    if not cost[0] <= rollouts <= cost[-1]:
        return None
    return float(np.interp(math.log(rollouts), np.log(cost), err))


def rule_under_prior(prior: Prior, acfg: AdaptiveConfig, prompts: int = 4000, seed: int = 0) -> tuple[float, float]:
    """What ``acfg`` is expected to spend and misclassify on a dataset whose pass rates follow
    ``prior``: ``prompts`` rates drawn from it, their samples, the rounds as a run makes them
    (``simulate``: its own prior fits and round rule), and the mean chance under ``prior`` that each
    prompt's reported band is wrong given its final counts. The frontier's like (both expectations
    under one prior), so the share of the frontier's saving it gives is at most 1 up to Monte Carlo
    error, which a run's own measured misclassification is not on a finite dataset."""
    rng = np.random.default_rng(seed)
    if prior.is_grid:
        points, weights = prior.grid()
        p = rng.choice(points, size=prompts, p=weights / weights.sum())
    else:
        p = rng.beta(prior.a, prior.b, prompts)
    outcomes = rng.random((prompts, acfg.n_max)) < p[:, None]
    n, c, fitted = simulate(outcomes, acfg)
    reported = adaptive.decide(n, c, fitted, acfg.target).band
    return float(n.mean()), expected_misclassification(n, c, reported, prior, acfg.target)


def expected_misclassification(n, c, reported: np.ndarray, prior: Prior, target: Target) -> float:
    """The mean chance under ``prior`` that each prompt's ``reported`` band (an index into ``BANDS``)
    is wrong given its counts: what a run misclassifies, in expectation over the coin flips."""
    probs = adaptive.band_posteriors(n, c, prior, target)
    return float(1.0 - np.take_along_axis(probs, np.asarray(reported)[None], axis=0)[0].mean())


def fixed_n_mis_at(curve: list[tuple[int, float, float]], rollouts: float) -> float:
    """A fixed n's expected misclassification at a fractional n (``equivalent_fixed_n``'s curve,
    linear in log n)."""
    ns = np.log([n for n, _, _ in curve])
    return float(np.interp(math.log(max(rollouts, 1.0)), ns, [m for _, m, _ in curve]))
