"""The Prefect flows, defined at module level so a served deployment can load them by module path.

Importing this module imports Prefect (seconds), so the CLI and ``profile.py`` import it lazily.
Tasks are coarse on purpose: one load task, one task per shard of prompts (retried), one analysis
task. The stage code itself lives in ``profile.py`` and ``checkpoints.py``; this module only wires
it into Prefect.

Flows:
    profile: one profile run (``ProfileConfig`` as a dict), named ``<dataset>/<model>/<run id>``.
    profile_checkpoints: profile every checkpoint not yet in the ``history`` table.
"""

from __future__ import annotations

import logging
from typing import Any

from prefect import flow, task
from prefect.context import FlowRunContext
from prefect.futures import wait
from prefect.runtime import flow_run as runtime_flow_run
from prefect.task_runners import ThreadPoolTaskRunner
from prefect.utilities.annotations import quote

from pipeline import store
from pipeline.flows import checkpoints as ckpt
from pipeline.flows import profile as stages

log = logging.getLogger(__name__)

SHARD_RETRIES = 2
SHARD_RETRY_DELAY_S = 2

# Task arguments that carry the plan (every prompt id and shard) are wrapped in ``quote``: Prefect
# otherwise walks them looking for futures on every call, which costs seconds per shard on a
# dataset of 250k prompts (measured: 9.5 s per call unquoted, 0.03 s quoted).
# cache_policy=None: the store is the cache (a finished shard is a file), and hashing a table of
# problems to compute a cache key would cost more than some shards.
_TASK = {"persist_result": False, "cache_policy": None}

load_task = task(stages.prepare_run, name="load-and-register", **_TASK)
shard_task = task(
    stages.run_shard,
    name="sample-and-grade-shard",
    task_run_name="shard-{shard}",
    retries=SHARD_RETRIES,
    retry_delay_seconds=SHARD_RETRY_DELAY_S,
    **_TASK,
)
finish_task = task(stages.finish_run, name="analyze-allocate-report", **_TASK)


def _ray_shard(config: stages.ProfileConfig, data_dir, plan: stages.RunPlan, shard: int, pool) -> int:
    return pool.run_shard(data_dir, plan, shard)


ray_shard_task = task(
    _ray_shard,
    name="sample-and-grade-shard-on-ray",
    task_run_name="shard-{shard}",
    retries=SHARD_RETRIES,
    retry_delay_seconds=SHARD_RETRY_DELAY_S,
    **_TASK,
)


def _initial_name() -> str:
    params = runtime_flow_run.parameters or {}
    return stages.run_label(params.get("config") or {})


def rename_flow_run(name: str) -> None:
    """Rename the current flow run (once the run id is known); never fails the flow."""
    ctx = FlowRunContext.get()
    if ctx is None or ctx.flow_run is None:
        return
    try:
        ctx.client.update_flow_run(ctx.flow_run.id, name=name)
    except Exception as exc:  # noqa: BLE001 - a cosmetic failure must not fail a profile
        log.warning("could not rename flow run to %s: %s", name, exc)


# Shard tasks of the local executor run one after the other in the flow's thread (the sampler
# already uses every core); on Ray they are submitted to this thread pool, one thread per actor.
@flow(
    name="profile",
    flow_run_name=_initial_name,
    persist_result=False,
    log_prints=False,
    task_runner=ThreadPoolTaskRunner(max_workers=64),
    validate_parameters=False,
)
def profile(config: dict[str, Any], data_dir: str) -> dict[str, Any]:
    """Load, sample and grade every shard (retried, skipping shards already stored), analyze.

    Args:
        config: the fields of ``ProfileConfig``.
        data_dir: the data directory.

    Returns:
        ``{"run_id": ..., "report": path or None}``.
    """
    cfg = stages.ProfileConfig(**config)
    path = store.resolve_data_dir(data_dir)
    if cfg.executor == "ray":
        from pipeline.flows import ray_exec

        with ray_exec.ShardPool(cfg) as pool:  # the actors load the model, the driver never does
            plan = load_task(cfg, path, sampler=quote(pool))
            rename_flow_run(stages.run_label(cfg, plan.run_id))
            with stages._failed_on_error(path, plan.run_id):
                futures = [
                    ray_shard_task.submit(cfg, path, quote(plan), s, quote(pool))
                    for s in stages.pending_shards(path, plan)
                ]
                wait(futures)  # every shard gets its chance before a failure stops the flow
                for future in futures:
                    future.result()
    else:
        plan = load_task(cfg, path)
        rename_flow_run(stages.run_label(cfg, plan.run_id))
        with stages._failed_on_error(path, plan.run_id):
            for shard in stages.pending_shards(path, plan):
                shard_task(cfg, path, quote(plan), shard)
    return finish_task(cfg, path, quote(plan))


profile_checkpoint_task = task(ckpt.record_history, name="append-history", **_TASK)


@flow(name="profile-checkpoints", persist_result=False, log_prints=False, validate_parameters=False)
def profile_checkpoints(config: dict[str, Any], data_dir: str) -> list[dict[str, Any]]:
    """Profile every checkpoint not yet in the ``history`` table, each as a ``profile`` subflow.

    Args:
        config: the fields of ``CheckpointConfig`` (its ``profile`` a dict of ``ProfileConfig``).
        data_dir: the data directory.

    Returns:
        One dict per checkpoint profiled now (empty when nothing new was found).
    """
    cfg = ckpt.CheckpointConfig.from_dict(config)
    path = store.resolve_data_dir(data_dir)

    def profile_one(profile_cfg: stages.ProfileConfig) -> dict[str, Any]:
        return profile(config=stages.asdict(profile_cfg), data_dir=str(path))

    return ckpt.profile_new_checkpoints(cfg, path, profile_one, record=profile_checkpoint_task)
