"""The comparison report's sections: several runs (two models, or checkpoints of one training
run) side by side, and the prompt-by-prompt pairing of each run with the first."""

from __future__ import annotations

import numpy as np
import polars as pl
from pipeline.reports.charts import Charts, Section, TableView, band_text, figure, floats, fmt, hist, pct
from pipeline.reports.load import ReportConfig, RunData, metric, summary_rows

from pipeline import estimators as est
from pipeline import schema

__all__ = ["compare_sections", "paired"]


def compare_sections(runs: list[RunData], cfg: ReportConfig) -> list[Section]:
    """The sections of a comparison report: runs, pass rates, pairing, zero signal, gradient share, pass@k."""
    charts = Charts("c")  # numbers the charts: built in page order
    sections = [_runs_card(runs), _pass_rates(runs, charts), _paired_section(runs, charts)]
    sections += [_zero_signal(runs, charts), _gradient_share(runs, charts, cfg), _pass_at_k(runs, charts)]
    return [sec for sec in sections if sec is not None]


def _runs_card(runs: list[RunData]) -> Section:
    """The runs compared, one row each, and the notes of each run's load."""
    card = Section("runs", "Runs", "The runs compared, in the order given.")
    rows = []
    for d in runs:
        s = d.stats.filter(pl.col("n") > 0)
        rows.append(
            [
                d.run_id,
                str(d.run.model or ""),
                str(d.run.dataset or ""),
                str(d.run.backend or ""),
                fmt(d.run.created_at),
                fmt(s.height),
                fmt(d.sample_info.get("samples")),
                pct(s["pass_rate"].mean()) if s.height else "",
                pct(metric(d.summary, "zero_signal", "observed", G=d.G)) + f" (G = {d.G})",
                pct((s["c"] == s["n"]).mean()) if s.height else "",
                pct((s["c"] == 0).mean()) if s.height else "",
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
    return card


def _pass_rates(runs: list[RunData], charts: Charts) -> Section:
    sec = Section("pass-rates", "Pass-rate distributions")
    fig = figure()
    edges = np.linspace(0, 1, 21)
    centres = (edges[:-1] + edges[1:]) / 2
    for d in runs:
        s = d.stats.filter(pl.col("n") > 0)
        fig.add_scatter(
            x=centres,
            y=hist(floats(s, "pass_rate"), edges),
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
    return sec


def _paired_section(runs: list[RunData], charts: Charts) -> Section | None:
    """The shared prompts of each later run against the first; None when no prompt is shared."""
    shared = paired(runs)
    if shared is None:
        return None
    sec = Section(
        "paired",
        "Prompt by prompt",
        f"The {shared['n']:,} prompts every run measured, compared with the first run.",
    )
    fig = figure()
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
    return sec


def _zero_signal(runs: list[RunData], charts: Charts) -> Section:
    sec = Section("zero-signal", "Zero-signal rate against G")
    fig = figure()
    allG: set[int] = set()
    estimated: list[str] = []
    for d in runs:
        df = summary_rows(d.summary, "zero_signal", metric="observed").sort("G")
        allG |= set(df["G"].to_list())
        post = summary_rows(d.summary, "zero_signal", metric="share_posterior").filter(pl.col("value") > 0)
        # a hollow marker where the value is the posterior's estimate (some prompt has n < G), not a count
        est_G = set(post["G"].to_list())
        if est_G:
            estimated.append(f"{d.label} from G = {min(est_G)}")
        symbols = ["circle-open" if G in est_G else "circle" for G in df["G"].to_list()]
        fig.add_scatter(
            x=df["G"].to_numpy(),
            y=df["value"].to_numpy(),
            mode="lines+markers",
            name=d.label,
            marker={"symbol": symbols, "size": 8},
        )
    if estimated:
        sec.notes.append(
            "Hollow markers are Beta-posterior estimates, not counts (some prompts have fewer than G answers): "
            + "; ".join(estimated)
            + "."
        )
    Gs = sorted(allG)
    fig.update_xaxes(type="log", tickvals=Gs, ticktext=[str(g) for g in Gs])
    fig.update_yaxes(tickformat=".0%", rangemode="tozero")
    sec.charts.append(
        charts.make(
            fig,
            "Share of silent groups by group size",
            "group size G (log scale)",
            "share of groups with no signal",
            "A higher line wastes more rollouts at every G; the run whose line falls fastest gains most "
            "from larger groups.",
        )
    )
    return sec


def _gradient_share(runs: list[RunData], charts: Charts, cfg: ReportConfig) -> Section:
    G = cfg.G
    sec = Section("gradient-share", f"Gradient share by band at G = {G}")
    spec = est.get(cfg.estimator).spec
    fig = figure()
    bands: list[str] = []
    for d in runs:
        df = summary_rows(d.summary, "gradient_share", metric="share", estimator=spec, G=d.G)
        df = df.filter(pl.col("band") != "all")
        bands = bands or df["band"].to_list()
        lookup = {r["band"]: r["value"] for r in df.iter_rows(named=True)}
        fig.add_bar(x=[band_text(b) for b in bands], y=[lookup.get(b) for b in bands], name=d.label)
    fig.update_layout(barmode="group")
    fig.update_yaxes(tickformat=".0%", rangemode="tozero")
    sec.charts.append(
        charts.make(
            fig,
            f"Share of {spec} update mass per band",
            "difficulty band",
            "share of update mass",
            "Where each run's signal would go under this estimator: a shift toward 'hard' or 'easy' means "
            "the dataset is getting too hard or too easy for the model.",
        )
    )
    return sec


def _pass_at_k(runs: list[RunData], charts: Charts) -> Section:
    sec = Section("pass-at-k", "Mean pass@k")
    fig = figure()
    for d in runs:
        df = summary_rows(d.summary, "pass_at_k", metric="mean_pass_at_k").sort("k")
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
    return sec


def transition_bands(edges: tuple[float, float]) -> tuple[str, ...]:
    """The comparison's pass-rate bands, split at the informative band's middle ``edges``."""
    lo, hi = edges
    return ("all wrong", f"(0, {lo:g})", f"[{lo:g}, {hi:g}]", f"({hi:g}, 1)", "all correct")


def _band_of(p: pl.Expr, edges: tuple[float, float]) -> pl.Expr:
    names = transition_bands(edges)
    return (
        pl.when(p <= 0)
        .then(pl.lit(names[0]))
        .when(p < edges[0])
        .then(pl.lit(names[1]))
        .when(p <= edges[1])
        .then(pl.lit(names[2]))
        .when(p < 1)
        .then(pl.lit(names[3]))
        .otherwise(pl.lit(names[4]))
    )


def paired(runs: list[RunData], edges: tuple[float, float] = schema.MID_EDGES) -> dict | None:
    """The prompts every run measured, each later run against the first.

    Returns None when no prompt is shared, else ``n`` (shared prompts), ``pairs`` (label of the
    other run, counts per (p0, p1)) and ``tables`` (transitions between the pass-rate bands split at
    ``edges``, ``transition_bands``).
    """
    bands = transition_bands(edges)
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
        t = joined.with_columns(_band_of(pl.col("p0"), edges).alias("b0"), _band_of(pl.col("p1"), edges).alias("b1"))
        counts = {(r["b0"], r["b1"]): r["len"] for r in t.group_by(["b0", "b1"]).len().iter_rows(named=True)}
        rows = [[b0] + [fmt(counts.get((b0, b1), 0)) for b1 in bands] for b0 in bands]
        tables.append(
            TableView(
                f"Prompts moving between pass-rate bands: {runs[0].run_id} (rows) → {d.run_id} (columns)",
                [f"{runs[0].run_id} \\ {d.run_id}", *bands],
                rows,
            )
        )
    return {"n": common.height, "pairs": pairs, "tables": tables}
