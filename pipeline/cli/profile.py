"""The main pipeline: ``datasets``, ``load``, ``profile`` and ``grade``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from pipeline.cli import profile_options as opt
from pipeline.cli.options import DataDir, Format, open_store
from pipeline.cli.output import check_format, emit, err_console, print_table, say
from pipeline.cli.profile_options import GRADE_DEFAULTS
from pipeline.errors import ConfigError

if TYPE_CHECKING:
    from pipeline.run import ProfileConfig
    from pipeline.store import Store


def print_run_summary(store: Store, run_id: str) -> None:
    """The end-of-run summary: pass-rate spread, zero-signal rates, gradient shares at G = 8."""
    spread = store.named_query("pass_rate_spread", {"run_id": run_id})
    print_table(spread, title=f"pass-rate spread, run {run_id}")
    silent = store.named_query("zero_signal_summary", {"run_id": run_id})
    print_table(silent, title="zero-signal (silent group) rate by group size G")
    shares = store.named_query("gradient_shares", {"run_id": run_id, "G": 8})
    print_table(shares, title="gradient share by difficulty band at G = 8")


def _prior_label(run: dict) -> str:
    """A run's stored prior in words (its registry row's ``prior`` JSON)."""
    import json

    from pipeline.prior import Prior

    stored = json.loads(run.get("prior") or "{}") or {}
    if stored:
        return Prior.from_dict(stored).label
    return f"Beta({run['prior_a']:.3g}, {run['prior_b']:.3g})"


def print_adaptive_summary(store: Store, run_id: str) -> None:
    """An adaptive run's rounds, rollouts and prior in one line (nothing for a fixed-n run)."""
    import json

    import pyarrow.compute as pc

    run = store.get_run(run_id)
    if not run.get("adaptive"):
        return
    settings = json.loads(run["adaptive"])
    rounds = json.loads(run.get("rounds") or "[]")
    stats = store.read_table("prompt_stats", {"run_id": run_id})
    total = int(pc.sum(stats.column("n")).as_py() or 0)
    undecided = int(pc.sum(stats.column("undecided").cast("int64")).as_py() or 0)
    prior = _prior_label(run)
    say(
        f"adaptive {settings['target']} (n {settings['n_min']}..{settings['n_max']}, {settings['rule']}): "
        f"{len(rounds)} rounds, {total:,} rollouts ({total / max(stats.num_rows, 1):.2f} per prompt), "
        f"{undecided} prompts stopped undecided; prior {prior}"
        + ("" if settings["prior"] in prior else f" ({settings['prior']})")
        + "; the analysis uses posterior expectations under it"
    )


@contextmanager
def progress_bars() -> Iterator[None]:
    """The run's progress line on standard error while the block runs (nothing when it is piped)."""
    from pipeline.run import progress

    with progress.display(err_console.file):
        yield


def datasets_cmd(fmt: Format = "table") -> None:
    """List the dataset adapters and their sources."""
    import pyarrow as pa

    from pipeline import datasets

    fmt = check_format(fmt)
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
    emit(pa.Table.from_pylist(rows), fmt, title="dataset adapters")


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


@opt.profile_options
def profile_cmd(profile: ProfileConfig, prefect: opt.Prefect = True, data_dir: DataDir = None) -> None:
    """Sample, grade, store and analyze a dataset (default: bundled arithmetic, bundled model).

    With --adaptive, sample in rounds and stop each prompt once its band (or pass rate to +-h) is decided.
    """
    store = open_store(data_dir)
    with progress_bars():
        if prefect:
            from pipeline.flows.prefect_flows import profile_flow

            result = profile_flow(profile, store)
        else:
            from pipeline.flows.executors import profile_direct

            result = profile_direct(profile, store)
    print_run_summary(store, result["run_id"])
    print_adaptive_summary(store, result["run_id"])
    say(f"run {result['run_id']} done; tables under {store.root}")
    if result.get("report"):
        say(f"report: {result['report']}")


def grade_cmd(
    input: Annotated[Path, typer.Option("--input", help="JSON Lines or Parquet file of rollouts.")],
    dataset: Annotated[
        str | None, typer.Option("--dataset", help="Dataset name (default: import-<file stem>).")
    ] = None,
    problem_col: Annotated[str, typer.Option("--problem-col", help="Problem text column ('' if none).")] = "problem",
    prompt_id_col: Annotated[str | None, typer.Option("--prompt-id-col", help="Prompt id column, used as is.")] = None,
    answer_col: Annotated[str, typer.Option("--answer-col", help="Gold answer column.")] = "answer",
    completion_col: Annotated[str, typer.Option("--completion-col", help="Completion column.")] = "completion",
    model: Annotated[str, typer.Option("--model", help="Model name recorded on the run.")] = "imported",
    grade_workers: opt.GradeWorkers = GRADE_DEFAULTS.workers,
    grade_timeout: opt.GradeTimeout = GRADE_DEFAULTS.timeout_s,
    report: opt.Report = True,
    data_dir: DataDir = None,
) -> None:
    """Grade rollouts you already have (e.g. verl/TRL logs) and store them as a run."""
    from pipeline.ingest import ImportConfig, import_rollouts

    opt.check_grade_options(grade_workers, grade_timeout)
    config = ImportConfig(
        input=str(input),
        dataset=dataset,
        problem_col=problem_col or None,
        prompt_id_col=prompt_id_col,
        answer_col=answer_col,
        completion_col=completion_col,
        model=model,
        grade_workers=grade_workers,
        grade_timeout_s=grade_timeout,
        report=report,
    )
    store = open_store(data_dir)
    info = import_rollouts(config, store)
    statuses = ", ".join(f"{k}: {v}" for k, v in info["grade_status"].items())
    say(f"graded {info['samples']} rollouts of {info['prompts']} prompts ({statuses})")
    print_run_summary(store, info["run_id"])
    say(f"run {info['run_id']} done; tables under {store.root}")
    if info.get("report"):
        say(f"report: {info['report']}")
