"""The one driver of a profile: prepare, round after round of shards, finish.

``profile`` runs the steps in order; each step is injectable (``Steps``), so the Prefect flow
wraps the same steps as tasks instead of looping itself, and a test can stop a run between two.
Every result goes through the ``Store``, so a retried shard, a rerun or a rerun after ``kill -9``
skips the shards already written and never duplicates a sample. The report is not rendered
here: the caller renders it once the run is done (``pipeline.report.write_run_report``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pyarrow.compute as pc

from pipeline import adaptive, allocate, analyze, datasets, grade, schema
from pipeline.errors import DatasetError, PipelineError
from pipeline.run.config import ProfileConfig
from pipeline.run.plan import (
    RunPlan,
    check_adaptive_plan,
    check_counts,
    compute_run_id,
    entries_from_plan_table,
    require_finished,
    rounds_from_plan_table,
    save_plan,
    stored_plan,
    versions,
)
from pipeline.run.rounds import AdaptiveState, Round, plan_next_round, registered_adaptive, with_decisions
from pipeline.run.shards import Executor, run_pending_shards
from pipeline.sample import template_for
from pipeline.store import Store

log = logging.getLogger(__name__)


def prepare_run(config: ProfileConfig, store: Store, model_name: str) -> RunPlan:
    """Load the problems, store them, register the run and split it into shards (or take the
    plan stored by an earlier start of the same run).

    ``model_name`` comes from the executor, which has loaded the model already, so a model path
    that does not exist fails before any work.
    """
    data = config.data
    result = datasets.load(
        data.dataset if data.data_file is None or data.dataset != "arithmetic" else None,
        data_file=data.data_file,
        split=data.split,
        limit=data.limit,
        seed=config.sampling.seed,
    )
    problems = result.problems
    if problems.num_rows == 0:
        raise DatasetError("the dataset has no problems")
    dataset = problems.column("dataset")[0].as_py()
    template = template_for(dataset, data.template_file)
    store.add_problems(problems, dataset)
    gradable = problems.filter(pc.equal(problems.column("status"), schema.PROBLEM_OK))
    skipped = {k: v for k, v in result.status_counts.items() if k != schema.PROBLEM_OK}
    acfg = config.adaptive
    params = config.sampling.params().to_dict()
    if acfg is not None:
        # An adaptive run samples by its settings, not by n: they take n's place in its id, so
        # it never shares an id with a fixed-n run (whose id is unchanged).
        params = {k: v for k, v in params.items() if k != "n"} | {"adaptive": acfg.to_dict()}
    prompt_ids = gradable.column("prompt_id").to_pylist()
    run_id = compute_run_id(dataset, model_name, config.engine.backend, params, template, prompt_ids)
    shard_size = config.execution.shard_size
    store.register_run(
        {
            "run_id": run_id,
            "dataset": dataset,
            "model": model_name,
            "backend": config.engine.backend,
            "params": {**params, "limit": data.limit, "shard_size": shard_size},
            "seed": config.sampling.seed,
            "prompt_template": template,
            "grader": grade.grader_version(config.grading),
            "versions": versions(),
            "n_prompts": gradable.num_rows,
            "status": "sampling",
            "adaptive": json.dumps(acfg.to_dict(), sort_keys=True) if acfg is not None else None,
        }
    )
    n0 = acfg.n_min if acfg is not None else config.sampling.n  # an adaptive run's round 0: n_min each
    fresh = [
        [(pid, 0, n0) for pid in prompt_ids[start : start + shard_size]]
        for start in range(0, len(prompt_ids), shard_size)
    ]
    rounds = [0] * len(fresh) if acfg is not None else []
    stored = stored_plan(store, run_id)
    if stored.num_rows:
        # The run was started before: its stored plan wins, so the finished shards are reused
        # exactly whatever --shard-size this rerun was given.
        entries = entries_from_plan_table(stored)
        planned = {pid for shard in entries for pid, _, _ in shard}
        if acfg is not None:
            rounds = rounds_from_plan_table(stored)
            check_adaptive_plan(run_id, entries, rounds, prompt_ids, acfg)
        elif planned != set(prompt_ids) or any(c != n0 or f != 0 for e in entries for _, f, c in e):
            raise PipelineError(
                f"run {run_id}: the stored plan does not cover this run's {len(prompt_ids)} prompts x "
                f"{n0} samples; move plans/run_id={run_id} aside to start the run again"
            )
        if entries[: len(fresh)] != fresh:
            log.warning(
                "run %s was planned with %d prompts per shard; resuming with that plan (--shard-size %d ignored)",
                run_id,
                len(entries[0]),
                shard_size,
            )
    else:
        entries = fresh
    plan = RunPlan.build(
        run_id,
        entries,
        gradable,
        dataset=dataset,
        model=model_name,
        template=template,
        skipped=skipped,
        rounds=rounds,
        adaptive=acfg,
    )
    if not stored.num_rows:
        save_plan(store, plan)
    return plan


@contextmanager
def failed_on_error(store: Store, run_id: str) -> Iterator[None]:
    """Mark the run failed in the registry when its work stops with an error."""
    try:
        yield
    except BaseException:
        store.set_run_status(run_id, "failed")
        raise


@contextmanager
def working_on(store: Store, run_id: str) -> Iterator[None]:
    """Hold the run's lock (a killed process leaves it ``interrupted``, not ``sampling``) and mark
    the run failed if the work stops with an error."""
    with store.lock_run(run_id), failed_on_error(store, run_id):
        yield


def finish_run(
    store: Store,
    plan: RunPlan,
    budget_per_prompt: int = allocate.DEFAULT_BUDGET_PER_PROMPT,
    state: AdaptiveState | None = None,
) -> dict[str, Any]:
    """Analyze the stored samples, write the analysis and the default allocation, mark the run
    done. An adaptive plan's analysis adds each prompt's decision and estimates every quantity as
    a posterior expectation under the run's prior (``docs/adaptive.md``); ``state`` is the one
    its last round was planned from. Returns ``{"run_id": ...}``."""
    require_finished(store, plan)
    with failed_on_error(store, plan.run_id):
        counts = analyze.counts_from_samples(store, plan.run_id)
        check_counts(plan, counts)
        settings = None
        if plan.adaptive is not None:
            counts, prior = with_decisions(store, plan, counts, state)
            settings = posterior_settings(analyze.AnalyzeConfig(), prior)
        analyze.write_analysis(store, plan.run_id, analyze.analyze(counts, plan.run_id, settings))
        table, alloc_config = allocate.default_allocation(plan.run_id, counts, budget_per_prompt)
        allocate.write_allocation(store, plan.run_id, table, alloc_config)
    store.set_run_status(plan.run_id, "done")
    return {"run_id": plan.run_id}


def finish_stored_run(store: Store, plan: RunPlan) -> dict[str, Any]:
    """``finish_run`` for a run made from stored or imported samples (a regrade, an import): its
    adaptive settings come from its registry row."""
    acfg = registered_adaptive(store, plan.run_id)
    if acfg is not None and plan.adaptive is None:
        plan = replace(plan, adaptive=acfg)
    return finish_run(store, plan)


# --- the driver ------------------------------------------------------------------------------------


def prepare_step(config: ProfileConfig, store: Store, executor: Executor) -> RunPlan:
    return prepare_run(config, store, executor.model_name)


def next_round_step(config: ProfileConfig, store: Store, plan: RunPlan) -> Round:
    return plan_next_round(store, plan, config.execution.shard_size)


def finish_step(config: ProfileConfig, store: Store, plan: RunPlan, state: AdaptiveState | None) -> dict[str, Any]:
    budget = config.execution.allocation_budget_factor or allocate.DEFAULT_BUDGET_PER_PROMPT
    return finish_run(store, plan, budget, state)


def _started(plan: RunPlan) -> None:
    return None


@dataclass(frozen=True)
class Steps:
    """The driver's steps, each replaceable (the Prefect flow passes its tasks)."""

    prepare: Callable[[ProfileConfig, Store, Executor], RunPlan] = prepare_step
    started: Callable[[RunPlan], None] = _started  # the run id is known (the flow renames itself)
    run_shards: Callable[[Store, RunPlan, Executor], Any] = run_pending_shards
    next_round: Callable[[ProfileConfig, Store, RunPlan], Round] = next_round_step
    finish: Callable[[ProfileConfig, Store, RunPlan, AdaptiveState | None], dict[str, Any]] = finish_step


