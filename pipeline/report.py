"""HTML reports: plotly figures from a run's stored tables, rendered through ``reports/*.j2``.

One report per run answers where the learning signal of a dataset is for a model: the run card,
the pass-rate distribution, every estimator's implied weight over that distribution, gradient
share by difficulty band, zero-signal rates against G, rollout allocation, pass@k, breakdowns by
source / domain / topic / difficulty, answer concentration, and prompts worth a look. A
comparison report puts several runs (two models, or checkpoints of one training run) side by side.

Reports are self-contained by default: plotly.js is inlined once per file (never once per chart,
never from a CDN, which would leave the page blank offline). ``plotly_js="shared"`` writes one
``plotly.min.js`` beside the reports and references it by relative path.

A run whose analysis tables are missing is analysed in memory (``pipeline.analyze``) rather than
refused; a section whose data the run lacks (no priors, no answers, no source column) shows a
short note instead of an empty chart.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup
from plotly.subplots import make_subplots

from pipeline import allocate as alloc
from pipeline import analyze, schema, store
from pipeline.errors import ReportError
from pipeline import estimators as est

log = logging.getLogger(__name__)

__all__ = [
    "ReportConfig",
    "ReportError",
    "RunData",
    "load_run",
    "render_comparison",
    "render_report",
    "write_plotly_js",
]

PLOTLY_JS_MODES = ("inline", "shared")
PLOTLY_JS_NAME = "plotly.min.js"
BREAKDOWN_COLUMNS = ("source", "domain", "topic", "difficulty")
_TEMPLATE = "plotly_white"
_CONFIG = {"displaylogo": False, "responsive": True}




@dataclass(frozen=True)
class ReportConfig:
    """Settings of the report stage.

    Attributes:
        plotly_js: ``inline`` (self-contained file) or ``shared`` (one plotly.min.js beside it).
        G: the group size the report is read at (silent prompts, weights, allocation budget).
        estimator: estimator spec for "most weighted" prompts and the in-memory allocation.
        top: rows of each prompt table.
        max_points: most points of a per-prompt scatter (a seeded random sample beyond that).
        interval_sample: prompts shown with their intervals.
        seed: seed of the samples drawn for display.
    """

    plotly_js: str = "inline"
    G: int = 8
    estimator: str = "grpo"
    top: int = 15
    max_points: int = 3000
    interval_sample: int = 40
    seed: int = 0

    def __post_init__(self) -> None:
        if self.plotly_js not in PLOTLY_JS_MODES:
            raise ValueError(f"plotly_js={self.plotly_js!r}; allowed: {', '.join(PLOTLY_JS_MODES)}")
        if int(self.G) != self.G or self.G < 1:
            raise ValueError(f"G={self.G!r} must be an integer >= 1")
        for name in ("top", "max_points", "interval_sample"):
            value = getattr(self, name)
            if int(value) != value or value < 1:
                raise ValueError(f"{name}={value!r} must be an integer >= 1")
        est.get(self.estimator)  # unknown names fail here, listing the registry


# --- loading ------------------------------------------------------------------------------------


@dataclass
class RunData:
    """Everything a report reads about one run (analysis tables stored or computed in memory)."""

    run_id: str
    run: dict
    params: dict
    versions: dict
    stats: pl.DataFrame  # prompt_stats joined with the problems' text and metadata
    summary: pl.DataFrame
    allocation: pl.DataFrame
    grade_counts: list[dict]
    sample_info: dict
    group_sizes: list[int]
    G: int  # the group size used (the asked G, or the nearest analysed one)
    estimators: list[str]
    top_mass: pl.DataFrame | None = None  # stored weights rows with the largest mass at G
    computed: list[str] = field(default_factory=list)  # tables computed in memory
    notes: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        model = self.run.get("model") or "?"
        return f"{self.run_id} ({model})"


def _json_dict(text: str | None) -> dict:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {"raw": text}
    return value if isinstance(value, dict) else {"value": value}


def _default_allocations(run_id: str, stats: pl.DataFrame, G: int, estimator: str) -> tuple[pa.Table, str]:
    """Signal (``estimator``) and knapsack allocations of ``G`` rollouts per measured prompt."""
    measured = stats.filter(pl.col("n") > 0)
    N = measured.height
    if N == 0:
        return schema.ALLOCATION.empty_table(), "no prompt has samples"
    budget = G * N
    n_min = min(2, G)
    n_max = max(4 * G, 64)
    tables = []
    for objective in ("signal", "knapsack"):
        cfg = alloc.AllocationConfig(budget=budget, objective=objective, estimator=estimator, n_min=n_min, n_max=n_max)
        tables.append(
            alloc.allocate_prompts(
                run_id,
                measured["prompt_id"].to_list(),
                measured["n"].to_numpy(),
                measured["c"].to_numpy(),
                cfg,
            )[0]
        )
    note = (
        f"Computed for this report: {budget:,} rollouts (G = {G} per measured prompt), "
        f"between {n_min} and {n_max} per prompt, point estimates."
    )
    return pa.concat_tables(tables), note


def _grade_counts(con, run_id: str) -> tuple[list[dict], dict]:
    rows = (
        con.sql(
            "SELECT coalesce(grade_status, '(none)') AS status, count(*)::BIGINT AS n "
            "FROM samples WHERE run_id = $run_id GROUP BY 1 ORDER BY 2 DESC, 1",
            params={"run_id": run_id},
        )
        .to_arrow_table()
        .to_pylist()
    )
    info = (
        con.sql(
            "SELECT count(*)::BIGINT AS samples, avg(n_tokens)::DOUBLE AS mean_tokens, "
            "(count(*) FILTER (WHERE finish_reason = 'length'))::BIGINT AS truncated, "
            "(count(*) FILTER (WHERE extracted_answer IS NOT NULL))::BIGINT AS answered "
            "FROM samples WHERE run_id = $run_id",
            params={"run_id": run_id},
        )
        .to_arrow_table()
        .to_pylist()[0]
    )
    return rows, info


def _top_mass_stored(con, run_id: str, estimator: str, G: int, top: int) -> pl.DataFrame | None:
    table = con.sql(
        "SELECT prompt_id::VARCHAR AS prompt_id, weight, mass FROM weights "
        "WHERE run_id::VARCHAR = $run_id AND estimator::VARCHAR = $estimator AND G = $G "
        "AND mass IS NOT NULL ORDER BY mass DESC, prompt_id LIMIT $top",
        params={"run_id": run_id, "estimator": estimator, "G": G, "top": top},
    ).to_arrow_table()
    return pl.from_arrow(table) if table.num_rows else None


def load_run(data_dir: str | os.PathLike, run_id: str, config: ReportConfig | None = None) -> RunData:
    """Read one run's tables; compute the analysis tables in memory when they are not stored.

    Raises:
        store.StoreError: unknown run.
        ReportError: the run has neither analysis tables nor samples.
    """
    config = config or ReportConfig()
    data_dir = Path(data_dir)
    run = store.get_run(data_dir, run_id)
    computed: list[str] = []
    notes: list[str] = []
    con = store.connect(data_dir)
    try:
        grade_counts, sample_info = _grade_counts(con, run_id)
        stats_t = store.read_table(data_dir, "prompt_stats", {"run_id": run_id})
        summary_t = store.read_table(data_dir, "summary", {"run_id": run_id})
        memory_weights = None
        if stats_t.num_rows == 0 or summary_t.num_rows == 0:
            try:
                counts = analyze.counts_from_samples(data_dir, run_id)
            except ValueError as exc:
                raise ReportError(f"run {run_id!r} has no analysis tables and no samples to compute them from") from exc
            groups = tuple(sorted({4, 8, 16, 32, 64, int(config.G)}))
            result = analyze.analyze(counts, run_id, analyze.AnalyzeConfig(group_sizes=groups))
            stats_t, summary_t, memory_weights = result.prompt_stats, result.summary, result.weights
            computed += ["prompt_stats", "summary", "weights"]
        group_sizes = _group_sizes(stats_t)
        G = min(group_sizes, key=lambda g: (abs(g - config.G), g)) if group_sizes else config.G
        if G != config.G:
            notes.append(f"G = {config.G} was not analysed for this run; the report uses G = {G}.")
        estimators = _estimators(summary_t)
        spec = est.get(config.estimator).spec
        top_mass = None
        if memory_weights is None:
            top_mass = _top_mass_stored(con, run_id, spec, G, config.top)
        else:
            w = memory_weights.filter(
                pc.and_(
                    pc.equal(memory_weights["estimator"].cast(pa.string()), spec),
                    pc.equal(memory_weights["G"], G),
                )
            )
            if w.num_rows:
                w = w.select(["prompt_id", "weight", "mass"]).cast(
                    pa.schema(
                        [
                            ("prompt_id", pa.string()),
                            ("weight", pa.float64()),
                            ("mass", pa.float64()),
                        ]
                    )
                )
                top_mass = (
                    pl.from_arrow(w)
                    .drop_nulls("mass")
                    .sort(["mass", "prompt_id"], descending=[True, False])
                    .head(config.top)
                )
    finally:
        con.close()

    stats_df = _join_problems(data_dir, run, stats_t, G, group_sizes)
    allocation_t = store.read_table(data_dir, "allocation", {"run_id": run_id})
    if allocation_t.num_rows == 0:
        try:
            allocation_t, note = _default_allocations(run_id, stats_df, G, config.estimator)
            computed.append("allocation")
            notes.append(note)
        except ValueError as exc:  # an impossible budget or bounds: show the reason, not a crash
            log.warning("allocation for the report failed: %s", exc)
            allocation_t = schema.ALLOCATION.empty_table()
            notes.append(f"No allocation could be computed: {exc}")
    if computed:
        log.info("run %s: computed %s in memory for the report", run_id, ", ".join(computed))
    return RunData(
        run_id=run_id,
        run=run,
        params=_json_dict(run.get("params")),
        versions=_json_dict(run.get("versions")),
        stats=stats_df,
        summary=pl.from_arrow(summary_t),
        allocation=pl.from_arrow(allocation_t),
        grade_counts=grade_counts,
        sample_info=sample_info,
        group_sizes=group_sizes,
        G=G,
        estimators=estimators,
        top_mass=top_mass,
        computed=computed,
        notes=notes,
    )


def _group_sizes(stats_t: pa.Table) -> list[int]:
    col = stats_t.column("group_sizes").drop_null()
    return [int(g) for g in col[0].as_py()] if len(col) else []


def _estimators(summary_t: pa.Table) -> list[str]:
    names = summary_t.filter(pc.equal(summary_t["section"], "gradient_share")).column("estimator")
    seen: dict[str, None] = {}
    for name in names.to_pylist():
        if name is not None:
            seen.setdefault(name, None)
    return list(seen) or [est.get(s).spec for s in est.DEFAULT_ESTIMATORS]


def _join_problems(data_dir: Path, run: dict, stats_t: pa.Table, G: int, group_sizes: list[int]) -> pl.DataFrame:
    """prompt_stats with per-G columns at the chosen G and the problems' text and metadata."""
    df = pl.from_arrow(stats_t.drop_columns(["pass_at_k"]))
    j = group_sizes.index(G) if G in group_sizes else None
    for name in ("zero_signal", "silent_all_correct", "silent_all_wrong", "zero_signal_plugin"):
        expr = pl.col(name).list.get(j, null_on_oob=True) if j is not None else pl.lit(None)
        df = df.with_columns(expr.cast(pl.Float64).alias(f"{name}_G"))
    df = df.drop(
        [
            "group_sizes",
            "zero_signal",
            "silent_all_correct",
            "silent_all_wrong",
            "zero_signal_plugin",
        ]
    )
    problems = schema.PROBLEMS.empty_table()
    dataset = run.get("dataset")
    if dataset:
        try:
            problems = store.read_table(data_dir, "problems", {"dataset": dataset})
        except store.StoreError as exc:  # a dataset name unsafe as a path has no partition
            log.warning("problems of dataset %r unreadable: %s", dataset, exc)
    keep = [
        "prompt_id",
        "problem",
        "answer",
        "source",
        "domain",
        "topic",
        "difficulty",
        "prior_n",
        "prior_c",
    ]
    prob = pl.from_arrow(problems.select(keep)).unique("prompt_id", keep="first")
    return df.join(prob, on="prompt_id", how="left")


