"""``drift``: checkpoint drift from the history table."""

from __future__ import annotations

from typing import Annotated

import typer

from pipeline.checks import check_int
from pipeline.cli.options import DataDir, Format, open_store
from pipeline.cli.output import check_format, emit_sections


def drift_cmd(
    limit: Annotated[int, typer.Option("--limit", help="Rows of each list.")] = 20,
    fmt: Format = "table",
    data_dir: DataDir = None,
) -> None:
    """Checkpoint drift: per checkpoint summary, prompts that became silent, largest changes."""
    fmt = check_format(fmt)
    check_int("--limit", limit, 0)
    store = open_store(data_dir, create=False)
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
