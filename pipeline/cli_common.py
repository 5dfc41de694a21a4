"""What every ``difficulty`` subcommand shares: consoles, errors, output formats, --data-dir."""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import typer
from rich.console import Console
from rich.table import Table

from pipeline import store

console = Console()
err_console = Console(stderr=True, soft_wrap=True)

DataDirOption = typer.Option(
    None, "--data-dir", envvar=store.DATA_DIR_ENV, help="Data directory (default ./difficulty-data)."
)
FormatOption = typer.Option("table", "--format", help="table, csv or json.")


def fail(message: str) -> None:
    """Print an error and exit with status 1."""
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, markup=True)
    raise typer.Exit(1)


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def print_table(table: pa.Table, title: str | None = None, max_rows: int = 60) -> None:
    """Pretty-print an Arrow table with rich (the first ``max_rows`` rows)."""
    view = Table(title=title)
    for name in table.column_names:
        view.add_column(name, overflow="fold")
    for row in table.slice(0, max_rows).to_pylist():
        view.add_row(*(_cell(v) for v in row.values()))
    console.print(view)
    if table.num_rows > max_rows:
        console.print(f"... {table.num_rows - max_rows} more rows (use --format csv or --output)")


def emit(table: pa.Table, fmt: str, output: Path | None = None, title: str | None = None) -> None:
    """Write a result as a pretty table, CSV, JSON or Parquet, to a file or standard output."""
    fmt = fmt.lower()
    if fmt not in ("table", "csv", "json", "parquet"):
        fail(f"unknown --format {fmt!r}; use table, csv, json or parquet")
    if fmt == "parquet" and output is None:
        fail("--format parquet needs --output PATH")
    if fmt == "table" and output is None:
        print_table(table, title)
        return
    if fmt == "parquet":
        pq.write_table(table, output)
        return
    if fmt == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(table.column_names)
        for row in table.to_pylist():
            writer.writerow(["" if v is None else v for v in row.values()])
        text = buffer.getvalue()
    else:
        text = json.dumps(table.to_pylist(), default=str, indent=1) + "\n"
    if output is None:
        sys.stdout.write(text)
    else:
        Path(output).write_text(text)


def data_dir_or_fail(data_dir: str | None) -> Path:
    """The data directory, or exit 1 with the reason it cannot be used."""
    try:
        return store.resolve_data_dir(data_dir)
    except store.StoreError as exc:
        fail(str(exc))
        raise  # unreachable


def print_run_summary(data_dir: Path, run_id: str) -> None:
    """The end-of-profile summary: pass-rate spread, zero-signal rates, weight shares."""
    spread = store.query(data_dir, store.load_sql("pass_rate_spread"), {"run_id": run_id})
    print_table(spread, title=f"pass-rate spread, run {run_id}")
    silent = store.query(data_dir, store.load_sql("zero_signal_summary"), {"run_id": run_id})
    print_table(silent, title="zero-signal (silent group) rate by group size G")
    shares = store.query(data_dir, store.load_sql("gradient_shares"), {"run_id": run_id, "G": 8})
    print_table(shares, title="gradient share by difficulty band at G = 8")
