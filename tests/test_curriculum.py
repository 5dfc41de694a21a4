"""Curriculum policies (docs/curriculum.md): exact scores, Thompson frequencies, replay, CLI, errors."""

from __future__ import annotations

import json
import math

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pytest
from typer.testing import CliRunner

from pipeline import curriculum, estimators
from pipeline.cli import app
from pipeline.errors import ConfigError, DatasetError

runner = CliRunner()


def beta_grid(a: float, b: float, points: int = 400_001) -> tuple[np.ndarray, np.ndarray]:
    """A fine grid on (0, 1) and the Beta density on it (a, b >= 1: smooth, so the trapezoid is exact enough)."""
    p = np.linspace(0.0, 1.0, points)
    log_norm = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
    with np.errstate(divide="ignore", invalid="ignore"):
        left = 0.0 if a == 1 else (a - 1) * np.log(p)
        right = 0.0 if b == 1 else (b - 1) * np.log1p(-p)
        dens = np.exp(log_norm + left + right)
    return p, np.nan_to_num(dens)


def brute(a: float, b: float, f) -> float:
    p, dens = beta_grid(a, b)
    return float(np.trapezoid(dens * f(p), p))


# --- exact ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("a", "b", "G"), [(1.0, 1.0, 8), (2.5, 4.0, 8), (10.5, 3.5, 16), (30.0, 31.0, 4)])
def test_nonsilent_moments_match_the_beta_integral(a, b, G):
    mean, sd = curriculum.nonsilent_moments(np.array([a]), np.array([b]), G)
    want_mean = brute(a, b, lambda p: curriculum.nonsilent(p, G))
    want_second = brute(a, b, lambda p: curriculum.nonsilent(p, G) ** 2)
    assert mean[0] == pytest.approx(want_mean, abs=1e-8)
    assert sd[0] == pytest.approx(math.sqrt(want_second - want_mean**2), abs=1e-6)


@pytest.mark.parametrize("spec", ["grpo", "dr_grpo", "rloo", "grpo_bessel", "dapo"])
@pytest.mark.parametrize(("a", "b"), [(1.5, 2.0), (6.5, 2.5)])
def test_expected_mass_matches_quadrature(spec, a, b):
    G = 8
    est = estimators.get(spec)
    mean, sd = curriculum.expected_mass(np.array([a]), np.array([b]), G, spec)
    want_mean = brute(a, b, lambda p: est.mass(p, G))
    want_second = brute(a, b, lambda p: est.mass(p, G) ** 2)
    assert mean[0] == pytest.approx(want_mean, rel=1e-6, abs=1e-9)
    assert sd[0] == pytest.approx(math.sqrt(max(want_second - want_mean**2, 0.0)), rel=1e-4, abs=1e-7)


def test_closed_form_mass_agrees_with_the_quadrature_fallback():
    a, b = np.array([3.0, 0.5 + 40, 12.0]), np.array([4.0, 0.5 + 2, 12.0])
    mean, sd = curriculum.expected_mass(a, b, 8, "grpo")
    est = estimators.get("grpo")
    q_mean, q_sd = curriculum._mean_sd(a, b, lambda p: est.mass(p, 8))
    np.testing.assert_allclose(mean, q_mean, rtol=1e-6)
    np.testing.assert_allclose(sd, q_sd, rtol=1e-4)


# --- Monte Carlo ------------------------------------------------------------------------------------


def test_thompson_frequencies_match_the_probability_of_being_best():
    """k = 1 of two prompts: Thompson picks prompt 0 with P(s(p0) > s(p1)) under the posteriors."""
    G = 8
    n, c = np.array([6.0, 20.0]), np.array([2.0, 4.0])
    cfg = curriculum.SignalConfig(
        G=G, floor=0.0, forgetting=1.0, explore="thompson", prior="jeffreys", coverage=0.0
    )  # fmt: skip
    a, b = cfg.prior_a + c, cfg.prior_b + n - c
    # s is symmetric about 1/2 and grows towards it: s(p1) < s(p0) iff |p1 - 1/2| > |p0 - 1/2|.
    p, d0 = beta_grid(a[0], b[0], 200_001)
    _, d1 = beta_grid(a[1], b[1], 200_001)
    cdf1 = np.concatenate([[0.0], np.cumsum((d1[1:] + d1[:-1]) / 2 * np.diff(p))])
    dist = np.abs(p - 0.5)
    beyond = np.interp(0.5 - dist, p, cdf1) + 1.0 - np.interp(0.5 + dist, p, cdf1)
    want = float(np.trapezoid(d0 * beyond, p))
    policy = curriculum.SignalPolicy(["x", "y"], n, c, seed=7, config=cfg)
    draws = 6000
    hits = sum(policy.choose(1) == ["x"] for _ in range(draws))
    tol = 4 * math.sqrt(want * (1 - want) / draws)
    assert hits / draws == pytest.approx(want, abs=tol)


