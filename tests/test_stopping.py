"""The band target's priced stopping rule (docs/adaptive.md §4): exact against every stopping
policy, by Monte Carlo against the truth, and the rollouts it saves on the benchmark's truths.

- ``stop_grid`` is the best of all ``2^K`` deterministic stopping policies on a small triangle
  (brute force, the risk of each policy summed over the beta-binomial predictive);
- with one sample per round under a known prior, the misclassification against the true pass
  rates and the rollouts spent are the ones the stop region implies (an evaluator of its own);
- at the default settings the adaptive rounds save at least 40% of the rollouts of the fixed n with
  the same misclassification on the U-shaped, uniform and mixture truths, where the rule of
  stopping as soon as decided saved 16 to 26% on the mixture;
- a run registered before the price existed is read back with ``cost=0``.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.stats as sst
from scipy.special import betaln

from pipeline import adaptive, frontier
from pipeline import prior as priors
from pipeline.errors import ConfigError


def _mixture_prior() -> adaptive.Prior:
    """30% at 0, 25% at 1, the rest Beta(2, 2), held on the grid."""
    pts = priors.grid_points()
    dens = pts * (1 - pts)
    w = 0.45 * dens / dens.sum()
    w[0], w[-1] = 0.30, 0.25
    return adaptive.Prior(0.5, 0.5, method="grid", points=tuple(pts), weights=tuple(w / w.sum()))


def _predictive_right(prior: adaptive.Prior, n: int, c: int) -> float:
    """P(the next sample is right | c of n), by the posterior over the grid or the Beta's mean."""
    if not prior.is_grid:
        return (prior.a + c) / (prior.a + prior.b + n)
    p, w = prior.grid()
    post = w * p**c * (1 - p) ** (n - c)
    return float(post @ p / post.sum())


def _start_pmf(prior: adaptive.Prior, n: int) -> np.ndarray:
    c = np.arange(n + 1)
    if not prior.is_grid:
        return sst.betabinom.pmf(c, n, prior.a, prior.b)
    p, w = prior.grid()
    return np.array([w @ sst.binom.pmf(k, n, p) for k in c])


def _risk(policy: dict, err: dict, right: dict, cost: float, n_min: int, n_max: int, pmf: np.ndarray):
    """E[error at the stop + cost x samples after n_min] of a stopping policy (True: stop)."""
    value = {(n_max, c): err[n_max, c] for c in range(n_max + 1)}
    for n in range(n_max - 1, n_min - 1, -1):
        for c in range(n + 1):
            if policy[n, c]:
                value[n, c] = err[n, c]
            else:
                m = right[n, c]
                value[n, c] = cost + m * value[n + 1, c + 1] + (1 - m) * value[n + 1, c]
    return float(sum(pmf[c] * value[n_min, c] for c in range(n_min + 1)))


@pytest.mark.parametrize("prior", [adaptive.Prior(0.3, 0.4), adaptive.Prior(2.0, 5.0), _mixture_prior()])
@pytest.mark.parametrize("cost", [0.002, 0.01, 0.04])
def test_the_stop_region_is_the_best_of_every_stopping_policy(prior, cost):
    n_min, n_max = 2, 5
    target = adaptive.Target(cost=cost)
    states = [(n, c) for n in range(n_min, n_max) for c in range(n + 1)]  # 12 states: 4,096 policies
    every = [(n, c) for n in range(n_max + 1) for c in range(n + 1)]
    probs = adaptive.decide(np.array([s[0] for s in every]), np.array([s[1] for s in every]), prior, target).prob
    err = {s: 1.0 - float(pr) for s, pr in zip(every, probs, strict=True)}
    right = {s: _predictive_right(prior, *s) for s in every}
    pmf = _start_pmf(prior, n_min)
    risks = []
    for choice in itertools.product((False, True), repeat=len(states)):
        risks.append(_risk(dict(zip(states, choice, strict=True)), err, right, cost, n_min, n_max, pmf))
    grid = adaptive.stop_grid(prior, target, n_max)
    ours = _risk({s: bool(grid[s]) for s in states}, err, right, cost, n_min, n_max, pmf)
    assert ours == pytest.approx(min(risks), abs=1e-13)
    assert grid[n_max, : n_max + 1].all() and not grid[np.triu_indices(n_max + 1, 1)].any()
    # the price matters here: some policy that stops as soon as decided does worse
    decided = adaptive.decided_grid(prior, target, n_max)
    assert _risk({s: bool(decided[s]) for s in states}, err, right, cost, n_min, n_max, pmf) >= ours


def test_cost_zero_is_the_stop_when_decided_rule():
    prior = adaptive.Prior(0.3, 0.4)
    t = adaptive.Target(cost=0.0)
    grid = adaptive.stop_grid(prior, t, 40)
    decided = adaptive.decided_grid(prior, t, 40)
    np.testing.assert_array_equal(grid[:40], decided[:40])
    assert grid[40, :41].all()


