"""``sql``: one query, or an interactive shell on one connection.

A quick command: it imports only the store and the output module, so it answers in about the time
of DuckDB's own start (``bench/cli_startup.py``): a query's rows are printed from DuckDB, and
``--output`` is written by DuckDB's own writers (``query.write_result``), streamed, never a table
held in Python. Every query stops on Ctrl-C (SIGINT) within a second, and after ``--timeout``.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TextIO

import typer

from pipeline.cli.errors import print_error
from pipeline.cli.options import DataDir, open_store, output_file
from pipeline.cli.output import SQL_FORMATS, check_format, emit, fetch
from pipeline.errors import ConfigError, PipelineError
from pipeline.store.query import WRITTEN_FORMATS, arrow, check_timeout, split_statements, write_result

if TYPE_CHECKING:
    from pipeline.api import Tables


log = logging.getLogger("pipeline.cli")


HISTORY_FILE = "~/.difficulty_sql_history"


PROMPT, MORE = "difficulty> ", "       ...> "


QUIT = (".quit", ".exit", "\\q")


SHELL_HELP = (
    "end a statement with ';' (it may span lines); .tables lists the views; .quit or Ctrl-D leaves; "
    "the connection is read-only and sees only the data directory"
)


def sql_cmd(
    query: Annotated[
        str | None,
        typer.Argument(
            help="SQL over the views problems, runs, samples, prompt_stats, weights, summary, allocation. "
            "Without it: an interactive shell on one connection.",
            show_default=False,
        ),
    ] = None,
    fmt: Annotated[str, typer.Option("--format", help="table, csv, json or parquet.")] = "table",
    output: Annotated[Path | None, typer.Option("--output", help="Write the result to this file.")] = None,
    write: Annotated[
        bool,
        typer.Option("--write", help="Allow one writing statement (COPY, CREATE...), only inside the data dir."),
    ] = False,
    timeout: Annotated[
        float | None,
        typer.Option("--timeout", help="Stop a query still running after this many seconds.", show_default=False),
    ] = None,
    data_dir: DataDir = None,
) -> None:
    """Run one read-only SQL query on the difficulty tables (DuckDB); files outside the data dir are refused.

    Without a query, read statements from standard input on one connection (an interactive shell
    on a terminal, with history), so a session of queries pays the start-up once.
    """
    fmt = check_format(fmt, SQL_FORMATS)
    timeout = check_timeout(timeout)
    if query is not None:
        output = output_file(output)
        if fmt == "parquet" and output is None:
            raise ConfigError("--format parquet needs --output PATH")
        store = open_store(data_dir, create=write)  # a read makes no data directory
        if output is not None and fmt in WRITTEN_FORMATS:  # DuckDB writes the file, streamed
            written = store.user_result(
                query, lambda rel: write_result(store, rel, fmt, output), write=write, timeout_s=timeout, unordered=True
            )
            if not written:  # a statement with no result: an empty file
                emit(arrow(None), fmt, output)
            return
        # DuckDB's rows, read while its connection is open
        result = store.user_result(query, lambda rel: fetch(rel, fmt, output), write=write, timeout_s=timeout)
        emit(result, fmt, output)
        return
    if write or output is not None or fmt == "parquet":
        raise ConfigError("the SQL shell only reads and prints: give a QUERY for --write, --output or parquet")
    from pipeline.api import Tables  # the shell's connection; one query needs only the store

    with Tables(data_dir, timeout_s=timeout) as tables:
        failed = shell(tables, fmt, sys.stdin)
    if failed:
        raise typer.Exit(1)


def shell(tables: Tables, fmt: str, stdin: TextIO) -> bool:
    """Run the statements read from ``stdin`` on ``tables``, printing each result; whether one failed
    when the input is not a terminal (a piped script then exits with status 1, after running all)."""
    interactive = stdin.isatty()
    if interactive:
        _load_history()
        print(f"{tables.root}: {SHELL_HELP}", file=sys.stderr)
    failed = False
    lines: list[str] = []
    while True:
        try:
            line = input(MORE if lines else PROMPT) if interactive else stdin.readline()
        except EOFError:
            break
        except KeyboardInterrupt:  # Ctrl-C drops the statement being typed, as in other SQL shells
            lines.clear()
            print(file=sys.stderr)
            continue
        if not interactive and not line:
            break
        text = line.strip()
        if not lines and text in QUIT:
            break
        if not lines and text == ".tables":
            print("\n".join(tables.views))
            continue
        if text:
            lines.append(line.rstrip("\n"))
        if lines and text.endswith(";"):
            failed |= not _run(tables, "\n".join(lines), fmt, interactive)
            lines.clear()
    if lines:  # the last statement may end without ';'
        failed |= not _run(tables, "\n".join(lines), fmt, interactive)
    return failed and not interactive


def _run(tables: Tables, text: str, fmt: str, interactive: bool = False) -> bool:
    """Run each statement of ``text`` in turn (several may share a line); whether all succeeded. On
    a terminal, Ctrl-C stops the statement running and the shell waits for the next."""
    ok = True
    try:
        statements = split_statements(text)
    except PipelineError as exc:
        print_error(str(exc))
        return False
    for statement in statements:
        try:
            emit(fetch(tables.sql(statement), fmt), fmt)
        except PipelineError as exc:
            print_error(str(exc))
            ok = False
        except KeyboardInterrupt:
            if not interactive:
                raise
            print_error("query stopped (Ctrl-C)")
            return False
    return ok


def _load_history() -> None:
    """Keep the terminal's history across sessions, where the platform has readline."""
    try:
        import readline
    except ImportError:
        return
    import atexit

    path = os.path.expanduser(HISTORY_FILE)
    try:
        if os.path.exists(path):  # none before the first session
            readline.read_history_file(path)
    except OSError as exc:
        log.warning("cannot read the SQL history %s: %s", path, exc)
    readline.set_history_length(1000)
    atexit.register(_save_history, readline, path)


def _save_history(readline, path: str) -> None:
    try:
        readline.write_history_file(path)
    except OSError as exc:
        log.warning("cannot save the SQL history %s: %s", path, exc)
