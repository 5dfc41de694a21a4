"""Rollout allocation over prompts, minimum tries, and group size for a target GRPO fidelity.

``docs/estimators.md`` §5. Given per-prompt counts (a point estimate ``p = c/n`` or a
``Beta(a + c, b + n - c)`` posterior), a budget ``B = sum_i n_i`` and bounds
``n_min <= n_i <= n_max``, maximise ``sum_i v_i(n_i)`` for one of three objectives:

- ``signal``: expected update mass of an estimator with group size n, ``v(n) = w(p, n) p q``
  (GRPO: ``E_k[sigma_k]``);
- ``knapsack``: ``v(n) = (1 - p^n - q^n) p q^2`` (Knapsack RL, arXiv 2509.25849);
- ``variance`` (Neyman): minimise ``sum_i w_i^2 p_i q_i / n_i``, i.e. ``v(n) = -w^2 p q / n``.

Where every ``v`` is concave in n (checked, within a tolerance), handing out rollouts one at a
time to the prompt with the largest marginal gain is exactly optimal. ``greedy`` does that with a
heap (the reference); ``fast`` finds the marginal-gain threshold of the last rollout by bisection
and gives every prompt all its gains above it at once (numpy), then hands the tied gains out in
the heap's order, so both return the same allocation.

Two cases are not greedy's: a ``v`` that is not concave (DAPO with resampling, ``T > 1``), and a
prompt that costs more than n rollouts (DAPO with resampling spends ``G (1 - z^T)/(1 - z)`` in
expectation, docs/estimators.md §3, averaged over the posterior under one; the budget then counts
expected rollouts). Both are solved exactly by dynamic programming over the budget (a
multiple-choice knapsack, ``allocate_dp``) where that fits, and otherwise by the Lagrangian
relaxation (``allocate_lagrangian``), whose dual bound certifies how far from the optimum its
allocation can be (``Allocation.gap``). Nothing is called optimal that is not.

Marginal gains that differ by less than ``TIE_RTOL`` times the largest value are ties (rounding
noise, e.g. of the flat ``rloo`` and ``sign`` objectives, must not choose the allocation a trainer
reads), and ties go round-robin: fewest rollouts given first, then prompt order, so identical
prompts get allocations that differ by at most 1. Values depend on a prompt only through its
``(n, c)`` counts, so tables are built once per unique pair; under a value symmetric in p and q,
``(n, c)`` and ``(n, n - c)`` share one row, so mirrored prompts get bit-identical gains.

Priced in tokens (``price_unit="tokens"``, docs/tokens.md), a rollout of prompt i costs its expected
answer length ``t_i`` and the budget is in tokens: maximise the same sum under ``sum_i t_i c_i(n_i)
<= B``. Rollouts are no longer interchangeable, so greedy by marginal value per token
(``allocate_greedy`` with ``price``) is the reference but not exact: it and the Lagrangian relaxation
report the dual bound's certified gap, and the exact programme (the expected-cost one above, with
per-prompt costs) solves what fits. Where every prompt has the same price the problem is the
rollout one at ``floor(B / t)`` rollouts, solved by the exact methods.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import heapq
import logging
import math
import re
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal, localcontext

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline import estimators as est
from pipeline import schema, stats, tokens
from pipeline.checks import check_choice, check_int, check_number
from pipeline.errors import AllocationTooLargeError, ConfigError
from pipeline.store import Store

log = logging.getLogger(__name__)

__all__ = [
    "OBJECTIVES",
    "Allocation",
    "AllocationConfig",
    "allocate",
    "allocate_dp",
    "allocate_fast",
    "allocate_greedy",
    "allocate_lagrangian",
    "allocation_tables",
    "cost_table",
    "group_size_for_fidelity",
    "grpo_fidelity",
    "is_concave",
    "min_tries",
    "prompt_prices",
    "token_budget",
    "value_table",
]

OBJECTIVES = ("signal", "knapsack", "variance")
#: What one unit of the budget is: a rollout (every rollout costs 1) or a token (a rollout of prompt
#: i costs its expected answer length; docs/tokens.md).
PRICE_UNITS = ("rollouts", "tokens")
METHODS = ("auto", "fast", "greedy", "dp", "lagrangian")
DEFAULT_ESTIMATOR = "grpo"

# Marginal gains within this relative tolerance are ties, and a gain below it times the values it
# joins is 0: far above the rounding noise of the value tables (about 1e-12 of v), far below any
# difference that matters to an allocation.
TIE_RTOL = 1e-9
# Largest exact allocation computed (``allocate_dp``), or it is refused: cells of the programme
# over whole rollouts (prompts x group sizes x budget steps, about 1 s per 1e9 on a laptop core);
# (cost, value) pairs examined when a prompt costs its expected rollouts (about 6 s per 1e8); and
# back-pointers kept (memory).
DP_MAX_CELLS = 2_000_000_000
DP_MAX_PAIRS = 100_000_000
DP_MAX_MEMORY = 100_000_000


def _plain(x):
    """A numpy scalar as the Python number it holds, so messages read ``p=0.0``, not ``np.float64(0.0)``."""
    return x.item() if isinstance(x, np.generic) else x


@dataclass(frozen=True)
class AllocationConfig:
    """Settings of one allocation.

    Attributes:
        budget: total rollouts ``B`` to hand out: exactly, or, where a prompt costs its expected
            rollouts (DAPO resampling), at most, in expectation. Priced in tokens: total expected
            tokens, at most.
        objective: ``signal``, ``knapsack`` or ``variance``.
        estimator: estimator spec for the ``signal`` objective (e.g. ``grpo``). The other two
            objectives do not depend on an estimator (docs/estimators.md §5), so another spec
            there is refused rather than ignored.
        n_min: fewest rollouts per prompt (>= 1).
        n_max: most rollouts per prompt (>= n_min).
        posterior: use the Beta posterior per prompt instead of the point estimate ``c/n``.
        prior_a: Beta prior ``a`` (Jeffreys 1/2).
        prior_b: Beta prior ``b``.
        method: ``auto`` (``fast`` where greedy is exact, else ``dp`` where it fits, else
            ``lagrangian``), ``fast`` (threshold bisection), ``greedy`` (one at a time, reference),
            ``dp`` (exact dynamic programming, or ``AllocationTooLargeError``) or ``lagrangian``
            (the relaxation with a certified gap, any size). Where greedy is not optimal (a value
            not concave in n, DAPO's expected rollouts) ``fast`` and ``greedy`` are treated as
            ``auto``, and the ``Allocation`` says which method produced it. Priced in tokens (with
            unequal prices) ``fast`` is the relaxation (the threshold on value per token) and
            ``greedy`` the one-at-a-time reference by value per token, each with its certified gap.
        price_unit: ``rollouts`` (every rollout costs 1) or ``tokens`` (a rollout of a prompt costs
            its expected answer length, ``allocate(price=...)``; the budget is in tokens).
    """

    budget: int
    objective: str = "signal"
    estimator: str = DEFAULT_ESTIMATOR
    n_min: int = 2
    n_max: int = 512
    posterior: bool = False
    prior_a: float = 0.5
    prior_b: float = 0.5
    method: str = "auto"
    price_unit: str = "rollouts"

    def __post_init__(self) -> None:
        check_choice("objective", self.objective, OBJECTIVES)
        check_choice("price_unit", self.price_unit, PRICE_UNITS)
        check_choice("method", self.method, METHODS)
        n_min, n_max = check_int("n_min", self.n_min, 1), check_int("n_max", self.n_max, 1)
        if n_max < n_min:
            raise ConfigError(f"n_max={n_max!r} must be an integer >= n_min={n_min}")
        check_int("budget", self.budget, 0)
        for name in ("prior_a", "prior_b"):
            check_number(name, getattr(self, name), 0, lo_open=True)
        e = est.get(self.estimator)  # unknown names fail here, listing the registry
        if self.objective != "signal" and e.spec != est.get(DEFAULT_ESTIMATOR).spec:
            raise ConfigError(
                f"estimator={e.spec!r} (--estimator) is used only by objective='signal'; the "
                f"{self.objective} objective does not depend on the estimator (docs/estimators.md §5): leave it out"
            )


@dataclass(frozen=True)
class Allocation:
    """Result of an allocation.

    Attributes:
        n: rollouts per prompt (int64, sums to the budget).
        value: per-prompt objective at ``n`` (for ``variance``: the variance term, minimised).
        uniform_n: the uniform allocation of the same budget.
        uniform_value: per-prompt objective at ``uniform_n``.
        total: total objective (sum of ``value``).
        uniform_total: total objective of the uniform allocation.
        sense: ``max`` or ``min`` (variance).
        p: the point estimate or posterior mean per prompt.
        method: the method that produced ``n``: ``fast``, ``greedy`` or ``dp`` (exact), or
            ``lagrangian`` (the relaxation, within ``gap`` of the optimum).
        cost: expected rollouts per prompt: ``n``, except under DAPO with resampling, where a
            prompt spends ``n (1 - z^T)/(1 - z)`` (its posterior expectation under the posterior);
            ``cost.sum() <= budget`` then (not ``==``).
        gap: certified distance of ``total`` from the optimum, in the objective's units (0 for
            the exact methods; for ``lagrangian`` the dual bound minus the total).
        price: expected tokens of one rollout per prompt, where known (None: not measured); priced
            in tokens, what the budget was spent at.
        price_unit: the unit of the budget, ``rollouts`` or ``tokens``.
        uniform_cost: expected rollouts per prompt of the uniform allocation (None: ``uniform_n``).
    """

    n: np.ndarray
    value: np.ndarray
    uniform_n: np.ndarray
    uniform_value: np.ndarray
    total: float
    uniform_total: float
    sense: str
    p: np.ndarray
    method: str
    cost: np.ndarray
    gap: float = 0.0
    price: np.ndarray | None = None
    price_unit: str = "rollouts"
    uniform_cost: np.ndarray | None = None

    @property
    def tokens(self) -> float | None:
        """Expected tokens the allocation spends (None where the prices are not known)."""
        return None if self.price is None else float(self.cost @ self.price)

    @property
    def uniform_tokens(self) -> float | None:
        """Expected tokens the uniform allocation spends (None where the prices are not known)."""
        if self.price is None:
            return None
        ucost = self.uniform_n.astype(float) if self.uniform_cost is None else self.uniform_cost
        return float(ucost @ self.price)

    @property
    def relative_gap(self) -> float:
        """``gap / |total|``: how far from the optimum at most, as a fraction of the total."""
        return self.gap / abs(self.total) if self.total else (0.0 if not self.gap else math.inf)

    @property
    def expected_rollouts(self) -> float:
        """Rollouts the allocation spends in expectation (the budget, unless DAPO resamples)."""
        return float(self.cost.sum())

    @property
    def improvement(self) -> float:
        """How much better than uniform: ``total/uniform`` (max) or ``uniform/total`` (min)."""
        num, den = (self.total, self.uniform_total) if self.sense == "max" else (self.uniform_total, self.total)
        return num / den if den else math.inf if num else 1.0


# --- value tables -------------------------------------------------------------------------------


def value_table(
    objective: str,
    n_grid: np.ndarray,
    *,
    p: np.ndarray | None = None,
    alpha: np.ndarray | None = None,
    beta: np.ndarray | None = None,
    estimator: str | est.Estimator = "grpo",
    prompt_weights: np.ndarray | None = None,
) -> np.ndarray:
    """``v(n)`` for every row (a p, or a Beta(alpha, beta) posterior) and every n in ``n_grid``.

    Returns an array of shape ``(rows, len(n_grid))``; for ``variance`` it holds ``-w^2 p q / n``
    (so larger is better for every objective).
    """
    if objective not in OBJECTIVES:
        raise ConfigError(f"objective={objective!r}; allowed: {', '.join(OBJECTIVES)}")
    posterior = p is None
    if posterior:
        alpha = np.asarray(alpha, float)
        beta = np.asarray(beta, float)
        rows = len(alpha)
    else:
        p = np.asarray(p, float)
        rows = len(p)
    q = None if posterior else 1.0 - p
    out = np.empty((rows, len(n_grid)))
    if objective == "variance":
        w2 = 1.0 if prompt_weights is None else np.asarray(prompt_weights, float) ** 2
        pq = stats.beta_moment(alpha, beta, 1, 1) if posterior else p * q
        return -(w2 * pq)[:, None] / np.asarray(n_grid, float)[None, :]
    if objective == "knapsack":
        for j, n in enumerate(n_grid):
            if posterior:
                out[:, j] = (
                    stats.beta_moment(alpha, beta, 1, 2)
                    - stats.beta_moment(alpha, beta, n + 1, 2)
                    - stats.beta_moment(alpha, beta, 1, n + 2)
                )
            else:
                out[:, j] = (1 - p**n - q**n) * p * q * q
        return out
    e = est.get(estimator)
    T = _resample_tries(e)
    for j, n in enumerate(n_grid):
        d = _loo_differences(e, int(n))
        if posterior:
            # E[p q Binom(s; n-1, p) z^t] over the posterior, term by term (``_resample_terms``): E[p q]
            # times the predictive of s of n - 1 under Beta(a + 1, b + 1)
            s = np.arange(n)
            col = np.zeros(rows)
            for w, a, b in _resample_terms(alpha, beta, int(n), T):
                pq = stats.beta_moment(a, b, 1, 1)[:, None]
                terms = pq * stats.betabinom_pmf(n - 1, s, a[:, None] + 1, b[:, None] + 1)
                col += w * (terms @ d)
            out[:, j] = col
        else:
            col = (stats.binom_pmf(int(n) - 1, p) @ d) * p * q
            out[:, j] = col * e.resample_factor(p, int(n)) if T > 1 else col
    return out


@functools.lru_cache(maxsize=4096)
def _loo_differences(e: est.Estimator, n: int) -> np.ndarray:
    """Leave-one-out differences ``A+(s+1) - A-(s)``, s = 0..n-1: ``v(n) = sum_s d_s p q Binom(s; n-1, p)``."""
    a_plus, a_minus = e.advantage_table(n)
    return a_plus[1 : n + 1] - a_minus[0:n]


def _resample_tries(e: est.Estimator) -> int:
    """T for DAPO with resampling (a silent group is drawn again, up to T tries), else 1."""
    return e.T if isinstance(e, est.DAPO) and e.mode == "resample" and e.T > 1 else 1


def _resample_terms(alpha: np.ndarray, beta: np.ndarray, n: int, T: int):
    """The posterior expectation of ``f(p) sum_{t<T} z^t`` with ``z = p^n + q^n`` as Beta averages.

    ``z^t = sum_m C(t, m) p^(n m) q^(n (t-m))``, and ``E[p^i q^j f(p)]`` under ``Beta(alpha, beta)``
    is ``B(alpha+i, beta+j)/B(alpha, beta)`` times ``E[f]`` under ``Beta(alpha+i, beta+j)``. So it is
    ``sum w E'[f]`` over the ``(w, alpha', beta')`` yielded here (one term, ``(1, alpha, beta)``, for
    T = 1). Every weight is positive: nothing cancels. docs/estimators.md §5.
    """
    for t in range(T):
        for m in range(t + 1):
            i, j = n * m, n * (t - m)
            yield math.comb(t, m) * stats.beta_moment(alpha, beta, i, j), alpha + i, beta + j


def cost_table(
    objective: str,
    n_grid: np.ndarray,
    *,
    p: np.ndarray | None = None,
    alpha: np.ndarray | None = None,
    beta: np.ndarray | None = None,
    estimator: str | est.Estimator = DEFAULT_ESTIMATOR,
) -> np.ndarray | None:
    """Expected rollouts a prompt spends at each n, or None where that is n itself.

    Only DAPO resampling (``T > 1``) differs: a silent group is drawn again, up to T tries, so a
    group of n costs ``n (1 - z^T)/(1 - z)`` in expectation (docs/estimators.md §3), at the point
    estimate of p, or averaged over the posterior (``E[sum_{t<T} z^t]``, exact: ``_resample_terms``),
    as ``value_table`` does.
    """
    if objective != "signal":
        return None
    e = est.get(estimator)
    T = _resample_tries(e)
    if T == 1:
        return None
    if p is not None:
        pp = np.asarray(p, float)
        return np.stack([e.expected_rollouts(pp, int(n)) for n in n_grid], axis=1).astype(float)
    alpha, beta = np.asarray(alpha, float), np.asarray(beta, float)
    out = np.empty((len(alpha), len(n_grid)))
    for j, n in enumerate(n_grid):
        out[:, j] = int(n) * sum(w for w, _, _ in _resample_terms(alpha, beta, int(n), T))
    return out


# --- allocation ---------------------------------------------------------------------------------


def _uniform(budget: int, N: int, n_min: int, n_max: int) -> np.ndarray:
    base, extra = divmod(budget, N)
    n = np.full(N, base, dtype=np.int64)
    n[:extra] += 1
    return np.clip(n, n_min, n_max)


def _uniform_expected(cost: np.ndarray, key: np.ndarray, budget: float, n_min: int) -> np.ndarray:
    """The uniform baseline when a prompt costs its expected rollouts: the largest group size every
    prompt can have within the budget, then one more for prompts in order while it still fits."""
    room = budget * (1 + 1e-12)
    spent = np.bincount(key, minlength=cost.shape[0]) @ cost  # total at each common n
    fits = np.flatnonzero(spent <= room)
    j = int(fits[-1]) if fits.size else int(np.argmin(spent))  # (n = 1 costs T: rises are not assured)
    n = np.full(len(key), n_min + j, dtype=np.int64)
    if fits.size and j + 1 < cost.shape[1]:
        n[np.cumsum(cost[key, j + 1] - cost[key, j]) <= room - spent[j]] += 1
    return n


def _check_budget(budget: int, N: int, n_min: int, n_max: int) -> None:
    if N == 0:
        raise ConfigError("no prompts to allocate over")
    if budget < n_min * N:
        raise ConfigError(
            f"budget {budget} is impossible: {N} prompts with n_min={n_min} need at least {n_min * N} rollouts"
        )
    if budget > n_max * N:
        raise ConfigError(
            f"budget {budget} is above the most that can be used: {N} prompts with "
            f"n_max={n_max} take at most {n_max * N} rollouts"
        )


def _check_expected_budget(
    cost: np.ndarray, key: np.ndarray, budget: float, n_min: int, n_max: int, unit: str = "rollouts"
) -> None:
    """``_check_budget`` in expected rollouts (DAPO resampling) or expected tokens (``unit``)."""
    if len(key) == 0:
        raise ConfigError("no prompts to allocate over")
    least, most = float(cost.min(axis=1)[key].sum()), float(cost.max(axis=1)[key].sum())
    why = (
        "a silent group is resampled: docs/estimators.md §3"
        if unit == "rollouts"
        else "a rollout costs its prompt's expected answer length: docs/tokens.md"
    )
    if budget < least * (1 - 1e-12):
        raise ConfigError(
            f"budget {budget} is impossible: {len(key)} prompts with n_min={n_min} need at least {least:.6g} "
            f"expected {unit} ({why})"
        )
    if budget > most * (1 + 1e-12):
        raise ConfigError(
            f"budget {budget} is above the most that can be used: {len(key)} prompts with n_max={n_max} "
            f"take at most {most:.6g} expected {unit}"
        )


def _tolerance(table: np.ndarray) -> float:
    """Absolute tolerance of a table's values: ``TIE_RTOL`` times its largest |v| (0 for a zero table)."""
    return TIE_RTOL * float(np.abs(table).max(initial=0.0))


