"""Other allocation rules at the same budget, for comparison with ``allocate`` (docs/allocation-peers.md).

Each rule reads the same per-prompt counts ``(n_obs, c_obs)`` the default allocation reads (a
profile: for Pilot-Commit its pilot) and hands out ``budget`` rollouts; ``value`` scores any
allocation under one ``AllocationConfig``'s objective, so a peer's total is in the units the
default reports. Against an allocation priced in tokens each rule keeps its own (rollout) rule and
runs at the largest rollout budget whose allocation costs the same expected tokens (``at_tokens``).
A rule may give a prompt 0 rollouts (it drops it); that prompt then adds nothing
to a signal or knapsack total, and makes the variance objective's total infinite.

- ``sgpo``: group size proportional to ``1 / p_hat``; prompts always solved dropped, a share of the
  never-solved kept (sized as if ``p_hat = 1/(n + 1)``) and the rest dropped (sGPO, arXiv 2606.08854);
- ``vip``: the rollouts that minimise the summed gradient variance ``sum p q / n`` (VIP, arXiv
  2602.01601), the ``variance`` objective solved exactly;
- ``knapsack``: the Knapsack-RL value ``(1 - p^n - q^n) p q^2`` solved exactly (arXiv 2509.25849);
- ``pilot-commit``: the counts are the pilot; prompts whose pilot group was silent are skipped and
  the budget is committed in equal shares to the others, highest pilot variance first (Pilot-Commit,
  arXiv 2605.26606).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from pipeline import allocate as alloc
from pipeline.checks import check_number
from pipeline.errors import ConfigError

__all__ = ["PEERS", "at_tokens", "knapsack", "peer_allocation", "pilot_commit", "sgpo", "value", "vip"]

#: The peers, in the order ``allocate --peers`` prints them.
PEERS = ("sgpo", "vip", "knapsack", "pilot-commit")
#: sGPO keeps this share of the never-solved prompts (the rest are dropped).
SGPO_KEEP_UNSOLVED = 0.1


def _point(n_obs: np.ndarray, c_obs: np.ndarray) -> np.ndarray:
    """``c / n``; a prompt without samples takes Jeffreys' posterior mean 1/2 (it has no point estimate)."""
    return np.where(n_obs > 0, c_obs / np.maximum(n_obs, 1), 0.5)


def _fill(weight: np.ndarray, budget: int, n_max: int) -> np.ndarray:
    """Whole rollouts ``n_i`` proportional to ``weight`` (``inf``: as many as allowed), each at most
    ``n_max``, summing to ``min(budget, n_max * #(weight > 0))``: the scale found by bisection, the
    rollouts left by the floor handed out by largest remainder (ties: prompt order)."""
    w = np.asarray(weight, float)
    live = w > 0
    total = min(int(budget), n_max * int(live.sum()))
    n = np.zeros(len(w), dtype=np.int64)
    if total == 0:
        return n
    finite = np.where(np.isinf(w), 0.0, w)

    def raw(s: float) -> np.ndarray:
        return np.where(np.isinf(w), float(n_max), np.minimum(s * finite, float(n_max)))

    lo, hi = 0.0, 1.0
    while raw(hi).sum() < total and hi < 1e300:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if raw(mid).sum() < total else (lo, mid)
    x = raw(hi)
    n = np.floor(x).astype(np.int64)
    left = total - int(n.sum())
    if left > 0:
        room = np.flatnonzero(live & (n < n_max))
        order = room[np.lexsort((room, -(x[room] - n[room])))]
        n[order[:left]] += 1
    elif left < 0:
        over = np.flatnonzero(n > 0)
        n[over[np.argsort(-(n[over] - x[over]), kind="stable")[:-left]]] -= 1
    return n


def sgpo(n_obs, c_obs, budget: int, *, n_max: int = 512, keep_unsolved: float = SGPO_KEEP_UNSOLVED) -> np.ndarray:
    """sGPO's group sizes: ``n ∝ 1/p_hat`` from one offline pass (the counts), scaled to the budget.

    A prompt always solved (``c = n``) is dropped; of the never solved (``c = 0``, where ``1/p_hat``
    is infinite) the first ``keep_unsolved`` share in prompt order is kept and the rest dropped. A
    kept one is sized as if ``p_hat = 1/(n + 1)``, just below the least rate its ``n`` samples could
    have shown. Each group is at most ``n_max``; a budget larger than the kept prompts can take is
    left unspent.
    """
    check_number("keep_unsolved", keep_unsolved, 0, 1)
    n_obs, c_obs = np.asarray(n_obs, np.int64), np.asarray(c_obs, np.int64)
    p = _point(n_obs, c_obs)
    w = np.where(p > 0, 1.0 / np.where(p > 0, p, 1.0), n_obs + 1.0)
    w[p >= 1] = 0.0
    unsolved = np.flatnonzero(p <= 0)
    w[unsolved[int(np.ceil(keep_unsolved * len(unsolved))) :]] = 0.0
    return _fill(w, budget, n_max)


def vip(n_obs, c_obs, budget: int, *, n_min: int = 1, n_max: int = 512, posterior: bool = False) -> np.ndarray:
    """VIP's allocation: minimise ``sum_i p_i q_i / n_i`` at the budget (its convex programme, exact
    in whole rollouts: the ``variance`` objective). VIP predicts ``p`` with a Gaussian process over
    recent rollouts; here it reads the same counts as every rule."""
    cfg = alloc.AllocationConfig(budget=budget, objective="variance", n_min=n_min, n_max=n_max, posterior=posterior)
    return alloc.allocate(n_obs, c_obs, cfg).n


