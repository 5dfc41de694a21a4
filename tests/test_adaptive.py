"""Adaptive profiling (docs/adaptive.md §2-§9).

The math, exactly and by Monte Carlo: band probabilities and intervals are scipy's, the stopping
rule never stops a prompt the spec calls undecided, the predictive and the posterior estimates
match brute force and simulation (the prior fits are tests/test_prior.py's). Then the rounds as
shards of the real pipeline (simulate backend): every sample keeps its own seed, a run killed
between rounds resumes to the same tables, Prefect and Ray give the same tables, a fixed-n run is
unchanged; every backend numbers its samples from ``first_idx``; bad input is a ``ConfigError``;
the report shows the rounds.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from pipeline.flows import executors, prefect_flows
from scipy import stats as sst
from typer.testing import CliRunner

from pipeline import adaptive, analyze, finish, frontier, run, schema
from pipeline import estimators as est
from pipeline import prior as priors
from pipeline.cli import app
from pipeline.errors import ConfigError, SamplingError
from pipeline.sample import SamplingParams, derive_seed, make_sampler
from pipeline.store import Store

# Model-free adaptive runs on the bundled set: U-shaped true rates by tier, real grading and storage.
SIM = {"backend": "simulate", "limit": 120, "shard_size": 25, "grade_workers": 1, "report": False}
ADAPTIVE = {**SIM, "adaptive": "band"}


def scipy_band_probs(alpha, beta, lo, hi):
    return (
        sst.beta.cdf(lo, alpha, beta),
        sst.beta.cdf(hi, alpha, beta) - sst.beta.cdf(lo, alpha, beta),
        sst.beta.sf(hi, alpha, beta),
    )


# --- the posterior decisions ---------------------------------------------------------------------


def test_band_probabilities_and_intervals_match_scipy():
    rng = np.random.default_rng(3)
    alpha, beta = rng.uniform(0.05, 80, 2000), rng.uniform(0.05, 80, 2000)
    for lo, hi in ((0.1, 0.9), (0.2, 0.6), (0.01, 0.99)):
        for mine, ref in zip(
            adaptive.band_probabilities(alpha, beta, lo, hi), scipy_band_probs(alpha, beta, lo, hi), strict=True
        ):
            np.testing.assert_allclose(mine, ref, rtol=1e-9, atol=1e-12)
    for level in (0.9, 0.95, 0.99):
        lo_q, hi_q = adaptive.credible_interval(alpha, beta, level)
        np.testing.assert_allclose(lo_q, sst.beta.ppf((1 - level) / 2, alpha, beta), rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(hi_q, sst.beta.ppf(1 - (1 - level) / 2, alpha, beta), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize(
    "target", ["band", "band:lo=0.2,hi=0.6,delta=0.1", "band:delta=0.01", "width", "width:h=0.05,delta=0.1"]
)
@pytest.mark.parametrize("prior", [adaptive.Prior(0.3, 0.4), adaptive.Prior(4.0, 1.0), priors.jeffreys_prior()])
def test_decided_is_the_spec_definition(target, prior):
    """Over every (n, c) up to 64: decided exactly when the spec says so, computed with scipy."""
    t = adaptive.Target.parse(target)
    n = np.repeat(np.arange(1, 65), np.arange(2, 66))
    c = np.concatenate([np.arange(k + 1) for k in range(1, 65)])
    d = adaptive.decide(n, c, prior, t)
    alpha, beta = prior.a + c, prior.b + n - c
    if t.kind == "band":
        probs = np.stack(scipy_band_probs(alpha, beta, t.lo, t.hi))
        want = probs.max(axis=0) >= 1 - t.delta
        np.testing.assert_array_equal(d.band, probs.argmax(axis=0))
    else:
        width = sst.beta.ppf(1 - t.delta / 2, alpha, beta) - sst.beta.ppf(t.delta / 2, alpha, beta)
        want = width <= 2 * t.h
    np.testing.assert_array_equal(d.decided, want)
    assert want.any() and not want.all()


@pytest.mark.parametrize("rule", ["step:k=4", "step:k=1", "greedy", "greedy:k=2,budget=3", "double", "plan"])
@pytest.mark.parametrize("target", ["band:cost=0", "width", "band"])
def test_the_stopping_rule_never_stops_an_undecided_prompt(rule, target):
    """Rounds of the pure rule on 3,000 prompts: a prompt that gets no more samples has stopped
    (``stop_grid``) or has n_max; each round spends at most its budget; the step rule gives every
    open prompt its step. With ``cost=0`` and ``width`` a prompt stopped early is decided by the
    spec's definition (scipy); with the default price one stopped early is one where one more
    sample is not worth its price even if the sample after it decided everything (scipy's band
    probabilities and beta-binomial predictive: a bound the optimal rule's value must meet)."""
    acfg = adaptive.AdaptiveConfig.from_specs(target, 4, 40, rule)
    rng = np.random.default_rng(11)
    N = 3000
    outcomes = rng.random((N, acfg.n_max)) < rng.beta(0.4, 0.5, N)[:, None]
    n = np.full(N, acfg.n_min)
    c = outcomes[:, : acfg.n_min].sum(axis=1)
    prior = priors.fit_prior(n, c)
    for _ in range(200):
        extra = adaptive.next_round(n, c, prior, acfg)
        open_ = ~adaptive.stopped(n, c, prior, acfg) & (n < acfg.n_max)
        assert not extra[~open_].any(), "a stopped prompt got more samples"
        if acfg.rule.kind == "step":
            np.testing.assert_array_equal(extra[open_], np.minimum(acfg.rule.k, acfg.n_max - n[open_]))
        elif acfg.rule.kind == "double":
            got = extra > 0
            assert (n[got] + extra[got] >= np.minimum(2 * n[got], acfg.n_max)).all()
        elif acfg.rule.kind == "plan":
            assert (extra[open_] > 0).all(), "the plan gives every open prompt a jump"
        elif open_.any():
            assert 0 < extra.sum() <= max(acfg.rule.k, np.ceil(acfg.rule.budget * open_.sum()))
        if not extra.any():
            break
        c = c + np.array([outcomes[i, n[i] : n[i] + extra[i]].sum() for i in range(N)])
        n = n + extra
    else:
        pytest.fail("the rounds did not end")
    assert not open_.any()
    early = n < acfg.n_max
    alpha, beta = prior.a + c[early], prior.b + (n - c)[early]
    t = acfg.target
    if t.kind == "band" and t.cost:
        err = 1 - np.stack(scipy_band_probs(alpha, beta, t.lo, t.hi)).max(axis=0)
        m = alpha / (alpha + beta)
        err_up = 1 - np.stack(scipy_band_probs(alpha + 1, beta, t.lo, t.hi)).max(axis=0)
        err_down = 1 - np.stack(scipy_band_probs(alpha, beta + 1, t.lo, t.hi)).max(axis=0)
        one_more = err <= t.cost + m * err_up + (1 - m) * err_down + 1e-12
        if acfg.rule.kind == "plan":
            # The plan also stops where one sample and a round (its price, in rollouts) cost more than
            # the wrong bands they can remove: stopping then is worth at most one sample, the round,
            # and stopping after it (scipy's band probabilities and predictive).
            dear = err <= t.cost * (1 + acfg.rule.cost) + m * err_up + (1 - m) * err_down + 1e-12
            assert dear.all()
        else:
            assert one_more.all()
        assert early.any() and (err[n[early] > acfg.n_min] > t.delta).any(), "the price changes no stop"
    elif t.kind == "band":
        assert (np.stack(scipy_band_probs(alpha, beta, t.lo, t.hi)).max(axis=0) >= 1 - t.delta).all()
    else:
        t = acfg.target
        assert (sst.beta.ppf(1 - t.delta / 2, alpha, beta) - sst.beta.ppf(t.delta / 2, alpha, beta) <= 2 * t.h).all()
    assert (n >= acfg.n_min).all() and (n <= acfg.n_max).all()


def test_predictive_stopped_is_the_beta_binomial_sum():
    prior, t = adaptive.Prior(0.3, 0.4), adaptive.Target()
    grid = adaptive.decided_grid(prior, t, 64)
    n, c = np.array([4, 4, 9, 20]), np.array([0, 2, 1, 18])
    ks = np.array([1, 4, 7, 30])
    got = adaptive.predictive_stopped(n, c, prior, grid, ks)
    for i in range(len(n)):
        for j, k in enumerate(ks):
            x = np.arange(k + 1)
            pmf = sst.betabinom.pmf(x, k, prior.a + c[i], prior.b + n[i] - c[i])
            dec = adaptive.decide(np.full(k + 1, n[i] + k), c[i] + x, prior, t).decided
            assert got[i, j] == pytest.approx(float(pmf @ dec), abs=1e-12)


def test_greedy_round_spends_its_budget_where_a_batch_decides_most():
    """Under a U-shaped prior a 0/4 prompt is decided (silent-hard) with probability 0.73 after 10
    more samples, a 2/16 or 14/16 prompt, near a band edge, with 0.13 at best: a round budget of
    30 goes to the three 0/4 prompts, 10 each in one jump (their hull), none to the edge ones; a
    larger budget reaches those next; the same counts give the same round."""
    prior = adaptive.Prior(0.3, 0.4)
    n = np.array([4, 4, 16, 16, 4, 4])
    c = np.array([0, 2, 2, 14, 0, 0])
    small = adaptive.AdaptiveConfig.from_specs("band:cost=0", 4, 64, "greedy:k=2,budget=6")  # 6 x 5 open prompts
    np.testing.assert_array_equal(adaptive.next_round(n, c, prior, small), [10, 0, 0, 0, 10, 10])
    larger = adaptive.AdaptiveConfig.from_specs("band:cost=0", 4, 64, "greedy:k=2,budget=8")
    np.testing.assert_array_equal(adaptive.next_round(n, c, prior, larger), [10, 0, 0, 10, 10, 10])
    np.testing.assert_array_equal(adaptive.next_round(n, c, prior, larger), adaptive.next_round(n, c, prior, larger))
    step = adaptive.AdaptiveConfig.from_specs("band:cost=0", 4, 64, "step:k=4")
    np.testing.assert_array_equal(adaptive.next_round(n, c, prior, step), [4, 0, 4, 4, 4, 4])


def test_greedy_round_with_one_jump_gives_each_prompt_one_and_leaves_the_rest():
    """Under a grid prior with masses at 0 and 1 (30%, 25%, the rest Beta(2, 2)) a 0/4 prompt needs
    a few more wrong answers to be decided (1/4 is decided now): each open prompt gets exactly its
    best-slope jump from 0 (the hull of V, brute force over every option), never a second one in
    the same round, however large the budget; the budget left over is not spent."""
    pts = priors.grid_points()
    dens = pts * (1 - pts)
    w = 0.45 * dens / dens.sum()
    w[0], w[-1] = 0.30, 0.25
    prior = adaptive.Prior(0.5, 0.5, method="grid", points=tuple(pts), weights=tuple(w / w.sum()))
    acfg = adaptive.AdaptiveConfig.from_specs("band:cost=0", 4, 64, "greedy:k=1,budget=40,jumps=1")
    n, c = np.array([4, 4, 4, 4]), np.array([0, 4, 1, 0])
    extra = adaptive.next_round(n, c, prior, acfg)
    grid = adaptive.decided_grid(prior, acfg.target, acfg.n_max)
    assert adaptive.decide(n, c, prior, acfg.target).decided.tolist() == [False, False, True, False]
    assert extra[2] == 0
    for i in (0, 1, 3):
        ks = np.arange(1, acfg.n_max - n[i] + 1)
        slope = adaptive.predictive_stopped(n[i : i + 1], c[i : i + 1], prior, grid, ks)[0] / ks
        assert extra[i] == ks[np.flatnonzero(slope >= slope.max() - 1e-15)[0]]
    assert extra[0] == extra[3] and 0 < extra[0] < 16 and 0 < extra[1] < 16
    assert extra.sum() < acfg.rule.budget * len(n)
    # jumps=0, the default, spends the whole budget: more than one jump on some prompt
    spend_all = adaptive.AdaptiveConfig.from_specs("band:cost=0", 4, 64, "greedy:k=1,budget=40")
    more = adaptive.next_round(n, c, prior, spend_all)
    assert more.sum() == 120 and (more >= extra).all() and (more > extra).any()
    assert acfg.rule.spec == "greedy:k=1,budget=40,jumps=1" and spend_all.rule.spec == "greedy:k=1,budget=40"
    assert spend_all.rule.jumps == 0
    with pytest.raises(ConfigError, match="jumps=-1 must be an integer >= 0"):
        adaptive.RoundRule.parse("greedy:jumps=-1")


def test_double_round_gives_each_open_prompt_its_best_jump_at_least_doubling():
    """The default target with ``double``: under a grid prior with masses at 0 and 1, each open prompt gets
    the option with the best gain per rollout (the chance of having stopped, brute force over every
    option) among those taking it to at least twice its samples or to n_max, one jump only; a whole
    run on 3,000 prompts ends within log2(n_max / n_min) rounds after round 0."""
    pts = priors.grid_points()
    dens = pts * (1 - pts)
    w = 0.45 * dens / dens.sum()
    w[0], w[-1] = 0.30, 0.25
    prior = adaptive.Prior(0.5, 0.5, method="grid", points=tuple(pts), weights=tuple(w / w.sum()))
    acfg = adaptive.AdaptiveConfig.from_specs("band", rule="double")
    assert acfg.rule.kind == "double" and acfg.rule.spec == "double:k=1"
    n, c = np.array([4, 4, 4, 8, 40]), np.array([0, 4, 1, 1, 5])
    extra = adaptive.next_round(n, c, prior, acfg)
    grid = adaptive.stop_grid(prior, acfg.target, acfg.n_max)
    decided = adaptive.stopped(n, c, prior, acfg)
    assert not decided.all() and decided.any()
    for i in range(len(n)):
        if decided[i]:
            assert extra[i] == 0
            continue
        ks = np.arange(min(n[i], acfg.n_max - n[i]), acfg.n_max - n[i] + 1)
        slope = adaptive.predictive_stopped(n[i : i + 1], c[i : i + 1], prior, grid, ks)[0] / ks
        assert extra[i] == ks[np.flatnonzero(slope >= slope.max() - 1e-15)[0]], i
    assert (extra[~decided] >= np.minimum(n, acfg.n_max - n)[~decided]).all()
    rng = np.random.default_rng(8)
    p = rng.beta(0.5, 0.5, 3000)
    rounds = 0
    orig = adaptive.next_round

    def counting(*args, **kwargs):
        nonlocal rounds
        out = orig(*args, **kwargs)
        rounds += bool(out.any())
        return out

    try:
        adaptive.next_round = counting
        frontier.simulate(rng.random((3000, 64)) < p[:, None], acfg)
    finally:
        adaptive.next_round = orig
    assert 2 <= rounds <= 4


def test_fixed_n_expectations_and_log_n_interpolation():
    prior, t = adaptive.Prior(0.3, 0.4), adaptive.Target()
    mis, share = frontier.fixed_n_expected(16, prior, t)
    rng = np.random.default_rng(5)
    p = rng.beta(prior.a, prior.b, 400_000)
    c = rng.binomial(16, p)
    band = adaptive.decide(np.full(len(c), 16), c, prior, t).band
    truth = np.where(p <= t.lo, 0, np.where(p >= t.hi, 2, 1))
    mc = (band != truth).mean()
    assert abs(mis - mc) < 5 * np.sqrt(mc * (1 - mc) / len(p))
    assert 0 < share < 1
    assert frontier.log_n_crossing([4, 8, 16], [0.3, 0.2, 0.1], 0.15) == (pytest.approx(8 * 2**0.5), "inside")
    assert frontier.log_n_crossing([4, 8], [0.3, 0.2], 0.1) == (None, "above")
    assert frontier.log_n_crossing([4, 8], [0.3, 0.2], 0.5) == (4.0, "below")


# --- posterior estimates ------------------------------------------------------------------------

PAIRS = [(4, 0), (11, 1), (23, 20), (64, 30)]


def _posterior_analysis(prior: adaptive.Prior, Gs=(4, 8, 16)) -> analyze.Analysis:
    counts = pa.table({"prompt_id": [f"p{i}" for i in range(len(PAIRS))], "n": [n for n, _ in PAIRS]})
    counts = counts.append_column("c", pa.array([c for _, c in PAIRS]))
    cfg = analyze.AnalyzeConfig(group_sizes=Gs, prior_a=prior.a, prior_b=prior.b, posterior=True)
    return analyze.analyze(counts, "r", cfg)


@pytest.mark.slow  # a minute of Monte Carlo on 2 cores: make test runs it, the fast tier does not
def test_posterior_estimates_match_monte_carlo():
    """zero-signal rates, every estimator's weight and mass, and pass@k of an adaptive run's
    analysis are posterior expectations: checked against draws of p from each posterior, within
    5 Monte Carlo standard errors."""
    prior = adaptive.Prior(0.3, 0.4)
    result = _posterior_analysis(prior)
    rng = np.random.default_rng(0)
    draws = 100_000
    ps = result.prompt_stats.to_pylist()
    weights = result.weights.to_pylist()

    def close(value, samples):
        se = samples.std() / np.sqrt(len(samples))
        assert abs(value - samples.mean()) <= 5 * se + 1e-9, (value, samples.mean(), se)

    for i, (n, c) in enumerate(PAIRS):
        p = rng.beta(prior.a + c, prior.b + n - c, draws)
        q = 1 - p
        row = ps[i]
        close(row["post_mean"], p)
        for j, G in enumerate(row["group_sizes"]):
            close(row["zero_signal"][j], p**G + q**G)
            close(row["silent_all_correct"][j], p**G)
        for k in (1, n // 2, n):
            close(row["pass_at_k"][k - 1], 1 - q**k)
        for w in (w for w in weights if w["prompt_id"] == f"p{i}"):
            e = est.get(w["estimator"])
            wp = e.weight(p, w["G"])
            close(w["weight"], wp)
            close(w["mass"], wp * p * q)
            assert w["p"] == pytest.approx((prior.a + c) / (prior.a + prior.b + n))


def test_posterior_weight_is_exact_for_leave_one_out_weights():
    """E[w(p, G)] = sum_s d_s P(s), P the beta-binomial(G - 1) of the posterior: exact for every
    estimator whose weight is its leave-one-out polynomial (all but DAPO's resample variant)."""
    prior = adaptive.Prior(0.3, 0.4)
    result = _posterior_analysis(prior, Gs=(4, 16, 64))
    for w in result.weights.to_pylist():
        e = est.get(w["estimator"])
        if isinstance(e, est.DAPO) and e.mode == "resample":
            continue
        n, c = PAIRS[int(w["prompt_id"][1:])]
        G = w["G"]
        a_plus, a_minus = e.advantage_table(G)
        d = a_plus[1 : G + 1] - a_minus[:G]
        exact = sst.betabinom.pmf(np.arange(G), G - 1, prior.a + c, prior.b + n - c) @ d
        assert w["weight"] == pytest.approx(exact, rel=1e-7, abs=1e-10), w


def test_plain_analysis_is_unchanged_without_posterior():
    counts = pa.table({"prompt_id": ["a", "b"], "n": [8, 8], "c": [0, 3]})
    plain = analyze.analyze(counts, "r")
    assert plain.prompt_stats.column("post_mean").null_count == 2
    for name in analyze.ADAPTIVE_COLUMNS:
        assert plain.prompt_stats.column(name).null_count == 2
    assert plain.weights.column("p").to_pylist()[0] == 0.0


# --- configuration --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("over", "match"),
    [
        ({"adaptive": "band:lo=0.5,hi=0.5"}, "lo=0.5 must be below hi=0.5"),
        ({"adaptive": "band:lo=0.9,hi=0.1"}, "lo=0.9 must be below hi=0.1"),
        ({"adaptive": "band:delta=0"}, r"delta=0.0 is out of range: allowed \(0, 1\)"),
        ({"adaptive": "width:delta=1.5"}, r"delta=1.5 is out of range: allowed \(0, 1\)"),
        ({"adaptive": "band", "n_min": 10, "n_max": 8}, "n_min=10 must be at most n_max=8"),
        ({"adaptive": "quantile"}, "adaptive target 'quantile' is unknown: allowed band, width"),
        ({"adaptive": "band:h=0.1"}, "bad parameter 'h=0.1'"),
        ({"adaptive": "band:lo=x"}, "lo='x' is not a number"),
        ({"adaptive": "width:h=0.7"}, r"h=0.7 is out of range: allowed \(0, 0.5\]"),
        (
            {"adaptive": "band", "round_rule": "random"},
            "round rule 'random' is unknown: allowed plan, double, greedy, step, auto",
        ),
        ({"adaptive": "band", "round_rule": "step:k=0"}, "k=0 must be an integer >= 1"),
        ({"adaptive": "band", "round_rule": "greedy:budget=0"}, "budget=0.0 must be a number > 0"),
        (
            {"adaptive": "band", "adaptive_prior": "flat"},
            "adaptive prior='flat' is unknown: allowed auto, grid, inflated, fit, jeffreys, labels",
        ),
        ({"adaptive": "band", "n_min": 0}, "n_min=0 must be an integer >= 1"),
        ({"adaptive": "band", "n_min": 1}, "n_min=1 cannot fit a prior"),
    ],
)
def test_bad_adaptive_settings_are_config_errors(over, match):
    with pytest.raises(ConfigError, match=match):
        run.ProfileConfig.build(**{**SIM, **over})


def test_bad_adaptive_options_exit_1_before_any_work(data_dir):
    runner = CliRunner()
    base = ["profile", "--backend", "simulate", "--no-prefect", "--limit", "5"]
    for extra, match in [
        (["--adaptive", "band:lo=0.9,hi=0.1"], "lo=0.9 must be below hi=0.1"),
        (["--adaptive", "band:delta=2"], "delta=2.0 is out of range"),
        (["--adaptive", "band", "--n-min", "9", "--n-max", "8"], "n_min=9 must be at most n_max=8"),
        (["--adaptive", "bands"], "adaptive target 'bands' is unknown"),
        (["--n-max", "32"], "--n-max: only with --adaptive"),
    ]:
        out = runner.invoke(app, base + extra)
        assert out.exit_code == 1, out.output
        assert match in out.output, out.output
    assert not (data_dir / "samples").exists()


def test_run_ids_fixed_unchanged_adaptive_distinct(store, close_engines):
    """A fixed-n run's id hashes exactly the parameters it always did (first_idx is not one of
    them); an adaptive run's id hashes its settings instead of n, each of them."""
    assert set(SamplingParams(first_idx=3).to_dict()) == {"n", "temperature", "top_p", "max_tokens", "seed"}
    cfg = run.ProfileConfig.build(**SIM, n=4)
    with executors.open_executor(cfg) as ex:
        plan = run.prepare_run(cfg, store, ex.model_name)
        ids = plan.problems.column("prompt_id").to_pylist()
        old = run.compute_run_id(
            "arithmetic",
            "simulate",
            "simulate",
            {"n": 4, "temperature": 0.7, "top_p": 1.0, "max_tokens": 24, "seed": 0},
            plan.template,
            ids,
        )
        assert plan.run_id == old
        assert store.read_table("plans", {"run_id": plan.run_id}).column("round").null_count == len(ids)
        seen = {plan.run_id}
        for over in (
            {},
            {"n": 16},  # n is not used by an adaptive run
            {"adaptive": "band:lo=0.2"},
            {"n_min": 2},
            {"n_max": 32},
            {"round_rule": "step"},
            {"adaptive_prior": "jeffreys"},
        ):
            acfg = run.ProfileConfig.build(**{**ADAPTIVE, "n": 4, **over})
            seen.add(run.prepare_run(acfg, store, ex.model_name).run_id)
    assert len(seen) == 7  # the {"n": 16} adaptive run is the {} one


# --- the rounds as shards of the real pipeline --------------------------------------------------


_PLAIN_WEIGHTS = pa.schema(
    [pa.field(f.name, f.type.value_type if pa.types.is_dictionary(f.type) else f.type) for f in schema.WEIGHTS]
)


def _tables(store: Store, run_id: str) -> dict[str, pa.Table]:
    order = [("prompt_id", "ascending"), ("sample_idx", "ascending")]
    out = {
        "samples": store.read_table("samples", {"run_id": run_id}).sort_by(order),
        "prompt_stats": store.read_table("prompt_stats", {"run_id": run_id}).sort_by("prompt_id"),
        "plans": store.read_table("plans", {"run_id": run_id}).sort_by(
            [("shard", "ascending"), ("prompt_id", "ascending")]
        ),
        # rows in the order the analysis met the prompts, which a query does not fix
        "weights": store.read_table("weights", {"run_id": run_id})
        .cast(_PLAIN_WEIGHTS)
        .sort_by([("prompt_id", "ascending"), ("estimator", "ascending"), ("G", "ascending")]),
        "summary": store.read_table("summary", {"run_id": run_id}),
        "allocation": store.read_table("allocation", {"run_id": run_id}).sort_by("prompt_id"),
    }
    columns = ["adaptive", "prior_a", "prior_b", "prior", "rounds", "status"]  # as stored (encoded)
    out["runs"] = store.read_table("runs", {"run_id": run_id}).select(columns)
    return out


def _same_values(x: list, y: list) -> bool:
    """Equal, floats to the last few bits: an analysis of the same samples can differ there
    (``answer_entropy`` sums the answer histogram in the order the query returned it)."""
    if len(x) != len(y):
        return False
    for u, v in zip(x, y, strict=True):
        if isinstance(u, float) and isinstance(v, float):
            if not (u == v or (np.isnan(u) and np.isnan(v)) or abs(u - v) <= 1e-12 * max(abs(u), abs(v))):
                return False
        elif isinstance(u, list) and isinstance(v, list):
            if not _same_values(u, v):
                return False
        elif u != v:
            return False
    return True


def _assert_same_tables(a: Store, b: Store, run_id: str) -> None:
    ta, tb = _tables(a, run_id), _tables(b, run_id)
    for name in ta:
        assert ta[name].schema == tb[name].schema, f"{name}: schemas differ"
        for col in ta[name].column_names:
            x, y = ta[name].column(col).to_pylist(), tb[name].column(col).to_pylist()
            assert _same_values(x, y), f"{name}.{col} differs"


def test_adaptive_run_end_to_end(store, close_engines):
    """Rounds of shards through the real stages: each prompt's samples are 0..n-1 once, with the
    seeds of a fixed-n run (its samples are the same ones); prompt_stats and runs record the spec's
    decisions; the analysis is the posterior one."""
    result = executors.profile_direct(run.ProfileConfig.build(**ADAPTIVE, adaptive_prior="fit"), store)
    rid = result.run_id
    row = store.get_run(rid)
    acfg = row.adaptive
    assert row.status == "done" and acfg.target.spec == "band:lo=0.1,hi=0.9,delta=0.05,cost=0.001"
    stop = adaptive.round_stop_grid(adaptive.Prior(row.prior.a, row.prior.b), acfg, round_index=len(row.rounds))
    prior = adaptive.Prior(row.prior.a, row.prior.b)
    assert row.prior.method == "fit"
    samples = store.read_table("samples", {"run_id": rid})
    per = {}
    for pid, idx in zip(samples.column("prompt_id").to_pylist(), samples.column("sample_idx").to_pylist(), strict=True):
        per.setdefault(pid, []).append(idx)
    assert len(per) == 120 and all(sorted(v) == list(range(len(v))) for v in per.values())
    ps = store.read_table("prompt_stats", {"run_id": rid}).to_pylist()
    assert {r["prompt_id"]: r["n"] for r in ps} == {pid: len(v) for pid, v in per.items()}
    plans = store.read_table("plans", {"run_id": rid})
    last_round = {}
    for pid, r in zip(plans.column("prompt_id").to_pylist(), plans.column("round").to_pylist(), strict=True):
        last_round[pid] = max(last_round.get(pid, 0), r)
    rounds = row.rounds
    assert len(rounds) == max(last_round.values()) + 1 >= 3
    assert len(rounds) <= acfg.rule.rounds  # plan: at most `rounds` rounds, round 0 included
    assert sum(r.rollouts for r in rounds) == samples.num_rows
    assert rounds[0].prompts == 120 and rounds[-1].open_after == 0
    for r in ps:
        n, c = r["n"], r["c"]
        alpha, beta = prior.a + c, prior.b + n - c
        probs = scipy_band_probs(alpha, beta, 0.1, 0.9)
        assert r["band_prob"] == pytest.approx(max(probs), abs=1e-9)
        assert r["decided_band"] == schema.BANDS[int(np.argmax(probs))]
        assert r["undecided"] == (max(probs) < 0.95)
        assert acfg.n_min <= n <= acfg.n_max and stop[n, c]
        assert r["stop_round"] == last_round[r["prompt_id"]]
        assert r["post_mean"] == pytest.approx(alpha / (alpha + beta))
        assert r["post_lo"] == pytest.approx(sst.beta.ppf(0.025, alpha, beta))
        j = r["group_sizes"].index(8)
        want = np.prod((alpha + np.arange(8)) / (alpha + beta + np.arange(8))) + np.prod(
            (beta + np.arange(8)) / (alpha + beta + np.arange(8))
        )
        assert r["zero_signal"][j] == pytest.approx(want)  # a posterior mean even where n >= 8
    assert any(r["undecided"] for r in ps) or any(r["n"] == acfg.n_min for r in ps)
    # The same (prompt, index) of a fixed-n run is the same sample: every sample has its own seed.
    fixed = executors.profile_direct(run.ProfileConfig.build(**SIM, n=acfg.n_max), store).run_id
    full = store.read_table("samples", {"run_id": fixed})
    keyed = {
        (p, i): t
        for p, i, t in zip(
            full.column("prompt_id").to_pylist(),
            full.column("sample_idx").to_pylist(),
            full.column("completion").to_pylist(),
            strict=True,
        )
    }
    for p, i, t in zip(
        samples.column("prompt_id").to_pylist(),
        samples.column("sample_idx").to_pylist(),
        samples.column("completion").to_pylist(),
        strict=True,
    ):
        assert keyed[(p, i)] == t


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> tuple[Store, str]:
    store = Store.open(tmp_path_factory.mktemp("adaptive-ref") / "data")
    rid = executors.profile_direct(run.ProfileConfig.build(**ADAPTIVE), store).run_id
    run.close_engines()
    return store, rid


@pytest.mark.parametrize("shards_before_kill", [3, 5, 7, 9])
def test_killed_between_rounds_resumes_to_the_same_tables(
    uninterrupted, store, shards_before_kill, close_engines, dies_after
):
    """Round 0 has 5 shards: the kill comes inside round 0, right after it (round 1 planned, none
    of its shards written), and inside later rounds; the rerun re-derives the same rounds and ends
    with the same samples, plans, analysis and registry row as an uninterrupted run."""
    ref, rid = uninterrupted
    cfg = run.ProfileConfig.build(**ADAPTIVE)
    with pytest.raises(SamplingError, match="killed"):
        run.profile(cfg, store, dies_after(cfg, shards_before_kill))
    assert store.get_run(rid).status == "failed"
    assert len(store.finished_shards(rid)) == shards_before_kill
    executors.profile_direct(cfg, store)
    _assert_same_tables(ref, store, rid)


def test_a_rerun_of_a_finished_adaptive_run_redoes_nothing(uninterrupted, tmp_path, close_engines):
    ref, rid = uninterrupted
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(ref.root, copy)
    store = Store(copy)
    before = {p.name: p.stat().st_mtime_ns for p in store.shard_files(rid).values()}
    assert executors.profile_direct(run.ProfileConfig.build(**ADAPTIVE), store).run_id == rid
    assert {p.name: p.stat().st_mtime_ns for p in store.shard_files(rid).values()} == before
    _assert_same_tables(ref, store, rid)


def test_prefect_flow_runs_rounds_as_shard_tasks(uninterrupted, prefect_api, store, close_engines, task_runs):
    ref, rid = uninterrupted
    assert prefect_flows.profile_flow(run.ProfileConfig.build(**ADAPTIVE), store).run_id == rid
    _assert_same_tables(ref, store, rid)
    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName

    shards = len(store.read_table("plans", {"run_id": rid}).column("shard").unique())
    rounds = len(store.get_run(rid).rounds)
    want = sorted(f"shard-{s}" for s in range(shards))
    with get_client(sync_client=True) as client:
        [fr] = client.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(like_=rid)))

    def all_there(runs) -> bool:
        names = [t.name for t in runs]
        ran = [n for n in names if n.startswith("shard-")], [n for n in names if n.startswith("plan-round")]
        return len(ran[0]) >= shards and len(ran[1]) >= rounds

    names = [t.name for t in task_runs(fr.id, all_there)]
    assert sorted(n for n in names if n.startswith("shard-")) == want
    assert sum(n.startswith("plan-round") for n in names) == rounds  # the last one says: done