def _noise_floor(table: np.ndarray, rtol: float, width: int) -> np.ndarray:
    """Per difference of ``width + 1`` neighbouring values: ``rtol`` times the largest |v| among
    them, the size below which a difference is rounding noise. Relative to the values nearby and
    not to the whole table, so that the small true gains far out (the variance objective's
    ``p q / n^2`` at n = 10^4) are kept."""
    a = np.abs(table)
    out = a[:, : a.shape[1] - width]
    for s in range(1, width + 1):
        out = np.maximum(out, a[:, s : a.shape[1] - width + s])
    return rtol * out


def is_concave(table: np.ndarray, rtol: float = 0.0) -> bool:
    """Whether every row's marginal gains are non-increasing, allowing rises below ``rtol`` times
    the values they come from (rounding noise: a flat ``v`` rises and falls by 1e-13)."""
    rise = np.diff(table, n=2, axis=1)
    return not (rise.size and bool((rise > _noise_floor(table, rtol, 2)).any()))


def _gain_table(table: np.ndarray, rtol: float) -> np.ndarray:
    """The marginal gains both greedy methods hand out, made non-increasing per row (a running
    minimum, which changes nothing for a concave table).

    With ``rtol > 0``, gains within rounding noise become exactly equal, so the tie rule decides
    rather than the noise: a gain below ``rtol`` times the values it joins is 0, and the others are
    rounded to the nearest multiple of ``rtol`` relative to themselves (a monotone rounding: no
    two gains change order).
    """
    gains = np.diff(table, axis=1)
    if rtol > 0:
        mant, expo = np.frexp(gains)
        bits = max(1, round(-math.log2(rtol)))
        gains = np.ldexp(np.rint(np.ldexp(mant, bits)), expo - bits)
        gains[np.abs(gains) <= _noise_floor(table, rtol, 1)] = 0.0  # also turns -0.0 into 0.0
    return np.minimum.accumulate(gains, axis=1)


