"""The ``difficulty`` command line: one typer app, a subcommand per stage."""

from __future__ import annotations

import csv
import io
import json
import logging
import sys
from pathlib import Path
from typing import Optional

import pyarrow as pa
import pyarrow.parquet as pq
import typer
from rich.console import Console
from rich.table import Table

from pipeline import datasets, store

app = typer.Typer(
    help="Per-prompt pass rates, estimator weights, zero-signal rates and rollout allocation.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
err_console = Console(stderr=True, soft_wrap=True)

DataDirOption = typer.Option(
    None, "--data-dir", envvar=store.DATA_DIR_ENV, help="Data directory (default ./difficulty-data)."
)


def fail(message: str) -> None:
    """Print an error and exit with status 1."""
    err_console.print(f"[bold red]error:[/] {message}", highlight=False)
    raise typer.Exit(1)


def print_table(table: pa.Table, title: str | None = None, max_rows: int = 50) -> None:
    """Pretty-print an Arrow table with rich (first ``max_rows`` rows)."""
    view = Table(title=title, show_lines=False)
    for name in table.column_names:
        view.add_column(name, overflow="fold")
    for row in table.slice(0, max_rows).to_pylist():
        view.add_row(*(_cell(v) for v in row.values()))
    console.print(view)
    if table.num_rows > max_rows:
        console.print(f"... {table.num_rows - max_rows} more rows (use --format csv or --output)")


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def emit(table: pa.Table, fmt: str, output: Path | None, title: str | None = None) -> None:
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


def data_dir_or_fail(data_dir: Optional[str]) -> Path:
    try:
        return store.resolve_data_dir(data_dir)
    except store.StoreError as exc:
        fail(str(exc))
        raise  # unreachable


@app.callback()
def main(verbose: bool = typer.Option(False, "--verbose", "-v", help="Log progress details.")) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")


@app.command("datasets")
def datasets_cmd() -> None:
    """List the dataset adapters and their sources."""
    rows = [
        {
            "name": a.name,
            "source": a.hub or ("bundled generator" if a.name == "arithmetic" else "--data-file PATH"),
            "revision": a.revision or "",
            "split": a.split,
            "description": a.description,
        }
        for a in datasets.ADAPTERS.values()
    ]
    print_table(pa.Table.from_pylist(rows), title="dataset adapters")


def load_problems(
    dataset: Optional[str],
    data_file: Optional[Path],
    split: Optional[str],
    limit: Optional[int],
    columns: Optional[str],
    data_dir: Path,
) -> datasets.LoadResult:
    """Load a dataset, store its problems table, print the load summary."""
    try:
        result = datasets.load(dataset, data_file=data_file, split=split, limit=limit, columns=columns)
    except datasets.DatasetError as exc:
        fail(str(exc))
    problems = result.problems
    name = problems.column("dataset")[0].as_py() if problems.num_rows else (dataset or "empty")
    store.write_table(data_dir, "problems", problems, {"dataset": name})
    statuses = ", ".join(f"{k}: {v}" for k, v in sorted(result.status_counts.items()))
    console.print(
        f"loaded [bold]{problems.num_rows}[/] problems into dataset [bold]{name}[/] "
        f"({result.rows_read} rows read, {result.duplicates} duplicates collapsed; {statuses})"
    )
    return result


@app.command("load")
def load_cmd(
    dataset: Optional[str] = typer.Argument(None, help="Adapter name (see `difficulty datasets`)."),
    data_file: Optional[Path] = typer.Option(None, "--data-file", help="Local Parquet/JSONL/CSV file or hub-layout folder."),
    limit: Optional[int] = typer.Option(None, "--limit", help="Keep the first N problems."),
    split: Optional[str] = typer.Option(None, "--split", help="Split to read."),
    columns: Optional[str] = typer.Option(None, "--columns", help="Column mapping, e.g. problem=question,answer=final."),
    data_dir: Optional[str] = DataDirOption,
) -> None:
    """Load a dataset into the problems table."""
    if dataset is None and data_file is None:
        fail("give a DATASET name or --data-file PATH (see `difficulty datasets`)")
    load_problems(dataset, data_file, split, limit, columns, data_dir_or_fail(data_dir))


@app.command("sql")
def sql_cmd(
    query: str = typer.Argument(..., help="SQL over the views problems, runs, samples, prompt_stats, weights, summary, allocation."),
    fmt: str = typer.Option("table", "--format", help="table, csv, json or parquet."),
    output: Optional[Path] = typer.Option(None, "--output", help="Write the result to this file."),
    data_dir: Optional[str] = DataDirOption,
) -> None:
    """Run a SQL query on the difficulty tables (DuckDB)."""
    try:
        result = store.query(data_dir_or_fail(data_dir), query)
    except store.StoreError as exc:
        fail(str(exc))
    emit(result, fmt, output)


@app.command("runs")
def runs_cmd(data_dir: Optional[str] = DataDirOption) -> None:
    """List the runs in the registry, newest first."""
    runs = store.list_runs(data_dir_or_fail(data_dir))
    keep = ["run_id", "dataset", "model", "backend", "n_prompts", "status", "created_at"]
    print_table(runs.select(keep), title="runs")
