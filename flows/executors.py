"""The one place that chooses where shards run (this process or Ray), and the runs without Prefect.

Both the Prefect flows and the direct runs below open their executor here, so ``--executor`` means
the same thing everywhere, and both record the run's observations and render its report here, once the run is done.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
from typing import Any

from pipeline import history, result, run
from pipeline.errors import PipelineError
from pipeline.finish import FinishedRun
from pipeline.observe import track
from pipeline.result import ProfileResult
from pipeline.store import Store


def open_executor(config: run.ProfileConfig):
    """The executor of ``config.execution.executor``, as a context manager (engines freed on exit)."""
    if config.execution.executor == "ray":
        from pipeline.flows.ray_exec import RayExecutor  # imports Ray: only when asked for

        return RayExecutor(config)
    return run.local_executor(config)


log = logging.getLogger(__name__)

# Modules every profile imports on first use, deep inside its stages (scipy for the binomial
# tables of the analysis, pandas through pyarrow's conversions): 1 to 3 s on the 2-core machine.
RUN_IMPORTS = ("scipy.stats", "scipy.special", "pandas")


def warm_up(config: run.ProfileConfig) -> None:
    """Load now what the run will need, while Prefect's API server starts in the background
    (``api_server.start``): for a local executor the sampler (a model loads in seconds), then the
    modules the stages import on first use. Both are cached per process, so the flow's run uses
    what was loaded here. A failure (a model that does not exist) is left to the run, which raises
    it again inside the flow, where Prefect records it.

    The grading workers are not started here: a set of plain numbers never needs them (the fast
    path decides every answer), and starting them anyway took CPU from the server's start, 3 s of
    wall time on the bundled set against at most 1 s gained on MATH-500 (2-core machine)."""
    if config.execution.executor != "ray":  # Ray's actors load the model; the driver never does
        try:
            run.local_executor(config)
        except PipelineError as exc:
            log.debug("warm-up left to the run: %s", exc)
    for name in RUN_IMPORTS:
        if importlib.util.find_spec(name.split(".")[0]) is not None:
            importlib.import_module(name)


def after_run(
    config: run.ProfileConfig, store: Store, finished: FinishedRun, details: dict[str, Any] | None = None
) -> ProfileResult:
    """What follows a finished run, from what its finish computed (nothing read back): its outcomes
    recorded as the observations source ``profile:<run id>``, then its verdict computed and its
    report rendered with it (``result.conclude``); ``details``: what the run's start found
    (``run.Profiled.details``)."""
    track.track_run(store, finished.run_id, finished)
    return result.conclude(store, finished, report=config.execution.report, details=details, G=config.execution.G)


def profile_direct(config: run.ProfileConfig, store: Store) -> ProfileResult:
    """The whole profile without Prefect (same driver, same store, same executor choice)."""
    with open_executor(config) as executor:
        profiled = run.profile(config, store, executor)
    return after_run(config, store, profiled.finished, profiled.details())


def checkpoints_direct(config: history.CheckpointConfig, store: Store) -> list[dict[str, Any]]:
    """One pass over the checkpoints without Prefect."""
    return history.profile_new_checkpoints(config, store, lambda cfg: profile_direct(cfg, store))
