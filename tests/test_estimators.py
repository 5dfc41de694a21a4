"""Estimator math, checked twice: exactly (closed form vs brute-force sums) and by Monte Carlo."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from pipeline import estimators as est
from pipeline.errors import ConfigError

ALL_SPECS = est.DEFAULT_ESTIMATORS + (
    "grpo_bessel:eps=0",
    "grpo_bessel:eps=1e-6",
    "grpo_bessel:trainer=verl",
    "grpo_bessel:trainer=verl,eps=0",
    "softmax_grpo:tau=0.3",
    "softmax_grpo:tau=5",
    "dapo:mode=resample,T=2",
    "grpo_passk",
    "grpo_passk:norm=false",
    "grpo_passk:eps=0",
)
P_INNER = np.array([0.01, 0.1, 0.3, 0.5, 0.77, 0.95, 0.999])


def brute_force_weight(e: est.Estimator, p: float, G: int) -> float:
    """E[g] / grad p by enumerating all 2^G reward vectors of a Bernoulli-logit policy.

    With p = sigmoid(theta) the score of a reward r is r - p and grad p = p q; this uses the
    estimator's advantages directly, not the leave-one-out derivation.
    """
    q = 1 - p
    rewards = np.array(list(itertools.product((0, 1), repeat=G)))
    k = rewards.sum(axis=1)
    prob = p**k * q ** (G - k)
    adv = e.advantages(rewards)
    g = (adv * (rewards - p)).mean(axis=1)
    return float(prob @ g) / (p * q)


@pytest.mark.parametrize("spec", ALL_SPECS)
def test_weight_closed_form_matches_leave_one_out_and_enumeration(spec):
    e = est.get(spec)
    for G in range(1, 9):
        if e.name == "grpo_passk" and G == 1:
            with pytest.raises(ConfigError, match="G >= 2"):
                e.weight(P_INNER, G)  # verl raises for a group of one
            continue
        w = e.weight(P_INNER, G)
        closed = e.weight_closed_form(P_INNER, G)
        np.testing.assert_allclose(w, closed, rtol=1e-10, atol=1e-12, err_msg=f"{spec} G={G}")
        if isinstance(e, est.DAPO) and e.mode == "resample":
            continue  # resampling is not a per-group advantage; its factor is checked below
        for p in (0.1, 0.5, 0.8):
            bf = brute_force_weight(e, p, G)
            assert abs(bf - e.weight(p, G)) <= 1e-10 * max(1.0, abs(bf)), (spec, G, p)


def test_spec_table_values():
    p = P_INNER
    q = 1 - p
    G = 7
    np.testing.assert_allclose(est.get("dr_grpo").weight(p, G), (G - 1) / G)
    np.testing.assert_allclose(est.get("rloo").weight(p, G), 1.0)
    np.testing.assert_allclose(est.get("sign").weight(p, G), 2.0)
    np.testing.assert_allclose(est.get("maxrl").weight(p, G), (1 - q**G) / p)
    np.testing.assert_allclose(est.get("maxrl_impl").weight(p, G), (1 - q ** (G - 1)) / p)
    np.testing.assert_allclose(est.get("reco_binary").weight(p, G), (1 - p**G - q**G) / (4 * p * q))
    np.testing.assert_allclose(est.get("grpo_passk").weight(p, G), q ** (G - 1) / (1 / np.sqrt(G) + 1e-6))
    np.testing.assert_allclose(est.get("grpo_passk:norm=false").weight(p, G), q ** (G - 1))
    # mass = w p q
    for spec in ALL_SPECS:
        e = est.get(spec)
        np.testing.assert_allclose(e.mass(p, G), e.weight(p, G) * p * q)


def test_sign_all_wrong_groups_carry_q_pow_g_minus_1():
    """The part of Sign's weight 2 that comes from all-wrong groups is q^(G-1)."""
    e = est.get("sign")
    G, p = 6, 0.3
    q = 1 - p
    rewards = np.array(list(itertools.product((0, 1), repeat=G)))
    k = rewards.sum(axis=1)
    prob = p**k * q ** (G - k)
    g = (e.advantages(rewards) * (rewards - p)).mean(axis=1)
    from_all_wrong = prob[k == 0] @ g[k == 0] / (p * q)
    assert from_all_wrong == pytest.approx(q ** (G - 1), rel=1e-12)


