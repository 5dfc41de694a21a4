"""Estimator math, checked twice: exactly (closed form vs brute-force sums) and by Monte Carlo."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from pipeline import estimators as est

ALL_SPECS = est.DEFAULT_ESTIMATORS + (
    "grpo_bessel:eps=0",
    "grpo_bessel:eps=1e-6",
    "softmax_grpo:tau=0.3",
    "softmax_grpo:tau=5",
    "dapo:mode=resample,T=2",
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
    np.testing.assert_allclose(est.get("reco").weight(p, G), (1 - p**G - q**G) / (4 * p * q))
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
    for spec in ("grpo", "grpo_bessel", "dr_grpo", "dapo", "maxrl_impl", "softmax_grpo", "reco"):
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


@pytest.mark.parametrize("spec", ["grpo", "grpo_bessel", "dr_grpo", "rloo", "sign", "maxrl", "maxrl_impl", "reco"])
def test_large_group_limits(spec):
    e = est.get(spec)
    p = np.array([0.2, 0.5, 0.7])
    errs = [np.max(np.abs(e.weight(p, G) / e.limit(p) - 1)) for G in (16, 256, 2048)]
    assert errs[-1] < 2e-3, (spec, errs)
    assert errs[-1] <= errs[0] + 1e-12


def test_group_std_identity_on_random_groups():
    rng = np.random.default_rng(7)
    grpo, dr, dapo, reco = (est.get(s) for s in ("grpo", "dr_grpo", "dapo", "reco"))
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
    reco = est.get("reco")
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
    "reco",
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
    for G in (2, 5):
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
        "reco",
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