# --- figures ------------------------------------------------------------------------------------


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


class _Charts:
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


def _figure(*data) -> go.Figure:
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


def _np(df: pl.DataFrame, name: str) -> np.ndarray:
    return df[name].cast(pl.Float64).to_numpy()


def _fmt(value, digits: int = 3) -> str:
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


def _pct(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return f"{100 * value:.1f}%"


def _short(text: str | None, limit: int = 160) -> str:
    if not text:
        return ""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _sample_rows(n: int, k: int, seed: int) -> np.ndarray:
    if n <= k:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, size=k, replace=False))


def _bins(df: pl.DataFrame | None) -> tuple[np.ndarray, np.ndarray, float]:
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


def _hist(p: np.ndarray, edges: np.ndarray) -> np.ndarray:
    p = p[~np.isnan(p)]
    if not len(p):
        return np.zeros(len(edges) - 1)
    counts, _ = np.histogram(np.clip(p, edges[0], edges[-1]), bins=edges)
    return counts / len(p)


def _summary_rows(summary: pl.DataFrame, section: str, **where) -> pl.DataFrame:
    df = summary.filter(pl.col("section") == section)
    for key, value in where.items():
        df = df.filter(pl.col(key) == value)
    return df


def _metric(summary: pl.DataFrame, section: str, metric: str, **where) -> float | None:
    df = _summary_rows(summary, section, metric=metric, **where)
    return df["value"][0] if df.height else None


# --- sections -----------------------------------------------------------------------------------


