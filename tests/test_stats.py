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
from pipeline.errors import ConfigError


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


def test_silent_chance_is_the_beta_binomial_predictive():
    """P(a group of G is silent) when p ~ Beta(a, b): exact against the beta-binomial pmf at k = 0 and
    k = G summed by hand, and by Monte Carlo (draw p, then a group of G)."""
    for a, b, G in ((7.0, 3.0, 8), (0.5, 8.5, 4), (1.0, 1.0, 1), (40.0, 2.5, 16)):
        plus, minus = stats.silent_chance(a, b, G)
        # beta-binomial pmf: C(G, k) B(a + k, b + G - k) / B(a, b)
        beta_fn = lambda x, y: math.gamma(x) * math.gamma(y) / math.gamma(x + y)  # noqa: E731
        assert float(plus) == pytest.approx(beta_fn(a + G, b) / beta_fn(a, b), rel=1e-12)
        assert float(minus) == pytest.approx(beta_fn(a, b + G) / beta_fn(a, b), rel=1e-12)
    # 6 of 8 right under a flat prior: Beta(7, 3), 0.125 at G = 8, where the counted rate at G = n is 0
    silent = sum(stats.silent_chance(1 + 6, 1 + 2, 8))
    assert 0.10 <= silent <= 0.13 and silent == pytest.approx(0.12538, abs=1e-5)
    assert float(stats.zero_signal(8, 6, 8)) == 0.0
    rng = np.random.default_rng(3)
    draws = 400_000
    k = rng.binomial(8, rng.beta(7.0, 3.0, draws))
    mc = float(((k == 0) | (k == 8)).mean())
    assert abs(mc - silent) < 4 * math.sqrt(silent * (1 - silent) / draws)
    # the posterior branch of silent_rates is this function at (a + c, b + n - c)
    np.testing.assert_allclose(
        np.stack(stats.silent_rates(np.array([3, 8]), np.array([1, 6]), 8, 0.5, 0.5, posterior=True)),
        np.stack(stats.silent_chance(np.array([1.5, 6.5]), np.array([2.5, 2.5]), 8)),
    )
    with pytest.raises(ConfigError, match="G=0"):
        stats.silent_chance(1.0, 1.0, 0)


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


