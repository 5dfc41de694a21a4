"""``difficulty report``: the HTML report of a run, or of several runs and their comparison."""

from __future__ import annotations

import hashlib
import os
import posixpath
from pathlib import Path
from typing import Annotated

import typer

from pipeline.cli.options import DataDir, Runs, open_store
from pipeline.cli.output import say
from pipeline.errors import ConfigError, StoreError
from pipeline.reports import ReportConfig, render_comparison, render_report
from pipeline.store import Location, Store, is_remote, resolve_data_dir

_HTML = (".html", ".htm")


def comparison_name(run_ids: list[str]) -> str:
    """The comparison report's name (no suffix): ``compare-<a>-vs-<b>``, or a digest for many runs."""
    joined = "-vs-".join(run_ids)
    if len(run_ids) <= 3 and len(joined) <= 120:
        return f"compare-{joined}"
    digest = hashlib.sha256("\n".join(run_ids).encode()).hexdigest()[:10]
    return f"compare-{len(run_ids)}-runs-{digest}"


def output_location(text: str) -> Location:
    """``--output`` as a location: an ``s3://`` URL as it is (checked), anything else a local path,
    made absolute, whatever the data directory is."""
    if is_remote(text):
        return resolve_data_dir(text)
    return Path(text).expanduser().resolve()


def _join(folder: Location, name: str) -> Location:
    return folder / name if isinstance(folder, Path) else f"{folder}/{name}"


def _parent(loc: Location) -> Location:
    return loc.parent if isinstance(loc, Path) else posixpath.dirname(loc)


def plan_outputs(run_ids: list[str], output: str | None, store: Store) -> tuple[dict[str, Location], Location | None]:
    """Where each run's report (and the comparison, for several runs) goes.

    One run: ``--output`` is the HTML file, or a folder that gets ``<run_id>.html``.
    Several runs: ``--output`` is a folder (per-run reports and the comparison inside), or the
    comparison's HTML file (per-run reports beside it). Either a local path or an ``s3://`` URL,
    whatever the data directory is. Default: ``store.report_path`` of each
    (``<data-dir>/reports/<name>.html``).
    """
    loc = output_location(output) if output is not None else None
    as_file = loc is not None and posixpath.splitext(str(loc))[1].lower() in _HTML

    def path(name: str, folder: Location | None) -> Location:
        return _join(folder, f"{name}.html") if folder is not None else store.report_path(name)

    if len(run_ids) == 1:
        return {run_ids[0]: loc if as_file else path(run_ids[0], loc)}, None
    folder = _parent(loc) if as_file else loc
    per_run = {r: path(r, folder) for r in run_ids}
    comparison = loc if as_file else path(comparison_name(run_ids), folder)

    def same(a: Location, b: Location) -> bool:
        return os.path.realpath(a) == os.path.realpath(b) if isinstance(a, Path) else str(a) == str(b)

    clash = [r for r, p in per_run.items() if same(p, comparison)]
    if clash:
        raise ConfigError(f"--output {output!r} would overwrite the report of run {clash[0]!r}")
    return per_run, comparison


def report_cmd(
    runs: Runs = None,
    output: Annotated[
        str | None,
        typer.Option(
            "--output",
            help="HTML file, or folder for the reports (default <data-dir>/reports): a local path or an "
            "s3://bucket/key URL, whatever the data directory is. With several runs, a .html path names "
            "the comparison report.",
        ),
    ] = None,
    plotly_js: Annotated[
        str,
        typer.Option("--plotly-js", help="inline: self-contained files; shared: one plotly.min.js beside the reports."),
    ] = ReportConfig.plotly_js,
    G: Annotated[int, typer.Option("--G", help="Group size the report is read at.")] = ReportConfig.G,
    estimator: Annotated[
        str,
        typer.Option(
            "--estimator",
            help="The estimator you train with: highlighted in the charts (the others one click away in the "
            "legend) and used by the prompt tables.",
        ),
    ] = ReportConfig.estimator,
    data_dir: DataDir = None,
) -> None:
    """Write the HTML report of a run (several runs: one report each plus a comparison)."""
    config = ReportConfig(plotly_js=plotly_js, G=G, estimator=estimator)  # checked before any work
    store = open_store(data_dir)
    run_ids = list(dict.fromkeys(runs or []))
    if not run_ids:
        listed = store.list_runs()
        if listed.num_rows == 0:
            raise StoreError(f"no runs in {str(store.root)!r}; profile a dataset first (`difficulty profile`)")
        run_ids = [listed.column("run_id")[0].as_py()]
    per_run, comparison = plan_outputs(run_ids, output, store)
    for run_id, path in per_run.items():
        written = render_report(store, run_id, path, config=config)
        say(f"report of {run_id}: {written}")
    if comparison is not None:  # each run's report as a link relative to the comparison's folder
        folder = posixpath.dirname(str(comparison))
        links = {r: posixpath.relpath(str(p), folder) for r, p in per_run.items()}
        written = render_comparison(store, run_ids, comparison, links=links, config=config)
        say(f"comparison of {len(run_ids)} runs: {written}")
