"""The priors, their choice and posterior expectations of summaries (docs/adaptive.md §2, §3, §7).

The Beta fit recovers known parameters (within the exact Fisher information's standard errors).
Exact: the grid posterior, its decisions, predictive and estimates against brute-force sums in
Python floats; the Beta composite quadrature against the closed form of a truncated Beta moment.
Monte Carlo: EM recovers a known mixture; an adaptive run's band shares and D(G) are unbiased
against the truth (where a plug-in band share or a misfitting Beta prior is not).
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
from scipy import stats as sst
from scipy.special import betainc, betaincinv, betaln

from pipeline import adaptive, analyze, frontier
from pipeline import estimators as est
from pipeline import prior as priors
from pipeline.errors import ConfigError

PAIRS = [(4, 0), (4, 2), (4, 4), (9, 3), (17, 16), (40, 1), (64, 30), (0, 0)]


# --- the Beta fit -----------------------------------------------------------------------------------


def _expected_information(a: float, b: float, n: int) -> np.ndarray:
    """Fisher information of one beta-binomial(n, a, b) observation in (a, b), exactly."""
    from scipy.special import digamma

    c = np.arange(n + 1)
    pmf = sst.betabinom.pmf(c, n, a, b)
    dab = digamma(a + b) - digamma(a + b + n)
    score = np.stack([digamma(a + c) - digamma(a) + dab, digamma(b + n - c) - digamma(b) + dab])
    return (score * pmf) @ score.T


@pytest.mark.parametrize(("a", "b"), [(0.3, 0.4), (1.0, 1.0), (4.0, 1.0), (2.0, 5.0)])
def test_prior_fit_recovers_known_beta_parameters(a, b):
    """From n_min = 4 counts of 20,000 prompts, within 4 standard errors (from the exact Fisher
    information of the beta-binomial), and the method of moments start is in the right place."""
    N, n = 20_000, 4
    rng = np.random.default_rng(7)
    c = rng.binomial(n, rng.beta(a, b, N))
    prior = priors.fit_prior(np.full(N, n), c)
    se = np.sqrt(np.diag(np.linalg.inv(_expected_information(a, b, n) * N)))
    assert abs(prior.a - a) < 4 * se[0], (prior, se)
    assert abs(prior.b - b) < 4 * se[1], (prior, se)
    assert prior.method == "fit" and prior.n_prompts == N
    assert abs(prior.start[0] / sum(prior.start) - a / (a + b)) < 0.02  # the moments' mean


def test_prior_fit_is_floored_and_deterministic():
    none_right = priors.fit_prior(np.full(500, 4), np.zeros(500, int))
    assert none_right.a == pytest.approx(priors.PRIOR_FLOOR)
    c = np.random.default_rng(1).binomial(4, 0.5, 300)
    assert priors.fit_prior(np.full(300, 4), c) == priors.fit_prior(np.full(300, 4), c)
    with pytest.raises(ConfigError, match="at least one prompt"):
        priors.fit_prior(np.zeros(3, int), np.zeros(3, int))


def _toy_grid() -> adaptive.Prior:
    points = np.linspace(0, 1, 11)
    w = np.array([0.3, 0.05, 0.02, 0.03, 0.05, 0.08, 0.05, 0.03, 0.02, 0.07, 0.3])
    return adaptive.Prior(0.5, 0.5, method="grid", points=tuple(points), weights=tuple(w / w.sum()))


def _brute_posterior(prior: adaptive.Prior, n: int, c: int) -> list[float]:
    pts, w = prior.points, prior.weights
    raw = [wk * (pk**c) * ((1 - pk) ** (n - c)) for pk, wk in zip(pts, w, strict=True)]  # 0.0 ** 0 == 1
    total = math.fsum(raw)
    return [r / total for r in raw]


def test_grid_posterior_and_decisions_match_brute_force_sums():
    prior = _toy_grid()
    n = np.array([n for n, _ in PAIRS[:-1]])
    c = np.array([c for _, c in PAIRS[:-1]])
    _, W = priors.posterior_nodes(prior, n, c)
    target = adaptive.Target(lo=0.1, hi=0.9, delta=0.05)
    d = adaptive.decide(n, c, prior, target)
    width = adaptive.decide(n, c, prior, adaptive.Target(kind="width", h=0.2, delta=0.1))
    for i, (ni, ci) in enumerate(PAIRS[:-1]):
        post = _brute_posterior(prior, ni, ci)
        np.testing.assert_allclose(W[i], post, rtol=1e-12, atol=1e-300)
        # each interior point stands for its cell (midpoint to midpoint, the first from 0, the last to 1):
        # the cell of 0.1 is [0, 0.15], two thirds of it in the silent band; the ends are exactly 0 and 1
        hard = [1.0, 2 / 3] + [0.0] * 9
        easy = hard[::-1]
        bands = [
            math.fsum(x * h for x, h in zip(post, hard, strict=True)),
            math.fsum(x * (1 - h - e) for x, h, e in zip(post, hard, easy, strict=True)),
            math.fsum(x * e for x, e in zip(post, easy, strict=True)),
        ]
        assert d.prob[i] == pytest.approx(max(bands), abs=1e-12)
        assert d.band[i] == int(np.argmax(bands))
        assert d.decided[i] == (max(bands) >= 0.95)
        cdf = np.cumsum(post)
        lo = prior.points[int(np.argmax(cdf >= 0.05 - 1e-12))]
        hi = prior.points[int(np.argmax(cdf >= 0.95 - 1e-12))]
        assert (width.lo[i], width.hi[i]) == (lo, hi)
        assert width.decided[i] == (hi - lo <= 0.4)


def test_grid_predictive_matches_brute_force_sums():
    prior = _toy_grid()
    t = adaptive.Target()
    grid = adaptive.decided_grid(prior, t, 24)
    n, c = np.array([4, 6, 9]), np.array([0, 3, 8])
    extra = np.array([1, 3, 7])
    got = adaptive.predictive_stopped(n, c, prior, grid, extra)
    for i in range(len(n)):
        post = _brute_posterior(prior, int(n[i]), int(c[i]))
        for j, k in enumerate(extra.tolist()):
            want = 0.0
            for x in range(k + 1):
                px = math.fsum(
                    w * math.comb(k, x) * p**x * (1 - p) ** (k - x) for p, w in zip(prior.points, post, strict=True)
                )
                want += px * grid[n[i] + k, c[i] + x]
            assert got[i, j] == pytest.approx(want, abs=1e-12)
    # the fixed-n expectation: the grid marginal of c
    mis, share = frontier.fixed_n_expected(6, prior, t)
    pmf = [
        math.fsum(
            w * math.comb(6, x) * p**x * (1 - p) ** (6 - x) for p, w in zip(prior.points, prior.weights, strict=True)
        )
        for x in range(7)
    ]
    d = adaptive.decide(np.full(7, 6), np.arange(7), prior, t)
    assert mis == pytest.approx(math.fsum(q * (1 - pr) for q, pr in zip(pmf, d.prob, strict=True)), abs=1e-12)
    assert share == pytest.approx(math.fsum(q for q, dd in zip(pmf, d.decided, strict=True) if dd), abs=1e-12)


def test_predictive_pmf_over_any_prior_matches_brute_force_sums_and_a_monte_carlo_draw():
    """``prior.predictive_pmf``: a grid prior's against sums over its points in Python floats, a Beta
    prior's the one beta-binomial (``stats.betabinom_pmf``) of the posterior; both against draws of
    p from the posterior and x from the binomial; the log form; 0 past k."""
    from pipeline import stats

    grid_prior, beta_prior = _toy_grid(), adaptive.Prior(0.4, 1.3)
    n, c = np.array([0, 4, 9, 17]), np.array([0, 0, 8, 16])
    for k in (1, 5, 12):
        x = np.arange(k + 1)
        got = priors.predictive_pmf(grid_prior, k, x, n, c)
        for i in range(len(n)):
            post = _brute_posterior(grid_prior, int(n[i]), int(c[i]))
            for xx in range(k + 1):
                want = math.fsum(
                    w * math.comb(k, xx) * p**xx * (1 - p) ** (k - xx)
                    for p, w in zip(grid_prior.points, post, strict=True)
                )
                assert got[i, xx] == pytest.approx(want, abs=1e-13)
        np.testing.assert_allclose(np.exp(priors.predictive_pmf(grid_prior, k, x, n, c, log=True)), got, rtol=1e-12)
        want = stats.betabinom_pmf(k, x, (0.4 + c)[:, None], (1.3 + n - c)[:, None])
        np.testing.assert_array_equal(priors.predictive_pmf(beta_prior, k, x, n, c), want)
    # one pair, k and x broadcast: the shape after the pair's row; 0 where x > k
    both = priors.predictive_pmf(grid_prior, np.array([[2], [3]]), np.arange(4)[None, :], 9, 8)
    assert both.shape == (1, 2, 4) and both[0, 0, 3] == 0.0
    np.testing.assert_array_equal(both[0, 1], priors.predictive_pmf(grid_prior, 3, np.arange(4), 9, 8)[0])
    # Monte Carlo: 300,000 draws of p from the posterior of 3 of 7, then x of 6 from the binomial
    rng, draws = np.random.default_rng(4), 300_000
    for prior in (grid_prior, beta_prior):
        if prior.is_grid:
            p = rng.choice(np.asarray(prior.points), size=draws, p=_brute_posterior(prior, 7, 3))
        else:
            p = rng.beta(prior.a + 3, prior.b + 4, draws)
        freq = np.bincount(rng.binomial(6, p), minlength=7) / draws
        pmf = priors.predictive_pmf(prior, 6, np.arange(7), 7, 3)[0]
        assert np.all(np.abs(freq - pmf) <= 4.5 * np.sqrt(pmf * (1 - pmf) / draws) + 1e-9), prior.method
    # a pair the prior makes impossible (masses at 0 and 1 only, 2 of 4 right) has no predictive
    ends = adaptive.Prior(0.5, 0.5, method="grid", points=(0.0, 0.5, 1.0), weights=(0.5, 0.0, 0.5))
    assert np.isnan(priors.predictive_pmf(ends, 2, np.arange(3), 4, 2)).all()


def test_cell_share_splits_the_cells_a_band_edge_crosses():
    """Exact: on the grid 0, 0.1, ..., 1 the cell of 0.3 is [0.25, 0.35]; [0.28, 0.6) takes 70% of
    it, all of 0.4 and 0.5, half of 0.6's; the first interior cell is [0, 0.15], the end points
    count by closedness alone."""
    pts = np.linspace(0, 1, 11)
    got = priors.cell_share(pts, 0.28, 0.6, True, False)
    want = [0, 0, 0, 0.7, 1, 1, 0.5, 0, 0, 0, 0]
    np.testing.assert_allclose(got, want, atol=1e-12)
    assert priors.cell_share(pts, 0.0, 0.03, True, True)[:2].tolist() == pytest.approx([1.0, 0.2])
    assert priors.cell_share(pts, 0.0, 0.02, False, True)[0] == 0.0
    assert priors.cell_share(pts, 0.95, 1.0, True, False)[-1] == 0.0
    np.testing.assert_allclose(priors.cell_share(pts, 0.0, 1.0), np.ones(11))


def test_inflated_band_shares_on_the_grid_match_the_continuous_integrals():
    """Exact against quadrature: for the inflated prior 30% at 0, 25% at 1, 45% Beta(2, 2) held on the
    grid, GRPO's update-mass shares at G = 8 of the default bands (edges 0.1, 0.4, 0.6, 0.9) are the
    continuous prior's within 0.2% (counting whole cells put the extreme band off by 6%)."""
    from scipy import integrate, stats

    pts = priors.grid_points()
    w = np.r_[0.30, 0.45 * np.diff(betainc(2.0, 2.0, priors.grid_cells(pts))), 0.25]
    grpo = est.get("grpo")

    def mass(p):
        p = np.asarray(p, float)
        return grpo.weight(p, 8) * p * (1 - p)

    total = math.fsum(w * mass(pts))
    for band in analyze.DEFAULT_BANDS:
        exact = sum(
            integrate.quad(lambda x: stats.beta.pdf(x, 2, 2) * mass(x), lo, hi, epsabs=1e-13)[0]
            for lo, hi, *_ in band.intervals
        )
        full = integrate.quad(lambda x: stats.beta.pdf(x, 2, 2) * mass(x), 0, 1, epsabs=1e-13)[0]
        assert math.fsum(w * mass(pts) * band.share(pts)) / total == pytest.approx(exact / full, rel=2e-3)