@pytest.mark.parametrize("n_max,prompts", [(0, 5), (8, 3), (64, 2000), (3000, 50)])
def test_unique_pairs_fast_path_matches_the_sort(n_max, prompts):
    """The count over the (n, c) grid (small grids) gives the arrays the sort gives (large ones)."""
    rng = np.random.default_rng(n_max)
    n = rng.integers(0, n_max + 1, prompts)
    c = (rng.random(prompts) * (n + 1)).astype(np.int64)
    base = int(n.max(initial=0)) + 1
    uniq, inverse = np.unique(n * base + c, return_inverse=True)
    for got, want in zip(stats.unique_pairs(n, c), (uniq // base, uniq % base, inverse.reshape(-1)), strict=True):
        np.testing.assert_array_equal(got, want)


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


# --- the merged kernels: the one Beta quantile and the one binomial pmf, against the copies they replace


def _old_jeffreys(n, c, level):
    """``stats.jeffreys_interval`` before it called ``beta_interval`` (verbatim)."""
    from scipy.special import betaincinv

    n, c = np.asarray(n, float), np.asarray(c, float)
    a, b = c + 0.5, n - c + 0.5
    alpha = 1 - level
    return betaincinv(a, b, alpha / 2), betaincinv(a, b, 1 - alpha / 2)


def _old_credible(alpha, beta, level):
    """``adaptive.credible_interval`` before it called ``beta_interval`` (verbatim)."""
    from scipy.special import betaincinv

    tail = (1.0 - level) / 2.0
    return betaincinv(alpha, beta, tail), betaincinv(alpha, beta, 1.0 - tail)


def _old_allocate_pmf(n, p):
    """``allocate._binom_pmf_matrix`` (log space) before it called ``stats.binom_pmf`` (verbatim)."""
    from scipy.special import gammaln

    k = np.arange(n + 1)
    logc = gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1)
    inner = (p > 0) & (p < 1)
    pi = np.where(inner, p, 0.5)
    out = np.exp(logc + np.log(pi)[:, None] * k + np.log1p(-pi)[:, None] * (n - k))
    out[p <= 0] = 0.0
    out[p <= 0, 0] = 1.0
    out[p >= 1] = 0.0
    out[p >= 1, n] = 1.0
    return out


P_GRID = np.concatenate([[0.0, 1.0, 1e-300, 1e-12, 1 - 1e-12, 0.5], np.linspace(0, 1, 257)])


def test_beta_interval_is_bit_for_bit_both_old_copies():
    from pipeline import adaptive

    n = np.repeat(np.arange(0, 65), 65)
    c = np.concatenate([np.arange(0, 65)] * 65)
    keep = c <= n
    n, c = n[keep], c[keep]
    for level in (0.5, 0.8, 0.9, 0.95, 0.99, 1 - 1e-9):
        for got, want in zip(stats.jeffreys_interval(n, c, level), _old_jeffreys(n, c, level), strict=True):
            np.testing.assert_array_equal(got, want)
        a, b = c + 0.05 + n / 7, n - c + 0.3
        for got, want in zip(adaptive.credible_interval(a, b, level), _old_credible(a, b, level), strict=True):
            np.testing.assert_array_equal(got, want)
        for got, want in zip(stats.beta_interval(a, b, level), _old_credible(a, b, level), strict=True):
            np.testing.assert_array_equal(got, want)


def test_binom_pmf_is_the_estimators_old_kernel_and_within_rounding_of_allocate_s():
    from pipeline import estimators as est

    assert est.binom_pmf is stats.binom_pmf
    for G in (0, 1, 2, 3, 7, 16, 63, 200):
        got = stats.binom_pmf(G, P_GRID)
        np.testing.assert_array_equal(got, binom.pmf(np.arange(G + 1), G, P_GRID[:, None]))  # estimators' copy
        old = _old_allocate_pmf(G, P_GRID)
        np.testing.assert_array_equal(got[P_GRID == 0], old[P_GRID == 0])  # exact point masses, as before
        np.testing.assert_array_equal(got[P_GRID == 1], old[P_GRID == 1])
        # allocate's log-space copy rounded differently: at most a few 1e-13, relative
        np.testing.assert_allclose(got, old, rtol=2e-12, atol=1e-300)
    np.testing.assert_array_equal(stats.binom_pmf(3, 0.25, size=6)[4:], [0.0, 0.0])  # zero past G
    assert stats.binom_pmf(4, np.full((2, 3), 0.5)).shape == (2, 3, 5)


@pytest.mark.parametrize("kernel", ["special", "stats"])
def test_binom_pmf_is_scipy_stats_binom_bit_for_bit(kernel, monkeypatch):
    """The pmf is scipy.special's kernel (no scipy.stats import) with scipy.stats' handling around it: zero past
    G, NaN for a rate outside [0, 1], the same bits; where SciPy has no such kernel, scipy.stats itself."""
    if kernel == "stats":
        monkeypatch.setattr(stats, "_binom_kernel", lambda: None)
    else:
        assert stats._binom_kernel() is not None  # this SciPy has it: the fast path is the one tested
    odd = np.concatenate([P_GRID, [np.nan, -0.1, 1.1, 1 - 1e-16]])
    for G in (0, 1, 8, 64):
        for size in (None, 1, G + 1, G + 5):
            k = np.arange(G + 1 if size is None else size)
            got = stats.binom_pmf(G, odd, size=size)
            np.testing.assert_array_equal(got, binom.pmf(k, G, odd[:, None]))
    p = np.random.default_rng(0).random((7, 9))
    np.testing.assert_array_equal(stats.binom_pmf(8, p), binom.pmf(np.arange(9), 8, p[..., None]))


def test_allocations_are_unchanged_by_the_pmf_merge(monkeypatch):
    """The point-estimate allocation on a grid of counts, with allocate's old pmf and with the one
    kernel, gives the same rollouts per prompt (the integers the table stores)."""
    from pipeline import allocate

    rng = np.random.default_rng(3)
    n = rng.integers(1, 40, size=300)
    c = rng.binomial(n, rng.beta(0.5, 0.5, size=300))
    for estimator in ("grpo", "rloo", "dr_grpo", "maxrl"):
        config = allocate.AllocationConfig(budget=8 * 300, estimator=estimator, n_max=64, posterior=False)
        new = allocate.allocate(n, c, config)
        with monkeypatch.context() as m:
            m.setattr(allocate.stats, "binom_pmf", lambda G, p: _old_allocate_pmf(G, np.asarray(p, float)))
            old = allocate.allocate(n, c, config)
        np.testing.assert_array_equal(new.n, old.n)


# --- the one predictive pmf (stats.betabinom_pmf) ---------------------------------------------------

PREDICTIVE_CASES = [(1, 0.5, 0.5), (4, 0.3, 0.4), (9, 2.0, 5.0), (30, 0.05, 1.7), (64, 12.5, 3.25)]


def test_betabinom_pmf_is_the_beta_quadrature_of_the_binomial():
    """``P(x of k)`` against ``int Bin(x; k, p) Beta(p; a, b) dp`` by quadrature, for every x."""
    for k, a, b in PREDICTIVE_CASES:
        got = stats.betabinom_pmf(k, np.arange(k + 1), a, b)
        for x in range(k + 1):
            want, _ = integrate.quad(lambda p, x=x, k=k, a=a, b=b: binom.pmf(x, k, p) * beta_dist.pdf(p, a, b), 0, 1)
            assert got[x] == pytest.approx(want, rel=1e-7, abs=1e-12)
        assert got.sum() == pytest.approx(1.0, abs=1e-12)
        np.testing.assert_allclose(stats.betabinom_pmf(k, np.arange(k + 1), a, b, log=True), np.log(got), rtol=1e-13)


def test_betabinom_pmf_matches_a_monte_carlo_draw():
    """p drawn from the Beta, x from the binomial: each count's frequency within 4.5 standard errors."""
    rng = np.random.default_rng(11)
    draws = 400_000
    for k, a, b in PREDICTIVE_CASES[1:4]:
        x = rng.binomial(k, rng.beta(a, b, draws))
        freq = np.bincount(x, minlength=k + 1) / draws
        pmf = stats.betabinom_pmf(k, np.arange(k + 1), a, b)
        assert np.all(np.abs(freq - pmf) <= 4.5 * np.sqrt(pmf * (1 - pmf) / draws) + 1e-9), (k, a, b)


def test_betabinom_pmf_broadcasts_and_is_zero_past_k():
    alpha, beta = np.array([[0.5], [2.0]]), np.array([[1.5], [3.0]])
    got = stats.betabinom_pmf(np.array([3, 3, 3, 3, 3, 3]), np.arange(6), alpha, beta)
    assert got.shape == (2, 6)
    np.testing.assert_array_equal(got[:, 4:], 0.0)
    assert np.all(np.isneginf(stats.betabinom_pmf(3, np.arange(4, 6), 0.5, 0.5, log=True)))
    for row, (a, b) in enumerate(((0.5, 1.5), (2.0, 3.0))):
        np.testing.assert_array_equal(got[row, :4], stats.betabinom_pmf(3, np.arange(4), a, b))


def _old_predictive(k: int, alpha: np.ndarray, beta: np.ndarray) -> np.ndarray:
    """``adaptive.predictive_stopped``'s copy before the merge (``adaptive.betabinom_pmf``'s was the same
    expression for one prompt)."""
    from scipy.special import betaln, gammaln

    x = np.arange(k + 1)
    logc = gammaln(k + 1) - gammaln(x + 1) - gammaln(k - x + 1)
    return np.exp(logc + betaln(alpha[:, None] + x, beta[:, None] + k - x) - betaln(alpha, beta)[:, None])


def _old_allocate_terms(n: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``allocate.value_table``'s posterior copy before the merge: ``E[p q Bin(s; n-1, p)]``."""
    from scipy.special import betaln, gammaln

    s = np.arange(n)
    logc = gammaln(n) - gammaln(s + 1) - gammaln(n - s)
    return np.exp(logc + betaln(a[:, None] + s + 1, b[:, None] + n - s) - betaln(a, b)[:, None])


def test_betabinom_pmf_is_bit_for_bit_the_rounds_old_copies_and_within_rounding_of_allocate_s():
    rng = np.random.default_rng(5)
    n = rng.integers(1, 64, 200)
    c = rng.binomial(n, 0.4)
    alpha, beta = 0.3 + c, 0.7 + n - c
    for k in (1, 2, 7, 30, 64):
        got = stats.betabinom_pmf(k, np.arange(k + 1), alpha[:, None], beta[:, None])
        np.testing.assert_array_equal(got, _old_predictive(k, alpha, beta))
        for a, b in ((0.3, 0.7), (0.05, 1e4)):
            single = stats.betabinom_pmf(k, np.arange(k + 1), a, b)
            np.testing.assert_array_equal(single, _old_predictive(k, np.array([a]), np.array([b]))[0])
        # allocate's term, now E[p q] times the predictive under Beta(a + 1, b + 1): a few 1e-15, relative
        terms = stats.beta_moment(alpha, beta, 1, 1)[:, None] * stats.betabinom_pmf(
            k - 1, np.arange(k), alpha[:, None] + 1, beta[:, None] + 1
        )
        np.testing.assert_allclose(terms, _old_allocate_terms(k, alpha, beta), rtol=1e-12, atol=1e-300)


def test_posterior_allocations_are_unchanged_by_the_predictive_merge(monkeypatch):
    """The posterior allocation on a grid of counts, with allocate's old term and with the one
    predictive, gives the same rollouts per prompt (the integers the table stores)."""
    from pipeline import allocate

    def old_pmf(k, x, alpha, beta, log=False):  # the old term, divided back by E[p q]
        a, b = alpha[:, 0] - 1, beta[:, 0] - 1
        return _old_allocate_terms(int(k) + 1, a, b) / stats.beta_moment(a, b, 1, 1)[:, None]

    rng = np.random.default_rng(3)
    n = rng.integers(1, 40, size=300)
    c = rng.binomial(n, rng.beta(0.5, 0.5, size=300))
    for estimator in ("grpo", "rloo", "dapo:mode=resample,T=3"):
        config = allocate.AllocationConfig(budget=8 * 300, estimator=estimator, n_max=64, posterior=True)
        new = allocate.allocate(n, c, config)
        with monkeypatch.context() as m:
            m.setattr(allocate.stats, "betabinom_pmf", old_pmf)
            old = allocate.allocate(n, c, config)
        np.testing.assert_array_equal(new.n, old.n)
