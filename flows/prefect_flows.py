"""The Prefect flows, defined at module level so a served deployment can load them by module path.

Importing this module imports Prefect (seconds), so the CLI imports it only in the commands that
run a flow. Tasks are coarse on purpose: one load task, one task per shard of prompts (retried),
one finishing task, and one task that records the run's observations and renders its report; an
adaptive run adds one planning task per round, and its rounds' shards are shard tasks like any
other. The loop itself is the driver's (``run.profile``); this module only hands it Prefect tasks
as its steps.

Flows:
    profile: one profile run, named ``<dataset>/<model>/<run id>``: the driver ``run.profile``
        with its steps (load, shard, round, finish) wrapped as tasks; then the report.
    profile_checkpoints: profile every checkpoint not yet in the ``history`` table.
    track_source: import what is new in an observations source (a training log, on a schedule).

Both take their config typed; a served deployment, whose parameters are JSON, passes the same
configs as dicts (``to_dict()``) and the store as ``asdict(store)``.
"""

from __future__ import annotations

import logging
from typing import Any

from pipeline.flows import api_server, watchdog
from pipeline.flows.executors import after_run, open_executor, warm_up
from prefect import flow, task
from prefect.context import FlowRunContext
from prefect.futures import wait
from prefect.runtime import flow_run as runtime_flow_run
from prefect.task_runners import ThreadPoolTaskRunner
from prefect.utilities.annotations import quote

from pipeline import history, run
from pipeline.errors import BackendUnavailableError, PipelineError
from pipeline.observe.track import TrackConfig, run_track
from pipeline.result import ProfileResult
from pipeline.store import Store

log = logging.getLogger(__name__)


class NamedFailure(logging.Filter):
    """Prefect logs a failed task's and flow's exception with its traceback (four of them for one
    full disk, some 120 lines). A ``PipelineError`` is a failure the command names in one line
    (and the run's state keeps it), so its record stays, one line, without the traceback; any
    other exception is a bug and keeps it."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], PipelineError):
            record.exc_info = None
            record.exc_text = None
        return True


# The loggers of Prefect's task and flow engines (``prefect.task_engine``, ``prefect.flow_engine``).
for _name in ("prefect.task_runs", "prefect.flow_runs"):
    if not any(isinstance(f, NamedFailure) for f in logging.getLogger(_name).filters):
        logging.getLogger(_name).addFilter(NamedFailure())

SHARD_RETRIES = 2
SHARD_RETRY_DELAY_S = 2

# Task arguments that carry the plan (every prompt id and shard) are wrapped in ``quote``: Prefect
# otherwise walks them looking for futures on every call, which costs seconds per shard on a
# dataset of 250k prompts (measured: 9.5 s per call unquoted, 0.03 s quoted).
# cache_policy=None: the store is the cache (a finished shard is a file), and hashing a table of
# problems to compute a cache key would cost more than some shards.
_TASK = {"persist_result": False, "cache_policy": None}


def _worth_retrying(task, task_run, state) -> bool:
    """A server that never answered is not retried again: the backend already spent its own
    bounded retries (``--max-retries``, ``--request-timeout``) on it."""
    return not isinstance(state.data, BackendUnavailableError)


load_task = task(run.prepare_run, name="load-and-register", **_TASK)
shard_task = task(
    run.run_shard,
    name="sample-and-grade-shard",
    task_run_name="shard-{shard}",
    retries=SHARD_RETRIES,
    retry_delay_seconds=SHARD_RETRY_DELAY_S,
    retry_condition_fn=_worth_retrying,
    **_TASK,
)
# Adaptive runs: after a round's shards, decide the next round from the stored samples (cheap, and
# deterministic, so a retry or a rerun plans the same round).
round_task = task(run.next_round_step, name="plan-round", **_TASK)
finish_task = task(run.finish_step, name="analyze-allocate", **_TASK)
after_task = task(after_run, name="observe-and-report", **_TASK)
record_history_task = task(history.record_history, name="append-history", **_TASK)
track_task = task(run_track, name="import-new-steps", **_TASK)


def _store(store: Store | dict) -> Store:
    return store if isinstance(store, Store) else Store(**store)


def _initial_name() -> str:
    params = runtime_flow_run.parameters or {}
    config = params.get("config")
    return run.run_label(run.ProfileConfig.from_dict(config)) if config else run.run_label(run.ProfileConfig())


def rename_flow_run(name: str) -> None:
    """Rename the current flow run (once the run id is known); never fails the flow."""
    ctx = FlowRunContext.get()
    if ctx is None or ctx.flow_run is None:
        return
    try:
        ctx.client.update_flow_run(ctx.flow_run.id, name=name)
    except Exception as exc:  # noqa: BLE001 - a cosmetic failure must not fail a profile
        log.warning("could not rename flow run to %s: %s", name, exc)


def _run_shards(data: Store, plan: run.RunPlan, executor) -> None:
    """One retried task per pending shard of the plan: in the flow's thread for a local executor,
    submitted to the thread pool (one thread per Ray actor) otherwise."""
    pending = run.pending_shards(data, plan)
    if executor.concurrency <= 1:
        for shard in pending:
            shard_task(data, quote(plan), shard, quote(executor))
    else:
        futures = [shard_task.submit(data, quote(plan), s, quote(executor)) for s in pending]
        wait(futures)  # every shard gets its chance before a failure stops the flow
        for future in futures:
            future.result()


def _flow_steps(config: run.ProfileConfig) -> run.Steps:
    """The driver's steps as tasks (arguments that carry the plan quoted)."""
    return run.Steps(
        prepare=lambda cfg, data, executor: load_task(cfg, data, executor.model_name),
        started=lambda plan: rename_flow_run(run.run_label(config, plan.run_id, plan.dataset)),
        run_shards=_run_shards,
        next_round=lambda cfg, data, plan: round_task(cfg, data, quote(plan)),
        finish=lambda cfg, data, plan, state: finish_task(cfg, data, quote(plan), quote(state)),
    )


