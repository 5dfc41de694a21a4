"""The one driver of a profile: prepare, round after round of shards, finish.

``profile`` runs the steps in order; each step is injectable (``Steps``), so the Prefect flow
wraps the same steps as tasks instead of looping itself, and a test can stop a run between two.
Every result goes through the ``Store``, so a retried shard, a rerun or a rerun after ``kill -9``
skips the shards already written and never duplicates a sample. The report is not rendered
here: the caller renders it once the run is done (``pipeline.reports.write_run_report``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pyarrow.compute as pc

from pipeline import allocate, analyze, datasets, finish, grade, schema
from pipeline.errors import DatasetError, PipelineError
from pipeline.finish import FinishedRun, finish_from_counts
from pipeline.run import progress
from pipeline.run.config import ProfileConfig
from pipeline.run.plan import (
    RunPlan,
    RunStart,
    check_adaptive_plan,
    check_counts,
    compute_run_id,
    entries_from_plan_table,
    finished_shards,
    require_finished,
    rounds_from_plan_table,
    save_plan,
    stored_plan,
    versions,
)
from pipeline.run.rounds import AdaptiveState, Round, adaptive_state, plan_next_round, record_rounds
from pipeline.run.shards import Executor, run_pending_shards
from pipeline.sample import template_for
from pipeline.store import RunRecord, Store

log = logging.getLogger(__name__)


def stored_dataset(store: Store, dataset: str, limit: int | None) -> datasets.LoadResult:
    """The problems a data directory already holds under ``dataset`` (a local file's ``local-<stem>`` or
    ``verl-<stem>``, a saved load), in their load order, the first ``limit`` of them: so
    ``profile --dataset NAME``, as a verdict prints it, profiles again what the run profiled, even
    where the file it was loaded from has moved.

    Raises:
        DatasetError: no adapter of that name and no problems stored under it.
    """
    problems = store.read_table("problems", {"dataset": dataset})
    rows = problems.num_rows
    if problems.num_rows == 0:
        raise DatasetError(
            f"unknown dataset {dataset!r}: no adapter of that name and no problems stored under it in "
            f"{store.root}; adapters: {sorted(datasets.ADAPTERS)} (a local file: --data-file PATH)"
        )
    if limit is not None:
        problems = problems.slice(0, limit)
    statuses = problems.column("status").to_pylist()
    counts = {status: statuses.count(status) for status in dict.fromkeys(statuses)}
    return datasets.LoadResult(problems, rows_read=rows, duplicates=0, status_counts=counts)


def prepare_run(config: ProfileConfig, store: Store, model_name: str) -> RunPlan:
    """Load the problems, store them, register the run and split it into shards (or take the
    plan stored by an earlier start of the same run).

    ``model_name`` comes from the executor, which has loaded the model already, so a model path
    that does not exist fails before any work.
    """
    data = config.data
    stored = data.data_file is None and data.dataset not in datasets.ADAPTERS
    if stored:
        result = stored_dataset(store, data.dataset, data.limit)
    else:
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
    if not stored:  # a stored dataset's rows are in the store already
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
    before = store.get_run(run_id, missing_ok=True)
    start = RunStart(
        rows_read=result.rows_read,
        duplicates=result.duplicates,
        past_limit=result.rows_read - result.duplicates - problems.num_rows,
        stored=stored,
        status_before=before.status if before is not None else None,
    )
    shard_size = config.execution.shard_size
    store.register_run(
        RunRecord(
            run_id,
            dataset=dataset,
            model=model_name,
            backend=config.engine.backend,
            params={**params, "limit": data.limit, "shard_size": shard_size},
            seed=config.sampling.seed,
            prompt_template=template,
            grader=grade.grader_version(config.grading),
            versions=versions(),
            n_prompts=gradable.num_rows,
            status="sampling",
            adaptive=acfg,
        )
    )
    n0 = acfg.n_min if acfg is not None else config.sampling.n  # an adaptive run's round 0: n_min each
    fresh = [
        [(pid, 0, n0) for pid in prompt_ids[start : start + shard_size]]
        for start in range(0, len(prompt_ids), shard_size)
    ]
    rounds = [0] * len(fresh) if acfg is not None else []
    planned_before = stored_plan(store, run_id)
    if planned_before.num_rows:
        # The run was started before: its stored plan wins, so the finished shards are reused
        # exactly whatever --shard-size this rerun was given.
        entries = entries_from_plan_table(planned_before)
        planned = {pid for shard in entries for pid, _, _ in shard}
        if acfg is not None:
            rounds = rounds_from_plan_table(planned_before)
            check_adaptive_plan(run_id, entries, rounds, prompt_ids, acfg)
        elif planned != set(prompt_ids) or any(c != n0 or f != 0 for e in entries for _, f, c in e):
            raise PipelineError(
                f"run {run_id}: the stored plan does not cover this run's {len(prompt_ids)} prompts x "
                f"{n0} samples; move plans/run_id={run_id} aside to start the run again"
            )
        if entries[: len(fresh)] != fresh:
            log.warning(
                "run %s was planned with %d prompts per shard; resuming with that plan, not shards of %d",
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
        start=start,
    )
    if not planned_before.num_rows:
        save_plan(store, plan)
    return plan


@contextmanager
def failed_on_error(store: Store, run_id: str) -> Iterator[None]:
    """Mark the run failed in the registry when its work stops with an error.

    The error that stopped the work is the one raised. When the status cannot be written either
    (the disk that filled up is still full, the object store is gone) that is logged, not raised
    over it: the run then reads ``interrupted`` and a rerun resumes it all the same."""
    try:
        yield
    except BaseException as exc:
        try:
            store.set_run_status(run_id, "failed")
        except (PipelineError, OSError) as status_exc:
            log.warning("run %s stopped (%s) and its failed status could not be written: %s", run_id, exc, status_exc)
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
    G: int = schema.DEFAULT_G,
) -> FinishedRun:
    """Analyze the stored samples, write the analysis and the default allocation, mark the run
    done (``finish.finish_from_counts``). An adaptive plan's analysis adds each prompt's decision
    and estimates every quantity as a posterior expectation under the run's prior
    (``analyze.posterior_inputs``, ``docs/adaptive.md``), and the prior and rounds go to the
    registry; ``state`` is the one its last round was planned from. Returns what was computed."""
    require_finished(store, plan)
    with failed_on_error(store, plan.run_id):
        counts = finish.run_counts(store, plan.run_id)  # with the answers cut by the token limit
        check_counts(plan, counts)
        # the analysed group sizes hold the trainer's G, so the summary and the verdict read it directly
        default = analyze.AnalyzeConfig()
        sizes = tuple(sorted({*default.group_sizes, G}))
        settings = None if G in default.group_sizes else replace(default, group_sizes=sizes)
        acfg = plan.adaptive
        if acfg is not None:
            state = state or adaptive_state(store, plan, acfg)
            record_rounds(store, plan, state.prior, set())
            labels = finish.run_label_priors(store, store.get_run(plan.run_id), counts, state.prior)
            counts, settings = analyze.posterior_inputs(counts, settings, acfg, state.prior, plan.table(), labels)
        return finish_from_counts(store, plan.run_id, counts, settings, budget_per_prompt)


def finish_stored_run(store: Store, plan: RunPlan) -> FinishedRun:
    """``finish_run`` for a run made from stored or imported samples (a regrade, an import): its
    adaptive settings come from its registry record."""
    acfg = store.get_run(plan.run_id).adaptive
    if acfg is not None and plan.adaptive is None:
        plan = replace(plan, adaptive=acfg)
    return finish_run(store, plan)


# --- the driver ------------------------------------------------------------------------------------


def prepare_step(config: ProfileConfig, store: Store, executor: Executor) -> RunPlan:
    return prepare_run(config, store, executor.model_name)


def next_round_step(config: ProfileConfig, store: Store, plan: RunPlan) -> Round:
    return plan_next_round(store, plan, config.execution.shard_size)


def finish_step(config: ProfileConfig, store: Store, plan: RunPlan, state: AdaptiveState | None) -> FinishedRun:
    budget = config.execution.allocation_budget_factor or config.execution.G  # the batch the trainer pays for
    return finish_run(store, plan, budget, state, config.execution.G)


def _started(plan: RunPlan) -> None:
    return None


@dataclass(frozen=True)
class Steps:
    """The driver's steps, each replaceable (the Prefect flow passes its tasks)."""

    prepare: Callable[[ProfileConfig, Store, Executor], RunPlan] = prepare_step
    started: Callable[[RunPlan], None] = _started  # the run id is known (the flow renames itself)
    run_shards: Callable[[Store, RunPlan, Executor], Any] = run_pending_shards
    next_round: Callable[[ProfileConfig, Store, RunPlan], Round] = next_round_step
    finish: Callable[[ProfileConfig, Store, RunPlan, AdaptiveState | None], FinishedRun] = finish_step


