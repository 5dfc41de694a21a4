"""Rollout allocation over prompts, minimum tries, and group size for a target GRPO fidelity.

``docs/estimators.md`` §5. Given per-prompt counts (a point estimate ``p = c/n`` or a
``Beta(a + c, b + n - c)`` posterior), a budget ``B = sum_i n_i`` and bounds
``n_min <= n_i <= n_max``, maximise ``sum_i v_i(n_i)`` for one of three objectives:

- ``signal``: expected update mass of an estimator with group size n, ``v(n) = w(p, n) p q``
  (GRPO: ``E_k[sigma_k]``);
- ``knapsack``: ``v(n) = (1 - p^n - q^n) p q^2`` (Knapsack RL, arXiv 2509.25849);
- ``variance`` (Neyman): minimise ``sum_i w_i^2 p_i q_i / n_i``, i.e. ``v(n) = -w^2 p q / n``.

Each ``v`` is concave in n, so handing out rollouts one at a time to the prompt with the largest
marginal gain is exactly optimal. ``greedy`` does that with a heap (the reference); ``fast``
finds the marginal-gain threshold of the last rollout by bisection and gives every prompt all its
gains above it at once (numpy), then hands the tied gains out in prompt order, as the heap does,
so both return the same allocation and value. Values depend on a prompt only through its
``(n, c)`` counts, so tables are built once per unique pair.
"""

from __future__ import annotations

import heapq
import logging
import math
import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline import estimators as est
from pipeline import schema, stats
from pipeline.errors import ConfigError
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
    "group_size_for_fidelity",
    "grpo_fidelity",
    "min_tries",
    "value_table",
]

OBJECTIVES = ("signal", "knapsack", "variance")
METHODS = ("fast", "greedy")


@dataclass(frozen=True)
class AllocationConfig:
    """Settings of one allocation.

    Attributes:
        budget: total rollouts ``B`` to hand out (exactly).
        objective: ``signal``, ``knapsack`` or ``variance``.
        estimator: estimator spec for the ``signal`` objective (e.g. ``grpo``).
        n_min: fewest rollouts per prompt (>= 1).
        n_max: most rollouts per prompt (>= n_min).
        posterior: use the Beta posterior per prompt instead of the point estimate ``c/n``.
        prior_a: Beta prior ``a`` (Jeffreys 1/2).
        prior_b: Beta prior ``b``.
        method: ``fast`` (threshold bisection) or ``greedy`` (one at a time, reference).
    """

    budget: int
    objective: str = "signal"
    estimator: str = "grpo"
    n_min: int = 2
    n_max: int = 512
    posterior: bool = False
    prior_a: float = 0.5
    prior_b: float = 0.5
    method: str = "fast"

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise ConfigError(f"objective={self.objective!r}; allowed: {', '.join(OBJECTIVES)}")
        if self.method not in METHODS:
            raise ConfigError(f"method={self.method!r}; allowed: {', '.join(METHODS)}")
        if int(self.n_min) != self.n_min or self.n_min < 1:
            raise ConfigError(f"n_min={self.n_min!r} must be an integer >= 1")
        if int(self.n_max) != self.n_max or self.n_max < self.n_min:
            raise ConfigError(f"n_max={self.n_max!r} must be an integer >= n_min={self.n_min}")
        if int(self.budget) != self.budget or self.budget < 0:
            raise ConfigError(f"budget={self.budget!r} must be an integer >= 0")
        for name in ("prior_a", "prior_b"):
            v = getattr(self, name)
            if not (v > 0 and math.isfinite(v)):
                raise ConfigError(f"{name}={v!r} must be a finite number > 0")
        if self.objective == "signal":
            est.get(self.estimator)  # unknown names fail here, listing the registry


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

    @property
    def improvement(self) -> float:
        """How much better than uniform: ``total/uniform`` (max) or ``uniform/total`` (min)."""
        num, den = (self.total, self.uniform_total) if self.sense == "max" else (self.uniform_total, self.total)
        return num / den if den else math.inf if num else 1.0


# --- value tables -------------------------------------------------------------------------------