def test_grid_analysis_is_the_grid_sums():
    """post_mean, zero-signal rates, weights, masses and pass@k of a grid-prior analysis are sums
    over each prompt's grid posterior."""
    prior = _toy_grid()
    counts = pa.table(
        {"prompt_id": [f"p{i}" for i in range(len(PAIRS))], "n": [n for n, _ in PAIRS], "c": [c for _, c in PAIRS]}
    )
    cfg = analyze.AnalyzeConfig(group_sizes=(4, 8), prior_a=prior.a, prior_b=prior.b, posterior=True, prior=prior)
    result = analyze.analyze(counts, "r", cfg)
    ps = result.prompt_stats.to_pylist()
    p = np.array(prior.points)
    for i, (n, c) in enumerate(PAIRS):
        post = np.array(_brute_posterior(prior, n, c))
        row = ps[i]
        if n:
            assert row["post_mean"] == pytest.approx(float(post @ p), abs=1e-12)
        for j, G in enumerate(row["group_sizes"]):
            assert row["zero_signal"][j] == pytest.approx(float(post @ (p**G + (1 - p) ** G)), abs=1e-12)
        for k in range(1, n + 1):
            assert row["pass_at_k"][k - 1] == pytest.approx(1 - float(post @ (1 - p) ** k), abs=1e-12)
    for w in result.weights.to_pylist():
        i = int(w["prompt_id"][1:])
        n, c = PAIRS[i]
        if not n:
            continue
        post = np.array(_brute_posterior(prior, n, c))
        wp = est.get(w["estimator"]).weight(p, w["G"])
        assert w["weight"] == pytest.approx(float(post @ wp), rel=1e-10, abs=1e-12)
        assert w["mass"] == pytest.approx(float(post @ (wp * p * (1 - p))), rel=1e-10, abs=1e-12)


