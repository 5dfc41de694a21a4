"""Rollout allocation: greedy == dynamic programming, fast == greedy, calculators exact."""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
import tracemalloc
from decimal import ROUND_CEILING, Decimal, localcontext
from fractions import Fraction

import numpy as np
import pytest
from scipy import integrate
from scipy.stats import beta as beta_dist

from pipeline import allocate as alloc
from pipeline import errors
from pipeline import estimators as est
from pipeline.errors import ConfigError


def _instance(seed: int, N: int, n_obs: int = 16):
    rng = np.random.default_rng(seed)
    p = rng.beta(0.4, 0.4, N)
    n = np.full(N, n_obs)
    c = rng.binomial(n_obs, p)
    return n, c


CASES = [
    ("signal", "grpo", False),
    ("signal", "grpo", True),
    ("signal", "maxrl", False),
    ("signal", "softmax_grpo:tau=0.5", True),
    ("signal", "reco_binary", False),
    ("knapsack", "grpo", False),
    ("knapsack", "grpo", True),
    ("variance", "grpo", False),
    ("variance", "grpo", True),
]


@pytest.mark.parametrize("objective,estimator,posterior", CASES)
def test_greedy_equals_dynamic_programming(objective, estimator, posterior):
    for seed in range(3):
        n, c = _instance(seed, N=6)
        n_min, n_max = 2, 12
        for budget in (12, 31, 50, 72):
            cfg = alloc.AllocationConfig(
                budget=budget,
                objective=objective,
                estimator=estimator,
                n_min=n_min,
                n_max=n_max,
                posterior=posterior,
                method="greedy",
            )
            res = alloc.allocate(n, c, cfg)
            assert res.n.sum() == budget
            assert res.n.min() >= n_min and res.n.max() <= n_max
            # DP over the same value table (one row per prompt)
            grid = np.arange(n_min, n_max + 1)
            if posterior:
                table = alloc.value_table(objective, grid, alpha=0.5 + c, beta=0.5 + n - c, estimator=estimator)
            else:
                table = alloc.value_table(objective, grid, p=c / n, estimator=estimator)
            dp = alloc.allocate_dp(table, np.arange(len(n)), budget, n_min, n_max)
            best = table[np.arange(len(n)), dp - n_min].sum()
            got = table[np.arange(len(n)), res.n - n_min].sum()
            # optimal up to the tie tolerance: a gain below TIE_RTOL times its values counts as 0
            slack = (budget - n_min * len(n)) * alloc.TIE_RTOL * np.abs(table).max()
            assert best - slack - 1e-15 <= got <= best + 1e-12, (seed, budget)


@pytest.mark.parametrize("objective,estimator,posterior", CASES)
def test_fast_equals_greedy(objective, estimator, posterior):
    n, c = _instance(11, N=400, n_obs=24)
    for budget in (800, 6400, 20_000):
        base = {
            "budget": budget,
            "objective": objective,
            "estimator": estimator,
            "n_min": 2,
            "n_max": 64,
            "posterior": posterior,
        }
        fast = alloc.allocate(n, c, alloc.AllocationConfig(**base, method="fast"))
        greedy = alloc.allocate(n, c, alloc.AllocationConfig(**base, method="greedy"))
        assert fast.n.sum() == budget == greedy.n.sum()
        np.testing.assert_array_equal(fast.n, greedy.n)  # the same allocation, not only the same value
        assert fast.method == "fast" and greedy.method == "greedy"
        # never worse than the uniform split of the same budget
        if fast.sense == "max":
            assert fast.total >= fast.uniform_total - 1e-12
        else:
            assert fast.total <= fast.uniform_total + 1e-12


def test_fast_handles_ties_like_the_heap():
    # many identical prompts, prompts with zero gain (p = 0 and 1), and an all-flat objective
    n = np.full(50, 8)
    c = np.array([4] * 20 + [0] * 10 + [8] * 10 + [2] * 10)
    for estimator in ("grpo", "rloo", "sign"):
        for budget in (100, 137, 401):
            base = {"budget": budget, "estimator": estimator, "n_min": 2, "n_max": 20}
            fast = alloc.allocate(n, c, alloc.AllocationConfig(**base))
            greedy = alloc.allocate(n, c, alloc.AllocationConfig(**base, method="greedy"))
            np.testing.assert_array_equal(fast.n, greedy.n)
            assert fast.n.sum() == budget


def test_fast_bit_bisection_with_negative_and_tiny_gains():
    # a hand-made concave table with gains spanning signs and magnitudes
    table = np.cumsum(
        np.array(
            [
                [0.0, 1e-300, 1e-310, 0.0, -1e-5],
                [0.0, 3.0, 2.0, 2.0, 1e-200],
                [0.0, -1.0, -2.0, -3.0, -4.0],
            ]
        ),
        axis=1,
    )
    key = np.array([0, 1, 2, 1, 0])
    for budget in range(5 * 4 + 1):
        f = alloc.allocate_fast(table, key, budget, 0, 4)
        g = alloc.allocate_greedy(table, key, budget, 0, 4)
        vf = table[key, f].sum()
        vg = table[key, g].sum()
        assert vf == pytest.approx(vg, rel=1e-12, abs=1e-300), budget
        np.testing.assert_array_equal(f, g)


def test_budget_errors():
    n, c = _instance(0, N=10)
    with pytest.raises(ValueError, match="at least 20"):
        alloc.allocate(n, c, alloc.AllocationConfig(budget=19, n_min=2))
    with pytest.raises(ValueError, match="at most 100"):
        alloc.allocate(n, c, alloc.AllocationConfig(budget=101, n_min=2, n_max=10))
    with pytest.raises(ValueError, match="objective"):
        alloc.AllocationConfig(budget=10, objective="speed")
    with pytest.raises(ValueError, match="unknown estimator"):
        alloc.AllocationConfig(budget=10, estimator="nope")
    with pytest.raises(ValueError, match="no samples"):
        alloc.allocate(np.array([0, 4]), np.array([0, 1]), alloc.AllocationConfig(budget=8))
    # the posterior handles a prompt without samples
    res = alloc.allocate(np.array([0, 4]), np.array([0, 1]), alloc.AllocationConfig(budget=8, posterior=True))
    assert res.n.sum() == 8