def _run_card(data: RunData) -> Section:
    run, s = data.run, data.stats
    sec = Section("run", "Run card", "What was sampled, how, and what came back.")
    params = ", ".join(f"{k}={v}" for k, v in sorted(data.params.items())) or "not recorded"
    versions = ", ".join(f"{k} {v}" for k, v in sorted(data.versions.items())) or "not recorded"
    measured = s.filter(pl.col("n") > 0)
    sec.items = [
        ("Run", data.run_id),
        ("Dataset", str(run.get("dataset") or "")),
        ("Model", str(run.get("model") or "")),
        ("Backend", str(run.get("backend") or "")),
        ("Sampling", params),
        ("Seed", _fmt(run.get("seed"))),
        ("Grader", str(run.get("grader") or "")),
        ("Status", str(run.get("status") or "")),
        ("Created", _fmt(run.get("created_at"))),
        ("Updated", _fmt(run.get("updated_at"))),
        (
            "Prompts",
            f"{s.height:,} analysed, {measured.height:,} with samples"
            + (f" (registry: {run['n_prompts']:,})" if run.get("n_prompts") else ""),
        ),
        (
            "Samples",
            f"{data.sample_info.get('samples') or 0:,}"
            + (f", {measured['n'].min()}–{measured['n'].max()} per prompt" if measured.height else ""),
        ),
        ("Mean pass rate", _pct(measured["pass_rate"].mean()) if measured.height else ""),
        (
            "All correct / all wrong",
            (
                f"{_pct((measured['c'] == measured['n']).mean())} / {_pct((measured['c'] == 0).mean())}"
                if measured.height
                else ""
            ),
        ),
        ("Mean completion tokens", _fmt(data.sample_info.get("mean_tokens"), 1)),
        ("Truncated (finish = length)", _fmt(data.sample_info.get("truncated"))),
        ("Versions", versions),
    ]
    if run.get("prompt_template"):
        sec.items.append(("Prompt template", _short(run["prompt_template"], 300)))
    total = sum(r["n"] for r in data.grade_counts) or 1
    sec.tables.append(
        TableView(
            "Grade statuses",
            ["status", "samples", "share"],
            [[r["status"], _fmt(r["n"]), _pct(r["n"] / total)] for r in data.grade_counts],
            "" if data.grade_counts else "No samples are stored for this run.",
        )
    )
    if data.computed:
        sec.notes.append("Not stored for this run, computed for this report: " + ", ".join(data.computed) + ".")
    sec.notes += data.notes
    return sec


def _pass_rates(data: RunData, charts: _Charts, cfg: ReportConfig) -> Section:
    sec = Section(
        "pass-rates",
        "Pass-rate distribution",
        "Where the prompts sit between always wrong (0) and always right (1).",
    )
    s = data.stats.filter(pl.col("n") > 0)
    if not s.height:
        sec.notes.append("No prompt has samples yet.")
        return sec
    p = _np(s, "pass_rate")
    prior = s.filter(pl.col("prior_n").is_not_null() & (pl.col("prior_n") > 0))
    has_prior = prior.height > 0
    edges, centres, width = _bins(None if has_prior else s)
    fig = _figure()
    fig.add_bar(
        x=centres,
        y=_hist(p, edges),
        width=width * 0.9,
        name="this run",
        marker_color="#3366cc",
        opacity=0.75 if has_prior else 1.0,
    )
    if has_prior:
        pp = _np(prior, "prior_c") / _np(prior, "prior_n")
        fig.add_bar(
            x=centres,
            y=_hist(pp, edges),
            width=width * 0.9,
            marker_color="#ff9900",
            opacity=0.6,
            name=f"dataset's prior rate ({prior.height:,} prompts)",
        )
        fig.update_layout(barmode="overlay")
    fig.update_xaxes(range=[-0.03, 1.03])
    fig.update_yaxes(tickformat=".0%")
    caption = "Each bar is the share of prompts with that pass rate; mass at 0 and 1 is where no group can learn."
    if has_prior:
        caption += " Orange: the dataset's own earlier measurement of the same prompts."
    sec.charts.append(charts.make(fig, "Pass rate per prompt", "pass rate c / n", "share of prompts", caption))
    if not has_prior:
        sec.notes.append("The dataset carries no prior pass rates to overlay.")

    # intervals for a sample of prompts, sorted by pass rate
    rows = _sample_rows(s.height, cfg.interval_sample, cfg.seed)
    sample = s[rows.tolist()].sort(["pass_rate", "prompt_id"])
    x = np.arange(1, sample.height + 1)
    pr, wl, wh = _np(sample, "pass_rate"), _np(sample, "wilson_lo"), _np(sample, "wilson_hi")
    jl, jh = _np(sample, "jeffreys_lo"), _np(sample, "jeffreys_hi")
    ids = sample["prompt_id"].to_list()
    fig = _figure()
    fig.add_scatter(
        x=x - 0.15,
        y=pr,
        mode="markers",
        name="Wilson",
        text=ids,
        error_y={"type": "data", "array": wh - pr, "arrayminus": pr - wl},
        marker={"color": "#3366cc", "size": 6},
    )
    fig.add_scatter(
        x=x + 0.15,
        y=pr,
        mode="markers",
        name="Jeffreys",
        text=ids,
        error_y={"type": "data", "array": jh - pr, "arrayminus": pr - jl},
        marker={"color": "#109618", "size": 6},
    )
    if has_prior:
        pp = np.where(
            sample["prior_n"].fill_null(0).to_numpy() > 0,
            _np(sample, "prior_c") / np.maximum(_np(sample, "prior_n"), 1),
            np.nan,
        )
        fig.add_scatter(
            x=x,
            y=pp,
            mode="markers",
            name="prior rate",
            text=ids,
            marker={"color": "#ff9900", "symbol": "diamond", "size": 7},
        )
    level = float(s["interval_level"][0])
    fig.update_yaxes(range=[-0.05, 1.05])
    sec.charts.append(
        charts.make(
            fig,
            f"{level:.0%} intervals of {sample.height} random prompts",
            "prompt (sorted by pass rate)",
            "pass rate",
            "A long bar is a pass rate the samples pin down poorly; sample more of those prompts "
            "before trusting their weight.",
        )
    )
    return sec


def _density_trace(fig: go.Figure, data: RunData, secondary: bool = True) -> None:
    s = data.stats.filter(pl.col("n") > 0)
    if not s.height:
        return
    edges, centres, width = _bins(s)
    fig.add_bar(
        x=centres,
        y=_hist(_np(s, "pass_rate"), edges),
        width=width * 0.9,
        marker_color="rgba(120,120,120,0.25)",
        name="prompts (right axis)",
        yaxis="y2" if secondary else "y",
        hoverinfo="x+y",
    )