def begin_progress(store: Store, plan: RunPlan, finished: set[int]) -> None:
    """Tell the run's progress display (if one is drawn) the plan whose shards run next: every
    shard's samples and those already written (``finished``), so it counts the run's total, not a
    shard's."""
    counter = progress.current()
    if counter is None:
        return
    acfg = plan.adaptive
    counter.begin(
        plan.run_id,
        [sum(count for _, _, count in entries) for entries in plan.entries],
        finished,
        round_=(plan.rounds[-1] if plan.rounds else 0) if acfg is not None else None,
        bound=plan.problems.num_rows * acfg.n_max if acfg is not None else None,
    )


@dataclass(frozen=True)
class Profiled:
    """What ``profile`` did: the finished run, and what this start found on the way, for the command
    to say (``details``): the load behind it and the shards an earlier start had written already."""

    finished: FinishedRun
    plan: RunPlan
    shards_reused: int

    def details(self) -> dict[str, Any]:
        """``ProfileResult.details`` of the run: ``load`` (rows read, duplicates collapsed, rows past
        ``--limit``, problems skipped by status, prompts profiled; None for a plan no load made) and
        ``reuse`` (the run's status before this start, its shards and those reused)."""
        start, plan = self.plan.start, self.plan
        load = None
        if start is not None:
            load = {
                "rows_read": start.rows_read,
                "duplicates": start.duplicates,
                "past_limit": start.past_limit,
                "stored": start.stored,
                "skipped": dict(plan.skipped),
                "prompts": plan.problems.num_rows,
            }
        reuse = {
            "status_before": start.status_before if start is not None else None,
            "shards": len(plan.digests),
            "shards_reused": self.shards_reused,
        }
        return {"load": load, "reuse": reuse}


