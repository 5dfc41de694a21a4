"""``analyze``: prompt_stats, weights and summary of a run's or a dataset's counts."""

from __future__ import annotations

from typing import Annotated

import typer

from pipeline.analyze import AnalyzeConfig
from pipeline.cli.analysis_options import DEFAULT_ESTIMATORS, Estimators
from pipeline.cli.counts import counts_of
from pipeline.cli.options import DataDir, DatasetName, Format, RunId, ints, open_store
from pipeline.cli.output import check_format, emit_sections, say
from pipeline.cli.run_summary import print_verdict, run_tables, stored_verdict
from pipeline.schema import DEFAULT_G
from pipeline.specs import split_specs

# The options' defaults are the configs' own.
_ANALYSIS_G = ",".join(map(str, AnalyzeConfig.group_sizes))


def analyze_cmd(
    run: RunId = None,
    dataset: DatasetName = None,
    group_sizes: Annotated[str, typer.Option("--G", help="Group sizes, comma-separated.")] = _ANALYSIS_G,
    estimators: Estimators = DEFAULT_ESTIMATORS,
    level: Annotated[float, typer.Option("--level", help="Interval coverage.")] = AnalyzeConfig.level,
    reco_answers: Annotated[
        str,
        typer.Option(
            "--reco-answers",
            help="Also the answer-aware ReCo weight (from each prompt's answer histogram; exact, or Monte Carlo "
            "with its standard error in weight_se for a very wide histogram) at these group sizes, "
            "comma-separated, as estimator reco_answers in the weights table.",
        ),
    ] = "",
    fmt: Format = "table",
    data_dir: DataDir = None,
) -> None:
    """Compute prompt_stats, weights and summary for a run or a dataset's prior counts.

    The tables replace the run's earlier analysis; the zero-signal rates and gradient shares
    are printed.
    """
    from pipeline import analyze, finish

    fmt = check_format(fmt)
    config = analyze.AnalyzeConfig(
        group_sizes=tuple(ints(group_sizes, "--G")),
        estimators=tuple(split_specs(estimators)),
        level=level,
        reco_answers=tuple(ints(reco_answers, "--reco-answers")) if reco_answers.strip() else (),
    )
    store = open_store(data_dir)
    if run is not None and dataset is None:
        run_id, result = run, finish.analyze_run(store, run, config)  # an adaptive run's stays posterior
    else:
        run_id, counts = counts_of(store, run, dataset)
        result = analyze.analyze(counts, run_id, config)
    finish.write_analysis(store, run_id, result)
    say(
        f"analysed {result.prompt_stats.num_rows} prompts of {run_id}; wrote prompt_stats, weights "
        f"({result.weights.num_rows} rows) and summary under {store.root}",
        fmt,
    )
    G = DEFAULT_G if DEFAULT_G in config.group_sizes else config.group_sizes[0]
    emit_sections(run_tables(result, run_id, G), fmt)
    if fmt == "table":
        print_verdict(stored_verdict(store, run_id, result, G))
