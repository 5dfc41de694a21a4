"""Per-prompt statistics: exact checks against brute-force sums, and Monte Carlo."""

from __future__ import annotations

import math
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest
from scipy import integrate
from scipy.stats import beta as beta_dist
from scipy.stats import binom, norm

from pipeline import stats


def exact_pass_at_k(n: int, c: int, k: int) -> Fraction:
    return 1 - Fraction(math.comb(n - c, k), math.comb(n, k))


def test_pass_at_k_matches_exact_combinatorics():
    for n in (1, 2, 5, 17):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert stats.pass_at_k(n, c, k) == pytest.approx(float(exact_pass_at_k(n, c, k)), abs=1e-13)
    assert np.isnan(stats.pass_at_k(3, 1, 4))  # n < k
    # n in the thousands: the product is stable where factorials would overflow a float
    for n, c, k in ((3000, 7, 100), (5000, 1, 4999), (4000, 3990, 2)):
        assert stats.pass_at_k(n, c, k) == pytest.approx(float(exact_pass_at_k(n, c, k)), rel=1e-12)


def test_pass_at_k_curves_and_unbiasedness():
    n_u = np.array([6, 6, 9, 1, 0])
    c_u = np.array([0, 6, 4, 1, 0])
    curves = stats.pass_at_k_curves(n_u, c_u)
    for j, (n, c) in enumerate(zip(n_u, c_u, strict=False)):
        assert len(curves[j]) == n
        for k in range(1, n + 1):
            assert curves[j][k - 1] == pytest.approx(float(exact_pass_at_k(n, c, k)), abs=1e-13)
    # edge cases: c = 0 never passes, c = n always does
    np.testing.assert_array_equal(curves[0], 0.0)
    np.testing.assert_array_equal(curves[1], 1.0)
    # unbiased: sum over c ~ Bin(n, p) of the estimate is 1 - q^k
    n, p = 12, 0.23
    cs = np.arange(n + 1)
    for k in (1, 3, 12):
        est = stats.pass_at_k(np.full(n + 1, n), cs, k)
        assert binom.pmf(cs, n, p) @ est == pytest.approx(1 - (1 - p) ** k, rel=1e-12)


def test_zero_signal_unbiased_for_n_at_least_g_and_plugin_biased_up():
    n = 10
    cs = np.arange(n + 1)
    for G in (1, 2, 4, 10):
        for p in (0.0, 0.05, 0.4, 0.9, 1.0):
            pmf = binom.pmf(cs, n, p)
            plus, minus = stats.silent_rates(np.full(n + 1, n), cs, G)
            assert pmf @ plus == pytest.approx(p**G, abs=1e-13)
            assert pmf @ minus == pytest.approx((1 - p) ** G, abs=1e-13)
            z = stats.zero_signal(np.full(n + 1, n), cs, G)
            assert pmf @ z == pytest.approx(p**G + (1 - p) ** G, abs=1e-13)
            plug = pmf @ stats.zero_signal_plugin(np.full(n + 1, n), cs, G)
            if G > 1 and 0 < p < 1:
                assert plug > p**G + (1 - p) ** G + 1e-6  # biased upward
    # c = 0 and c = n: silent split is one-sided
    plus, minus = stats.silent_rates(np.array([8, 8]), np.array([0, 8]), 4)
    np.testing.assert_array_equal(plus, [0.0, 1.0])
    np.testing.assert_array_equal(minus, [1.0, 0.0])


def test_zero_signal_posterior_for_n_below_g():
    a = b = 0.5
    for n, c, G in ((3, 1, 8), (0, 0, 4), (5, 5, 16), (7, 0, 8)):
        plus, minus = stats.silent_rates(n, c, G, a, b)
        dist = beta_dist(a + c, b + n - c)
        ep = integrate.quad(lambda x, G=G, d=dist: x**G * d.pdf(x), 0, 1, limit=200)[0]
        eq = integrate.quad(lambda x, G=G, d=dist: (1 - x) ** G * d.pdf(x), 0, 1, limit=200)[0]
        assert float(plus) == pytest.approx(ep, rel=1e-6)
        assert float(minus) == pytest.approx(eq, rel=1e-6)
    # a different prior is honoured
    assert float(stats.silent_rates(2, 1, 3, 1.0, 1.0)[0]) == pytest.approx((2 / 4) * (3 / 5) * (4 / 6))


def test_unbiased_expect_k_of_group_std():
    G, n = 5, 9
    k = np.arange(G + 1)
    phi = np.sqrt(k * (G - k)) / G
    cs = np.arange(n + 1)
    ub = stats.unbiased_expect_k(phi, G, np.full(n + 1, n), cs)
    for p in (0.1, 0.5, 0.8):
        truth = binom.pmf(k, G, p) @ phi
        assert binom.pmf(cs, n, p) @ ub == pytest.approx(truth, rel=1e-12)
    with pytest.raises(ValueError, match="n >= G"):
        stats.unbiased_expect_k(phi, G, np.array([3]), np.array([1]))