# The small priors of real datasets, then concentrated ones up to the fit's ceiling, where the Jacobi
# rule's constant overflowed (issue 32: NaN weights past a or b of about 1,034), symmetric or skewed.
QUADRATURE_PRIORS = [(0.3, 0.4), (2.0, 2.0), (0.05, 3.0), (14.0, 14.0), (30.0, 2.0), (0.3, 5000.0), (1100.0, 900.0)]
QUADRATURE_PRIORS += [(5000.0, 5000.0), (priors.PRIOR_CEIL, priors.PRIOR_CEIL), (priors.PRIOR_CEIL, priors.PRIOR_FLOOR)]
QUADRATURE_PRIORS += [(600.0, priors.PRIOR_CEIL)]


@pytest.mark.parametrize(("a", "b"), QUADRATURE_PRIORS)
def test_beta_band_quadrature_is_the_truncated_moment(a, b):
    """E[1{p <= 0.1} p^j] etc. under Beta(a + c, b + n - c) by the composite Gauss-Jacobi rule cut at
    the band edges, against B(alpha + j, beta) / B(alpha, beta) times incomplete Beta differences."""
    prior = adaptive.Prior(a, b)
    n = np.array([4, 4, 9, 64, 64])
    c = np.array([0, 2, 9, 1, 40])
    nodes, W = priors.posterior_nodes(prior, n, c, edges=(0.1, 0.4, 0.6, 0.9), degree=20)
    for i in range(len(n)):
        al, be = a + c[i], b + n[i] - c[i]
        for j in (0, 1, 7, 20):
            scale = math.exp(betaln(al + j, be) - betaln(al, be))
            for lo, hi in ((0.0, 0.1), (0.4, 0.6), (0.9, 1.0), (0.1, 0.9)):
                want = scale * (betainc(al + j, be, hi) - betainc(al + j, be, lo))
                inside = (nodes >= lo) & (nodes <= hi)
                assert float(W[i] @ (inside * nodes**j)) == pytest.approx(want, rel=1e-9, abs=1e-14)


