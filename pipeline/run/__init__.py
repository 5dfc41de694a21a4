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

# Every room's public names, imported here (no lazy loading): ``run.config`` alone already loads
# the samplers, grading, NumPy and pyarrow, and the CLI's options the store, so the other rooms cost
# ``difficulty profile --help`` eight more modules of this package and no other dependency.
from pipeline.run.config import (
    BUNDLED_DEFAULTS,
    EXECUTORS,
    GENERIC_DEFAULTS,
    DataConfig,
    EngineConfig,
    ExecutionConfig,
    ProfileConfig,
    SamplingConfig,
    flat_fields,
)
from pipeline.run.driver import (
    Profiled,
    Steps,
    finish_run,
    finish_step,
    finish_stored_run,
    next_round_step,
    prepare_run,
    profile,
    run_label,
    working_on,
)
from pipeline.run.plan import (
    RunPlan,
    RunStart,
    ShardEntries,
    compute_run_id,
    entries_from_plan_table,
    finished_shards,
    pending_shards,
    save_plan,
)
from pipeline.run.rounds import plan_next_round
from pipeline.run.shards import (
    Executor,
    InlineExecutor,
    ShardJob,
    close_engines,
    get_grading_pool,
    get_sampler,
    local_executor,
    run_pending_shards,
    run_shard,
    sample_and_grade,
    shard_job,
    write_graded_shard,
)

__all__ = [
    "BUNDLED_DEFAULTS",
    "DataConfig",
    "EXECUTORS",
    "EngineConfig",
    "ExecutionConfig",
    "Executor",
    "GENERIC_DEFAULTS",
    "InlineExecutor",
    "ProfileConfig",
    "Profiled",
    "RunPlan",
    "RunStart",
    "SamplingConfig",
    "ShardEntries",
    "ShardJob",
    "Steps",
    "close_engines",
    "compute_run_id",
    "entries_from_plan_table",
    "finish_run",
    "finish_step",
    "finish_stored_run",
    "finished_shards",
    "flat_fields",
    "get_grading_pool",
    "get_sampler",
    "local_executor",
    "next_round_step",
    "pending_shards",
    "plan_next_round",
    "prepare_run",
    "profile",
    "run_label",
    "run_pending_shards",
    "run_shard",
    "sample_and_grade",
    "save_plan",
    "shard_job",
    "working_on",
    "write_graded_shard",
]