def _weights_section(data: RunData, charts: _Charts) -> Section:
    G = data.G
    sec = Section(
        "weights",
        f"Implied weight w(p, G) at G = {G}",
        "How strongly each estimator pushes a prompt of pass rate p (spec section 1), "
        "over where this run's prompts actually are.",
    )
    grid = np.linspace(0, 1, 201)
    for kind, title, ylab, caption in (
        (
            "weight",
            f"Implied weight w(p, {G}) by estimator",
            "w(p, G)",
            (
                "Each line is an estimator's push on a prompt of pass rate p; grey bars (right axis) are "
                "this run's prompts, so a line that is high where the bars are tall spends its signal "
                "there."
            ),
        ),
        (
            "mass",
            f"Update mass m(p, {G}) = w p (1 - p)",
            "m(p, G)",
            (
                "The size of the update a prompt of pass rate p receives: the area under a line over the "
                "grey bars is that estimator's total signal on this dataset."
            ),
        ),
    ):
        fig = _figure()
        _density_trace(fig, data)
        for spec in data.estimators:
            e = est.get(spec)
            y = e.weight(grid, G) if kind == "weight" else e.mass(grid, G)
            fig.add_scatter(x=grid, y=y, mode="lines", name=spec)
        fig.update_layout(
            yaxis2={
                "overlaying": "y",
                "side": "right",
                "title": {"text": "share of prompts"},
                "showgrid": False,
                "tickformat": ".0%",
                "rangemode": "tozero",
                "tickmode": "auto",
                "nticks": 6,
            },
            yaxis={"rangemode": "tozero"},
            legend={"font": {"size": 10}},
        )
        fig.update_xaxes(range=[0, 1])
        sec.charts.append(charts.make(fig, title, "pass rate p", ylab, caption, height=460))
    return sec


def _band_text(name: str) -> str:
    for band in analyze.DEFAULT_BANDS:
        if band.name == name:
            parts = [f"{'[' if lc else '('}{lo:g}, {hi:g}{']' if hc else ')'}" for lo, hi, lc, hc in band.intervals]
            return f"{name}: p in " + " or ".join(parts)
    return name


def _gradient_share(data: RunData, charts: _Charts) -> Section:
    G = data.G
    sec = Section(
        "gradient-share",
        f"Gradient share by difficulty band at G = {G}",
        "The share of each estimator's total update mass that lands in each band.",
    )
    df = _summary_rows(data.summary, "gradient_share", G=G)
    shares = df.filter((pl.col("metric") == "share") & (pl.col("band") != "all"))
    if not shares.height:
        sec.notes.append("The summary has no gradient-share rows at this G.")
        return sec
    bands = list(dict.fromkeys(shares["band"].to_list()))
    ests = [e for e in data.estimators if e in set(shares["estimator"].to_list())]
    lookup = {(r["estimator"], r["band"]): r for r in shares.iter_rows(named=True)}
    mean_mass = {r["estimator"]: r["value"] for r in df.filter(pl.col("metric") == "mean_mass").iter_rows(named=True)}
    n_in = {b: lookup[(ests[0], b)]["n_prompts"] for b in bands if (ests[0], b) in lookup}
    fig = _figure()
    for band in bands:
        fig.add_bar(
            x=ests,
            y=[(lookup.get((e, band)) or {}).get("value") for e in ests],
            name=_band_text(band),
        )
    fig.update_layout(barmode="group")
    fig.update_yaxes(tickformat=".0%", rangemode="tozero")
    sec.charts.append(
        charts.make(
            fig,
            f"Share of update mass per band (G = {G})",
            "estimator",
            "share of total update mass",
            "A tall bar means the estimator spends that share of its signal on the band; compare it with "
            "the band's share of prompts in the table below.",
        )
    )
    total = data.stats.filter(pl.col("n") > 0).height or 1
    columns = ["estimator"] + [f"{b} ({_pct(n_in.get(b, 0) / total)} of prompts)" for b in bands]
    columns.append("mean update mass")
    rows = [
        [e] + [_pct((lookup.get((e, b)) or {}).get("value")) for b in bands] + [_fmt(mean_mass.get(e))] for e in ests
    ]
    sec.tables.append(
        TableView(
            "Gradient share by band",
            columns,
            rows,
            "Bands: " + "; ".join(_band_text(b) for b in bands) + ".",
        )
    )
    return sec


def _zero_signal(data: RunData, charts: _Charts) -> Section:
    sec = Section(
        "zero-signal",
        "Zero-signal rate against G",
        "The chance that a group of G answers is unanimous (all right or all wrong) "
        "and teaches nothing (spec section 3).",
    )
    df = _summary_rows(data.summary, "zero_signal").filter(pl.col("G").is_not_null())
    if not df.height:
        sec.notes.append("The summary has no zero-signal rows.")
        return sec
    Gs = sorted(set(df["G"].to_list()))

    def series(metric: str) -> list:
        lookup = {r["G"]: r["value"] for r in df.filter(pl.col("metric") == metric).iter_rows(named=True)}
        return [lookup.get(G) for G in Gs]

    fig = _figure()
    styles = [
        (
            "observed",
            "observed (unbiased; posterior mean when n < G)",
            {"width": 3, "color": "#3366cc"},
        ),
        (
            "predicted_plugin",
            "predicted from per-prompt rates (plug-in, biased up)",
            {"dash": "dot", "color": "#dc3912"},
        ),
        ("iid", "iid from the mean pass rate", {"dash": "dash", "color": "#ff9900"}),
        ("observed_all_correct", "observed: all correct", {"width": 1.5, "color": "#109618"}),
        ("observed_all_wrong", "observed: all wrong", {"width": 1.5, "color": "#990099"}),
    ]
    for metric, name, line in styles:
        fig.add_scatter(x=Gs, y=series(metric), mode="lines+markers", name=name, line=line)
    fig.update_xaxes(type="log", tickvals=Gs, ticktext=[str(g) for g in Gs])
    fig.update_yaxes(tickformat=".0%", rangemode="tozero")
    if data.G in Gs:
        fig.add_vline(x=data.G, line={"dash": "dot", "color": "grey"})
    sec.charts.append(
        charts.make(
            fig,
            "Share of silent groups by group size",
            "group size G (log scale)",
            "share of groups with no signal",
            "The blue line is what this dataset wastes at each G; its distance above the orange line is "
            "the Jensen gap: spread-out difficulty wastes more than the mean pass rate suggests.",
        )
    )
    post = series("share_posterior")
    if any(v for v in post if v):
        first = next(G for G, v in zip(Gs, post, strict=True) if v)
        sec.notes.append(
            f"From G = {first} on, some prompts have fewer than G samples; their rates "
            "are Beta-posterior means, not unbiased estimates."
        )
    fill = {
        r["G"]: r["value"]
        for r in _summary_rows(data.summary, "dapo", metric="oversampling_fill").iter_rows(named=True)
    }
    rows = []
    for G, obs, iid, gap, allc, allw in zip(
        Gs,
        series("observed"),
        series("iid"),
        series("jensen_gap"),
        series("observed_all_correct"),
        series("observed_all_wrong"),
        strict=True,
    ):
        rows.append([str(G), _pct(obs), _pct(allc), _pct(allw), _pct(iid), _pct(gap), _fmt(fill.get(G))])
    sec.tables.append(
        TableView(
            "Zero-signal rates",
            [
                "G",
                "observed",
                "all correct",
                "all wrong",
                "iid",
                "Jensen gap",
                "DAPO oversampling 1/(1-D)",
            ],
            rows,
        )
    )
    return sec


