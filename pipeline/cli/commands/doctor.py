"""``doctor``: check a data directory's files, quarantine the bad ones, remove stale temporary files."""

from __future__ import annotations

import typer

from pipeline.cli.options import DataDir, Format, open_store
from pipeline.cli.output import check_format, emit, plural, say
from pipeline.store import QUARANTINE_DIR

DOCTOR_COLUMNS = ["file", "table", "reason", "action"]


def doctor_cmd(fmt: Format = "table", data_dir: DataDir = None) -> None:
    """Check every table's files: move corrupt or foreign ones to quarantine/, remove stale temporary files.

    Every shard is checked against its run's plan, as a rerun does: a copy under another shard's
    name is quarantined. Exits 0 when the data directory was clean and 1 when something was found
    (after it was moved or removed), so a second run exits 0. Nothing is deleted but temporary
    files (and half uploads) older than an hour or whose writer is gone; the others are counted.
    """
    import pyarrow as pa

    fmt = check_format(fmt)
    store = open_store(data_dir)
    kept: list[str] = []
    found = store.doctor(kept=kept)
    rows = [{c: getattr(p, c) for c in DOCTOR_COLUMNS} for p in found]
    table = pa.Table.from_pylist(rows, schema=pa.schema([(c, pa.string()) for c in DOCTOR_COLUMNS]))
    if not found:
        if fmt != "table":
            emit(table, fmt)
        say(f"{store.root}: every file is a complete Parquet file of its table; nothing to do", fmt)
        _say_kept(kept, fmt)
        return
    emit(table, fmt, title=f"problems found under {store.root}")
    say(f"{len(found)} problem(s) found; bad files are under {store.location(QUARANTINE_DIR)}", fmt)
    _say_kept(kept, fmt)
    raise typer.Exit(1)


def _say_kept(kept: list[str], fmt: str) -> None:
    """The temporary files left in place: a writer may still be on them."""
    if kept:
        say(
            f"{plural(len(kept), 'temporary file')} kept (younger than an hour, its writer may still be running; "
            f"removed once the writer is gone or an hour old): {', '.join(kept[:3])}{', ...' if len(kept) > 3 else ''}",
            fmt,
        )