def allocate_greedy(
    table: np.ndarray,
    key: np.ndarray,
    budget: float,
    n_min: int,
    n_max: int,
    rtol: float = 0.0,
    *,
    price: np.ndarray | None = None,
) -> np.ndarray:
    """Reference: one rollout at a time to the prompt with the largest marginal gain (heap).

    With ``price`` (per row of ``table``: what one rollout of its prompts costs, e.g. expected
    tokens) the budget is in those units, at most: the next rollout goes to the prompt with the
    largest gain per unit of price among those whose next rollout still fits, and a gain below 0 is
    not taken. That is greedy on each prompt's (concave) value curve by value per token: not exact
    (the last units of budget may fit no best step; ``allocate_lagrangian``'s bound certifies how
    far), and with every price equal (and no gain below 0) it hands out what the unpriced greedy
    does at ``floor(budget / price)`` rollouts.

    Args:
        table: ``v(n)`` for n = n_min..n_max per unique row (concave: for any other table see
            ``allocate_dp``).
        key: row of ``table`` for each prompt.
        budget: total rollouts.
        n_min: fewest per prompt.
        n_max: most per prompt.
        rtol: gains equal to this relative tolerance are ties (``_gain_table``; allocate passes
            ``TIE_RTOL``).

    Ties go round-robin: to the prompt with the fewest rollouts beyond n_min, then the lowest index.
    """
    if price is not None:
        return _greedy_priced(table, key, budget, n_min, n_max, rtol, np.asarray(price, float))
    key = np.asarray(key, dtype=np.int64)
    N = len(key)
    _check_budget(budget, N, n_min, n_max)
    gains = _gain_table(table, rtol).tolist()
    L = n_max - n_min
    n = [n_min] * N
    remaining = budget - n_min * N
    if remaining == 0 or L == 0:
        return np.asarray(n, dtype=np.int64)
    keys = key.tolist()
    heap = [(-gains[keys[i]][0], 0, i) for i in range(N)]
    heapq.heapify(heap)
    replace, pop = heapq.heapreplace, heapq.heappop
    for _ in range(remaining):
        i = heap[0][2]
        j = n[i] - n_min + 1
        n[i] += 1
        if j < L:
            replace(heap, (-gains[keys[i]][j], j, i))
        else:
            pop(heap)
    return np.asarray(n, dtype=np.int64)


def _greedy_priced(
    table: np.ndarray, key: np.ndarray, budget: float, n_min: int, n_max: int, rtol: float, price: np.ndarray
) -> np.ndarray:
    """``allocate_greedy`` with a price per row: the heap ordered by gain per unit of price."""
    key = np.asarray(key, dtype=np.int64)
    N = len(key)
    grid = np.arange(n_min, n_max + 1, dtype=float)
    _check_expected_budget(price[:, None] * grid[None, :], key, budget, n_min, n_max, "tokens")
    gains = _gain_table(table, rtol)
    ratio = (gains / price[:, None]).tolist()
    gains = gains.tolist()
    prices = price.tolist()
    L = n_max - n_min
    n = [n_min] * N
    keys = key.tolist()
    # what is left, with the rounding of a sum of floats allowed for (as the expected-cost checks do)
    left = budget * (1 + 1e-12) - n_min * float(price[key].sum())
    if L == 0:
        return np.asarray(n, dtype=np.int64)
    heap = [(-ratio[keys[i]][0], 0, i) for i in range(N)]
    heapq.heapify(heap)
    while heap:
        _, j, i = heap[0]
        u = keys[i]
        if gains[u][j] < 0:
            break  # the best gain left lowers the total: the budget is an upper limit, not a target
        if prices[u] > left:
            heapq.heappop(heap)  # what is left only shrinks: this prompt's next rollout never fits
            continue
        n[i] += 1
        left -= prices[u]
        if j + 1 < L:
            heapq.heapreplace(heap, (-ratio[u][j + 1], j + 1, i))
        else:
            heapq.heappop(heap)
    return np.asarray(n, dtype=np.int64)


