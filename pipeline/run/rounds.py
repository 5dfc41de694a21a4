"""Adaptive rounds (``docs/adaptive.md``): the state after the complete rounds and the next round
(each prompt's decision at the end is ``analyze.with_decisions``).

Round 0's shards give every prompt ``n_min`` samples; once a round's shards are all written,
``plan_next_round`` reads the stored counts, fits the prior to round 0 and appends the next round's
shards to the stored plan, until every prompt is decided or at ``n_max``. The round is a function
of the stored samples, so a rerun after a kill re-derives the same plan and resumes at the first
unfinished shard.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from pipeline import adaptive, analyze, finish, labelprior
from pipeline.errors import PipelineError
from pipeline.run.plan import RunPlan, ShardEntries, check_counts, require_finished, save_plan
from pipeline.store import RoundCount, Store

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AdaptiveState:
    """Where an adaptive run stands after its complete rounds: per prompt (in prompt-id order)
    its samples ``n`` and correct ``c``, and the prior of ``prior.state_prior`` (the grid prior
    fitted to every round so far, the Beta fitted to round 0, or Jeffreys'); priced in tokens, each
    prompt's relative price (``adaptive.token_price`` of its stored answer lengths; None otherwise)
    and how many of its answers have a known length."""

    prompt_ids: list[str]
    n: np.ndarray
    c: np.ndarray
    prior: adaptive.Prior
    price: np.ndarray | None = None
    lengths_known: int = 0


@dataclass(frozen=True)
class Round:
    """What ``plan_next_round`` found: the plan with the next round (None: every prompt has
    stopped) and the state it was planned from (kept for the finish, which needs it too)."""

    plan: RunPlan | None
    state: AdaptiveState


def adaptive_state(store: Store, plan: RunPlan, acfg: adaptive.AdaptiveConfig) -> AdaptiveState:
    """Read the state from the stored samples (``finish.adaptive_counts``): a function of the
    samples alone, so a rerun after a kill finds the same state, fits the same prior
    (``analyze.run_prior``) and plans the same next round."""
    counts = finish.adaptive_counts(store, plan.run_id, acfg.n_min)
    check_counts(plan, counts)
    n = counts.column("n").to_numpy().astype(np.int64)
    c = counts.column("c").to_numpy().astype(np.int64)
    price, known = None, 0
    if acfg.target.price_unit == "tokens":
        # the stored lengths alone, so a rerun re-derives the same prices and the same round
        k_tok, tok, tok2 = (counts.column(name).to_numpy().astype(float) for name in ("k_tok", "tok", "tok2"))
        price, known = adaptive.token_price(k_tok, tok, tok2), int(k_tok.sum())
    return AdaptiveState(counts.column("prompt_id").to_pylist(), n, c, analyze.run_prior(acfg, counts), price, known)


def _rounds_summary(plan: RunPlan, open_now: set[str]) -> tuple[RoundCount, ...]:
    """Per round: prompts sampled, rollouts, shards, and prompts still open after it (those that
    get samples in a later round, or are open now: a prompt stops only when decided or at n_max,
    so one left out of a greedy round is still open)."""
    later: set[str] = set(open_now)
    out: list[RoundCount] = []
    for r in sorted(set(plan.rounds), reverse=True):
        shards = [s for s, rr in enumerate(plan.rounds) if rr == r]
        entries = [e for s in shards for e in plan.entries[s]]
        out.append(
            RoundCount(
                round=r,
                prompts=len({pid for pid, _, _ in entries}),
                rollouts=sum(count for _, _, count in entries),
                shards=len(shards),
                open_after=len(later),
            )
        )
        later |= {pid for pid, _, _ in entries}
    return tuple(out[::-1])


def record_rounds(store: Store, plan: RunPlan, prior: adaptive.Prior, open_now: set[str]) -> None:
    """The prior and the rounds so far into the run's registry record (a plan without rounds, a
    regrade's, keeps the rounds its source recorded)."""
    if plan.rounds:
        store.update_run(plan.run_id, prior=prior, rounds=_rounds_summary(plan, open_now))
    else:
        store.update_run(plan.run_id, prior=prior)


def labelled_round(store: Store, plan: RunPlan, state: AdaptiveState, acfg: adaptive.AdaptiveConfig, round_: int):
    """The next round under the label prior (``labelprior``): each prompt under its label bin's prior.
    A dataset without labels falls back to the population prior, and says so."""
    name, labels = finish.prompt_labels(store, plan.dataset, state.prompt_ids)
    if name is None:
        log.warning(
            "run %s: the label prior needs labels, and dataset %r has none (prior_n and prior_c, or difficulty): "
            "round %d is planned under the population prior (auto)",
            plan.run_id,
            plan.dataset,
            round_,
        )
        return adaptive.next_round(state.n, state.c, state.prior, acfg, round_index=round_, price=state.price)
    lp = labelprior.fit_label_priors(state.n, state.c, labelprior.label_bins(labels), state.prior)
    log.info("run %s round %d: label prior on %s, %d bins", plan.run_id, round_, name, len(lp.priors))
    return labelprior.next_round(state.n, state.c, lp, acfg, round_index=round_, price=state.price)


def plan_next_round(store: Store, plan: RunPlan, shard_size: int) -> Round:
    """After every shard of an adaptive ``plan`` is finished: the plan with the next round's
    shards appended (and stored), or None in ``Round.plan`` when every prompt has stopped.

    The round is a deterministic function of the stored samples (``adaptive.next_round`` on
    ``adaptive_state``), so a rerun after a kill between rounds re-derives exactly this round.
    Its shards hold ``shard_size`` of the continuing prompts each, every prompt with its own first
    sample index and count.
    """
    acfg = plan.adaptive
    if acfg is None:
        raise PipelineError(f"run {plan.run_id} is not adaptive: it has no rounds")
    require_finished(store, plan, "; the next round waits")
    state = adaptive_state(store, plan, acfg)
    grid = adaptive.stop_grid(state.prior, acfg.target, acfg.n_max)
    round_ = (plan.rounds[-1] if plan.rounds else 0) + 1
    if acfg.target.price_unit == "tokens" and not state.lengths_known:
        log.warning(
            "run %s is priced in tokens, but its samples carry no answer lengths (n_tokens): every prompt "
            "pays the price of the population's mean answer, as priced in rollouts",
            plan.run_id,
        )
    if acfg.prior == "labels":
        extra = labelled_round(store, plan, state, acfg, round_)
    else:
        extra = adaptive.next_round(state.n, state.c, state.prior, acfg, grid, round_index=round_, price=state.price)
    still_open = adaptive.open_after(state.n, state.c, acfg, grid, extra, state.prior, state.price)
    record_rounds(store, plan, state.prior, {pid for pid, o in zip(state.prompt_ids, still_open, strict=True) if o})
    if not extra.any():
        return Round(None, state)
    # Sorted by (first index, count, prompt id): a shard's prompts with the same indices are one
    # sampler call, and a round has as few shards as its prompts need.
    todo = sorted(
        (n, k, pid) for pid, n, k in zip(state.prompt_ids, state.n.tolist(), extra.tolist(), strict=True) if k > 0
    )
    new: list[ShardEntries] = [
        [(pid, n, k) for n, k, pid in todo[start : start + shard_size]] for start in range(0, len(todo), shard_size)
    ]
    nxt = plan.extended(new, round_)
    save_plan(store, nxt)
    log.info(
        "run %s round %d: %d prompts, %d rollouts, %d shards",
        plan.run_id,
        round_,
        int((extra > 0).sum()),
        int(extra.sum()),
        len(new),
    )
    return Round(nxt, state)