def knapsack(n_obs, c_obs, budget: int, *, n_min: int = 1, n_max: int = 512, posterior: bool = False) -> np.ndarray:
    """Knapsack-RL's allocation: maximise ``sum_i (1 - p^n - q^n) p q^2`` at the budget, exactly."""
    cfg = alloc.AllocationConfig(budget=budget, objective="knapsack", n_min=n_min, n_max=n_max, posterior=posterior)
    return alloc.allocate(n_obs, c_obs, cfg).n


def pilot_commit(n_obs, c_obs, budget: int, *, n_max: int = 512) -> np.ndarray:
    """Pilot-Commit's commit stage: the counts are the pilot. A prompt whose pilot was silent (all
    right or all wrong) is skipped; the budget goes in equal shares to the others, at most ``n_max``
    each, the rollouts the equal split leaves going to the highest pilot variance ``p_hat q_hat``
    first. With no informative prompt, the budget is split over every prompt."""
    n_obs, c_obs = np.asarray(n_obs, np.int64), np.asarray(c_obs, np.int64)
    p = _point(n_obs, c_obs)
    live = (c_obs > 0) & (c_obs < n_obs)
    if not live.any():
        live = np.ones(len(p), dtype=bool)
    idx = np.flatnonzero(live)
    n = np.zeros(len(p), dtype=np.int64)
    share, extra = divmod(min(int(budget), n_max * len(idx)), len(idx))
    n[idx] = min(share, n_max)
    if extra:
        order = idx[np.lexsort((idx, -(p[idx] * (1 - p[idx]))))]
        n[order[:extra]] += 1
    return n


def at_tokens(rule, price, tokens: float, lo: int, hi: int) -> np.ndarray:
    """A rule priced in rollouts, run at the same expected tokens: ``rule(B)`` (rollouts per prompt
    at a budget of ``B`` rollouts) at the largest ``B`` in ``[lo, hi]`` whose allocation costs at
    most ``tokens`` at the prompts' ``price`` (bisection; ``rule(lo)`` must fit).

    This is how a rule published in rollouts meets an allocation priced in tokens: it keeps its own
    rule and is given as many rollouts as the same token budget buys under it, so every rule spends
    (up to one rollout) the same expected tokens."""
    price = np.asarray(price, float)
    room = tokens * (1 + 1e-12)

    def cost(b: int) -> tuple[np.ndarray, float]:
        n = np.asarray(rule(b), np.int64)
        return n, float(n @ price)

    best, spent = cost(lo)
    if spent > room:
        raise ConfigError(f"{tokens:.6g} tokens do not buy even the {lo} rollouts this rule needs")
    top, top_spent = cost(hi)
    if top_spent <= room:
        return top
    while hi - lo > 1:  # rule(lo) fits, rule(hi) does not
        mid = (lo + hi) // 2
        n, spent = cost(mid)
        if spent <= room:
            lo, best = mid, n
        else:
            hi = mid
    return best


def peer_allocation(
    name: str, n_obs, c_obs, config: alloc.AllocationConfig, *, price: np.ndarray | None = None
) -> np.ndarray:
    """Peer ``name``'s rollouts per prompt at ``config``'s budget and bounds (and, for the rules that
    estimate p from a prior, its posterior). Priced in tokens (``config.price_unit``), at the largest
    rollout budget whose allocation costs at most ``config.budget`` expected tokens at ``price``
    (``at_tokens``)."""
    if config.price_unit == "tokens":
        if price is None:
            raise ConfigError("an allocation priced in tokens needs each prompt's price (expected tokens)")
        N = len(np.asarray(n_obs))
        floor = config.n_min * N if name in ("vip", "knapsack") else 0  # the rules that keep n_min

        def rule(b: int) -> np.ndarray:
            rollouts = dataclasses.replace(config, budget=int(b), price_unit="rollouts")
            return peer_allocation(name, n_obs, c_obs, rollouts)

        return at_tokens(rule, price, config.budget, floor, config.n_max * N)
    if name == "sgpo":
        return sgpo(n_obs, c_obs, config.budget, n_max=config.n_max)
    if name == "vip":
        return vip(n_obs, c_obs, config.budget, n_min=config.n_min, n_max=config.n_max, posterior=config.posterior)
    if name == "knapsack":
        return knapsack(n_obs, c_obs, config.budget, n_min=config.n_min, n_max=config.n_max, posterior=config.posterior)
    if name == "pilot-commit":
        return pilot_commit(n_obs, c_obs, config.budget, n_max=config.n_max)
    raise ConfigError(f"peer={name!r}; allowed: {', '.join(PEERS)}")


def value(n_obs, c_obs, n, config: alloc.AllocationConfig, *, p_true: np.ndarray | None = None) -> float:
    """Total objective of allocation ``n`` under ``config`` (its objective, estimator, point estimate
    or posterior), as ``Allocation.total`` reports it: higher is better, except for ``variance``
    (lower; infinite where a prompt gets no rollout). With ``p_true``, the value at the true pass
    rates instead (a bench's truth)."""
    n = np.asarray(n, np.int64)
    if config.objective == "variance" and (n <= 0).any():
        return float("inf")
    n_obs, c_obs = np.asarray(n_obs, np.int64), np.asarray(c_obs, np.int64)
    keep = n > 0
    grid = np.unique(n[keep])
    if grid.size == 0:
        return 0.0
    if p_true is not None:
        where = {"p": np.asarray(p_true, float)[keep]}
    elif config.posterior:
        where = {"alpha": config.prior_a + c_obs[keep], "beta": config.prior_b + (n_obs - c_obs)[keep]}
    else:
        where = {"p": _point(n_obs, c_obs)[keep]}
    table = alloc.value_table(config.objective, grid, estimator=config.estimator, **where)
    v = table[np.arange(int(keep.sum())), np.searchsorted(grid, n[keep])]
    total = float(v.sum())
    return -total if config.objective == "variance" else total
