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

from pipeline.checks import check_choice, check_number
from pipeline.errors import ConfigError

log = logging.getLogger(__name__)

FLOWS = {"profile": "profile", "checkpoints": "profile_checkpoints", "track": "track_source"}


def default_name(flow: str, dataset: str | None) -> str:
    """A deployment name such as ``profile-arithmetic`` or ``checkpoints-gsm8k``."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", dataset or "local").strip("-") or "local"
    return f"{flow}-{slug}"


def check_schedule(cron: str | None, interval: float | None, timezone: str | None, flag: str = "") -> None:
    """The one check of a schedule: exactly one of a cron expression (in an IANA time zone, default
    UTC) and an interval in seconds > 0. ``flag`` is put before each setting's name in the
    ``ConfigError`` (``"--"``: the command line's ``--cron``)."""
    if (cron is None) == (interval is None):
        raise ConfigError(f"give exactly one of {flag}cron or {flag}interval")
    if interval is not None:
        check_number(f"{flag}interval", interval, 0, lo_open=True, unit="seconds")
    if timezone is not None:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ConfigError(f"{flag}timezone={timezone!r} is not an IANA time zone (e.g. Europe/Paris)") from None
    if cron is not None:
        from prefect.schedules import Cron

        try:
            Cron(cron, timezone=timezone or "UTC")
        except ValueError as exc:  # Prefect's own parse of the expression
            raise ConfigError(f"{flag}cron={cron!r} is not a cron expression: {exc}") from None


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
        ConfigError: unknown flow, or a bad schedule (``check_schedule``).
    """
    check_choice("flow", flow, FLOWS)
    check_schedule(cron, interval, timezone)
    from pipeline.flows import prefect_flows
    from prefect.schedules import Cron, Interval
    from prefect.types.entrypoint import EntrypointType

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
