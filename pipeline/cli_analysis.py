"""CLI commands of the analysis stage: analyze, allocate, and the planning calculators.

``register(app)`` adds ``analyze``, ``allocate``, ``weights``, ``groupsize`` and ``tries`` to the
``difficulty`` typer app.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import typer

from pipeline import allocate as alloc
from pipeline import analyze as an
from pipeline import estimators as est
from pipeline import store
from pipeline.cli_common import (
    DataDirOption,
    FormatOption,
    console,
    data_dir_or_fail,
    emit,
    fail,
    print_table,
)

log = logging.getLogger(__name__)

DEFAULT_P = "0.01,0.05,0.1,0.2,0.3,0.5,0.7,0.8,0.9,0.95,0.99"

_DATA_DIR = DataDirOption
_FORMAT = FormatOption


def _floats(text: str, what: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        fail(f"{what} must be a comma-separated list of numbers, got {text!r}")
        raise  # unreachable


def _ints(text: str, what: str) -> list[int]:
    values = _floats(text, what)
    if any(v != int(v) for v in values):
        fail(f"{what} must be whole numbers, got {text!r}")
    return [int(v) for v in values]


def split_estimators(text: str) -> list[str]:
    """Split a comma-separated estimator list whose specs may hold commas themselves.

    ``"grpo,dapo:mode=resample,T=4,softmax_grpo:tau=0.3"`` gives three specs: a token with ``=``
    and no ``:`` is one more parameter of the spec before it.
    """
    specs: list[str] = []
    for token in (t.strip() for t in text.split(",")):
        if not token:
            continue
        if "=" in token and ":" not in token and specs:
            specs[-1] += "," + token
        else:
            specs.append(token)
    return specs


def _counts(data_dir: Path, run: str | None, dataset: str | None) -> tuple[str, pa.Table]:
    """(run_id, counts) for ``--run`` or ``--dataset`` (prior counts, run_id ``prior-<name>``)."""
    if (run is None) == (dataset is None):
        fail("give exactly one of --run RUN_ID or --dataset NAME")
    try:
        if run is not None:
            return run, an.counts_from_samples(data_dir, run)
        problems = store.read_table(data_dir, "problems", {"dataset": dataset})
        if problems.num_rows == 0:
            fail(f"no problems stored for dataset {dataset!r}; run `difficulty load` first")
        return f"prior-{dataset}", an.counts_from_priors(problems)
    except (ValueError, store.StoreError) as exc:
        fail(str(exc))
        raise  # unreachable


def _pivot_zero_signal(summary: pa.Table) -> pa.Table:
    rows = [r for r in summary.to_pylist() if r["section"] in ("zero_signal", "dapo")]
    by_g: dict[int, dict] = {}
    for r in rows:
        if r["section"] == "dapo" and r["metric"] != "oversampling_fill":
            continue
        entry = by_g.setdefault(r["G"], {"G": r["G"]})
        entry[r["metric"]] = r["value"]
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
    rows = [r for r in summary.to_pylist() if r["section"] == "gradient_share" and r["G"] == G]
    by_e: dict[str, dict] = {}
    for r in rows:
        entry = by_e.setdefault(r["estimator"], {"estimator": r["estimator"]})
        entry[r["metric"] if r["band"] == "all" else f"share_{r['band']}"] = r["value"]
    return pa.Table.from_pylist(list(by_e.values()))


def analyze_cmd(
    run: str | None = typer.Option(None, "--run", help="Run id whose samples to analyse."),
    dataset: str | None = typer.Option(
        None, "--dataset", help="Dataset whose stored prior counts (prior_n, prior_c) to analyse."
    ),
    group_sizes: str = typer.Option("4,8,16,32,64", "--G", help="Group sizes, comma-separated."),
    estimators: str = typer.Option(
        ",".join(est.DEFAULT_ESTIMATORS), "--estimators", help="Estimator specs, comma-separated."
    ),
    level: float = typer.Option(0.95, "--level", help="Interval coverage."),
    data_dir: str | None = _DATA_DIR,
) -> None:
    """Compute prompt_stats, weights and summary for a run or a dataset's prior counts."""
    path = data_dir_or_fail(data_dir)
    try:
        config = an.AnalyzeConfig(
            group_sizes=tuple(_ints(group_sizes, "--G")),
            estimators=tuple(split_estimators(estimators)),
            level=level,
        )
    except ValueError as exc:
        fail(str(exc))
    run_id, counts = _counts(path, run, dataset)
    try:
        result = an.analyze(counts, run_id, config)
    except ValueError as exc:
        fail(str(exc))
    for name in ("prompt_stats", "weights", "summary"):
        store.delete_partition(path, name, {"run_id": run_id})
        store.write_table(path, name, getattr(result, name), {"run_id": run_id})
    console.print(
        f"analysed [bold]{counts.num_rows}[/] prompts of [bold]{run_id}[/]; wrote prompt_stats, "
        f"weights ({result.weights.num_rows} rows) and summary under {path}"
    )
    print_table(_pivot_zero_signal(result.summary), title=f"zero-signal rate by G ({run_id})")
    G = 8 if 8 in config.group_sizes else config.group_sizes[0]
    print_table(_pivot_shares(result.summary, G), title=f"gradient share by band at G={G}")