def test_dapo_resample_factor_and_rollouts():
    e = est.get("dapo:mode=resample,T=3")
    p, G = np.array([0.05, 0.5, 0.9]), 4
    z = p**G + (1 - p) ** G
    np.testing.assert_allclose(e.weight(p, G), est.get("grpo").weight(p, G) * (1 - z**3) / (1 - z))
    np.testing.assert_allclose(e.expected_rollouts(p, G), G * (1 - z**3) / (1 - z))
    fill = est.get("dapo")
    np.testing.assert_allclose(fill.expected_rollouts(p, G), G / (1 - z))
    assert fill.dataset_scale(0.75) == pytest.approx(4.0)
    # resampling T times, exactly: a prompt contributes if any of T groups is mixed
    T = 3
    w_exact = sum(z**t for t in range(T)) * est.get("grpo").weight(p, G)
    np.testing.assert_allclose(e.weight(p, G), w_exact)


def test_edges_p_zero_one_and_small_groups():
    grpo = est.get("grpo")
    for G in (2, 3, 8, 33):
        assert grpo.weight(0.0, G) == pytest.approx(np.sqrt(G - 1))
        assert grpo.weight(1.0, G) == pytest.approx(np.sqrt(G - 1))
        # continuity: the polynomial at the edge is the closed form's limit
        assert grpo.weight(1e-7, G) == pytest.approx(grpo.weight_closed_form(1e-7, G), rel=1e-5)
    assert est.get("maxrl").weight(0.0, 5) == pytest.approx(5.0)  # (1 - q^G)/p -> G
    assert est.get("maxrl_impl").weight(0.0, 5) == pytest.approx(4.0)
    for spec in ALL_SPECS:
        e = est.get(spec)
        w = e.weight(np.array([0.0, 1.0]), 4)
        assert np.isfinite(w).all(), spec
        np.testing.assert_array_equal(e.mass(np.array([0.0, 1.0]), 4), 0.0)
    # G = 1: every group is silent for the mean-centred estimators; RLOO degrades to REINFORCE
    for spec in ("grpo", "grpo_bessel", "dr_grpo", "dapo", "maxrl_impl", "softmax_grpo", "reco_binary"):
        np.testing.assert_allclose(est.get(spec).weight(P_INNER, 1), 0.0, atol=1e-15)
    np.testing.assert_allclose(est.get("rloo").weight(P_INNER, 1), 1.0)
    np.testing.assert_allclose(est.get("maxrl").weight(P_INNER, 1), 1.0)
    # G = 2: GRPO's sigma is 1/2 in every mixed group, so w = 1 for every p
    np.testing.assert_allclose(grpo.weight(P_INNER, 2), 1.0)


def test_softmax_temperature_limits_without_overflow():
    p = P_INNER
    with np.errstate(all="raise"):
        cold = est.get("softmax_grpo:tau=1e-3")
        for G in (2, 5, 16):
            np.testing.assert_allclose(cold.weight(p, G), est.get("maxrl_impl").weight(p, G), rtol=1e-12)
            adv = cold.advantages(np.array([1, 0, 0, 1, 0]))
            assert np.isfinite(adv).all()
        hot = est.get("softmax_grpo:tau=1e6")
        for G in (2, 5, 16):
            np.testing.assert_allclose(hot.weight(p, G) * 1e6, (G - 1) / G, rtol=1e-5)
    # large-G limit (c - 1)/(1 - p + p c)
    e = est.get("softmax_grpo:tau=0.5")
    c = np.exp(2.0)
    pm = np.array([0.2, 0.5, 0.8])
    np.testing.assert_allclose(e.limit(pm), (c - 1) / (1 - pm + pm * c))
    np.testing.assert_allclose(e.weight(pm, 3000), e.limit(pm), rtol=5e-3)