def test_value_tables_against_definitions():
    grid = np.arange(1, 9)
    p = np.array([0.0, 0.15, 0.5, 1.0])
    q = 1 - p
    sig = alloc.value_table("signal", grid, p=p, estimator="grpo")
    for j, G in enumerate(grid):
        np.testing.assert_allclose(sig[:, j], est.get("grpo").mass(p, G), atol=1e-15)
    knap = alloc.value_table("knapsack", grid, p=p)
    for j, G in enumerate(grid):
        np.testing.assert_allclose(knap[:, j], (1 - p**G - q**G) * p * q**2, atol=1e-15)
    # posterior tables equal the Beta average of the point tables (numerical integration)
    a, b = np.array([2.5, 0.5]), np.array([6.5, 3.5])
    for objective in ("signal", "knapsack", "variance"):
        post = alloc.value_table(objective, grid, alpha=a, beta=b, estimator="maxrl_impl")
        for i in range(2):
            for j in (0, 3, 7):

                def integrand(x, objective=objective, j=j, i=i):
                    v = alloc.value_table(objective, grid[j : j + 1], p=np.array([x]), estimator="maxrl_impl")[0, 0]
                    return v * beta_dist.pdf(x, a[i], b[i])

                avg = integrate.quad(integrand, 0, 1, limit=200)[0]
                assert post[i, j] == pytest.approx(avg, rel=1e-6, abs=1e-12), (objective, i, j)


def test_variance_objective_is_neyman():
    """At a large budget n_i is proportional to sqrt(p_i q_i) up to rounding."""
    p = np.array([0.5, 0.1, 0.02, 0.3])
    n_obs = np.full(4, 1000)
    c = (p * 1000).astype(int)
    res = alloc.allocate(n_obs, c, alloc.AllocationConfig(budget=40_000, objective="variance", n_min=1, n_max=40_000))
    ph = c / 1000
    target = 40_000 * np.sqrt(ph * (1 - ph)) / np.sqrt(ph * (1 - ph)).sum()
    np.testing.assert_allclose(res.n, target, atol=2)
    assert res.improvement > 1


def test_min_tries_spec_values_and_minimality():
    np.testing.assert_array_equal(alloc.min_tries([0.5, 0.3, 0.2, 0.1, 0.05], 0.05), [6, 9, 14, 29, 59])
    rng = np.random.default_rng(5)
    for p in rng.uniform(0.001, 0.999, 200):
        for delta in (0.5, 0.05, 1e-4):
            n = int(alloc.min_tries(p, delta)[0])
            assert n >= 2 and p**n + (1 - p) ** n <= delta
            assert n == 2 or p ** (n - 1) + (1 - p) ** (n - 1) > delta
            m = max(p, 1 - p)
            assert np.ceil(np.log(delta) / np.log(m)) <= max(n, 2)
            assert n <= max(2, np.ceil(np.log(delta / 2) / np.log(m)))
    with pytest.raises(ValueError, match=r"\(0, 1\)"):
        alloc.min_tries(0.0, 0.05)
    with pytest.raises(ValueError, match="delta"):
        alloc.min_tries(0.5, 1.5)


def test_group_size_for_fidelity():
    # fidelity rises with G on a grid (what the bisection relies on)
    for p in (0.02, 0.2, 0.5, 0.9):
        phi = np.array([alloc.grpo_fidelity(p, G)[0] for G in range(1, 300)])
        assert np.all(np.diff(phi) >= -1e-12)
    for p in (0.01, 0.1, 0.5, 0.97):
        for f in (0.9, 0.99):
            G = alloc.group_size_for_fidelity(p, f)
            assert alloc.grpo_fidelity(p, G)[0] >= f
            assert G == 1 or alloc.grpo_fidelity(p, G - 1)[0] < f
    # the interior approximation 1/(8 eps p q) understates it near the edges
    p, eps = 0.01, 0.1
    assert alloc.group_size_for_fidelity(p, 1 - eps) > 1 / (8 * eps * p * (1 - p))
    with pytest.raises(ValueError):
        alloc.group_size_for_fidelity(1.0, 0.9)


# --- issue 16: exact allocation where the value is not concave, ties, edge calculators -----------

DAPO_T4 = "dapo:mode=resample,T=4"


def _brute_force(value, cost, key, budget, n_min, n_max, exact_budget):
    """Best ``(n, total)`` over every allocation: sum of n == budget (unit costs) or expected cost <= budget."""
    L = n_max - n_min
    best, best_n = -np.inf, None
    for combo in itertools.product(range(L + 1), repeat=len(key)):
        idx = np.asarray(combo)
        spent = cost[key, idx].sum()
        if (spent != budget) if exact_budget else (spent > budget + 1e-9):
            continue
        v = value[key, idx].sum()
        if v > best:
            best, best_n = v, n_min + idx
    return best_n, best


def _expected_rollouts(spec, p, grid):
    e = est.get(spec)
    return np.array([[float(e.expected_rollouts(pi, int(G))) for G in grid] for pi in p])


def _posterior_expected_rollouts(spec, a, b, grid):
    """``E[c(n)]`` over each ``Beta(a, b)`` by numerical integration."""
    e = est.get(spec)

    def mean(G, ai, bi):
        return integrate.quad(lambda x: float(e.expected_rollouts(x, int(G))) * beta_dist.pdf(x, ai, bi), 0, 1)[0]

    return np.array([[mean(G, ai, bi) for G in grid] for ai, bi in zip(a, b, strict=True)])