def _binom_pmf_matrix(n: int, p: np.ndarray) -> np.ndarray:
    """Binomial(n, p) pmf over k = 0..n for each p (rows), in log space; exact at p in {0, 1}."""
    from scipy.special import gammaln  # scipy costs seconds to import: only when used

    k = np.arange(n + 1)
    logc = gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1)
    inner = (p > 0) & (p < 1)
    pi = np.where(inner, p, 0.5)
    out = np.exp(logc + np.log(pi)[:, None] * k + np.log1p(-pi)[:, None] * (n - k))
    out[p <= 0] = 0.0
    out[p <= 0, 0] = 1.0
    out[p >= 1] = 0.0
    out[p >= 1, n] = 1.0
    return out


def _beta_moment(alpha: np.ndarray, beta: np.ndarray, i, j) -> np.ndarray:
    """``E[p^i q^j]`` under ``Beta(alpha, beta)``."""
    from scipy.special import betaln

    return np.exp(betaln(alpha + i, beta + j) - betaln(alpha, beta))


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
    from scipy.special import betaln, gammaln

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
        pq = _beta_moment(alpha, beta, 1, 1) if posterior else p * q
        return -(w2 * pq)[:, None] / np.asarray(n_grid, float)[None, :]
    if objective == "knapsack":
        for j, n in enumerate(n_grid):
            if posterior:
                out[:, j] = (
                    _beta_moment(alpha, beta, 1, 2)
                    - _beta_moment(alpha, beta, n + 1, 2)
                    - _beta_moment(alpha, beta, 1, n + 2)
                )
            else:
                out[:, j] = (1 - p**n - q**n) * p * q * q
        return out
    e = est.get(estimator)
    for j, n in enumerate(n_grid):
        a_plus, a_minus = e.advantage_table(int(n))
        d = a_plus[1 : n + 1] - a_minus[0:n]  # leave-one-out differences, s = 0..n-1
        if posterior:
            # E[p q Binom(s; n-1, p)] = C(n-1, s) B(alpha+s+1, beta+n-s) / B(alpha, beta)
            s = np.arange(n)
            logc = gammaln(n) - gammaln(s + 1) - gammaln(n - s)
            terms = np.exp(logc + betaln(alpha[:, None] + s + 1, beta[:, None] + n - s) - betaln(alpha, beta)[:, None])
            out[:, j] = terms @ d
        else:
            out[:, j] = (_binom_pmf_matrix(int(n) - 1, p) @ d) * p * q
    if isinstance(e, est.DAPO) and e.mode == "resample":
        out = value_table_dapo_resample(out, n_grid, p, alpha, beta, e, posterior)
    return out


def value_table_dapo_resample(out, n_grid, p, alpha, beta, e, posterior):
    """Apply DAPO's resample factor ``sum_{t<T} z^t`` (point estimate of p, or posterior mean)."""
    pp = p if not posterior else alpha / (alpha + beta)
    for j, n in enumerate(n_grid):
        out[:, j] *= e.resample_factor(pp, int(n))
    return out


# --- allocation ---------------------------------------------------------------------------------


def _uniform(budget: int, N: int, n_min: int, n_max: int) -> np.ndarray:
    base, extra = divmod(budget, N)
    n = np.full(N, base, dtype=np.int64)
    n[:extra] += 1
    return np.clip(n, n_min, n_max)


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


def _gains(table: np.ndarray) -> np.ndarray:
    gains = np.diff(table, axis=1)
    if gains.size:
        scale = max(float(np.abs(gains).max()), 1e-300)
        rise = np.diff(gains, axis=1)
        if rise.size and rise.max() > 1e-9 * scale:
            log.warning(
                "objective is not concave in n for some prompts (largest rise %.3g): greedy is "
                "then not guaranteed optimal",
                rise.max(),
            )
    return gains