@pytest.mark.parametrize(
    "spec", ["grpo", "grpo_bessel", "dr_grpo", "rloo", "sign", "maxrl", "maxrl_impl", "reco_binary"]
)
def test_large_group_limits(spec):
    e = est.get(spec)
    p = np.array([0.2, 0.5, 0.7])
    errs = [np.max(np.abs(e.weight(p, G) / e.limit(p) - 1)) for G in (16, 256, 2048)]
    assert errs[-1] < 2e-3, (spec, errs)
    assert errs[-1] <= errs[0] + 1e-12


def test_group_std_identity_on_random_groups():
    rng = np.random.default_rng(7)
    grpo, dr, dapo, reco = (est.get(s) for s in ("grpo", "dr_grpo", "dapo", "reco_binary"))
    for _ in range(200):
        G = int(rng.integers(2, 12))
        d = 5
        r = rng.integers(0, 2, G)
        s = rng.normal(size=(G, d))
        k = r.sum()
        sigma = np.sqrt(k * (G - k)) / G
        g = {
            name: (e.advantages(r)[:, None] * s).mean(axis=0)
            for name, e in (("grpo", grpo), ("dr", dr), ("dapo", dapo), ("reco", reco))
        }
        if 0 < k < G:
            contrast = s[r == 1].mean(axis=0) - s[r == 0].mean(axis=0)
            np.testing.assert_allclose(g["grpo"], sigma * contrast, atol=1e-12)
            np.testing.assert_allclose(g["dr"], sigma**2 * contrast, atol=1e-12)
            np.testing.assert_allclose(g["dapo"], sigma * contrast, atol=1e-12)
            np.testing.assert_allclose(g["reco"], 0.25 * contrast, atol=1e-12)
            assert np.abs(grpo.advantages(r)).mean() == pytest.approx(2 * sigma)
            assert np.abs(dr.advantages(r)).mean() == pytest.approx(2 * sigma**2)
            assert np.linalg.norm(dr.advantages(r)) == pytest.approx(np.sqrt(G) * sigma)
        else:
            for value in g.values():
                np.testing.assert_array_equal(value, 0.0)


def test_reco_with_answers_reduces_to_binary_form():
    reco = est.get("reco_binary")
    for G in (2, 3, 6):
        for r in itertools.product((0, 1), repeat=G):
            r = np.array(r)
            answers = np.where(r == 1, "right", "wrong")
            np.testing.assert_allclose(reco.advantages(r, answers), reco.advantages(r), atol=1e-12)
    # with real answers: u_i = G / (D n_a) and A_i = u_i (r_i - mean(u r)); worked by hand:
    # "4" x3 correct, "x" x2 correct, "5" x1 wrong -> u = 2/3, 1, 2; mean(u r) = 2/3
    r = np.array([1, 1, 1, 1, 0, 1])
    a = np.array(["4", "4", "4", "x", "5", "x"])
    adv = reco.advantages(r, a)
    np.testing.assert_allclose(adv, [2 / 9, 2 / 9, 2 / 9, 1 / 3, -4 / 3, 1 / 3], atol=1e-12)
    assert adv.sum() == pytest.approx(0.0, abs=1e-12)
    # occurrence normalisation: the total push on "4" (3 copies) equals that on "x" (2 copies),
    # where GRPO would push "4" 1.5 times as hard
    assert 3 * adv[0] == pytest.approx(2 * adv[3])
    g = est.get("grpo").advantages(r)
    assert 3 * g[0] == pytest.approx(1.5 * 2 * g[3])


MC_SPECS = [
    "grpo",
    "grpo_bessel",
    "dr_grpo",
    "rloo",
    "sign",
    "maxrl",
    "maxrl_impl",
    "softmax_grpo:tau=0.5",
    "reco_binary",
    "grpo_bessel:trainer=verl",
    "grpo_passk",
    "grpo_passk:norm=false",
]