def test_dapo_resample_charges_expected_rollouts_and_is_exact():
    """Issue 16: v(n) of DAPO with resampling is not concave (p = 1/8 falls from n = 5), and a prompt
    spends G (1 - z^T)/(1 - z) rollouts in expectation (docs/estimators.md §3), not n."""
    cfg = alloc.AllocationConfig(budget=12, estimator=DAPO_T4, n_min=2, n_max=10)
    res = alloc.allocate(np.array([8, 8]), np.array([1, 4]), cfg)
    p, grid = np.array([1 / 8, 1 / 2]), np.arange(2, 11)
    value = alloc.value_table("signal", grid, p=p, estimator=DAPO_T4)
    assert np.diff(value[0], 2).max() > 1e-4  # really not concave
    cost = _expected_rollouts(DAPO_T4, p, grid)
    best_n, best = _brute_force(value, cost, np.arange(2), 12, 2, 10, exact_budget=False)
    np.testing.assert_array_equal(res.n, best_n)
    assert res.total == pytest.approx(best, rel=1e-12)
    assert res.method == "dp"
    np.testing.assert_allclose(res.cost, cost[np.arange(2), res.n - 2], rtol=1e-12)
    assert res.cost.sum() <= 12
    # the uniform baseline is charged the same way
    assert cost[np.arange(2), res.uniform_n - 2].sum() <= 12


@pytest.mark.parametrize("spec", [DAPO_T4, "dapo:mode=resample,T=2"])
@pytest.mark.parametrize("posterior", [False, True])
def test_dapo_resample_equals_brute_force(spec, posterior):
    n_min, n_max = 2, 7
    grid = np.arange(n_min, n_max + 1)
    for seed in range(2):
        n, c = _instance(seed, N=4, n_obs=8)
        if posterior:
            a, b = 0.5 + c, 0.5 + n - c
            value = alloc.value_table("signal", grid, alpha=a, beta=b, estimator=spec)
            cost = _posterior_expected_rollouts(spec, a, b, grid)
        else:
            value = alloc.value_table("signal", grid, p=c / n, estimator=spec)
            cost = _expected_rollouts(spec, c / n, grid)
        lo, hi = cost[:, 0].sum(), cost[:, -1].sum()
        for budget in np.linspace(lo, hi, 5)[:-1].round().astype(int) + 1:
            cfg = alloc.AllocationConfig(
                budget=int(budget), estimator=spec, n_min=n_min, n_max=n_max, posterior=posterior
            )
            res = alloc.allocate(n, c, cfg)
            _, best = _brute_force(value, cost, np.arange(4), budget, n_min, n_max, exact_budget=False)
            got = value[np.arange(4), res.n - n_min].sum()
            assert got == pytest.approx(best, rel=1e-8), (seed, budget)
            assert cost[np.arange(4), res.n - n_min].sum() <= budget + 1e-9


def test_dp_is_exact_on_a_non_concave_table_where_greedy_is_not():
    # the DAPO T=4 values of issue 16 charged n rollouts: greedy gives (9, 3), the optimum is (4, 8)
    grid = np.arange(2, 11)
    table = alloc.value_table("signal", grid, p=np.array([1 / 8, 1 / 2]), estimator=DAPO_T4)
    key = np.arange(2)
    greedy = alloc.allocate_greedy(table, key, 12, 2, 10)
    dp = alloc.allocate_dp(table, key, 12, 2, 10)
    best_n, best = _brute_force(table, np.tile(grid, (2, 1)), key, 12, 2, 10, exact_budget=True)
    np.testing.assert_array_equal(dp, best_n)
    np.testing.assert_array_equal(dp, [4, 8])
    assert table[key, dp - 2].sum() == pytest.approx(0.8596, abs=1e-4)
    assert table[key, greedy - 2].sum() < best - 0.02
    # random non-concave tables, repeated rows
    rng = np.random.default_rng(7)
    for _ in range(20):
        t = rng.normal(size=(3, 6)).cumsum(axis=1)
        k = rng.integers(0, 3, 4)
        for budget in (8, 13, 19):
            n = alloc.allocate_dp(t, k, budget, 2, 7)
            _, best = _brute_force(t, np.tile(np.arange(2, 8), (3, 1)), k, budget, 2, 7, exact_budget=True)
            assert n.sum() == budget and t[k, n - 2].sum() == pytest.approx(best, rel=1e-12)


def test_exact_allocation_refuses_when_too_large():
    n, c = _instance(3, N=3000, n_obs=16)
    cfg = alloc.AllocationConfig(budget=16 * 3000, estimator=DAPO_T4, n_min=2, n_max=512, method="dp")
    with pytest.raises(errors.AllocationTooLargeError, match="n_max"):
        alloc.allocate(n, c, cfg)


def test_flat_objectives_tie_evenly_without_a_false_warning(caplog):
    """rloo and sign have v(n) constant in n; rounding noise of 1e-13 must not pick the allocation."""
    caplog.set_level(logging.INFO, logger="pipeline.allocate")
    for spec in ("rloo", "sign"):
        for method in ("fast", "greedy"):
            cfg = alloc.AllocationConfig(budget=600, estimator=spec, n_max=512, method=method)
            res = alloc.allocate(np.full(3, 8), np.full(3, 4), cfg)
            np.testing.assert_array_equal(res.n, [200, 200, 200])
            # different pass rates: every gain is 0, so the budget is spread evenly
            res = alloc.allocate(np.full(5, 8), np.array([1, 3, 4, 6, 8]), dataclasses.replace(cfg, budget=101))
            assert res.n.max() - res.n.min() <= 1 and res.n.sum() == 101
    assert not [r for r in caplog.records if "not concave" in r.getMessage()]
    # the allocation does not move when the table moves by rounding noise
    grid = np.arange(2, 65)
    table = alloc.value_table("signal", grid, p=np.array([0.1, 0.3, 0.5, 0.7]), estimator="rloo")
    noisy = table + np.random.default_rng(0).normal(0, 1e-13, table.shape)
    key = np.array([0, 1, 2, 3, 0, 2])
    for f in (alloc.allocate_fast, alloc.allocate_greedy):
        a = f(table, key, 150, 2, 64, rtol=alloc.TIE_RTOL)
        np.testing.assert_array_equal(a, f(noisy, key, 150, 2, 64, rtol=alloc.TIE_RTOL))
        assert a.max() - a.min() <= 1


