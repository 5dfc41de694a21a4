"""``regrade``: grade a stored run again with the current grader, without sampling again."""

from __future__ import annotations

from typing import Annotated

import typer

from pipeline.cli import profile_options as opt
from pipeline.cli.options import DataDir, Run, open_store
from pipeline.cli.output import say
from pipeline.cli.profile_options import GRADE_DEFAULTS
from pipeline.cli.run_summary import print_run_summary


def regrade_cmd(
    run: Run,
    math_verify: Annotated[
        bool,
        typer.Option(
            "--math-verify/--no-math-verify",
            help="Grade with math-verify (default), or with the exact numeric path and string matching only.",
        ),
    ] = True,
    grade_workers: opt.GradeWorkers = GRADE_DEFAULTS.workers,
    grade_timeout: opt.GradeTimeout = GRADE_DEFAULTS.timeout_s,
    report: opt.Report = True,
    data_dir: DataDir = None,
) -> None:
    """Grade a run's stored samples again with the current grader, as a new run (no sampling).

    The new run is `<run>-g<grader hash>`; the source run is kept, and the grader column of each
    sample says which grading it belongs to. A killed regrade resumes where it stopped.
    """
    from pipeline import grade
    from pipeline.regrade import regrade

    opt.check_grade_options(grade_workers, grade_timeout)
    config = grade.GradeConfig(workers=grade_workers, timeout_s=grade_timeout, use_math_verify=math_verify)
    store = open_store(data_dir)
    result = regrade(store, run, config, report=report)
    info = result.details
    changed = ", ".join(f"{k}: {v}" for k, v in info["changed"].items()) or "none"
    say(f"regraded {info['samples']} samples of {info['source']} with {info['grader']}; verdicts changed: {changed}")
    print_run_summary(store, result.run_id, result.finished)
    say(f"run {result.run_id} done (the regrade of {info['source']}); tables under {store.root}")
    if result.report:
        say(f"report: {result.report}")