@pytest.mark.parametrize("spec", MC_SPECS)
def test_monte_carlo_toy_softmax_policy(spec):
    """Mean update of a toy softmax policy over 6 responses equals w(p, G) * grad p.

    Responses 0 and 1 are correct; p = pi_0 + pi_1 and grad_theta p = pi * (1_correct - p).
    Tolerance: 5 standard errors of the Monte Carlo mean per coordinate (seeded).
    """
    rng = np.random.default_rng(20240501)
    theta = np.array([0.3, -0.9, 0.5, 0.0, -0.4, 0.2])
    pi = np.exp(theta) / np.exp(theta).sum()
    correct = np.array([1, 1, 0, 0, 0, 0])
    p = pi @ correct
    grad_p = pi * (correct - p)
    e = est.get(spec)
    B = 100_000
    for G in (1, 2, 5) if spec == "grpo_bessel:trainer=verl" else (2, 5):
        y = rng.choice(6, size=(B, G), p=pi)
        r = correct[y]
        adv = e.advantages(r)
        # g_b = (1/G) sum_i A_i (e_{y_i} - pi), accumulated per response index
        onehot_sum = np.zeros((B, 6))
        np.add.at(onehot_sum, (np.repeat(np.arange(B), G), y.ravel()), adv.ravel())
        g = (onehot_sum - adv.sum(axis=1, keepdims=True) * pi) / G
        mean, se = g.mean(axis=0), g.std(axis=0) / np.sqrt(B)
        expected = e.weight(p, G) * grad_p
        assert np.all(np.abs(mean - expected) <= 5 * se + 1e-12), (spec, G, mean, expected, se)


def test_registry_and_spec_parsing():
    assert set(est.REGISTRY) == {
        "grpo",
        "grpo_bessel",
        "dr_grpo",
        "dapo",
        "rloo",
        "sign",
        "maxrl",
        "maxrl_impl",
        "softmax_grpo",
        "reco_binary",
        "grpo_passk",
    }
    e = est.get("softmax_grpo:tau=0.3")
    assert isinstance(e, est.SoftmaxGRPO) and e.tau == 0.3
    d = est.get("dapo:mode=resample,T=4")
    assert d.mode == "resample" and d.T == 4 and isinstance(d.T, int)
    assert est.get("grpo_bessel").eps == 1e-4
    assert est.get(e.spec) == e  # the canonical spec round-trips
    with pytest.raises(ValueError, match="known: grpo, grpo_bessel"):
        est.get("ppo")
    with pytest.raises(ValueError, match="bad parameter"):
        est.get("grpo:tau=1")
    with pytest.raises(ValueError, match="tau"):
        est.get("softmax_grpo:tau=-1")
    with pytest.raises(ValueError, match="integer"):
        est.get("dapo:T=2.5")
    with pytest.raises(ValueError, match="binary"):
        est.get("grpo").advantages(np.array([0.5, 1.0]))


# --- grpo_bessel at G = 1: what each trainer does (issue 16, part 7) ------------------------------


