"""Answer-aware ReCo weight (docs/estimators.md §6): exactly against brute-force sums over every
group of answers, and by Monte Carlo; and the renamed binary proxy ``reco_binary``."""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest

from pipeline import estimators as est
from pipeline.errors import ConfigError


def reco() -> est.Estimator:
    """The binary proxy, whose ``advantages(rewards, answers)`` is ReCo's rule for one group."""
    return est.get("reco_binary")


def brute_force_answer_weight(probs: np.ndarray, correct: np.ndarray, G: int) -> float:
    """``E[g] / grad p`` by enumerating all ``A^G`` groups of answers, with ReCo's advantages from
    ``ReCoBinary.advantages(rewards, answers)``.

    The policy is a softmax over answers whose correct answers share one extra logit ``delta``; then
    the score of answer ``a`` is ``r(a) - p`` and ``grad p = p q`` (every correct answer moves in
    proportion, every wrong one too): the same Bernoulli-logit convention as the binary weights.
    Uses neither the ``D_C D_W / D^2`` identity nor the occupancy recursion.
    """
    probs = np.asarray(probs, float)
    correct = np.asarray(correct, bool)
    p = probs[correct].sum()
    total = 0.0
    for group in itertools.product(np.flatnonzero(probs > 0), repeat=G):
        a = np.array(group)
        r = correct[a].astype(float)
        adv = reco().advantages(r, a)
        total += np.prod(probs[a]) * float(np.mean(adv * (r - p)))
    return total / (p * (1 - p))


# --- the binary proxy, renamed (issue 16, part 5) ------------------------------------------------


def test_reco_binary_is_named_for_what_it_is():
    assert "reco_binary" in est.REGISTRY and "reco" not in est.REGISTRY
    assert "reco_binary" in est.DEFAULT_ESTIMATORS and "reco" not in est.DEFAULT_ESTIMATORS
    e = est.get("reco_binary")
    assert isinstance(e, est.ReCoBinary) and e.spec == "reco_binary"
    # the old name still parses, so analyses stored under it load, but what it gives is labelled
    # for what it is
    # (warnings.catch_warnings, not pytest.warns: the latter makes pytest's own /dev/null log handle
    # report a ResourceWarning at exit in this environment)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DeprecationWarning)
        old = est.get("reco")
    assert [str(w.message) for w in caught if w.category is DeprecationWarning] == [
        "estimator 'reco' is now 'reco_binary' (docs/estimators.md §6)"
    ]
    assert old == e and old.spec == "reco_binary"
    with pytest.raises(ValueError, match="known: .*reco_binary"):
        est.get("reco_full")


# --- the answer-aware weight: exact --------------------------------------------------------------


