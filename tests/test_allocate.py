"""Rollout allocation: greedy == dynamic programming, fast == greedy, calculators exact."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate
from scipy.stats import beta as beta_dist

from pipeline import allocate as alloc
from pipeline import estimators as est


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
    ("signal", "reco", False),
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
            best = alloc.allocate_dp(table, np.arange(len(n)), budget, n_min, n_max)
            got = table[np.arange(len(n)), res.n - n_min].sum()
            assert got == pytest.approx(best, rel=1e-12, abs=1e-15), (seed, budget)


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
        assert fast.total == pytest.approx(greedy.total, rel=1e-9)
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
            assert fast.total == pytest.approx(greedy.total, rel=1e-9, abs=1e-12)
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