def profile(config: ProfileConfig, store: Store, executor: Executor, steps: Steps = Steps()) -> dict[str, Any]:
    """The whole profile: prepare, every pending shard (round after round for an adaptive run),
    finish. Returns ``{"run_id": ...}``."""
    plan = steps.prepare(config, store, executor)
    steps.started(plan)
    with working_on(store, plan.run_id):
        steps.run_shards(store, plan, executor)
        state = None
        while plan.adaptive is not None:
            found = steps.next_round(config, store, plan)
            state = found.state
            if found.plan is None:
                break
            plan = found.plan
            steps.run_shards(store, plan, executor)
        return steps.finish(config, store, plan, state)


def run_label(config: ProfileConfig, run_id: str | None = None) -> str:
    """A run's display name: ``<dataset>/<model>/<run id>`` (``pending`` before it is known)."""
    data, engine = config.data, config.engine
    dataset = data.dataset or (Path(data.data_file).stem if data.data_file else "local")
    model = Path(engine.model).name if engine.model else f"{engine.backend}-default"
    return f"{dataset}/{model}/{run_id or 'pending'}"


def stored_run_plan(store: Store, run_id: str) -> RunPlan:
    """A finished run's plan as stored (its shards, rounds and problems; adaptive settings from the
    registry): what a re-analysis needs to rebuild an adaptive run's decisions."""
    run = store.get_run(run_id)
    stored = stored_plan(store, run_id)
    if stored.num_rows == 0:
        raise PipelineError(f"run {run_id} has no stored plan")
    return RunPlan.build(
        run_id,
        entries_from_plan_table(stored),
        store.read_table("problems", {"dataset": run["dataset"]}),
        dataset=run["dataset"],
        model=run.get("model") or "",
        template=run.get("prompt_template") or "",
        skipped={},
        rounds=rounds_from_plan_table(stored),
        adaptive=registered_adaptive(store, run_id),
    )


def reanalyze(store: Store, run_id: str, settings: analyze.AnalyzeConfig | None = None) -> analyze.Analysis:
    """A stored run analysed again (other group sizes, estimators, ``--reco-answers``), nothing
    written. An adaptive run keeps what makes its analysis valid: each prompt's decision and every
    estimate a posterior expectation under the run's prior, exactly as ``finish_run`` made them."""
    counts = analyze.counts_from_samples(store, run_id)
    if registered_adaptive(store, run_id) is None:
        return analyze.analyze(counts, run_id, settings)
    plan = stored_run_plan(store, run_id)
    check_counts(plan, counts)
    counts, prior = with_decisions(store, plan, counts)
    return analyze.analyze(counts, run_id, posterior_settings(settings or analyze.AnalyzeConfig(), prior))


def posterior_settings(settings: analyze.AnalyzeConfig, prior: adaptive.Prior) -> analyze.AnalyzeConfig:
    """An adaptive run's analysis settings: every estimate a posterior expectation under its prior
    (a grid prior's sums, or the Beta's moments and quadrature)."""
    return replace(settings, prior_a=prior.a, prior_b=prior.b, posterior=True, prior=prior if prior.is_grid else None)