def allocate_greedy(table: np.ndarray, key: np.ndarray, budget: int, n_min: int, n_max: int) -> np.ndarray:
    """Reference: one rollout at a time to the prompt with the largest marginal gain (heap).

    Args:
        table: ``v(n)`` for n = n_min..n_max per unique row.
        key: row of ``table`` for each prompt.
        budget: total rollouts.
        n_min: fewest per prompt.
        n_max: most per prompt.

    Ties go to the lowest prompt index.
    """
    key = np.asarray(key, dtype=np.int64)
    N = len(key)
    _check_budget(budget, N, n_min, n_max)
    gains = np.diff(table, axis=1).tolist()
    L = n_max - n_min
    n = [n_min] * N
    remaining = budget - n_min * N
    if remaining == 0 or L == 0:
        return np.asarray(n, dtype=np.int64)
    keys = key.tolist()
    heap = [(-gains[keys[i]][0], i) for i in range(N)]
    heapq.heapify(heap)
    replace, pop = heapq.heapreplace, heapq.heappop
    for _ in range(remaining):
        i = heap[0][1]
        j = n[i] - n_min + 1
        n[i] += 1
        if j < L:
            replace(heap, (-gains[keys[i]][j], i))
        else:
            pop(heap)
    return np.asarray(n, dtype=np.int64)


def _sortable(x: float) -> int:
    """Order-preserving map of a float64 to an integer."""
    i = int(np.array(x, dtype=np.float64).view(np.int64))
    return i if i >= 0 else -(i & 0x7FFFFFFFFFFFFFFF) - 1


def _unsortable(k: int) -> float:
    i = k if k >= 0 else -(k + 1) | -0x8000000000000000
    return float(np.array(i, dtype=np.int64).view(np.float64))


def allocate_fast(table: np.ndarray, key: np.ndarray, budget: int, n_min: int, n_max: int) -> np.ndarray:
    """Threshold method: bisection on the marginal gain of the last rollout handed out.

    With gains made non-increasing per row (a running minimum, which changes nothing for a
    concave objective), the greedy hands out exactly the gains ``>= t`` where ``t`` is the
    budget-th largest gain counted with multiplicity. ``t`` is found by bisection over the
    ordered float64 bit patterns (at most 64 steps, each a vectorised count over the unique rows);
    gains strictly above ``t`` are taken at once, and the gains equal to ``t`` are given in prompt
    order, which is the heap's tie rule. Same arguments as ``allocate_greedy``.
    """
    key = np.asarray(key, dtype=np.int64)
    N = len(key)
    _check_budget(budget, N, n_min, n_max)
    R = budget - n_min * N
    L = n_max - n_min
    n = np.full(N, n_min, dtype=np.int64)
    if R == 0 or L == 0:
        return n
    rm = np.minimum.accumulate(np.diff(table, axis=1), axis=1)
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
    above = (rm > t).sum(axis=1)
    ties = (rm == t).sum(axis=1)
    n += above[key]
    left = R - int(above[key].sum())
    tie_per_prompt = ties[key]
    before = np.cumsum(tie_per_prompt) - tie_per_prompt
    n += np.clip(left - before, 0, tie_per_prompt)
    return n


def allocate_dp(table: np.ndarray, key: np.ndarray, budget: int, n_min: int, n_max: int) -> float:
    """Exact optimum by dynamic programming (small instances only; for tests). Returns the value."""
    key = np.asarray(key, dtype=np.int64)
    _check_budget(budget, len(key), n_min, n_max)
    R = budget - n_min * len(key)
    best = np.full(R + 1, -np.inf)
    best[0] = 0.0
    for u in key:
        row = table[u]
        new = np.full(R + 1, -np.inf)
        for extra in range(min(R, n_max - n_min) + 1):
            cand = best[: R + 1 - extra] + row[extra]
            new[extra:] = np.maximum(new[extra:], cand)
        best = new
    return float(best[R])


