"""Rendering: the Jinja2 templates (``report/templates/*.j2``), plotly.js, and atomic writes.

Reports are self-contained by default: plotly.js is inlined once per file (never once per chart,
never from a CDN, which would leave the page blank offline). ``plotly_js="shared"`` writes one
``plotly.min.js`` beside the reports and references it by relative path.
"""

from __future__ import annotations

import logging
import os
import time
from datetime import datetime
from pathlib import Path

import plotly
from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup
from pipeline.reports.compare import compare_sections
from pipeline.reports.load import PLOTLY_JS_MODES, ReportConfig, load_run, run_verdict
from pipeline.reports.sections import build_sections
from plotly.offline import get_plotlyjs

from pipeline import verdict as verdicts
from pipeline.errors import ReportError
from pipeline.finish import FinishedRun
from pipeline.store import Location, Store

log = logging.getLogger(__name__)

__all__ = ["PLOTLY_JS_MODES", "PLOTLY_JS_NAME", "render_comparison", "render_report", "write_plotly_js"]

PLOTLY_JS_NAME = "plotly.min.js"


def _env() -> Environment:
    return Environment(
        loader=PackageLoader("pipeline.reports", "templates"),
        autoescape=select_autoescape(enabled_extensions=("html", "j2"), default=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )


def write_plotly_js(folder: str | os.PathLike, store: Store | None = None) -> Location:
    """Write (or keep, when already current) the shared ``plotly.min.js`` in ``folder`` (a local
    folder, or with ``store`` a folder of its data directory), atomically through the store."""
    store = store if store is not None else Store(Path(folder))
    path = store.as_location(f"{folder}/{PLOTLY_JS_NAME}")
    js = get_plotlyjs().encode()
    if store.exists(path) and store.read_bytes(path) == js:
        return path
    return store.write_bytes(path, js)


def _plotly_context(store: Store, output: Location, mode: str) -> dict:
    if mode == "inline":
        return {"plotly_inline": Markup(get_plotlyjs()), "plotly_src": None}
    write_plotly_js(os.path.dirname(str(output)) or ".", store)
    return {"plotly_inline": None, "plotly_src": PLOTLY_JS_NAME}


def _render(store: Store, template: str, output: str | os.PathLike, mode: str, **context) -> Location:
    """Render ``template`` to ``output``: a local file or an ``s3://`` URL, whichever kind the
    store's data directory is (``Store.writer_for``)."""
    store, output = store.writer_for(output)
    text = (
        _env()
        .get_template(template)
        .render(
            **context,
            **_plotly_context(store, output, mode),
            plotly_version=plotly.__version__,
            generated=datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        )
    )
    store.write_bytes(output, text.encode())  # renamed into place, or one PUT: never half a report
    return output


def render_report(
    store: Store,
    run_id: str,
    output: str | os.PathLike,
    *,
    plotly_js: str = ReportConfig.plotly_js,
    G: int = ReportConfig.G,
    config: ReportConfig | None = None,
    finished: FinishedRun | None = None,
    verdict: verdicts.Verdict | None = None,
) -> Location:
    """Write the HTML report of one run and return its path (a URL when it is on object storage).

    The run's registry row (its status on the run card) is read now, when the report is rendered.

    Args:
        store: the data directory's store.
        run_id: the run to report.
        output: the HTML file to write (its folder is created).
        plotly_js: ``inline`` (self-contained) or ``shared`` (``plotly.min.js`` beside it).
        G: group size the report is read at.
        config: full settings (overrides ``plotly_js`` and ``G`` when given).
        finished: what the run's finish computed, when the caller holds it (``load_run``).
        verdict: the run's verdict computed with it (``load_run``).

    Raises:
        StoreError: unknown run.
        ReportError: the run has no samples and no analysis tables.
    """
    cfg = config or ReportConfig(plotly_js=plotly_js, G=G)
    start = time.perf_counter()
    data = load_run(store, run_id, cfg, finished, verdict)
    sections = build_sections(data, cfg)
    path = _render(
        store,
        "report.html.j2",
        output,
        cfg.plotly_js,
        title=f"Difficulty report: {run_id}",
        subtitle=" · ".join(str(v) for v in (data.run.dataset, data.run.model, data.run.backend) if v),
        sections=sections,
        G=data.G,
        verdict=run_verdict(data),
    )
    log.info("report of %s written to %s in %.1f s", run_id, path, time.perf_counter() - start)
    return path


def render_comparison(
    store: Store,
    run_ids: list[str],
    output: str | os.PathLike,
    *,
    plotly_js: str = ReportConfig.plotly_js,
    G: int = ReportConfig.G,
    links: dict[str, str] | None = None,
    config: ReportConfig | None = None,
) -> Location:
    """Write one HTML report comparing several runs (two models, or checkpoints of one run).

    Args:
        store: the data directory's store.
        run_ids: the runs, in display order (the first is the reference of paired views).
        output: the HTML file to write.
        plotly_js: ``inline`` or ``shared``.
        G: group size the report is read at.
        links: optional run_id -> relative href of that run's own report.
        config: full settings (overrides ``plotly_js`` and ``G`` when given).

    Raises:
        ReportError: fewer than two runs, or a run listed twice.
    """
    if len(run_ids) < 2:
        raise ReportError(f"a comparison needs at least two runs, got {list(run_ids)}")
    if len(set(run_ids)) != len(run_ids):
        raise ReportError(f"run list has duplicates: {list(run_ids)}")
    cfg = config or ReportConfig(plotly_js=plotly_js, G=G)
    runs = [load_run(store, r, cfg) for r in run_ids]
    sections = compare_sections(runs, cfg)
    return _render(
        store,
        "compare.html.j2",
        output,
        cfg.plotly_js,
        title="Difficulty comparison: " + " vs ".join(run_ids),
        subtitle=" · ".join(str(d.run.model or "?") for d in runs),
        sections=sections,
        G=cfg.G,
        links=links or {},
        run_ids=list(run_ids),
    )
