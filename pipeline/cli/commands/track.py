"""``track``: observations imported from a source (verl, prime-rl or NeMo-RL rollouts, tables, labels, a run)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from pipeline.cli.options import DataDir, RunId, open_store
from pipeline.cli.output import check_format, emit, plural, say
from pipeline.errors import ConfigError

INPUT_ONLY = ("verl", "label")  # input formats that are no output format

SourceName = Annotated[
    str | None,
    typer.Option("--source", help="Name of the source in the table (default: from the format and the path)."),
]


ObsDataset = Annotated[
    str | None, typer.Option("--dataset", help="Stored dataset the source's prompts belong to (see `difficulty sql`).")
]


ObsDataFile = Annotated[
    Path | None, typer.Option("--data-file", help="Or: the dataset file itself (loaded and stored now).")
]


def track_cmd(
    path: Annotated[
        Path | None,
        typer.Argument(
            help="A trainer's rollout folder: verl (trainer.rollout_data_dir: <step>.jsonl), prime-rl (its output "
            "dir: rollouts/step_N/train/all/traces.jsonl) or NeMo-RL (its log dir: train_data_stepN.jsonl); or a "
            "table file; none with --label/--run."
        ),
    ] = None,
    kind: Annotated[
        str | None,
        typer.Option(
            "--input-format",
            help="What PATH is: verl, prime-rl, nemo-rl, table or label (default: a folder's format is read from its "
            "files, a file is a table).",
            show_default=False,
        ),
    ] = None,
    source: SourceName = None,
    dataset: ObsDataset = None,
    data_file: ObsDataFile = None,
    model: Annotated[
        str | None, typer.Option("--model", help="The model or training run the outcomes come from.")
    ] = None,
    correct_field: Annotated[
        str | None,
        typer.Option(
            "--correct-field",
            help="verl: the binary correctness field (default: acc, if present); prime-rl: a reward or metric name "
            "(default: the trace's total reward).",
        ),
    ] = None,
    score_threshold: Annotated[
        float | None,
        typer.Option(
            "--score-threshold",
            help="Count a shaped score (verl's score, a prime-rl or NeMo-RL reward) >= this as correct.",
        ),
    ] = None,
    final: Annotated[
        bool, typer.Option("--final", help="Training is over: the newest step is complete (import it now).")
    ] = False,
    settle: Annotated[
        float,
        typer.Option(
            "--settle",
            help="verl, NeMo-RL: the newest step is complete once unchanged this many seconds with as many "
            "rollouts as the step before (prime-rl: once its batch shipped).",
        ),
    ] = 60.0,
    label: Annotated[
        str | None, typer.Option("--label", help="A pass-rate column of the dataset (llama8b_solve_rate, ...).")
    ] = None,
    label_n: Annotated[
        int | None, typer.Option("--label-n", help="Rollouts behind the label (when not known).")
    ] = None,
    counts: Annotated[
        str | None, typer.Option("--counts", help="Skywork model_difficulty: does it count correct or wrong answers?")
    ] = None,
    run: RunId = None,
    cron: Annotated[str | None, typer.Option("--cron", help="Import what is new on this schedule (served).")] = None,
    interval: Annotated[
        float | None, typer.Option("--interval", help="Import what is new every SECONDS (served).")
    ] = None,
    fmt: Annotated[
        str, typer.Option("--format", help="The output: table, csv or json (verl or label: --input-format).")
    ] = "table",
    data_dir: DataDir = None,
) -> None:
    """Import per-prompt outcomes you already have (a training log, a dataset's labels, a profile run).

    Incremental: only steps not yet recorded are read, so a rerun adds nothing twice. With --cron or
    --interval, a Prefect deployment imports what is new on that schedule (needs a Prefect server).
    """
    import pyarrow as pa

    from pipeline.observe import track

    # `--format verl|label` named the input before it had its own option: still accepted. (`table`
    # is also an output format, and a file is read as a table by default anyway.)
    if fmt.lower() in INPUT_ONLY:
        if kind is not None and kind.lower() != fmt.lower():
            raise ConfigError(f"--format {fmt} and --input-format {kind} disagree: --input-format names the input")
        kind, fmt = fmt.lower(), "table"
    fmt = check_format(fmt)
    config = track.TrackConfig(
        path=str(path) if path is not None else None,
        kind=kind,
        source=source,
        dataset=dataset,
        data_file=str(data_file) if data_file is not None else None,
        model=model,
        correct_field=correct_field,
        score_threshold=score_threshold,
        final=final,
        settle_s=settle,
        label=label,
        label_n=label_n,
        counts=counts,
        run=run,
    )
    config.resolved_kind()  # a bad combination fails before anything is read
    store = open_store(data_dir)
    if cron is not None or interval is not None:
        from dataclasses import asdict

        from pipeline.cli.schedule_options import check_schedule
        from pipeline.flows import schedule

        check_schedule(cron, interval, None)
        name = f"track-{config.source or Path(config.path or config.label or 'source').name}"
        say(f"serving deployment {name!r} ({'cron ' + cron if cron else f'every {interval:g} s'}); Ctrl-C stops it")
        schedule.serve_flow(
            "track", name, {"config": asdict(config), "store": asdict(store)}, cron=cron, interval=interval
        )
        return
    result = track.run_track(store, config)
    info = result.to_dict()
    if fmt != "table":
        emit(pa.Table.from_pylist([{**info, "unmatched_reasons": json.dumps(info["unmatched_reasons"])}]), fmt)
        return
    say(
        f"source {info['source']}: {plural(info['steps_written'], 'step')} written "
        f"({info['steps_already_recorded']} recorded before, {info['steps_pending']} still being written), "
        f"{plural(info['observations'], 'prompt observation')} of {plural(info['rollouts'], 'rollout')}"
    )
    if result.notes:
        for note in result.notes:
            say(f"note: {note}")
    if info["unmatched_rows"]:
        reasons = "; ".join(f"{k}: {v}" for k, v in info["unmatched_reasons"].items())
        say(
            f"{info['unmatched_rows']:,} rows matched no prompt ({reasons}); kept in the table `unmatched`: "
            f"difficulty sql \"select * from unmatched where source = '{info['source']}'\""
        )
