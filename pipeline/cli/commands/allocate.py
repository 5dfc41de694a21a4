"""``allocate``: rollout budgets per prompt, stored under the allocation's key, optionally exported."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import typer

from pipeline.allocate import AllocationConfig
from pipeline.checks import check_int
from pipeline.cli.counts import counts_of
from pipeline.cli.options import DataDir, DatasetName, RunId, open_store
from pipeline.cli.output import emit, say
from pipeline.errors import ConfigError
from pipeline.schema import DEFAULT_G, MAX_G

_EXPORT_SUFFIXES = (".parquet", ".jsonl", ".json")


# The options that, given without --budget, replace the default policy by the user's own allocation.
_POLICY_OPTIONS = ("objective", "estimator", "n_min", "n_max", "posterior", "method")


def _given(ctx: typer.Context, name: str) -> bool:
    """Whether the user gave option ``name`` (command line or environment), not its default."""
    # Compared by name: typer may bring its own copy of click's ParameterSource enum.
    source = ctx.get_parameter_source(name)
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


def check_output(output: Path) -> None:
    """``ConfigError`` for an export path that cannot be written, before any work: a missing
    folder found only after the allocation was stored would leave half the command done."""
    if output.suffix.lower() not in _EXPORT_SUFFIXES:
        raise ConfigError(f"--output {str(output)!r}: use a .parquet or .jsonl file name")
    folder = output.parent
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        raise ConfigError(f"--output {str(output)!r}: folder {str(folder)!r} {what}; create it first")
    if output.is_dir():
        raise ConfigError(f"--output {str(output)!r} is a folder; give a file name")
    if not os.access(folder, os.W_OK) or (output.exists() and not os.access(output, os.W_OK)):
        raise ConfigError(f"--output {str(output)!r} is not writable (check the permissions of it and its folder)")


def allocate_cmd(
    ctx: typer.Context,
    budget: Annotated[
        int | None,
        typer.Option(
            "--budget",
            help="Total rollouts to hand out (default: prompts x G, the default allocation policy's budget).",
            show_default=False,
        ),
    ] = None,
    G: Annotated[
        int,
        typer.Option("--G", help="The group size you train with: the default budget is G rollouts per prompt."),
    ] = DEFAULT_G,
    objective: Annotated[
        str, typer.Option("--objective", help="signal, knapsack or variance.")
    ] = AllocationConfig.objective,
    estimator: Annotated[
        str, typer.Option("--estimator", help="Estimator of the signal objective.")
    ] = AllocationConfig.estimator,
    n_min: Annotated[int, typer.Option("--n-min", help="Fewest rollouts per prompt.")] = AllocationConfig.n_min,
    n_max: Annotated[int, typer.Option("--n-max", help="Most rollouts per prompt.")] = AllocationConfig.n_max,
    run: RunId = None,
    dataset: DatasetName = None,
    posterior: Annotated[
        bool, typer.Option("--posterior/--point", help="Beta posterior per prompt, or the point estimate c/n.")
    ] = AllocationConfig.posterior,
    method: Annotated[
        str,
        typer.Option(
            "--method",
            help="auto (fast where greedy is exact, else dp where it fits, else lagrangian), fast, greedy "
            "(reference), dp (exact or refused) or lagrangian (relaxation with a certified gap).",
        ),
    ] = AllocationConfig.method,
    output: Annotated[
        Path | None,
        typer.Option("--output", help="Export prompt_id,n_rollouts (.parquet, or .jsonl JSON Lines)."),
    ] = None,
    price_unit: Annotated[
        str,
        typer.Option(
            "--price-unit",
            help="rollouts (every rollout costs 1) or tokens (a rollout costs its prompt's expected answer "
            "length, from the run's prompt_stats; --budget is then in tokens, by default what G rollouts "
            "per prompt cost). Docs: Tokens.",
        ),
    ] = AllocationConfig.price_unit,
    peers: Annotated[
        bool,
        typer.Option(
            "--peers",
            help="Also print the rules of sGPO, VIP, Knapsack-RL and Pilot-Commit at the same budget (priced "
            "in tokens: at the same expected tokens), each scored on this allocation's objective (docs: "
            "Allocation peers). Nothing of theirs is stored.",
        ),
    ] = False,
    data_dir: DataDir = None,
) -> None:
    """Allocate a rollout budget over prompts; writes the allocation table and an export file.

    Without --budget or any other allocation option this is the default policy, the one a profile
    run stores (GRPO signal on each prompt's Beta posterior). Otherwise the options not given take
    the defaults shown, and a missing --budget is the default policy's budget. With --price-unit
    tokens a rollout costs its prompt's expected answer length and the budget is in tokens. Each
    allocation is stored under its objective, estimator, budget, posterior and price unit: the same
    one computed again replaces itself, a different one is kept beside it.
    """
    import dataclasses

    import pyarrow.parquet as pq

    from pipeline import allocate, analyze
    from pipeline.checks import check_choice

    if output is not None:
        check_output(output)
    check_choice("--price-unit", price_unit, allocate.PRICE_UNITS)
    given = [p for p in _POLICY_OPTIONS if _given(ctx, p)]
    if objective != "signal" and "estimator" in given:
        raise ConfigError(f"--estimator is used only by --objective signal; {objective} does not depend on it")
    if price_unit == "tokens" and dataset is not None and run is None:
        raise ConfigError(
            f"--price-unit tokens needs a run's answer lengths; --dataset {dataset!r} has only prior counts: "
            "use --run, or the default --price-unit rollouts"
        )
    store = open_store(data_dir)
    run_id, counts = counts_of(store, run, dataset, answers=False)
    ids, n, c = analyze.validate_counts(counts)
    check_int("--G", G, 2, MAX_G)
    # a rollout's price in tokens, where the run's prompt_stats carry answer lengths: what a rollout
    # costs priced in tokens, and otherwise what the output says the allocation spends in tokens
    price = allocate.prompt_prices(store, run_id, ids, required=price_unit == "tokens") if run is not None else None
    policy = allocate.default_config(len(n), G)
    if price_unit == "tokens":
        policy = dataclasses.replace(policy, budget=allocate.token_budget(price, G), price_unit="tokens")
    if budget is None and not given:
        config = policy
    else:
        config = allocate.AllocationConfig(
            budget=policy.budget if budget is None else budget,
            objective=objective,
            estimator=estimator,
            n_min=n_min,
            n_max=n_max,
            posterior=posterior,
            method=method,
            price_unit=price_unit,
        )
    table, result = allocate.allocate_prompts(run_id, ids, n, c, config, price)  # the profile run's rule
    allocate.write_allocation(store, run_id, table, config)
    if output is not None:
        export = table.select(["prompt_id", "n_rollouts"])
        try:
            if output.suffix.lower() == ".parquet":
                pq.write_table(export, output)
            else:
                with open(output, "w") as fh:
                    fh.writelines(json.dumps(row) + "\n" for row in export.to_pylist())
        except OSError as exc:  # a full disk, a file turned read-only since the check
            raise ConfigError(f"--output {str(output)!r}: cannot write it ({exc})") from exc
    label = table.column("estimator")[0].as_py() if table.num_rows else None
    what = ", ".join(
        [config.objective, *([label] if label else []), "posterior" if config.posterior else "point estimates"]
    )
    sense = "higher" if result.sense == "max" else "lower"
    say(
        f"allocated {_spent(config, result)} over {len(n)} prompts of {run_id} "
        f"({'default policy: ' if config is policy else ''}{what}, n in [{config.n_min}, {config.n_max}], "
        f"{result.method}): value {result.total:.6g} vs uniform {result.uniform_total:.6g} "
        f"({sense} is better; x{result.improvement:.4g}); {_per_unit(result)}"
        + (
            f"; budget in expected rollouts (resampling): {result.expected_rollouts:.6g} spent"
            if config.price_unit == "rollouts" and result.expected_rollouts != result.n.sum()
            else ""
        )
        + (
            f"; certified gap {result.gap:.3g} ({result.relative_gap:.2e} of the value): the optimum is "
            f"at most that much {'higher' if result.sense == 'max' else 'lower'}"
            if result.method == "lagrangian"
            else ""
        )
        + (f"; wrote {output}" if output else "")
    )
    if peers:
        import numpy as np

        # the rows are in the prompt order allocate_prompts sorted to, as result.n is
        order = table.column("prompt_id").to_pylist()
        at = {pid: i for i, pid in enumerate(ids.to_pylist())}
        take = np.array([at[pid] for pid in order], dtype=np.int64)
        n_s, c_s = np.asarray(n)[take], np.asarray(c)[take]
        price_s = None if price is None else price[take]
        unit = "expected tokens" if config.price_unit == "tokens" else "rollouts"
        emit(
            _peer_rows(n_s, c_s, config, result, price_s),
            "table",
            title=f"allocation peers at {config.budget} {unit} ({what})",
        )


def _spent(config: AllocationConfig, result) -> str:
    """The budget in both units where the prices are known: ``3200 rollouts (1.2e6 expected tokens)``."""
    if config.price_unit == "tokens":
        return f"{config.budget} tokens ({result.tokens:.6g} expected tokens in {int(result.n.sum())} rollouts)"
    tokens = f" ({result.tokens:.6g} expected tokens)" if result.tokens is not None else ""
    return f"{config.budget} rollouts{tokens}"


def _per_unit(result) -> str:
    """The value per rollout and, where the prices are known, per 1,000 expected tokens."""
    out = f"{result.total / max(result.expected_rollouts, 1e-300):.6g} per rollout"
    if result.tokens:
        out += f", {1000 * result.total / result.tokens:.6g} per 1k tokens"
    return out


def _peer_rows(n, c, config: AllocationConfig, result, price=None):
    """One row per rule, the allocation's own first: its total on the allocation's objective, the
    rollouts it spends (and their expected tokens where the prices are known), the prompts it gives
    none, and its total over the allocation's. Priced in tokens, each peer runs at the largest
    rollout budget whose allocation costs at most the same expected tokens (``peers.at_tokens``)."""
    import pyarrow as pa

    from pipeline import peers

    rows = [("this allocation", result.n), ("uniform", result.uniform_n)]
    rows += [(name, peers.peer_allocation(name, n, c, config, price=price)) for name in peers.PEERS]
    names, totals, spent, tokens, dropped, ratio = [], [], [], [], [], []
    for name, alloc_n in rows:
        total = result.total if name == "this allocation" else peers.value(n, c, alloc_n, config)
        names.append(name)
        totals.append(total)
        spent.append(int(alloc_n.sum()))
        tokens.append(None if price is None else float(alloc_n @ price))
        dropped.append(int((alloc_n == 0).sum()))
        ratio.append(total / result.total if result.total else float("nan"))
    columns = {"rule": names, "value": totals, "rollouts": spent}
    if price is not None:
        columns["tokens"] = tokens
    return pa.table({**columns, "prompts dropped": dropped, "x this": ratio})
