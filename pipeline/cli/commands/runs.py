"""``runs``: the run registry (a quick command: it imports only the store and the output module)."""

from __future__ import annotations

from pipeline.cli.options import DataDir, Format, open_store
from pipeline.cli.output import check_format, emit

RUN_COLUMNS = ["run_id", "dataset", "model", "backend", "n_prompts", "status", "created_at"]


def runs_cmd(fmt: Format = "table", data_dir: DataDir = None) -> None:
    """List the runs in the registry, newest first."""
    fmt = check_format(fmt)
    runs = open_store(data_dir, create=False).list_runs()
    emit(runs.select(RUN_COLUMNS), fmt, title="runs")