def test_intervals():
    n = np.array([10, 10, 10, 64, 1])
    c = np.array([0, 3, 10, 32, 1])
    level = 0.9
    z = norm.ppf(0.95)
    lo, hi = stats.wilson_interval(n, c, level)
    ph = c / n
    # the Wilson endpoints solve (ph - p)^2 = z^2 p (1 - p) / n
    for endpoint in (lo, hi):
        resid = (ph - endpoint) ** 2 - z**2 * endpoint * (1 - endpoint) / n
        np.testing.assert_allclose(resid, 0.0, atol=1e-12)
    assert np.all(lo <= ph) and np.all(ph <= hi)
    jl, jh = stats.jeffreys_interval(n, c, level)
    np.testing.assert_allclose(beta_dist.cdf(jl, c + 0.5, n - c + 0.5), 0.05, rtol=1e-8)
    np.testing.assert_allclose(beta_dist.cdf(jh, c + 0.5, n - c + 0.5), 0.95, rtol=1e-8)
    # a wider level gives a wider interval; n = 0 gives the whole range for Wilson
    lo99, hi99 = stats.wilson_interval(n, c, 0.99)
    assert np.all(lo99 <= lo) and np.all(hi99 >= hi)
    assert stats.wilson_interval(np.array([0]), np.array([0]))[1][0] == 1.0
    with pytest.raises(ValueError, match="level"):
        stats.StatsConfig(level=1.5)


def test_wilson_coverage_monte_carlo():
    """Seeded coverage of the 95% Wilson interval at p = 0.3, n = 50 is close to 95%."""
    rng = np.random.default_rng(3)
    n, p = 50, 0.3
    c = rng.binomial(n, p, 20_000)
    lo, hi = stats.wilson_interval(np.full_like(c, n), c, 0.95)
    coverage = np.mean((lo <= p) & (p <= hi))
    assert 0.93 <= coverage <= 0.97


def test_answer_stats_from_histogram_against_counter():
    rng = np.random.default_rng(1)
    prompts = []
    for _ in range(40):
        m = int(rng.integers(0, 12))
        answers = [str(x) if x < 4 else None for x in rng.integers(0, 6, m)]
        correct = [a == "0" for a in answers]
        prompts.append((answers, correct))
    parent, counts, ccounts = [], [], []
    for i, (answers, correct) in enumerate(prompts):
        hist = Counter(a for a in answers if a is not None)
        for a, cnt in sorted(hist.items()):
            parent.append(i)
            counts.append(cnt)
            ccounts.append(sum(1 for x, ok in zip(answers, correct, strict=False) if x == a and ok))
    out = stats.answer_stats_from_histogram(len(prompts), np.array(parent), np.array(counts), np.array(ccounts))
    for i, (answers, correct) in enumerate(prompts):
        hist = Counter(a for a in answers if a is not None)
        total = sum(hist.values())
        assert out["n_answered"][i] == total
        assert out["n_distinct_answers"][i] == len(hist)
        corr = Counter(a for a, ok in zip(answers, correct, strict=False) if ok and a is not None)
        assert out["n_distinct_correct"][i] == len(corr)
        if total:
            shares = np.array(list(hist.values())) / total
            assert out["modal_share"][i] == pytest.approx(shares.max())
            assert out["answer_entropy"][i] == pytest.approx(-(shares * np.log(shares)).sum())
        else:
            assert np.isnan(out["modal_share"][i])
        if corr:
            assert out["modal_correct_share_grpo"][i] == pytest.approx(max(corr.values()) / sum(corr.values()))
            assert out["modal_correct_share_reco"][i] == pytest.approx(1 / len(corr))
        else:
            assert np.isnan(out["modal_correct_share_grpo"][i])


def test_unique_pairs_round_trip():
    rng = np.random.default_rng(0)
    n = rng.integers(0, 70, 1000)
    c = rng.integers(0, 70, 1000) % (n + 1)
    n_u, c_u, inv = stats.unique_pairs(n, c)
    np.testing.assert_array_equal(n_u[inv], n)
    np.testing.assert_array_equal(c_u[inv], c)
    assert len(set(zip(n_u, c_u, strict=False))) == len(n_u)


def test_errors_print_plain_numbers():
    """Issue 16: messages name values as a user typed them, not as numpy reprs (np.float64(...))."""
    for call, shown in (
        (lambda: stats.StatsConfig(level=np.float64(1.5)), "level=1.5 "),
        (lambda: stats.StatsConfig(prior_a=np.float64(-1.0)), "prior_a=-1.0 "),
        (lambda: stats.pass_at_k(4, 1, np.int64(0)), "k=0 "),
        (lambda: stats.silent_rates(4, 1, np.int64(0)), "G=0 "),
    ):
        with pytest.raises(ValueError) as err:
            call()
        assert shown in str(err.value) and "np." not in str(err.value), str(err.value)
