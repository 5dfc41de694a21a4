"""``replay``: curriculum policies replayed on a training log (docs/curriculum.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pipeline.cli.output import check_format, emit, say


def replay_cmd(
    log: Annotated[
        Path,
        typer.Argument(
            help="Training log (CSV, Parquet or JSON Lines) with step, prompt_id, n, c (and group_index to keep a "
            "prompt's groups of a step apart)."
        ),
    ],
    batch_size: Annotated[int, typer.Option("--batch-size", help="Prompts a policy picks per step.")] = 256,
    policies: Annotated[
        str | None,
        typer.Option(
            "--policies",
            help="Policy specs, comma-separated (uniform, signal[:explore=...,coverage=...,forgetting=...], "
            "the baselines greedy, bonus, dapo, greso, the peers prime-rl, trinity, mopps, cures, and oracle); "
            "default: all.",
        ),
    ] = None,
    G: Annotated[int | None, typer.Option("--G", help="G of the signal score (default: the policy's, 8).")] = None,
    group_size: Annotated[int | None, typer.Option("--group-size", hidden=True)] = None,  # the old name of --G
    seed: Annotated[int, typer.Option("--seed", help="Seed of the random picks and Thompson draws.")] = 0,
    fmt: Annotated[str, typer.Option("--format", help="table or json.")] = "table",
) -> None:
    """How much signal each curriculum policy would have trained on: replay a training log.

    At each step a policy picks --batch-size prompts among those the log has an outcome for, knowing
    only the outcomes of its own earlier picks. Signal yield: the share of picked groups neither all
    right nor all wrong; coverage: the share of prompts picked in the last 10 steps. The oracle sees
    each step's outcomes (an upper bound); the default policy is marked, and the simplest rules a user
    would write (greedy, bonus, dapo, greso) are replayed beside the policies as baselines, and other
    projects' published rules (prime-rl's pool sampler, Trinity-RFT's diff_based, MoPPS, CurES) as peers.
    """
    from pipeline import curriculum, datasets, specs

    fmt = check_format(fmt, ("table", "json"))
    table = curriculum.check_log(datasets.read_local(log), where=repr(str(log)))
    names = specs.split_specs(policies) if policies else list(curriculum.ALL_POLICIES)
    G = G if group_size is None else group_size
    rows = [curriculum.replay(table, name, batch_size, seed=seed, G=G) for name in names]
    if fmt == "json":
        emit(_table(rows), "json")
        return
    for row in rows:
        kind = specs.spec_name(row["policy"])
        mark = " (baseline)" if kind in curriculum.BASELINES else " (peer)" if kind in curriculum.PEERS else ""
        row["policy"] = row["policy"] + (" (default)" if row["default"] else mark)
    emit(_table(rows), "table", title=f"replay of {log.name}")
    uniform = next((r for r in rows if r["policy"] == "uniform"), None)
    default = next((r for r in rows if r["default"]), None)
    if uniform and default and uniform["signal_yield"] > 0:
        say(f"default / uniform signal yield: {default['signal_yield'] / uniform['signal_yield']:.2f}x")


def _table(rows: list[dict]):
    import pyarrow as pa

    return pa.Table.from_pylist(rows)