def test_identical_prompts_differ_by_at_most_one():
    n, c = _instance(4, N=60, n_obs=8)
    n[:20], c[:20] = 8, 3
    for spec in ("grpo", "rloo", "maxrl"):
        for method in ("fast", "greedy"):
            res = alloc.allocate(n, c, alloc.AllocationConfig(budget=1234, estimator=spec, n_max=64, method=method))
            assert res.n[:20].max() - res.n[:20].min() <= 1, (spec, method)


def _exact_infidelity(p: float, G: int) -> Decimal:
    """``1 - phi(p, G)`` by brute force: exact binomial weights (integers and Fractions), square
    roots in 50-digit decimals."""
    with localcontext() as ctx:
        ctx.prec = 50
        P = Fraction(p)
        Q = 1 - P
        spq = (Decimal(P.numerator) * Decimal(Q.numerator) / (Decimal(P.denominator) * Decimal(Q.denominator))).sqrt()
        num = Decimal(0)
        for k in range(G + 1):
            w = math.comb(G, k) * P**k * Q ** (G - k)
            num += Decimal(w.numerator) / Decimal(w.denominator) * Decimal(k * (G - k)).sqrt() / G
        return 1 - num / spq


def _window_infidelity(p: float, G: int) -> Decimal:
    """``1 - phi`` at large G: Binomial weights by their ratio, in 40-digit decimals, over the mode
    +- 40 standard deviations (the rest weighs less than 1e-300), normalised."""
    with localcontext() as ctx:
        ctx.prec = 40
        P = Decimal(p)
        Q = 1 - P
        m = int((G + 1) * p)
        half = int(40 * math.sqrt(G * p * (1 - p))) + 40
        lo, hi = max(0, m - half), min(G, m + half)
        w = {m: Decimal(1)}
        for k in range(m, hi):
            w[k + 1] = w[k] * (G - k) / (k + 1) * P / Q
        for k in range(m, lo, -1):
            w[k - 1] = w[k] * k / (G - k + 1) * Q / P
        spq = (P * Q).sqrt()
        num = sum(wk * Decimal(k * (G - k)).sqrt() / G for k, wk in w.items())
        return 1 - num / (spq * sum(w.values()))


def test_grpo_fidelity_against_exact_sums():
    for G in (1, 2, 7, 60, 400):
        for p in (1e-4, 0.03, 0.3, 0.5, 0.97):
            ref = _exact_infidelity(p, G)
            phi = float(alloc.grpo_fidelity(p, G)[0])
            assert phi == pytest.approx(1 - float(ref), abs=1e-14), (p, G)
            assert 1 - phi == pytest.approx(float(ref), rel=1e-9), (p, G)
    # at G = 5e5 the log-gamma pmf lost 1e-9; the window sum agrees with the decimal reference
    for p, G in ((0.5, 500_000), (0.5, 500_001), (0.2, 123_457)):
        assert 1 - float(alloc.grpo_fidelity(p, G)[0]) == pytest.approx(float(_window_infidelity(p, G)), rel=1e-7)


def test_group_size_for_fidelity_stated_values():
    """Issue 16: p = 0.5 at fidelity 0.999999 needs G = 500001 (not 500113), and p = 1e-5 at 0.9986
    is reached by about 9 million, between 2^23 and the cap that the doubling used to skip."""
    for p, f, G_min, G_max in ((0.5, 0.999999, 500_001, 500_001), (1e-5, 0.9986, 8_000_000, 10_000_000)):
        G = alloc.group_size_for_fidelity(p, f)
        assert G_min <= G <= G_max
        eps = Decimal(1) - Decimal(f)
        assert _window_infidelity(p, G) <= eps < _window_infidelity(p, G - 1), (p, f, G)
    # the cap is inclusive: a G exactly at G_max is found, one above it is refused
    G = alloc.group_size_for_fidelity(0.5, 0.99)
    assert alloc.group_size_for_fidelity(0.5, 0.99, G_max=G) == G
    with pytest.raises(ConfigError, match=f"up to {G - 1}"):
        alloc.group_size_for_fidelity(0.5, 0.99, G_max=G - 1)


def _exact_min_tries(p: float, delta: float) -> int:
    """Smallest n >= 2 with p^n + q^n <= delta, in 80-digit decimals, walking up from the bound
    ceil(log delta / log max(p, q)) (docs/estimators.md §5)."""
    with localcontext() as ctx:
        ctx.prec = 80
        P = Decimal(p)
        Q = 1 - P
        D = Decimal(delta)
        n = max(2, int((D.ln() / max(P, Q).ln()).to_integral_value(rounding=ROUND_CEILING)))
        while P**n + Q**n > D:
            n += 1
        return n


def test_min_tries_near_the_edges_is_exact_and_small():
    assert int(alloc.min_tries(1e-8, 0.05)[0]) == 299_573_226
    ps = [1e-8, 1e-10, 1e-17, 1e-15, 1 - 1e-9, 0.3, 0.999, 2**-30]
    got = alloc.min_tries(ps, 0.05)
    assert got.dtype == np.int64
    for p, n in zip(ps, got, strict=True):
        assert int(n) == _exact_min_tries(p, 0.05), p
    # O(1) memory: the old search built an array over the whole range (51.6 GiB at p = 1e-10)
    tracemalloc.start()
    alloc.min_tries(1e-10, 0.05)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 1 << 20
    for p in (1e-300, 5e-324):
        with pytest.raises(ConfigError, match="more than"):
            alloc.min_tries(p, 0.05)  # beyond int64


