"""Orchestration: ``schedule`` (a served Prefect deployment), ``checkpoints`` and ``drift``.

``schedule`` and ``checkpoints`` take the profile options of ``difficulty profile``
(``pipeline.cli.profile_options``).
"""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from pipeline.checks import check_int
from pipeline.cli import profile_options as opt
from pipeline.cli.options import DataDir, Format, open_store
from pipeline.cli.output import check_format, emit_sections, say
from pipeline.errors import ConfigError

if TYPE_CHECKING:
    from pipeline.run import ProfileConfig

Checkpoint = Annotated[list[str] | None, typer.Option("--checkpoint", help="A checkpoint to profile (repeatable).")]
MinAge = Annotated[float, typer.Option("--min-age", help="Skip checkpoints modified less than SECONDS ago.")]


def checkpoint_config(folder: Path | None, checkpoints: list[str] | None, min_age: float, profile: ProfileConfig):
    """The ``CheckpointConfig`` of a folder and/or a list of checkpoints (``ConfigError`` if neither,
    or if ``--model`` is given: each checkpoint is the model)."""
    from pipeline.history import CheckpointConfig

    if profile.engine.model is not None:
        raise ConfigError("--model does not apply to checkpoints: each checkpoint is profiled as the model")
    return CheckpointConfig(
        folder=str(folder) if folder else None,
        paths=tuple(checkpoints or ()),
        min_age_s=min_age,
        profile=profile,
    )


def check_schedule(cron: str | None, interval: float | None, timezone: str | None) -> None:
    """``ConfigError`` for a bad schedule (``flows.schedule.check_schedule``, by the flags' names),
    or when no Prefect server is named (schedules need one)."""
    from pipeline.flows.schedule import check_schedule

    check_schedule(cron, interval, timezone, flag="--")
    if not os.environ.get("PREFECT_API_URL"):
        raise ConfigError(
            "schedules need a running Prefect server: start one with `prefect server start` and "
            "export PREFECT_API_URL=http://127.0.0.1:4200/api"
        )


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

    deployment = name or schedule.default_name(flow, profile.data.dataset)
    say(
        f"serving deployment {deployment!r} ({'cron ' + cron if cron else f'every {interval:g} s'}); "
        "Ctrl-C stops it and pauses the schedule"
    )
    parameters = {"config": config, "store": asdict(store)}
    schedule.serve_flow(flow, deployment, parameters, cron=cron, interval=interval, timezone=timezone)


@opt.profile_options
def checkpoints_cmd(
    profile: ProfileConfig,
    folder: Annotated[
        Path | None, typer.Argument(help="Folder of checkpoints (GGUF files, or model folders for vLLM).")
    ] = None,
    checkpoint: Checkpoint = None,
    min_age: MinAge = 60.0,
    prefect: opt.Prefect = True,
    fmt: Format = "table",
    data_dir: DataDir = None,
) -> None:
    """Profile every checkpoint not yet profiled and append it to the history table (one pass)."""
    import pyarrow as pa

    fmt = check_format(fmt)
    config = checkpoint_config(folder, checkpoint, min_age, profile)
    store = open_store(data_dir)
    if prefect:
        from pipeline.flows.prefect_flows import checkpoints_flow

        done = checkpoints_flow(config, store)
    else:
        from pipeline.flows.executors import checkpoints_direct

        done = checkpoints_direct(config, store)
    if not done:
        say("no new checkpoints", fmt)
        if fmt == "table":
            return
    emit_sections(
        [
            ("checkpoints", "checkpoints profiled", pa.Table.from_pylist(done)),
            ("history", "history by checkpoint", store.named_query("history_checkpoints")),
        ],
        fmt,
    )


def drift_cmd(
    limit: Annotated[int, typer.Option("--limit", help="Rows of each list.")] = 20,
    fmt: Format = "table",
    data_dir: DataDir = None,
) -> None:
    """Checkpoint drift: per checkpoint summary, prompts that became silent, largest changes."""
    fmt = check_format(fmt)
    check_int("--limit", limit, 0)
    store = open_store(data_dir)
    emit_sections(
        [
            ("checkpoints", "history by checkpoint", store.named_query("history_checkpoints")),
            ("became_silent", "prompts that became silent", store.named_query("drift_became_silent", {"limit": limit})),
            (
                "largest_changes",
                "largest pass-rate changes",
                store.named_query("drift_largest_changes", {"limit": limit}),
            ),
        ],
        fmt,
    )
