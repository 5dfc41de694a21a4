"""Per-prompt statistics from counts: pass rate, intervals, pass@k, zero-signal rates, answers.

Everything here is a vectorised numpy function of the counts ``n`` (samples) and ``c`` (correct)
of a prompt, following ``docs/estimators.md`` §3, 4 and 6. All of these depend on the
prompt only through ``(n, c)``, so callers at scale evaluate them on the unique pairs and
broadcast (``unique_pairs``).
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from pipeline.checks import check_number
from pipeline.errors import ConfigError

__all__ = [
    "StatsConfig",
    "answer_stats_from_histogram",
    "beta_interval",
    "beta_moment",
    "betabinom_pmf",
    "binom_pmf",
    "jeffreys_interval",
    "pass_at_k",
    "pass_at_k_curves",
    "pass_rate",
    "posterior_pass_at_k_curves",
    "silent_chance",
    "silent_rates",
    "unbiased_expect_k",
    "unique_pairs",
    "wilson_interval",
    "zero_signal",
    "zero_signal_plugin",
]


def _plain(x):
    """A numpy scalar as the Python number it holds, so messages read ``G=0``, not ``np.int64(0)``."""
    return x.item() if isinstance(x, np.generic) else x


@dataclass(frozen=True)
class StatsConfig:
    """Settings for per-prompt statistics.

    Attributes:
        level: coverage of the Wilson and Jeffreys intervals, in (0, 1).
        prior_a: Beta prior ``a`` for zero-signal rates when ``n < G`` (Jeffreys: 1/2).
        prior_b: Beta prior ``b`` (Jeffreys: 1/2).
    """

    level: float = 0.95
    prior_a: float = 0.5
    prior_b: float = 0.5

    def __post_init__(self) -> None:
        check_number("interval level", self.level, 0, 1, lo_open=True, hi_open=True)
        for name in ("prior_a", "prior_b"):
            check_number(name, getattr(self, name), 0, lo_open=True)


def unique_pairs(n: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Unique ``(n, c)`` pairs, ordered by ``n`` then ``c``, and the index of each prompt's pair: the
    one routine for the distinct pairs (every per-pair sum groups prompts by it).

    By a count over the ``(n, c)`` grid when the grid is small next to the number of prompts (65 x 65
    cells at 64 samples: no sort of the prompts), else by a sort; both give the same arrays.

    Returns:
        ``(n_u, c_u, inverse)`` with ``n[i] == n_u[inverse[i]]`` and likewise for c.
    """
    n = np.asarray(n, dtype=np.int64).ravel()
    c = np.asarray(c, dtype=np.int64).ravel()
    base = int(n.max(initial=0)) + 1
    key = n * base + c
    if base * base > max(4 * len(n), 2**16):
        uniq, inverse = np.unique(key, return_inverse=True)
        return uniq // base, uniq % base, inverse.reshape(-1)
    uniq = np.flatnonzero(np.bincount(key, minlength=base * base))
    lookup = np.zeros(base * base, np.int64)
    lookup[uniq] = np.arange(len(uniq))
    return uniq // base, uniq % base, lookup[key]


