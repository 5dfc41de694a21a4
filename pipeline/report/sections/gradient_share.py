"""The share of each estimator's update mass that lands in each difficulty band."""

from __future__ import annotations

import polars as pl

from pipeline.report.charts import Charts, Section, TableView, band_text, figure, fmt, pct
from pipeline.report.load import RunData, summary_rows

__all__ = ["gradient_share_section"]


def gradient_share_section(data: RunData, charts: Charts) -> Section:
    G = data.G
    sec = Section(
        "gradient-share",
        f"Gradient share by difficulty band at G = {G}",
        "The share of each estimator's total update mass that lands in each band.",
    )
    df = summary_rows(data.summary, "gradient_share", G=G)
    shares = df.filter((pl.col("metric") == "share") & (pl.col("band") != "all"))
    if not shares.height:
        sec.notes.append("The summary has no gradient-share rows at this G.")
        return sec
    bands = list(dict.fromkeys(shares["band"].to_list()))
    ests = [e for e in data.estimators if e in set(shares["estimator"].to_list())]
    lookup = {(r["estimator"], r["band"]): r for r in shares.iter_rows(named=True)}
    mean_mass = {r["estimator"]: r["value"] for r in df.filter(pl.col("metric") == "mean_mass").iter_rows(named=True)}
    n_in = {b: lookup[(ests[0], b)]["n_prompts"] for b in bands if (ests[0], b) in lookup}
    fig = figure()
    for band in bands:
        fig.add_bar(
            x=ests,
            y=[(lookup.get((e, band)) or {}).get("value") for e in ests],
            name=band_text(band),
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
    columns = ["estimator"] + [f"{b} ({pct(n_in.get(b, 0) / total)} of prompts)" for b in bands]
    columns.append("mean update mass")
    rows = [[e] + [pct((lookup.get((e, b)) or {}).get("value")) for b in bands] + [fmt(mean_mass.get(e))] for e in ests]
    sec.tables.append(
        TableView(
            "Gradient share by band",
            columns,
            rows,
            "Bands: " + "; ".join(band_text(b) for b in bands) + ".",
        )
    )
    return sec
