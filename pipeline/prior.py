"""Priors over a dataset's pass rates and the posterior sums they give (``docs/adaptive.md`` §2, §3, §7).

Every prior fit and the choice among them (``choose_prior`` for ``auto``, ``state_prior`` by name)
live here; three kinds of prior, one ``Prior`` record:

- a Beta prior ``Beta(a, b)`` (fitted by the beta-binomial likelihood, ``fit_prior``, within
  ``PRIOR_FLOOR`` and ``PRIOR_CEIL``; or Jeffreys');
- a grid prior: the maximum-likelihood mixing distribution on a grid of ``K`` points from 0 to 1
  (``grid_points``: 0 and 1 included, so prompts that are never or always solved get point masses),
  fitted by EM to every prompt's counts (``fit_grid_prior``). It can take any shape the data
  show, which a Beta cannot (a dataset with many prompts at exactly 0 and 1);
- the zero-one-inflated Beta: point masses at 0 and 1 and a Beta between, fitted by maximum
  likelihood (``fit_inflated_prior``) and held on the same grid, so every sum is the grid prior's.

A prompt's posterior enters every sum through *nodes* ``p_k`` and per-pair weights ``W[u, k]``
(``posterior_nodes``): ``E[f(p) | n_u, c_u] = W[u] @ f(p_k)``. For the grid prior these are the
grid and the normalised ``w_k p_k^c q_k^(n-c)``, exact; for a Beta prior a composite Gauss-Jacobi
rule cut at given edges, so that a band indicator times a polynomial is integrated to rounding.
Everything is per distinct ``(n, c)`` pair; callers group prompts by pair.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from pipeline import stats
from pipeline.errors import ConfigError

__all__ = [
    "AUTO_MARGIN",
    "DEFAULT_PRIOR",
    "GRID_SIZE",
    "PRIORS",
    "PRIOR_CEIL",
    "PRIOR_FLOOR",
    "grid_points",
    "Prior",
    "fit_grid_prior",
    "grid_em",
    "fit_inflated_prior",
    "cell_share",
    "choose_prior",
    "fit_prior",
    "jeffreys_prior",
    "state_prior",
    "grid_cells",
    "grid_likelihood",
    "grid_posterior",
    "predictive_pmf",
    "posterior_nodes",
    "plausible_priors",
    "estimation_prior",
]

# Neither parameter of a fitted Beta (the Beta prior's, the inflated prior's Beta part) goes below
# this: a prior that piles almost all its mass at 0 or 1 would decide a prompt before its samples have
# said much (spec: "floored at a small value").
PRIOR_FLOOR = 0.05
# Nor above this: counts that look binomial (no spread beyond sampling noise) push a + b to infinity.
PRIOR_CEIL = 1e4
# plausible_priors: the inflated Beta's concentration is located to PROFILE_XTOL in log(a + b), and an
# auto prior that gives the inflated Beta less than HEDGE_MIN_WEIGHT has no plausible others.
PROFILE_XTOL = 1e-3
HEDGE_MIN_WEIGHT = 0.01
# The priors an adaptive run may decide with (state_prior). grid: the maximum-likelihood mixing
# distribution on a grid, refitted to every round's counts; inflated: the zero-one-inflated Beta;
# fit: a Beta fitted to round 0; jeffreys: Beta(1/2, 1/2); auto: the three fits mixed by their evidence
# (``choose_prior``); labels: per label bin, the auto prior conditioned on the bin's counts (``labelprior``,
# which the rounds apply; here, and wherever one prior stands for the run, it is the auto prior).
PRIORS = ("auto", "grid", "inflated", "fit", "jeffreys", "labels")
DEFAULT_PRIOR = "auto"
# The auto mixture charges the grid prior this times log(prompts) (the inflated Beta log(prompts)): the
# grid always fits a little better (it has ~200 free masses), by a few nats on counts drawn from a Beta
# and by 10 to 30 on an inflated Beta's counts after a few rounds, where 2 log(prompts) let it take
# 40% of the weight in one round of one seed and the rollouts moved 11% across seeds (8% at 3). On
# 1,206 prompts (a real dataset's size) 3 log(prompts) still let the grid's fit of a few samples a
# prompt in from round 2 on the edge truths, 16% spreads and 4% more loss than the truth held as the
# prior; 5 halves that and leaves the loss at 4,000 and 8,000 prompts as it was (docs/adaptive.md §2, §10).
AUTO_MARGIN = 5.0
# The auto mixture's families, in the order of ``Prior.mixture``.
AUTO_FAMILIES = ("beta", "inflated", "grid")
# The auto prior weighs the families by exp((log-likelihood - penalty) / AUTO_TEMPERATURE): 1 is the
# evidence itself (the penalties standing for the log-evidence's price of parameters; choose_prior).
AUTO_TEMPERATURE = 1.0
# Points of the grid prior (``grid_points``); 201 x (distinct pairs) stays a small matrix.
GRID_SIZE = 201
# EM stops when a sweep raises the log-likelihood by less than this per prompt, or after EM_MAX_ITER
# sweeps from the uniform masses. The cap is a smoother: the fully converged fit is a few spikes,
# and a spike just inside a band edge makes prompts near it look decided (docs/adaptive.md §2).
EM_TOL = 1e-9
EM_MAX_ITER = 200
# The summary's estimates want the maximum likelihood, not the smoother (estimation_prior): on a truth
# of spikes (half the prompts at 0.05, half at 0.95) 200 sweeps left 1.8% of the mass inside the
# middle bands, 14 nats short of the maximum, and the band shares 3% off; 5,000 left 0.002%.
EM_ESTIMATE_ITER = 5000
# The quadrature of a Beta prior (posterior_nodes): nodes per piece past what the likelihood and the
# integrand's degree need; they take the prior's own factor ``p^(a-1) q^(b-1)`` on a piece, exactly
# while ``a + b - 2`` is at most twice this (a polynomial of that degree for integer a and b).
NODE_MARGIN = 12
# Past that (a concentrated prior, up to PRIOR_CEIL) the rule keeps to where the posteriors have mass
# (beyond their TAIL quantiles it drops less than rounding) in pieces at most PIECE_SDS of the
# narrowest posterior's standard deviations wide, and an end's factor past JACOBI_MAX is no weight.
TAIL = 1e-18
PIECE_SDS = 2.0
JACOBI_MAX = 100.0


@dataclass(frozen=True)
class Prior:
    """A prior over the dataset's pass rates and where it came from.

    Attributes:
        a, b: the Beta parameters; for the inflated prior its Beta part's; for a grid prior the
            Beta with the same mean and variance (a summary for display only: no sum uses either).
        method: ``fit`` (beta-binomial maximum likelihood), ``jeffreys``, ``grid``, or ``inflated``
            (the zero-one-inflated Beta, held on the grid: ``fit_inflated_prior``).
        n_prompts: prompts the fit used (0 for Jeffreys).
        loglik: the fit's log-likelihood (without the binomial coefficients).
        start: the method-of-moments start point of the Beta fit.
        points, weights: the grid prior's points and masses (None for a Beta prior).
        iterations: EM sweeps of the grid fit.
        selection: how the ``auto`` prior weighed the families (the log-likelihoods compared).
        mixture: the ``auto`` prior's weights of the Beta, the inflated Beta and the grid prior.
        parts: the ``auto`` prior's Beta fit and the inflated Beta's Beta part, ``(a, b)`` each.
    """

    a: float
    b: float
    method: str = "fit"
    n_prompts: int = 0
    loglik: float | None = None
    start: tuple[float, float] | None = None
    points: tuple[float, ...] | None = None
    weights: tuple[float, ...] | None = None
    iterations: int | None = None
    selection: str | None = None
    mixture: tuple[float, ...] | None = None
    parts: tuple[tuple[float, float], ...] | None = None

    @property
    def is_grid(self) -> bool:
        return self.points is not None

    def family_weight(self, family: str) -> float:
        """How much of this prior is ``family`` (``beta``, ``inflated`` or ``grid``): all of it for a
        prior of that method, its weight in an ``auto`` mixture, else 0."""
        if self.method == "mixture" and self.mixture is not None:
            return float(self.mixture[AUTO_FAMILIES.index(family)])
        return 1.0 if self.method == {"beta": "fit"}.get(family, family) else 0.0

    def grid(self) -> tuple[np.ndarray, np.ndarray]:
        assert self.points is not None and self.weights is not None
        return np.asarray(self.points, float), np.asarray(self.weights, float)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["start"] = list(self.start) if self.start is not None else None
        for name in ("points", "weights", "mixture"):
            out[name] = list(out[name]) if out[name] is not None else None
        out["parts"] = [list(part) for part in self.parts] if self.parts is not None else None
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Prior:
        """The inverse of ``to_dict`` (a run's stored ``runs.prior``)."""
        data = dict(data)
        for name in ("start", "points", "weights", "mixture"):
            if data.get(name) is not None:
                data[name] = tuple(float(v) for v in data[name])
        if data.get("parts") is not None:
            data["parts"] = tuple(tuple(float(v) for v in part) for part in data["parts"])
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})

    @property
    def label(self) -> str:
        """How the report and the CLI name it."""
        auto = ", chosen by auto" if self.selection else ""
        if self.method == "mixture" and self.mixture is not None:
            p, w = self.grid()
            (ba, bb), (ia, ib) = self.parts or ((self.a, self.b), (self.a, self.b))
            return (
                f"mixture of Beta({ba:.3g}, {bb:.3g}) {self.mixture[0]:.0%}, inflated Beta (part "
                f"Beta({ia:.3g}, {ib:.3g})) {self.mixture[1]:.0%}, grid prior {self.mixture[2]:.0%}: "
                f"{w[0]:.1%} at p = 0, {w[-1]:.1%} at p = 1, mean {float(w @ p):.3f}"
            )
        if self.method == "inflated":
            _, w = self.grid()
            return (
                f"zero-one-inflated Beta ({w[0]:.1%} at p = 0, {w[-1]:.1%} at p = 1, the rest "
                f"Beta({self.a:.3g}, {self.b:.3g}){auto})"
            )
        if self.is_grid:
            p, w = self.grid()
            return (
                f"grid prior ({int((w > 1e-6).sum())} of {len(p)} points with mass; {w[p <= 0.01].sum():.1%} "
                f"within 0.01 of p = 0, {w[p >= 0.99].sum():.1%} within 0.01 of p = 1, mean {float(w @ p):.3f}"
                f"{auto})"
            )
        return f"Beta({self.a:.3g}, {self.b:.3g}), {self.method}{auto}"