@pytest.mark.parametrize("prior", [adaptive.Prior(0.5, 0.5), _mixture_prior()])
def test_one_sample_rounds_misclassify_and_spend_what_the_stop_region_implies(prior):
    """20,000 prompts with pass rates drawn from the prior, one sample per round (``step:k=1``,
    the prior held fixed): the share whose reported band is not the band of their true rate, and
    the rollouts, match the stop region's expectations (an evaluator independent of the code's
    backward induction) within four standard errors."""
    acfg = adaptive.AdaptiveConfig.from_specs("band", 4, 64, "step:k=1")
    t = acfg.target
    rng = np.random.default_rng(5)
    N = 20_000
    if prior.is_grid:
        pts, w = prior.grid()
        p_true = rng.choice(pts, size=N, p=w)
    else:
        p_true = rng.beta(prior.a, prior.b, N)
    outcomes = rng.random((N, acfg.n_max)) < p_true[:, None]
    csum = np.concatenate([np.zeros((N, 1), np.int64), np.cumsum(outcomes, axis=1)], axis=1)
    n = np.full(N, acfg.n_min)
    while True:
        extra = adaptive.next_round(n, csum[np.arange(N), n], prior, acfg)
        if not extra.any():
            break
        n = n + extra
    c = csum[np.arange(N), n]
    truth = np.where(p_true <= t.lo, 0, np.where(p_true >= t.hi, 2, 1))
    wrong = adaptive.decide(n, c, prior, t).band != truth
    # expected error at the stop and samples: the one-sample rule's forward pass (itself checked
    # against every outcome path below)
    exp_n, exp_err = frontier.one_sample_rule(prior, t, acfg.n_min, acfg.n_max)
    se = np.sqrt(exp_err * (1 - exp_err) / N)
    assert abs(wrong.mean() - exp_err) < 4 * se
    assert abs(n.mean() - exp_n) < 4 * n.std() / np.sqrt(N)
    assert 0 < exp_err < 0.1


def _truth(name: str, N: int, rng: np.random.Generator) -> np.ndarray:
    if name == "u-shaped":
        return rng.beta(0.3, 0.4, N)
    if name == "uniform":
        return rng.uniform(0, 1, N)
    u = rng.uniform(size=N)
    return np.where(u < 0.30, 0.0, np.where(u < 0.55, 1.0, rng.beta(2.0, 2.0, N)))


def _saving(name: str, target: str, seed: int, N: int = 5000) -> float:
    """What ``bench/adaptive.py`` reports: 1 - adaptive rollouts / the fixed n whose misclassification
    (the most probable band under the run's prior) equals the adaptive run's, log-n interpolated."""
    rng = np.random.default_rng(seed)
    p = _truth(name, N, rng)
    acfg = adaptive.AdaptiveConfig.from_specs(target)
    outcomes = rng.random((N, acfg.n_max)) < p[:, None]
    n, c, prior = frontier.simulate(outcomes, acfg)
    t = acfg.target
    truth = np.where(p <= t.lo, 0, np.where(p >= t.hi, 2, 1))
    mis = float((adaptive.decide(n, c, prior, t).band != truth).mean())
    csum = np.cumsum(outcomes, axis=1)
    grid = (4, 8, 16, 32, 64)
    curve = [float((adaptive.decide(np.full(N, k), csum[:, k - 1], prior, t).band != truth).mean()) for k in grid]
    n_star, where = frontier.log_n_crossing(grid, curve, mis)
    assert where == "inside", (name, mis, curve)
    return 1.0 - n.mean() / n_star


@pytest.mark.parametrize("name", ["u-shaped", "uniform", "mixture"])
def test_default_settings_save_40_percent_at_equal_misclassification(name):
    assert _saving(name, "band", seed=3) >= 0.40


def test_stopping_as_soon_as_decided_saves_far_less_on_the_mixture():
    """Why the price is the default: on the mixture the stop-when-decided rule halts a 0-of-9 prompt
    at P(silent) = 0.95, so it misclassifies as a fixed n of about 11 does, and spends 9 to 12."""
    assert _saving("mixture", "band:cost=0", seed=3) < 0.30


def test_a_run_registered_before_the_price_reads_back_with_cost_zero():
    old = adaptive.Target.registered("band:lo=0.1,hi=0.9,delta=0.05")
    assert old.cost == 0 and old.spec == "band:lo=0.1,hi=0.9,delta=0.05"
    new = adaptive.Target.registered(adaptive.Target().spec)
    assert new == adaptive.Target() and new.cost == adaptive.DEFAULT_COST
    assert adaptive.Target.registered("width:h=0.1,delta=0.05") == adaptive.Target.parse("width")
    with pytest.raises(adaptive.ConfigError, match=r"cost=1.0 is out of range: allowed \[0, 1\)"):
        adaptive.Target.parse("band:cost=1")


