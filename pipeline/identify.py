"""What the counts identify: likelihood intervals for dataset means the samples only extrapolate.

An adaptive run stops most prompts after a few samples, and the summary's D(G) and update masses at
a G well above a prompt's n are posterior means under the fitted prior: they rest on the prior's
shape near 0 and 1, which few samples a prompt cannot pin down (docs/adaptive.md §7). This module
says how far such a number could move over every population of pass rates that fits the counts.

The population is a distribution ``pi`` on the grid ``prior.grid_points()`` (201 points, 0 and 1
exact, dense near both ends). The counts' log-likelihood is ``l(pi) = sum_u m_u log sum_k pi_k
p_k^c_u q_k^(n_u - c_u)`` (the fixed-n one: the stopping rule looks only at outcomes). The
interval of a dataset mean ``theta(pi) = sum_k pi_k f(p_k)`` at level ``1 - alpha`` is the
profile-likelihood one,

    { theta(pi) : l(pi) >= l_max - chi2_2(1 - alpha) / 2 },

the range over every population a likelihood ratio test at that level would not reject. The
threshold is chi-square's with two degrees of freedom (``-2 log alpha``), not Wilks' one: the rest of
the population is a nuisance of 200 masses, most of them at 0, on the simplex's boundary where
Wilks' theorem fails (the maximum over the grid overfits a few prompts' counts). With one degree the
90% intervals of D(16..64) on adaptive runs of a spiky truth (half the prompts at 0.05, half at
0.95, most stopped after 4 samples) held the truth in 80 to 90% of replicates; with two, in 95 to
100%, and 97.5 to 100% on a U-shaped truth, about a quarter wider (docs/adaptive.md §7). Where the
counts identify theta (every prompt sampled past G) the set is narrow, as a Wald interval would be;
where they do not, it widens to whatever the data leave open (a partially identified mean gets the
range of its identified set, which covers at least as often as the level says). The interval is for
the population's mean; it holds the dataset's own mean of ``f(p_i)`` over its N prompts at least as
often, since the counts were drawn from those very prompts (their mean lies nearer the counts).

Each end is found by the supporting-hyperplane method: a linear program maximises ``h . pi`` (``h``
the function, or its negative for the lower end) over the simplex cut by half-spaces that hold the
set (``g(y) . (pi - y) >= 0`` at points ``y`` on its boundary, ``g`` the likelihood's gradient: the
set is convex and ``l`` concave, so each half-space holds it); each round takes the boundary point
on the segment from the maximum-likelihood population to the program's answer and adds its cut.
The program's value is an outer bound, the boundary points' an inner one; the loop stops when they
are within ``TOLERANCE`` of each other (relative) and reports the outer one: an end that has not
converged lies outside the exact interval, never inside it.
"""

from __future__ import annotations

import math

import numpy as np

from pipeline import prior as priors
from pipeline import stats
from pipeline.errors import ConfigError

__all__ = ["LEVEL", "likelihood_bounds", "threshold"]

# The level of the intervals the summary stores (a 90% interval: the bench checks it covers the
# truth at least that often on a truth the samples cannot identify).
LEVEL = 0.9
# Each end is within TOLERANCE of its exact value (relative to the value, at least ABS_TOLERANCE),
# on the wide side; at most ROUNDS cuts.
TOLERANCE, ABS_TOLERANCE, ROUNDS = 0.02, 1e-4, 200
# Halvings of the segment that find a boundary point (to 2^-24 of its length).
BISECTIONS = 24
# EM for the maximum likelihood itself, until a sweep gains less than EM_TOL (an l_max short of the
# maximum only widens the set, by at most what the remaining sweeps would gain).
EM_SWEEPS, EM_TOL = 2000, 1e-4


def threshold(level: float) -> float:
    """The ``level`` quantile of chi-square with two degrees of freedom (module docstring)."""
    return -2.0 * math.log1p(-level)