def _allocation_section(data: RunData, charts: _Charts, cfg: ReportConfig) -> Section:
    sec = Section(
        "allocation",
        "Rollout allocation",
        "How many rollouts each prompt deserves under a fixed budget (spec section 5).",
    )
    a = data.allocation
    if not a.height:
        sec.notes.append("No allocation is stored or could be computed for this run.")
        return sec
    a = a.with_columns(
        pl.concat_str([pl.col("objective"), pl.col("estimator").fill_null("")], separator=" ")
        .str.strip_chars()
        .alias("label")
    )
    labels = list(dict.fromkeys(a["label"].to_list()))
    fig = _figure()
    for label in labels:
        part = a.filter(pl.col("label") == label)
        agg = part.group_by(["p", "n_rollouts"]).len().sort(["p", "n_rollouts"])
        size = 6 + 10 * np.sqrt(agg["len"].to_numpy() / max(agg["len"].max(), 1))
        fig.add_scatter(
            x=agg["p"].to_numpy(),
            y=agg["n_rollouts"].to_numpy(),
            mode="markers",
            name=label,
            marker={"size": size, "opacity": 0.7},
            text=[f"{k} prompts" for k in agg["len"].to_list()],
        )
    uniform = a["uniform_n"].drop_nulls()
    if uniform.len():
        lo, hi = int(uniform.min()), int(uniform.max())
        fig.add_scatter(
            x=[0, 1],
            y=[(lo + hi) / 2] * 2,
            mode="lines",
            name="uniform",
            line={"dash": "dash", "color": "grey"},
        )
    fig.update_xaxes(range=[-0.03, 1.03])
    fig.update_yaxes(rangemode="tozero")
    sec.charts.append(
        charts.make(
            fig,
            "Rollouts per prompt against pass rate",
            "pass rate p",
            "rollouts allocated",
            "Each dot is a group of prompts with the same pass rate and allocation (bigger = more "
            "prompts); points above the dashed line get more than the uniform share.",
        )
    )
    rows, ratios = [], []
    for label in labels:
        part = a.filter(pl.col("label") == label)
        objective = part["objective"][0]
        total = float(part["expected_value"].sum())
        utotal = float(part["uniform_value"].sum())
        if objective == "variance":  # minimised: better is smaller
            ratio = utotal / total if total else float("nan")
        else:
            ratio = total / utotal if utotal else float("nan")
        ratios.append(ratio)
        rows.append(
            [
                label,
                str(part["method"][0] or ""),
                _fmt(part["budget"][0]),
                _fmt(part.height),
                _fmt(total),
                _fmt(utotal),
                f"{ratio:.3f}×" if not math.isnan(ratio) else "",
            ]
        )
    fig = _figure(
        go.Bar(
            x=labels,
            y=ratios,
            marker_color="#3366cc",
            text=[f"{r:.2f}×" for r in ratios],
            textposition="outside",
        )
    )
    fig.add_hline(y=1, line={"dash": "dash", "color": "grey"})
    fig.update_yaxes(rangemode="tozero")
    sec.charts.append(
        charts.make(
            fig,
            "Value of the allocation relative to uniform",
            "objective",
            "value / uniform value",
            "How much more of the objective the allocation buys than spreading the same budget evenly "
            "(for the variance objective: how many times smaller the variance is).",
            height=380,
        )
    )
    sec.tables.append(
        TableView(
            "Allocations",
            ["objective", "method", "budget", "prompts", "value", "uniform value", "gain"],
            rows,
        )
    )
    return sec


def _pass_at_k(data: RunData, charts: _Charts) -> Section:
    sec = Section(
        "pass-at-k",
        "Mean pass@k",
        "The chance that at least one of k answers is right, averaged over prompts "
        "(unbiased estimator, spec section 4).",
    )
    df = _summary_rows(data.summary, "pass_at_k", metric="mean_pass_at_k").sort("k")
    if not df.height:
        sec.notes.append("The summary has no pass@k rows.")
        return sec
    fig = _figure()
    fig.add_scatter(
        x=df["k"].to_numpy(),
        y=df["value"].to_numpy(),
        mode="lines+markers",
        name="mean pass@k",
        text=[f"{n} prompts" for n in df["n_prompts"].to_list()],
    )
    fig.update_xaxes(type="log")
    fig.update_yaxes(tickformat=".0%", range=[0, 1.02])
    sec.charts.append(
        charts.make(
            fig,
            "Mean pass@k",
            "k (log scale)",
            "mean pass@k",
            "The gap between pass@1 and pass@k is what sampling more answers can find; a flat curve "
            "means extra rollouts mostly repeat the same outcome.",
        )
    )
    return sec


def _breakdown_groups(s: pl.DataFrame, col: str) -> tuple[pl.DataFrame, str]:
    if col == "difficulty":
        distinct = s["difficulty"].drop_nulls().n_unique()
        if distinct > 20:
            lo, hi = s["difficulty"].min(), s["difficulty"].max()
            step = (hi - lo) / 10 or 1.0
            key = ((pl.col("difficulty") - lo) / step).floor().clip(0, 9) * step + lo
            expr = pl.format("{}–{}", key.round(2), (key + step).round(2))
            return s.with_columns(expr.alias("group")), "difficulty (10 equal ranges)"
        return s.with_columns(pl.col("difficulty").round(3).cast(pl.String).alias("group")), "difficulty"
    return s.with_columns(pl.col(col).alias("group")), col


def _breakdown(data: RunData, charts: _Charts, cfg: ReportConfig) -> Section:
    G = data.G
    sec = Section(
        "breakdown",
        "Breakdown by source, domain, topic and difficulty",
        f"Pass rate and silent share at G = {G} per group of the dataset's own labels.",
    )
    s = data.stats.filter(pl.col("n") > 0)
    e = est.get(cfg.estimator)
    s = s.with_columns(pl.Series("mass", np.nan_to_num(e.mass(np.nan_to_num(_np(s, "pass_rate")), G))))
    total_mass = float(s["mass"].sum()) or 1.0
    shown = 0
    for col in BREAKDOWN_COLUMNS:
        present = s.filter(pl.col(col).is_not_null())
        if present.height == 0:
            continue
        if present[col].n_unique() < 2:
            sec.notes.append(f"Every prompt has the same {col} ({present[col][0]}); nothing to compare.")
            continue
        grouped, label = _breakdown_groups(present, col)
        g = grouped.group_by("group").agg(
            pl.len().alias("prompts"),
            pl.col("pass_rate").mean().alias("pass_rate"),
            pl.col("zero_signal_G").mean().alias("silent"),
            (pl.col("c") == 0).mean().alias("all_wrong"),
            (pl.col("c") == pl.col("n")).mean().alias("all_correct"),
            (pl.col("mass").sum() / total_mass).alias("mass_share"),
        )
        more = max(g.height - 30, 0)
        g = g.sort("prompts", descending=True).head(30).sort("pass_rate")
        groups = [str(v) for v in g["group"].to_list()]
        fig = _figure()
        fig.add_bar(x=groups, y=g["pass_rate"].to_numpy(), name="mean pass rate", marker_color="#3366cc")
        fig.add_bar(
            x=groups,
            y=g["silent"].to_numpy(),
            name=f"silent share at G = {G}",
            marker_color="#dc3912",
        )
        fig.add_bar(
            x=groups,
            y=g["mass_share"].to_numpy(),
            name=f"share of {e.spec} update mass",
            marker_color="#109618",
        )
        fig.update_layout(barmode="group")
        fig.update_yaxes(tickformat=".0%", rangemode="tozero")
        sec.charts.append(
            charts.make(
                fig,
                f"By {label}",
                label,
                "share",
                f"Groups sorted by mean pass rate; a group whose green bar is small next to its share "
                f"of prompts gets little of the {e.spec} signal, a tall red bar means its groups of "
                f"{G} are mostly unanimous.",
            )
        )
        sec.tables.append(
            TableView(
                f"By {label}",
                [
                    label,
                    "prompts",
                    "mean pass rate",
                    "all wrong",
                    "all correct",
                    f"silent at G = {G}",
                    "update-mass share",
                ],
                [
                    [
                        grp,
                        _fmt(r["prompts"]),
                        _pct(r["pass_rate"]),
                        _pct(r["all_wrong"]),
                        _pct(r["all_correct"]),
                        _pct(r["silent"]),
                        _pct(r["mass_share"]),
                    ]
                    for grp, r in zip(groups, g.iter_rows(named=True), strict=True)
                ],
                f"{more} smaller groups not shown." if more else "",
            )
        )
        shown += 1
    if not shown:
        sec.notes.append("The dataset has no source, domain, topic or difficulty labels to break the results down by.")
    return sec


