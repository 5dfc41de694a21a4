"""Adaptive rounds (``docs/adaptive.md``): the state after the complete rounds, the next round,
and each prompt's decision at the end.

Round 0's shards give every prompt ``n_min`` samples; once a round's shards are all written,
``plan_next_round`` reads the stored counts, fits the prior to round 0 and appends the next round's
shards to the stored plan, until every prompt is decided or at ``n_max``. The round is a function
of the stored samples, so a rerun after a kill re-derives the same plan and resumes at the first
unfinished shard.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from pipeline import adaptive
from pipeline import prior as priors
from pipeline.errors import PipelineError
from pipeline.run.plan import RunPlan, ShardEntries, check_counts, require_finished, save_plan
from pipeline.store import Store

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AdaptiveState:
    """Where an adaptive run stands after its complete rounds: per prompt (in prompt-id order)
    its samples ``n`` and correct ``c``, and the prior of ``prior.state_prior`` (the grid prior
    fitted to every round so far, the Beta fitted to round 0, or Jeffreys')."""

    prompt_ids: list[str]
    n: np.ndarray
    c: np.ndarray
    prior: adaptive.Prior


@dataclass(frozen=True)
class Round:
    """What ``plan_next_round`` found: the plan with the next round (None: every prompt has
    stopped) and the state it was planned from (kept for the finish, which needs it too)."""

    plan: RunPlan | None
    state: AdaptiveState


def adaptive_state(store: Store, plan: RunPlan, acfg: adaptive.AdaptiveConfig) -> AdaptiveState:
    """Read the state from the stored samples (``sql/adaptive_counts.sql``): a function of the
    samples alone, so a rerun after a kill finds the same state, fits the same prior and plans the
    same next round."""
    files = [f for _, f in sorted(store.shard_files(plan.run_id).items())]
    if not files:
        raise PipelineError(f"run {plan.run_id} has no finished shards")
    counts = store.files_query("adaptive_counts", files, {"n_min": acfg.n_min})
    check_counts(plan, counts)
    n0, c0 = counts.column("n0").to_numpy(), counts.column("c0").to_numpy()
    n = counts.column("n").to_numpy().astype(np.int64)
    c = counts.column("c").to_numpy().astype(np.int64)
    return AdaptiveState(counts.column("prompt_id").to_pylist(), n, c, priors.state_prior(acfg.prior, n, c, n0, c0))


def _rounds_summary(plan: RunPlan, open_now: set[str]) -> list[dict[str, int]]:
    """Per round: prompts sampled, rollouts, shards, and prompts still open after it (those that
    get samples in a later round, or are open now: a prompt stops only when decided or at n_max,
    so one left out of a greedy round is still open)."""
    later: set[str] = set(open_now)
    out: list[dict[str, int]] = []
    for r in sorted(set(plan.rounds), reverse=True):
        shards = [s for s, rr in enumerate(plan.rounds) if rr == r]
        entries = [e for s in shards for e in plan.entries[s]]
        out.append(
            {
                "round": r,
                "prompts": len({pid for pid, _, _ in entries}),
                "rollouts": sum(count for _, _, count in entries),
                "shards": len(shards),
                "open_after": len(later),
            }
        )
        later |= {pid for pid, _, _ in entries}
    return out[::-1]


def _record_rounds(store: Store, plan: RunPlan, prior: adaptive.Prior, open_now: set[str]) -> None:
    """The prior and the rounds so far into the run's registry row (a plan without rounds, a
    regrade's, keeps the rounds its source recorded)."""
    row: dict[str, Any] = {
        "run_id": plan.run_id,
        "prior_a": prior.a,
        "prior_b": prior.b,
        "prior": json.dumps(prior.to_dict(), sort_keys=True),
    }
    if plan.rounds:
        row["rounds"] = json.dumps(_rounds_summary(plan, open_now))
    store.register_run(row)


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
    extra = adaptive.next_round(state.n, state.c, state.prior, acfg, grid)
    still_open = ~adaptive.stopped(state.n, state.c, state.prior, acfg, grid)
    _record_rounds(store, plan, state.prior, {pid for pid, o in zip(state.prompt_ids, still_open, strict=True) if o})
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
    round_ = (plan.rounds[-1] if plan.rounds else 0) + 1
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


def with_decisions(
    store: Store, plan: RunPlan, counts: pa.Table, state: AdaptiveState | None = None
) -> tuple[pa.Table, adaptive.Prior]:
    """The counts with the adaptive columns of ``prompt_stats`` (``analyze.ADAPTIVE_COLUMNS``):
    the round each prompt stopped in, its reported band and that band's posterior probability,
    its central ``1 - delta`` credible interval, and whether it stopped undecided; the run's
    prior and rounds go to the registry. ``state`` is the one the last round was planned from
    (read again from the samples when not given)."""
    acfg = plan.adaptive
    assert acfg is not None
    state = state or adaptive_state(store, plan, acfg)
    at = {pid: i for i, pid in enumerate(state.prompt_ids)}
    order = np.array([at[pid] for pid in counts.column("prompt_id").to_pylist()], dtype=np.int64)
    n, c = state.n[order], state.c[order]
    d = adaptive.decide(n, c, state.prior, acfg.target)
    stop: dict[str, int] = {}
    for shard, entries in enumerate(plan.entries):
        r = plan.shard_round(shard)
        if r is not None:
            for pid, _, _ in entries:
                stop[pid] = max(stop.get(pid, 0), r)
    ids = counts.column("prompt_id").to_pylist()
    band = (
        pa.array([adaptive.BANDS[b] for b in d.band.tolist()], pa.string())
        if acfg.target.kind == "band"
        else pa.nulls(len(ids), pa.string())
    )
    extra = {
        "stop_round": pa.array([stop.get(pid) for pid in ids], pa.int32()),
        "decided_band": band,
        "band_prob": pa.array(d.prob, pa.float64(), from_pandas=True),
        "post_lo": pa.array(d.lo, pa.float64()),
        "post_hi": pa.array(d.hi, pa.float64()),
        "undecided": pa.array(~d.decided, pa.bool_()),
    }
    for name, column in extra.items():
        counts = counts.append_column(name, column)
    _record_rounds(store, plan, state.prior, set())
    return counts, state.prior


def registered_adaptive(store: Store, run_id: str) -> adaptive.AdaptiveConfig | None:
    """The adaptive settings a run was registered with (None for a fixed-n run): how a regrade
    or a re-analysis, which have no profile config, know the run is adaptive."""
    text = (store.get_run(run_id, missing_ok=True) or {}).get("adaptive")
    if not text:
        return None
    try:
        return adaptive.AdaptiveConfig.from_dict(json.loads(text))
    except (ValueError, TypeError) as exc:
        raise PipelineError(f"run {run_id}: its registered adaptive settings {text!r} are unreadable: {exc}") from exc
