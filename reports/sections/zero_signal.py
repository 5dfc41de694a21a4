"""The zero-signal rate against G: observed, plug-in, iid, and the Jensen gap between them
(``docs/estimators.md`` §3)."""

from __future__ import annotations

import math

import polars as pl
from pipeline.reports.charts import Charts, Section, TableView, figure, fmt, pct
from pipeline.reports.load import RunData, summary_rows
from pipeline.reports.sections.rounds import posterior_note

from pipeline import identify

__all__ = ["zero_signal_section"]


def zero_signal_section(data: RunData, charts: Charts) -> Section:
    sec = Section(
        "zero-signal",
        "Zero-signal rate against G",
        "The chance that a group of G answers is unanimous (all right or all wrong) "
        "and teaches nothing (docs/estimators.md §3).",
    )
    df = summary_rows(data.summary, "zero_signal").filter(pl.col("G").is_not_null())
    if not df.height:
        sec.notes.append("The summary has no zero-signal rows.")
        return sec
    Gs = sorted(set(df["G"].to_list()))
    _chart(sec, charts, data, df, Gs)
    post = _series(df, Gs, "share_posterior")
    if note := posterior_note(data, short=True):
        sec.notes.append(note)
    elif any(v for v in post if v):
        first = next(G for G, v in zip(Gs, post, strict=True) if v)
        sec.notes.append(
            f"From G = {first} on, some prompts have fewer than G samples; their rates "
            "are Beta-posterior means, not unbiased estimates."
        )
    sec.tables.append(_rates_table(data, df, Gs))
    return sec


def _series(df: pl.DataFrame, Gs: list[int], metric: str) -> list:
    """One zero-signal metric at each G, None where the summary has no row."""
    lookup = {r["G"]: r["value"] for r in df.filter(pl.col("metric") == metric).iter_rows(named=True)}
    return [lookup.get(G) for G in Gs]


def _chart(sec: Section, charts: Charts, data: RunData, df: pl.DataFrame, Gs: list[int]) -> None:
    """Each zero-signal estimate against G, on a log axis, with the run's own G marked."""
    fig = figure()
    styles = [
        (
            "observed",
            "silent (counted; the posterior's estimate where n < G)",
            {"width": 3, "color": "#3366cc"},
        ),
        (
            "predicted_plugin",
            "predicted from per-prompt rates (plug-in, biased up)",
            {"dash": "dot", "color": "#dc3912"},
        ),
        ("iid", "iid from the mean pass rate", {"dash": "dash", "color": "#ff9900"}),
        ("observed_all_correct", "all right", {"width": 1.5, "color": "#109618"}),
        ("observed_all_wrong", "all wrong", {"width": 1.5, "color": "#990099"}),
    ]
    lo, hi = _series(df, Gs, "observed_lo"), _series(df, Gs, "observed_hi")
    if any(v is not None for v in hi):  # what the counts allow, under the line it bounds
        x = [G for G, v in zip(Gs, hi, strict=True) if v is not None]
        low = [v for v in lo if v is not None]
        high = [v for v in hi if v is not None]
        fig.add_scatter(
            x=x + x[::-1],
            y=high + low[::-1],
            fill="toself",
            fillcolor="rgba(51, 102, 204, 0.18)",
            line={"width": 0},
            name=f"what the counts allow ({identify.LEVEL:.0%})",
            hoverinfo="skip",
        )
    for metric, name, line in styles:
        fig.add_scatter(x=Gs, y=_series(df, Gs, metric), mode="lines+markers", name=name, line=line)
    fig.update_xaxes(type="log", tickvals=Gs, ticktext=[str(g) for g in Gs])
    fig.update_yaxes(tickformat=".0%", rangemode="tozero")
    if data.G in Gs:
        fig.add_vline(x=data.G, line={"dash": "dot", "color": "grey"})
    post = _series(df, Gs, "share_posterior")
    estimated = [G for G, v in zip(Gs, post, strict=True) if v]
    if estimated:  # shade where the rates are the posterior's estimates, from halfway (log) to the first
        before = [G for G in Gs if G < estimated[0]]
        x0 = math.sqrt(before[-1] * estimated[0]) if before else estimated[0]
        fig.add_vrect(
            x0=x0,
            x1=Gs[-1],
            fillcolor="grey",
            opacity=0.12,
            line_width=0,
        )  # no annotation: plotly places a shape's annotation in log units on a log axis
    sec.charts.append(
        charts.make(
            fig,
            "Share of silent groups by group size",
            "group size G (log scale)",
            "share of groups with no signal",
            "The blue line is what this dataset wastes at each G; its distance above the orange line is "
            "the Jensen gap: spread-out difficulty wastes more than the mean pass rate suggests. In the grey "
            "band some prompts have fewer than G answers: the values there are Beta-posterior estimates.",
        )
    )


def _rates_table(data: RunData, df: pl.DataFrame, Gs: list[int]) -> TableView:
    """The rates at each G, with the DAPO oversampling factor that fills a batch. Where some prompt
    has fewer than G answers the rates are the posterior's estimates: labelled so, and the Jensen
    gap (a comparison of counts) left out."""
    fill = {
        r["G"]: r["value"] for r in summary_rows(data.summary, "dapo", metric="oversampling_fill").iter_rows(named=True)
    }
    rows = []
    for G, obs, lo, hi, iid, gap, allc, allw, post in zip(
        Gs,
        _series(df, Gs, "observed"),
        _series(df, Gs, "observed_lo"),
        _series(df, Gs, "observed_hi"),
        _series(df, Gs, "iid"),
        _series(df, Gs, "jensen_gap"),
        _series(df, Gs, "observed_all_correct"),
        _series(df, Gs, "observed_all_wrong"),
        _series(df, Gs, "share_posterior"),
        strict=True,
    ):
        estimated = bool(post)
        kind = f"estimate ({pct(post)} of prompts have n < G)" if estimated else "counted"
        if estimated and lo is not None and hi is not None:
            kind += f"; the counts allow {pct(lo)} to {pct(hi)}"
        rows.append(
            [str(G), pct(obs), pct(allw), pct(allc), kind, pct(iid), "" if estimated else pct(gap), fmt(fill.get(G))]
        )
    return TableView(
        "Zero-signal rates",
        ["G", "silent", "all wrong", "all right", "source", "iid", "Jensen gap", "DAPO oversampling 1/(1-D)"],
        rows,
        "counted: from the answers (unbiased); estimate: the posterior's mean for prompts with fewer than G "
        f"answers, which leans on the prior; what the counts allow is the range of the silent share over every "
        f"population of pass rates that fits them ({identify.LEVEL:.0%} likelihood interval): an extrapolation "
        "where it is wide. The Jensen gap is shown only where every rate is counted.",
    )