def synthetic_log(prompts: int = 300, steps: int = 30, G: int = 8, seed: int = 0) -> pa.Table:
    """U-shaped rates at the start, most prompts improving with noise; every prompt every step."""
    rng = np.random.default_rng(seed)
    p0 = np.clip(rng.beta(0.35, 0.35, prompts), 1e-4, 1 - 1e-4)
    logit = np.log(p0 / (1 - p0))
    rate = np.where(rng.random(prompts) < 0.7, rng.uniform(0.02, 0.2, prompts), 0.0)
    rows = {"step": [], "prompt_id": [], "n": [], "c": []}
    for t in range(steps):
        rows["step"] += [t] * prompts
        rows["prompt_id"] += [f"q{i}" for i in range(prompts)]
        rows["n"] += [G] * prompts
        rows["c"] += rng.binomial(G, 1 / (1 + np.exp(-logit))).tolist()
        logit = logit + rate + rng.normal(0, 0.1, prompts)
    return pa.table(rows)


def test_replay_default_beats_uniform_and_oracle_bounds_it():
    log = synthetic_log()
    uniform = curriculum.replay(log, "uniform", 40, seed=1)
    default = curriculum.replay(log, curriculum.DEFAULT_POLICY, 40, seed=1)
    oracle = curriculum.replay(log, "oracle", 40, seed=1)
    assert default["default"] and not uniform["default"]
    assert default["signal_yield"] > 1.2 * uniform["signal_yield"]
    assert oracle["signal_yield"] >= default["signal_yield"]
    assert default["coverage"] > 0.5
    assert {k: default[k] for k in ("steps", "batch_size")} == {"steps": 30, "batch_size": 40}


def test_replay_reads_a_prompts_groups_of_a_step():
    """A log in the observations' layout keeps a prompt's two groups of one step apart: prompt a had
    one silent group and one mixed, b one mixed. Picking both, 2 of 3 groups carry signal; the same
    rows without group_index are one group per prompt (summed, as a log without groups reads)."""
    rows = {"step": [1, 1, 1], "prompt_id": ["a", "a", "b"], "n": [8, 8, 8], "c": [8, 4, 4]}
    grouped = pa.table({**rows, "group_index": [0, 1, 0]})
    for policy in ("uniform", "oracle", curriculum.DEFAULT_POLICY):
        assert curriculum.replay(grouped, policy, 2)["signal_yield"] == pytest.approx(2 / 3)
        assert curriculum.replay(pa.table(rows), policy, 2)["signal_yield"] == 1.0
    got = curriculum.check_log(grouped).sort_by("prompt_id").to_pylist()
    assert [(r["n"], r["c"], r["groups"], r["signal_groups"]) for r in got] == [(16, 12, 2, 1), (8, 4, 1, 1)]
    # The oracle, picking one prompt, takes the one with a live group (a had two silent ones).
    assert curriculum.replay(pa.table({**rows, "group_index": [0, 1, 0], "c": [8, 8, 4]}), "oracle", 1)[
        "signal_yield"
    ] == pytest.approx(1.0)


def test_coverage_floor_picks_every_prompt_within_its_period():
    """floor * k slots go to the least recently picked, so each prompt waits at most ceil(N / slots) steps."""
    N, k, floor = 100, 20, 0.25
    slots = round(floor * k)
    period = math.ceil(N / slots)
    ids = [f"p{i}" for i in range(N)]
    policy = curriculum.SignalPolicy(
        ids, seed=3, config=curriculum.SignalConfig(floor=floor, explore="mean", cover="lru", coverage=0.0)
    )
    rng = np.random.default_rng(0)
    last = dict.fromkeys(ids, -1)
    for t in range(4 * period):
        picked = policy.choose(k)
        assert len(set(picked)) == k
        for p in picked:
            last[p] = t
        # Prompts 0..9 always half right: the score alone would take them every time.
        c = [4 if int(p[1:]) < 10 else int(rng.integers(0, 2)) * 8 for p in picked]
        policy.update(picked, [8] * k, c)
        assert all(t - last[p] < period for p in ids if t >= period - 1)