def allocate(
    n_obs: np.ndarray,
    c_obs: np.ndarray,
    config: AllocationConfig,
    prompt_weights: np.ndarray | None = None,
) -> Allocation:
    """Allocate ``config.budget`` rollouts over prompts with observed counts ``(n_obs, c_obs)``.

    Args:
        n_obs: samples observed per prompt.
        c_obs: correct among them.
        config: objective, budget, bounds, estimator, posterior or point estimate, method.
        prompt_weights: ``w_i`` of the variance objective (default 1: the dataset pass rate).

    Raises:
        ValueError: impossible budget (the message gives the minimum), or point estimates asked
            for a prompt with no samples.
    """
    n_obs = np.asarray(n_obs, dtype=np.int64)
    c_obs = np.asarray(c_obs, dtype=np.int64)
    N = len(n_obs)
    _check_budget(config.budget, N, config.n_min, config.n_max)
    if not config.posterior and np.any(n_obs <= 0):
        i = int(np.flatnonzero(n_obs <= 0)[0])
        raise ConfigError(f"prompt {i} has no samples: use the posterior (posterior=True)")
    n_grid = np.arange(config.n_min, config.n_max + 1)
    if prompt_weights is not None:
        # weights break the (n, c) sharing; one row per prompt
        key = np.arange(N)
        n_u, c_u = n_obs, c_obs
    else:
        n_u, c_u, key = stats.unique_pairs(n_obs, c_obs)
    if config.posterior:
        alpha = config.prior_a + c_u
        beta = config.prior_b + n_u - c_u
        table = value_table(
            config.objective,
            n_grid,
            alpha=alpha,
            beta=beta,
            estimator=config.estimator,
            prompt_weights=prompt_weights,
        )
        p_u = alpha / (alpha + beta)
    else:
        p_u = c_u / n_u
        table = value_table(
            config.objective,
            n_grid,
            p=p_u,
            estimator=config.estimator,
            prompt_weights=prompt_weights,
        )
    _gains(table)
    method = allocate_fast if config.method == "fast" else allocate_greedy
    n = method(table, key, config.budget, config.n_min, config.n_max)
    uniform = _uniform(config.budget, N, config.n_min, config.n_max)
    value = table[key, n - config.n_min]
    uvalue = table[key, uniform - config.n_min]
    sense = "min" if config.objective == "variance" else "max"
    if sense == "min":
        value, uvalue = -value, -uvalue
    return Allocation(
        n=n,
        value=value,
        uniform_n=uniform,
        uniform_value=uvalue,
        total=float(value.sum()),
        uniform_total=float(uvalue.sum()),
        sense=sense,
        p=p_u[key],
        method=config.method,
    )


# --- planning calculators -----------------------------------------------------------------------


def min_tries(p: float | np.ndarray, delta: float) -> np.ndarray:
    """Smallest ``n >= 2`` with ``p^n + q^n <= delta`` (P(group not silent) >= 1 - delta).

    Exact: searched between the bounds ``ceil(log delta / log max(p,q))`` and
    ``ceil(log(delta/2) / log max(p,q))`` of docs/estimators.md §5.

    Raises:
        ValueError: delta outside (0, 1), or p outside (0, 1) (every group is silent there).
    """
    if not 0 < delta < 1:
        raise ConfigError(f"delta={delta!r} must be in (0, 1)")
    p = np.atleast_1d(np.asarray(p, dtype=float))
    bad = ~((p > 0) & (p < 1))
    if bad.any():
        raise ConfigError(f"p={p[bad][0]!r} must be in (0, 1): at p = 0 or 1 every group is silent")
    m = np.maximum(p, 1 - p)
    lo = np.maximum(2, np.floor(np.log(delta) / np.log(m)).astype(np.int64) - 1)
    hi = np.maximum(2, np.ceil(np.log(delta / 2) / np.log(m)).astype(np.int64) + 1)
    out = np.empty(len(p), dtype=np.int64)
    for i in range(len(p)):
        ns = np.arange(lo[i], hi[i] + 1)
        ok = p[i] ** ns + (1 - p[i]) ** ns <= delta
        out[i] = ns[np.argmax(ok)]
    return out


def grpo_fidelity(p: float | np.ndarray, G: int) -> np.ndarray:
    """GRPO's finite-group fidelity ``phi(p, G) = E_k[sigma_k] / sqrt(p q)`` (docs/estimators.md §5)."""
    p = np.atleast_1d(np.asarray(p, dtype=float))
    k = np.arange(G + 1)
    return (_binom_pmf_matrix(G, p) @ (np.sqrt(k * (G - k)) / G)) / np.sqrt(p * (1 - p))


