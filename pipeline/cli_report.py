"""``difficulty report``: write the HTML report of a run, or of several runs and their comparison."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Annotated

import typer

from pipeline import store

_HTML = (".html", ".htm")


def _fail(message: str) -> None:
    typer.secho(f"error: {message}", err=True, fg=typer.colors.RED)
    raise typer.Exit(1)


def _comparison_name(run_ids: list[str]) -> str:
    joined = "-vs-".join(run_ids)
    if len(run_ids) <= 3 and len(joined) <= 120:
        return f"compare-{joined}.html"
    digest = hashlib.sha256("\n".join(run_ids).encode()).hexdigest()[:10]
    return f"compare-{len(run_ids)}-runs-{digest}.html"


def plan_outputs(run_ids: list[str], output: Path | None, data_dir: Path) -> tuple[dict[str, Path], Path | None]:
    """Where each run's report (and the comparison, for several runs) goes.

    One run: ``--output`` is the HTML file, or a folder that gets ``<run_id>.html``.
    Several runs: ``--output`` is a folder (per-run reports and the comparison inside), or the
    comparison's HTML file (per-run reports beside it). Default folder: ``<data-dir>/reports``.
    """
    default_dir = data_dir / "reports"
    as_file = output is not None and output.suffix.lower() in _HTML
    if len(run_ids) == 1:
        if as_file:
            return {run_ids[0]: output}, None
        return {run_ids[0]: (output or default_dir) / f"{run_ids[0]}.html"}, None
    folder = output.parent if as_file else (output or default_dir)
    per_run = {r: folder / f"{r}.html" for r in run_ids}
    comparison = output if as_file else folder / _comparison_name(run_ids)
    clash = [r for r, p in per_run.items() if p.resolve() == comparison.resolve()]
    if clash:
        _fail(f"--output {str(output)!r} would overwrite the report of run {clash[0]!r}")
    return per_run, comparison


def report_cmd(
    runs: Annotated[
        list[str] | None,
        typer.Option("--run", help="Run to report (repeat for several; default: the newest run)."),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            help="HTML file, or folder for the reports (default <data-dir>/reports). With several "
            "runs, a .html path names the comparison report.",
        ),
    ] = None,
    plotly_js: Annotated[
        str,
        typer.Option(
            "--plotly-js",
            help="inline: self-contained files; shared: one plotly.min.js beside the reports.",
        ),
    ] = "inline",
    G: Annotated[int, typer.Option("--G", help="Group size the report is read at.")] = 8,
    data_dir: Annotated[
        str | None,
        typer.Option(
            "--data-dir",
            envvar=store.DATA_DIR_ENV,
            help="Data directory (default ./difficulty-data).",
        ),
    ] = None,
) -> None:
    """Write the HTML report of a run (several runs: one report each plus a comparison)."""
    from pipeline import report  # plotly and jinja load only when a report is asked for

    try:
        config = report.ReportConfig(plotly_js=plotly_js, G=G)
    except ValueError as exc:
        _fail(str(exc))
    try:
        root = store.resolve_data_dir(data_dir)
    except store.StoreError as exc:
        _fail(str(exc))
    run_ids = list(dict.fromkeys(runs or []))
    if not run_ids:
        listed = store.list_runs(root)
        if listed.num_rows == 0:
            _fail(f"no runs in {str(root)!r}; profile a dataset first (`difficulty profile`)")
        run_ids = [listed.column("run_id")[0].as_py()]
    per_run, comparison = plan_outputs(run_ids, output, root)
    try:
        for run_id, path in per_run.items():
            written = report.render_report(root, run_id, path, config=config)
            typer.echo(f"report of {run_id}: {written}")
        if comparison is not None:
            links = {r: os.path.relpath(p, comparison.parent) for r, p in per_run.items()}
            written = report.render_comparison(root, run_ids, comparison, links=links, config=config)
            typer.echo(f"comparison of {len(run_ids)} runs: {written}")
    except (store.StoreError, report.ReportError, ValueError) as exc:
        _fail(str(exc))


def register(app: typer.Typer) -> None:
    """Add the ``report`` command to the ``difficulty`` app."""
    app.command("report")(report_cmd)
