"""``current``: difficulty now, from every observation source."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pipeline.cli.options import DataDir, open_store, output_file
from pipeline.cli.output import check_format, emit, say
from pipeline.cli.run_summary import print_verdict
from pipeline.errors import ConfigError


def current_cmd(
    dataset: Annotated[str | None, typer.Option("--dataset", help="Only this dataset.")] = None,
    forgetting: Annotated[
        float, typer.Option("--forgetting", help="Weight of an observation one step older (1: no forgetting).")
    ] = 1.0,
    group_size: Annotated[int, typer.Option("--group-size", help="G of the silent probability.")] = 8,
    with_labels: Annotated[
        bool, typer.Option("--with-labels", help="Pool other models' labels too (not by default).")
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
    """Each prompt's difficulty now, from every observation (older steps discounted by --forgetting).

    With --save the current difficulty of --dataset becomes a run of its own: `difficulty export --run`
    writes the dataset back with it, `difficulty allocate --run` spends a budget by it.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    from pipeline.cli.output import SQL_FORMATS
    from pipeline.observe import current, record

    fmt = check_format(fmt, SQL_FORMATS)
    kinds = ("profile", "training", "label") if with_labels else ("profile", "training")
    config = current.CurrentConfig(forgetting=forgetting, group_size=group_size, kinds=kinds)
    output = output_file(output)
    store = open_store(data_dir)
    if save:
        from pipeline.observe import snapshot

        if dataset is None:
            raise ConfigError("--save needs --dataset NAME: a run holds one dataset")
        run_id = snapshot.save_current(store, dataset, config)
        say(
            f"run {run_id}: the current difficulty of {dataset} (forgetting {forgetting:g}); "
            f"`difficulty export --run {run_id} --output ...` or `difficulty allocate --run {run_id}`"
        )
        print_verdict(store, run_id, G=group_size)
        return
    obs = record.read_observations(store)
    if dataset is not None:
        obs = obs.filter(pc.equal(obs.column("dataset"), dataset))
    if obs.num_rows == 0:
        raise ConfigError(
            "no observations yet" + (f" of dataset {dataset!r}" if dataset else "") + ": `difficulty track` first"
        )
    if compare is not None:
        table = current.profile_vs_training(obs, compare[0], compare[1], config=config)
    elif agree is not None:
        table = pa.Table.from_pylist([current.label_agreement(obs, agree[0], agree[1])])
    elif moved:
        table = current.moved_prompts(obs, config)
    else:
        table = current.current_difficulty(obs, config)
    emit(table, fmt, output)
