"""``calibrate``: a dataset's own difficulty labels against a run's measured pass rates."""

from __future__ import annotations

from typing import Annotated

import typer

from pipeline.cli.options import DataDir, Format, Run, open_store
from pipeline.cli.output import check_format, emit, say

Label = Annotated[
    str | None,
    typer.Option(
        "--label",
        metavar="COL",
        help="The label: difficulty, prior_rate, or a numeric field of the rows (level, extra_info.level, ...). "
        "Default: difficulty, else the prior solve rate.",
        show_default=False,
    ),
]


Bootstrap = Annotated[int, typer.Option("--bootstrap", help="Bootstrap resamples of the interval.")]


Seed = Annotated[int, typer.Option("--seed", help="Seed of the resamples.")]


Write = Annotated[bool, typer.Option("--write/--no-write", help="Store the result in the run's summary table.")]


def calibrate_cmd(
    run: Run,
    label: Label = None,
    bootstrap: Bootstrap = 1000,
    seed: Seed = 0,
    write: Write = True,
    fmt: Format = "table",
    data_dir: DataDir = None,
) -> None:
    """Rank-correlate a difficulty label with the run's pass rates (Spearman, bootstrap interval).

    Prints rho with its interval and the mean pass rate per label value (per quantile bin when
    there are many values); stores them in the summary table (section `calibration`).
    """
    import pyarrow as pa

    from pipeline.calibrate import CalibrationConfig, calibrate_run, write_calibration

    fmt = check_format(fmt)
    config = CalibrationConfig(label=label, bootstrap=bootstrap, seed=seed)
    store = open_store(data_dir)
    result = calibrate_run(store, run, config)
    if write:
        write_calibration(store, result)
    say(result.line(), fmt)
    for note in result.notes:
        say(note, fmt)
    groups = pa.Table.from_pylist(result.groups) if result.groups else pa.table({"group": pa.array([], pa.string())})
    emit(groups, fmt, title=f"mean pass rate by {result.label}")
    if write:
        say(f"stored in the summary table (section calibration, run {run})", fmt)
