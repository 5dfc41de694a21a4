"""Current difficulty from observations (docs/observations.md): exact values against brute-force
sums and quadrature, and Monte Carlo against a known truth (a pass rate that drifts, two models that
measure the same rates, a profile that training then samples)."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
from scipy import integrate
from scipy.stats import beta as beta_dist

from pipeline.errors import ConfigError
from pipeline.observe import record
from pipeline.observe.current import (
    CurrentConfig,
    current_difficulty,
    label_agreement,
    moved_prompts,
    profile_vs_training,
)
from pipeline.schema import BANDS


def _obs(rows, kind="training", source="verl:run", dataset="d"):
    """rows: (step, prompt_id, n, c)."""
    parts = []
    for step in sorted({r[0] for r in rows}):
        these = [r for r in rows if r[0] == step]
        parts.append(
            record.observation_rows(
                source, kind, step, dataset, [r[1] for r in these], [r[2] for r in these], [r[3] for r in these], "m"
            )
        )
    return pa.concat_tables(parts)


def test_no_forgetting_is_the_pooled_posterior():
    obs = _obs([(0, "a", 8, 2), (1, "a", 8, 5), (2, "a", 4, 4), (1, "b", 8, 0)])
    got = {r["prompt_id"]: r for r in current_difficulty(obs, CurrentConfig(forgetting=1.0)).to_pylist()}
    a, b = 0.5 + 11, 0.5 + 20 - 11
    assert got["a"]["n_obs"] == 20 and got["a"]["c_obs"] == 11 and got["a"]["last_step"] == 2
    assert got["a"]["post_mean"] == pytest.approx(a / (a + b), rel=1e-12)
    assert got["a"]["post_lo"] == pytest.approx(beta_dist.ppf(0.025, a, b), rel=1e-9)
    assert got["a"]["post_hi"] == pytest.approx(beta_dist.ppf(0.975, a, b), rel=1e-9)
    assert got["b"]["post_mean"] == pytest.approx(0.5 / 9, rel=1e-12)


def test_current_reads_a_prompts_groups():
    """Prompt a had two groups of 4 at step 1 (one all right, one mixed) and one silent group at step 2,
    after a profile of 16: its posterior is that of the summed counts, and it says 3 training groups, 2
    of them silent (the profile's counts are not a group)."""
    profile = record.observation_rows("profile:r", "profile", 0, "d", ["a"], [16], [0], None)
    step1 = record.observation_rows("verl:run", "training", 1, "d", ["a", "a"], [4, 4], [4, 2], None, None, [0, 1])
    step2 = record.observation_rows("verl:run", "training", 2, "d", ["a"], [4], [0], None, None, [0])
    config = CurrentConfig(forgetting=1.0)
    (got,) = current_difficulty(pa.concat_tables([profile, step1, step2]), config).to_pylist()
    assert (got["n_obs"], got["c_obs"], got["groups"], got["silent_groups"]) == (28, 6, 3, 2)
    merged = record.observation_rows("verl:run", "training", 1, "d", ["a"], [8], [6], None)
    (one,) = current_difficulty(pa.concat_tables([profile, merged, step2]), config).to_pylist()
    assert one["post_mean"] == got["post_mean"] and (one["groups"], one["silent_groups"]) == (2, 1)


def test_forgetting_discounts_by_age_from_the_latest_step():
    lam = 0.5
    obs = _obs([(0, "a", 8, 8), (2, "a", 8, 0), (1, "b", 4, 1)])
    got = {r["prompt_id"]: r for r in current_difficulty(obs, CurrentConfig(forgetting=lam)).to_pylist()}
    # the latest step of the dataset is 2: a's step 0 counts lam^2, b's step 1 counts lam
    assert got["a"]["n_eff"] == pytest.approx(8 * lam**2 + 8)
    assert got["a"]["c_eff"] == pytest.approx(8 * lam**2)
    assert got["b"]["n_eff"] == pytest.approx(4 * lam) and got["b"]["c_eff"] == pytest.approx(lam)
    a, b = 0.5 + 8 * lam**2, 0.5 + 8
    assert got["a"]["post_mean"] == pytest.approx(a / (a + b), rel=1e-12)


@pytest.mark.parametrize("lam", [1.0, 0.7])
def test_silent_probability_is_the_posterior_expectation(lam):
    """E[p^G + (1-p)^G] under the discounted posterior, against quadrature of the Beta density."""
    obs = _obs([(0, "a", 16, 3), (3, "a", 8, 6)])
    G = 8
    row = current_difficulty(obs, CurrentConfig(forgetting=lam, group_size=G)).to_pylist()[0]
    a, b = 0.5 + row["c_eff"], 0.5 + row["n_eff"] - row["c_eff"]
    want, _ = integrate.quad(lambda p: (p**G + (1 - p) ** G) * beta_dist.pdf(p, a, b), 0, 1, epsabs=1e-13)
    assert row["silent"] == pytest.approx(want, rel=1e-8)


def test_forgetting_tracks_a_drifting_pass_rate():
    """Monte Carlo: a pass rate that rises from 0.2 to 0.7 over 60 steps, 8 rollouts a step. At the
    end the discounted posterior mean is far nearer the truth than the pooled one; on a linear
    trend it lags by the weights' mean age, lambda / (1 - lambda) steps (9 at lambda = 0.9)."""
    rng = np.random.default_rng(7)
    steps, prompts, n = 60, 400, 8
    truth = np.linspace(0.2, 0.7, steps)
    rows = []
    for s in range(steps):
        c = rng.binomial(n, truth[s], prompts)
        rows += [(s, f"p{i}", n, int(c[i])) for i in range(prompts)]
    obs = _obs(rows)
    pooled = current_difficulty(obs, CurrentConfig(forgetting=1.0)).column("post_mean").to_numpy()
    recent_cfg = CurrentConfig()  # the default, FORGETTING = 0.9
    recent = current_difficulty(obs, recent_cfg)
    err_pooled = np.mean((pooled - truth[-1]) ** 2)
    err_recent = np.mean((recent.column("post_mean").to_numpy() - truth[-1]) ** 2)
    assert err_recent < err_pooled / 5
    slope = truth[1] - truth[0]
    lagged = truth[-1] - slope * 0.9 / (1 - 0.9)
    assert abs(np.mean(recent.column("post_mean").to_numpy()) - lagged) < 0.01
    with pytest.raises(ConfigError, match="forgetting=1.5"):
        CurrentConfig(forgetting=1.5)


def test_labels_are_not_pooled_unless_asked():
    obs = pa.concat_tables([_obs([(0, "a", 8, 8)]), _obs([(0, "a", 64, 0)], kind="label", source="label:llama8b")])
    own = current_difficulty(obs).to_pylist()[0]
    assert own["n_obs"] == 8 and own["sources"] == 1
    both = current_difficulty(obs, CurrentConfig(kinds=("training", "label"))).to_pylist()[0]
    assert both["n_obs"] == 72 and both["sources"] == 2


def test_moved_prompts_name_what_became_easy_or_hard():
    obs = _obs(
        [(0, "a", 16, 0), (5, "a", 16, 16), (0, "b", 16, 8), (5, "b", 16, 8), (3, "c", 16, 16)]
        + [(0, "d", 16, 8), (5, "d", 16, 16)]
    )
    moved = moved_prompts(obs, CurrentConfig(forgetting=0.1)).to_pylist()
    got = [(r["prompt_id"], r["before"], r["now"]) for r in moved]
    assert got == [("a", "hard", "easy"), ("d", "informative", "easy")]
    assert {band for _, *bands in got for band in bands} <= set(BANDS)  # the profile tables' names


def test_a_calibrated_profile_predicts_what_training_sees():
    """Monte Carlo: the profile (16 samples a prompt) and training (groups of 8 at 20 steps) draw
    from the same pass rates: in every bin the predicted pass rate and silent share agree with
    what training observed, within Monte Carlo error."""
    rng = np.random.default_rng(3)
    prompts = 2000
    p = rng.beta(0.6, 0.6, prompts)
    prof = rng.binomial(16, p)
    rows = [(0, f"p{i}", 16, int(prof[i])) for i in range(prompts)]
    obs = [_obs(rows, kind="profile", source="profile:r1")]
    train = []
    for s in range(1, 21):
        c = rng.binomial(8, p)
        train += [(s, f"p{i}", 8, int(c[i])) for i in range(prompts)]
    obs.append(_obs(train, source="verl:run"))
    table = profile_vs_training(pa.concat_tables(obs), "profile:r1", "verl:run", bins=5).to_pylist()
    assert len(table) == 5
    for r in table:
        assert r["observed_pass_rate"] == pytest.approx(r["predicted_pass_rate"], abs=0.02)
        assert r["observed_silent"] == pytest.approx(r["predicted_silent"], abs=0.03)


def test_two_models_measuring_the_same_rates_agree_at_the_level():
    """Monte Carlo: two labels (64 and 16 rollouts) of the same pass rates agree within binomial
    noise on about 95% of prompts; labels of shifted rates agree far less."""
    rng = np.random.default_rng(11)
    prompts = 3000
    p = rng.uniform(0.15, 0.85, prompts)
    first = _obs([(0, f"p{i}", 64, int(k)) for i, k in enumerate(rng.binomial(64, p))], "label", "label:a")
    second = _obs([(0, f"p{i}", 16, int(k)) for i, k in enumerate(rng.binomial(16, p))], "label", "label:b")
    shifted = _obs(
        [(0, f"p{i}", 16, int(k)) for i, k in enumerate(rng.binomial(16, np.clip(p + 0.3, 0, 1)))], "label", "label:c"
    )
    obs = pa.concat_tables([first, second, shifted])
    same = label_agreement(obs, "label:a", "label:b")
    assert same["prompts"] == prompts and 0.92 <= same["share"] <= 0.975
    assert label_agreement(obs, "label:a", "label:c")["share"] < 0.6
    assert math.isclose(same["level"], 0.95)


def _mixture_compare(profile_n: int, seed: int) -> tuple[list[dict], int]:
    """30% of prompts at 0, 25% at 1, 45% Beta(2, 2); 4,000 prompts profiled at ``profile_n``;
    training draws groups of 8 from the profile's own rates at two steps, a quarter of the prompts
    given a second group at the second step (stored as two groups). The ``--compare`` table, and
    the training groups drawn."""
    rng = np.random.default_rng(seed)
    prompts = 4000
    kind = rng.choice(3, size=prompts, p=[0.3, 0.25, 0.45])
    p = np.where(kind == 0, 0.0, np.where(kind == 1, 1.0, rng.beta(2, 2, prompts)))
    ids = [f"p{i}" for i in range(prompts)]
    prof = rng.binomial(profile_n, p).tolist()
    obs = [record.observation_rows("profile:r", "profile", 0, "d", ids, [profile_n] * prompts, prof, "m")]
    twice = prompts // 4
    for step, extra in ((1, 0), (2, twice)):
        pids = ids + ids[:extra]
        c = np.r_[rng.binomial(8, p), rng.binomial(8, p[:extra])].tolist()
        groups = [0] * prompts + [1] * extra
        obs.append(
            record.observation_rows("verl:run", "training", step, "d", pids, [8] * len(pids), c, "m", None, groups)
        )
    table = profile_vs_training(pa.concat_tables(obs), "profile:r", "verl:run", bins=5).to_pylist()
    return table, 2 * prompts + twice


@pytest.mark.parametrize("profile_n", [4, 16])
def test_compare_is_calibrated_on_a_mixture_with_atoms(profile_n):
    """The profile's prediction of every bin, pass rate and silent share, lies within three standard
    deviations of its predictive noise (the groups' binomial noise, a prompt's groups sharing its
    rate, and the fitted prior's uncertainty), over three datasets drawn from one truth. At n = 4
    the fitted prior alone (binomial noise only) put bins 4 to 5 standard deviations out on two of
    these three seeds: neither the family (Beta or inflated Beta) nor the inflated Beta's
    concentration is identified by four answers a prompt. ``groups`` counts groups, not prompt-steps."""
    for seed in range(3):
        table, drawn = _mixture_compare(profile_n, seed)
        assert {r["bin_lo"] for r in table} >= {0.0, 0.8}
        assert sum(r["groups"] for r in table) == drawn and sum(r["prompts"] for r in table) == 4000
        for r in table:
            for name, sd in (("pass_rate", r["pass_rate_sd"]), ("silent", r["silent_sd"])):
                z = (r[f"observed_{name}"] - r[f"predicted_{name}"]) / sd
                assert abs(z) <= 3.0, (seed, name, z, r)
            # The noise stays a measurement: binomial noise alone at n = 16, the prior's range at n = 4.
            assert r["silent_sd"] < (0.02 if profile_n == 16 else 0.2), r