def test_same_seed_same_picks():
    log = synthetic_log(prompts=120, steps=12)
    for name in ("uniform", "signal", "signal:explore=optimism", "oracle"):
        assert curriculum.replay(log, name, 16, seed=5) == curriculum.replay(log, name, 16, seed=5)
    ids = [f"p{i}" for i in range(50)]
    a = curriculum.make_policy("signal", ids, seed=9)
    b = curriculum.make_policy("signal", ids, seed=9)
    other = curriculum.make_policy("signal", ids, seed=10)
    picks_a = [a.choose(8) for _ in range(5)]
    assert picks_a == [b.choose(8) for _ in range(5)]
    assert picks_a != [other.choose(8) for _ in range(5)]


def test_forgetting_discounts_counts_per_step():
    policy = curriculum.SignalPolicy(["a", "b"], config=curriculum.SignalConfig(forgetting=0.5))
    policy.update(["a"], [8], [2])
    policy.update(["b"], [4], [4])
    np.testing.assert_allclose(policy.n, [4.0, 4.0])
    np.testing.assert_allclose(policy.c, [1.0, 4.0])


def test_forecast_prefers_the_default_on_a_u_shaped_profile():
    rng = np.random.default_rng(0)
    p = rng.beta(0.35, 0.35, 500)
    n = np.full(500, 16)
    c = rng.binomial(16, p)
    out = curriculum.forecast(n, c, 64, config=curriculum.SignalConfig(G=8, prior="jeffreys"))
    mean, _ = curriculum.nonsilent_moments(0.5 + c, 0.5 + n - c, 8)
    assert out["uniform"] == pytest.approx(float(mean.mean()))
    assert out["default"] > out["uniform"] and out["ratio"] > 1


def test_bad_configs_name_the_field():
    with pytest.raises(ConfigError, match="floor"):
        curriculum.SignalConfig(floor=1.5)
    with pytest.raises(ConfigError, match="explore"):
        curriculum.make_policy("signal:explore=greedy", ["a"])
    with pytest.raises(ConfigError, match="unknown policy"):
        curriculum.make_policy("best", ["a"])


# --- CLI and bad input ------------------------------------------------------------------------------


@pytest.fixture
def small_log(tmp_path):
    path = tmp_path / "log.csv"
    pcsv.write_csv(synthetic_log(prompts=60, steps=12), path)
    return path


def test_cli_table_and_json(small_log):
    result = runner.invoke(app, ["replay", str(small_log), "--batch-size", "10"])
    assert result.exit_code == 0, result.output
    assert "signal (default)" in result.output and "oracle" in result.output
    result = runner.invoke(
        app, ["replay", str(small_log), "--batch-size", "10", "--format", "json", "--policies", "uniform,signal"]
    )
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [r["policy"] for r in rows] == ["uniform", "signal"]
    assert [r["default"] for r in rows] == [False, True]
    assert set(rows[0]) == {"policy", "default", "signal_yield", "coverage", "steps", "batch_size"}
    assert rows[1]["steps"] == 12 and rows[1]["batch_size"] == 10


def test_cli_reads_jsonl(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in synthetic_log(prompts=20, steps=3).to_pylist()) + "\n")
    result = runner.invoke(app, ["replay", str(path), "--batch-size", "5", "--format", "json"])
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.output)) == len(curriculum.ALL_POLICIES)


def test_bad_logs_are_named_errors(tmp_path):
    missing = tmp_path / "missing.csv"
    missing.write_text("step,prompt_id,n\n0,a,8\n")
    result = runner.invoke(app, ["replay", str(missing)])
    assert result.exit_code == 1
    assert "missing column(s) c" in result.output
    too_many = tmp_path / "too_many.csv"
    too_many.write_text("step,prompt_id,n,c\n0,a,8,3\n1,b,8,9\n")
    result = runner.invoke(app, ["replay", str(too_many)])
    assert result.exit_code == 1
    assert "n=8, c=9" in result.output and "'b'" in result.output
    with pytest.raises(DatasetError, match="missing column"):
        curriculum.replay(pa.table({"step": [0], "prompt_id": ["a"]}), "uniform", 1)


