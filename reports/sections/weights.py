"""Every estimator's implied weight w(p, G) and update mass over where the run's prompts are
(``docs/estimators.md`` §1)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import polars as pl
from pipeline.reports.charts import (
    Charts,
    Section,
    estimator_colors,
    estimator_trace,
    figure,
    floats,
    hist,
    pass_rate_bins,
)
from pipeline.reports.load import ReportConfig, RunData

from pipeline import estimators as est

__all__ = ["weights_section"]


def _density_trace(fig: go.Figure, data: RunData, secondary: bool = True) -> None:
    s = data.stats.filter(pl.col("n") > 0)
    if not s.height:
        return
    edges, centres, width = pass_rate_bins(s)
    fig.add_bar(
        x=centres,
        y=hist(floats(s, "pass_rate"), edges),
        width=width * 0.9,
        marker_color="rgba(120,120,120,0.25)",
        name="prompts (right axis)",
        yaxis="y2" if secondary else "y",
        hoverinfo="x+y",
    )


def weights_section(data: RunData, charts: Charts, cfg: ReportConfig) -> Section:
    G = data.G
    chosen = est.get(cfg.estimator).spec
    colors = estimator_colors(data.estimators)
    sec = Section(
        "weights",
        f"Implied weight w(p, G) at G = {G}",
        "How strongly each estimator pushes a prompt of pass rate p (docs/estimators.md §1), "
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
                f"there. The bold line is {chosen} (the report's --estimator); click another name in the "
                "legend to draw it."
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
        fig = figure()
        _density_trace(fig, data)
        for spec in data.estimators:
            e = est.get(spec)
            y = e.weight(grid, G) if kind == "weight" else e.mass(grid, G)
            fig.add_scatter(x=grid, y=y, mode="lines", **estimator_trace(spec, chosen, colors))
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