@pytest.mark.parametrize(("a", "b"), [(1100.0, 900.0), (priors.PRIOR_CEIL, priors.PRIOR_CEIL), (0.3, 5000.0)])
def test_beta_quadrature_of_a_smooth_function_matches_brute_force_integration(a, b):
    """Past the Jacobi rule's overflow, a function that is no polynomial (DAPO's update mass at
    G = 8, and p^G + q^G at G = 64) has the posterior mean scipy's adaptive integration of the
    density gives (issue 32: these priors crashed the finish of a run)."""
    from scipy.integrate import quad

    n = np.array([4, 4, 4, 64, 64])
    c = np.array([0, 2, 4, 0, 64])
    dapo = est.get("dapo")
    fs = (lambda p: dapo.mass(p, 8), lambda p: p**64 + (1 - p) ** 64)
    nodes, W = priors.posterior_nodes(priors.Prior(a, b), n, c, edges=(0.1, 0.9), degree=65)
    assert np.isfinite(W).all() and np.allclose(W.sum(axis=1), 1.0)
    for i in range(len(n)):
        al, be = a + c[i], b + n[i] - c[i]
        # breakpoints at the posterior's quantiles, out to where it has no mass left
        points = sorted({float(betaincinv(al, be, q)) for q in (1e-15, 1e-9, 1e-4, 0.05, 0.5, 0.95)})
        points += sorted({1.0 - float(betaincinv(be, al, q)) for q in (1e-4, 1e-9, 1e-15)})

        # a singular end (alpha < 1) as quad's algebraic weight, the rest of the density as the integrand
        singular = al < 1

        def density(p, al=al, be=be, singular=singular):
            left = 0.0 if singular else (al - 1) * math.log(p)
            return math.exp(left + (be - 1) * math.log1p(-p) - betaln(al, be))

        for f in fs:

            def g(p, f=f, d=density):
                return float(f(np.array([p]))[0]) * d(p)

            if singular:
                cut = float(betaincinv(al, be, 0.5))  # the rest of the density is smooth below the median

                def h(p, g=g, al=al):
                    return g(p) * p ** (al - 1)

                rest = [x for x in points if x > cut]
                head = quad(g, 0, cut, weight="alg", wvar=(al - 1, 0), limit=500)[0]
                want = head + quad(h, cut, 1, points=rest, limit=500)[0]
            else:
                want = quad(g, 0, 1, points=points, limit=500)[0]
            assert float(W[i] @ f(nodes)) == pytest.approx(want, rel=1e-9, abs=1e-13)