def _counted_pairs(n, c) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct ``(n, c)`` pairs of the prompts with samples and how many prompts have each: what
    a prior fit sums over.

    Raises:
        ConfigError: no prompt with samples.
    """
    n = np.asarray(n, np.int64)
    c = np.asarray(c, np.int64)
    keep = n > 0
    if not keep.any():
        raise ConfigError("the prior fit needs at least one prompt with samples")
    n_u, c_u, inv = stats.unique_pairs(n[keep], c[keep])
    return n_u, c_u, np.bincount(inv, minlength=len(n_u)).astype(float)


# --- the Beta prior -------------------------------------------------------------------------------


def jeffreys_prior() -> Prior:
    return Prior(0.5, 0.5, method="jeffreys")


def _moments_start(n: np.ndarray, c: np.ndarray, floor: float) -> tuple[float, float]:
    """Method of moments with the binomial-variance correction: for ``p ~ Beta(a, b)`` and
    ``c ~ Bin(n, p)``, ``Var(c/n) = m(1-m) [1/n + (1 - 1/n) rho]`` with ``rho = 1/(a + b + 1)``."""
    ph = c / n
    m = float(ph.mean())
    if m <= 0 or m >= 1:
        return (floor, 1.0) if m <= 0 else (1.0, floor)
    inv_n = float((1.0 / n).mean())
    rho = (float(ph.var()) / (m * (1 - m)) - inv_n) / max(1 - inv_n, 1e-12)
    rho = min(max(rho, 1.0 / (PRIOR_CEIL + 1)), 0.999)
    s = 1.0 / rho - 1.0
    return (min(max(m * s, floor), PRIOR_CEIL), min(max((1 - m) * s, floor), PRIOR_CEIL))


def fit_prior(n: np.ndarray, c: np.ndarray, floor: float = PRIOR_FLOOR) -> Prior:
    """Empirical-Bayes prior: maximise the beta-binomial marginal likelihood of the counts.

    ``sum_i log B(a + c_i, b + n_i - c_i) - log B(a, b)`` over ``floor <= a, b <= PRIOR_CEIL``
    (L-BFGS-B in log space with the analytic gradient, started at the method of moments).
    Deterministic for given counts, so a resumed run fits the same prior.

    Raises:
        ConfigError: no prompt with samples.
    """
    from scipy.optimize import minimize
    from scipy.special import betaln, digamma

    n_u, c_u, w = _counted_pairs(n, c)
    n_u, c_u = n_u.astype(float), c_u.astype(float)
    n = np.asarray(n, dtype=np.int64)
    c = np.asarray(c, dtype=np.int64)
    n, c = n[n > 0], c[n > 0]

    def nll(theta: np.ndarray) -> tuple[float, np.ndarray]:
        a, b = np.exp(theta)
        ll = float(w @ (betaln(a + c_u, b + n_u - c_u) - betaln(a, b)))
        dab = digamma(a + b) - digamma(a + b + n_u)
        ga = float(w @ (digamma(a + c_u) - digamma(a) + dab))
        gb = float(w @ (digamma(b + n_u - c_u) - digamma(b) + dab))
        return -ll, -np.array([ga * a, gb * b])

    start = _moments_start(n.astype(float), c.astype(float), floor)
    bounds = [(math.log(floor), math.log(PRIOR_CEIL))] * 2
    res = minimize(nll, np.log(start), jac=True, method="L-BFGS-B", bounds=bounds, options={"maxiter": 500})
    a, b = (float(v) for v in np.exp(res.x))
    a, b = min(max(a, floor), PRIOR_CEIL), min(max(b, floor), PRIOR_CEIL)
    return Prior(a, b, method="fit", n_prompts=int(len(n)), loglik=-float(res.fun), start=start)


# --- the grid prior -------------------------------------------------------------------------------


def grid_likelihood(points: np.ndarray, n, c) -> np.ndarray:
    """``log p_k^c q_k^(n-c)`` for each pair (rows) and grid point (columns), ``0^0 = 1``."""
    from scipy.special import xlog1py, xlogy

    n = np.asarray(n, float)[:, None]
    c = np.asarray(c, float)[:, None]
    p = np.asarray(points, float)[None, :]
    return xlogy(c, p) + xlog1py(n - c, -p)


def grid_posterior(points: np.ndarray, weights: np.ndarray, n, c) -> np.ndarray:
    """Posterior masses ``W[u, k]`` proportional to ``w_k p_k^c q_k^(n-c)``, rows summing to 1 (NaN
    for a pair the prior makes impossible: no point with mass can give it)."""
    with np.errstate(divide="ignore"):
        logw = grid_likelihood(points, n, c) + np.log(np.asarray(weights, float))[None, :]
    with np.errstate(invalid="ignore"):
        logw -= logw.max(axis=1, keepdims=True)
    W = np.exp(logw)
    return W / W.sum(axis=1, keepdims=True)


def predictive_pmf(prior: Prior, k, x, n=0, c=0, log: bool = False) -> np.ndarray:
    """``P(x of k more samples | n, c)`` under the prior's posterior, one row per pair ``(n, c)``
    (1-D, or scalars: one row) and the shape of ``k`` and ``x`` broadcast together after it (0 where
    ``x > k``); with ``log``, its logarithm. A Beta prior's is the beta-binomial law of
    ``Beta(a + c, b + n - c)`` (``stats.betabinom_pmf``, the one predictive pmf); a grid prior's the
    same sum taken over its grid, the posterior masses times ``Bin(x; k, p)`` (NaN for a pair the
    prior makes impossible, as ``grid_posterior``)."""
    from scipy.special import gammaln, logsumexp

    n, c = np.atleast_1d(np.asarray(n, np.int64)), np.atleast_1d(np.asarray(c, np.int64))
    k, x = np.broadcast_arrays(np.asarray(k, np.int64), np.asarray(x, np.int64))
    if not prior.is_grid:
        shape = (-1,) + (1,) * k.ndim
        return stats.betabinom_pmf(k, x, (prior.a + c).reshape(shape), (prior.b + n - c).reshape(shape), log)
    inside = x <= k
    kk, xx = k.ravel(), np.where(inside, x, 0).ravel()
    pts, w = prior.grid()
    W = grid_posterior(pts, w, n, c)
    logb = gammaln(kk + 1) - gammaln(xx + 1) - gammaln(kk - xx + 1)
    logb = logb[:, None] + grid_likelihood(pts, kk, xx)  # log Bin(x; k, p) per (k, x) and point
    if log:
        with np.errstate(divide="ignore"):
            pred = logsumexp(np.log(W)[:, None, :] + logb[None], axis=2)
    else:
        pred = np.einsum("ug,xg->ux", W, np.exp(logb))  # numpy's loops: the same bits on every rerun
    return np.where(inside, pred.reshape(len(n), *k.shape), -np.inf if log else 0.0)


def grid_cells(points: np.ndarray) -> np.ndarray:
    """The cell edges of a grid's interior points: point ``k`` (``1 <= k <= K - 2``) stands for the
    pass rates from ``edges[k - 1]`` to ``edges[k]``, the midpoints to its neighbours, the first
    cell reaching 0 and the last 1. The end points stand for exactly 0 and 1."""
    inner = np.asarray(points, float)[1:-1]
    return np.r_[0.0, (inner[:-1] + inner[1:]) / 2.0, 1.0]


def cell_share(points: np.ndarray, lo: float, hi: float, lo_closed: bool = True, hi_closed: bool = True) -> np.ndarray:
    """The share of each grid point's cell (``grid_cells``) inside the interval from ``lo`` to ``hi``.

    A band edge inside a cell splits it by length, so a band's probability does not jump by the
    whole cell's mass as the edge crosses a point: counting whole cells put Beta(2, 2)'s update mass
    below 0.1 off by 6%. The end points are in the interval by its closedness."""
    p = np.asarray(points, float)
    edges = grid_cells(p)
    share = np.empty(len(p))
    share[1:-1] = np.clip((np.minimum(edges[1:], hi) - np.maximum(edges[:-1], lo)) / np.diff(edges), 0.0, 1.0)
    for k in (0, len(p) - 1):
        at = p[k]
        share[k] = float((at >= lo if lo_closed else at > lo) and (at <= hi if hi_closed else at < hi))
    return share


def grid_points(size: int = GRID_SIZE) -> np.ndarray:
    """The grid ``p_k = (1 - cos(pi k / (size - 1))) / 2``: 0 and 1 exactly, dense near both ends,
    where ``p^G``, ``q^G`` and the update mass ``w(p, G) p q`` change fastest (an even grid of 201
    points left every sum within 0.005 of 0 or 1 to one point)."""
    x = (1.0 - np.cos(np.pi * np.arange(size) / (size - 1))) / 2.0
    x[0], x[-1] = 0.0, 1.0
    return x


def grid_em(L: np.ndarray, mult: np.ndarray, max_sweeps: int, tol: float) -> tuple[np.ndarray, float, int]:
    """EM for the masses on a grid from the uniform ones: ``L[u, k]`` the likelihood of pair ``u`` at
    point ``k`` (rows may be scaled), ``mult`` the pairs' multiplicities; until a sweep gains less than
    ``tol`` in log-likelihood or after ``max_sweeps``. Returns the masses, the log-likelihood (of the
    scaled rows) and the sweeps. Each sweep raises the likelihood."""
    # Sums by numpy's own loops, not BLAS: a BLAS product may add in another order with another
    # thread count, and a rerun must fit the same prior to the last bit (it decides the rounds).
    N = float(mult.sum())
    w = np.full(L.shape[1], 1.0 / L.shape[1])
    f = np.einsum("uk,k->u", L, w)
    ll = float(np.sum(mult * np.log(f)))
    sweeps = 0
    while sweeps < max_sweeps:
        w = w * np.einsum("uk,u->k", L, mult / f) / N
        w /= w.sum()
        f = np.einsum("uk,k->u", L, w)
        new = float(np.sum(mult * np.log(f)))
        sweeps += 1
        gain, ll = new - ll, new
        if gain < tol:
            break
    return w, ll, sweeps


def fit_grid_prior(n, c, size: int = GRID_SIZE, max_sweeps: int | None = None) -> Prior:
    """The grid prior: the masses ``w_k`` on ``p_k = grid_points(size)`` that maximise
    ``sum_i log sum_k w_k p_k^c_i q_k^(n_i-c_i)`` (the nonparametric maximum likelihood on the grid).

    EM from the uniform masses: ``w_k <- mean_i W[i, k]``, each sweep raising the likelihood, until
    a sweep gains less than ``EM_TOL`` per prompt or after ``max_sweeps`` (None: ``EM_MAX_ITER``, the
    smoother a decision wants, docs/adaptive.md §2). Sums run over the distinct pairs with their
    multiplicities. Deterministic for given counts.

    Raises:
        ConfigError: no prompt with samples, or ``size < 2``.
    """
    if size < 2:
        raise ConfigError(f"grid prior size={size!r} must be at least 2")
    n_u, c_u, mult = _counted_pairs(n, c)
    N = float(mult.sum())
    points = grid_points(size)
    logL = grid_likelihood(points, n_u, c_u)
    scale = logL.max(axis=1, keepdims=True)
    L = np.exp(logL - scale)  # rows scaled to a maximum of 1: no underflow at large n
    w, ll, sweeps = grid_em(L, mult, EM_MAX_ITER if max_sweeps is None else max_sweeps, EM_TOL * N)
    mean = float(np.sum(w * points))
    var = float(np.sum(w * points**2)) - mean**2
    a, b = _moment_beta(mean, var)
    loglik = ll + float(np.sum(mult * scale[:, 0]))
    return Prior(
        a,
        b,
        method="grid",
        n_prompts=int(N),
        loglik=loglik,
        points=tuple(points.tolist()),
        weights=tuple(w.tolist()),
        iterations=sweeps,
    )


def _moment_beta(mean: float, var: float) -> tuple[float, float]:
    """The Beta with this mean and variance (clipped to a proper one): a display summary."""
    mean = min(max(mean, 1e-6), 1 - 1e-6)
    var = min(max(var, 1e-12), mean * (1 - mean) * (1 - 1e-6))
    s = mean * (1 - mean) / var - 1.0
    return mean * s, (1 - mean) * s


# --- the zero-one-inflated Beta -------------------------------------------------------------------


def inflated_nll(theta: np.ndarray, n_u: np.ndarray, c_u: np.ndarray, mult: np.ndarray, lo: float, hi: float):
    """The zero-one-inflated Beta's negative log-likelihood of the distinct pairs ``(n_u, c_u)``
    (``mult`` prompts each) and its gradient in ``theta = (t0, t1, log a, log b)``: the weights
    ``(w0, w1, 1 - w0 - w1)`` are the softmax of ``(t0, t1, 0)``, and ``log a``, ``log b`` are
    clipped to ``[lo, hi]``, the fit's bounds (the gradient is the one inside them). Analytic: a
    finite-difference one took five evaluations a step (``bench/prior_fit.py``)."""
    from scipy.special import betaln, digamma

    nf, cf = n_u.astype(float), c_u.astype(float)
    zero, full = np.where(c_u == 0, 0.0, -np.inf), np.where(c_u == n_u, 0.0, -np.inf)
    top = max(theta[0], theta[1], 0.0)  # the weights are a softmax of (theta0, theta1, 0)
    norm = top + math.log(math.exp(theta[0] - top) + math.exp(theta[1] - top) + math.exp(-top))
    logw, log_mid = theta[:2] - norm, -norm
    a, b = np.exp(np.clip(theta[2:], lo, hi))
    parts = np.stack([logw[0] + zero, logw[1] + full, log_mid + betaln(a + cf, b + nf - cf) - betaln(a, b)])
    peak = parts.max(axis=0)
    share = np.exp(parts - peak)
    total = share.sum(axis=0)
    share /= total  # each pair's responsibilities: atom 0, atom 1, the Beta part
    ll = float(mult @ (peak + np.log(total)))
    w = np.exp(logw)
    dab = digamma(a + b) - digamma(a + b + nf)
    mid = mult * share[2]
    grad = np.array(
        [
            float(mult @ share[0]) - w[0] * mult.sum(),
            float(mult @ share[1]) - w[1] * mult.sum(),
            a * float(mid @ (digamma(a + cf) - digamma(a) + dab)),
            b * float(mid @ (digamma(b + nf - cf) - digamma(b) + dab)),
        ]
    )
    return -ll, -grad


def inflated_starts(n_u: np.ndarray, c_u: np.ndarray, mult: np.ndarray) -> list[np.ndarray]:
    """The fit's two starts in ``theta``: the atoms explaining half the prompts at 0 and at n, or
    almost none (a Beta alone); the Beta part at concentration 4 around the mean of the other pairs."""
    nf, cf = n_u.astype(float), c_u.astype(float)
    inner = (c_u > 0) & (c_u < n_u)
    share0 = float(mult[c_u == 0].sum() / mult.sum())
    share1 = float(mult[c_u == n_u].sum() / mult.sum())
    m = float(np.sum(mult[inner] * cf[inner] / nf[inner]) / max(mult[inner].sum(), 1.0)) if inner.any() else 0.5
    starts = []
    for w0, w1 in ((0.5 * share0, 0.5 * share1), (1e-3, 1e-3)):
        rest = max(1.0 - w0 - w1, 1e-3)
        starts.append(np.log([max(w0, 1e-6) / rest, max(w1, 1e-6) / rest, 2 * m, 2 * (1 - m)]))
    return starts


def inflated_bounds(lo: float, hi: float) -> list[tuple[float, float]]:
    """L-BFGS-B's bounds on ``theta``: the atoms' logits within +-30, log a and log b in ``[lo, hi]``."""
    return [(-30, 30), (-30, 30), (lo, hi), (lo, hi)]


def fit_inflated_prior(n, c, size: int = GRID_SIZE, floor: float = PRIOR_FLOOR, ceil: float = PRIOR_CEIL) -> Prior:
    """The zero-one-inflated Beta prior, ``w0 at p = 0 + w1 at p = 1 + (1 - w0 - w1) Beta(a, b)``,
    fitted by maximum likelihood and put on the grid of ``grid_points(size)``.

    The shape real datasets have (prompts never solved, prompts always solved, a smooth middle)
    with four parameters: the middle's shape comes from the Beta, not from a few samples per
    prompt, so its fit varies little from one dataset draw to the next where the grid prior's
    interior masses do (docs/adaptive.md §2). The Beta part's mass between grid midpoints goes to
    the grid point inside (the cells next to 0 and 1 to the first and last interior points, never
    to the atoms), so every posterior sum is the grid prior's, exact for the discretised prior; the
    stored log-likelihood is the discretised prior's, comparable with the grid prior's.
    ``a``, ``b`` are the Beta part's.
    """
    from scipy.optimize import minimize
    from scipy.special import logsumexp

    n_u, c_u, mult = _counted_pairs(n, c)
    lo, hi = math.log(floor), math.log(ceil)
    args, bounds, best = (n_u, c_u, mult, lo, hi), inflated_bounds(lo, hi), None
    for start in inflated_starts(n_u, c_u, mult):
        res = minimize(inflated_nll, start, args=args, jac=True, method="L-BFGS-B", bounds=bounds)
        if best is None or res.fun < best.fun:
            best = res
    theta = best.x
    w0, w1 = (float(v) for v in np.exp(theta[:2] - logsumexp(np.r_[theta[:2], 0.0])))
    a, b = (float(v) for v in np.exp(np.clip(theta[2:], lo, hi)))
    points = grid_points(size)
    weights = _held_beta(a, b, points, w0, w1)
    loglik = _grid_loglik(points, weights, n_u, c_u, mult)
    return Prior(
        a,
        b,
        method="inflated",
        n_prompts=int(mult.sum()),
        loglik=loglik,
        points=tuple(points.tolist()),
        weights=tuple(weights.tolist()),
        iterations=int(best.nit),
    )


def _with_part(prior: Prior, share: float, old: np.ndarray, new: np.ndarray, **changes) -> Prior:
    """``prior`` with its part ``share * old`` (grid masses) replaced by ``share * new``, and the Beta
    of the same mean and variance as its summary (``a``, ``b``)."""
    weights = np.clip(np.asarray(prior.weights) + share * (new - old), 0.0, None)
    weights /= weights.sum()
    points = np.asarray(prior.points)
    mean = float(weights @ points)
    a, b = _moment_beta(mean, float(weights @ points**2) - mean**2)
    return replace(prior, a=a, b=b, weights=tuple(weights.tolist()), **changes)


def _profile_at(S: float, n_u, c_u, mult, start: np.ndarray, lo: float, hi: float) -> tuple[float, np.ndarray]:
    """The inflated Beta's negative log-likelihood maximised with its Beta part's concentration held
    at ``a + b = S``, over ``t = (t0, t1, logit of the part's mean)``: the minimum and where."""
    from scipy.optimize import minimize

    def nll(t: np.ndarray):
        m = 1.0 / (1.0 + math.exp(-t[2]))
        v, g = inflated_nll(np.array([t[0], t[1], math.log(m * S), math.log((1.0 - m) * S)]), n_u, c_u, mult, lo, hi)
        return v, np.array([g[0], g[1], g[2] * (1.0 - m) - g[3] * m])  # d log a = (1 - m), d log b = -m

    res = minimize(nll, start, jac=True, method="L-BFGS-B", bounds=[(-30, 30), (-30, 30), (-20, 20)])
    return float(res.fun), res.x


def _profile_end(side: int, S0: float, top: float, x0, n_u, c_u, mult, drop: float, lo: float, hi: float):
    """Where the profile of ``S`` (``_profile_at``) falls ``drop`` below its maximum ``top`` (at
    ``S0``), below ``S0`` (``side = -1``) or above it (``+1``): the concentration and the profile's
    argument there. At the fit's bound when the profile stays within ``drop`` up to it."""
    from scipy.optimize import brentq

    far = lo if side < 0 else hi
    gap_far, x_far = _profile_at(math.exp(far), n_u, c_u, mult, x0, lo, hi)
    if gap_far - top <= drop:
        return math.exp(far), x_far

    def gap(log_s: float) -> float:
        return _profile_at(math.exp(log_s), n_u, c_u, mult, x0, lo, hi)[0] - top - drop

    log_s = brentq(gap, min(math.log(S0), far), max(math.log(S0), far), xtol=PROFILE_XTOL)
    return math.exp(log_s), _profile_at(math.exp(log_s), n_u, c_u, mult, x0, lo, hi)[1]


def plausible_priors(prior: Prior, n, c, drop: float) -> list[Prior]:
    """The priors the counts cannot tell from ``prior`` along the one direction they identify worst:
    the concentration ``a + b`` of the inflated Beta's middle (docs/adaptive.md §5, "Hedged").

    The inflated Beta is refitted to ``(n, c)``; its profile log-likelihood in ``S = a + b`` (the
    weights of the atoms and the part's mean maximised at each ``S``) falls ``drop`` below its
    maximum at two concentrations, one each side. Each gives a prior: ``prior`` with its inflated
    part (all of it for an ``inflated`` prior, its weight in an ``auto`` mixture) replaced by the
    inflated Beta at that end. None for another family, or where the mixture gives the inflated Beta
    less than ``HEDGE_MIN_WEIGHT``."""
    share = prior.family_weight("inflated")
    if share < HEDGE_MIN_WEIGHT:
        return []
    from scipy.special import logit

    fit = fit_inflated_prior(n, c)
    n_u, c_u, mult = _counted_pairs(n, c)
    lo, hi = math.log(PRIOR_FLOOR), math.log(PRIOR_CEIL)
    held = np.asarray(fit.weights)
    w0, w1 = float(held[0]), float(held[-1])
    mid = max(1.0 - w0 - w1, 1e-300)
    S0 = fit.a + fit.b
    x0 = np.array([math.log(max(w0, 1e-300) / mid), math.log(max(w1, 1e-300) / mid), float(logit(fit.a / S0))])
    top, x0 = _profile_at(S0, n_u, c_u, mult, x0, lo, hi)
    points = np.asarray(fit.points)
    out = []
    for side in (-1, 1):
        S, t = _profile_end(side, S0, top, x0, n_u, c_u, mult, drop, lo, hi)
        e = np.exp(np.r_[t[:2], 0.0])
        v0, v1, _ = e / e.sum()
        m = 1.0 / (1.0 + math.exp(-t[2]))
        end = _held_beta(m * S, (1.0 - m) * S, points, float(v0), float(v1))
        said = f"{prior.method}, its inflated Beta part at a + b = {S:.4g} (fitted {S0:.4g})"
        out.append(_with_part(prior, share, held, end, selection=said))
    return out


def estimation_prior(prior: Prior, n, c) -> Prior:
    """The prior an adaptive run's summary estimates under (docs/adaptive.md §7): ``prior`` (fitted
    to ``(n, c)``) with its grid part, all of a ``grid`` prior or its weight in an ``auto`` mixture,
    refitted by EM run ``EM_ESTIMATE_ITER`` sweeps instead of ``EM_MAX_ITER``. The run decides under
    the capped fit, whose smoothness keeps a spike from sitting just inside a band edge (§2); a
    dataset mean wants the maximum likelihood, which the cap leaves short where the truth has gaps the
    uniform start fills slowly. Other priors are returned as they are."""
    share = prior.family_weight("grid")
    if share <= 0.0:
        return prior
    capped = np.asarray(fit_grid_prior(n, c).weights)
    full = fit_grid_prior(n, c, max_sweeps=EM_ESTIMATE_ITER)
    return _with_part(prior, share, capped, np.asarray(full.weights), iterations=full.iterations)


# --- the choice -----------------------------------------------------------------------------------


def _held_beta(a: float, b: float, points: np.ndarray, w0: float = 0.0, w1: float = 0.0) -> np.ndarray:
    """A Beta (with atoms ``w0`` at 0 and ``w1`` at 1) held on the grid: each interior point the
    Beta part's mass of its cell (``grid_cells``), the atoms at the end points."""
    from scipy.special import betainc

    cells = np.diff(betainc(a, b, grid_cells(points)))
    total = cells.sum()
    if not total > 0:  # a Beta too concentrated for the cells' rounding: all of it at its mean's cell
        cells = np.zeros(len(points) - 2)
        cells[min(int(np.searchsorted(grid_cells(points), a / (a + b))) - 1, len(cells) - 1)] = 1.0
        total = 1.0
    return np.r_[w0, (1.0 - w0 - w1) * cells / total, w1]


def _grid_loglik(points: np.ndarray, weights: np.ndarray, n_u, c_u, mult) -> float:
    from scipy.special import logsumexp

    with np.errstate(divide="ignore"):
        logL = grid_likelihood(points, n_u, c_u) + np.log(weights)[None, :]
    return float(mult @ logsumexp(logL, axis=1))


def choose_prior(n, c) -> Prior:
    """The ``auto`` prior: the evidence-weighted mixture of three fits to the same counts, a Beta (two
    parameters), the zero-one-inflated Beta (four) and the grid prior (one mass per grid point),
    each held on the grid (docs/adaptive.md §2).

    Family ``f`` gets the weight ``exp((l_f - pen_f) / AUTO_TEMPERATURE)``, normalised: ``l_f`` the
    log-likelihood of the counts under its held prior, ``pen_f`` its price in parameters (0 for the
    Beta, ``log N`` for the inflated Beta, ``AUTO_MARGIN log N`` for the grid; ``N`` the prompts).
    The prior is ``sum_f weight_f g_f`` on the grid. No family is switched in or out: a weight moves
    continuously with the evidence (equal weights where a lead equals its margin). A hard choice
    between the families (the rule before) flipped between replicates of the same dataset and the
    rollouts with it (30 against 41 per prompt on a real dataset). A temperature of ``log N`` was
    tried: it gave the grid a third of the weight on a truth that is an inflated Beta, and 20%
    more rollouts there."""
    from scipy.special import logsumexp

    beta = fit_prior(n, c)
    inflated = fit_inflated_prior(n, c)
    grid = fit_grid_prior(n, c)
    n_u, c_u, mult = _counted_pairs(n, c)
    points = grid_points()
    N = float(mult.sum())
    log_n = math.log(max(N, 2.0))
    held = {
        "beta": _held_beta(beta.a, beta.b, points),
        "inflated": np.asarray(inflated.weights),
        "grid": np.asarray(grid.weights),
    }
    penalty = {"beta": 0.0, "inflated": log_n, "grid": AUTO_MARGIN * log_n}
    ll = {f: _grid_loglik(points, w, n_u, c_u, mult) for f, w in held.items()}
    score = np.array([(ll[f] - penalty[f]) / AUTO_TEMPERATURE for f in held])
    share = np.exp(score - logsumexp(score))
    weights = sum(s * held[f] for s, f in zip(share, held, strict=True))
    weights = weights / weights.sum()
    mean = float(weights @ points)
    a, b = _moment_beta(mean, float(weights @ points**2) - mean**2)
    why = (
        "auto: weights "
        + ", ".join(f"{f} {s:.3f}" for f, s in zip(held, share, strict=True))
        + f"; log-likelihood leads over the Beta: inflated {ll['inflated'] - ll['beta']:+.4g}, grid "
        + f"{ll['grid'] - ll['beta']:+.4g} (weights exp((l - penalty) / {AUTO_TEMPERATURE:g}), penalties 0, log N, "
        + f"{AUTO_MARGIN:g} log N; log N = {log_n:.3g})"
    )
    return Prior(
        a,
        b,
        method="mixture",
        n_prompts=int(N),
        loglik=_grid_loglik(points, weights, n_u, c_u, mult),
        points=tuple(points.tolist()),
        weights=tuple(weights.tolist()),
        iterations=grid.iterations,
        selection=why,
        mixture=tuple(float(s) for s in share),
        parts=((beta.a, beta.b), (inflated.a, inflated.b)),
    )


def state_prior(method: str, n, c, n0, c0) -> Prior:
    """The prior of ``method`` (one of ``PRIORS``) an adaptive run decides with, from its counts so
    far (``n``, ``c``: all samples; ``n0``, ``c0``: round 0's). The grid prior uses every round (the
    stopping rule depends only on observed outcomes, so the likelihood of the counts is the fixed-n
    one, docs/adaptive.md §6); the Beta fit uses round 0 only.

    Raises:
        ConfigError: an unknown method, or no prompt with samples.
    """
    if method in ("auto", "labels"):  # labels: the population prior its bins are pulled towards
        return choose_prior(n, c)
    if method == "grid":
        return fit_grid_prior(n, c)
    if method == "inflated":
        return fit_inflated_prior(n, c)
    if method == "fit":
        return fit_prior(n0, c0)
    if method == "jeffreys":
        return jeffreys_prior()
    raise ConfigError(f"adaptive prior {method!r} is unknown: allowed {', '.join(PRIORS)}")


# --- the quadrature over a posterior --------------------------------------------------------------


def _beta_cuts(a: float, b: float, n_u: np.ndarray, c_u: np.ndarray, edges) -> np.ndarray:
    """Where the rule of ``posterior_nodes`` is cut: at 0, 1 and ``edges``; for a concentrated prior
    (``a + b - 2`` past what ``NODE_MARGIN`` absorbs) only over where the prior or some posterior
    has mass (its ``TAIL`` quantiles; an end is kept when the mass comes within a piece of it), in
    pieces even in ``arcsin(sqrt(p))``, at most ``PIECE_SDS`` of the narrowest posterior's standard
    deviations wide. On that scale every posterior is about as wide (``1 / (2 sqrt(a + b + n + 1))``), near an
    end as in the middle, and the prior's factor, steep at the scale of [0, 1] (``Beta(5000, 5000)``
    lives in 0.5 +- 0.05), is smooth on each piece."""
    inner = [e for e in edges if 0.0 < e < 1.0]
    if a + b - 2.0 <= 2 * NODE_MARGIN:
        return np.unique(np.r_[0.0, inner, 1.0])
    from scipy.special import betaincinv

    alpha, beta = np.r_[a, a + c_u], np.r_[b, b + n_u - c_u]  # the prior too: no pairs, no empty min
    step = PIECE_SDS / (2.0 * math.sqrt(float((alpha + beta).max()) + 1.0))
    lo = math.asin(math.sqrt(float(betaincinv(alpha, beta, TAIL).min())))
    # the upper quantile as the mirror's lower one: no 1 - (1 - x) rounding near 1
    hi = math.acos(math.sqrt(float(betaincinv(beta, alpha, TAIL).min())))
    lo = 0.0 if lo < step else lo
    hi = math.pi / 2.0 if hi > math.pi / 2.0 - step else hi
    cuts = np.sin(np.linspace(lo, hi, max(1, math.ceil((hi - lo) / step)) + 1)) ** 2
    cuts[0], cuts[-1] = (0.0 if lo == 0.0 else cuts[0]), (1.0 if hi == math.pi / 2.0 else cuts[-1])
    return np.unique(np.r_[cuts, [e for e in inner if cuts[0] < e < cuts[-1]]])


def _beta_nodes(a: float, b: float, cuts: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and log prior weights of a composite Gauss-Jacobi rule for the density
    ``p^(a-1) q^(b-1)`` on the pieces between ``cuts``: on a piece at 0 or 1 the factor singular
    there is the Jacobi weight while its exponent is below ``JACOBI_MAX`` (``roots_jacobi``'s
    constant ``2^(a + b + 1) B(a, b)`` overflows past ``a + b`` near 1,024: NaN weights), the rest is
    smooth; ``m`` nodes per piece."""
    from scipy.special import roots_jacobi

    nodes, logw = [], []
    for s, e in zip(cuts[:-1], cuts[1:], strict=True):
        # an end's factor is the weight while it may be singular (a steep one is smooth on its piece)
        at0, at1 = s == 0.0 and a - 1.0 < JACOBI_MAX, e == 1.0 and b - 1.0 < JACOBI_MAX
        alpha_j = (b - 1.0) if at1 else 0.0  # weight (1 - x)^alpha_j (1 + x)^beta_j on [-1, 1]
        beta_j = (a - 1.0) if at0 else 0.0
        x, w = roots_jacobi(m, alpha_j, beta_j)
        p = s + (e - s) * (1.0 + x) / 2.0
        with np.errstate(divide="ignore"):  # a weight too small for a double: a node with no mass
            lw = np.log(w) + math.log((e - s) / 2.0)
            # the density's factors not in the Jacobi weight, at the node
            lw += (a - 1.0) * (math.log(e / 2.0) if at0 else np.log(p))
            lw += (b - 1.0) * (math.log((1.0 - s) / 2.0) if at1 else np.log1p(-p))
        nodes.append(p)
        logw.append(lw)
    return np.concatenate(nodes), np.concatenate(logw)


def posterior_nodes(prior: Prior, n_u, c_u, edges=(), degree: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Nodes ``p_k`` and weights ``W[u, k]`` with ``E[f(p) | n_u, c_u] = W[u] @ f(p_k)``: the one
    quadrature over a posterior (the analysis, the band masses, the curriculum's fallback).

    Grid prior: the grid and the posterior masses (exact for every ``f``). Beta prior: the
    composite Gauss-Jacobi rule of the prior density cut at ``edges`` (``_beta_cuts``), each
    prompt's weights the rule's times its likelihood, normalised; accurate to rounding for ``f`` a
    polynomial of degree up to ``degree`` times the indicator of a union of pieces (``m`` nodes per
    piece with ``2m - 1 >= degree + n + 2 NODE_MARGIN``), for every ``a`` and ``b`` the fits allow.
    Counts may be fractional (the curriculum's discounted ones).
    """
    n_u = np.asarray(n_u, float)
    c_u = np.asarray(c_u, float)
    if prior.is_grid:
        p, w = prior.grid()
        return p, grid_posterior(p, w, n_u, c_u)
    m = int(math.ceil((degree + float(n_u.max(initial=0)) + 2) / 2)) + NODE_MARGIN
    p, logw = _beta_nodes(prior.a, prior.b, _beta_cuts(prior.a, prior.b, n_u, c_u, edges), m)
    lw = logw[None, :] + grid_likelihood(p, n_u, c_u)
    lw -= lw.max(axis=1, keepdims=True)
    W = np.exp(lw)
    return p, W / W.sum(axis=1, keepdims=True)