@pytest.mark.parametrize("target", ["band", "band:cost=0", "band:delta=0.02,cost=0.004", "width:h=0.05"])
def test_adaptive_settings_survive_the_registry_and_a_stored_profile_config(target):
    """What a run registers, and what a schedule stores, reads back as the same settings."""
    from pipeline.run import ProfileConfig

    acfg = adaptive.AdaptiveConfig.from_specs(target)
    assert adaptive.AdaptiveConfig.from_dict(acfg.to_dict()) == acfg
    cfg = ProfileConfig.build(backend="simulate", adaptive=target)
    assert ProfileConfig.from_dict(cfg.to_dict()).adaptive == cfg.adaptive == acfg


def test_a_prior_with_only_masses_at_0_and_1_stops_every_prompt_in_round_0():
    """Pairs such a prior makes impossible (2 of 4) have no posterior; they must not keep the
    possible ones (0 of 4, 4 of 4: decided with probability 1) from stopping."""
    pts = priors.grid_points()
    w = np.zeros_like(pts)
    w[0], w[-1] = 0.6, 0.4
    prior = adaptive.Prior(0.5, 0.5, method="grid", points=tuple(pts), weights=tuple(w))
    grid = adaptive.stop_grid(prior, adaptive.Target(), 16)
    assert grid[4, 0] and grid[4, 4] and grid[16].all()
    acfg = adaptive.AdaptiveConfig.from_specs("band", 4, 16, prior="grid")
    outcomes = np.repeat(np.array([[False], [True]]), 50, axis=0) & np.ones((100, 16), bool)
    outcomes[:50] = False
    n, c, _ = frontier.simulate(outcomes, acfg)
    assert (n == 4).all() and (c[:50] == 0).all() and (c[50:] == 4).all()


# --- the frontier (frontier.one_sample_rule, frontier.frontier) ---------------------------------------


def _paths_rule(prior: adaptive.Prior, t, n_min: int, n_max: int) -> tuple[float, float]:
    """Expected rollouts and misclassification of the one-sample priced rule by brute force: every one
    of the 2^n_max outcome sequences, weighted by its probability under the prior, walked from n_min
    until the stop region says stop."""
    grid = adaptive.stop_grid(prior, t, n_max)
    if prior.is_grid:
        pts, w = prior.grid()
    cost = err = 0.0
    for seq in itertools.product((0, 1), repeat=n_max):
        k = sum(seq)
        if prior.is_grid:
            weight = float(w @ (pts**k * (1 - pts) ** (n_max - k)))
        else:
            weight = float(np.exp(betaln(prior.a + k, prior.b + n_max - k) - betaln(prior.a, prior.b)))
        n = n_min
        while not grid[n, sum(seq[:n])]:
            n += 1
        c = sum(seq[:n])
        cost += weight * n
        err += weight * (1 - adaptive.decide(np.array([n]), np.array([c]), prior, t).prob[0])
    return cost, err


@pytest.mark.parametrize("prior", [adaptive.Prior(0.7, 1.3), adaptive.Prior(0.3, 0.4), _mixture_prior()])
@pytest.mark.parametrize("price", [0.002, 0.02])
def test_the_one_sample_rule_equals_its_sum_over_every_outcome_path(prior, price):
    t = adaptive.Target(cost=price)
    got = frontier.one_sample_rule(prior, t, 2, 10)
    want = _paths_rule(prior, t, 2, 10)
    assert got == pytest.approx(want, rel=1e-9, abs=1e-12)
    assert 2 <= got[0] <= 10 and 0 <= got[1] < 0.5


def test_the_frontier_buys_accuracy_with_rollouts_and_beats_every_fixed_n():
    """Along the frontier, more rollouts mean less misclassification; at each point no fixed n with
    as many rollouts misclassifies less (the priced rule is Bayes-optimal, a fixed n is one rule)."""
    prior = _mixture_prior()
    t = adaptive.Target()
    cost, err = frontier.frontier(prior, t, 4, 64)
    assert len(cost) == len(frontier.FRONTIER_PRICES) + 1 and cost[0] == 4  # and the cheap end, all at n_min
    assert np.all(np.diff(cost) > 0) and np.all(np.diff(err) < 0)
    curve = [(n, *frontier.fixed_n_expected(n, prior, t)) for n in range(1, 257)]
    for c_, e_ in zip(cost, err, strict=True):
        assert e_ <= frontier.fixed_n_mis_at(curve, c_) + 1e-12
    # the interpolations invert each other at the points, and refuse outside the range
    for i in (0, 4, len(cost) - 1):
        assert frontier.frontier_cost_at(cost, err, err[i])[0] == pytest.approx(cost[i])
        assert frontier.frontier_mis_at(cost, err, cost[i]) == pytest.approx(err[i])
    assert frontier.frontier_cost_at(cost, err, err[-1] / 2) == (None, "below")
    assert frontier.frontier_cost_at(cost, err, 0.9) == (None, "above")
    assert frontier.frontier_mis_at(cost, err, 1.0) is None
    with pytest.raises(ConfigError, match="band"):
        frontier.frontier(prior, adaptive.Target(kind="width"), 4, 64)