def _sortable(x: float) -> int:
    """Order-preserving map of a float64 to an integer."""
    i = int(np.array(x, dtype=np.float64).view(np.int64))
    return i if i >= 0 else -(i & 0x7FFFFFFFFFFFFFFF) - 1


def _unsortable(k: int) -> float:
    i = k if k >= 0 else -(k + 1) | -0x8000000000000000
    return float(np.array(i, dtype=np.int64).view(np.float64))


def allocate_fast(
    table: np.ndarray, key: np.ndarray, budget: int, n_min: int, n_max: int, rtol: float = 0.0
) -> np.ndarray:
    """Threshold method: bisection on the marginal gain of the last rollout handed out.

    With gains made non-increasing per row (``_gain_table``), the greedy hands out exactly the
    gains ``>= t`` where ``t`` is the budget-th largest gain counted with multiplicity. ``t`` is
    found by bisection over the ordered float64 bit patterns (at most 64 steps, each a vectorised
    count over the unique rows); gains strictly above ``t`` are taken at once, and the gains equal
    to ``t`` in the heap's order: by step (fewest rollouts given first), then by prompt. Same
    arguments as ``allocate_greedy``, and the same allocation.
    """
    key = np.asarray(key, dtype=np.int64)
    N = len(key)
    _check_budget(budget, N, n_min, n_max)
    R = budget - n_min * N
    L = n_max - n_min
    n = np.full(N, n_min, dtype=np.int64)
    if R == 0 or L == 0:
        return n
    rm = _gain_table(table, rtol)
    mult = np.bincount(key, minlength=table.shape[0])
    used = mult > 0
    rm_used, mult_used = rm[used], mult[used]

    def count_ge(t: float) -> int:
        return int((rm_used >= t).sum(axis=1) @ mult_used)

    lo = _sortable(float(rm_used.min()))  # count_ge(lo) = N * L >= R
    hi = _sortable(float(rm_used.max())) + 1  # count_ge(hi) = 0 < R
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if count_ge(_unsortable(mid)) >= R:
            lo = mid
        else:
            hi = mid
    t = _unsortable(lo)
    first = (rm > t).sum(axis=1)[key]  # a prompt's tied gains sit at steps first .. first + ties - 1
    ties = (rm == t).sum(axis=1)[key]
    n += first
    left = R - int(first.sum())
    if left > 0:
        # the smallest step J such that the tied gains at steps < J number at least `left`
        lo_j, hi_j = 0, L
        while hi_j - lo_j > 1:
            mid = (lo_j + hi_j) // 2
            if int(np.clip(mid - first, 0, ties).sum()) >= left:
                hi_j = mid
            else:
                lo_j = mid
        below = np.clip(hi_j - 1 - first, 0, ties)  # every tied gain at a step < J - 1
        n += below
        at = np.flatnonzero((first <= hi_j - 1) & (hi_j - 1 < first + ties))  # those at step J - 1
        n[at[: left - int(below.sum())]] += 1
    return n


def _too_large(what: str, size: float, limit: float, N: int, L: int) -> AllocationTooLargeError:
    return AllocationTooLargeError(
        f"the exact allocation is too large: {what} {size:.3g} > {limit:.3g} ({N} prompts, {L + 1} group "
        "sizes each). Its value is not concave in n, a prompt costs its expected rollouts (DAPO "
        "resampling) or rollouts are priced in tokens, so greedy would not be optimal; use fewer prompts, "
        "a smaller n_max or budget, or an estimator without resampling"
    )


def allocate_dp(
    table: np.ndarray,
    key: np.ndarray,
    budget: int,
    n_min: int,
    n_max: int,
    *,
    cost: np.ndarray | None = None,
    tol: float = 0.0,
    unit: float = 1.0,
) -> np.ndarray:
    """Exact optimum for any table: dynamic programming over the budget (multiple-choice knapsack).

    With ``cost`` None a prompt at n costs n rollouts and the budget is handed out exactly; the
    table of best values per budget used is ``N x (R + 1)`` with ``R = budget - N n_min``. With
    ``cost`` (expected rollouts per row and n, not integers) the expected total is kept
    ``<= budget``, and the programme keeps the Pareto front of (cost, value) pairs instead.
    Values are compared in units of ``tol`` (when > 0) so rounding noise does not decide; of equal
    values the cheaper allocation is kept. ``unit``: what one rollout costs in the budget's units
    (about; tokens per rollout when priced in tokens), for the estimate of the front's size.

    Raises:
        AllocationTooLargeError: more than ``DP_MAX_CELLS`` cells (``DP_MAX_PAIRS`` pairs with
            ``cost``) or ``DP_MAX_MEMORY`` back-pointers.
    """
    key = np.asarray(key, dtype=np.int64)
    N, L = len(key), n_max - n_min
    value = np.rint(table / tol) if tol > 0 else np.asarray(table, float)
    if cost is not None:
        return _allocate_dp_expected(value, np.asarray(cost, float), key, budget, n_min, n_max, unit)
    _check_budget(budget, N, n_min, n_max)
    R = budget - n_min * N
    Lc = min(L, R)
    if N * (Lc + 1) * (R + 1) > DP_MAX_CELLS:
        raise _too_large("cells", N * (Lc + 1) * (R + 1), DP_MAX_CELLS, N, L)
    if N * (R + 1) > DP_MAX_MEMORY:
        raise _too_large("back-pointers", N * (R + 1), DP_MAX_MEMORY, N, L)
    best = np.full(R + 1, -np.inf)  # best value of the prompts so far using exactly r extra rollouts
    best[0] = 0.0
    choice = np.zeros((N, R + 1), dtype=np.int16 if Lc < 2**15 else np.int32)
    for i, u in enumerate(key):
        row = value[u]
        new = best + row[0]
        for extra in range(1, Lc + 1):
            cand = best[: R + 1 - extra] + row[extra]
            better = cand > new[extra:]
            new[extra:][better] = cand[better]
            choice[i, extra:][better] = extra
        best = new
    n = np.empty(N, dtype=np.int64)
    r = R
    for i in range(N - 1, -1, -1):
        n[i] = n_min + choice[i, r]
        r -= int(choice[i, r])
    return n


def _allocate_dp_expected(
    value: np.ndarray, cost: np.ndarray, key: np.ndarray, budget: float, n_min: int, n_max: int, unit: float = 1.0
) -> np.ndarray:
    """``allocate_dp`` where a prompt costs its expected rollouts (real numbers): after each prompt
    keep only the (cost, value) pairs no other pair beats on both, within the budget."""
    N, L = len(key), n_max - n_min
    _check_expected_budget(cost, key, budget, n_min, n_max)
    room = budget * (1 + 1e-12)  # expected costs are sums of floats: do not refuse on the last bit
    # Refuse at once what would surely be refused later: the front has held up to about 20 pairs
    # per rollout of budget left to share (slack), so about 10 on average over the prompts.
    slack = max(budget - float(cost[key, 0].sum()), 0.0) / unit
    guess = N * (L + 1) * 10 * (slack + 1)
    if guess > DP_MAX_PAIRS:
        raise _too_large("pairs (estimated)", guess, DP_MAX_PAIRS, N, L)
    # the least the prompts after i can cost, so no pair that leaves them too little is kept
    rest = np.concatenate([np.cumsum(cost.min(axis=1)[key[::-1]])[::-1], [0.0]])
    front_c, front_v = np.zeros(1), np.zeros(1)
    parents: list[np.ndarray] = []
    work = kept = 0
    for i, u in enumerate(key):
        cc = (front_c[:, None] + cost[u][None, :]).ravel()
        vv = (front_v[:, None] + value[u][None, :]).ravel()
        work += cc.size
        if work > DP_MAX_PAIRS or kept > DP_MAX_MEMORY:
            raise _too_large("pairs", max(work, kept), DP_MAX_PAIRS, N, L)
        idx = np.flatnonzero(cc <= room - rest[i + 1])
        idx = idx[np.argsort(cc[idx], kind="stable")]  # by cost (an equal-cost pair beaten later is harmless)
        v = vv[idx]
        idx = idx[v > np.concatenate([[-np.inf], np.maximum.accumulate(v)[:-1]])]  # beats every cheaper pair
        kept += idx.size
        parents.append(idx)
        front_c, front_v = cc[idx], vv[idx]
    n = np.empty(N, dtype=np.int64)
    j = len(front_v) - 1  # the front is sorted by cost and value: the last pair is the best value
    for i in range(N - 1, -1, -1):
        j, extra = divmod(int(parents[i][j]), L + 1)
        n[i] = n_min + extra
    return n


# Most single-prompt moves tried after the relaxation's allocation (each raises the total or, with
# whole-rollout budgets, spends one rollout left over).
LAGRANGIAN_MAX_MOVES = 10_000


