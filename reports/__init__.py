"""HTML reports: plotly figures from a run's stored tables, rendered through ``report/templates/*.j2``.

One report per run answers where the learning signal of a dataset is for a model (one module per
section in ``sections/``); a comparison report puts several runs side by side (``compare``).
Every entry point takes a ``pipeline.store.Store``.

Modules, each importing only those before it: ``load`` (``RunData``, ``ReportConfig``, reading a
run through the Store) <- ``charts`` (figures, tables, sections, formatting) <- ``sections/``
(``build_sections``, one module per section) <- ``compare`` <- ``render`` (templates, plotly.js,
atomic writes). The order is ``ROOMS`` in ``tests/layout.py``.

A run just finished hands over what its finish computed and its verdict (``pipeline.result``), so
neither is read back nor computed again. A run whose analysis tables are missing is analysed in
memory with the default settings (``finish.analysis_of_run``) and one with no stored allocation
gets the default allocation (``allocate.default_allocation``); neither is written, and the run card
says which tables were computed for the report.
"""

from pipeline.reports.charts import Chart, Section, TableView
from pipeline.reports.load import PLOTLY_JS_MODES, ReportConfig, RunData, load_run
from pipeline.reports.render import PLOTLY_JS_NAME, render_comparison, render_report, write_plotly_js
from pipeline.reports.sections import build_sections

from pipeline.errors import ReportError
from pipeline.finish import FinishedRun
from pipeline.store import Store
from pipeline.verdict import Verdict


def write_run_report(
    store: Store, run_id: str, finished: FinishedRun | None = None, verdict: Verdict | None = None
) -> str:
    """Render a finished run's report to its place in the data directory; returns where.
    ``finished`` and ``verdict``: what its finish computed and its verdict, when the caller has
    them (not read back, not computed again)."""
    G = verdict.G if verdict is not None else ReportConfig.G  # read at the verdict's G, the trainer's
    return str(render_report(store, run_id, store.report_path(run_id), G=G, finished=finished, verdict=verdict))


__all__ = [
    "PLOTLY_JS_MODES",
    "PLOTLY_JS_NAME",
    "Chart",
    "ReportConfig",
    "ReportError",
    "RunData",
    "Section",
    "TableView",
    "build_sections",
    "load_run",
    "render_comparison",
    "render_report",
    "write_run_report",
    "write_plotly_js",
]