def profile(config: ProfileConfig, store: Store, executor: Executor, steps: Steps = Steps()) -> Profiled:
    """The whole profile: prepare, every pending shard (round after round for an adaptive run),
    finish. Returns what the finish computed, with what this start reused."""
    plan = steps.prepare(config, store, executor)
    steps.started(plan)
    reused = counted = 0  # shards an earlier start wrote; shards of the plan looked at so far

    def run_round(plan: RunPlan) -> None:
        nonlocal reused, counted
        finished = finished_shards(store, plan)
        reused += sum(1 for s in finished if s >= counted)
        counted = len(plan.digests)
        begin_progress(store, plan, finished)
        steps.run_shards(store, plan, executor)

    with working_on(store, plan.run_id):
        run_round(plan)
        state = None
        while plan.adaptive is not None:
            found = steps.next_round(config, store, plan)
            state = found.state
            if found.plan is None:
                break
            plan = found.plan
            run_round(plan)
        return Profiled(steps.finish(config, store, plan, state), plan, reused)


def run_label(config: ProfileConfig, run_id: str | None = None, dataset: str | None = None) -> str:
    """A run's display name: ``<dataset>/<model>/<run id>`` (``pending`` before it is known).
    ``dataset``: the stored name once the problems are loaded; before, a data file's (the
    ``--dataset`` default names the bundled set only when no file is given)."""
    data, engine = config.data, config.engine
    dataset = dataset or data.display_name()
    model = Path(engine.model).name if engine.model else f"{engine.backend}-default"
    return f"{dataset}/{model}/{run_id or 'pending'}"