def test_one_wrong_answer_reduces_to_the_binary_proxy_exactly():
    p = np.array([0.0, 1e-9, 0.01, 0.1, 0.3, 0.5, 0.77, 0.95, 1.0])
    probs = np.stack([p, 1 - p], axis=1)
    for G in range(1, 13):
        got = est.reco_answer_weight(probs, G)
        assert list(got.method) == ["exact"] * len(p)
        np.testing.assert_allclose(got.weight, reco().weight(p, G), rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(got.mass, reco().mass(p, G), rtol=1e-12, atol=1e-15)
        np.testing.assert_array_equal(got.se_weight, 0.0)


def test_seven_equally_likely_wrong_answers_weigh_14_percent_less():
    """p = 0.3, G = 4, seven wrong answers of 0.1 each: brute force over all 8^4 groups gives 0.77,
    against the binary proxy's (1 - 0.3^4 - 0.7^4)/(4 * 0.21) = 0.895: 14.0% less."""
    probs = np.array([0.3] + [0.1] * 7)
    correct = np.arange(8) == 0
    bf = brute_force_answer_weight(probs, correct, 4)
    assert bf == pytest.approx(0.77, rel=1e-12)
    got = est.reco_answer_weight(probs, 4)
    assert got.weight == pytest.approx(bf, rel=1e-12)
    assert got.mass == pytest.approx(0.77 * 0.21, rel=1e-12)
    binary = float(reco().weight(0.3, 4))
    assert binary == pytest.approx(0.7518 / 0.84, rel=1e-12)
    assert got.weight / binary - 1 == pytest.approx(-0.13966, abs=1e-5)


def test_matches_brute_force_on_random_answer_distributions_in_one_batch():
    """Several correct forms, ragged rows (zero padding, n_correct per prompt), G = 1..5."""
    rng = np.random.default_rng(3)
    rows, n_correct = [], []
    for n_c, n_w in ((1, 1), (1, 3), (2, 2), (3, 1), (0, 3), (2, 0), (1, 4)):
        x = np.zeros(6)
        x[: n_c + n_w] = rng.dirichlet(np.ones(n_c + n_w))
        rows.append(x)
        n_correct.append(n_c)
    probs, n_correct = np.array(rows), np.array(n_correct)
    for G in range(1, 6):
        got = est.reco_answer_weight(probs, G, n_correct=n_correct, method="exact")
        for i, x in enumerate(probs):
            correct = np.arange(6) < n_correct[i]
            p = x[correct].sum()
            if 0 < p < 1:
                want = brute_force_answer_weight(x, correct, G)
                assert got.weight[i] == pytest.approx(want, rel=1e-11, abs=1e-14), (i, G)
                assert got.mass[i] == pytest.approx(want * p * (1 - p), rel=1e-11, abs=1e-15)
            else:  # p = 0 or 1: the weight is the polynomial's value there, and the mass is 0
                assert np.isfinite(got.weight[i]) and got.mass[i] == 0.0


def test_the_binary_proxy_never_understates_the_answer_aware_weight():
    """f = x (1 - x) <= 1/4 with x = D_C / D, so w <= (1 - p^G - q^G)/(4 p q), with equality when every
    mixed group shows as many distinct correct answers as wrong ones: always at G = 2 (one of each)."""
    rng = np.random.default_rng(8)
    probs = rng.dirichlet(np.ones(6), size=40)
    n_correct = rng.integers(1, 4, size=40)
    p = np.array([row[:c].sum() for row, c in zip(probs, n_correct, strict=True)])
    for G in (2, 3, 6, 10):
        w = est.reco_answer_weight(probs, G, n_correct=n_correct).weight
        binary = reco().weight(p, G)
        assert np.all(w <= binary * (1 + 1e-12))
        if G == 2:
            np.testing.assert_allclose(w, binary, rtol=1e-12)
        else:
            assert np.all(w < binary)


def test_edges_are_the_limits_and_bad_input_is_refused():
    wrong = np.array([0.5, 0.3, 0.2])
    for G in (2, 4, 7):
        # p -> 0: w -> G E[f(1, D_W)] over G - 1 wrong draws, continuous in p
        at0 = est.reco_answer_weight(np.r_[0.0, wrong], G).weight
        near = est.reco_answer_weight(np.r_[1e-9, wrong * (1 - 1e-9)], G).weight
        assert near == pytest.approx(at0, rel=1e-6)
        assert at0 == pytest.approx(
            brute_force_answer_weight(np.r_[1e-7, wrong * (1 - 1e-7)], np.arange(4) == 0, G), 1e-5
        )
        # p -> 1 with no wrong answer at all: one wrong draw is one distinct answer, whatever it is
        at1 = est.reco_answer_weight(np.array([1.0, 0.0]), G).weight
        near1 = est.reco_answer_weight(np.r_[1 - 1e-9, 1e-9 * wrong], G).weight
        assert near1 == pytest.approx(at1, rel=1e-6)
        assert at1 == pytest.approx(G / 4)  # one correct answer: f(1, 1) = 1/4 at k = G - 1
    # G = 1: a group of one carries no ReCo signal
    assert est.reco_answer_weight([0.3, 0.7], 1).weight == 0.0
    # an all-zero row is a prompt without answers
    out = est.reco_answer_weight(np.array([[0.3, 0.7, 0.0], [0.0, 0.0, 0.0]]), 4)
    assert np.isfinite(out.weight[0]) and np.isnan(out.weight[1]) and np.isnan(out.mass[1])
    with pytest.raises(ConfigError, match="sum to 1"):
        est.reco_answer_weight([0.3, 0.3], 4)
    with pytest.raises(ConfigError, match="n_correct"):
        est.reco_answer_weight([0.3, 0.7], 4, n_correct=3)
    with pytest.raises(ConfigError, match="method"):
        est.reco_answer_weight([0.3, 0.7], 4, method="fast")
    with pytest.raises(ConfigError, match="G="):
        est.reco_answer_weight([0.3, 0.7], 0)


# --- from a run's answer histograms --------------------------------------------------------------


def test_counts_plugin_is_the_weight_at_the_observed_shares():
    counts = np.array([[3, 1, 4, 2, 0], [5, 0, 1, 1, 1]], float)
    got = est.reco_answer_weight_from_counts(counts, 4, n_correct=np.array([2, 1]))
    want = est.reco_answer_weight(counts / counts.sum(axis=1, keepdims=True), 4, n_correct=np.array([2, 1]))
    np.testing.assert_allclose(got.weight, want.weight, rtol=1e-14)
    one = est.reco_answer_weight_from_counts([3, 7], 4)
    assert one.weight == pytest.approx(float(reco().weight(0.3, 4)), rel=1e-12)


def test_counts_unbiased_is_the_average_over_every_subset_and_unbiased():
    # 1. the U-statistic: average of (1/G) sum_i r_i A_i over all C(n, G) subsets of the samples
    counts = np.array([3, 1, 2, 1, 1], float)  # two correct answers, three wrong; n = 8
    labels = np.repeat(np.arange(5), counts.astype(int))
    correct = np.arange(5) < 2
    for G in (2, 3, 4, 6, 8):
        vals = []
        for idx in itertools.combinations(range(len(labels)), G):
            a = labels[list(idx)]
            r = correct[a].astype(float)
            vals.append(np.mean(reco().advantages(r, a) * r))
        got = est.reco_answer_weight_from_counts(counts, G, n_correct=2, estimate="unbiased")
        assert got.mass == pytest.approx(np.mean(vals), rel=1e-12, abs=1e-15), G
        assert got.weight == pytest.approx(np.mean(vals) / (0.5 * 0.5), rel=1e-12, abs=1e-14)
    assert math.isnan(est.reco_answer_weight_from_counts(counts, 9, n_correct=2, estimate="unbiased").mass)
    # 2. unbiased: its expectation over every sample of n draws equals the exact mass
    pi = np.array([0.35, 0.4, 0.25])  # one correct answer, two wrong
    n, G = 5, 3
    expected = 0.0
    for sample in itertools.product(range(3), repeat=n):
        c = np.bincount(sample, minlength=3).astype(float)
        expected += np.prod(pi[list(sample)]) * est.reco_answer_weight_from_counts(c, G, estimate="unbiased").mass
    assert expected == pytest.approx(est.reco_answer_weight(pi, G).mass, rel=1e-12)
    with pytest.raises(ConfigError, match="exact only"):
        est.reco_answer_weight_from_counts(counts, 4, estimate="unbiased", method="mc")


def test_answer_matrix_lays_out_histograms_correct_first():
    # prompt 0: "4" x3 correct, "5" x2 wrong, "x" x1 correct; prompt 1: nothing; prompt 2: "7" 2 of 3 correct
    parent = np.array([0, 0, 0, 2])
    counts = np.array([3, 2, 1, 3])
    correct_counts = np.array([3, 0, 1, 2])
    m, n_correct = est.answer_matrix(3, parent, counts, correct_counts, n_unanswered=np.array([2, 0, 0]))
    np.testing.assert_array_equal(n_correct, [2, 0, 1])
    np.testing.assert_array_equal(m, [[3, 1, 2, 2], [0, 0, 0, 0], [2, 1, 0, 0]])
    w = est.reco_answer_weight_from_counts(m, 4, n_correct=n_correct)
    assert np.isnan(w.weight[1]) and np.isfinite(w.weight[[0, 2]]).all()
    with pytest.raises(ConfigError, match="correct_counts"):
        est.answer_matrix(1, np.array([0]), np.array([1]), np.array([2]))


# --- the answer-aware weight: Monte Carlo --------------------------------------------------------


def test_monte_carlo_estimate_agrees_with_the_exact_weight():
    """``method="mc"`` within 5 of its own standard errors of the exact value, on 8 prompts; the
    standard error shrinks as 1/sqrt(n_mc)."""
    rng = np.random.default_rng(11)
    probs = np.zeros((8, 7))
    for i in range(8):
        width = 2 + i % 5
        probs[i, :width] = rng.dirichlet(np.ones(width))
    n_correct = np.array([1, 1, 2, 1, 1, 2, 1, 1])
    for G in (3, 8):
        exact = est.reco_answer_weight(probs, G, n_correct=n_correct, method="exact")
        mc = est.reco_answer_weight(probs, G, n_correct=n_correct, method="mc", n_mc=4000, seed=5)
        assert list(mc.method) == ["mc"] * 8
        # a prompt with one correct and one wrong answer has a deterministic f: no variance, no error
        assert mc.se_weight[0] < 1e-12 and mc.weight[0] == pytest.approx(exact.weight[0], rel=1e-12)
        assert np.all(mc.se_weight[1:] > 0)
        assert np.all(np.abs(mc.weight - exact.weight) <= 5 * mc.se_weight + 1e-12), (G, mc.weight, exact.weight)
        np.testing.assert_allclose(mc.se_mass, mc.se_weight * exact.mass / exact.weight, rtol=1e-12)
        small = est.reco_answer_weight(probs, G, n_correct=n_correct, method="mc", n_mc=1000, seed=5)
        assert np.median(small.se_weight[1:] / mc.se_weight[1:]) == pytest.approx(2.0, rel=0.15)


def test_simulated_groups_agree_with_the_exact_weight():
    """Sample groups of answers, apply ``advantages(rewards, answers)`` and average the update along
    the correct-answer logit; tolerance 5 standard errors of the simulation mean (seeded)."""
    rng = np.random.default_rng(2024)
    probs = np.array([0.25, 0.05, 0.3, 0.2, 0.1, 0.1])  # two correct forms, four wrong answers
    correct = np.arange(6) < 2
    p = probs[correct].sum()
    G, B = 5, 20_000
    groups = rng.choice(6, size=(B, G), p=probs)
    r = correct[groups].astype(float)
    g = np.array([np.mean(reco().advantages(r[b], groups[b]) * (r[b] - p)) for b in range(B)]) / (p * (1 - p))
    exact = est.reco_answer_weight(probs, G, n_correct=2).weight
    assert abs(g.mean() - exact) <= 5 * g.std(ddof=1) / math.sqrt(B)
    # and it is not the binary proxy's weight at the same p
    assert abs(g.mean() - float(reco().weight(p, G))) > 10 * g.std(ddof=1) / math.sqrt(B)


def test_auto_method_is_exact_within_the_cost_limit():
    probs = np.r_[0.2, np.full(40, 0.8 / 40)]
    assert est.reco_answer_weight(probs, 64).method == "exact"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow or invalid-value warnings on a wide, long case
        out = est.reco_answer_weight(probs, 64, method="exact")
    assert 0 < out.weight < float(reco().weight(0.2, 64))
    wide = np.r_[0.2, np.full(300, 0.8 / 300)]
    assert est._exact_cost(1, 300, 256) > est.EXACT_COST_LIMIT
    assert est.reco_answer_weight(wide, 256, n_mc=200).method == "mc"


# --- empty answer classes and the per-prompt method ----------------------------------------------


def edge_weight_brute_force(probs: np.ndarray, G: int) -> float:
    """The weight at p = 0 (``probs`` the wrong answers) or p = 1 (the correct ones), by enumerating
    the G - 1 draws of the present class: only k = 1 (resp. G - 1) survives in the sum over k, with
    coefficient G, and the one draw of the absent class is one distinct answer, so
    ``w = G E[D / (1 + D)^2]`` over the distinct answers D of those G - 1 draws."""
    total = 0.0
    for seq in itertools.product(range(len(probs)), repeat=G - 1):
        d = len(set(seq))
        total += np.prod(probs[list(seq)]) * d / (1 + d) ** 2
    return G * total


def test_monte_carlo_draws_from_a_class_without_answers():
    """p = 0 (no correct answer) and p = 1 (no wrong one): the Monte Carlo weight agrees with the
    exact one, and both with the brute-force sum, alone and in a batch with interior prompts."""
    wrong = np.array([0.5, 0.3, 0.2])
    for G in (2, 4, 6):
        want = edge_weight_brute_force(wrong, G)
        exact = est.reco_answer_weight(wrong, G, n_correct=0, method="exact")
        assert exact.weight == pytest.approx(want, rel=1e-12) and exact.mass == 0.0
        mc = est.reco_answer_weight(wrong, G, n_correct=0, method="mc", n_mc=20_000, seed=1)
        assert mc.method == "mc" and mc.mass == 0.0
        assert abs(mc.weight - want) <= 5 * mc.se_weight, (G, mc.weight, want)
        if G > 2:  # with one wrong draw, D = 1 is certain
            assert mc.se_weight > 0
    right = np.array([0.6, 0.4])
    mc = est.reco_answer_weight(right, 5, n_correct=2, method="mc")
    assert mc.se_weight > 0 and abs(mc.weight - edge_weight_brute_force(right, 5)) <= 5 * mc.se_weight
    # one batch: p = 0, p = 1 and interior rows; and a batch whose classes have no column at all
    probs = np.array([[0.5, 0.3, 0.2, 0.0], [0.6, 0.4, 0.0, 0.0], [0.2, 0.3, 0.25, 0.25], [0.1, 0.1, 0.4, 0.4]])
    n_correct = np.array([0, 2, 1, 2])
    for nc, rows in ((n_correct, slice(None)), (0, slice(0, 1)), (4, slice(1, 2))):
        exact = est.reco_answer_weight(probs[rows], 6, n_correct=nc, method="exact")
        mc = est.reco_answer_weight(probs[rows], 6, n_correct=nc, method="mc", n_mc=20_000, seed=2)
        assert np.all(np.abs(mc.weight - exact.weight) <= 5 * mc.se_weight + 1e-12), (mc.weight, exact.weight)


def test_auto_at_g256_with_64_wrong_answers_and_no_correct_one():
    """Past the exact cost limit, ``auto`` takes Monte Carlo, which must draw from the empty class."""
    wrong = np.full(64, 1 / 64)
    assert est._exact_cost(0, 64, 256) > est.EXACT_COST_LIMIT
    mc = est.reco_answer_weight(wrong, 256, n_correct=0, n_mc=2000)
    assert mc.method == "mc" and mc.se_weight > 0
    exact = est.reco_answer_weight(wrong, 256, n_correct=0, method="exact")
    assert abs(mc.weight - exact.weight) <= 5 * mc.se_weight


def test_auto_chooses_the_method_per_prompt():
    """One prompt with 1,100 distinct answers at G = 64 is past the exact limit; it alone goes to
    Monte Carlo (within 5 standard errors of the exact value), the others stay exact, to the last bit
    of their values computed alone, with no standard error."""
    rng = np.random.default_rng(21)
    wide = np.r_[0.2, np.full(1100, 0.8 / 1100)]
    assert est._exact_cost(1, 1100, 64) > est.EXACT_COST_LIMIT
    probs = np.zeros((5, len(wide)))
    for i, width in enumerate((2, 4, 7, 3)):
        probs[i, :width] = rng.dirichlet(np.ones(width))
    probs[4] = wide
    got = est.reco_answer_weight(probs, 64, n_correct=np.array([1, 2, 3, 1, 1]), n_mc=4000)
    assert list(got.method) == ["exact"] * 4 + ["mc"]
    np.testing.assert_array_equal(got.se_weight[:4], 0.0)
    assert got.se_weight[4] > 0 and got.se_mass[4] > 0
    alone = est.reco_answer_weight(probs[:4, :7], 64, n_correct=np.array([1, 2, 3, 1]), method="exact")
    np.testing.assert_allclose(got.weight[:4], alone.weight, rtol=1e-13)
    exact_wide = est.reco_answer_weight(wide, 64, method="exact").weight
    assert abs(got.weight[4] - exact_wide) <= 5 * got.se_weight[4]
    # from counts: the same choice per histogram
    counts = np.zeros((2, 1101))
    counts[0, :3] = [5, 2, 1]
    counts[1] = np.r_[300, np.ones(1100)]
    fc = est.reco_answer_weight_from_counts(counts, 64, n_mc=500)
    assert list(fc.method) == ["exact", "mc"] and fc.se_weight[0] == 0 and fc.se_weight[1] > 0


def test_exact_batches_by_width_match_each_prompt_alone():
    """The exact rows are computed in batches of similar width; every prompt's value is the one it
    has alone, for probabilities and for the unbiased estimate from counts."""
    rng = np.random.default_rng(4)
    widths = [1, 2, 3, 5, 9, 17, 33, 2, 40]
    A = max(widths) + 1
    probs, counts, n_correct = np.zeros((len(widths), A)), np.zeros((len(widths), A)), []
    for i, width in enumerate(widths):
        probs[i, : width + 1] = rng.dirichlet(np.ones(width + 1))
        counts[i, : width + 1] = rng.integers(1, 4, width + 1)
        n_correct.append(1 + i % 2)
    n_correct = np.array(n_correct)
    G = 12
    batch = est.reco_answer_weight(probs, G, n_correct=n_correct, method="exact")
    unbiased = est.reco_answer_weight_from_counts(counts, G, n_correct=n_correct, estimate="unbiased")
    for i in range(len(widths)):
        one = est.reco_answer_weight(probs[i], G, n_correct=int(n_correct[i]), method="exact")
        assert batch.weight[i] == pytest.approx(one.weight, rel=1e-13)
        u = est.reco_answer_weight_from_counts(counts[i], G, n_correct=int(n_correct[i]), estimate="unbiased")
        assert unbiased.mass[i] == pytest.approx(u.mass, rel=1e-13, nan_ok=True)
