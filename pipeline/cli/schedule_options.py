"""What ``schedule``, ``checkpoints`` and ``track`` share: the checkpoint options, their
``CheckpointConfig``, and the check of a schedule (``--cron``/``--interval``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

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