def pass_rate(n: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``c / n`` (NaN where n = 0)."""
    n = np.asarray(n, float)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, np.asarray(c, float) / np.where(n > 0, n, 1), np.nan)


def wilson_interval(n: np.ndarray, c: np.ndarray, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score interval for ``p`` (Wilson 1927); ``[0, 1]`` where n = 0."""
    n = np.asarray(n, float)
    c = np.asarray(c, float)
    z = NormalDist().inv_cdf(0.5 + level / 2)
    nn = np.where(n > 0, n, 1.0)
    ph = c / nn
    den = 1 + z * z / nn
    centre = (ph + z * z / (2 * nn)) / den
    half = z / den * np.sqrt(ph * (1 - ph) / nn + z * z / (4 * nn * nn))
    # c = 0 and c = n give exactly 0 and 1 (rounding would leave 1e-17 off)
    lo = np.where((n > 0) & (c > 0), np.clip(centre - half, 0.0, 1.0), 0.0)
    hi = np.where((n > 0) & (c < n), np.clip(centre + half, 0.0, 1.0), 1.0)
    return lo, hi


def beta_interval(a, b, level: float) -> tuple[np.ndarray, np.ndarray]:
    """The central (equal-tailed) ``level`` interval of ``Beta(a, b)``: its ``(1 - level) / 2`` and
    ``1 - (1 - level) / 2`` quantiles (docs/estimators.md §4). The one Beta-quantile kernel: the
    Jeffreys interval here and the adaptive profile's credible interval (``adaptive``) use it."""
    from scipy.special import betaincinv  # scipy costs seconds to import: only when used

    tail = (1.0 - level) / 2.0
    return betaincinv(a, b, tail), betaincinv(a, b, 1.0 - tail)


def jeffreys_interval(n: np.ndarray, c: np.ndarray, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Equal-tailed Jeffreys interval: quantiles of ``Beta(c + 1/2, n - c + 1/2)`` (docs/estimators.md §4)."""
    n = np.asarray(n, float)
    c = np.asarray(c, float)
    return beta_interval(c + 0.5, n - c + 0.5, level)


def binom_pmf(G: int, p: np.ndarray | float, size: int | None = None) -> np.ndarray:
    """Binomial(G, p) probabilities of k = 0..G (or k < ``size``: zero past G), shape ``p.shape + (G + 1,)``.

    Exact at p = 0 and p = 1 (scipy returns the point masses there). The one binomial-pmf
    kernel: the estimators' expectations over k (``estimators.expect_k``, ``loo_weight``) and the
    allocation's value tables use it.
    """
    p = np.asarray(p, dtype=float)
    k = np.arange(G + 1 if size is None else size)
    kernel = _binom_kernel()
    if kernel is None:  # a SciPy without the kernel: its distribution, seconds more to import
        from scipy.stats import binom

        return binom.pmf(k, G, p[..., None])
    q = p[..., None]
    with np.errstate(invalid="ignore"):
        out = np.where(k <= G, np.clip(kernel(k.astype(float), float(G), q), 0.0, 1.0), 0.0)
    return np.where((q >= 0) & (q <= 1), out, np.nan)


def _binom_kernel():
    """The ufunc ``scipy.stats.binom.pmf`` evaluates (``scipy.special``'s, the same numbers: tests/test_stats.py)
    without importing ``scipy.stats`` (1.5 to 2.3 s on a busy machine, most of a report's weights section).
    None where this SciPy has none."""
    try:
        from scipy.special._ufuncs import _binom_pmf
    except ImportError:
        return None
    return _binom_pmf


def pass_at_k(n: np.ndarray, c: np.ndarray, k: int) -> np.ndarray:
    """Unbiased pass@k ``1 - C(n-c, k)/C(n, k)`` (Chen et al. 2021), as a product; NaN if k > n.

    ``C(n-c, k)/C(n, k) = prod_{i<k} (n-c-i)/(n-i)``: every factor is in [0, 1], so the product
    neither overflows nor loses precision for n in the thousands.
    """
    n = np.asarray(n, dtype=np.int64)
    c = np.asarray(c, dtype=np.int64)
    if k < 1:
        raise ConfigError(f"k={_plain(k)!r} must be >= 1")
    prod = np.ones(np.broadcast(n, c).shape)
    for i in range(k):
        with np.errstate(invalid="ignore", divide="ignore"):
            prod = prod * np.clip((n - c - i) / np.maximum(n - i, 1), 0.0, None)
    return np.where(k <= n, 1.0 - prod, np.nan)


def pass_at_k_curves(n_u: np.ndarray, c_u: np.ndarray) -> list[np.ndarray]:
    """pass@k for k = 1..n of each pair, as a list of arrays (length ``n_u[j]``).

    Pairs with the same n are done together as one cumulative product.
    """
    n_u = np.asarray(n_u, dtype=np.int64)
    c_u = np.asarray(c_u, dtype=np.int64)
    out: list[np.ndarray] = [np.empty(0)] * len(n_u)
    for n in np.unique(n_u):
        rows = np.flatnonzero(n_u == n)
        if n == 0:
            continue
        i = np.arange(n)
        ratio = np.clip((n - c_u[rows, None] - i) / (n - i), 0.0, None)
        curves = 1.0 - np.cumprod(ratio, axis=1)
        for j, row in enumerate(rows):
            out[row] = curves[j]
    return out


def _falling_ratio(top: np.ndarray, bottom: np.ndarray, G: int) -> np.ndarray:
    """``prod_{j<G} (top - j)/(bottom - j)`` = ``C(top, G)/C(bottom, G)`` for bottom >= G."""
    out = np.ones(np.broadcast(top, bottom).shape)
    for j in range(G):
        out = out * np.clip((top - j) / (bottom - j), 0.0, None)
    return out


def silent_rates(
    n: np.ndarray,
    c: np.ndarray,
    G: int,
    prior_a: float = 0.5,
    prior_b: float = 0.5,
    posterior: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Probability that a group of G is all correct, and all wrong (docs/estimators.md §3).

    For ``n >= G`` the unbiased estimates ``C(c, G)/C(n, G)`` and ``C(n-c, G)/C(n, G)``
    (hypergeometric); for ``n < G`` the Beta(a + c, b + n - c) posterior means
    ``prod_{j<G} (a + c + j)/(a + b + n + j)`` and the mirror term. With ``posterior`` the
    posterior means for every n: what an adaptive run needs, whose data-dependent n leaves the
    hypergeometric ratio biased while the posterior stays valid (docs/adaptive.md §7).
    """
    if int(G) != G or G < 1:
        raise ConfigError(f"group size G={_plain(G)!r} must be an integer >= 1")
    n = np.asarray(n, dtype=float)
    c = np.asarray(c, dtype=float)
    exact = (n >= G) & (not posterior)
    nn = np.where(exact, n, float(G))  # placeholder where not exact, avoids 0/0
    ub_plus = _falling_ratio(np.where(exact, c, 0.0), nn, G)
    ub_minus = _falling_ratio(np.where(exact, n - c, 0.0), nn, G)
    post_plus, post_minus = silent_chance(prior_a + c, prior_b + n - c, G)
    return np.where(exact, ub_plus, post_plus), np.where(exact, ub_minus, post_minus)


def silent_chance(a, b, G: int) -> tuple[np.ndarray, np.ndarray]:
    """The chance that a group of G answers is all right, and all wrong, when p ~ ``Beta(a, b)``:
    ``E[p^G] = prod_{j<G} (a + j)/(a + b + j)`` and the mirror ``E[q^G]``, the beta-binomial
    predictive at k = G and k = 0 (docs/estimators.md §3). Their sum is the chance the group is
    silent; with ``a + c, b + n - c`` it is a prompt's under its posterior after c of n right,
    which is never 0 however the counts fall (6 of 8 right under a flat prior: 0.125 at G = 8).
    A product of ratios in [0, 1]: no overflow for large a, b or G."""
    if int(G) != G or G < 1:
        raise ConfigError(f"group size G={_plain(G)!r} must be an integer >= 1")
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    plus = np.ones(np.broadcast(a, b).shape)
    minus = np.ones_like(plus)
    for j in range(int(G)):
        den = a + b + j
        plus = plus * (a + j) / den
        minus = minus * (b + j) / den
    return plus, minus


def zero_signal(n: np.ndarray, c: np.ndarray, G: int, prior_a: float = 0.5, prior_b: float = 0.5) -> np.ndarray:
    """Zero-signal rate ``z_G``: unbiased for n >= G, Beta posterior mean for n < G."""
    plus, minus = silent_rates(n, c, G, prior_a, prior_b)
    return plus + minus


def posterior_pass_at_k_curves(n_u: np.ndarray, c_u: np.ndarray, prior_a: float, prior_b: float) -> list[np.ndarray]:
    """Posterior pass@k ``1 - E[q^k]`` for k = 1..n of each pair under ``Beta(a + c, b + n - c)``,
    ``E[q^k] = prod_{j<k} (b + n - c + j)/(a + b + n + j)`` (the Beta moments of docs/estimators.md
    §3): the estimate of an adaptive run, where the unbiased ``1 - C(n-c, k)/C(n, k)`` is not."""
    n_u = np.asarray(n_u, dtype=np.int64)
    c_u = np.asarray(c_u, dtype=np.int64)
    out: list[np.ndarray] = []
    for n, c in zip(n_u.tolist(), c_u.tolist(), strict=True):
        j = np.arange(n)
        out.append(1.0 - np.cumprod((prior_b + n - c + j) / (prior_a + prior_b + n + j)))
    return out


def beta_moment(alpha, beta, i, j) -> np.ndarray:
    """``E[p^i q^j]`` under ``Beta(alpha, beta)``: ``B(alpha + i, beta + j) / B(alpha, beta)``
    (docs/estimators.md §3), broadcast over every argument. The one Beta-moment kernel: the
    allocation's posterior value tables and the curriculum's scores use it."""
    from scipy.special import betaln  # scipy costs seconds to import: only when used

    alpha = np.asarray(alpha, float)
    beta = np.asarray(beta, float)
    return np.exp(betaln(alpha + i, beta + j) - betaln(alpha, beta))


def betabinom_pmf(k, x, alpha, beta, log: bool = False) -> np.ndarray:
    """``P(x of k)`` when ``p ~ Beta(alpha, beta)`` and ``x ~ Bin(k, p)``: the beta-binomial law
    ``C(k, x) B(alpha + x, beta + k - x) / B(alpha, beta)``, broadcast over every argument (0 where
    ``x > k``); with ``log``, its logarithm. The one predictive pmf: a prompt's next ``k`` samples
    under its Beta posterior (the adaptive rounds and plan), a fixed ``n``'s counts under a Beta
    prior (the frontier), the allocation's posterior values; ``prior.predictive_pmf`` takes it over
    a grid prior."""
    from scipy.special import betaln, gammaln  # scipy costs seconds to import: only when used

    k, x = np.asarray(k, np.int64), np.asarray(x, np.int64)
    alpha, beta = np.asarray(alpha, float), np.asarray(beta, float)
    inside = x <= k
    if not inside.all():
        k, x = np.broadcast_arrays(k, np.where(inside, x, 0))
    logp = gammaln(k + 1) - gammaln(x + 1) - gammaln(k - x + 1) + betaln(alpha + x, beta + k - x) - betaln(alpha, beta)
    logp = np.where(inside, logp, -np.inf)
    return logp if log else np.exp(logp)


def zero_signal_plugin(n: np.ndarray, c: np.ndarray, G: int) -> np.ndarray:
    """Plug-in ``p_hat^G + (1 - p_hat)^G``: biased upward, reported only under this name."""
    p = pass_rate(n, c)
    return p**G + (1 - p) ** G


def unbiased_expect_k(phi: np.ndarray, G: int, n: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Unbiased estimate of ``E_{k ~ Bin(G, p)}[phi(k)]`` from n samples with c correct (n >= G):
    ``sum_j phi(j) C(c, j) C(n-c, G-j) / C(n, G)`` (docs/estimators.md §3).
    """
    from scipy.stats import hypergeom

    n = np.asarray(n, dtype=np.int64)
    c = np.asarray(c, dtype=np.int64)
    if np.any(n < G):
        raise ConfigError(f"unbiased estimate of a G={G} quantity needs n >= G")
    j = np.arange(G + 1)
    pmf = hypergeom.pmf(j, n[..., None], c[..., None], G)
    return pmf @ np.asarray(phi, float)


def answer_stats_from_histogram(
    n_prompts: int,
    parent: np.ndarray,
    counts: np.ndarray,
    correct_counts: np.ndarray | None,
) -> dict[str, np.ndarray]:
    """Answer concentration per prompt from answer histograms (docs/estimators.md §6).

    Args:
        n_prompts: number of prompts.
        parent: prompt index of each (prompt, distinct non-null answer) row, sorted ascending.
        counts: samples giving that answer.
        correct_counts: of those, how many were graded correct (None when unknown).

    Returns:
        Arrays of length ``n_prompts`` (NaN where undefined): ``n_answered``,
        ``n_distinct_answers``, ``n_distinct_correct``, ``modal_share`` (modal answer's share of
        the answered samples), ``answer_entropy`` (nats), ``modal_correct_share_grpo`` (share of
        the GRPO push on correct responses that goes to the modal correct answer: GRPO gives
        every correct response the same advantage, so it is ``n_modal_correct / c``) and
        ``modal_correct_share_reco`` (after occurrence normalisation every distinct correct
        answer gets the same total weight: ``1 / n_distinct_correct``).
    """
    parent = np.asarray(parent, dtype=np.int64)
    counts = np.asarray(counts, dtype=float)
    nan = np.full(n_prompts, np.nan)
    out = {
        k: nan.copy()
        for k in (
            "n_answered",
            "n_distinct_answers",
            "n_distinct_correct",
            "modal_share",
            "answer_entropy",
            "modal_correct_share_grpo",
            "modal_correct_share_reco",
        )
    }
    if len(parent) == 0:
        return out
    if np.any(np.diff(parent) < 0):
        raise ConfigError("answer histogram rows must be sorted by prompt")
    starts = np.flatnonzero(np.r_[True, parent[1:] != parent[:-1]])
    rows = parent[starts]
    total = np.add.reduceat(counts, starts)
    out["n_answered"][rows] = total
    out["n_distinct_answers"][rows] = np.add.reduceat((counts > 0).astype(float), starts)
    out["modal_share"][rows] = np.maximum.reduceat(counts, starts) / total
    share = counts / np.repeat(total, np.diff(np.r_[starts, len(parent)]))
    with np.errstate(divide="ignore", invalid="ignore"):
        ent = np.where(share > 0, -share * np.log(share), 0.0)
    out["answer_entropy"][rows] = np.add.reduceat(ent, starts)
    if correct_counts is not None:
        cc = np.asarray(correct_counts, dtype=float)
        d_correct = np.add.reduceat((cc > 0).astype(float), starts)
        c_total = np.add.reduceat(cc, starts)
        out["n_distinct_correct"][rows] = d_correct
        with np.errstate(divide="ignore", invalid="ignore"):
            out["modal_correct_share_grpo"][rows] = np.where(
                c_total > 0, np.maximum.reduceat(cc, starts) / c_total, np.nan
            )
            out["modal_correct_share_reco"][rows] = np.where(d_correct > 0, 1.0 / d_correct, np.nan)
    # prompts with no answered sample: zero distinct answers, the rest undefined
    for key in ("n_answered", "n_distinct_answers"):
        out[key] = np.nan_to_num(out[key], nan=0.0)
    if correct_counts is not None:
        out["n_distinct_correct"] = np.nan_to_num(out["n_distinct_correct"], nan=0.0)
    return out
