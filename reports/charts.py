"""Building blocks of a report: plotly figures turned into chart divs, tables, sections, formatting.

Figures are built without plotly's default template (deep-copied per figure, the slowest part of
building one) and get the report's template once, when ``Charts.make`` turns them into a div with
a deterministic id and no plotly.js inside (``render`` adds plotly.js once per file).
"""

from __future__ import annotations

import functools
import math
import re
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
    "BAND_COLORS",
    "band_text",
    "estimator_colors",
    "estimator_trace",
    "figure",
    "floats",
    "fmt",
    "hist",
    "pass_rate_bins",
    "pct",
    "plain_math",
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


# LaTeX a math problem commonly holds, as plain text: the report reads offline, with no math
# renderer, so a problem shows as ``a/b ≤ √(x)`` rather than ``\frac{a}{b} \le \sqrt{x}``.
_SYMBOLS = {
    "le": "≤", "leq": "≤", "ge": "≥", "geq": "≥", "ne": "≠", "neq": "≠", "times": "×", "cdot": "·",
    "div": "÷", "pm": "±", "mp": "∓", "infty": "∞", "pi": "π", "theta": "θ", "alpha": "α", "beta": "β",
    "gamma": "γ", "delta": "δ", "lambda": "λ", "mu": "μ", "sigma": "σ", "phi": "φ", "omega": "ω",
    "Delta": "Δ", "circ": "°", "degree": "°", "ldots": "…", "cdots": "⋯", "dots": "…", "approx": "≈",
    "in": "∈", "cup": "∪", "cap": "∩", "to": "→", "rightarrow": "→", "angle": "∠", "triangle": "△",
    "sum": "Σ", "prod": "Π", "int": "∫", "equiv": "≡", "mid": "|", "perp": "⊥", "parallel": "∥",
    "quad": " ", "qquad": " ", "displaystyle": "", "left": "", "right": "", "{": "{", "}": "}", "%": "%",
    "$": "$", ",": " ", ";": " ", "!": "", " ": " ",
}  # fmt: skip
_GROUP = r"\{((?:[^{}]|\{[^{}]*\})*)\}"  # one {...} level deep, with one nested level inside


def plain_math(text: str) -> str:
    """Problem text with its LaTeX turned into plain Unicode text (fractions ``a/b``, roots ``√(x)``,
    powers ``x^2``, symbols), for the report's tables."""
    if "\\" not in text and "$" not in text:
        return text
    for _ in range(3):  # nested fractions and roots, innermost first
        text = re.sub(r"\\[dt]?frac\s*" + _GROUP + r"\s*" + _GROUP, r"(\1)/(\2)", text)
        text = re.sub(r"\\sqrt\s*\[([^\]]*)\]\s*" + _GROUP, r"\1√(\2)", text)
        text = re.sub(r"\\sqrt\s*" + _GROUP, r"√(\1)", text)
        text = re.sub(r"\\(?:text|mathrm|mathbf|textbf|mathit|operatorname|boxed|overline)\s*" + _GROUP, r"\1", text)
    text = re.sub(r"\(([0-9A-Za-z.]+)\)/\(([0-9A-Za-z.]+)\)", r"\1/\2", text)  # (3)/(4) -> 3/4
    text = re.sub(r"\^\{([^{}]*)\}", r"^\1", text)
    text = re.sub(r"_\{([^{}]*)\}", r"_\1", text)
    text = re.sub(r"\\([A-Za-z]+|.)", lambda m: _SYMBOLS.get(m.group(1), m.group(1)), text)
    return text.replace("$", "")


def short(text: str | None, limit: int = 160) -> str:
    """Text on one line (its LaTeX as plain text), cut to ``limit`` characters with an ellipsis."""
    if not text:
        return ""
    text = " ".join(plain_math(text).split())
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


# Twelve colours told apart at a glance (Paul Tol's "muted" set and four of his "bright"): the
# estimators are eleven by default, and plotly's ten-colour cycle gave grpo, reco_binary and rloo
# three near-identical reds.
_DISTINCT = (
    "#332288", "#117733", "#cc6677", "#88ccee", "#ddcc77", "#aa4499",
    "#44aa99", "#999933", "#882255", "#4477aa", "#ee6677", "#bbbbbb",
)  # fmt: skip
# The difficulty bands, hard to easy: warm where no signal is, cool where it is.
BAND_COLORS = {
    "hard": "#cc3311",
    "informative_hard": "#88ccee",
    "informative_mid": "#0077bb",
    "informative_easy": "#44aa99",
    "easy": "#ee7733",
}


def estimator_colors(specs: list[str]) -> dict[str, str]:
    """One distinct colour per estimator, the same in every chart of a report."""
    return {spec: _DISTINCT[i % len(_DISTINCT)] for i, spec in enumerate(specs)}


def estimator_trace(spec: str, chosen: str, colors: dict[str, str]) -> dict:
    """A line's style: the user's estimator bold and shown, the others thin and one click away in
    the legend (plotly leaves a hidden line out of the axis range, so none runs the chart off)."""
    mine = spec == chosen
    return {
        "name": f"{spec} (yours)" if mine else spec,
        "line": {"color": colors.get(spec), "width": 3.5 if mine else 1.5},
        "visible": True if mine else "legendonly",
    }


def band_text(name: str) -> str:
    """A difficulty band's name with its intervals of p (``hard: p in [0, 0.1)``)."""
    for band in analyze.DEFAULT_BANDS:
        if band.name == name:
            parts = [f"{'[' if lc else '('}{lo:g}, {hi:g}{']' if hc else ')'}" for lo, hi, lc, hc in band.intervals]
            return f"{name}: p in " + " or ".join(parts)
    return name
