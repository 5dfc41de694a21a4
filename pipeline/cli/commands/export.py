"""``export``: a run's dataset written back in its own format with the run's measurements."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pipeline.cli.options import DataDir, Run, floats, open_store
from pipeline.cli.output import say
from pipeline.errors import ConfigError
from pipeline.schema import DEFAULT_G

ExportFormat = Annotated[
    str | None,
    typer.Option(
        "--format",
        help="verl (Parquet, measurements inside extra_info), trl (Parquet for TRL's GRPOTrainer: prompt, answer), "
        "parquet or jsonl (the original rows), mopps (MoPPS's index_score.json: each row index's 0/1 outcomes). "
        "Default: verl for a verl dataset, else by the --output suffix.",
        show_default=False,
    ),
]


Output = Annotated[Path, typer.Option("--output", help="The file to write.", show_default=False)]


Keep = Annotated[
    str | None,
    typer.Option(
        "--keep",
        help="informative, easy, hard, truncated or all (default all; informative when --band is given). "
        "Prompts whose wrong answers were mostly cut by the token limit (band truncated) are not dropped as hard: "
        "informative and all write them unless --drop-truncated.",
        show_default=False,
    ),
]


Band = Annotated[
    str | None,
    typer.Option(
        "--band",
        metavar="LO,HI",
        help="Edges of the informative band of pass rates c/n: hard p <= LO, easy p >= HI. Default: bands at G "
        "(hard or easy when a group of G is more likely than not all wrong or all right).",
        show_default=False,
    ),
]


GroupSize = Annotated[
    int, typer.Option("--G", help="The trainer's group size: the zero-signal chance and the bands are at it.")
]


DropTruncated = Annotated[
    bool,
    typer.Option(
        "--drop-truncated",
        help="Leave out the prompts whose wrong answers were mostly cut by the token limit (band truncated).",
    ),
]


Field = Annotated[
    str | None,
    typer.Option(
        "--field",
        help="Name of the measurements' field, the same for every run (default difficulty).",
        show_default=False,
    ),
]


ExcludeList = Annotated[
    Path | None,
    typer.Option("--exclude-list", help="Write the prompt ids left out, one per line.", show_default=False),
]


def parse_band(text: str | None) -> tuple[float, float] | None:
    """``--band LO,HI`` as two numbers (``ConfigError`` names the flag)."""
    if text is None:
        return None
    values = floats(text, "--band")
    if len(values) != 2:
        raise ConfigError(f"--band takes two pass rates LO,HI, got {text!r}")
    return values[0], values[1]


def export_cmd(
    run: Run,
    output: Output,
    fmt: ExportFormat = None,
    keep: Keep = None,
    band: Band = None,
    G: GroupSize = DEFAULT_G,
    field: Field = None,
    exclude_list: ExcludeList = None,
    drop_truncated: DropTruncated = False,
    data_dir: DataDir = None,
) -> None:
    """Write a run's dataset back in its own format, with its measurements on every row.

    Every original field is kept as loaded; each row gets a top-level `prompt_id` and the run's
    measurements (run id, answers drawn and correct, pass rate, Wilson interval, band, the chance a
    group of G is silent, the share cut by the token limit, allocated rollouts) in one field,
    `difficulty` whatever the run (inside `extra_info` for verl). Counts in and out are printed.
    """
    from pipeline.export import FIELD, TRUNCATED, ExportConfig, export_run

    if fmt is not None and fmt.lower() == "mopps":
        _export_mopps(run, output, data_dir, keep=keep, band=band, field=field, exclude_list=exclude_list)
        return
    band_edges = parse_band(band)
    config = ExportConfig(
        format=fmt.lower() if fmt else None,
        keep=keep,
        band=band_edges,
        G=G,
        field=field or FIELD,
        drop_truncated=drop_truncated,
    )
    store = open_store(data_dir, create=False)
    result = export_run(store, run, output, config, exclude_list=exclude_list)
    meta = result.metadata

    def counts(kind: str) -> str:
        parts = [f"{band} {c[kind]}" for band, c in sorted(result.by_band.items()) if c[kind]]
        return ", ".join(parts) or "none"

    total = ", ".join(f"{b} {c['written'] + c['left_out']}" for b, c in sorted(result.by_band.items()))
    say(
        f"run {run}: dataset {meta['dataset']} has {result.rows} rows ({total}); "
        f"--keep {meta['keep']}{' --drop-truncated' if drop_truncated else ''}; bands by {meta['bands_by']}"
    )
    if meta.get("run_status") != "done":
        say(f"run {run} is {meta.get('run_status')}: prompts it has not sampled yet count as not_in_run")
    where = f"extra_info[{result.field!r}]" if result.format == "verl" else f"field {result.field!r}"
    say(
        f"wrote {result.written} rows to {result.path} ({result.format}; prompt_id at the top level, measurements "
        f"in {where}): "
        f"{counts('written')}"
    )
    say(f"left out {result.left_out} rows: {counts('left_out')}")
    cut = result.by_band.get(TRUNCATED, {})
    if cut.get("written"):
        say(
            f"{cut['written']} truncated prompts written: most of their wrong answers hit the token limit, so their "
            "difficulty is the budget's, not known to be hard (--drop-truncated leaves them out)"
        )
    if result.missing:
        say(
            f"{result.missing} prompts of the run have no stored problem row (the dataset was loaded again since) "
            "and are not in the file"
        )
    if meta.get("allocation"):
        a = meta["allocation"]
        what = " ".join(str(v) for v in (a["objective"], a["estimator"]) if v)
        say(f"allocated_rollouts: the allocation {what}, budget {a['budget']} {a.get('price_unit', 'rollouts')}")
    if result.exclude_list is not None:
        say(f"exclude list: {result.exclude_list} ({result.left_out + result.missing} prompt ids)")


def _export_mopps(run: str, output: Path, data_dir, **unused) -> None:
    """``--format mopps``: the run's counts as MoPPS's prior file (``pipeline.warmstart``)."""
    from pipeline.warmstart import write_mopps

    given = [f"--{k.replace('_', '-')}" for k, v in unused.items() if v is not None]
    if given:
        raise ConfigError(f"--format mopps writes every measured prompt's outcomes: {', '.join(given)} does not apply")
    got = write_mopps(open_store(data_dir, create=False), run, output)
    say(
        f"wrote {got.rows} rows ({got.outcomes} outcomes) to {got.path} (MoPPS index_score.json, keyed by "
        f"extra_info.index; tasksampler.bandit_init_dir)"
        + (f"; {got.no_index} measured prompts have no row index and are not in it" if got.no_index else "")
    )