def test_em_recovers_a_known_mixture(monkeypatch):
    """Monte Carlo: 30% of prompts at p = 0, 25% at 1, 45% Beta(2, 2); 20,000 prompts with 16
    samples each. The masses at 0 and 1, the mean and E[p^G + q^G] of the fit are within a few
    standard errors of the truth; EM never lowers the likelihood, and at its end the mean
    posterior mass of each point is its prior mass (the fixed point of EM)."""
    rng = np.random.default_rng(3)
    N, n = 20_000, 16
    u = rng.random(N)
    p = np.where(u < 0.30, 0.0, np.where(u < 0.55, 1.0, rng.beta(2.0, 2.0, N)))
    c = rng.binomial(n, p)
    fit = priors.fit_grid_prior(np.full(N, n), c)
    pts, w = fit.grid()
    # 16 samples cannot tell p = 0 from p = 0.002 (0/16 either way), so the atoms are compared as the
    # mass within 0.03 of 0 and of 1; Beta(2, 2) puts 0.26% there, and the atoms' standard error is
    # about sqrt(0.3 * 0.7 / N) = 0.0032
    assert w[pts <= 0.03].sum() == pytest.approx(0.30, abs=0.015)
    assert w[pts >= 0.97].sum() == pytest.approx(0.25, abs=0.015)
    assert float(w @ pts) == pytest.approx(0.30 * 0 + 0.25 + 0.45 * 0.5, abs=0.01)
    for G in (4, 8, 16):
        true = 0.55 + 0.45 * 2 * math.exp(betaln(2 + G, 2) - betaln(2, 2))
        assert float(w @ (pts**G + (1 - pts) ** G)) == pytest.approx(true, rel=0.02)
    W = priors.grid_posterior(pts, w, np.full(N, n), c)
    np.testing.assert_allclose(W.mean(axis=0), w, atol=2e-4)
    sweeps = []
    for most in (1, 10, 100):
        monkeypatch.setattr(priors, "EM_MAX_ITER", most)
        sweeps.append(priors.fit_grid_prior(np.full(N, n), c).loglik)
    assert sweeps[0] < sweeps[1] < sweeps[2] <= fit.loglik + 1e-9 * N  # every sweep raises the likelihood
    beta = priors.fit_prior(np.full(N, n), c)
    assert fit.loglik > beta.loglik  # a Beta cannot take this shape


def test_grid_fit_is_deterministic_and_refuses_no_data():
    n, c = np.full(300, 4), np.arange(300) % 5
    assert priors.fit_grid_prior(n, c) == priors.fit_grid_prior(n, c)
    with pytest.raises(ConfigError, match="at least one prompt with samples"):
        priors.fit_grid_prior(np.zeros(3, int), np.zeros(3, int))
    with pytest.raises(ConfigError, match="n_min=1 cannot fit a prior"):
        adaptive.AdaptiveConfig(n_min=1, prior="grid")
    stored = priors.fit_grid_prior(n, c)
    assert adaptive.Prior.from_dict(stored.to_dict()) == stored


def _mixture(rng, N: int) -> np.ndarray:
    u = rng.random(N)
    return np.where(u < 0.30, 0.0, np.where(u < 0.55, 1.0, rng.beta(2.0, 2.0, N)))


def test_auto_weighs_the_beta_the_inflated_beta_and_the_grid_by_evidence():
    """All three fitted to the same 3,000 prompts x 16 samples and held on the grid; the auto prior is
    their mixture weighted by exp(log-likelihood - penalty): counts from Beta(0.3, 0.4) put nearly all
    the weight on the Beta (neither richer prior gains its margin); masses at 0 and 1 beside a Beta
    on the inflated Beta; two spikes inside (0, 1), a shape neither family has, on the grid prior.
    The prior is exactly the weighted sum of the three held priors, and is stored and read back."""
    rng = np.random.default_rng(9)
    n = np.full(3000, 16)
    cases = {
        0: rng.binomial(16, rng.beta(0.3, 0.4, 3000)),
        1: rng.binomial(16, _mixture(rng, 3000)),
        2: rng.binomial(16, np.where(rng.random(3000) < 0.5, 0.2, 0.75)),
    }
    pts = priors.grid_points()
    for family, c in cases.items():
        auto = priors.choose_prior(n, c)
        assert auto.method == "mixture" and auto.is_grid and auto.selection.startswith("auto: weights")
        assert auto.mixture[family] > 0.9, (family, auto.mixture)
        assert abs(sum(auto.mixture) - 1) < 1e-9
        beta, inflated, grid = priors.fit_prior(n, c), priors.fit_inflated_prior(n, c), priors.fit_grid_prior(n, c)
        held_beta = np.diff(sst.beta.cdf(priors.grid_cells(pts), beta.a, beta.b))
        parts = [np.r_[0.0, held_beta / held_beta.sum(), 0.0], np.asarray(inflated.weights), np.asarray(grid.weights)]
        np.testing.assert_allclose(
            auto.grid()[1], sum(w * g for w, g in zip(auto.mixture, parts, strict=True)), atol=1e-9
        )
        # The weights: exp(l_f - pen_f) normalised, l_f summed prompt by prompt under each held prior,
        # the penalties 0, log N and AUTO_MARGIN log N.
        like = pts[None, :] ** c[:, None] * (1 - pts[None, :]) ** (n - c)[:, None]
        ll = np.array([np.log(like @ g).sum() for g in parts])
        score = ll - np.array([0.0, 1.0, priors.AUTO_MARGIN]) * math.log(len(n))
        np.testing.assert_allclose(
            auto.mixture, np.exp(score - score.max()) / np.exp(score - score.max()).sum(), atol=1e-9
        )
        assert "mixture of Beta" in auto.label
        assert adaptive.Prior.from_dict(auto.to_dict()) == auto


