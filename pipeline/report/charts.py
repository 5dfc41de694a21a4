"""Building blocks of a report: plotly figures turned into chart divs, tables, sections, formatting.

Figures are built without plotly's default template (deep-copied per figure, the slowest part of
building one) and get the report's template once, when ``Charts.make`` turns them into a div with
a deterministic id and no plotly.js inside (``render`` adds plotly.js once per file).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
import polars as pl
from markupsafe import Markup

from pipeline import analyze

__all__ = [
    "Chart",
    "Charts",
    "Section",
    "TableView",
    "band_text",
    "figure",
    "floats",
    "fmt",
    "hist",
    "pass_rate_bins",
    "pct",
    "sample_rows",
    "short",
]

_TEMPLATE = "plotly_white"
_CONFIG = {"displaylogo": False, "responsive": True}


@dataclass
class Chart:
    """One rendered chart: its div and script, and the caption saying how to read it."""

    html: Markup
    caption: str
    div_id: str


@dataclass
class TableView:
    """A small HTML table (cells are formatted strings)."""

    title: str
    columns: list[str]
    rows: list[list[str]]
    note: str = ""


@dataclass
class Section:
    """One numbered section of a report."""

    id: str
    title: str
    intro: str = ""
    charts: list[Chart] = field(default_factory=list)
    tables: list[TableView] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    items: list[tuple[str, str]] = field(default_factory=list)  # key-value card


class Charts:
    """Turns figures into chart divs with deterministic ids (no plotly.js inside)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.count = 0

    def make(self, fig: go.Figure, title: str, x: str, y: str, caption: str, height: int = 420) -> Chart:
        if not (title and x and y and caption):
            raise ValueError("every chart needs a title, axis labels and a caption")
        rows = _legend_rows(fig)
        top = 56 + 22 * rows
        fig.update_layout(
            title={
                "text": title,
                "x": 0.01,
                "xanchor": "left",
                "y": 0.99,
                "yanchor": "top",
                "yref": "container",
            },
            height=height + 22 * rows,
            margin={"l": 64, "r": 24, "t": top, "b": 56},
            # legend in the top margin, between the title and the plot area: never over either
            legend={"orientation": "h", "yanchor": "bottom", "y": 1.01, "x": 0, "xanchor": "left"},
        )
        # the first (or only) x and y axes take the labels unless the caller set them
        if not fig.layout.xaxis.title.text:
            fig.layout.xaxis.title.text = x
        if not fig.layout.yaxis.title.text:
            fig.layout.yaxis.title.text = y
        self.count += 1
        div_id = f"{self.prefix}-chart-{self.count}"
        spec = fig.to_plotly_json()
        spec["layout"]["template"] = _template()
        # validated when built; re-validating the whole template per chart costs ~0.1 s each
        text = pio.to_html(
            spec,
            validate=False,
            full_html=False,
            include_plotlyjs=False,
            div_id=div_id,
            config=_CONFIG,
            default_height=f"{height + 22 * rows}px",
        )
        return Chart(Markup(text), caption, div_id)


def figure(*data) -> go.Figure:
    """A figure without plotly's default template (deep-copied per figure, the slowest part of
    building one); the report's template is attached once at rendering."""
    return go.Figure(data=list(data), layout={"template": {}})


@functools.cache
def _template() -> dict:
    return pio.templates[_TEMPLATE].to_plotly_json()


def _legend_rows(fig: go.Figure, width_chars: int = 150) -> int:
    """Rows a horizontal legend takes (entries packed greedily into about 1,100 px)."""
    if fig.layout.showlegend is False:
        return 0
    names = [str(t.name or "") for t in fig.data if t.showlegend is not False and t.name]
    if len(names) < 2 and fig.layout.showlegend is not True:
        return 0  # plotly shows no legend for a single trace
    rows, used = 1, 0
    for name in names:
        need = len(name) + 6
        if used and used + need > width_chars:
            rows, used = rows + 1, 0
        used += need
    return rows


# --- formatting and binning ---------------------------------------------------------------------


def floats(df: pl.DataFrame, name: str) -> np.ndarray:
    """A column as a float numpy array (nulls become NaN)."""
    return df[name].cast(pl.Float64).to_numpy()


def fmt(value, digits: int = 3) -> str:
    """A number (or date, or anything) as table text: thousands separators, trimmed zeros."""
    if value is None:
        return ""
    if isinstance(value, float):
        if math.isnan(value):
            return ""
        if value != 0 and (abs(value) >= 1e6 or abs(value) < 10**-digits):
            return f"{value:.{digits}g}"
        text = f"{value:,.{digits}f}"
        return text.rstrip("0").rstrip(".") if digits > 0 else text
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S %Z").strip()
    return str(value)


def pct(value) -> str:
    """A share as a percentage with one decimal ("" when unknown)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return f"{100 * value:.1f}%"


def short(text: str | None, limit: int = 160) -> str:
    """Text on one line, cut to ``limit`` characters with an ellipsis."""
    if not text:
        return ""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def sample_rows(n: int, k: int, seed: int) -> np.ndarray:
    """Sorted indices of ``k`` of ``n`` rows drawn at random (all rows when ``n <= k``)."""
    if n <= k:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, size=k, replace=False))


def pass_rate_bins(df: pl.DataFrame | None) -> tuple[np.ndarray, np.ndarray, float]:
    """Edges, centres and width of pass-rate bars: one bar per k/n when every prompt has the same
    n <= 64 (``df`` given), else 20 bins of width 0.05."""
    ns = df.filter(pl.col("n") > 0)["n"].unique() if df is not None else []
    if len(ns) == 1 and int(ns[0]) <= 64:
        n0 = int(ns[0])
        centres = np.arange(n0 + 1) / n0
        edges = np.r_[centres - 0.5 / n0, 1 + 0.5 / n0]
        return edges, centres, 1.0 / n0
    edges = np.linspace(0, 1, 21)
    return edges, (edges[:-1] + edges[1:]) / 2, 0.05


def hist(p: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Share of the (non-NaN) values in each bin."""
    p = p[~np.isnan(p)]
    if not len(p):
        return np.zeros(len(edges) - 1)
    counts, _ = np.histogram(np.clip(p, edges[0], edges[-1]), bins=edges)
    return counts / len(p)


def band_text(name: str) -> str:
    """A difficulty band's name with its intervals of p (``extreme: p in [0, 0.1) or (0.9, 1]``)."""
    for band in analyze.DEFAULT_BANDS:
        if band.name == name:
            parts = [f"{'[' if lc else '('}{lo:g}, {hi:g}{']' if hc else ')'}" for lo, hi, lc, hc in band.intervals]
            return f"{name}: p in " + " or ".join(parts)
    return name
