"""Adaptive profiling priced in tokens (``--price-unit tokens``, docs/tokens.md "The adaptive price"):
each level's grids are the rollout-priced grids at the scaled cost, the prices come from the answers'
lengths, and on a population whose hard prompts run long the token-priced rule spends fewer tokens
at no worse loss."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from typer.testing import CliRunner

from pipeline import adaptive, finish, frontier, run, tokens
from pipeline import prior as priors
from pipeline.cli import app
from pipeline.errors import ConfigError
from pipeline.store import Store

BETA = priors.Prior(0.6, 0.8, method="fit")


def _grid_prior() -> priors.Prior:
    pts = priors.grid_points()
    w = np.full(len(pts), 0.5 / (len(pts) - 2))
    w[0], w[-1] = 0.3, 0.2
    return priors.Prior(0.5, 0.5, method="grid", points=tuple(pts.tolist()), weights=tuple(w.tolist()))


@pytest.mark.parametrize("prior", [BETA, _grid_prior()], ids=["beta", "grid"])
def test_each_price_level_gets_the_grids_of_its_scaled_cost(prior):
    """Exact: a level's stop grid and plan are ``stop_grid`` and ``plan_grid`` at ``cost x 2^(L/8)``,
    and a token-priced round gives each prompt what a rollout-priced round at its level's cost does."""
    acfg = adaptive.AdaptiveConfig.from_specs("band", n_max=20, price_unit="tokens", prior="fit")
    for level in (-11, 0, 6):
        at = adaptive.priced_at(acfg, level)
        scaled = adaptive.Target(cost=0.001 * 2 ** (level / 8))
        assert at.target == scaled
        plain = adaptive.AdaptiveConfig(target=scaled, n_max=20, prior="fit")
        adaptive._MEMO.clear()  # the price-free tables, fresh for the reference
        want_stop = adaptive.stop_grid(prior, scaled, 20)
        want_plan = adaptive.plan_grid(prior, plain)
        assert (adaptive.stop_grid(prior, at.target, 20) == want_stop).all()
        assert (adaptive.plan_grid(prior, at) == want_plan).all()  # from the kept tables

    rng = np.random.default_rng(1)
    n = rng.integers(4, 12, 120)
    c = rng.binomial(n, rng.beta(0.6, 0.8, 120))
    price = np.exp(rng.normal(0.0, 0.3, 120))
    got = adaptive.next_round(n, c, prior, acfg, round_index=2, price=price)
    levels = adaptive.price_levels(price)
    for lv in np.unique(levels):
        idx = np.flatnonzero(levels == lv)
        plain = adaptive.AdaptiveConfig(target=adaptive.Target(cost=0.001 * 2 ** (lv / 8)), n_max=20, prior="fit")
        assert (got[idx] == adaptive.next_round(n[idx], c[idx], prior, plain, round_index=2)).all()
    # the same counts at four times the price and at a quarter: fewer samples, none to a prompt the cheap one stops
    dear = adaptive.next_round(n, c, prior, acfg, round_index=2, price=np.full(len(n), 4.0))
    cheap = adaptive.next_round(n, c, prior, acfg, round_index=2, price=np.full(len(n), 0.25))
    assert dear.sum() < cheap.sum() and not ((dear > 0) & (cheap == 0)).any()
    # without prices every prompt pays the rollout price
    ones = adaptive.next_round(n, c, prior, acfg, round_index=2)
    rollouts = adaptive.AdaptiveConfig(n_max=20, prior="fit")
    assert (ones == adaptive.next_round(n, c, prior, rollouts, round_index=2)).all()


def test_price_levels_are_a_ladder_of_eighth_doublings():
    price = np.exp(np.linspace(-3, 3, 1001))
    levels = adaptive.price_levels(price)
    ratio = price / 2.0 ** (levels / adaptive.PRICE_LEVELS_PER_DOUBLING)
    assert np.abs(np.log2(ratio)).max() <= 1 / 16 + 1e-12
    assert (adaptive.price_levels([1.0, 2.0, 0.5]) == [0, 8, -8]).all()
    with pytest.raises(ValueError, match="prompt 1: relative price 0.0"):
        adaptive.price_levels([1.0, 0.0])


def test_token_price_is_the_relative_price_of_the_answers_lengths():
    rng = np.random.default_rng(2)
    means, sizes = rng.uniform(100, 900, 40), rng.integers(0, 9, 40)
    answers = [rng.gamma(4.0, m / 4.0, k) for m, k in zip(means, sizes, strict=True)]
    k = np.array([len(a) for a in answers])
    tot = np.array([a.sum() for a in answers])
    sq = np.array([(a**2).sum() for a in answers])
    mean = np.array([a.mean() if len(a) else 0.0 for a in answers])
    sd = np.array([a.std(ddof=1) if len(a) > 1 else 0.0 for a in answers])
    np.testing.assert_allclose(adaptive.token_price(k, tot, sq), tokens.relative_price(k, mean, sd), rtol=1e-9)
    assert (adaptive.token_price(np.zeros(5), np.zeros(5), np.zeros(5)) == 1.0).all()