def test_errors_print_plain_numbers():
    with pytest.raises(ConfigError) as err:
        alloc.min_tries(np.float64(0.0), 0.05)
    assert "p=0.0 " in str(err.value) and "np." not in str(err.value)
    with pytest.raises(ConfigError) as err:
        alloc.group_size_for_fidelity(np.float64(1.0), np.float64(0.9))
    assert "p=1.0 " in str(err.value) and "np." not in str(err.value)
    with pytest.raises(ConfigError) as err:
        alloc.AllocationConfig(budget=np.int64(-1))
    assert "budget=-1 " in str(err.value)
    with pytest.raises(ConfigError) as err:
        alloc.AllocationConfig(budget=10, n_min=np.int64(4), n_max=np.int64(3))
    assert "n_max=3 " in str(err.value) and "np." not in str(err.value)


def test_estimator_only_for_the_signal_objective():
    for objective in ("knapsack", "variance"):
        with pytest.raises(ConfigError, match="estimator"):
            alloc.AllocationConfig(budget=10, objective=objective, estimator="rloo")
        alloc.AllocationConfig(budget=10, objective=objective)  # the default estimator is not a choice


def test_prompts_without_samples_one_rule_everywhere():
    """One rule for n = 0, the profile run's and the CLI's: the posterior includes such a prompt;
    point estimates refuse, naming it by its prompt id."""
    ids = ["b", "a", "c"]
    n, c = np.array([4, 0, 8]), np.array([1, 0, 3])
    point = alloc.AllocationConfig(budget=12)
    with pytest.raises(ConfigError, match="'a'"):
        alloc.allocate_prompts("r", ids, n, c, point)
    with pytest.raises(ConfigError, match="'a'"):
        alloc.allocate(n, c, point, prompt_ids=ids)
    table, res = alloc.allocate_prompts("r", ids, n, c, alloc.AllocationConfig(budget=12, posterior=True))
    assert table.column("prompt_id").to_pylist() == ["a", "b", "c"] and res.n.sum() == 12


# --- issue 23: posterior expectations, the Lagrangian relaxation, mirrored ties -------------------


def test_posterior_dapo_resample_tables_are_posterior_expectations():
    """docs/estimators.md §5: under a posterior, DAPO-resample's v(n) and expected rollouts c(n) are
    averages over Beta(a, b) (exact sums of Beta moments), not their values at the posterior mean."""
    grid = np.array([1, 3, 16])
    a, b = np.array([0.5, 4.5, 1.5]), np.array([4.5, 0.5, 1.5])
    for spec in (DAPO_T4, "dapo:mode=resample,T=2"):
        e = est.get(spec)
        value = alloc.value_table("signal", grid, alpha=a, beta=b, estimator=spec)
        cost = alloc.cost_table("signal", grid, alpha=a, beta=b, estimator=spec)
        for i in range(len(a)):
            for j, G in enumerate(grid):

                def avg(f, i=i):
                    return integrate.quad(lambda x: float(f(x)) * beta_dist.pdf(x, a[i], b[i]), 0, 1, limit=200)[0]

                mass, spend = e.mass, e.expected_rollouts
                assert value[i, j] == pytest.approx(avg(lambda x, G=G, f=mass: f(x, int(G))), rel=1e-7, abs=1e-14)
                assert cost[i, j] == pytest.approx(avg(lambda x, G=G, f=spend: f(x, int(G))), rel=1e-9)
        # the posterior mean is not the same thing: at Beta(0.5, 4.5) and n = 16 it undercharges
        mean = a / (a + b)
        assert cost[0, -1] > float(e.expected_rollouts(mean[0], 16)) * 1.2


def test_posterior_dapo_resample_against_simulation():
    """Monte Carlo of the resampling itself: p from the posterior, a group of G drawn again while it
    is silent, up to T tries; the rollouts spent and the last group's sigma_k average to c(G), v(G)."""
    rng = np.random.default_rng(23)
    M, T = 400_000, 4
    for a, b, G in ((0.5, 4.5, 8), (4.5, 0.5, 3), (2.5, 2.5, 5)):
        p = rng.beta(a, b, M)
        spent, sigma = np.zeros(M), np.zeros(M)
        active = np.ones(M, bool)
        for _ in range(T):
            k = rng.binomial(G, p)
            spent += G * active
            sigma = np.where(active, np.sqrt(k * (G - k)) / G, sigma)
            active &= (k == 0) | (k == G)
        grid = np.array([G])
        c = alloc.cost_table("signal", grid, alpha=np.array([a]), beta=np.array([b]), estimator=DAPO_T4)[0, 0]
        v = alloc.value_table("signal", grid, alpha=np.array([a]), beta=np.array([b]), estimator=DAPO_T4)[0, 0]
        assert abs(spent.mean() - c) < 4 * spent.std() / math.sqrt(M), (a, b, G)
        assert abs(sigma.mean() - v) < 4 * sigma.std() / math.sqrt(M), (a, b, G)


def test_posterior_dapo_resample_allocation_keeps_its_budget():
    """It reported 79.72 expected rollouts for an allocation whose posterior expectation is 91.4."""
    n = np.array([4] * 6 + [8] * 2)
    c = np.array([0, 0, 0, 4, 4, 4, 4, 2])
    cfg = alloc.AllocationConfig(budget=80, estimator=DAPO_T4, n_min=2, n_max=24, posterior=True)
    res = alloc.allocate(n, c, cfg)
    truth = [
        _posterior_expected_rollouts(DAPO_T4, [0.5 + ci], [0.5 + ni - ci], [g])[0, 0]
        for ni, ci, g in zip(n, c, res.n, strict=True)
    ]
    np.testing.assert_allclose(res.cost, truth, rtol=1e-9)
    assert res.expected_rollouts == pytest.approx(sum(truth), rel=1e-9)
    assert sum(truth) <= 80 + 1e-9


