"""The one place that chooses where shards run (this process or Ray), and the runs without Prefect.

Both the Prefect flows and the direct runs below open their executor here, so ``--executor`` means
the same thing everywhere.
"""

from __future__ import annotations

from typing import Any

from pipeline import history, run
from pipeline.store import Store


def open_executor(config: run.ProfileConfig):
    """The executor of ``config.executor``, as a context manager (Ray actors stop on exit)."""
    if config.executor == "ray":
        from pipeline.flows.ray_exec import RayExecutor  # imports Ray: only when asked for

        return RayExecutor(config)
    return run.LocalExecutor(config)


def profile_direct(config: run.ProfileConfig, store: Store) -> dict[str, Any]:
    """The whole profile without Prefect (same stages, same store, same executor choice)."""
    with open_executor(config) as executor:
        return run.profile(config, store, executor)


def checkpoints_direct(config: history.CheckpointConfig, store: Store) -> list[dict[str, Any]]:
    """One pass over the checkpoints without Prefect."""
    return history.profile_new_checkpoints(config, store, lambda cfg: profile_direct(cfg, store))
