"""The ``difficulty`` command line: one typer app, a subcommand per stage."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pyarrow as pa
import typer

from pipeline import datasets, store
from pipeline.cli_common import DataDirOption, console, data_dir_or_fail, emit, fail, print_run_summary, print_table

app = typer.Typer(
    help="Per-prompt pass rates, estimator weights, zero-signal rates and rollout allocation.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def main(verbose: bool = typer.Option(False, "--verbose", "-v", help="Log progress details.")) -> None:
    level = logging.INFO if verbose else logging.WARNING
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    # Prefect's ephemeral server is a subprocess: settings go through the environment it inherits.
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "INFO" if verbose else "WARNING")
    os.environ.setdefault("PREFECT_SERVER_LOGGING_LEVEL", "WARNING")


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
    dataset: str | None,
    data_file: Path | None,
    split: str | None,
    limit: int | None,
    columns: str | None,
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
    dataset: str | None = typer.Argument(None, help="Adapter name (see `difficulty datasets`)."),
    data_file: Path | None = typer.Option(
        None, "--data-file", help="Local Parquet/JSONL/CSV file or hub-layout folder."
    ),
    limit: int | None = typer.Option(None, "--limit", help="Keep the first N problems."),
    split: str | None = typer.Option(None, "--split", help="Split to read."),
    columns: str | None = typer.Option(None, "--columns", help="Column mapping, e.g. problem=question,answer=final."),
    data_dir: str | None = DataDirOption,
) -> None:
    """Load a dataset into the problems table."""
    if dataset is None and data_file is None:
        fail("give a DATASET name or --data-file PATH (see `difficulty datasets`)")
    load_problems(dataset, data_file, split, limit, columns, data_dir_or_fail(data_dir))


@app.command("sql")
def sql_cmd(
    query: str = typer.Argument(
        ..., help="SQL over the views problems, runs, samples, prompt_stats, weights, summary, allocation."
    ),
    fmt: str = typer.Option("table", "--format", help="table, csv, json or parquet."),
    output: Path | None = typer.Option(None, "--output", help="Write the result to this file."),
    data_dir: str | None = DataDirOption,
) -> None:
    """Run a SQL query on the difficulty tables (DuckDB)."""
    try:
        result = store.query(data_dir_or_fail(data_dir), query)
    except store.StoreError as exc:
        fail(str(exc))
    emit(result, fmt, output)


@app.command("runs")
def runs_cmd(data_dir: str | None = DataDirOption) -> None:
    """List the runs in the registry, newest first."""
    runs = store.list_runs(data_dir_or_fail(data_dir))
    keep = ["run_id", "dataset", "model", "backend", "n_prompts", "status", "created_at"]
    print_table(runs.select(keep), title="runs")


@app.command("grade")
def grade_cmd(
    input: Path = typer.Option(..., "--input", help="JSON Lines or Parquet file of rollouts."),
    dataset: str | None = typer.Option(None, "--dataset", help="Dataset name (default: import-<file stem>)."),
    problem_col: str | None = typer.Option("problem", "--problem-col", help="Problem text column ('' if none)."),
    prompt_id_col: str | None = typer.Option(None, "--prompt-id-col", help="Prompt id column, used as is."),
    answer_col: str = typer.Option("answer", "--answer-col", help="Gold answer column."),
    completion_col: str = typer.Option("completion", "--completion-col", help="Completion column."),
    model: str = typer.Option("imported", "--model", help="Model name recorded on the run."),
    grade_workers: int = typer.Option(2, "--grade-workers"),
    report: bool = typer.Option(True, "--report/--no-report"),
    data_dir: str | None = DataDirOption,
) -> None:
    """Grade rollouts you already have (e.g. verl/TRL logs) and store them as a run."""
    from pipeline.flows.import_rollouts import ImportConfig, import_rollouts

    path = data_dir_or_fail(data_dir)
    try:
        config = ImportConfig(
            input=str(input),
            dataset=dataset,
            problem_col=problem_col or None,
            prompt_id_col=prompt_id_col,
            answer_col=answer_col,
            completion_col=completion_col,
            model=model,
            grade_workers=grade_workers,
            report=report,
        )
        info = import_rollouts(config, path)
    except (datasets.DatasetError, ValueError, store.StoreError) as exc:
        fail(str(exc))
    statuses = ", ".join(f"{k}: {v}" for k, v in info["grade_status"].items())
    console.print(f"graded {info['samples']} rollouts of {info['prompts']} prompts ({statuses})")
    print_run_summary(path, info["run_id"])
    console.print(f"run [bold]{info['run_id']}[/] done; tables under {path}")
    if info.get("report"):
        console.print(f"report: {info['report']}")


def _register_stage_commands() -> None:
    from pipeline import cli_analysis, cli_flows, cli_report

    for module in (cli_analysis, cli_flows, cli_report):
        module.register(app)


_register_stage_commands()