def _dual(value, cost, key, budget, lam):
    """``lam B + sum_i max_n (v_i(n) - lam c_i(n))``: an upper bound on every feasible allocation
    (summed about each row's best n, so that a price of 1e300 does not swamp the values)."""
    v, c = value[key], np.asarray(cost, float)[key]
    j = np.argmax(v - lam * c, axis=1)
    vj, cj = v[np.arange(len(key)), j], c[np.arange(len(key)), j]
    best = np.max(v - vj[:, None] - lam * (c - cj[:, None]), axis=1)
    return lam * (budget - cj.sum()) + vj.sum() + best.sum()


def test_lagrangian_bound_brackets_the_exact_optimum():
    # DAPO with resampling (expected rollouts, a bound on the spend) against the exact programme
    for posterior in (False, True):
        for seed in range(3):
            n, c = _instance(seed, N=10, n_obs=8)
            for budget in (70, 95, 120):
                cfg = alloc.AllocationConfig(
                    budget=budget, estimator=DAPO_T4, n_min=2, n_max=12, posterior=posterior, method="dp"
                )
                exact = alloc.allocate(n, c, cfg)
                relax = alloc.allocate(n, c, dataclasses.replace(cfg, method="lagrangian"))
                assert exact.method == "dp" and relax.method == "lagrangian"
                assert relax.expected_rollouts <= budget * (1 + 1e-12)
                assert relax.n.min() >= 2 and relax.n.max() <= 12
                assert relax.total <= exact.total + 1e-12
                assert exact.total <= relax.total + relax.gap + 1e-12, (posterior, seed, budget)
                assert relax.total >= 0.97 * exact.total
    # random non-concave tables charged whole rollouts: the budget is spent exactly
    rng = np.random.default_rng(8)
    grid = np.arange(2, 8)
    for _ in range(30):
        t = rng.normal(size=(3, 6)).cumsum(axis=1)
        k = rng.integers(0, 3, 5)
        for budget in (10, 17, 26, 35):
            r = alloc.allocate_lagrangian(t, k, budget, 2, 7)
            best = t[k, alloc.allocate_dp(t, k, budget, 2, 7) - 2].sum()
            assert r.n.sum() == budget and r.n.min() >= 2 and r.n.max() <= 7
            assert r.total == pytest.approx(t[k, r.n - 2].sum(), rel=1e-12)
            assert r.total <= best + 1e-9 <= r.bound + 2e-9
            # the bound is the dual at its multiplier, and no price gives a lower one
            at = _dual(t, np.tile(grid, (3, 1)), k, budget, r.multiplier)
            assert r.bound == pytest.approx(at, rel=1e-9, abs=1e-9)
            for lam in np.linspace(-3, 3, 13):
                assert _dual(t, np.tile(grid, (3, 1)).astype(float), k, budget, lam) >= r.bound - 1e-9


def test_auto_allocates_large_dapo_resample_with_a_certified_gap():
    """3,000 prompts at n_max = 512 were refused (AllocationTooLargeError); now the relaxation
    answers, within a certified gap, and the exact programme still answers where it fits."""
    n, c = _instance(3, N=3000, n_obs=16)
    budget = 16 * 3000
    cfg = alloc.AllocationConfig(budget=budget, estimator=DAPO_T4, n_min=2, n_max=512)
    assert cfg.method == "auto"
    res = alloc.allocate(n, c, cfg)
    assert res.method == "lagrangian"
    assert budget * 0.999 <= res.expected_rollouts <= budget * (1 + 1e-12)
    assert 0 <= res.relative_gap < 1e-4
    assert res.total > res.uniform_total
    # the certificate: no multiplier gives a dual below total + gap (the gap is the dual's minimum)
    grid = np.arange(2, 513)
    n_u, c_u, key = alloc.stats.unique_pairs(n, c)
    value = alloc.value_table("signal", grid, p=c_u / n_u, estimator=DAPO_T4)
    cost = _expected_rollouts_fast(DAPO_T4, c_u / n_u, grid)
    for lam in np.geomspace(1e-4, 1.0, 25):
        assert _dual(value, cost, key, budget, lam) >= (res.total + res.gap) * (1 - 1e-12)
    # small instances keep the exact method
    small = alloc.allocate(n[:4], c[:4], dataclasses.replace(cfg, budget=64, n_max=24))
    assert small.method == "dp" and small.gap == 0


def _expected_rollouts_fast(spec, p, grid):
    e = est.get(spec)
    return np.stack([e.expected_rollouts(p, int(G)) for G in grid], axis=1)


# Mirrored pairs where rounding noise used to give the second prompt the tied rollout:
# (posterior, n, c, budget) at n_min = 2, n_max = 256.
MIRROR_CASES = [
    (False, 4, 1, 403),
    (False, 16, 5, 89),
    (False, 16, 7, 333),
    (True, 4, 1, 327),
    (True, 8, 2, 283),
    (True, 16, 5, 141),
]


