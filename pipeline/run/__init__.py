"""What a profile run is and the one driver that carries it out.

- ``config``: ``ProfileConfig``, nested and typed (data, engine, sampling, grading, adaptive,
  execution), declared once.
- ``plan``: the run id, its ``RunPlan`` (shards by digest) and which shards are finished.
- ``shards``: the one graded-shard routine, the process's engines, the executors.
- ``rounds``: an adaptive run's rounds and decisions (``docs/adaptive.md``).
- ``progress``: the one progress display of a run (counts across shards, rounds, actors).
- ``driver``: the driver (prepare, rounds of shards, finish), its steps injectable.
"""

from __future__ import annotations

# Imported on first use: the CLI reads ``run.config`` to declare its options, and must not pay for
# the stages (analysis, allocation, the store) to print its help.
_WHERE = {
    "BUNDLED_DEFAULTS": "config",
    "DataConfig": "config",
    "EXECUTORS": "config",
    "EngineConfig": "config",
    "ExecutionConfig": "config",
    "Executor": "shards",
    "GENERIC_DEFAULTS": "config",
    "InlineExecutor": "shards",
    "ProfileConfig": "config",
    "RunPlan": "plan",
    "SamplingConfig": "config",
    "ShardEntries": "plan",
    "ShardJob": "shards",
    "Steps": "driver",
    "close_engines": "shards",
    "compute_run_id": "plan",
    "entries_from_plan_table": "plan",
    "finish_run": "driver",
    "finish_step": "driver",
    "finish_stored_run": "driver",
    "finished_shards": "plan",
    "flat_fields": "config",
    "get_grading_pool": "shards",
    "get_sampler": "shards",
    "local_executor": "shards",
    "next_round_step": "driver",
    "pending_shards": "plan",
    "plan_next_round": "rounds",
    "prepare_run": "driver",
    "profile": "driver",
    "run_label": "driver",
    "run_pending_shards": "shards",
    "run_shard": "shards",
    "sample_and_grade": "shards",
    "save_plan": "plan",
    "shard_job": "shards",
    "working_on": "driver",
    "write_graded_shard": "shards",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'pipeline.run' has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f"pipeline.run.{_WHERE[name]}"), name)