def group_size_for_fidelity(p: float, fidelity: float, G_max: int = 10_000_000) -> int:
    """Smallest G with ``phi(p, G) >= fidelity`` (doubling, then bisection; phi rises with G).

    The interior approximation ``G >= 1/(8 eps p q)`` understates it near p = 0 or 1.

    Raises:
        ValueError: p outside (0, 1), fidelity outside (0, 1), or no G up to ``G_max``.
    """
    if not 0 < p < 1:
        raise ConfigError(f"p={p!r} must be in (0, 1)")
    if not 0 < fidelity < 1:
        raise ConfigError(f"fidelity={fidelity!r} must be in (0, 1)")

    def ok(G: int) -> bool:
        return bool(grpo_fidelity(p, G)[0] >= fidelity)

    hi = 1
    while not ok(hi):
        hi *= 2
        if hi > G_max:
            raise ConfigError(f"no group size up to {G_max} reaches fidelity {fidelity} at p={p}")
    lo = hi // 2  # ok(lo) false (or lo = 0)
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
            "method": pa.array([config.method] * N, pa.string()),
            "posterior": pa.array([config.posterior] * N, pa.bool_()),
            "budget": pa.array([config.budget] * N, pa.int64()),
            "prompt_id": prompt_ids,
            "p": pa.array(result.p),
            "n_rollouts": pa.array(result.n.astype(np.int32)),
            "expected_value": pa.array(result.value),
            "uniform_n": pa.array(result.uniform_n.astype(np.int32)),
            "uniform_value": pa.array(result.uniform_value),
        },
        schema=schema.ALLOCATION,
    )


def allocate_prompts(
    run_id: str, prompt_ids: pa.Array | list[str], n_obs: np.ndarray, c_obs: np.ndarray, config: AllocationConfig
) -> tuple[pa.Table, Allocation]:
    """Allocate over prompts and return the ``allocation`` rows with the result.

    Under point estimates a prompt with no samples has no pass rate and is left out; under the
    posterior every prompt takes part.
    """
    n_obs = np.asarray(n_obs, np.int64)
    c_obs = np.asarray(c_obs, np.int64)
    ids = prompt_ids if isinstance(prompt_ids, pa.Array | pa.ChunkedArray) else pa.array(prompt_ids, pa.string())
    # Ties of marginal gain go to prompts in input order: in prompt-id order, the same counts give
    # the same allocation whatever order a query returned them in.
    order = pc.sort_indices(ids).to_numpy()
    ids, n_obs, c_obs = ids.take(pa.array(order)), n_obs[order], c_obs[order]
    if not config.posterior:
        keep = n_obs > 0
        ids, n_obs, c_obs = ids.filter(pa.array(keep)), n_obs[keep], c_obs[keep]
    result = allocate(n_obs, c_obs, config)
    return allocation_table(run_id, ids.cast(pa.string()), result, config), result


# The one default allocation policy (profile runs, the report, ``difficulty allocate`` without
# --budget): GRPO's expected signal on each prompt's Beta posterior, 16 rollouts per prompt.
DEFAULT_BUDGET_PER_PROMPT = 16


def default_config(n_prompts: int, budget_per_prompt: int = DEFAULT_BUDGET_PER_PROMPT) -> AllocationConfig:
    """The default allocation of ``budget_per_prompt`` rollouts per prompt over ``n_prompts``."""
    if budget_per_prompt < 2:
        raise ConfigError(f"budget per prompt {budget_per_prompt} must be >= 2")
    return AllocationConfig(
        budget=budget_per_prompt * n_prompts,
        n_max=max(64, budget_per_prompt * 4),
        posterior=True,
    )


def allocation_key(config: AllocationConfig) -> str:
    """What identifies one allocation of a run (its file name in the ``allocation`` table).

    Two allocations with a different objective, estimator, budget or prior never share a key,
    so they are stored side by side; the same allocation computed again replaces itself.
    """
    label = est.get(config.estimator).spec if config.objective == "signal" else None
    parts = [config.objective, *([label] if label else []), f"b{config.budget}"]
    parts.append("posterior" if config.posterior else "point")
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