@pytest.mark.parametrize("posterior,n_obs,c,budget", MIRROR_CASES)
def test_mirrored_prompts_follow_the_tie_rule(posterior, n_obs, c, budget):
    """(n, c) and (n, n - c) have the same value under a p <-> q symmetric estimator; the stated
    rule (fewest rollouts first, then prompt order) gives the first one the odd rollout."""
    for method in ("fast", "greedy"):
        cfg = alloc.AllocationConfig(budget=budget, n_min=2, n_max=256, posterior=posterior, method=method)
        res = alloc.allocate([n_obs, n_obs], [c, n_obs - c], cfg)
        np.testing.assert_array_equal(res.n, [(budget + 1) // 2, budget // 2])


def test_every_mirrored_pair_follows_the_tie_rule():
    """Every mirrored pair with n <= 16 (GRPO with point estimates and the posterior, RLOO), at
    budgets across n_min = 2 .. n_max = 256: the two prompts get one bit-identical row of the table
    ``allocate`` hands out, and both methods give the first prompt each tied rollout first."""
    pairs = [(n, c) for n in range(1, 17) for c in range(0, (n + 1) // 2) if 2 * c != n]
    n_obs = np.repeat([n for n, _ in pairs], 2)
    c_obs = np.array([x for n, c in pairs for x in (c, n - c)])
    budgets = range(5, 513, 24)
    checked = 0
    for spec, posterior in (("grpo", False), ("grpo", True), ("rloo", False)):
        cfg = alloc.AllocationConfig(budget=len(n_obs) * 2, estimator=spec, n_min=2, n_max=256, posterior=posterior)
        key, table, _ = alloc.allocation_tables(n_obs, c_obs, cfg)
        for i in range(0, len(key), 2):
            rows = table[key[i : i + 2]]
            assert np.array_equal(rows[0], rows[1]), (spec, posterior, pairs[i // 2])
            for budget in budgets:
                for fn in (alloc.allocate_fast, alloc.allocate_greedy):
                    got = fn(rows, np.arange(2), budget, 2, 256, rtol=alloc.TIE_RTOL)
                    assert list(got) == [(budget + 1) // 2, budget // 2], (spec, posterior, pairs[i // 2], budget)
                    checked += 1
    assert checked == 3 * len(pairs) * len(budgets) * 2 > 3000
    # an estimator that is not symmetric keeps one row per pair (its values differ)
    cfg = alloc.AllocationConfig(budget=8, estimator="maxrl", n_min=2, n_max=8)
    key, _, _ = alloc.allocation_tables(np.array([8, 8]), np.array([1, 7]), cfg)
    assert key[0] != key[1]


# --- priced in tokens ------------------------------------------------------------------------------

TOKEN_CASES = [
    ("signal", "grpo", False),
    ("signal", "grpo", True),
    ("knapsack", "grpo", True),
    ("variance", "grpo", False),
    ("signal", DAPO_T4, False),
]


def _priced(objective, estimator, posterior, n, c, price, n_min, n_max):
    """The value table and token cost table by their definitions, one row per prompt."""
    grid = np.arange(n_min, n_max + 1)
    where = {"alpha": 0.5 + c, "beta": 0.5 + n - c} if posterior else {"p": c / n}
    value = alloc.value_table(objective, grid, estimator=estimator, **where)
    if estimator == DAPO_T4:
        rollouts = _expected_rollouts(DAPO_T4, c / n, grid)
    else:
        rollouts = np.broadcast_to(grid.astype(float), value.shape)
    return value, price[:, None] * rollouts


@pytest.mark.parametrize("objective,estimator,posterior", TOKEN_CASES)
def test_token_price_against_brute_force(objective, estimator, posterior):
    """Every allocation of 4 prompts enumerated: the exact programme finds the best one within the
    token budget; greedy by value per token and the relaxation stay within it and under their
    certified bound, which the optimum never exceeds."""
    n_min, n_max, N = 1, 6, 4
    sign = -1 if objective == "variance" else 1
    for seed in range(2):
        n, c = _instance(seed, N=N, n_obs=8)
        price = np.random.default_rng(seed).uniform(150, 900, N).round(1)
        value, cost = _priced(objective, estimator, posterior, n, c, price, n_min, n_max)
        lo, hi = cost[:, 0].sum(), cost[:, -1].sum()
        for budget in np.linspace(lo, hi, 5)[1:-1].round().astype(int):
            best_n, best = _brute_force(value, cost, np.arange(N), budget, n_min, n_max, exact_budget=False)
            base = alloc.AllocationConfig(
                budget=int(budget), objective=objective, estimator=estimator, n_min=n_min, n_max=n_max,
                posterior=posterior, price_unit="tokens",
            )  # fmt: skip
            for method in ("dp", "auto", "greedy", "lagrangian", "fast"):
                res = alloc.allocate(n, c, dataclasses.replace(base, method=method), price=price)
                got = value[np.arange(N), res.n - n_min].sum()
                assert cost[np.arange(N), res.n - n_min].sum() <= budget * (1 + 1e-12), (method, budget)
                assert res.tokens == pytest.approx(cost[np.arange(N), res.n - n_min].sum(), rel=1e-12)
                assert sign * res.total == pytest.approx(got, rel=1e-12)
                assert got <= best + 1e-12 * abs(best)
                # the certificate: the optimum is at most the gap above what was found
                assert best <= got + res.gap + 1e-9 * abs(best), (method, budget, res.method)
                if res.method == "dp":
                    assert got == pytest.approx(best, rel=1e-9), (method, budget)
                    assert res.gap == 0
            # greedy by value per token is its own method only on a concave value charged n rollouts
            greedy = alloc.allocate(n, c, dataclasses.replace(base, method="greedy"), price=price)
            concave = estimator != DAPO_T4 and alloc.is_concave(value, alloc.TIE_RTOL)
            assert greedy.method == ("greedy" if concave else "dp")


@pytest.mark.parametrize("objective,estimator,posterior", CASES[:3] + CASES[5:] + [("signal", DAPO_T4, False)])
def test_equal_prices_give_the_rollout_allocation(objective, estimator, posterior):
    """With one price for every prompt, a token budget is floor(B / price) rollouts: the allocation
    is the one priced in rollouts, prompt for prompt, by every method."""
    dapo = estimator == DAPO_T4  # expected rollouts: the same programme, its costs times the price
    for seed in range(2):
        n, c = _instance(seed, N=12 if dapo else 30)
        N = len(n)
        for per_prompt, t in ((9, 512.5),) if dapo else ((4, 300.0), (9, 512.5)):
            rollouts = alloc.AllocationConfig(
                budget=per_prompt * N, objective=objective, estimator=estimator, n_max=40, posterior=posterior
            )
            want = alloc.allocate(n, c, rollouts)
            price = np.full(N, t)
            for method in ("auto",) if dapo else ("auto", "greedy", "fast"):
                tokens = dataclasses.replace(
                    rollouts, budget=alloc.token_budget(price, per_prompt), price_unit="tokens", method=method
                )
                got = alloc.allocate(n, c, tokens, price=price)
                assert got.tokens == pytest.approx(t * got.expected_rollouts, rel=1e-12)
                if dapo:
                    assert got.total == pytest.approx(want.total, rel=1e-9) and got.method == want.method == "dp"
                    continue
                np.testing.assert_array_equal(got.n, want.n)
                np.testing.assert_array_equal(got.uniform_n, want.uniform_n)
                assert got.total == want.total and got.tokens == pytest.approx(t * want.expected_rollouts)
    # and greedy by value per token, called directly, is the unpriced heap when the prices are equal
    n, c = _instance(5, N=40)
    key, table, _ = alloc.allocation_tables(n, c, alloc.AllocationConfig(budget=400, n_max=30))
    for budget in (80, 257, 600):
        want = alloc.allocate_greedy(table, key, budget, 2, 30, alloc.TIE_RTOL)
        price = np.full(table.shape[0], 333.0)
        got = alloc.allocate_greedy(table, key, budget * 333.0, 2, 30, alloc.TIE_RTOL, price=price)
        np.testing.assert_array_equal(got, want)


def test_token_price_moves_rollouts_to_cheap_prompts_and_spends_the_budget():
    """Two prompts with the same counts, one three times as long: at an equal token budget the short
    one gets more rollouts, and the relaxation on 2,000 prompts leaves less than one rollout's
    tokens unspent and a gap below 1e-4 of its value."""
    n, c = np.array([8, 8]), np.array([3, 3])
    cfg = alloc.AllocationConfig(budget=8000, n_max=64, posterior=True, price_unit="tokens")
    res = alloc.allocate(n, c, cfg, price=np.array([200.0, 600.0]))
    assert res.n[0] > res.n[1] and res.tokens <= 8000
    n, c = _instance(7, N=2000, n_obs=8)
    price = np.random.default_rng(7).gamma(4, 100, 2000)
    cfg = dataclasses.replace(alloc.default_config(2000), budget=alloc.token_budget(price), price_unit="tokens")
    res = alloc.allocate(n, c, cfg, price=price)
    assert res.method == "lagrangian"
    assert cfg.budget - price.max() < res.tokens <= cfg.budget
    assert res.relative_gap < 1e-4
    # the uniform allocation of the default token budget is G rollouts each: the same expected tokens
    assert (res.uniform_n == alloc.DEFAULT_BUDGET_PER_PROMPT).all()
    assert res.uniform_tokens == pytest.approx(cfg.budget, abs=1)
    rollouts = alloc.allocate(n, c, alloc.default_config(2000), price=price)
    assert rollouts.uniform_tokens == pytest.approx(res.uniform_tokens, abs=1)
    assert res.total / res.tokens > rollouts.total / rollouts.tokens


def test_token_priced_resampling_spends_its_budget_in_simulation():
    """Monte Carlo of what a token-priced DAPO-resampling allocation spends: each group drawn again
    while silent (up to T tries), each answer's length Gamma around its prompt's price; the tokens
    spent average to the budget the allocation reports (``Allocation.tokens``)."""
    rng = np.random.default_rng(3)
    n, c = _instance(11, N=5, n_obs=8)
    price = np.array([250.0, 400.0, 610.0, 333.0, 800.0])
    cfg = alloc.AllocationConfig(budget=20_000, estimator=DAPO_T4, n_max=12, price_unit="tokens")
    res = alloc.allocate(n, c, cfg, price=price)
    M, p = 100_000, c / n
    spent = np.zeros(M)
    for i in range(5):
        active = np.ones(M, bool)
        for _ in range(4):
            k = rng.binomial(res.n[i], p[i], M)
            spent += active * rng.gamma(4.0 * res.n[i], price[i] / 4.0, M)
            active &= (k == 0) | (k == res.n[i])
    assert abs(spent.mean() - res.tokens) < 4 * spent.std() / math.sqrt(M)
    assert res.tokens <= 20_000 * (1 + 1e-12)


def test_token_price_errors_and_keys():
    n, c = np.array([8, 8, 8]), np.array([1, 4, 7])
    cfg = alloc.AllocationConfig(budget=5000, n_max=16, price_unit="tokens")
    with pytest.raises(ConfigError, match="price_unit='tokens' needs each prompt's price"):
        alloc.allocate(n, c, cfg)
    with pytest.raises(ConfigError, match=r"prompt 'b': price 0\.0 is not a positive number of tokens"):
        alloc.allocate(n, c, cfg, price=np.array([300.0, 0.0, 200.0]), prompt_ids=["a", "b", "c"])
    with pytest.raises(ConfigError, match=r"need at least 3000 expected tokens"):
        alloc.allocate(n, c, dataclasses.replace(cfg, budget=2000), price=np.full(3, 500.0))
    with pytest.raises(ConfigError, match="price_unit='coins'"):
        alloc.AllocationConfig(budget=10, price_unit="coins")
    # the unit is part of an allocation's key, and a rollout-priced key is what it was before it
    rollouts = alloc.AllocationConfig(budget=5000, n_max=16)
    assert alloc.allocation_key(rollouts) == "signal-grpo-b5000-point"
    assert alloc.allocation_key(cfg) == "signal-grpo-b5000-point-tokens"
    table, _ = alloc.allocate_prompts("r", ["c", "a", "b"], n, c, cfg, price=np.array([100.0, 300.0, 200.0]))
    assert set(table.column("price_unit").to_pylist()) == {"tokens"}
    assert table.column("prompt_id").to_pylist() == ["a", "b", "c"]
    # the prices follow their prompts into id order: "c" (1 of 8, 100 tokens) is the cheapest
    res = alloc.allocate(np.array([8, 8, 8]), np.array([4, 7, 1]), cfg, price=np.array([300.0, 200.0, 100.0]))
    np.testing.assert_array_equal(table.column("n_rollouts").to_numpy(), res.n)