def test_ray_executor_runs_the_rounds(uninterrupted, tmp_path, close_engines):
    import ray

    ref, rid = uninterrupted
    store = Store.open(tmp_path / "ray")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        cfg = run.ProfileConfig.build(**ADAPTIVE, executor="ray", replicas=2)
        assert executors.profile_direct(cfg, store).run_id == rid
    finally:
        ray.shutdown()
    _assert_same_tables(ref, store, rid)


@pytest.mark.slow
def test_kill_9_of_an_adaptive_profile_then_rerun(prefect_api, tmp_path, close_engines):
    """`difficulty profile --adaptive band` killed with SIGKILL once a round-1 shard is written; the
    same command resumes and ends with the tables of an uninterrupted run."""
    from prefect.settings import PREFECT_API_URL

    data_dir = tmp_path / "data"
    env = {
        **os.environ,
        "DIFFICULTY_DATA": str(data_dir),
        "PREFECT_HOME": str(tmp_path / "prefect"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_API_URL": PREFECT_API_URL.value(),
    }
    args = ["--backend", "simulate", "--limit", "2000", "--adaptive", "band"]  # the default rule: about 5 rounds
    args += ["--shard-size", "50", "--grade-workers", "1", "--no-report"]
    cmd = [str(Path(sys.executable).parent / "difficulty"), "profile", *args]
    round0 = 2000 // 50
    proc = subprocess.Popen(
        cmd, env=env, cwd=tmp_path, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 300
        target = f"shard-{round0 + 1:05d}.parquet"
        while not list((data_dir / "samples").rglob(target)):
            assert proc.poll() is None, f"profile ended early: {proc.stderr.read().decode()[-2000:]}"
            assert time.monotonic() < deadline, "no round-1 shard written in time"
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    store = Store(data_dir)
    [run_dir] = (data_dir / "samples").iterdir()
    rid = run_dir.name.split("=", 1)[1]
    assert store.get_run(rid).status == "sampling"
    rerun = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "adaptive band" in rerun.stdout
    ref = Store.open(tmp_path / "ref")
    cfg = run.ProfileConfig.build(
        backend="simulate",
        limit=2000,
        adaptive="band",
        shard_size=50,
        grade_workers=1,
        report=False,
    )
    assert executors.profile_direct(cfg, ref).run_id == rid
    _assert_same_tables(ref, store, rid)


def test_report_shows_the_rounds(store, close_engines):
    result = executors.profile_direct(
        run.ProfileConfig.build(**{**ADAPTIVE, "report": True, "adaptive_prior": "grid"}), store
    )
    html = Path(result.report).read_text()
    assert 'id="adaptive"' in html and "Adaptive profiling" in html
    assert "Prompts still open and rollouts spent, per round" in html
    assert "The dataset&#x27;s pass rates (fitted prior) beside the per-prompt estimates" in html or (
        "The dataset's pass rates (fitted prior) beside the per-prompt estimates" in html
    )
    assert "dataset's pass rates: fitted grid prior" in html and "an artefact of stopping" in html
    assert re.search(r"of the rollouts saved|saved", html)
    assert "posterior expectations under the fitted prior, grid prior (" in html
    auto = executors.profile_direct(run.ProfileConfig.build(**{**ADAPTIVE, "report": True}), store)
    html = Path(auto.report).read_text().replace("&#x27;", "'")
    assert store.get_run(auto.run_id).prior.method == "mixture"  # the default prior, named as such
    assert "dataset's pass rates: fitted mixture prior" in html and "fitted grid prior" not in html
    assert "The red bars are the mixture prior auto fitted" in html
    # where some prompt has fewer than G answers, the zero-signal and gradient-share tables show what the
    # counts allow (identify's ranges), and the chart its band
    summary = store.read_table("summary", {"run_id": auto.run_id}).to_pylist()
    if any(r["metric"] == "observed_lo" for r in summary):
        assert "; the counts allow " in html and "what the counts allow (90%)" in html
    if any(r["metric"] == "mean_mass_lo" and r["G"] == 8 for r in summary):
        assert "(counts allow " in html
    assert any(r["metric"] == "observed_lo" for r in summary)  # this run stops some prompts before G = 64
    fixed = executors.profile_direct(run.ProfileConfig.build(**{**SIM, "report": True}), store)
    assert 'id="adaptive"' not in Path(fixed.report).read_text()


@pytest.mark.slow  # 24 runs of the default profile, each fitting three priors: about a minute on 2 cores
def test_the_default_profile_finishes_on_datasets_with_no_spread(tmp_path, close_engines):
    """Issue 32: counts that look binomial (a few prompts at one pass rate, every prompt at 0 or 1, many
    prompts at 0.5) fit a Beta at the ceiling of the fit, whose quadrature gave NaN weights: the run
    sampled everything and then stopped at its finish. The default adaptive profile (simulate
    backend, the driver without Prefect) on 5 prompts at 0.5, at 0 and at 1, and on 2,000 at 0.5,
    seeds 1-6: every run finishes with every prompt's decision and a summary of numbers."""
    for count, rate in ((5, 0.5), (5, 0.0), (5, 1.0), (2000, 0.5)):
        folder = tmp_path / f"{count}-at-{rate}"
        folder.mkdir()
        rows = [{"problem": f"What is {k} plus 1?", "answer": str(k + 1)} for k in range(count)]
        (folder / "problems.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (folder / "rates.csv").write_text("problem,pass_rate\n" + "".join(f"{r['problem']},{rate}\n" for r in rows))
        store = Store.open(folder / "data")
        for seed in range(1, 7):
            cfg = run.ProfileConfig.build(
                backend="simulate",
                data_file=str(folder / "problems.jsonl"),
                backend_options={"pass_rates": str(folder / "rates.csv")},
                adaptive="band",
                seed=seed,
                grade_workers=1,
                report=False,
            )
            rid = executors.profile_direct(cfg, store).run_id
            assert store.get_run(rid).status == "done", (count, rate, seed)
            stats_ = store.read_table("prompt_stats", {"run_id": rid})
            assert stats_.num_rows == count and None not in stats_.column("decided_band").to_pylist()
            values = store.read_table("summary", {"run_id": rid}).column("value").to_numpy(zero_copy_only=False)
            assert np.isfinite(values.astype(float)).all(), (count, rate, seed)


# --- every backend numbers its samples from first_idx ------------------------------------------------

PROBLEMS = [
    {"prompt_id": "p-a", "problem": "What is 2 + 3?", "answer": "5"},
    {"prompt_id": "p-b", "problem": "7 * 6?", "answer": "42"},
]


def _rows(table: pa.Table) -> list[tuple]:
    return list(zip(*(table.column(c).to_pylist() for c in ("prompt_id", "sample_idx", "completion")), strict=True))


def test_simulate_continues_where_a_round_stopped():
    sampler = make_sampler("simulate", None)
    whole = _rows(sampler.sample(PROBLEMS, SamplingParams(n=8, seed=3)))
    tail = _rows(sampler.sample(PROBLEMS, SamplingParams(n=5, seed=3, first_idx=3)))
    assert tail == [r for r in whole if r[1] >= 3]


@pytest.mark.slow
def test_llama_cpp_continues_where_a_round_stopped(close_engines):
    sampler = run.get_sampler("xllamacpp", None, {})
    params = {"temperature": 0.7, "max_tokens": 8, "seed": 5}
    whole = _rows(sampler.sample(PROBLEMS[:1], SamplingParams(n=3, **params)))
    tail = _rows(sampler.sample(PROBLEMS[:1], SamplingParams(n=2, first_idx=1, **params)))
    assert tail == whole[1:]


class _EchoSeed(BaseHTTPRequestHandler):
    """An OpenAI-compatible stand-in that ignores n: one choice per request, naming its seed."""

    def log_message(self, *args) -> None:
        return

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        out = {
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": f"seed={body['seed']}"},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"completion_tokens": 1},
        }
        data = json.dumps(out).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def test_openai_numbers_samples_and_seeds_from_first_idx():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _EchoSeed)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        sampler = make_sampler(
            "openai", "m", base_url=f"http://127.0.0.1:{server.server_port}/v1", api_key="x", max_retries=0
        )
        table = sampler.sample(PROBLEMS, SamplingParams(n=3, seed=9, first_idx=4))
    finally:
        server.shutdown()
    rows = _rows(table)
    assert [(p, i) for p, i, _ in rows] == [(p["prompt_id"], i) for p in PROBLEMS for i in (4, 5, 6)]
    for pid, idx, text in rows:
        assert text == f"seed={derive_seed(9, pid, idx)}"


def test_vllm_numbers_samples_and_seeds_from_first_idx(monkeypatch):
    fake = str(Path(__file__).parent / "fake_vllm")
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.syspath_prepend(fake)
    import vllm as stand_in

    from pipeline.sample.base import prepare_prompts
    from pipeline.sample.vllm import generate_rows

    try:
        items = prepare_prompts(PROBLEMS, None)
        rows = generate_rows(stand_in.LLM("org/tiny"), items, SamplingParams(n=3, seed=2, first_idx=5))
        [chat] = [c for c in stand_in.CALLS if c["call"] == "chat"]
    finally:
        for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
            sys.modules.pop(name, None)
    assert [(r[0], r[1]) for r in rows] == [(p["prompt_id"], i) for p in PROBLEMS for i in (5, 6, 7)]
    assert [sp.seed for sp in chat["sampling_params"]] == [derive_seed(2, p["prompt_id"], 5) for p in PROBLEMS]


def test_first_idx_is_checked():
    with pytest.raises(ConfigError, match="first_idx=-1"):
        SamplingParams(first_idx=-1)
    with pytest.raises(ConfigError, match="first_idx="):
        SamplingParams(n=8, first_idx=2**31 - 4)


# --- the bundled set and model --------------------------------------------------------------------


@pytest.mark.slow
def test_cli_adaptive_profile_on_the_bundled_model(tmp_path, close_engines):
    """`difficulty profile --adaptive band` with the bundled model (a small slice, so it stays a
    test): finishes, prints its rounds and writes a report with the rounds section."""
    data = tmp_path / "data"
    out = CliRunner().invoke(
        app,
        ["profile", "--adaptive", "band", "--limit", "9", "--n-max", "12", "--max-tokens", "12", "--no-prefect"]
        + ["--grade-workers", "1", "--data-dir", str(data)],
    )
    assert out.exit_code == 0, out.output
    assert "adaptive band:lo=0.1,hi=0.9,delta=0.05,cost=0.001 (n 4..12" in out.output
    [report] = (data / "reports").glob("*.html")
    assert 'id="adaptive"' in report.read_text()


def test_grid_prior_run_end_to_end(store, close_engines):
    """The grid prior, refitted to every round's counts: the run stores it (points and masses),
    every prompt's decision is the grid sums under it and its estimates the grid sums under the same
    fit run to its maximum (``prior.estimation_prior``), and the last round's state leaves no prompt
    open (decided under the final prior, or at n_max)."""
    rid = executors.profile_direct(run.ProfileConfig.build(**ADAPTIVE, adaptive_prior="grid"), store).run_id
    row = store.get_run(rid)
    acfg = row.adaptive
    assert acfg.prior == "grid"
    prior = row.prior
    assert prior.is_grid and prior.method == "grid" and len(prior.points) == len(prior.weights)
    p, w = np.array(prior.points), np.array(prior.weights)
    assert p[0] == 0.0 and p[-1] == 1.0 and w.sum() == pytest.approx(1.0)
    ps = store.read_table("prompt_stats", {"run_id": rid}).to_pylist()
    # the last call planned round len(rounds) under it, and found no prompt open
    stop = adaptive.round_stop_grid(prior, acfg, round_index=len(row.rounds))
    # the stored prior is the fit to the final counts
    counts = np.array([r["n"] for r in ps]), np.array([r["c"] for r in ps])
    refit = priors.fit_grid_prior(*counts)
    np.testing.assert_allclose(refit.weights, w, atol=1e-12)
    w_est = np.array(priors.estimation_prior(prior, *counts).weights)
    assert np.abs(w_est - w).max() > 0  # run further, it moves
    for r in ps:
        n, c = r["n"], r["c"]
        post = w * p**c * (1 - p) ** (n - c)
        post /= post.sum()
        hard, easy = priors.cell_share(p, 0.0, 0.1), priors.cell_share(p, 0.9, 1.0)  # each point its cell
        probs = [post @ hard, post @ (1 - hard - easy), post @ easy]
        assert r["band_prob"] == pytest.approx(max(probs), abs=1e-9)
        assert r["decided_band"] == schema.BANDS[int(np.argmax(probs))]
        assert r["undecided"] == (max(probs) < 0.95)
        assert stop[n, c]
        post = w_est * p**c * (1 - p) ** (n - c)
        post /= post.sum()
        assert r["post_mean"] == pytest.approx(float(post @ p))
        j = r["group_sizes"].index(8)
        assert r["zero_signal"][j] == pytest.approx(float(post @ (p**8 + (1 - p) ** 8)))


def test_reanalysing_an_adaptive_run_keeps_its_decisions_and_estimates(store, close_engines):
    """`difficulty analyze --run R` on an adaptive run (the way to add --reco-answers rows) used to
    replace its posterior analysis by a plug-in one: decisions null, summary moved. It now rebuilds
    what finish_run wrote, and adds what was asked."""
    from typer.testing import CliRunner

    from pipeline.cli import app

    rid = executors.profile_direct(run.ProfileConfig.build(**ADAPTIVE), store).run_id
    before = store.read_table("prompt_stats", {"run_id": rid}).sort_by("prompt_id")
    summary = store.read_table("summary", {"run_id": rid})
    assert before.column("decided_band").null_count == 0
    args = ["analyze", "--run", rid, "--G", "4,8,16,32,64", "--reco-answers", "8", "--data-dir", str(store.root)]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, out.output
    after = store.read_table("prompt_stats", {"run_id": rid}).sort_by("prompt_id")
    for column in ("n", "c", "post_mean", "decided_band", "band_prob", "stop_round", "undecided", "post_lo"):
        assert after.column(column).to_pylist() == before.column(column).to_pylist(), column
    again = store.read_table("summary", {"run_id": rid})
    key = ["section", "metric", "estimator", "G"]
    old = {tuple(r[k] for k in key): r["value"] for r in summary.to_pylist()}
    new = {tuple(r[k] for k in key): r["value"] for r in again.to_pylist()}
    assert new == old
    weights = store.query("select count(*) n from weights where run_id = $r and estimator = 'reco_answers'", {"r": rid})
    assert weights.to_pylist()[0]["n"] == before.num_rows


def _copy_store(ref: Store, folder: Path) -> Store:
    import shutil

    shutil.copytree(ref.root, folder)
    return Store(folder)


def _corrupt(store: Store, run_id: str, **columns) -> None:
    """Overwrite columns of a run's stored registry row as they are, past the encoder."""
    row = store.read_table("runs", {"run_id": run_id}).to_pylist()[0] | columns
    store.write_table("runs", pa.Table.from_pylist([row], schema=schema.RUNS), {"run_id": run_id}, part="run")


CORRUPT = "run r1: its registry field adaptive = '{\"target\": ' cannot be read"


def test_every_reader_stops_at_a_corrupt_adaptive_field(store):
    """A run whose ``adaptive`` field does not parse is one named error for the report, the
    command line and the rounds, never a fixed-n run."""
    from pipeline import reports
    from pipeline.errors import RunRecordError
    from pipeline.run.rounds import record_rounds
    from pipeline.store import RunRecord

    store.register_run(RunRecord("r1", dataset="arithmetic", adaptive=adaptive.AdaptiveConfig(), status="done"))
    _corrupt(store, "r1", adaptive='{"target": ')
    with pytest.raises(RunRecordError, match=re.escape(CORRUPT)):
        reports.load_run(store, "r1")
    plan = run.RunPlan.build(
        "r1",
        [[("p", 0, 4)]],
        pa.table({"prompt_id": ["p"]}),
        dataset="arithmetic",
        model="m",
        template="",
        skipped={},
        rounds=[0],
        adaptive=adaptive.AdaptiveConfig(),
    )
    with pytest.raises(RunRecordError, match=re.escape(CORRUPT)):
        record_rounds(store, plan, adaptive.Prior(1.0, 1.0), set())
    with pytest.raises(RunRecordError, match=re.escape(CORRUPT)):
        finish.analysis_of_run(store, "r1")
    for command in ("analyze", "allocate", "report", "export"):
        args = [command, "--run", "r1", "--data-dir", str(store.root)]
        out = CliRunner().invoke(app, args + (["--output", str(store.root / "x.jsonl")] if command == "export" else []))
        said = " ".join(out.output.split())
        assert out.exit_code == 1 and "its registry field adaptive" in said, (command, out.output)


@pytest.mark.slow  # an adaptive run of 120 prompts
def test_a_corrupt_adaptive_field_stops_the_next_round(store, close_engines):
    """Between two rounds, the row's ``adaptive`` field is broken: the round's planning stops with
    the registry's named error (and the run stays unreadable, not silently fixed-n)."""
    from pipeline.errors import RunRecordError

    cfg = run.ProfileConfig.build(**ADAPTIVE)

    def corrupt_then_plan(config, data, plan):
        _corrupt(data, plan.run_id, adaptive='{"target": ')
        return run.next_round_step(config, data, plan)

    with run.local_executor(cfg) as executor, pytest.raises(RunRecordError, match="its registry field adaptive"):
        run.profile(cfg, store, executor, run.Steps(next_round=corrupt_then_plan))
    rid = store.list_runs().column("run_id")[0].as_py()
    with pytest.raises(RunRecordError, match=f"run {rid}: its registry field adaptive"):
        store.get_run(rid)


@pytest.mark.slow  # an adaptive run of 120 prompts
def test_analysis_is_the_finishs_whoever_computes_it(uninterrupted, tmp_path):
    """`difficulty analyze --run` on an adaptive run leaves its registry row byte for byte as it
    was; with its analysis tables deleted, ``analysis_of_run`` (what the report, export and
    calibrate read) computes the finish's posterior analysis again, not a c/n one."""
    import shutil

    ref, rid = uninterrupted
    store = _copy_store(ref, tmp_path / "copy")
    [row_file] = store.files("runs", {"run_id": rid})
    before = (row_file.read_bytes(), row_file.stat().st_mtime_ns)
    out = CliRunner().invoke(app, ["analyze", "--run", rid, "--data-dir", str(store.root)])
    assert out.exit_code == 0, out.output
    assert (row_file.read_bytes(), row_file.stat().st_mtime_ns) == before
    finished = finish.read_analysis(ref, rid)
    for name in finish.ANALYSIS_TABLES:
        shutil.rmtree(store.root / name / f"run_id={rid}")
    got, computed = finish.analysis_of_run(store, rid)
    assert computed
    want, have = finished.prompt_stats.sort_by("prompt_id"), got.prompt_stats.sort_by("prompt_id")
    assert have.column("post_mean").null_count == 0 and have.column("decided_band").null_count == 0
    for column in (*analyze.ADAPTIVE_COLUMNS, "n", "c", "post_mean", "zero_signal", "pass_at_k"):
        assert _same_values(have.column(column).to_pylist(), want.column(column).to_pylist()), column
    key = ["section", "metric", "estimator", "G", "band", "k"]
    rows = {tuple(r[k] for k in key): r["value"] for r in got.summary.to_pylist()}
    assert rows == {tuple(r[k] for k in key): r["value"] for r in finished.summary.to_pylist()}
    assert (row_file.read_bytes(), row_file.stat().st_mtime_ns) == before
