"""A prompt's price in tokens (pipeline/tokens.py): the shrinkage estimate exactly against the
normal-normal posterior by brute force, and by Monte Carlo against the raw mean."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline import tokens
from pipeline.errors import ConfigError


def _posterior_mean_brute(xs: np.ndarray, m: float, tau2: float, sigma2: float) -> float:
    """E[mu | xs] for mu ~ N(m, tau2), x_j ~ N(mu, sigma2), by summing the posterior on a fine grid."""
    sd = np.sqrt(tau2)
    mu = np.linspace(m - 12 * sd, m + 12 * sd, 200_001)
    log_post = -((mu - m) ** 2) / (2 * tau2) - ((xs[None, :] - mu[:, None]) ** 2).sum(axis=1) / (2 * sigma2)
    w = np.exp(log_post - log_post.max())
    return float((w * mu).sum() / w.sum())


def test_expected_tokens_is_the_normal_posterior_mean():
    rng = np.random.default_rng(0)
    prior = tokens.LengthPrior(m=400.0, tau2=120.0**2, sigma2=250.0**2)
    for k in (1, 3, 8):
        xs = rng.normal(600.0, 250.0, k)
        got = tokens.expected_tokens([k], [xs.mean()], [xs.std(ddof=1) if k > 1 else 0.0], prior)[0]
        assert got == pytest.approx(_posterior_mean_brute(xs, prior.m, prior.tau2, prior.sigma2), rel=1e-6)


def test_no_answers_cost_the_population_mean_and_many_their_own():
    prior = tokens.LengthPrior(m=300.0, tau2=100.0**2, sigma2=200.0**2)
    got = tokens.expected_tokens([0, 10_000], [float("nan"), 900.0], [float("nan"), 200.0], prior)
    assert got[0] == 300.0
    assert got[1] == pytest.approx(900.0, abs=3.0)
    rel = tokens.relative_price([0, 10_000], [float("nan"), 900.0], [float("nan"), 200.0], prior)
    assert rel[0] == 1.0 and rel[1] == pytest.approx(3.0, abs=0.01)


def test_the_fit_recovers_the_population():
    rng = np.random.default_rng(1)
    N, k = 20_000, 8
    mu = rng.normal(2000.0, 150.0, N)
    x = rng.normal(mu[:, None], 300.0, (N, k))
    prior = tokens.fit_length_prior(np.full(N, k), x.mean(axis=1), x.std(axis=1, ddof=1))
    assert prior.m == pytest.approx(2000.0, abs=5.0)
    assert np.sqrt(prior.sigma2) == pytest.approx(300.0, rel=0.01)
    assert np.sqrt(prior.tau2) == pytest.approx(150.0, rel=0.03)


def test_monte_carlo_shrinkage_beats_the_raw_mean_without_bias():
    """Real-shaped lengths (Gamma answers, log-normal prompt means, few answers each): the estimate's
    squared error is below the raw mean's, and its mean error is within its standard error of 0."""
    rng = np.random.default_rng(2)
    N, k = 8_000, 4
    mu = 350.0 * np.exp(rng.normal(0.0, 0.35, N))
    x = rng.gamma(4.0, mu[:, None] / 4.0, (N, k))
    est = tokens.expected_tokens(np.full(N, k), x.mean(axis=1), x.std(axis=1, ddof=1))
    raw = x.mean(axis=1)
    assert ((est - mu) ** 2).mean() < 0.8 * ((raw - mu) ** 2).mean()
    err = est - mu
    assert abs(err.mean()) < 3 * err.std() / np.sqrt(N)


def test_identical_prompts_share_the_population_mean():
    rng = np.random.default_rng(3)
    x = rng.normal(200.0, 50.0, (5_000, 6))
    prior = tokens.fit_length_prior(np.full(5_000, 6), x.mean(axis=1), x.std(axis=1, ddof=1))
    assert prior.tau2 < 0.05 * prior.sigma2  # no real spread between prompts: (almost) full shrinkage


def test_bad_lengths_name_the_prompt():
    with pytest.raises(ConfigError, match="prompt 1: mean length -3"):
        tokens.expected_tokens([2, 2], [10.0, -3.0], [1.0, 1.0])
    with pytest.raises(ConfigError, match="differ in shape"):
        tokens.expected_tokens([2], [10.0, 3.0])
