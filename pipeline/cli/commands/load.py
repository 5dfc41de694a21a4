"""``load``: a dataset into the problems table."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pipeline.cli.options import DataDir, open_store
from pipeline.cli.output import say
from pipeline.errors import ConfigError


def load_cmd(
    dataset: Annotated[str | None, typer.Argument(help="Adapter name (see `difficulty datasets`).")] = None,
    data_file: Annotated[
        Path | None, typer.Option("--data-file", help="Local Parquet/JSONL/CSV file or hub-layout folder.")
    ] = None,
    limit: Annotated[int | None, typer.Option("--limit", help="Keep the first N problems.")] = None,
    split: Annotated[str | None, typer.Option("--split", help="Split to read.")] = None,
    columns: Annotated[
        str | None, typer.Option("--columns", help="Column mapping, e.g. problem=question,answer=final.")
    ] = None,
    data_dir: DataDir = None,
) -> None:
    """Load a dataset into the problems table."""
    from pipeline import datasets

    if dataset is None and data_file is None:
        raise ConfigError("give a DATASET name or --data-file PATH (see `difficulty datasets`)")
    store = open_store(data_dir)
    result = datasets.load(dataset, data_file=data_file, split=split, limit=limit, columns=columns)
    problems = result.problems
    name = problems.column("dataset")[0].as_py() if problems.num_rows else (dataset or "empty")
    store.add_problems(problems, name)
    statuses = ", ".join(f"{k}: {v}" for k, v in sorted(result.status_counts.items()))
    say(
        f"loaded {problems.num_rows} problems into dataset {name} "
        f"({result.rows_read} rows read, {result.duplicates} duplicates collapsed; {statuses})"
    )