def _answers(data: RunData, charts: _Charts, cfg: ReportConfig) -> Section:
    sec = Section(
        "answers",
        "Answer concentration (the ReCo view)",
        "How many distinct final answers a prompt gets and how dominant the most common one is (spec section 6).",
    )
    s = data.stats.filter((pl.col("n") > 0) & pl.col("n_answered").is_not_null() & (pl.col("n_answered") > 0))
    if not s.height:
        sec.notes.append("This run has no extracted answers, so answer concentration is unknown.")
        return sec
    rows = _sample_rows(s.height, cfg.max_points, cfg.seed)
    sub = s[rows.tolist()]
    p = _np(sub, "pass_rate")
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.1, figure=_figure())
    fig.add_scatter(
        x=p,
        y=_np(sub, "modal_share"),
        mode="markers",
        name="modal share",
        text=sub["prompt_id"].to_list(),
        row=1,
        col=1,
        marker={
            "color": _np(sub, "n_distinct_answers"),
            "colorscale": "Viridis",
            "size": 7,
            "opacity": 0.7,
            "showscale": True,
            "colorbar": {"title": {"text": "distinct"}, "x": 1.02},
        },
    )
    fig.add_scatter(
        x=p,
        y=_np(sub, "n_distinct_answers"),
        mode="markers",
        name="distinct answers",
        text=sub["prompt_id"].to_list(),
        row=1,
        col=2,
        marker={"color": "#dc3912", "size": 7, "opacity": 0.6},
    )
    fig.update_xaxes(title_text="pass rate", range=[-0.03, 1.03], row=1, col=1)
    fig.update_xaxes(title_text="pass rate", range=[-0.03, 1.03], row=1, col=2)
    fig.update_yaxes(title_text="modal answer's share", tickformat=".0%", row=1, col=1)
    fig.update_yaxes(title_text="distinct answers", rangemode="tozero", row=1, col=2)
    fig.update_layout(showlegend=False)
    note = f" ({sub.height:,} of {s.height:,} prompts, drawn at random)" if sub.height < s.height else ""
    sec.charts.append(
        charts.make(
            fig,
            "Answer concentration against pass rate" + note,
            "pass rate",
            "modal answer's share",
            "Left: a high dot at a low pass rate is a prompt stuck on one wrong answer; right: many "
            "distinct answers mean the model is guessing.",
            height=440,
        )
    )
    means = s.select(
        pl.col("n_distinct_answers").mean(),
        pl.col("modal_share").mean(),
        pl.col("answer_entropy").mean(),
        pl.col("modal_correct_share_grpo").mean(),
        pl.col("modal_correct_share_reco").mean(),
    ).row(0)
    sec.tables.append(
        TableView(
            "Means over prompts with answers",
            [
                "distinct answers",
                "modal share",
                "entropy (nats)",
                "modal correct share of the GRPO push",
                "same after ReCo normalisation",
            ],
            [
                [
                    _fmt(means[0], 2),
                    _pct(means[1]),
                    _fmt(means[2], 3),
                    _pct(means[3]),
                    _pct(means[4]),
                ]
            ],
            "GRPO gives every correct response the same advantage, so a correct answer produced often "
            "takes most of the push; ReCo gives every distinct correct answer an equal share.",
        )
    )
    return sec


def _prompt_rows(df: pl.DataFrame, extra: list[tuple[str, str, callable]]) -> list[list[str]]:
    out = []
    for r in df.iter_rows(named=True):
        row = [
            r["prompt_id"],
            _short(r.get("problem")),
            _short(r.get("answer"), 40),
            f"{r['c']}/{r['n']}",
            _pct(r.get("pass_rate")),
            f"{_pct(r.get('wilson_lo'))}–{_pct(r.get('wilson_hi'))}",
        ]
        row += [fn(r.get(key)) for _, key, fn in extra]
        out.append(row)
    return out


def _prompt_tables(data: RunData, cfg: ReportConfig) -> Section:
    G = data.G
    sec = Section("prompts", "Prompts worth a look", f"Silent at G = {G}, most weighted, least certain.")
    s = data.stats.filter(pl.col("n") > 0)
    if not s.height:
        sec.notes.append("No prompt has samples yet.")
        return sec
    base = ["prompt", "problem", "answer", "correct", "pass rate", "Wilson interval"]
    silent = s.filter(pl.col("zero_signal_G") >= 0.999)
    n_c = silent.filter(pl.col("c") == pl.col("n")).height
    sec.tables.append(
        TableView(
            f"Silent at G = {G}: {silent.height:,} prompts ({_pct(silent.height / s.height)}; "
            f"{n_c:,} all correct, {silent.height - n_c:,} all wrong)",
            base + [f"silent rate at G = {G}"],
            _prompt_rows(
                silent.sort(["n", "prompt_id"], descending=[True, False]).head(cfg.top),
                [("z", "zero_signal_G", _pct)],
            ),
            "Every group of these prompts is unanimous: they cost rollouts and teach nothing at this G.",
        )
    )
    spec = est.get(cfg.estimator).spec
    if data.top_mass is not None and data.top_mass.height:
        top = data.top_mass.join(s, on="prompt_id", how="left").sort(["mass", "prompt_id"], descending=[True, False])
        source = "weights table"
    else:
        e = est.get(cfg.estimator)
        p = np.nan_to_num(_np(s, "pass_rate"))
        top = s.with_columns(pl.Series("weight", e.weight(p, G)), pl.Series("mass", e.mass(p, G)))
        top = top.sort(["mass", "prompt_id"], descending=[True, False]).head(cfg.top)
        source = "computed from the pass rates"
    sec.tables.append(
        TableView(
            f"Most weighted by {spec} at G = {G}",
            base + ["weight w", "update mass m"],
            _prompt_rows(top.head(cfg.top), [("w", "weight", _fmt), ("m", "mass", _fmt)]),
            f"Largest update mass m = w p (1 - p) ({source}): where this estimator's signal goes.",
        )
    )
    uncertain = (
        s.with_columns((pl.col("wilson_hi") - pl.col("wilson_lo")).alias("width"))
        .sort(["width", "prompt_id"], descending=[True, False])
        .head(cfg.top)
    )
    sec.tables.append(
        TableView(
            "Least certain",
            base + ["interval width"],
            _prompt_rows(uncertain, [("width", "width", _pct)]),
            "Widest Wilson intervals: more samples here would change the picture most.",
        )
    )
    return sec


