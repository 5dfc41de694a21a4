"""``schedule``: the profile flow served as a Prefect deployment on a schedule; it takes the
profile options of ``difficulty profile`` (``pipeline.cli.profile_options``).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from pipeline.cli import profile_options as opt
from pipeline.cli.options import DataDir, open_store
from pipeline.cli.output import say
from pipeline.cli.schedule_options import Checkpoint, MinAge, check_schedule, checkpoint_config

if TYPE_CHECKING:
    from pipeline.run import ProfileConfig


@opt.profile_options
def schedule_cmd(
    profile: ProfileConfig,
    cron: Annotated[str | None, typer.Option("--cron", help='Cron schedule, e.g. "0 3 * * *" (03:00 daily).')] = None,
    interval: Annotated[float | None, typer.Option("--interval", help="Run every SECONDS instead of --cron.")] = None,
    timezone: Annotated[str | None, typer.Option("--timezone", help="Time zone of --cron (default UTC).")] = None,
    name: Annotated[str | None, typer.Option("--name", help="Deployment name (default: from the dataset).")] = None,
    checkpoints: Annotated[
        Path | None,
        typer.Option("--checkpoints", help="Profile each new checkpoint of this folder on every run."),
    ] = None,
    checkpoint: Checkpoint = None,
    min_age: MinAge = 60.0,
    data_dir: DataDir = None,
) -> None:
    """Serve the profile flow on a schedule (needs a Prefect server: see docs/guide/schedules.md).

    With --checkpoints DIR (or --checkpoint PATH), each scheduled run profiles the checkpoints
    not yet profiled and appends them to the history table instead.
    """
    check_schedule(cron, interval, timezone)
    store = open_store(data_dir)
    if checkpoints is not None or checkpoint:
        flow = "checkpoints"
        config = checkpoint_config(checkpoints, checkpoint, min_age, profile).to_dict()
    else:
        flow = "profile"
        config = profile.to_dict()
    from pipeline.flows import schedule

    deployment = name or schedule.default_name(flow, profile.data.display_name())
    say(
        f"serving deployment {deployment!r} ({'cron ' + cron if cron else f'every {interval:g} s'}); "
        "Ctrl-C stops it and pauses the schedule"
    )
    parameters = {"config": config, "store": asdict(store)}
    schedule.serve_flow(flow, deployment, parameters, cron=cron, interval=interval, timezone=timezone)