def test_pricing_tokens_spends_fewer_tokens_at_no_worse_loss():
    """Monte Carlo, paired (the same outcomes and lengths): on prompts whose answers run longer the
    harder they are, the token-priced rule spends fewer tokens than the rollout-priced one at the
    same cost, and its expected loss, misclassification + cost x tokens / m, is no worse."""
    rng = np.random.default_rng(3)
    N, n_max, cost = 800, 24, 0.002
    truth = priors.Prior(0.5, 0.5, method="truth")
    p = rng.beta(truth.a, truth.b, N)
    mean_len = 300.0 * (1.0 + 2.0 * (1.0 - p)) * np.exp(rng.normal(0.0, 0.3, N))
    outcomes = rng.random((N, n_max)) < p[:, None]
    lengths = rng.gamma(4.0, np.where(outcomes, 1.0, 1.3) * mean_len[:, None] / 4.0)
    m = float(lengths.mean())
    res = {}
    for unit in adaptive.PRICE_UNITS:
        acfg = adaptive.AdaptiveConfig.from_specs(f"band:cost={cost}", n_max=n_max, prior="fit", price_unit=unit)
        n, c, fitted = frontier.simulate(outcomes, acfg, lengths=lengths)
        spent = float((lengths * (np.arange(n_max) < n[:, None])).sum()) / N
        mis = frontier.expected_misclassification(
            n, c, adaptive.decide(n, c, fitted, acfg.target).band, truth, acfg.target
        )
        res[unit] = (spent, mis + cost * spent / m)
    assert res["tokens"][0] < 0.97 * res["rollouts"][0], res
    # the loss: equal within the Monte Carlo error of a misclassification over N prompts, or better
    assert res["tokens"][1] <= res["rollouts"][1] + 0.002, res


def test_price_unit_spec_round_trips_and_leaves_rollout_ids_alone():
    t = adaptive.Target.parse("band:cost=0.002,price_unit=tokens")
    assert t.price_unit == "tokens"
    assert t.spec == "band:lo=0.1,hi=0.9,delta=0.05,cost=0.002,price_unit=tokens"
    assert adaptive.Target.registered(t.spec) == t
    assert adaptive.Target().spec == "band:lo=0.1,hi=0.9,delta=0.05,cost=0.001"  # no price_unit: ids kept
    assert adaptive.Target.parse("band:price_unit=rollouts") == adaptive.Target()
    acfg = adaptive.AdaptiveConfig.from_specs("band", price_unit="tokens")
    assert adaptive.AdaptiveConfig.from_dict(acfg.to_dict()) == acfg
    plain = run.ProfileConfig.build(backend="simulate", adaptive="band")
    same = run.ProfileConfig.build(backend="simulate", adaptive="band", price_unit="rollouts")
    assert plain.to_dict() == same.to_dict()
    priced = run.ProfileConfig.build(backend="simulate", adaptive="band", price_unit="tokens")
    assert priced.adaptive.target.price_unit == "tokens" and priced.flat()["price_unit"] == "tokens"
    assert run.ProfileConfig.build(**priced.flat()) == priced
    for bad, match in [
        ({"adaptive": "width", "price_unit": "tokens"}, "price_unit=tokens prices a rollout of the band target"),
        ({"adaptive": "band:cost=0", "price_unit": "tokens"}, "cost=0"),
        ({"adaptive": "band", "price_unit": "seconds"}, "price_unit"),
        ({"price_unit": "tokens"}, "--price-unit: only with --adaptive"),
    ]:
        with pytest.raises(ConfigError, match=match):
            run.ProfileConfig.build(backend="simulate", **bad)
    with pytest.raises(ConfigError, match="contradicts"):
        adaptive.AdaptiveConfig.from_specs("band:price_unit=tokens", price_unit="rollouts")


def _profile(data: str, *extra: str):
    return CliRunner().invoke(
        app,
        ["profile", "--backend", "simulate", "--adaptive", "band", "--price-unit", "tokens", "--limit", "12"]
        + ["--n-max", "8", "--no-prefect", "--no-report", "--grade-workers", "1", "--data-dir", data, *extra],
    )


def test_cli_price_unit_tokens_end_to_end(tmp_path, close_engines):
    """``profile --adaptive band --price-unit tokens`` on the simulate backend finishes, its spec names
    the unit, and every stored answer's length reaches the round planner's counts."""
    data = tmp_path / "data"
    out = _profile(str(data))
    assert out.exit_code == 0, out.output
    assert "price_unit=tokens" in out.output
    store = Store.open(data)
    [run_id] = store.list_runs().column("run_id").to_pylist()
    rec = store.get_run(run_id)
    assert rec.adaptive.target.price_unit == "tokens"
    counts = finish.adaptive_counts(store, rec.run_id, rec.adaptive.n_min)
    assert counts.column("k_tok").to_pylist() == counts.column("n").to_pylist()  # simulate stores lengths


def test_without_lengths_every_prompt_pays_one_and_the_run_says_so(tmp_path, monkeypatch, caplog, close_engines):
    real = finish.adaptive_counts

    def no_lengths(*a, **k):
        t = real(*a, **k)
        for name in ("k_tok", "tok", "tok2"):
            t = t.set_column(t.schema.get_field_index(name), name, [np.zeros(t.num_rows)])
        return t

    monkeypatch.setattr(finish, "adaptive_counts", no_lengths)
    with caplog.at_level(logging.WARNING):
        out = _profile(str(tmp_path / "data"))
    assert out.exit_code == 0, out.output
    assert "carry no answer lengths" in caplog.text + out.output