# --- one forgetting rule --------------------------------------------------------------------------


def test_forgetting_is_by_step_in_replay_trl_verl_and_current(store, monkeypatch):
    """Prompt logged at steps 0, 10, 20 (8/8, 0/8, 0/8), lambda = 0.9: every consumer keeps lambda^(T - s)."""
    from types import SimpleNamespace

    from pipeline.integrations import trl as rec
    from pipeline.integrations import trl_curriculum as cur
    from pipeline.integrations import verl_curriculum as vc
    from pipeline.observe import record
    from pipeline.observe.current import CurrentConfig, current_difficulty

    lam, steps, counts = 0.9, [0, 10, 20], [(8, 8), (8, 0), (8, 0)]
    want_n = sum(n * lam ** (20 - s) for s, (n, _) in zip(steps, counts, strict=True))
    want_c = sum(c * lam ** (20 - s) for s, (_, c) in zip(steps, counts, strict=True))
    assert want_n == pytest.approx(11.76, abs=0.01) and want_c == pytest.approx(0.97, abs=0.01)

    # replay: the policy it builds, caught on the way out
    built = []
    make = curriculum.make_policy
    monkeypatch.setattr(curriculum, "make_policy", lambda *a, **kw: built.append(make(*a, **kw)) or built[-1])
    log = pa.table({"step": steps, "prompt_id": ["a"] * 3, "n": [8] * 3, "c": [c for _, c in counts]})
    curriculum.replay(log, f"signal:forgetting={lam}", 1)
    assert (built[0].n[0], built[0].c[0]) == pytest.approx((want_n, want_c))

    # the TRL trainer's curriculum: the recorder's step reaches the policy
    import trl_fixtures as tf

    tf.store_prompts(store, "unit", ["a"])  # record_rewards checks the dataset is stored
    policy = curriculum.make_policy(f"signal:forgetting={lam}", ["a"])
    outcomes = [[1.0] * 8, [0.0] * 8, [0.0] * 8]
    recorder = rec.record_rewards(
        lambda prompts, completions, **kw: outcomes.pop(0), data_dir=store, source="trl:x", dataset="unit"
    )
    reward = cur.CurriculumReward(policy, recorder)
    for s in steps:
        reward(
            prompts=["q"] * 8, completions=["r"] * 8, completion_ids=[[0]] * 8, prompt_id=["a"] * 8,
            trainer_state=SimpleNamespace(global_step=s),
        )  # fmt: skip
    recorder.close()
    assert (policy.n[0], policy.c[0]) == pytest.approx((want_n, want_c))

    # current, on what the recorder wrote, and the verl hook reading it
    current = current_difficulty(record.read_observations(store), CurrentConfig(forgetting=lam)).to_pylist()
    assert (current[0]["n_eff"], current[0]["c_eff"]) == pytest.approx((want_n, want_c))
    schedule = vc.CurriculumSchedule(["a"], 1, policy=f"signal:forgetting={lam}")
    schedule.counts = vc.ObservedCounts(store, "unit", ["a"], forgetting=lam)
    schedule.next_row()
    assert (schedule.policy.n[0], schedule.policy.c[0]) == pytest.approx((want_n, want_c))
    assert schedule.policy.now == 20
    # one more step's outcome ages the read counts from step 20, not from the policy's own clock
    schedule.policy.update(["a"], [8], [4], step=21)
    assert schedule.policy.n[0] == pytest.approx(want_n * lam + 8)


# --- coverage target, population prior, baselines -------------------------------------------------