def test_auto_weights_move_smoothly_with_the_evidence():
    """No switch between families: as the share of prompts at exactly 0 grows from 0 to 20% of a
    Beta(2, 2) dataset, the inflated Beta's weight rises from 0 to 1 through values in between, and
    the prior's mass at 0 never jumps by more than the step of the data."""
    rng = np.random.default_rng(4)
    N = 2000
    base = rng.beta(2.0, 2.0, N)
    u = rng.random(N)
    draws = np.random.default_rng(5).random((N, 8))  # the same coins for every share
    weights, at_zero = [], []
    for share in np.linspace(0.0, 0.2, 21):
        p = np.where(u < share, 0.0, base)
        c = (draws < p[:, None]).sum(axis=1)
        auto = priors.choose_prior(np.full(N, 8), c)
        weights.append(auto.mixture[1])
        at_zero.append(auto.grid()[1][0])
    weights = np.array(weights)
    assert weights[0] < 0.05 and weights[-1] > 0.95
    assert ((weights > 0.05) & (weights < 0.95)).any(), weights
    assert np.all(np.abs(np.diff(at_zero)) < 0.05), at_zero


def test_inflated_fit_recovers_a_known_mixture():
    """Monte Carlo: 20,000 prompts x 16 samples, 30% at p = 0, 25% at 1, 45% Beta(2, 2). The atoms
    are within about 4 standard errors, the Beta part's parameters within 15%; its likelihood is
    the grid prior's within a few nats (four parameters against 200) and far above a Beta's."""
    rng = np.random.default_rng(3)
    N = 20_000
    c = rng.binomial(16, _mixture(rng, N))
    n = np.full(N, 16)
    fit = priors.fit_inflated_prior(n, c)
    _, w = fit.grid()
    assert w[0] == pytest.approx(0.30, abs=0.015) and w[-1] == pytest.approx(0.25, abs=0.015)
    assert fit.a == pytest.approx(2.0, rel=0.15) and fit.b == pytest.approx(2.0, rel=0.15)
    grid = priors.fit_grid_prior(n, c)
    assert abs(fit.loglik - grid.loglik) < 10
    assert fit.loglik > priors.fit_prior(n, c).loglik + 100
    assert fit == priors.fit_inflated_prior(n, c)  # deterministic: a rerun re-derives its rounds
    assert adaptive.Prior.from_dict(fit.to_dict()) == fit


@pytest.mark.parametrize("shape", ["mixture", "hard"])
def test_inflated_fit_is_the_likelihoods_maximum(shape):
    """The fit (L-BFGS-B with the analytic gradient) is where the continuous model's log-likelihood,
    summed in Python floats over the prompts, is highest: a step of 1e-3 in any of its four parameters
    (an atom's mass, log a, log b) lowers it, and a derivative-free search (Nelder-Mead) started from it
    gains under 1e-3 nats (the optimiser's stopping tolerance: an atom left at 1e-7 instead of its
    boundary 0 costs about N 1e-7). A wrong gradient stops L-BFGS-B where a step still gains."""
    from scipy.optimize import minimize

    rng = np.random.default_rng(5)
    N = 600
    p = _mixture(rng, N) if shape == "mixture" else np.where(rng.random(N) < 0.9, 0.0, rng.beta(2.0, 5.0, N))
    n = rng.integers(4, 17, N)
    c = rng.binomial(n, p)

    def loglik(w0: float, w1: float, la: float, lb: float) -> float:
        if min(w0, w1) < 0 or w0 + w1 > 1:
            return -math.inf
        a, b = math.exp(la), math.exp(lb)
        pairs = list(zip(n.tolist(), c.tolist(), strict=True))
        beta_part = [math.exp(betaln(a + ci, b + ni - ci) - betaln(a, b)) for ni, ci in pairs]
        return math.fsum(
            math.log(w0 * (ci == 0) + w1 * (ci == ni) + (1 - w0 - w1) * m)
            for (ni, ci), m in zip(pairs, beta_part, strict=True)
        )

    fit = priors.fit_inflated_prior(n, c)
    at = [fit.weights[0], fit.weights[-1], math.log(fit.a), math.log(fit.b)]
    best = loglik(*at)
    for k in range(4):
        for step in (-1e-3, 1e-3):
            moved = list(at)
            moved[k] += step
            assert loglik(*moved) <= best + 1e-9, (k, step)
    search = minimize(lambda x: -loglik(*x), at, method="Nelder-Mead", options={"xatol": 1e-7, "fatol": 1e-9})
    assert -search.fun <= best + 1e-3


