"""identify.likelihood_bounds: closed forms where the counts identify one moment, the outer-bound
property against random populations, and coverage on adaptive runs (Monte Carlo)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.special import xlog1py, xlogy

from pipeline import adaptive, frontier, identify
from pipeline import prior as priors
from pipeline.errors import ConfigError

POINTS = priors.grid_points()
CHI2_90 = 4.605170185988091  # chi-square(2) at 0.9: identify's threshold


def binomial_lr_interval(k: int, trials: int, q: float = CHI2_90) -> tuple[float, float]:
    """The likelihood-ratio interval of a binomial proportion, by root finding."""

    def ll(m: float) -> float:
        return float(xlogy(k, m) + xlog1py(trials - k, -m))

    top = ll(k / trials)

    def gap(m: float) -> float:
        return ll(m) - (top - q / 2)

    return brentq(gap, 1e-12, k / trials), brentq(gap, k / trials, 1 - 1e-12)


def test_threshold_is_chi_square_two():
    from scipy.stats import chi2

    for level in (0.5, 0.9, 0.95):
        assert identify.threshold(level) == pytest.approx(chi2.ppf(level, 2))


def test_one_sample_each_identifies_only_the_mean():
    """n = 1 for every prompt: the counts see only the mean m, and the set is every population
    whose mean lies in the binomial LR interval [a, b]. The mean's interval is [a, b]; D(8) reaches 1
    (masses at 0 and 1 only) and comes down to min over m in [a, b] of m^8 + (1 - m)^8, at a point
    mass, nearest 1/2 (b here)."""
    N, k = 1000, 300
    n = np.ones(N, int)
    c = np.r_[np.ones(k, int), np.zeros(N - k, int)]
    a, b = binomial_lr_interval(k, N)
    f = np.stack([POINTS, POINTS**8 + (1 - POINTS) ** 8], axis=1)
    lo, hi = identify.likelihood_bounds(n, c, f)
    assert lo[0] == pytest.approx(a, abs=identify.TOLERANCE * a)
    assert hi[0] == pytest.approx(b, abs=identify.TOLERANCE * b)
    assert hi[1] == pytest.approx(1.0, abs=1e-3)
    # the point mass nearest 1/2 on the grid: the grid's points bracket b, a mix of the two adds a little
    floor = b**8 + (1 - b) ** 8
    assert floor - 2e-3 <= lo[1] <= floor + 5e-3


def test_a_narrow_set_where_every_prompt_is_sampled_past_G():
    """64 samples a prompt: D(8) is identified, the interval is narrow and holds the plain mean of the
    unbiased per-prompt estimates."""
    rng = np.random.default_rng(3)
    p = rng.beta(0.5, 0.5, 2000)
    n = np.full(2000, 64)
    c = rng.binomial(n, p)
    lo, hi = identify.likelihood_bounds(n, c, (POINTS**8 + (1 - POINTS) ** 8)[:, None])
    from pipeline import stats

    plus, minus = stats.silent_rates(n, c, 8)
    estimate = float(np.mean(plus + minus))
    assert lo[0] < estimate < hi[0]
    assert hi[0] - lo[0] < 0.05


def test_no_population_that_fits_lies_outside():
    """Outer-bound property: random populations (mixtures of the maximum-likelihood one and random
    Dirichlet draws) whose likelihood passes the 90% bound all have D(G) inside the interval, and
    some come close to each end (the interval is not needlessly wide)."""
    rng = np.random.default_rng(5)
    n = np.r_[np.full(300, 4), np.full(100, 16)]
    p = np.where(rng.random(400) < 0.5, 0.05, 0.95)
    c = rng.binomial(n, p)
    G = 32
    f = POINTS**G + (1 - POINTS) ** G
    lo, hi = identify.likelihood_bounds(n, c, f[:, None])
    n_u, c_u = n, c
    L = np.exp(priors.grid_likelihood(POINTS, n_u, c_u))
    fit = priors.fit_grid_prior(n, c)
    pi0 = np.asarray(fit.weights)
    for _ in range(3000):  # the grid prior's EM stops early; the set is defined by the maximum
        pi0 = pi0 * (L.T @ (1.0 / (L @ pi0))) / len(n)
    floor = float(np.sum(np.log(L @ pi0))) - CHI2_90 / 2
    seen = []
    for _ in range(3000):
        d = rng.dirichlet(np.full(len(POINTS), 0.05))
        for s in (0.02, 0.05, 0.1, 0.2, 0.5):
            pi = (1 - s) * pi0 + s * d
            if float(np.sum(np.log(L @ pi))) >= floor:
                seen.append(float(f @ pi))
    seen = np.array(seen)
    assert len(seen) > 100
    assert seen.min() >= lo[0] - 1e-9 and seen.max() <= hi[0] + 1e-9
    width = hi[0] - lo[0]
    assert seen.max() > hi[0] - 0.5 * width and seen.min() < lo[0] + 0.5 * width


def test_coverage_on_adaptive_runs():
    """Monte Carlo: on adaptive runs of a spiky truth (half the prompts at 0.05, half at 0.95; the
    default band rule stops most after 4 samples, the prior refitted every round) the 90% intervals
    of D(16), D(32) and D(64) hold the dataset's true value in at least 11 of 12 replicates, while
    the summary's own D(64) is off by far (the fitted prior smears mass towards 0 and 1). The
    bench's bias table (``bench/adaptive.py``) counts the same on 16 replicates of 20,000 prompts."""
    acfg = adaptive.AdaptiveConfig.from_specs("band", 4, 64, "auto", prior="auto")
    Gs = (16, 32, 64)
    f = np.stack([POINTS**G + (1 - POINTS) ** G for G in Gs], axis=1)
    covered = np.zeros(len(Gs))
    for r in range(12):
        rng = np.random.default_rng(900 + r)
        p = np.where(rng.random(1000) < 0.5, 0.05, 0.95)
        n, c, _ = frontier.simulate(rng.random((1000, 64)) < p[:, None], acfg)
        lo, hi = identify.likelihood_bounds(n, c, f)
        truth = np.array([np.mean(p**G + (1 - p) ** G) for G in Gs])
        covered += (lo <= truth) & (truth <= hi)
    assert (covered >= 11).all(), covered


def test_bad_input_is_named():
    with pytest.raises(ConfigError, match="level"):
        identify.likelihood_bounds([4], [1], POINTS[:, None], level=1.0)
    with pytest.raises(ConfigError, match="rows"):
        identify.likelihood_bounds([4], [1], np.ones((5, 1)))
    with pytest.raises(ConfigError, match="samples"):
        identify.likelihood_bounds([0], [0], POINTS[:, None])
