"""``checkpoints``: profile every checkpoint not yet profiled and append it to the history table."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from pipeline.cli import profile_options as opt
from pipeline.cli.options import DataDir, Format, open_store
from pipeline.cli.output import check_format, emit_sections, say
from pipeline.cli.schedule_options import Checkpoint, MinAge, checkpoint_config

if TYPE_CHECKING:
    from pipeline.run import ProfileConfig


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