def test_coverage_target_is_met_every_step_by_the_best_due_prompts():
    """coverage=0.5: from step period - 1 on, at least half of the prompts were picked within the last
    period steps; prompts always silent are left out while the others can cover (one comes back now and
    then, once forgetting has widened its posterior to the population's: a few picks in a hundred, where
    picks blind to silence would give them 30 in a hundred)."""
    N, k, period = 100, 10, 10
    ids = [f"p{i}" for i in range(N)]
    cfg = curriculum.SignalConfig(coverage=0.5, period=period)
    policy = curriculum.SignalPolicy(ids, seed=1, config=cfg)
    rng = np.random.default_rng(0)
    picks: list[set[str]] = []
    for t in range(6 * period):
        chosen = policy.choose(k)
        picks.append(set(chosen))
        if t >= period - 1:
            assert len(set().union(*picks[-period:])) >= 0.5 * N
        # p0..p29 never solved, the rest half right
        c = [0 if int(p[1:]) < 30 else int(rng.binomial(8, 0.5)) for p in chosen]
        policy.update(chosen, [8] * k, c, step=t)
    silent = {f"p{i}" for i in range(30)}
    late = [p for step in picks[-2 * period :] for p in step]
    assert sum(p in silent for p in late) <= 0.05 * len(late)


def test_coverage_target_paces_the_first_window():
    """Step t < period owes (t + 1) / period of the target, not all of it at step 0: the prompts found
    teaching are picked from the next step on, with no batch given whole to coverage, and the target is met
    from step period - 1 on (the first batches all to due prompts would leave them waiting)."""
    N, k, period, good = 200, 40, 10, 20
    ids = [f"p{i}" for i in range(N)]
    policy = curriculum.SignalPolicy(ids, seed=2, config=curriculum.SignalConfig(coverage=0.5, period=period))
    rng = np.random.default_rng(0)
    picks: list[set[str]] = []
    found: set[str] = set()
    for t in range(3 * period):
        quota = policy._coverage_quota(k)
        chosen = policy.choose(k)
        picks.append(set(chosen))
        if t < period:
            assert quota <= math.ceil(0.5 * N * (t + 1) / period)
        assert found <= set(chosen)  # every prompt seen teaching is picked again
        if t >= period - 1:
            assert len(set().union(*picks[-period:])) >= 0.5 * N
        c = [int(rng.binomial(8, 0.5)) if int(p[1:]) < good else 0 for p in chosen]
        found |= {p for p, ci in zip(chosen, c, strict=True) if 0 < ci < 8}
        policy.update(chosen, [8] * k, c, step=t)
    assert found  # the test saw teaching prompts to wait or not


def test_population_prior_scores_are_the_fitted_grid_posterior():
    """prior=population: a prompt's posterior mean of s starts from the prior fitted on all counts."""
    from dataclasses import replace

    from pipeline import prior as priors

    rng = np.random.default_rng(2)
    N = 400
    p = np.where(rng.random(N) < 0.5, 0.0, rng.beta(2, 2, N))
    n = np.full(N, 8.0)
    n[:50] = 0  # never observed
    c = rng.binomial(8, p) * (n > 0)
    ids = [f"p{i}" for i in range(N)]
    policy = curriculum.SignalPolicy(ids, n, c, config=curriculum.SignalConfig())
    got = policy.scores(np.arange(N))
    fitted = priors.fit_grid_prior(n, c)
    nodes, w = fitted.grid()
    floor = curriculum.POPULATION_FLOOR
    fitted = replace(fitted, weights=tuple((1 - floor) * w + floor / len(w)))
    nodes, W = priors.posterior_nodes(fitted, n, c)
    s = 1 - nodes**8 - (1 - nodes) ** 8
    np.testing.assert_allclose(got, W @ s, rtol=1e-6, atol=1e-9)
    # an unobserved prompt gets the population's share of non-silent groups, not Jeffreys' 0.6
    assert got[0] == pytest.approx(float(W[0] @ s)) and got[0] < 0.45
    jeffreys, _ = curriculum.nonsilent_moments(np.array([0.5]), np.array([0.5]), 8)
    assert float(jeffreys[0]) > 0.55
    # A forgotten never-solved prompt (0 of 0.3 discounted) against one never picked: Jeffreys' prior
    # ranks the forgotten one higher, the population's lower.
    forgot, never = curriculum.nonsilent_moments(np.array([0.5, 0.5]), np.array([0.8, 0.5]), 8)[0]
    assert forgot > never
    n2, c2 = n.copy(), c.copy()
    n2[1], c2[1] = 0.3, 0  # prompt 0 never observed, prompt 1 forgotten
    pop = curriculum.SignalPolicy(ids, n2, c2, config=curriculum.SignalConfig()).scores(np.array([0, 1]))
    assert pop[1] < pop[0]


