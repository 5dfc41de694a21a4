"""Regrading: a stored run graded again with the current grader, without sampling again.

The regrade is a run of its own, ``<run id>-g<grader hash>``: the same samples (completions,
finish reasons, token counts), graded anew, with the source run's plan and its own analysis,
allocation and report. The source run is kept as it was, so the two gradings never mix and the
``grader`` column says which is which. A regrade killed half-way resumes shard by shard, like a
profile: a shard is done when its file holds what the regrade's plan says.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import replace

import pyarrow as pa
import pyarrow.compute as pc

from pipeline import grade
from pipeline.errors import ConfigError, StoreError
from pipeline.result import ProfileResult, conclude
from pipeline.run import (
    InlineExecutor,
    RunPlan,
    ShardJob,
    entries_from_plan_table,
    finish_stored_run,
    run_pending_shards,
    save_plan,
    working_on,
)
from pipeline.store import Store

log = logging.getLogger(__name__)

SOURCE_COLUMNS = ["prompt_id", "sample_idx", "completion", "finish_reason", "n_tokens"]


def regrade_id(run_id: str, grader: str) -> str:
    """The id of ``run_id`` regraded by ``grader`` (stable: the same regrade resumes)."""
    return f"{run_id}-g{hashlib.sha256(grader.encode()).hexdigest()[:8]}"


def _source_plan(store: Store, run_id: str) -> list:
    """The source run's shard entries: its stored plan, or, for a run stored before plans
    existed, what its shard files hold."""
    stored = store.read_table("plans", {"run_id": run_id})
    if stored.num_rows:
        return entries_from_plan_table(stored)
    files = store.shard_files(run_id)
    if sorted(files) != list(range(len(files))):
        raise StoreError(f"run {run_id} has shards {sorted(files)} and no stored plan: it cannot be regraded")
    entries = []
    for shard in range(len(files)):
        keys = store.read_shard(run_id, shard, ["prompt_id", "sample_idx"])
        first: dict[str, tuple[int, int]] = {}
        for pid, idx in zip(keys.column("prompt_id").to_pylist(), keys.column("sample_idx").to_pylist(), strict=True):
            lo, count = first.get(pid, (idx, 0))
            first[pid] = (min(lo, idx), count + 1)
        entries.append([(pid, lo, count) for pid, (lo, count) in first.items()])
    return entries


def regrade(store: Store, run_id: str, config: grade.GradeConfig, report: bool = True) -> ProfileResult:
    """Grade the samples of a finished run again with ``config``'s grader, as a new run.

    Returns:
        The new run finished (``result.ProfileResult``: its run id is the regrade's), with its verdict
        and report; its ``details``: ``source``, ``grader``, ``samples`` and ``changed`` (grades that
        differ from the source's, by ``old -> new`` status).

    Raises:
        StoreError: unknown run, or a run whose shards are not all there.
        ConfigError: the run was graded by this grader already.
    """
    source = store.get_run(run_id)
    grader = grade.grader_version(config)
    if source.grader == grader:
        raise ConfigError(f"run {run_id} was graded by {grader} already: nothing to regrade")
    entries = _source_plan(store, run_id)
    missing = set(range(len(entries))) - store.finished_shards(run_id)
    if missing:
        raise StoreError(f"run {run_id} is missing shards {sorted(missing)}: finish it (rerun its profile) first")
    new_id = regrade_id(run_id, grader)
    problems = store.read_table("problems", {"dataset": source.dataset})
    known = set(problems.column("prompt_id").to_pylist())
    unknown = sorted({pid for shard in entries for pid, _, _ in shard if pid not in known})
    if unknown:
        raise StoreError(f"run {run_id}: prompts {unknown[:3]} have no problem in dataset {source.dataset!r}")
    plan = RunPlan.build(
        new_id,
        entries,
        problems,
        dataset=source.dataset,
        model=source.model,
        template=source.prompt_template or "",
        skipped={},
    )
    store.register_run(
        replace(
            source,
            run_id=new_id,
            params={**(source.params or {}), "regraded_from": run_id},
            grader=grader,
            status="sampling",
            created_at=None,
            updated_at=None,
        )
    )
    save_plan(store, plan)

    def stored_samples(job: ShardJob) -> pa.Table:  # the source run's shard of the same number
        return store.read_shard(run_id, job.shard, SOURCE_COLUMNS)

    with working_on(store, new_id), InlineExecutor(source.model, stored_samples, config) as executor:
        run_pending_shards(store, plan, executor)
        finished = finish_stored_run(store, plan)
    changes = store.named_query("regrade_changes", {"old": run_id, "new": new_id})
    changed = {f"{r['old']} -> {r['new']}": r["n"] for r in changes.to_pylist()}
    total = store.named_query("grade_statuses", {"run_id": new_id}).column("n")
    details = {"source": run_id, "grader": grader, "samples": int(pc.sum(total).as_py() or 0), "changed": changed}
    return conclude(store, finished, report=report, details=details)