def test_inflated_prior_on_the_grid_is_its_cell_masses_and_its_likelihood_the_brute_force_sum():
    """Exact: the atoms sit at p = 0 and 1 with their masses; each interior point holds the Beta
    part's mass between the midpoints to its neighbours (the first and last cells reach 0 and 1);
    the stored log-likelihood is the sum over prompts of log sum_k w_k p_k^c q_k^(n-c) in Python
    floats."""
    rng = np.random.default_rng(4)
    n = rng.integers(4, 30, 400)
    c = rng.binomial(n, _mixture(rng, 400))
    fit = priors.fit_inflated_prior(n, c)
    pts, w = fit.grid()
    assert pts[0] == 0.0 and pts[-1] == 1.0 and math.fsum(w) == pytest.approx(1.0, abs=1e-12)
    mids = [0.0] + [(pts[k] + pts[k + 1]) / 2 for k in range(1, len(pts) - 2)] + [1.0]
    middle = 1.0 - w[0] - w[-1]
    for k in (1, 2, 50, 100, len(pts) - 2):
        cell = betainc(fit.a, fit.b, mids[k]) - betainc(fit.a, fit.b, mids[k - 1])
        assert w[k] == pytest.approx(middle * cell, rel=1e-9, abs=1e-15)
    brute = math.fsum(
        math.log(math.fsum(wk * pk**ci * (1 - pk) ** (ni - ci) for pk, wk in zip(pts, w, strict=True)))
        for ni, ci in zip(n.tolist(), c.tolist(), strict=True)
    )
    assert fit.loglik == pytest.approx(brute, rel=1e-10)
    with pytest.raises(ConfigError, match="at least one prompt with samples"):
        priors.fit_inflated_prior(np.zeros(3, int), np.zeros(3, int))


def _adaptive_counts(p: np.ndarray, acfg: adaptive.AdaptiveConfig, rng, prior=None):
    """The rounds on Bernoulli outcomes: a fixed ``prior``, or refitted each round as a run does."""
    outcomes = rng.random((len(p), acfg.n_max)) < p[:, None]
    if prior is None:
        return frontier.simulate(outcomes, acfg)
    csum = np.concatenate([np.zeros((len(p), 1), np.int64), np.cumsum(outcomes, axis=1)], axis=1)
    n = np.full(len(p), acfg.n_min)
    while True:
        extra = adaptive.next_round(n, csum[np.arange(len(p)), n], prior, acfg)
        if not extra.any():
            return n, csum[np.arange(len(p)), n], prior
        n = n + extra


def _summary(n, c, cfg: analyze.AnalyzeConfig) -> dict:
    counts = pa.table({"prompt_id": [str(i) for i in range(len(n))], "n": n, "c": c})
    out = {}
    for r in analyze.summary(counts, "r", cfg).to_pylist():
        out[(r["section"], r["metric"], r["estimator"], r["G"], r["band"])] = r["value"]
    return out


@pytest.mark.parametrize(
    ("a", "b", "c"),
    [
        (priors.PRIOR_CEIL, priors.PRIOR_CEIL, [2, 2, 2, 2, 2]),
        (priors.PRIOR_FLOOR, priors.PRIOR_CEIL, [0, 0, 0, 0, 0]),
        (priors.PRIOR_CEIL, priors.PRIOR_FLOOR, [4, 4, 4, 4, 4]),
        (7000.7, 3000.7, [1, 2, 3, 2, 4]),
    ],
)
def test_posterior_analysis_under_a_prior_at_the_fits_ceiling(a, b, c):
    """Issue 32: counts with no spread beyond binomial noise (a few prompts at 2 of 4, every prompt
    0/4 or 4/4) fit a Beta at the ceiling, and a run's finish crashed on the quadrature's NaN
    weights. Under such priors every summary value is a number, and GRPO's mean update mass is the
    closed form of its Beta moments (``curriculum.expected_mass``), the shares of three bands that
    cover [0, 1] summing to 1."""
    from pipeline import curriculum

    n = np.full(5, 4)
    bands = (
        analyze.Band("hard", ((0.0, 0.1, True, False),)),
        analyze.Band("mid", ((0.1, 0.9, True, True),)),
        analyze.Band("easy", ((0.9, 1.0, False, True),)),
    )
    cfg = analyze.AnalyzeConfig(group_sizes=(4, 8, 16), prior_a=a, prior_b=b, posterior=True, bands=bands)
    got = _summary(n, np.array(c), cfg)
    assert all(np.isfinite(v) for v in got.values())
    for G in (4, 8, 16):
        exact, _ = curriculum.expected_mass(a + np.array(c), b + n - np.array(c), G, "grpo")
        assert got[("gradient_share", "mean_mass", "grpo", G, "all")] == pytest.approx(exact.mean(), rel=1e-9)
        shares = [got[("gradient_share", "share", "grpo", G, band.name)] for band in bands]
        assert sum(shares) == pytest.approx(1.0, abs=1e-9)