def build_sections(data: RunData, cfg: ReportConfig, prefix: str = "r") -> list[Section]:
    """All ten sections of a run report."""
    charts = _Charts(prefix)
    return [
        _run_card(data),
        _pass_rates(data, charts, cfg),
        _weights_section(data, charts),
        _gradient_share(data, charts),
        _zero_signal(data, charts),
        _allocation_section(data, charts, cfg),
        _pass_at_k(data, charts),
        _breakdown(data, charts, cfg),
        _answers(data, charts, cfg),
        _prompt_tables(data, cfg),
    ]


# --- comparison ---------------------------------------------------------------------------------


def _compare_sections(runs: list[RunData], cfg: ReportConfig) -> list[Section]:
    charts = _Charts("c")
    G = cfg.G
    sections = []
    card = Section("runs", "Runs", "The runs compared, in the order given.")
    rows = []
    for d in runs:
        s = d.stats.filter(pl.col("n") > 0)
        rows.append(
            [
                d.run_id,
                str(d.run.get("model") or ""),
                str(d.run.get("dataset") or ""),
                str(d.run.get("backend") or ""),
                _fmt(d.run.get("created_at")),
                _fmt(s.height),
                _fmt(d.sample_info.get("samples")),
                _pct(s["pass_rate"].mean()) if s.height else "",
                _pct(_metric(d.summary, "zero_signal", "observed", G=d.G)) + f" (G = {d.G})",
                _pct((s["c"] == s["n"]).mean()) if s.height else "",
                _pct((s["c"] == 0).mean()) if s.height else "",
            ]
        )
    card.tables.append(
        TableView(
            "Runs",
            [
                "run",
                "model",
                "dataset",
                "backend",
                "created",
                "prompts",
                "samples",
                "mean pass rate",
                "silent",
                "all correct",
                "all wrong",
            ],
            rows,
        )
    )
    for d in runs:
        card.notes += [f"{d.run_id}: {n}" for n in d.notes]
    sections.append(card)

    sec = Section("pass-rates", "Pass-rate distributions")
    fig = _figure()
    edges = np.linspace(0, 1, 21)
    centres = (edges[:-1] + edges[1:]) / 2
    for d in runs:
        s = d.stats.filter(pl.col("n") > 0)
        fig.add_scatter(
            x=centres,
            y=_hist(_np(s, "pass_rate"), edges),
            mode="lines+markers",
            name=d.label,
            line={"shape": "hvh"},
        )
    fig.update_yaxes(tickformat=".0%", rangemode="tozero")
    sec.charts.append(
        charts.make(
            fig,
            "Pass rate per prompt, by run",
            "pass rate (bins of 0.05)",
            "share of prompts",
            "Each line is one run's distribution: mass moving from 0 toward 1 is a model getting better; "
            "mass piling up at 1 is signal running out.",
        )
    )
    sections.append(sec)

    shared = _paired(runs)
    if shared is not None:
        sec = Section(
            "paired",
            "Prompt by prompt",
            f"The {shared['n']:,} prompts every run measured, compared with the first run.",
        )
        fig = _figure()
        base_label = runs[0].label
        for other, agg in shared["pairs"]:
            size = 6 + 14 * np.sqrt(agg["len"].to_numpy() / max(agg["len"].max(), 1))
            fig.add_scatter(
                x=agg["p0"].to_numpy(),
                y=agg["p1"].to_numpy(),
                mode="markers",
                name=other,
                marker={"size": size, "opacity": 0.6},
                text=[f"{k} prompts" for k in agg["len"].to_list()],
            )
        fig.add_scatter(
            x=[0, 1],
            y=[0, 1],
            mode="lines",
            name="no change",
            line={"dash": "dash", "color": "grey"},
        )
        fig.update_xaxes(range=[-0.03, 1.03])
        fig.update_yaxes(range=[-0.03, 1.03])
        sec.charts.append(
            charts.make(
                fig,
                f"Pass rate against {base_label}",
                f"pass rate in {runs[0].run_id}",
                "pass rate in the other run",
                "Dots above the diagonal are prompts the other run solves more often (bigger dot = more "
                "prompts); dots on the axes edges went silent or came alive.",
                height=480,
            )
        )
        sec.tables += shared["tables"]
        sections.append(sec)

    sec = Section("zero-signal", "Zero-signal rate against G")
    fig = _figure()
    allG: set[int] = set()
    for d in runs:
        df = _summary_rows(d.summary, "zero_signal", metric="observed").sort("G")
        allG |= set(df["G"].to_list())
        fig.add_scatter(x=df["G"].to_numpy(), y=df["value"].to_numpy(), mode="lines+markers", name=d.label)
    Gs = sorted(allG)
    fig.update_xaxes(type="log", tickvals=Gs, ticktext=[str(g) for g in Gs])
    fig.update_yaxes(tickformat=".0%", rangemode="tozero")
    sec.charts.append(
        charts.make(
            fig,
            "Observed share of silent groups by group size",
            "group size G (log scale)",
            "share of groups with no signal",
            "A higher line wastes more rollouts at every G; the run whose line falls fastest gains most "
            "from larger groups.",
        )
    )
    sections.append(sec)

    sec = Section("gradient-share", f"Gradient share by band at G = {G}")
    spec = est.get(cfg.estimator).spec
    fig = _figure()
    bands: list[str] = []
    for d in runs:
        df = _summary_rows(d.summary, "gradient_share", metric="share", estimator=spec, G=d.G)
        df = df.filter(pl.col("band") != "all")
        bands = bands or df["band"].to_list()
        lookup = {r["band"]: r["value"] for r in df.iter_rows(named=True)}
        fig.add_bar(x=[_band_text(b) for b in bands], y=[lookup.get(b) for b in bands], name=d.label)
    fig.update_layout(barmode="group")
    fig.update_yaxes(tickformat=".0%", rangemode="tozero")
    sec.charts.append(
        charts.make(
            fig,
            f"Share of {spec} update mass per band",
            "difficulty band",
            "share of update mass",
            "Where each run's signal would go under this estimator: a shift toward 'extreme' means the "
            "dataset is getting too easy or too hard for the model.",
        )
    )
    sections.append(sec)

    sec = Section("pass-at-k", "Mean pass@k")
    fig = _figure()
    for d in runs:
        df = _summary_rows(d.summary, "pass_at_k", metric="mean_pass_at_k").sort("k")
        fig.add_scatter(x=df["k"].to_numpy(), y=df["value"].to_numpy(), mode="lines+markers", name=d.label)
    fig.update_xaxes(type="log")
    fig.update_yaxes(tickformat=".0%", range=[0, 1.02])
    sec.charts.append(
        charts.make(
            fig,
            "Mean pass@k by run",
            "k (log scale)",
            "mean pass@k",
            "A run whose pass@1 rises while pass@k stays flat is sharpening what it already finds rather "
            "than solving new problems.",
        )
    )
    sections.append(sec)
    return sections


