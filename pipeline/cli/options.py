"""The options shared by several commands that need no computation module: the data directory,
the output format, runs and datasets, each declared once as an ``Annotated`` type alias.

A command names an alias and gives the Python default, e.g. ``data_dir: DataDir = None``. This
module imports only typer and the store, so the quick commands (``sql``, ``runs``) start fast;
the options whose defaults live in the computation's own modules (estimators, grading, the
profile set) are in ``profile_options``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from pipeline.cli.errors import on_failure
from pipeline.errors import ConfigError, StoreError
from pipeline.store import DATA_DIR_ENV, Store, is_remote, resolve_data_dir, writable_output

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


def open_store(data_dir: str | None, *, create: bool = True) -> Store:
    """The ``Store`` of ``--data-dir``.

    ``create``, for a command that stores something: made and checked writable (``StoreError`` says
    why not); a folder made here is removed again if the command then fails while it is still empty,
    so a mistyped ``--data-dir`` or a command run from the wrong folder leaves nothing behind.
    Without it, for a command that only reads (``runs``, ``sql``, ``export``, ``drift``), nothing is
    made: a data directory that does not exist reads as one without runs.
    """
    root = resolve_data_dir(data_dir)
    if not create:
        if not is_remote(str(root)):
            _check_readable(Path(root))
        return Store.open(data_dir, create=False)
    made = None if is_remote(str(root)) else _first_missing(Path(root))
    store = Store.open(data_dir)
    if made is not None:
        on_failure(lambda: _remove_empty(made))
    return store


def _first_missing(root: Path) -> Path | None:
    """The outermost folder of ``root``'s path that does not exist yet (None: ``root`` exists)."""
    missing = None
    for folder in (root, *root.parents):
        if folder.exists():
            break
        missing = folder
    return missing


def _remove_empty(top: Path) -> None:
    """Remove ``top`` and the folders under it, if they hold no file (a file written meanwhile keeps them)."""
    for folder, _, _ in sorted(os.walk(top), key=lambda walked: -len(walked[0])):
        try:
            os.rmdir(folder)
        except OSError:
            return


def _check_readable(root: Path) -> None:
    """A local data directory a reading command is given: a folder, or missing under a folder
    (``StoreError`` when a file stands in its place or in its path)."""
    folder = root
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise StoreError(
            f"data directory {str(root)!r} is not writable ({str(folder)!r} is a file, not a folder); "
            f"pass --data-dir or set {DATA_DIR_ENV} to a folder"
        )


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