def likelihood_bounds(n, c, functions: np.ndarray, level: float = LEVEL, weights=None) -> tuple[np.ndarray, np.ndarray]:
    """The profile-likelihood interval (module docstring) of the dataset mean of each function.

    Args:
        n, c: per-prompt samples and correct answers (prompts with ``n = 0`` carry nothing).
        functions: ``(len(grid_points()), F)``: each column a function's values at the grid points.
        level: in (0, 1).
        weights: how many prompts each ``(n, c)`` stands for (default 1 each).

    Returns:
        ``(lo, hi)``, each of length F.

    Raises:
        ConfigError: a level outside (0, 1), a function table of the wrong shape, or no prompt with
            samples.
    """
    if not 0.0 < level < 1.0:
        raise ConfigError(f"interval level {level!r} must be in (0, 1)")
    points = priors.grid_points()
    f = np.asarray(functions, float)
    if f.ndim != 2 or f.shape[0] != len(points):
        raise ConfigError(f"functions must have {len(points)} rows (one per grid point), got shape {f.shape}")
    n = np.asarray(n, np.int64)
    c = np.asarray(c, np.int64)
    weights = np.ones(len(n)) if weights is None else np.asarray(weights, float)
    keep = (n > 0) & (weights > 0)
    if not keep.any():
        raise ConfigError("likelihood bounds need at least one prompt with samples")
    n_u, c_u, inv = stats.unique_pairs(n[keep], c[keep])
    mult = np.bincount(inv, weights=weights[keep], minlength=len(n_u))
    logL = priors.grid_likelihood(points, n_u, c_u)
    L = np.exp(logL - logL.max(axis=1, keepdims=True))  # rows scaled: l changes by a constant

    def loglik(pi: np.ndarray) -> float:
        with np.errstate(divide="ignore"):
            return float(mult @ np.log(L @ pi))

    pi0, top, _ = priors.grid_em(L, mult, EM_SWEEPS, EM_TOL)  # the maximum-likelihood population
    floor = top - threshold(level) / 2.0
    lo, hi = np.empty(f.shape[1]), np.empty(f.shape[1])
    lp = _program(len(points))  # one program: every cut holds the one set, each end keeps them all
    for j in range(f.shape[1]):
        for sign, out in ((1.0, hi), (-1.0, lo)):
            out[j] = sign * _end(lp, sign * f[:, j], L, mult, pi0, floor, loglik)
    return np.maximum(lo, f.min(axis=0)), np.minimum(hi, f.max(axis=0))


def _program(K: int):
    """The linear program over the simplex of ``K`` masses (HiGHS, silent, maximising); each later
    solve starts from the last basis."""
    import highspy

    lp = highspy._Highs()  # the plain solver: the wrapper class prints a banner when made
    lp.setOptionValue("output_flag", False)
    lp.addVars(K, np.zeros(K), np.full(K, highspy.kHighsInf))
    lp.addRow(1.0, 1.0, K, np.arange(K, dtype=np.int32), np.ones(K))
    lp.changeObjectiveSense(highspy.ObjSense.kMaximize)
    return lp


def _end(lp, h: np.ndarray, L, mult, pi0, floor: float, loglik) -> float:
    """``max h . pi`` over the set (module docstring), adding its cuts to ``lp``: the outer bound."""
    import highspy

    K = len(h)
    index = np.arange(K, dtype=np.int32)
    lp.changeColsCost(K, index, h)
    inner = float(h @ pi0)
    outer = inner
    for _ in range(ROUNDS):
        lp.run()
        if lp.getModelStatus() != highspy.HighsModelStatus.kOptimal:  # never seen; the trivial bound is safe
            return float(h.max())
        x = np.clip(np.asarray(lp.getSolution().col_value), 0.0, None)
        x /= x.sum()
        outer = float(h @ x)
        if loglik(x) >= floor or outer - inner <= max(TOLERANCE * abs(outer), ABS_TOLERANCE):
            return outer
        # the boundary point on the segment from the maximum-likelihood population to x
        s_in, s_out = 0.0, 1.0
        for _ in range(BISECTIONS):
            s = (s_in + s_out) / 2.0
            if loglik(pi0 + s * (x - pi0)) >= floor:
                s_in = s
            else:
                s_out = s
        y = pi0 + s_in * (x - pi0)
        inner = max(inner, float(h @ y))
        g = L.T @ (mult / (L @ y)) / float(mult.sum())  # the gradient, per prompt (g . y = 1)
        lp.addRow(float(g @ y), highspy.kHighsInf, K, index, g)  # g . (pi - y) >= 0
    return outer