@dataclass(frozen=True)
class Relaxation:
    """An allocation found by the Lagrangian relaxation and the bound that certifies it.

    Attributes:
        n: rollouts per prompt (feasible: within the budget, exactly the budget for whole rollouts).
        total: ``sum_i v_i(n_i)``.
        bound: the dual's value, an upper bound on the total of every feasible allocation.
        multiplier: the price of one rollout (lambda) where the bound was taken.
    """

    n: np.ndarray
    total: float
    bound: float
    multiplier: float

    @property
    def gap(self) -> float:
        """Certified distance to the optimum: ``bound - total`` (>= 0; 0 up to rounding when exact)."""
        return max(self.bound - self.total, 0.0)


def allocate_lagrangian(
    table: np.ndarray,
    key: np.ndarray,
    budget: int,
    n_min: int,
    n_max: int,
    *,
    cost: np.ndarray | None = None,
) -> Relaxation:
    """A feasible allocation for any table, with a certified bound on how far it is from the optimum.

    Pricing a rollout at ``lambda`` splits the problem by prompt: ``D(lambda) = lambda B + sum_i
    max_n (v_i(n) - lambda c_i(n))`` bounds the optimum from above for every ``lambda >= 0`` (every
    real ``lambda`` when the budget must be spent exactly: whole rollouts, ``cost`` None), since a
    feasible allocation pays ``sum_i c_i(n_i) <= B``. Each prompt's best n at a price lies on the
    concave hull of its (cost, value) points, and the total cost falls as the price rises: bisection
    over the float64 bit patterns (at most 64 steps, each vectorised over the unique rows) finds
    the two neighbouring prices where it crosses the budget. Every prompt takes its choice at the
    higher price (within budget); prompts whose choice differs at the lower price move up to it,
    best ratio first, then in prompt order, while the budget lasts; then single-prompt moves that
    raise the total (or, for whole rollouts, spend what is left at the best marginal gain) are made
    while any fits. The gap ``bound - total`` is at most the value of one prompt's hull step when
    no such move is left, so it shrinks relative to the total as prompts are added
    (docs/estimators.md §5).
    """
    key = np.asarray(key, dtype=np.int64)
    N = len(key)
    value = np.asarray(table, float)
    whole = cost is None
    if whole:
        _check_budget(budget, N, n_min, n_max)
        cost = np.broadcast_to(np.arange(n_min, n_max + 1, dtype=float), value.shape)
    else:
        cost = np.asarray(cost, float)
        _check_expected_budget(cost, key, budget, n_min, n_max)
    used, pos = np.unique(key, return_inverse=True)
    v, c = value[used], cost[used]
    mult = np.bincount(pos, minlength=len(used)).astype(float)
    rows = np.arange(len(used))
    room = float(budget) if whole else budget * (1 + 1e-12)

    def choose(lam: float) -> np.ndarray:  # each row's best n at price lam (ties: the fewest rollouts)
        return np.argmax(v - lam * c, axis=1)

    def spent(j: np.ndarray) -> float:
        return float(c[rows, j] @ mult)

    def dual(lam: float, j: np.ndarray) -> float:
        # lam B + sum_i max_n (v - lam c), taken about the choice j (exact algebra for any j), so a
        # price of 1e300 at a forced allocation does not swamp the values
        vj, cj = v[rows, j], c[rows, j]
        best = np.max(v - vj[:, None] - lam * (c - cj[:, None]), axis=1)
        return lam * (budget - float(cj @ mult)) + float(vj @ mult) + float(best @ mult)

    # prices in [lam_min, 1e300]: at 1e300 every prompt takes its cheapest n, which fits the budget
    lam_min = -1e300 if whole else 0.0
    j_lo = choose(lam_min)
    if spent(j_lo) <= room:
        lam_lo = lam_hi = lam_min
        j_hi = j_lo
    else:
        a, b = _sortable(lam_min), _sortable(1e300)  # spent(a) > room >= spent(b)
        while b - a > 1:
            mid = (a + b) // 2
            if spent(choose(_unsortable(mid))) <= room:
                b = mid
            else:
                a = mid
        lam_lo, lam_hi = _unsortable(a), _unsortable(b)
        j_lo, j_hi = choose(lam_lo), choose(lam_hi)
    j = j_hi[pos]
    left = room - spent(j_hi)
    # move the prompts whose choice differs at the lower price, best value per rollout first
    moving = np.flatnonzero(j_lo != j_hi)
    dv = v[moving, j_lo[moving]] - v[moving, j_hi[moving]]
    dc = c[moving, j_lo[moving]] - c[moving, j_hi[moving]]
    by_row = np.argsort(pos, kind="stable")  # prompts grouped by row, in prompt order
    starts = np.concatenate([[0], np.cumsum(mult.astype(np.int64))])
    for r in np.lexsort((by_row[starts[moving]], -dv / np.where(dc > 0, dc, np.inf))):
        if dv[r] <= 0:
            continue
        members = by_row[starts[moving[r]] : starts[moving[r] + 1]]
        k = len(members) if dc[r] <= 0 else min(len(members), int(max(left, 0.0) // dc[r]))
        while k > 0 and dc[r] * k > left:  # floor division of floats may round up
            k -= 1
        j[members[:k]] = j_lo[moving[r]]
        left -= max(dc[r], 0.0) * k
    j = _improve(v, c, pos, j, left, whole)
    total = float(v[pos, j].sum())
    bound = min(dual(lam_lo, j_lo), dual(lam_hi, j_hi))
    return Relaxation(n=n_min + j, total=total, bound=bound, multiplier=lam_hi)


def _improve(v: np.ndarray, c: np.ndarray, pos: np.ndarray, j: np.ndarray, left: float, whole: bool) -> np.ndarray:
    """Single-prompt moves after the relaxation, best gain first, the lowest prompt of a state first:
    with whole rollouts, spend the ``left`` rollouts one at a time at the best marginal gain; with
    expected rollouts, move to any n that fits what is left and raises the total."""
    L1 = v.shape[1]
    code = pos * L1 + j
    states, inverse = np.unique(code, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    bounds = np.concatenate([[0], np.cumsum(np.bincount(inverse, minlength=len(states)))])
    # per state (row, j), its prompts as -index in ascending order: pop() gives the lowest prompt
    members = {int(s): (-order[bounds[i] : bounds[i + 1]][::-1]).tolist() for i, s in enumerate(states)}
    left = round(left) if whole else left
    for _ in range(LAGRANGIAN_MAX_MOVES):
        live = np.array([s for s, m in members.items() if m], dtype=np.int64)
        sr, sj = np.divmod(live, L1)
        if whole:
            if left <= 0:
                break
            gain = np.where(sj + 1 < L1, v[sr, np.minimum(sj + 1, L1 - 1)] - v[sr, sj], -np.inf)
            s = int(np.argmax(gain))
            if not np.isfinite(gain[s]):
                break
            to, spend = sj[s] + 1, 1
        else:
            gain = v[sr] - v[sr, sj][:, None]
            extra = c[sr] - c[sr, sj][:, None]
            gain[(extra > left) | (gain <= 0)] = -np.inf
            flat = int(np.argmax(gain))
            s, to = divmod(flat, L1)
            if not np.isfinite(gain[s, to]):
                break
            spend = float(extra[s, to])
        i = members[int(live[s])].pop()
        j[-i] = to
        bisect.insort(members.setdefault(int(sr[s] * L1 + to), []), i)
        left -= spend
    return j


def _prompt_name(prompt_ids, i: int) -> str:
    if prompt_ids is None:
        return f"at row {i}"
    name = prompt_ids[i]
    return repr(name.as_py() if isinstance(name, pa.Scalar) else str(name))


def allocate(
    n_obs: np.ndarray,
    c_obs: np.ndarray,
    config: AllocationConfig,
    prompt_weights: np.ndarray | None = None,
    prompt_ids=None,
    price: np.ndarray | None = None,
) -> Allocation:
    """Allocate ``config.budget`` rollouts (or tokens) over prompts with observed counts ``(n_obs, c_obs)``.

    Args:
        n_obs: samples observed per prompt.
        c_obs: correct among them.
        config: objective, budget, bounds, estimator, posterior or point estimate, method.
        prompt_weights: ``w_i`` of the variance objective (default 1: the dataset pass rate).
        prompt_ids: names of the prompts (a list or an Arrow array), for messages (default: row
            numbers).
        price: expected tokens of one rollout per prompt (``prompt_prices``). Needed when
            ``config.price_unit`` is ``tokens``, where it is what a rollout costs; priced in
            rollouts it changes nothing and only lets the result say what it spends in tokens.

    The method used is ``config.method`` where it is exact (``fast`` and ``greedy`` where the value
    table is concave and a prompt costs n rollouts); otherwise the exact ``dp`` where it fits, and
    the ``lagrangian`` relaxation with its certified ``Allocation.gap`` where it does not
    (``Allocation.method`` says which).

    Raises:
        ConfigError: impossible budget (the message gives the minimum), or point estimates asked
            for a prompt with no samples.
        AllocationTooLargeError: ``method="dp"`` asked and the exact programme would be too large.
    """
    n_obs = np.asarray(n_obs, dtype=np.int64)
    c_obs = np.asarray(c_obs, dtype=np.int64)
    N = len(n_obs)
    if N == 0:
        raise ConfigError("no prompts to allocate over")
    if not config.posterior and np.any(n_obs <= 0):
        empty = np.flatnonzero(n_obs <= 0)
        raise ConfigError(
            f"{len(empty)} prompts have no samples (first: prompt {_prompt_name(prompt_ids, int(empty[0]))}), "
            "so no point estimate: use the posterior (posterior=True, --posterior)"
        )
    if price is not None:
        price = _check_prices(price, N, prompt_ids)
    key, table, cost = allocation_tables(n_obs, c_obs, config, prompt_weights, price)
    if config.posterior:
        p = (config.prior_a + c_obs) / (config.prior_a + config.prior_b + n_obs)
    else:
        p = c_obs / n_obs
    n, method, bound = _solve(table, key, config, cost)
    if cost is None:
        uniform = _uniform(config.budget, N, config.n_min, config.n_max)
        spent, uspent = n.astype(float), uniform.astype(float)
    else:
        uniform = _uniform_expected(cost, key, config.budget, config.n_min)
        spent, uspent = cost[key, n - config.n_min], cost[key, uniform - config.n_min]
        if config.price_unit == "tokens":  # back to expected rollouts
            spent, uspent = spent / price, uspent / price
    value = table[key, n - config.n_min]
    uvalue = table[key, uniform - config.n_min]
    sense = "min" if config.objective == "variance" else "max"
    total = float(value.sum())
    gap = 0.0 if bound is None else max(bound - total, 0.0)
    if sense == "min":
        value, uvalue, total = -value, -uvalue, -total
    return Allocation(
        n=n,
        value=value,
        uniform_n=uniform,
        uniform_value=uvalue,
        total=total,
        uniform_total=float(uvalue.sum()),
        sense=sense,
        p=p,
        method=method,
        cost=spent,
        gap=gap,
        price=price,
        price_unit=config.price_unit,
        uniform_cost=uspent,
    )


def allocation_tables(
    n_obs: np.ndarray,
    c_obs: np.ndarray,
    config: AllocationConfig,
    prompt_weights: np.ndarray | None = None,
    price: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``(key, table, cost)``: the value table ``allocate`` hands out (one row per distinct prompt,
    columns n = n_min..n_max), each prompt's row, and the expected-cost table (None where a prompt
    costs n rollouts). An impossible budget is refused before the value table is built.

    Prompts that mirror each other, ``(n, c)`` and ``(n, n - c)``, under a value symmetric in p and
    q share one computed row, so their gains are bit-identical and the tie rule, not rounding,
    orders them.

    Priced in tokens (``config.price_unit``, ``price`` per prompt), a row is a distinct (counts,
    price) pair and the cost table is each row's price times its expected rollouts at each n.
    """
    if config.price_unit == "tokens":
        if price is None:
            raise ConfigError("price_unit='tokens' needs each prompt's price (its expected answer length)")
        return _priced_tables(n_obs, c_obs, config, prompt_weights, np.asarray(price, float))
    n_obs = np.asarray(n_obs, dtype=np.int64)
    c_obs = np.asarray(c_obs, dtype=np.int64)
    N = len(n_obs)
    n_grid = np.arange(config.n_min, config.n_max + 1)
    c_row = np.minimum(c_obs, n_obs - c_obs) if _mirror_symmetric(config, n_grid) else c_obs
    if prompt_weights is not None:
        # weights break the (n, c) sharing; one row per prompt
        key = np.arange(N)
        n_u, c_u = n_obs, c_row
    else:
        n_u, c_u, key = stats.unique_pairs(n_obs, c_row)
    if config.posterior:
        where = {"alpha": config.prior_a + c_u, "beta": config.prior_b + n_u - c_u}
    else:
        where = {"p": c_u / n_u}
    cost = cost_table(config.objective, n_grid, estimator=config.estimator, **where)
    if cost is None:  # refuse an impossible budget before the (larger) value table is built
        _check_budget(config.budget, N, config.n_min, config.n_max)
    else:
        _check_expected_budget(cost, key, config.budget, config.n_min, config.n_max)
    table = value_table(config.objective, n_grid, estimator=config.estimator, prompt_weights=prompt_weights, **where)
    return key, table, cost


def _priced_tables(
    n_obs: np.ndarray, c_obs: np.ndarray, config: AllocationConfig, prompt_weights, price: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``allocation_tables`` priced in tokens: the rollout tables, one row per distinct (row, price)."""
    rollouts = dataclasses.replace(config, price_unit="rollouts", budget=0)
    n_grid = np.arange(config.n_min, config.n_max + 1)
    n_obs = np.asarray(n_obs, dtype=np.int64)
    c_row = np.asarray(c_obs, dtype=np.int64)
    if _mirror_symmetric(config, n_grid):
        c_row = np.minimum(c_row, n_obs - c_row)
    if prompt_weights is not None:
        key0, n_u, c_u = np.arange(len(n_obs)), n_obs, c_row
    else:
        n_u, c_u, key0 = stats.unique_pairs(n_obs, c_row)
    rows, key = np.unique(np.column_stack([key0.astype(float), price]), axis=0, return_inverse=True)
    key = np.asarray(key, np.int64).reshape(-1)
    row0, row_price = rows[:, 0].astype(np.int64), rows[:, 1]
    where = (
        {"alpha": rollouts.prior_a + c_u, "beta": rollouts.prior_b + n_u - c_u}
        if config.posterior
        else {"p": c_u / n_u}
    )
    base = cost_table(config.objective, n_grid, estimator=config.estimator, **where)
    rollouts_at = np.broadcast_to(n_grid.astype(float), (len(n_u), len(n_grid))) if base is None else base
    cost = row_price[:, None] * rollouts_at[row0]
    _check_expected_budget(cost, key, config.budget, config.n_min, config.n_max, "tokens")
    table = value_table(config.objective, n_grid, estimator=config.estimator, prompt_weights=prompt_weights, **where)
    return key, table[row0], cost


def _check_prices(price, N: int, prompt_ids=None) -> np.ndarray:
    """Prices per prompt as floats, or ``ConfigError`` naming the first prompt whose price is not a
    positive finite number of tokens."""
    price = np.asarray(price, float).reshape(-1)
    if len(price) != N:
        raise ConfigError(f"{len(price)} prices for {N} prompts: give one expected answer length per prompt")
    bad = np.flatnonzero(~(np.isfinite(price) & (price > 0)))
    if bad.size:
        i = int(bad[0])
        raise ConfigError(
            f"prompt {_prompt_name(prompt_ids, i)}: price {_plain(price[i])!r} is not a positive number of tokens"
        )
    return price


def _mirror_symmetric(config: AllocationConfig, n_grid: np.ndarray) -> bool:
    """Whether ``v`` and the cost are the same at p and 1 - p: the ``variance`` objective and every
    ``signal`` estimator whose leave-one-out differences read the same backwards (GRPO, RLOO, Dr.
    GRPO, DAPO, ...), under point estimates or a posterior with a symmetric prior (a = b)."""
    if config.posterior and config.prior_a != config.prior_b:
        return False
    if config.objective != "signal":
        return config.objective == "variance"
    e = est.get(config.estimator)
    for n in n_grid:
        d = _loo_differences(e, int(n))
        if not np.allclose(d, d[::-1], rtol=1e-12, atol=1e-300):
            return False
    return True


def _solve(table: np.ndarray, key: np.ndarray, config: AllocationConfig, cost: np.ndarray | None):
    """``(n, method, bound)``: the method ``config.method`` asks for where it is exact, else the
    exact programme where it fits, else the Lagrangian relaxation (``bound``: its certificate;
    None for the exact methods)."""
    if config.price_unit == "tokens":
        return _solve_priced(table, key, config, cost)
    args = (table, key, config.budget, config.n_min, config.n_max)
    method = config.method
    if method == "lagrangian":
        r = allocate_lagrangian(*args, cost=cost)
        return r.n, "lagrangian", r.bound
    greedy_exact = cost is None and is_concave(table, TIE_RTOL)
    if method != "dp" and greedy_exact:
        fn = allocate_greedy if method == "greedy" else allocate_fast
        return fn(*args, rtol=TIE_RTOL), "greedy" if method == "greedy" else "fast", None
    if method != "dp":
        log.info(
            "greedy is not optimal here (%s): allocating by exact dynamic programming where it fits",
            "DAPO resampling charges expected rollouts" if cost is not None else "the value is not concave in n",
        )
    return _exact_or_relaxed(args, method, cost, tol=_tolerance(table))


def _exact_or_relaxed(args: tuple, method: str, cost, **dp_options):
    """The exact programme where it fits (``dp`` refuses otherwise), else the Lagrangian relaxation
    with its certified bound: ``(n, method, bound)``."""
    try:
        return allocate_dp(*args, cost=cost, **dp_options), "dp", None
    except AllocationTooLargeError as exc:
        if method == "dp":
            raise
        log.info("%s; allocating by the Lagrangian relaxation with a certified gap instead", exc)
    r = allocate_lagrangian(*args, cost=cost)
    return r.n, "lagrangian", r.bound


def _solve_priced(table: np.ndarray, key: np.ndarray, config: AllocationConfig, cost: np.ndarray):
    """``_solve`` priced in tokens (``cost``: each row's tokens at each n). One price for every
    prompt is the rollout problem at ``floor(B / price)`` rollouts (exact, as asked); otherwise
    ``greedy`` is greedy by value per token and ``fast`` the relaxation (the threshold on value per
    token), both with the dual bound; ``dp`` exact or refused; ``auto`` the exact programme where it
    fits, else the relaxation."""
    linear = config.objective != "signal" or _resample_tries(est.get(config.estimator)) == 1
    used = np.unique(key)
    price = cost[:, 0] / config.n_min
    if linear and np.ptp(price[used]) == 0:
        rollouts = min(int(math.floor(config.budget / price[used[0]] * (1 + 1e-12))), config.n_max * len(key))
        same = dataclasses.replace(config, price_unit="rollouts", budget=rollouts)
        return _solve(table, key, same, None)
    args = (table, key, config.budget, config.n_min, config.n_max)
    method = config.method
    if method == "greedy":
        if linear and is_concave(table, TIE_RTOL):
            n = allocate_greedy(*args, rtol=TIE_RTOL, price=price)
            return n, "greedy", allocate_lagrangian(*args, cost=cost).bound
        method = "auto"  # as unpriced: greedy is not even the reference on a non-concave value
    if method in ("auto", "dp"):
        # with real-valued costs few pairs tie on cost, so the front holds many times the pairs per
        # rollout of slack that expected rollouts give (50 prompts at 8 per prompt: 10 s): counted
        # as 30 times, the exact programme runs up to about 20 prompts, in under a second
        unit = float(price[key].mean()) / 30
        return _exact_or_relaxed(args, method, cost, tol=_tolerance(table), unit=unit)
    r = allocate_lagrangian(*args, cost=cost)
    return r.n, "lagrangian", r.bound


# --- planning calculators -----------------------------------------------------------------------


def min_tries(p: float | np.ndarray, delta: float) -> np.ndarray:
    """Smallest ``n >= 2`` with ``p^n + q^n <= delta`` (P(group not silent) >= 1 - delta).

    Exact, by bisection between the bounds ``ceil(log delta / log max(p,q))`` and
    ``ceil(log(delta/2) / log max(p,q))`` of docs/estimators.md §5, in O(1) memory. Near p = 0 or 1
    the answer is about ``3 / min(p, q)`` (3e17 at p = 1e-17), where float64 cannot tell n from
    n + 1, and ``q = 1 - p`` itself rounds; so the test is made in 60-digit decimals, on the exact
    value of the float p given.

    Raises:
        ConfigError: delta outside (0, 1), p outside (0, 1) (every group is silent there), or an
            answer beyond int64 (p within about 3e-19 of 0 or 1).
    """
    delta = _plain(delta)
    if not 0 < delta < 1:
        raise ConfigError(f"delta={delta!r} must be in (0, 1)")
    p = np.atleast_1d(np.asarray(p, dtype=float))
    bad = ~((p > 0) & (p < 1))
    if bad.any():
        raise ConfigError(f"p={p[bad][0].item()!r} must be in (0, 1): at p = 0 or 1 every group is silent")
    return np.array([_min_tries(float(x), float(delta)) for x in p], dtype=np.int64)


def _min_tries(p: float, delta: float) -> int:
    with localcontext() as ctx:
        # 60 digits beyond those 1 - min(p, q) spends on its leading nines (q = 1 - 1e-300 is not 1)
        ctx.prec = 60 + max(0, math.ceil(-math.log10(min(p, 1.0 - p))))
        P, D = Decimal(p), Decimal(delta)
        Q = 1 - P
        log_m = max(P, Q).ln()

        def bound(x: Decimal) -> int:
            return max(2, int((x.ln() / log_m).to_integral_value(rounding=ROUND_CEILING)))

        # m^n <= p^n + q^n <= 2 m^n: the answer lies in [bound(delta), bound(delta/2)]
        lo, hi = bound(D) - 1, bound(D / 2) + 1
        if hi > np.iinfo(np.int64).max:
            raise ConfigError(f"p={p!r} is too close to 0 or 1: it needs more than 2^63 tries")
        if lo < 2 or P**lo + Q**lo <= D:
            lo = 1  # the answer may be n = 2 itself
        while hi - lo > 1:  # P^lo + Q^lo > D >= P^hi + Q^hi
            mid = (lo + hi) // 2
            if P**mid + Q**mid <= D:
                hi = mid
            else:
                lo = mid
        return max(hi, 2)


def _grpo_infidelity(p: float, G: int) -> float:
    """``1 - phi(p, G)`` (docs/estimators.md §5) without cancellation, for p in (0, 1).

    With ``x = k/G``, ``sqrt(pq) - sqrt(x(1-x)) = (x - p)(x - q) / (sqrt(pq) + sqrt(x(1-x)))``,
    so each term keeps its relative precision even when phi is 1 - 1e-6 (G = 5e5), where
    ``1 - phi`` formed from phi loses half its digits. The binomial weights are taken from their
    ratios outward from the mode (each factor <= 1: nothing overflows, no log-gamma rounding)
    over the mode +- 40 standard deviations + 40 (the rest weighs less than 1e-300) and
    normalised by their sum.
    """
    q = 1.0 - p
    m = min(int((G + 1) * p), G)  # the mode
    half = int(40 * math.sqrt(G * p * q)) + 40
    lo, hi = max(0, m - half), min(G, m + half)
    up = np.arange(m, hi, dtype=float)  # w[k + 1] / w[k] = (G - k)/(k + 1) p/q
    down = np.arange(m, lo, -1, dtype=float)  # w[k - 1] / w[k] = k/(G - k + 1) q/p
    w = np.concatenate(
        [np.cumprod(down / (G - down + 1) * (q / p))[::-1], [1.0], np.cumprod((G - up) / (up + 1) * (p / q))]
    )
    k = np.arange(lo, hi + 1, dtype=float)
    spq = math.sqrt(p * q)
    gap = (k - G * p) * (k - G * q) / (float(G) * G) / (spq + np.sqrt(k * (G - k)) / G)
    return float(w @ gap / (spq * w.sum()))


def grpo_fidelity(p: float | np.ndarray, G: int) -> np.ndarray:
    """GRPO's finite-group fidelity ``phi(p, G) = E_k[sigma_k] / sqrt(p q)`` (docs/estimators.md §5);
    NaN at p = 0 or 1, where the limit weight is infinite."""
    p = np.atleast_1d(np.asarray(p, dtype=float))
    return np.array([1.0 - _grpo_infidelity(float(x), int(G)) if 0 < x < 1 else np.nan for x in p])


def group_size_for_fidelity(p: float, fidelity: float, G_max: int = 10_000_000) -> int:
    """Smallest G with ``phi(p, G) >= fidelity`` (doubling up to ``G_max``, then bisection; phi
    rises with G). Compared as ``1 - phi <= 1 - fidelity``, which keeps its digits at fidelities
    like 0.999999.

    The interior approximation ``G >= 1/(8 eps p q)`` understates it near p = 0 or 1.

    Raises:
        ConfigError: p outside (0, 1), fidelity outside (0, 1), or no G up to ``G_max``.
    """
    p, fidelity, G_max = _plain(p), _plain(fidelity), int(G_max)
    if not 0 < p < 1:
        raise ConfigError(f"p={p!r} must be in (0, 1)")
    if not 0 < fidelity < 1:
        raise ConfigError(f"fidelity={fidelity!r} must be in (0, 1)")
    eps = 1.0 - fidelity

    def ok(G: int) -> bool:
        return _grpo_infidelity(p, G) <= eps

    lo, hi = 0, 1  # ok(lo) is false (or lo = 0)
    while not ok(hi):
        if hi >= G_max:
            raise ConfigError(f"no group size up to {G_max} reaches fidelity {fidelity!r} at p={p!r}")
        lo, hi = hi, min(2 * hi, G_max)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


# --- the allocation table -------------------------------------------------------------------------


def allocation_table(
    run_id: str, prompt_ids: pa.Array | list[str], result: Allocation, config: AllocationConfig
) -> pa.Table:
    """Shape one allocation as rows of the ``allocation`` table (schema ``ALLOCATION``)."""
    N = len(result.n)
    label = est.get(config.estimator).spec if config.objective == "signal" else None
    return pa.table(
        {
            "run_id": pa.array([run_id] * N, pa.string()),
            "objective": pa.array([config.objective] * N, pa.string()),
            "estimator": pa.array([label] * N, pa.string()),
            "method": pa.array([result.method] * N, pa.string()),
            "posterior": pa.array([config.posterior] * N, pa.bool_()),
            "budget": pa.array([config.budget] * N, pa.int64()),
            "prompt_id": prompt_ids,
            "p": pa.array(result.p),
            "n_rollouts": pa.array(result.n.astype(np.int32)),
            "expected_value": pa.array(result.value),
            "uniform_n": pa.array(result.uniform_n.astype(np.int32)),
            "uniform_value": pa.array(result.uniform_value),
            "gap": pa.array([result.gap] * N, pa.float64()),
            "price_unit": pa.array([config.price_unit] * N, pa.string()),
        },
        schema=schema.ALLOCATION,
    )


def allocate_prompts(
    run_id: str,
    prompt_ids: pa.Array | list[str],
    n_obs: np.ndarray,
    c_obs: np.ndarray,
    config: AllocationConfig,
    price: np.ndarray | None = None,
) -> tuple[pa.Table, Allocation]:
    """Allocate over prompts and return the ``allocation`` rows with the result.

    The one entry used by the profile run (``default_allocation``) and ``difficulty allocate``,
    so both follow one rule for a prompt without samples (n = 0): under the posterior it takes
    part (its prior is its estimate); under point estimates it has no pass rate and the allocation
    is refused, naming it. (Dropping it instead would leave it out of the export a trainer reads,
    under a budget sized for every prompt.) ``price``: each prompt's expected tokens per rollout, in
    the order of ``prompt_ids`` (see ``allocate``).
    """
    n_obs = np.asarray(n_obs, np.int64)
    c_obs = np.asarray(c_obs, np.int64)
    ids = prompt_ids if isinstance(prompt_ids, pa.Array | pa.ChunkedArray) else pa.array(prompt_ids, pa.string())
    # Ties of marginal gain go to prompts in input order: in prompt-id order, the same counts give
    # the same allocation whatever order a query returned them in.
    order = pc.sort_indices(ids).to_numpy()
    ids, n_obs, c_obs = ids.take(pa.array(order)), n_obs[order], c_obs[order]
    ids = ids.cast(pa.string())
    if price is not None:
        price = _check_prices(price, len(order), prompt_ids)[order]
    result = allocate(n_obs, c_obs, config, prompt_ids=ids, price=price)
    return allocation_table(run_id, ids, result, config), result


# The one default allocation policy (profile runs, the report, ``difficulty allocate`` without
# --budget): GRPO's expected signal on each prompt's Beta posterior, G rollouts per prompt (the
# trainer's group size, ``schema.DEFAULT_G`` unless given), so the advice is about the batch the user
# already pays for.
DEFAULT_BUDGET_PER_PROMPT = schema.DEFAULT_G


def default_config(n_prompts: int, budget_per_prompt: int = DEFAULT_BUDGET_PER_PROMPT) -> AllocationConfig:
    """The default allocation of ``budget_per_prompt`` rollouts per prompt over ``n_prompts``."""
    if budget_per_prompt < 2:
        raise ConfigError(f"budget per prompt {budget_per_prompt} must be >= 2")
    return AllocationConfig(
        budget=budget_per_prompt * n_prompts,
        n_max=max(64, budget_per_prompt * 4),
        posterior=True,
    )


def token_budget(price: np.ndarray, budget_per_prompt: int = DEFAULT_BUDGET_PER_PROMPT) -> int:
    """The default budget priced in tokens: what ``budget_per_prompt`` rollouts of every prompt cost
    at each prompt's expected answer length (rounded up to a whole token, so the uniform allocation
    of that many rollouts fits). An allocation priced in rollouts at ``prompts x G`` and one priced
    in tokens at this budget are compared at equal expected tokens through the uniform allocation
    both start from."""
    return int(math.ceil(budget_per_prompt * float(np.sum(price))))


def prompt_prices(store: Store, run_id: str, prompt_ids, *, required: bool = True) -> np.ndarray | None:
    """Each prompt's expected tokens per rollout (``tokens.expected_tokens`` over the run's prompts,
    from ``prompt_stats``' ``tokens_counted``, ``tokens_per_answer`` and ``tokens_sd``), in the order
    of ``prompt_ids``. A prompt with no measured answer costs the run's mean answer length.

    Raises:
        ConfigError: (``required``) the run's prompt_stats carry no answer length; without
            ``required`` that is None instead.
    """
    ps = store.read_table("prompt_stats", {"run_id": run_id})
    ps = ps.select(["prompt_id", "tokens_counted", "tokens_per_answer", "tokens_sd"])
    counted = pc.fill_null(ps.column("tokens_counted"), 0).to_numpy().astype(float)
    if not (counted > 0).any():
        if not required:
            return None
        raise ConfigError(
            f"run {run_id!r}: its prompt_stats carry no answer lengths (tokens_counted is "
            f"{'empty' if ps.num_rows == 0 else 'null or 0 on every prompt'}), so a rollout has no price in "
            "tokens; allocate with the default --price-unit rollouts, or analyze the run again once its "
            "answers' lengths are recorded"
        )
    mean = pc.fill_null(ps.column("tokens_per_answer"), 0.0).to_numpy().astype(float)
    sd = pc.fill_null(ps.column("tokens_sd"), float("nan")).to_numpy().astype(float)
    expected = tokens.expected_tokens(counted, np.where(counted > 0, mean, 0.0), sd)
    by_id = dict(zip(ps.column("prompt_id").to_pylist(), expected.tolist(), strict=True))
    ids = prompt_ids.to_pylist() if isinstance(prompt_ids, pa.Array | pa.ChunkedArray) else list(prompt_ids)
    m = float((counted * mean).sum() / counted.sum())
    return np.array([by_id.get(i, m) for i in ids], dtype=float)


def allocation_key(config: AllocationConfig) -> str:
    """What identifies one allocation of a run (its file name in the ``allocation`` table).

    Two allocations with a different objective, estimator, budget, prior or price unit never share
    a key, so they are stored side by side; the same allocation computed again replaces itself. An
    allocation priced in rollouts keeps the key it had before the unit existed.
    """
    label = est.get(config.estimator).spec if config.objective == "signal" else None
    parts = [config.objective, *([label] if label else []), f"b{config.budget}"]
    parts.append("posterior" if config.posterior else "point")
    if config.price_unit != "rollouts":
        parts.append(config.price_unit)
    return re.sub(r"[^A-Za-z0-9._-]", "_", "-".join(parts))


def default_allocation(
    run_id: str, counts: pa.Table, budget_per_prompt: int = DEFAULT_BUDGET_PER_PROMPT
) -> tuple[pa.Table, AllocationConfig]:
    """The default allocation of a run's counts (``prompt_id``, ``n``, ``c``) and its config."""
    config = default_config(counts.num_rows, budget_per_prompt)
    n, c = counts.column("n").to_numpy(), counts.column("c").to_numpy()
    table, _ = allocate_prompts(run_id, counts.column("prompt_id"), n, c, config)
    return table, config


def write_allocation(store: Store, run_id: str, table: pa.Table, config: AllocationConfig) -> None:
    """Store one allocation of a run under its key: it replaces only the same allocation."""
    store.write_table("allocation", table, {"run_id": run_id}, part=allocation_key(config))