def test_baselines():
    ids = [f"p{i}" for i in range(6)]
    # bonus: mean + beta / sqrt(1 + n); unseen prompts first at a large beta
    bonus = curriculum.make_policy("bonus:beta=5", ids, n=[8, 8, 8, 0, 0, 0], c=[4, 4, 4, 0, 0, 0])
    assert sorted(bonus.choose(3)) == ["p3", "p4", "p5"]
    bonus = curriculum.make_policy("bonus:beta=0", ids, n=[8, 8, 8, 8, 8, 8], c=[4, 0, 8, 3, 0, 8])
    assert sorted(bonus.choose(2)) == ["p0", "p3"]
    # greso: two silent groups in a row and the prompt is skipped (explore=0)
    greso = curriculum.make_policy("greso:k=2,explore=0", ids, seed=3)
    greso.update(["p0", "p1"], [8, 8], [0, 8])
    greso.update(["p0", "p1"], [8, 8], [0, 4])
    for _ in range(5):
        assert "p0" not in greso.choose(5)
    # dapo at equal rollouts draws as uniform does
    log = synthetic_log(prompts=60, steps=6)
    same = [curriculum.replay(log, name, 10, seed=4)["signal_yield"] for name in ("uniform", "dapo")]
    assert same[0] == same[1]
    # greedy: the Jeffreys posterior mean, no coverage target
    greedy = curriculum.make_policy("greedy", ids)
    assert greedy.config.prior == "jeffreys" and greedy.config.coverage == 0 and greedy.config.explore == "mean"
    with pytest.raises(ConfigError, match="beta"):
        curriculum.make_policy("bonus:beta=-1", ids)
    with pytest.raises(ConfigError, match="greso"):
        curriculum.make_policy("greso:floor=1", ids)


# A posterior mean is a BLAS product of its row with the nodes' values; BLAS sums a row in an order that
# depends on where the row sits in the matrix (its blocks), so the per-prompt computation itself gave two
# prompts of one (n, c) pair means an ulp apart. The pairs' means agree with it to that rounding.
ULP_REL = 1e-15


class _PerPromptPolicy(curriculum.SignalPolicy):
    """The population scores as computed before they went by distinct (n, c) pair: one posterior row per prompt."""

    def _population_scores(self, cand, fitted):
        from pipeline.prior import posterior_nodes

        cfg = self.config
        with np.errstate(all="ignore"):
            nodes, W = posterior_nodes(fitted, self.n[cand], self.c[cand], degree=2 * cfg.G)
        f = curriculum.nonsilent(nodes, cfg.G) if self.estimator is None else self.estimator.mass(nodes, cfg.G)
        if cfg.explore == "thompson":
            u = self.rng.random(len(cand))[:, None]
            return f[np.minimum((np.cumsum(W, axis=1) < u).sum(axis=1), len(nodes) - 1)]
        mean = W @ f
        if cfg.explore == "mean":
            return mean
        return mean + cfg.kappa * np.sqrt(np.maximum(W @ f**2 - mean**2, 0.0))


