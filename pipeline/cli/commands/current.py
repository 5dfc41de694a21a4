"""``current``: difficulty now, from the observation sources chosen (all of the dataset's by default)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pipeline import suggest
from pipeline.cli.options import DataDir, open_store, output_file
from pipeline.cli.output import check_format, emit, plural, say
from pipeline.cli.run_summary import print_verdict, stored_verdict
from pipeline.errors import ConfigError
from pipeline.schema import DEFAULT_G

# The default itself is ``observe.current.FORGETTING``, read when the command runs (importing it here
# would load numpy and Arrow for every command); tests/test_track_cli.py checks this text names it.
FORGETTING_HELP = "Weight of an observation one step older (1: no forgetting; default 0.9, about ten steps of memory)."


def _pooled_lines(summary: list[dict], forgetting: float, simulated: tuple[str, ...] = ()) -> list[str]:
    """What was pooled, one line per source, then what was left out, and a warning when several
    models are pooled together."""
    pooled = [s for s in summary if s["pooled"]]
    models = sorted({m for s in pooled for m in s["models"]})
    named = f"{plural(len(models), 'model')}: {', '.join(models)}" if models else "no model recorded"
    lines = [f"pooled {plural(len(pooled), 'source')} (forgetting {forgetting:g}), {named}"]
    for s in pooled:
        lo, hi = s["steps"]
        steps = f"step {lo}" if lo == hi else f"steps {lo}-{hi}"
        lines.append(
            f"  {s['source']} ({s['kind']}, {', '.join(s['models']) or 'model not recorded'}; {steps}): "
            f"{plural(s['prompts'], 'prompt')}, {plural(s['rollouts'], 'rollout')}"
        )
    left = [s for s in summary if not s["pooled"]]
    if left:
        made_up = ", simulated pass rates: --simulated pools them"
        lines.append(
            "left out: "
            + ", ".join(f"{s['source']} ({s['kind']}{made_up if s['source'] in simulated else ''})" for s in left)
        )
    if len(models) > 1:
        lines.append(f"warning: {len(models)} models pooled as one policy; `--model NAME` keeps one model's outcomes")
    return lines


def current_cmd(
    dataset: Annotated[str | None, typer.Option("--dataset", help="Only this dataset.")] = None,
    source: Annotated[
        list[str] | None,
        typer.Option("--source", help="Only this source, e.g. verl:run-3 or profile:RUN (repeatable; default all)."),
    ] = None,
    model: Annotated[
        list[str] | None,
        typer.Option("--model", help="Only outcomes drawn by this model (repeatable; default all)."),
    ] = None,
    forgetting: Annotated[float | None, typer.Option("--forgetting", help=FORGETTING_HELP, show_default=False)] = None,
    G: Annotated[
        int, typer.Option("--G", help="The group size you train with: G of the silent probability.")
    ] = DEFAULT_G,
    group_size: Annotated[int | None, typer.Option("--group-size", hidden=True)] = None,  # the old name of --G
    with_labels: Annotated[
        bool, typer.Option("--with-labels", help="Pool other models' labels too (not by default).")
    ] = False,
    simulated: Annotated[
        bool,
        typer.Option(
            "--simulated", help="Pool the made-up pass rates of simulate runs too (not by default; --source names one)."
        ),
    ] = False,
    moved: Annotated[bool, typer.Option("--moved", help="List the prompts that became easy or hard.")] = False,
    compare: Annotated[
        tuple[str, str] | None,
        typer.Option("--compare", help="PROFILE TRAINING: the profile's prediction against what training drew."),
    ] = None,
    agree: Annotated[
        tuple[str, str] | None,
        typer.Option("--agree", help="SOURCE SOURCE: how often two sources agree within binomial noise."),
    ] = None,
    save: Annotated[
        bool,
        typer.Option(
            "--save", help="Store it as a run (current-...) for `export`, `allocate` and SQL (needs --dataset)."
        ),
    ] = False,
    output: Annotated[Path | None, typer.Option("--output", help="Write the result to this file.")] = None,
    fmt: Annotated[str, typer.Option("--format", help="table, csv, json or parquet.")] = "table",
    data_dir: DataDir = None,
) -> None:
    """Each prompt's difficulty now, from the observations of the sources and models chosen (older
    steps discounted by --forgetting); it says what it pooled.

    With --save the current difficulty of --dataset becomes a run of its own: `difficulty export --run`
    writes the dataset back with it, `difficulty allocate --run` spends a budget by it.
    """
    import dataclasses

    import pyarrow as pa
    import pyarrow.compute as pc

    from pipeline.cli.output import SQL_FORMATS
    from pipeline.observe import current, record

    fmt = check_format(fmt, SQL_FORMATS)
    kinds = ("profile", "training", "label") if with_labels else ("profile", "training")
    config = current.CurrentConfig(
        forgetting=current.FORGETTING if forgetting is None else forgetting,
        group_size=G if group_size is None else group_size,
        kinds=kinds,
        sources=tuple(source or ()),
        models=tuple(model or ()),
    )
    output = output_file(output)
    if save and dataset is None:
        raise ConfigError("--save needs --dataset NAME: a run holds one dataset")
    store = open_store(data_dir)
    if not simulated:
        config = dataclasses.replace(config, simulated=record.simulated_sources(store))
    obs = record.read_observations(store)
    if dataset is not None:
        obs = obs.filter(pc.equal(obs.column("dataset"), dataset))
    if obs.num_rows == 0:
        raise ConfigError(
            "no observations yet" + (f" of dataset {dataset!r}" if dataset else "") + ": `difficulty track` first"
        )
    current.check_selection(obs, config)
    pooled = _pooled_lines(current.pooled_summary(obs, config), config.forgetting, config.simulated)
    if save:
        from pipeline.observe import snapshot

        run_id = snapshot.save_current(store, dataset, config)
        say(f"run {run_id}: the current difficulty of {dataset}, saved as a run")
        for line in pooled:
            say(line)
        say(f"next: {suggest.export(run_id, output=f'{dataset}-current.parquet')}")  # export's format: the dataset's
        say(f"  or: {suggest.allocate(run_id)}")
        print_verdict(stored_verdict(store, run_id, G=config.group_size))
        return
    if compare is None and agree is None:  # the two comparisons name their own sources
        for line in pooled:
            say(line, fmt)
    if compare is not None:
        table = current.profile_vs_training(obs, compare[0], compare[1], config=config)
        worst = current.largest_deviation(table)
        emit(table, fmt, output)
        verdict = "beyond 3: the profile did not predict training" if worst > 3 else "within 3: calibrated"
        say(
            f"largest deviation: {worst:.1f} standard deviations of the predictive noise (the groups' binomial "
            f"noise and the fitted prior's range); {verdict}",
            fmt,
        )
        return
    if agree is not None:
        table = pa.Table.from_pylist([current.label_agreement(obs, agree[0], agree[1])])
    elif moved:
        table = current.moved_prompts(obs, config)
    else:
        table = current.current_difficulty(obs, config)
    emit(table, fmt, output)