def allocate_cmd(
    budget: int = typer.Option(..., "--budget", help="Total rollouts to hand out."),
    objective: str = typer.Option("signal", "--objective", help="signal, knapsack or variance."),
    estimator: str = typer.Option("grpo", "--estimator", help="Estimator of the signal objective."),
    n_min: int = typer.Option(2, "--n-min", help="Fewest rollouts per prompt."),
    n_max: int = typer.Option(512, "--n-max", help="Most rollouts per prompt."),
    run: str | None = typer.Option(None, "--run", help="Run id with the measured counts."),
    dataset: str | None = typer.Option(None, "--dataset", help="Dataset with prior counts."),
    posterior: bool = typer.Option(
        False, "--posterior/--point", help="Beta posterior per prompt, or the point estimate c/n."
    ),
    method: str = typer.Option("fast", "--method", help="fast or greedy (reference)."),
    output: Path | None = typer.Option(  # noqa: B008
        None, "--output", help="Export prompt_id,n_rollouts (.parquet, or .jsonl JSON Lines)."
    ),
    data_dir: str | None = _DATA_DIR,
) -> None:
    """Allocate a rollout budget over prompts; writes the allocation table and an export file."""
    path = data_dir_or_fail(data_dir)
    if output is not None and output.suffix.lower() not in (".parquet", ".jsonl", ".json"):
        fail(f"--output {str(output)!r}: use a .parquet or .jsonl file name")
    try:
        config = alloc.AllocationConfig(
            budget=budget,
            objective=objective,
            estimator=estimator,
            n_min=n_min,
            n_max=n_max,
            posterior=posterior,
            method=method,
        )
    except ValueError as exc:
        fail(str(exc))
    run_id, counts = _counts(path, run, dataset)
    try:
        ids, n, c = an.validate_counts(counts)
        result = alloc.allocate(n, c, config)
    except ValueError as exc:
        fail(str(exc))
    label = est.get(estimator).spec if objective == "signal" else None
    N = len(n)
    table = alloc.allocation_table(run_id, ids, result, config)
    part = re.sub(r"[^A-Za-z0-9._-]", "_", f"{objective}-{label}" if label else objective)
    store.write_table(path, "allocation", table, {"run_id": run_id}, part=part)
    if output is not None:
        export = table.select(["prompt_id", "n_rollouts"])
        if output.suffix.lower() == ".parquet":
            pq.write_table(export, output)
        else:
            with open(output, "w") as fh:
                fh.writelines(json.dumps(row) + "\n" for row in export.to_pylist())
    sense = "higher" if result.sense == "max" else "lower"
    console.print(
        f"allocated {budget} rollouts over {N} prompts ({objective}"
        f"{', ' + label if label else ''}, n in [{n_min}, {n_max}], {method}): value "
        f"{result.total:.6g} vs uniform {result.uniform_total:.6g} ({sense} is better; "
        f"x{result.improvement:.4g})" + (f"; wrote {output}" if output else "")
    )


def weights_cmd(
    G: int = typer.Option(8, "--G", help="Group size."),
    p: str = typer.Option(DEFAULT_P, "--p", help="Pass rates, comma-separated."),
    estimators: str = typer.Option(
        ",".join(est.DEFAULT_ESTIMATORS), "--estimators", help="Estimator specs, comma-separated."
    ),
    fmt: str = _FORMAT,
) -> None:
    """Implied weight w(p, G) and update mass w p q for each estimator (CSV: estimator,G,p,weight,mass)."""
    ps = np.asarray(_floats(p, "--p"))
    if np.any((ps < 0) | (ps > 1)):
        fail(f"--p values must be in [0, 1], got {p!r}")
    if G < 1:
        fail(f"--G {G} must be >= 1")
    rows = []
    try:
        for spec in split_estimators(estimators):
            e = est.get(spec)
            w = e.weight(ps, G)
            m = e.mass(ps, G)
            rows += [
                {"estimator": e.spec, "G": G, "p": float(pi), "weight": float(wi), "mass": float(mi)}
                for pi, wi, mi in zip(ps, w, m, strict=False)
            ]
    except ValueError as exc:
        fail(str(exc))
    emit(pa.Table.from_pylist(rows), fmt, title=f"implied weights at G={G}")


def groupsize_cmd(
    p: str = typer.Option(DEFAULT_P, "--p", help="Pass rates in (0, 1), comma-separated."),
    fidelity: str = typer.Option("0.9,0.95,0.99", "--fidelity", help="Target GRPO fidelities."),
    fmt: str = _FORMAT,
) -> None:
    """Smallest group size G with GRPO fidelity E[sigma_k]/sqrt(pq) >= target (CSV: p,fidelity,G)."""
    rows = []
    try:
        for pi in _floats(p, "--p"):
            for f in _floats(fidelity, "--fidelity"):
                rows.append({"p": pi, "fidelity": f, "G": alloc.group_size_for_fidelity(pi, f)})
    except ValueError as exc:
        fail(str(exc))
    emit(pa.Table.from_pylist(rows), fmt, title="group size for GRPO fidelity")


def tries_cmd(
    p: str = typer.Option(DEFAULT_P, "--p", help="Pass rates in (0, 1), comma-separated."),
    delta: float = typer.Option(0.05, "--delta", help="Target probability of a silent group."),
    fmt: str = _FORMAT,
) -> None:
    """Fewest tries n >= 2 with P(silent group) = p^n + q^n <= delta (CSV: p,delta,n)."""
    ps = _floats(p, "--p")
    try:
        ns = alloc.min_tries(ps, delta)
    except ValueError as exc:
        fail(str(exc))
    rows = [{"p": pi, "delta": delta, "n": int(ni)} for pi, ni in zip(ps, ns, strict=False)]
    emit(pa.Table.from_pylist(rows), fmt, title=f"minimum tries for P(silent) <= {delta}")


def register(app: typer.Typer) -> None:
    """Add the analysis commands to the ``difficulty`` app."""
    app.command("analyze")(analyze_cmd)
    app.command("allocate")(allocate_cmd)
    app.command("weights")(weights_cmd)
    app.command("groupsize")(groupsize_cmd)
    app.command("tries")(tries_cmd)
