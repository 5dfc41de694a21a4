"""The options shared by several commands that need no computation module: the data directory,
the output format, runs and datasets, each declared once as an ``Annotated`` type alias.

A command names an alias and gives the Python default, e.g. ``data_dir: DataDir = None``. This
module imports only typer and the store, so the quick commands (``sql``, ``runs``) start fast;
the options whose defaults live in the computation's own modules (estimators, grading, the
profile set) are in ``profile_options``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pipeline.errors import ConfigError, StoreError
from pipeline.store import DATA_DIR_ENV, Store, writable_output

# --- data directory and output ----------------------------------------------------------------

DataDir = Annotated[
    str | None,
    typer.Option(
        "--data-dir",
        envvar=DATA_DIR_ENV,
        help="Data directory (default ./difficulty-data).",
        show_default=False,
    ),
]
Format = Annotated[str, typer.Option("--format", help="table, csv or json.")]

# --- run and dataset options (analyze, allocate, export, report) -----------------------------

# ``--run``: optional where a command can fall back on something else (analyze, weights), required
# where it reads one run (export, calibrate, regrade), repeatable where it takes several (report).
_RUN_FLAG = "--run"
RunId = Annotated[str | None, typer.Option(_RUN_FLAG, help="Run id whose sampled counts to use.")]
Run = Annotated[str, typer.Option(_RUN_FLAG, help="Run id (see `difficulty runs`).", show_default=False)]
Runs = Annotated[
    list[str] | None,
    typer.Option(_RUN_FLAG, help="Run to report (repeat for several; default: the newest run)."),
]
DatasetName = Annotated[
    str | None, typer.Option("--dataset", help="Dataset whose stored prior counts (prior_n, prior_c) to use.")
]


def open_store(data_dir: str | None) -> Store:
    """The ``Store`` of ``--data-dir`` (created and checked writable; ``StoreError`` says why not)."""
    return Store.open(data_dir)


def output_file(path: Path | None) -> Path | None:
    """``--output``, checked before the command computes anything (``writable_output``: not a
    folder, not under a file, a folder where a file can be made) and its missing folders made, as
    ``export`` makes them; ``StoreError`` names the option and the path."""
    if path is None:
        return None
    out = writable_output(path, "--output")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"--output {str(path)!r} cannot be written: {exc.strerror or exc}") from exc
    return out


def floats(text: str, flag: str) -> list[float]:
    """A comma-separated list of numbers (``ConfigError`` names the flag)."""
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"{flag} must be a comma-separated list of numbers, got {text!r}") from None


def ints(text: str, flag: str) -> list[int]:
    """A comma-separated list of whole numbers (``ConfigError`` names the flag)."""
    values = floats(text, flag)
    if any(v != int(v) for v in values):
        raise ConfigError(f"{flag} must be whole numbers, got {text!r}")
    return [int(v) for v in values]