_TRANSITION_BANDS = ("all wrong", "(0, 0.4)", "[0.4, 0.6]", "(0.6, 1)", "all correct")


def _band_of(p: pl.Expr) -> pl.Expr:
    return (
        pl.when(p <= 0)
        .then(pl.lit("all wrong"))
        .when(p < 0.4)
        .then(pl.lit("(0, 0.4)"))
        .when(p <= 0.6)
        .then(pl.lit("[0.4, 0.6]"))
        .when(p < 1)
        .then(pl.lit("(0.6, 1)"))
        .otherwise(pl.lit("all correct"))
    )


def _paired(runs: list[RunData]) -> dict | None:
    base = runs[0].stats.filter(pl.col("n") > 0).select("prompt_id", pl.col("pass_rate").alias("p0"))
    common = base
    for d in runs[1:]:
        common = common.join(d.stats.filter(pl.col("n") > 0).select("prompt_id"), on="prompt_id")
    if common.height == 0:
        return None
    pairs, tables = [], []
    for d in runs[1:]:
        joined = common.join(d.stats.select("prompt_id", pl.col("pass_rate").alias("p1")), on="prompt_id")
        agg = joined.group_by(["p0", "p1"]).len().sort(["p0", "p1"])
        pairs.append((d.label, agg))
        t = joined.with_columns(_band_of(pl.col("p0")).alias("b0"), _band_of(pl.col("p1")).alias("b1"))
        counts = {(r["b0"], r["b1"]): r["len"] for r in t.group_by(["b0", "b1"]).len().iter_rows(named=True)}
        rows = [[b0] + [_fmt(counts.get((b0, b1), 0)) for b1 in _TRANSITION_BANDS] for b0 in _TRANSITION_BANDS]
        tables.append(
            TableView(
                f"Prompts moving between pass-rate bands: {runs[0].run_id} (rows) → {d.run_id} (columns)",
                [f"{runs[0].run_id} \\ {d.run_id}", *_TRANSITION_BANDS],
                rows,
            )
        )
    return {"n": common.height, "pairs": pairs, "tables": tables}


# --- rendering ----------------------------------------------------------------------------------


def _env() -> Environment:
    return Environment(
        loader=PackageLoader("pipeline", "reports"),
        autoescape=select_autoescape(enabled_extensions=("html", "j2"), default=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )


def write_plotly_js(folder: str | os.PathLike) -> Path:
    """Write (or keep, when already current) the shared ``plotly.min.js`` in ``folder``."""
    from plotly.offline import get_plotlyjs

    path = Path(folder) / PLOTLY_JS_NAME
    js = get_plotlyjs().encode()
    if path.exists() and path.stat().st_size == len(js) and path.read_bytes() == js:
        return path
    _atomic_write(path, js)
    return path


def _atomic_write(path: Path, content: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex}.tmp"
    try:
        tmp.write_bytes(content)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _plotly_context(output: Path, mode: str) -> dict:
    if mode == "inline":
        from plotly.offline import get_plotlyjs

        return {"plotly_inline": Markup(get_plotlyjs()), "plotly_src": None}
    write_plotly_js(output.parent)
    return {"plotly_inline": None, "plotly_src": PLOTLY_JS_NAME}


def _render(template: str, output: Path, mode: str, **context) -> Path:
    import plotly

    output = Path(output)
    text = (
        _env()
        .get_template(template)
        .render(
            **context,
            **_plotly_context(output, mode),
            plotly_version=plotly.__version__,
            generated=datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        )
    )
    _atomic_write(output, text.encode())
    return output


def render_report(
    data_dir: str | os.PathLike,
    run_id: str,
    output: str | os.PathLike,
    *,
    plotly_js: str = "inline",
    G: int = 8,
    config: ReportConfig | None = None,
) -> Path:
    """Write the HTML report of one run and return its path.

    Args:
        data_dir: the data directory.
        run_id: the run to report.
        output: the HTML file to write (its folder is created).
        plotly_js: ``inline`` (self-contained) or ``shared`` (``plotly.min.js`` beside it).
        G: group size the report is read at.
        config: full settings (overrides ``plotly_js`` and ``G`` when given).

    Raises:
        store.StoreError: unknown run.
        ReportError: the run has no samples and no analysis tables.
    """
    cfg = config or ReportConfig(plotly_js=plotly_js, G=G)
    start = time.perf_counter()
    data = load_run(data_dir, run_id, cfg)
    sections = build_sections(data, cfg)
    path = _render(
        "report.html.j2",
        Path(output),
        cfg.plotly_js,
        title=f"Difficulty report: {run_id}",
        subtitle=" · ".join(
            str(v) for v in (data.run.get("dataset"), data.run.get("model"), data.run.get("backend")) if v
        ),
        sections=sections,
        G=data.G,
    )
    log.info("report of %s written to %s in %.1f s", run_id, path, time.perf_counter() - start)
    return path


def render_comparison(
    data_dir: str | os.PathLike,
    run_ids: list[str],
    output: str | os.PathLike,
    *,
    plotly_js: str = "inline",
    G: int = 8,
    links: dict[str, str] | None = None,
    config: ReportConfig | None = None,
) -> Path:
    """Write one HTML report comparing several runs (two models, or checkpoints of one run).

    Args:
        data_dir: the data directory.
        run_ids: the runs, in display order (the first is the reference of paired views).
        output: the HTML file to write.
        plotly_js: ``inline`` or ``shared``.
        G: group size the report is read at.
        links: optional run_id -> relative href of that run's own report.
        config: full settings (overrides ``plotly_js`` and ``G`` when given).
    """
    if len(run_ids) < 2:
        raise ReportError(f"a comparison needs at least two runs, got {list(run_ids)}")
    if len(set(run_ids)) != len(run_ids):
        raise ReportError(f"run list has duplicates: {list(run_ids)}")
    cfg = config or ReportConfig(plotly_js=plotly_js, G=G)
    runs = [load_run(data_dir, r, cfg) for r in run_ids]
    sections = _compare_sections(runs, cfg)
    return _render(
        "compare.html.j2",
        Path(output),
        cfg.plotly_js,
        title="Difficulty comparison: " + " vs ".join(run_ids),
        subtitle=" · ".join(str(d.run.get("model") or "?") for d in runs),
        sections=sections,
        G=cfg.G,
        links=links or {},
        run_ids=list(run_ids),
    )
