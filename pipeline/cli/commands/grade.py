"""``grade``: rollouts you already have, graded and stored as a run."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pipeline.cli import profile_options as opt
from pipeline.cli.options import DataDir, open_store
from pipeline.cli.output import say
from pipeline.cli.profile_options import GRADE_DEFAULTS
from pipeline.cli.run_summary import print_run_summary


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
    result = import_rollouts(config, store)
    info = result.details
    statuses = ", ".join(f"{k}: {v}" for k, v in info["grade_status"].items())
    say(f"graded {info['samples']} rollouts of {info['prompts']} prompts ({statuses})")
    print_run_summary(store, result.run_id, result.finished)
    say(f"run {result.run_id} done; tables under {store.root}")
    if result.report:
        say(f"report: {result.report}")
