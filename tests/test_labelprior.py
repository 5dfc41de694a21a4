"""The label prior (pipeline/labelprior.py), its run end to end, and frontier_gap's peers at equal tokens."""

from __future__ import annotations

import importlib.util
import logging
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy.special import expit, logit
from typer.testing import CliRunner

from pipeline import adaptive, finish, labelprior, schema
from pipeline import prior as priors
from pipeline.cli import app
from pipeline.errors import ConfigError
from pipeline.store import Store

ROOT = Path(__file__).resolve().parents[1]


def _bench(name: str):
    sys.path.insert(0, str(ROOT / "bench"))
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_label_bins_by_value_by_quantile_and_missing():
    assert labelprior.label_bins([0.5, None, 0.25, 0.5, float("nan")]).tolist() == [1, -1, 0, 1, -1]
    x = np.arange(100.0)
    b = labelprior.label_bins(x, bins=4)
    assert b.tolist() == [k // 25 for k in range(100)]
    with pytest.raises(ConfigError, match="no prompt has one"):
        labelprior.label_bins([None, None])


def test_bin_prior_is_the_penalised_maximum_on_two_points():
    """On a grid of two points the fit's mass maximises the bin's log-likelihood plus the pull, found
    here by a fine scan (the objective is concave in the mass)."""
    points, w0 = np.array([0.2, 0.7]), np.array([0.3, 0.7])
    n, c = np.array([4, 4, 4, 4, 4]), np.array([0, 1, 1, 3, 4])
    pull = 3.0
    w = labelprior.fit_bin_prior(n, c, points, w0, pull=pull, max_sweeps=10_000)
    s = np.linspace(1e-6, 1 - 1e-6, 200_001)
    like = np.stack([points[0] ** c * (1 - points[0]) ** (n - c), points[1] ** c * (1 - points[1]) ** (n - c)])
    obj = np.log(s[:, None] * like[0] + (1 - s[:, None]) * like[1]).sum(1) + pull * (
        w0[0] * np.log(s) + w0[1] * np.log(1 - s)
    )
    assert w[0] == pytest.approx(s[np.argmax(obj)], abs=2e-5)
    # no counts' worth against an infinite pull: the population's masses
    assert labelprior.fit_bin_prior(n, c, points, w0, pull=1e12) == pytest.approx(w0, abs=1e-9)


def test_label_posteriors_average_to_the_truth_in_every_bin():
    """Monte Carlo: prompts with rates from a mixture like the edge-hard truth, a label from another
    model (8 answers at a noisy affine logit of the rate), 4 samples each; within every label bin the
    posterior means under the bin's prior average to the bin's mean true rate (calibrated), and they
    do better than the population prior's (the label carries information)."""
    rng = np.random.default_rng(3)
    N = 6000
    kind = rng.choice(3, N, p=[0.15, 0.4, 0.45])
    p = np.where(kind == 0, 0.0, np.where(kind == 1, rng.uniform(0.01, 0.2, N), rng.beta(1.5, 1.5, N)))
    labels = rng.binomial(8, expit(0.5 + logit(np.clip(p, 0.002, 0.998)) + rng.normal(0, 1.0, N))) / 8
    n = np.full(N, 4)
    c = rng.binomial(4, p)
    lp = labelprior.fit_label_priors(n, c, labelprior.label_bins(labels))
    pooled = adaptive.posterior_mean(n, c, lp.population)
    err_l = err_p = 0.0
    for prior, idx in lp.groups():
        if len(idx) < 300:
            continue
        mean = adaptive.posterior_mean(n[idx], c[idx], prior)
        se = p[idx].std() / np.sqrt(len(idx))
        assert abs(mean.mean() - p[idx].mean()) < 3 * se + 0.01
        err_l += ((mean - p[idx]) ** 2).sum()
        err_p += ((pooled[idx] - p[idx]) ** 2).sum()
    assert err_l < 0.9 * err_p


def test_label_rounds_are_the_bins_own_rounds():
    """The round rule under the label prior is the rule under each bin's prior on that bin's prompts;
    one bin (every label equal) is the population prior pulled to itself: the ordinary round."""
    rng = np.random.default_rng(5)
    p = rng.beta(0.5, 0.8, 300)
    n = np.full(300, 4)
    c = rng.binomial(4, p)
    acfg = adaptive.AdaptiveConfig.from_specs("band", 4, 24)
    one = labelprior.fit_label_priors(n, c, np.zeros(300, np.int64))
    w_pop = np.asarray(one.population.weights)
    assert np.asarray(one.priors[0].weights) == pytest.approx(w_pop, abs=0.02)
    bins = (p > 0.5).astype(np.int64)
    lp = labelprior.fit_label_priors(n, c, bins)
    extra = labelprior.next_round(n, c, lp, acfg, round_index=1)
    for b in (0, 1):
        idx = np.flatnonzero(bins == b)
        assert extra[idx].tolist() == adaptive.next_round(n[idx], c[idx], lp.priors[b], acfg, round_index=1).tolist()


def test_peers_spend_the_default_runs_tokens():
    """sGPO's single pass and Pilot-Commit at equal tokens: each spends at most the budget and less
    than one more answer short of it; sGPO's n differ by at most one; Pilot-Commit leaves silent
    pilots at the pilot and gives the others equal samples give or take one."""
    fg = _bench("frontier_gap")
    rng = np.random.default_rng(11)
    N, top = 300, 64
    p = rng.beta(0.5, 0.8, N)
    outcomes = rng.random((N, top)) < p[:, None]
    tokens = fg.truths.LENGTHS.draw(fg.truths.LENGTHS.right_means(p, rng), outcomes, rng)
    cum = np.concatenate([np.zeros((N, 1)), np.cumsum(tokens, axis=1)], axis=1)
    rows = np.arange(N)
    n_default = rng.integers(4, 40, N)
    budget = float(cum[rows, n_default].sum())
    n = fg.sgpo_at_tokens(cum, budget, rng.permutation(N))
    spent = cum[rows, n].sum()
    assert spent <= budget and budget - spent < tokens.max() and n.max() - n.min() <= 1
    c4 = outcomes[:, :4].sum(1)
    n = fg.pilot_commit_at_tokens(cum, c4, 4, budget)
    spent = cum[rows, n].sum()
    live = (c4 > 0) & (c4 < 4)
    assert spent <= budget and budget - spent < tokens.max()
    assert (n[~live] == 4).all() and n[live].max() - n[live].min() <= 1


runner = CliRunner()


def _bigmath(path: Path, rates: np.ndarray, labelled: bool) -> None:
    cols = {
        "problem": [f"What is {k} + 1?" for k in range(len(rates))],
        "answer": [str(k + 1) for k in range(len(rates))],
    }
    if labelled:  # Big-Math's layout
        cols["source"], cols["domain"] = ["amc"] * len(rates), [["Algebra"]] * len(rates)
        cols["llama8b_solve_rate"] = np.clip(rates + 0.1, 0, 1).round(3).tolist()
    pq.write_table(pa.table(cols), path)


@pytest.mark.slow  # a profile run per case: ~30 s of CPU each here
@pytest.mark.parametrize("labelled", [True, False])
def test_profile_with_the_label_prior_end_to_end(tmp_path, caplog, labelled):
    """``--adaptive-prior labels`` on a dataset carrying another model's solve rates runs its rounds
    under the label bins' priors; on a dataset without labels it runs under the population prior and
    says so."""
    N = 48
    rates = np.random.default_rng(2).choice([0.0, 0.05, 0.5, 1.0], N)
    data = tmp_path / ("bigmath.parquet" if labelled else "plain.parquet")
    _bigmath(data, rates, labelled)
    store = Store.open(tmp_path / "data")
    from pipeline import datasets

    ids = datasets.load(data_file=data).problems.column("prompt_id")
    pq.write_table(pa.table({"prompt_id": ids, "pass_rate": rates}), tmp_path / "rates.parquet")
    args = ["profile", "--backend", "simulate", "--no-prefect", "--data-file", str(data), "--adaptive", "band"]
    args += ["--adaptive-prior", "labels", "--pass-rates", str(tmp_path / "rates.parquet"), "--grade-workers", "1"]
    args += ["--n-max", "16", "--max-tokens", "24", "--shard-size", str(N)]  # one shard a round: seconds
    with caplog.at_level(logging.INFO, logger="pipeline.run.rounds"):
        out = runner.invoke(app, [*args, "--no-report", "--data-dir", str(store.root)])
    assert out.exit_code == 0, out.output
    run = store.get_run(store.list_runs().column("run_id")[0].as_py())
    assert run.status == "done" and run.adaptive.prior == "labels" and len(run.rounds) >= 2
    said = caplog.text
    if labelled:
        assert "label prior on prior_c / prior_n" in said and "needs labels" not in said
    else:
        assert "the label prior needs labels" in said and "population prior (auto)" in said
    assert priors.PRIORS[-1] == "labels"
    # the stored bands are decided as the rounds decided: under each prompt's label bin's prior
    ps = store.read_table("prompt_stats", {"run_id": run.run_id})
    n, c = (ps.column(k).to_numpy().astype(np.int64) for k in ("n", "c"))
    lp = finish.run_label_priors(store, run, ps.select(["prompt_id", "n", "c"]), run.prior)
    assert (lp is not None) == labelled
    expect = adaptive.decide(n, c, run.prior, run.adaptive.target) if lp is None else None
    bands = labelprior.decide(n, c, lp, run.adaptive.target) if lp is not None else expect.band
    assert ps.column("decided_band").to_pylist() == [schema.BANDS[b] for b in bands.tolist()]