def verl_grpo_advantages(r: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """``compute_grpo_outcome_advantage`` of verl/trainer/ppo/core_algos.py (volcengine/verl 012be9d9),
    one group, ``norm_adv_by_std_in_grpo=True``: a group of one gets mean 0 and std 1; otherwise the
    torch ``.std()`` (Bessel)."""
    r = np.asarray(r, float)
    mean, std = (0.0, 1.0) if len(r) == 1 else (r.mean(), r.std(ddof=1))
    return (r - mean) / (std + eps)


def trl_grpo_advantages(r: np.ndarray) -> np.ndarray:
    """TRL's ``GRPOTrainer._generate_and_score_completions`` with ``scale_rewards="group"``, one group:
    Bessel std, ``+ 1e-4``; with ``num_generations == 1`` (eval only: training raises) std is 0."""
    r = np.asarray(r, float)
    std = r.std(ddof=1) if len(r) > 1 else 0.0
    return (r - r.mean()) / (std + 1e-4)


def test_grpo_bessel_group_of_one_follows_each_trainer():
    verl, trl = est.get("grpo_bessel:trainer=verl"), est.get("grpo_bessel")
    assert verl.eps == 1e-6 and trl.eps == 1e-4 and trl.trainer == "trl"
    # the ports of each trainer's code, on every reward vector of G = 1..6
    for G in range(1, 7):
        r = np.array(list(itertools.product((0, 1), repeat=G)))
        np.testing.assert_allclose(verl.advantages(r), [verl_grpo_advantages(x) for x in r], rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(trl.advantages(r), [trl_grpo_advantages(x) for x in r], rtol=1e-12, atol=1e-15)
    # verl: a group of one is REINFORCE scaled by 1/(1 + eps); TRL: no signal
    np.testing.assert_allclose(verl.weight(P_INNER, 1), 1 / (1 + 1e-6), rtol=1e-15)
    np.testing.assert_allclose(est.get("grpo_bessel:trainer=verl,eps=0").weight(P_INNER, 1), 1.0)
    np.testing.assert_array_equal(trl.weight(P_INNER, 1), 0.0)
    for p in (0.1, 0.5, 0.8):
        assert brute_force_weight(verl, p, 1) == pytest.approx(1 / (1 + 1e-6), rel=1e-12)
    # for G >= 2 the trainers differ only in eps
    same_eps = est.get("grpo_bessel:trainer=verl,eps=1e-4")
    for G in (2, 5, 9):
        np.testing.assert_array_equal(same_eps.weight(P_INNER, G), trl.weight(P_INNER, G))
    # labels: TRL's is the one analyses stored before the trainer parameter existed
    assert trl.spec == "grpo_bessel:eps=0.0001"
    assert verl.spec == "grpo_bessel:eps=1e-06,trainer=verl"
    assert est.get(verl.spec) == verl and est.get(trl.spec) == trl
    with pytest.raises(ValueError, match="trainer"):
        est.get("grpo_bessel:trainer=openrlhf")


# --- grpo_passk: verl's pass@k advantage ---------------------------------------------------------


def verl_passk_advantages(r: np.ndarray, eps: float = 1e-6, norm: bool = True) -> np.ndarray:
    """``compute_grpo_passk_outcome_advantage`` (volcengine/verl 012be9d9), one group: only the top
    response gets ``r_max - r_second_max``, divided by the Bessel std plus eps when ``norm``."""
    r = np.asarray(r, float)
    if len(r) < 2:
        raise ValueError("Pass@k requires at least 2 samples per group")
    order = np.argsort(-r, kind="stable")
    adv = np.zeros(len(r))
    a = r[order[0]] - r[order[1]]
    if norm:
        a = a / (r.std(ddof=1) + eps)
    adv[order[0]] = a
    return adv


@pytest.mark.parametrize("norm", [True, False])
def test_grpo_passk_matches_verl_and_its_closed_form(norm):
    e = est.get(f"grpo_passk:norm={norm}")
    assert not e.zero_sum
    for G in range(2, 9):
        r = np.array(list(itertools.product((0, 1), repeat=G)))
        ref = np.array([verl_passk_advantages(x, norm=norm) for x in r])
        np.testing.assert_allclose(e.advantages(r), ref, rtol=1e-12, atol=1e-15)
        a = 1 / (1 / math.sqrt(G) + 1e-6) if norm else 1.0
        # exact: the binomial sum over k (only k = 1 has a non-zero advantage) and the closed form
        for p in (0.0, 0.05, 0.3, 0.5, 0.9, 1.0):
            q = 1 - p
            a_plus, a_minus = e.advantage_table(G)
            by_k = sum(math.comb(G - 1, s) * p**s * q ** (G - 1 - s) * (a_plus[s + 1] - a_minus[s]) for s in range(G))
            assert e.weight(p, G) == pytest.approx(by_k, rel=1e-12, abs=1e-300)
            assert e.weight(p, G) == pytest.approx(a * q ** (G - 1), rel=1e-12, abs=1e-300)
            assert e.mass(p, G) == pytest.approx(a * p * q**G, rel=1e-12, abs=1e-300)
        # E[g] = (a/G) grad pass@G, with d pass@G / dp = G q^(G-1)
        p = np.array([0.1, 0.4, 0.7])
        np.testing.assert_allclose(e.weight(p, G), a / G * G * (1 - p) ** (G - 1))
    with pytest.raises(ConfigError, match="G >= 2"):
        e.advantages(np.array([1]))
    assert e.limit(np.array([0.0]))[0] == (1e6 if norm else 1.0)
    np.testing.assert_array_equal(e.limit(np.array([0.2, 0.9])), 0.0)
    assert np.all(e.weight(np.array([0.2, 0.9]), 400) < 1e-15)
    assert est.get(e.spec) == e