def _u_profile(seed: int, prompts: int, n: int = 8) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    p = np.where(rng.random(prompts) < 0.4, 0.0, rng.beta(0.5, 0.5, prompts))
    counts = np.full(prompts, float(n))
    counts[: prompts // 20] = 0  # never observed
    return counts, rng.binomial(n, p) * (counts > 0).astype(float)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_forecast_by_distinct_pairs_equals_the_per_prompt_posteriors(seed):
    """The forecast (and the report's training table) computes each posterior once per distinct (n, c) pair:
    the same numbers as one posterior per prompt."""
    n, c = _u_profile(seed, 6000)
    got = curriculum.forecast(n, c, 256, G=8, seed=seed, draws=6)
    # To the rounding of a BLAS product (ULP_REL): the rest of the sums and every pick are the same.
    assert got == pytest.approx(_forecast_before(n, c, 256, seed=seed, draws=6), rel=ULP_REL, abs=0)
    assert got["default"] > got["uniform"]
    config = curriculum.SignalConfig(explore="thompson", objective="mass", coverage=0.5)
    got = curriculum.forecast(n, c, 256, config=config, seed=seed, draws=4)
    assert got == pytest.approx(_forecast_before(n, c, 256, config=config, seed=seed, draws=4), rel=ULP_REL, abs=0)


def _forecast_before(n, c, batch_size, *, config=None, seed=0, draws=32):
    """``curriculum.forecast``'s loop before it reused one policy: a policy built afresh per draw, one posterior
    per prompt."""
    from dataclasses import replace

    config = config or curriculum.SignalConfig()
    ids = [str(i) for i in range(len(n))]
    judge = _PerPromptPolicy(ids, n, c, config=replace(config, explore="mean", objective="nonsilent"))
    ns = judge.scores(np.arange(len(n)))
    total = 0.0
    for r in range(draws):
        policy = _PerPromptPolicy(ids, n, c, seed=seed + r, config=config)
        total += float(ns[policy.choose_index(batch_size, np.arange(len(n)))].mean())
    default, uniform = total / draws, float(ns.mean())
    return {"uniform": uniform, "default": default, "ratio": default / uniform, "batch_size": batch_size,
            "G": config.G, "prompts": len(n)}  # fmt: skip


@pytest.mark.parametrize(
    "spec", ["signal", "signal:explore=thompson", "signal:explore=optimism,kappa=0.5", "signal:objective=mass"]
)
@pytest.mark.parametrize("seed", [3, 4])
def test_population_scores_by_distinct_pairs_keep_every_pick_and_draw(spec, seed):
    """Whole and discounted (fractional) counts, every exploration: the same scores and picks, step after step,
    as one posterior per prompt (Thompson's draws included: one uniform per prompt, as before)."""
    n, c = _u_profile(seed, 3000, n=4)
    ids = [f"p{i}" for i in range(len(n))]
    new = curriculum.make_policy(spec, ids, n, c, seed=seed)
    old = _PerPromptPolicy(ids, n, c, seed=seed, config=new.config)
    rng = np.random.default_rng(seed)
    truth = rng.beta(0.5, 0.5, len(ids))
    for step in range(6):
        cand = np.sort(rng.choice(len(ids), 2000, replace=False))
        picked = new.choose_index(128, cand)
        np.testing.assert_array_equal(picked, old.choose_index(128, cand))
        outcome = rng.binomial(8, truth[picked]).astype(float)
        for policy in (new, old):
            policy.update_index(picked, np.full(len(picked), 8.0), outcome, step)
    assert not np.array_equal(new.n, np.rint(new.n))  # the counts were discounted: fractional pairs
    np.testing.assert_allclose(new.scores(np.arange(len(ids))), old.scores(np.arange(len(ids))), rtol=ULP_REL, atol=0)


def test_distinct_pairs_of_whole_and_fractional_counts():
    n = np.array([8.0, 8.0, 4.0, 0.5, 0.5, 8.0])
    c = np.array([3.0, 3.0, 4.0, 0.25, 0.25, 0.0])
    n_u, c_u, inv = curriculum.distinct_pairs(n, c)
    np.testing.assert_array_equal(n_u[inv], n)
    np.testing.assert_array_equal(c_u[inv], c)
    assert len(n_u) == 4
    n_u, c_u, inv = curriculum.distinct_pairs(n[:3], c[:3])  # whole counts: stats.unique_pairs' order
    assert (n_u.tolist(), c_u.tolist(), inv.tolist()) == ([4.0, 8.0], [4.0, 3.0], [1, 1, 0])


@pytest.mark.parametrize("seed", range(4))
def test_first_by_is_lexsorts_head(seed):
    """The coverage picks' order (due first, then by score) without a full sort: lexsort's, ties included."""
    rng = np.random.default_rng(seed)
    for size in (1, 7, 300, 5000):
        key = rng.integers(0, 5, size).astype(float) / 4  # many ties
        key[rng.random(size) < 0.3] = 0.0  # more ties
        group = rng.random(size) < rng.random()
        for m in (0, 1, 3, size // 2, size - 1, size, size + 2):
            np.testing.assert_array_equal(curriculum.first_by(key, group, m), np.lexsort((key, group))[:m])
    key = np.array([0.5, np.nan, 0.1, 0.1])
    np.testing.assert_array_equal(curriculum.first_by(key, np.zeros(4, bool), 2), [2, 3])
