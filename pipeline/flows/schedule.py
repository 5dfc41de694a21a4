"""Scheduled profiling: serve a deployment of a flow with Prefect's ``serve``.

``serve`` registers the deployment and its schedule with the Prefect server named by
``PREFECT_API_URL`` and then polls it; the server's scheduler creates the runs, and this process
executes each in a subprocess. Schedules need a real server (``prefect server start``): the
ephemeral server a plain flow run starts has no scheduler.

The deployment loads its flow by module path (``pipeline.flows.prefect_flows.profile``), so it
runs from any working directory where the package is installed.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from pipeline.errors import ConfigError

log = logging.getLogger(__name__)

FLOWS = {"profile": "profile", "checkpoints": "profile_checkpoints", "track": "track_source"}


def default_name(flow: str, dataset: str | None) -> str:
    """A deployment name such as ``profile-arithmetic`` or ``checkpoints-gsm8k``."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", dataset or "local").strip("-") or "local"
    return f"{flow}-{slug}"


def make_deployment(
    flow: str,
    name: str,
    parameters: dict[str, Any],
    *,
    cron: str | None = None,
    interval: float | None = None,
    timezone: str | None = None,
):
    """A Prefect ``RunnerDeployment`` of the ``profile``, ``checkpoints`` or ``track`` flow.

    Args:
        flow: ``profile``, ``checkpoints`` or ``track``.
        name: deployment name.
        parameters: the flow's parameters (``config`` dict and ``store``, as ``asdict(Store)``).
        cron: cron expression (e.g. ``"0 3 * * *"``), or
        interval: seconds between runs.
        timezone: time zone of the cron expression (default UTC).

    Raises:
        ValueError: unknown flow, or not exactly one of cron and interval.
    """
    if flow not in FLOWS:
        raise ConfigError(f"flow={flow!r} is unknown: allowed {', '.join(FLOWS)}")
    if (cron is None) == (interval is None):
        raise ConfigError("give exactly one of cron and interval")
    if interval is not None and interval <= 0:
        raise ConfigError(f"interval={interval} must be > 0 seconds")
    from prefect.schedules import Cron, Interval
    from prefect.types.entrypoint import EntrypointType

    from pipeline.flows import prefect_flows

    target = getattr(prefect_flows, FLOWS[flow])
    sched = Cron(cron, timezone=timezone or "UTC") if cron else Interval(interval)
    return target.to_deployment(
        name=name,
        schedule=sched,
        parameters=parameters,
        entrypoint_type=EntrypointType.MODULE_PATH,
        description=f"difficulty {flow} on a schedule",
        tags=["difficulty", flow],
    )


def serve_flow(
    flow: str,
    name: str,
    parameters: dict[str, Any],
    *,
    cron: str | None = None,
    interval: float | None = None,
    timezone: str | None = None,
) -> None:
    """Serve the deployment until interrupted; one run at a time (runs never overlap)."""
    from prefect import serve

    deployment = make_deployment(flow, name, parameters, cron=cron, interval=interval, timezone=timezone)
    serve(deployment, limit=1, print_starting_message=True)
