"""Pass rate, silent share and update-mass share per group of the dataset's own labels."""

from __future__ import annotations

import numpy as np
import polars as pl
from pipeline.reports.charts import Charts, Section, TableView, figure, floats, fmt, pct
from pipeline.reports.load import ReportConfig, RunData

from pipeline import estimators as est

__all__ = ["BREAKDOWN_COLUMNS", "breakdown_section"]

BREAKDOWN_COLUMNS = ("source", "domain", "topic", "difficulty")


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


def breakdown_section(data: RunData, charts: Charts, cfg: ReportConfig) -> Section:
    G = data.G
    sec = Section(
        "breakdown",
        "Breakdown by source, domain, topic and difficulty",
        f"Pass rate and silent share at G = {G} per group of the dataset's own labels.",
    )
    s = data.stats.filter(pl.col("n") > 0)
    e = est.get(cfg.estimator)
    s = s.with_columns(pl.Series("mass", np.nan_to_num(e.mass(np.nan_to_num(floats(s, "pass_rate")), G))))
    total_mass = float(s["mass"].sum()) or 1.0
    shown = 0
    for col in BREAKDOWN_COLUMNS:
        present = s.filter(pl.col(col).is_not_null())
        if present.height == 0:
            continue
        if present[col].n_unique() < 2:
            sec.notes.append(f"Every prompt has the same {col} ({present[col][0]}); nothing to compare.")
            continue
        _by_label(sec, charts, present, col, total_mass, G, e.spec)
        shown += 1
    if not shown:
        sec.notes.append("The dataset has no source, domain, topic or difficulty labels to break the results down by.")
    return sec


def _by_label(
    sec: Section, charts: Charts, present: pl.DataFrame, col: str, total_mass: float, G: int, spec: str
) -> None:
    """One label's chart and table: its 30 largest groups, sorted by mean pass rate."""
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
    fig = figure()
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
        name=f"share of {spec} update mass",
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
            f"of prompts gets little of the {spec} signal, a tall red bar means its groups of "
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
                    fmt(r["prompts"]),
                    pct(r["pass_rate"]),
                    pct(r["all_wrong"]),
                    pct(r["all_correct"]),
                    pct(r["silent"]),
                    pct(r["mass_share"]),
                ]
                for grp, r in zip(groups, g.iter_rows(named=True), strict=True)
            ],
            f"{more} smaller groups not shown." if more else "",
        )
    )