# Shard tasks run in the flow's thread when the executor runs one shard at a time (local: the
# sampler already uses every core), and are submitted to this thread pool, one thread per Ray
# actor, otherwise.
@flow(
    name="profile",
    flow_run_name=_initial_name,
    persist_result=False,
    log_prints=False,
    task_runner=ThreadPoolTaskRunner(max_workers=64),
    validate_parameters=False,
)
def profile(config: run.ProfileConfig, store: Store) -> ProfileResult:
    """The driver (``run.profile``) with its steps as tasks: load, one retried task per shard
    (skipping shards already stored), one planning task per adaptive round, finish, report.

    Args:
        config: the profile (a served deployment passes ``ProfileConfig.to_dict()``).
        store: the data directory (a served deployment passes ``asdict(Store)``).

    Returns:
        The finished run, its verdict and its report's path (``result.ProfileResult``).
    """
    cfg = run.ProfileConfig.from_dict(config)
    data = _store(store)
    with open_executor(cfg) as executor:  # Ray: the actors load the model, the driver never does
        profiled = run.profile(cfg, data, executor, _flow_steps(cfg))
    # quoted: Prefect would walk its tables for futures
    return after_task(cfg, data, quote(profiled.finished), profiled.details())


@flow(name="profile-checkpoints", persist_result=False, log_prints=False, validate_parameters=False)
def profile_checkpoints(config: history.CheckpointConfig, store: Store) -> list[dict[str, Any]]:
    """Profile every checkpoint not yet in the ``history`` table, each as a ``profile`` subflow.

    Args:
        config: where the checkpoints are and the profile (a served deployment passes ``to_dict()``).
        store: the data directory.

    Returns:
        One dict per checkpoint profiled now (empty when nothing new was found).
    """
    cfg = history.CheckpointConfig.from_dict(config)
    data = _store(store)

    def profile_one(profile_cfg: run.ProfileConfig) -> ProfileResult:
        return profile(config=profile_cfg, store=data)

    return history.profile_new_checkpoints(cfg, data, profile_one, record=record_history_task)


@flow(name="track", persist_result=False, log_prints=False, validate_parameters=False)
def track_source(config: TrackConfig | dict[str, Any], store: Store) -> dict[str, Any]:
    """Import what is new in one observations source (``track.run_track``): on a schedule, a
    training log is read step by step as the trainer writes it.

    Args:
        config: the source (a served deployment passes ``asdict(TrackConfig)``).
        store: the data directory.

    Returns:
        What the import did (``TrackResult.to_dict``).
    """
    cfg = config if isinstance(config, TrackConfig) else TrackConfig(**config)
    return track_task(_store(store), cfg).to_dict()


def prefect_settings():
    """Settings that make an interactive flow run cheap, as a context manager.

    Points Prefect at this process's API server (``api_server.ensure``: started early by the
    command, or now), unless the user configured one of their own; turns off the flow-run
    heartbeat (its thread costs about a second per flow run, and a profile is watched by the user
    anyway) and result persistence (results live in the store). Served (scheduled) runs keep
    Prefect's defaults: there, heartbeats detect crashed runs.
    """
    from prefect.settings import (
        PREFECT_API_URL,
        PREFECT_FLOWS_HEARTBEAT_FREQUENCY,
        PREFECT_RESULTS_PERSIST_BY_DEFAULT,
        temporary_settings,
    )

    watchdog.guard()  # the API server this starts must not outlive a kill -9
    updates = {PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None, PREFECT_RESULTS_PERSIST_BY_DEFAULT: False}
    if url := api_server.ensure():
        updates[PREFECT_API_URL] = url
    return temporary_settings(updates=updates)


def profile_flow(config: run.ProfileConfig, store: Store) -> ProfileResult:
    """Run the profile as a Prefect flow (named ``<dataset>/<model>/<run id>`` in Prefect); its
    model and modules load while Prefect's API server starts."""
    api_server.start()  # at once (the command line started it already, before importing Prefect)
    warm_up(config)
    with prefect_settings():
        return profile(config=config, store=store)


def checkpoints_flow(config: history.CheckpointConfig, store: Store) -> list[dict[str, Any]]:
    """One pass over the checkpoints as the Prefect ``profile-checkpoints`` flow."""
    with prefect_settings():
        return profile_checkpoints(config=config, store=store)