def test_adaptive_band_shares_are_posterior_expectations():
    """Monte Carlo: U-shaped truth Beta(0.3, 0.4), the adaptive rounds under that very prior. GRPO's
    band shares at G = 8 are within 8% of the truth over 4 x 4,000 prompts (the share computed from
    each prompt's posterior mean was +70% on the medium band: the shrunken prompts pile there)."""
    prior = adaptive.Prior(0.3, 0.4)
    acfg = adaptive.AdaptiveConfig()
    cfg = analyze.AnalyzeConfig(group_sizes=(8,), prior_a=0.3, prior_b=0.4, posterior=True, pass_at_k=False)
    grpo = est.get("grpo")
    rel = {band.name: [] for band in analyze.DEFAULT_BANDS}
    for r in range(4):
        rng = np.random.default_rng(100 + r)
        p = rng.beta(0.3, 0.4, 4000)
        n, c, _ = _adaptive_counts(p, acfg, rng, prior)
        got = _summary(n, c, cfg)
        m = grpo.weight(p, 8) * p * (1 - p)
        for band in analyze.DEFAULT_BANDS:
            truth = m[band.contains(p)].sum() / m.sum()
            rel[band.name].append(got[("gradient_share", "share", "grpo", 8, band.name)] / truth - 1)
    for name, values in rel.items():
        assert abs(np.mean(values)) < 0.08, (name, values)


def test_grid_prior_estimates_are_unbiased_on_a_mixture():
    """Monte Carlo: 30% at p = 0, 25% at 1, 45% Beta(2, 2), the default adaptive run (``auto``, which
    puts nearly all the weight on the inflated Beta here, held on the grid, refitted each round).
    Mean p, D(G) for G = 4..64 and GRPO's mean mass are within 3% of the truth over 2 x 3,000
    prompts; the Beta prior fitted to round 0 missed D(64) by about -36%."""
    acfg = adaptive.AdaptiveConfig()
    assert acfg.prior == "auto"
    grpo = est.get("grpo")
    Gs = (4, 8, 16, 32, 64)
    errors: dict[str, list[float]] = {}
    for r in range(2):
        rng = np.random.default_rng(200 + r)
        u = rng.random(3000)
        p = np.where(u < 0.30, 0.0, np.where(u < 0.55, 1.0, rng.beta(2.0, 2.0, 3000)))
        n, c, prior = _adaptive_counts(p, acfg, rng)
        assert prior.method == "mixture" and prior.is_grid and prior.mixture[1] > 0.9
        cfg = analyze.AnalyzeConfig(
            group_sizes=Gs, prior_a=prior.a, prior_b=prior.b, posterior=True, prior=prior, pass_at_k=False
        )
        got = _summary(n, c, cfg)
        errors.setdefault("mean p", []).append(got[("dataset", "mean_pass_rate", None, None, None)] / p.mean() - 1)
        for G in Gs:
            z = np.mean(p**G + (1 - p) ** G)
            errors.setdefault(f"D({G})", []).append(got[("zero_signal", "observed", None, G, None)] / z - 1)
            mass = np.mean(grpo.weight(p, G) * p * (1 - p))
            errors.setdefault(f"mass {G}", []).append(got[("gradient_share", "mean_mass", "grpo", G, "all")] / mass - 1)
    for name, values in errors.items():
        assert abs(np.mean(values)) < 0.03, (name, values)


def test_the_estimation_prior_is_the_grid_fit_run_to_its_maximum():
    """``prior.estimation_prior``: on a truth of two spikes (half the prompts at 0.05, half at 0.95)
    sampled 4 to 5 times each, the capped grid fit the run decides with leaves mass in the middle bands
    where the truth has none; run to its maximum the fit is more likely (an EM sweep never lowers it)
    and nearly empty there, and the summary's GRPO hard-band share at G = 4, a posterior expectation
    (``analyze``), lands within 1% of the prompts' own share under it, not under the capped fit.
    A Beta or inflated prior is returned as it is."""
    rng = np.random.default_rng(11)
    N = 20_000
    p = np.where(rng.random(N) < 0.5, 0.05, 0.95)
    n = 4 + (rng.random(N) < 0.1)
    c = rng.binomial(n, p)
    capped = priors.fit_grid_prior(n, c)
    full = priors.estimation_prior(capped, n, c)
    pts = priors.grid_points()
    middle = (pts >= 0.1) & (pts <= 0.9)
    assert full.iterations > capped.iterations == priors.EM_MAX_ITER
    n_u, c_u, mult = priors._counted_pairs(n, c)
    loglik = [priors._grid_loglik(pts, np.asarray(pr.weights), n_u, c_u, mult) for pr in (capped, full)]
    assert loglik[1] > loglik[0] + 5.0
    assert np.asarray(capped.weights)[middle].sum() > 0.005 > 20 * np.asarray(full.weights)[middle].sum()

    grpo = est.get("grpo")
    mass = grpo.weight(p, 4) * p * (1 - p)
    truth = float(mass[p < 0.1].sum() / mass.sum())

    def hard_share(prior) -> float:
        cfg = analyze.posterior_config(analyze.AnalyzeConfig(group_sizes=(4,), estimators=("grpo",)), prior)
        rows = analyze._summary(analyze._Pairs(n, c, cfg), "t").to_pylist()
        return next(r["value"] for r in rows if r["metric"] == "share" and r["band"] == "hard")

    assert abs(hard_share(full) / truth - 1) < 0.01 < abs(hard_share(capped) / truth - 1)
    for other in (priors.fit_prior(n, c), priors.fit_inflated_prior(n, c)):
        assert priors.estimation_prior(other, n, c) is other
