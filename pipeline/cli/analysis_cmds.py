"""The analysis stage: ``analyze`` (prompt_stats, weights, summary) and ``allocate`` (rollout budgets)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from pipeline.allocate import AllocationConfig
from pipeline.analyze import AnalyzeConfig
from pipeline.cli.analysis_options import DEFAULT_ESTIMATORS, Estimators
from pipeline.cli.options import DataDir, DatasetName, Format, RunId, ints, open_store
from pipeline.cli.output import check_format, emit_sections, say
from pipeline.errors import ConfigError, DatasetError
from pipeline.specs import split_specs

if TYPE_CHECKING:
    import pyarrow as pa

    from pipeline.store import Store

_EXPORT_SUFFIXES = (".parquet", ".jsonl", ".json")
# The options' defaults are the configs' own.
_ANALYSIS_G = ",".join(map(str, AnalyzeConfig.group_sizes))


def counts_of(store: Store, run: str | None, dataset: str | None, answers: bool = True) -> tuple[str, pa.Table]:
    """``(run_id, counts)`` of ``--run`` (its samples) or ``--dataset`` (prior counts, ``prior-<name>``)."""
    from pipeline import analyze

    if (run is None) == (dataset is None):
        raise ConfigError("give exactly one of --run RUN_ID or --dataset NAME")
    if run is not None:
        if (store.get_run(run, missing_ok=True) or {}).get("backend") == "observations":  # `current --save`: no samples
            stats = store.read_table("prompt_stats", {"run_id": run})
            return run, stats.select(["prompt_id", "n", "c"])
        return run, analyze.counts_from_samples(store, run, answers=answers)
    problems = store.read_table("problems", {"dataset": dataset})
    if problems.num_rows == 0:
        raise DatasetError(f"no problems stored for dataset {dataset!r}; run `difficulty load` first")
    return f"prior-{dataset}", analyze.counts_from_priors(problems)


def _pivot_zero_signal(summary: pa.Table) -> pa.Table:
    import pyarrow as pa

    by_g: dict[int, dict] = {}
    for r in summary.to_pylist():
        if r["section"] == "zero_signal" or (r["section"] == "dapo" and r["metric"] == "oversampling_fill"):
            by_g.setdefault(r["G"], {"G": r["G"]})[r["metric"]] = r["value"]
    keep = [
        "G",
        "observed",
        "predicted_plugin",
        "iid",
        "jensen_gap",
        "observed_all_correct",
        "observed_all_wrong",
        "oversampling_fill",
    ]
    return pa.Table.from_pylist([{k: e.get(k) for k in keep} for e in by_g.values()])


def _pivot_shares(summary: pa.Table, G: int) -> pa.Table:
    import pyarrow as pa

    by_e: dict[str, dict] = {}
    for r in summary.to_pylist():
        if r["section"] == "gradient_share" and r["G"] == G:
            entry = by_e.setdefault(r["estimator"], {"estimator": r["estimator"]})
            entry[r["metric"] if r["band"] == "all" else f"share_{r['band']}"] = r["value"]
    return pa.Table.from_pylist(list(by_e.values()))


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
    from pipeline import analyze

    fmt = check_format(fmt)
    config = analyze.AnalyzeConfig(
        group_sizes=tuple(ints(group_sizes, "--G")),
        estimators=tuple(split_specs(estimators)),
        level=level,
        reco_answers=tuple(ints(reco_answers, "--reco-answers")) if reco_answers.strip() else (),
    )
    store = open_store(data_dir)
    if dataset is None and run is not None and (store.get_run(run, missing_ok=True) or {}).get("adaptive"):
        from pipeline.run import reanalyze  # an adaptive run keeps its decisions and posterior estimates

        run_id, result = run, reanalyze(store, run, config)
    else:
        run_id, counts = counts_of(store, run, dataset)
        result = analyze.analyze(counts, run_id, config)
    analyze.write_analysis(store, run_id, result)
    say(
        f"analysed {result.prompt_stats.num_rows} prompts of {run_id}; wrote prompt_stats, weights "
        f"({result.weights.num_rows} rows) and summary under {store.root}",
        fmt,
    )
    G = 8 if 8 in config.group_sizes else config.group_sizes[0]
    emit_sections(
        [
            ("zero_signal", f"zero-signal rate by G ({run_id})", _pivot_zero_signal(result.summary)),
            ("gradient_share", f"gradient share by band at G={G}", _pivot_shares(result.summary, G)),
        ],
        fmt,
    )


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
            help="Total rollouts to hand out (default: the budget of the default allocation policy).",
            show_default=False,
        ),
    ] = None,
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
    data_dir: DataDir = None,
) -> None:
    """Allocate a rollout budget over prompts; writes the allocation table and an export file.

    Without --budget or any other allocation option this is the default policy, the one a profile
    run stores (GRPO signal on each prompt's Beta posterior). Otherwise the options not given take
    the defaults shown, and a missing --budget is the default policy's budget. Each allocation is
    stored under its objective, estimator, budget and posterior: the same one computed again
    replaces itself, a different one is kept beside it.
    """
    import pyarrow.parquet as pq

    from pipeline import allocate, analyze

    if output is not None:
        check_output(output)
    given = [p for p in _POLICY_OPTIONS if _given(ctx, p)]
    if objective != "signal" and "estimator" in given:
        raise ConfigError(f"--estimator is used only by --objective signal; {objective} does not depend on it")
    store = open_store(data_dir)
    run_id, counts = counts_of(store, run, dataset, answers=False)
    ids, n, c = analyze.validate_counts(counts)
    policy = allocate.default_config(len(n))
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
        )
    table, result = allocate.allocate_prompts(run_id, ids, n, c, config)  # the profile run's rule
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
        f"allocated {config.budget} rollouts over {len(n)} prompts of {run_id} "
        f"({'default policy: ' if config is policy else ''}{what}, n in [{config.n_min}, {config.n_max}], "
        f"{result.method}): value {result.total:.6g} vs uniform {result.uniform_total:.6g} "
        f"({sense} is better; x{result.improvement:.4g})"
        + (
            f"; budget in expected rollouts (resampling): {result.expected_rollouts:.6g} spent"
            if result.expected_rollouts != result.n.sum()
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
