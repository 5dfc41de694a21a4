"""The share of each estimator's update mass that lands in each difficulty band."""

from __future__ import annotations

import polars as pl
from pipeline.reports.charts import BAND_COLORS, Charts, Section, TableView, band_text, figure, fmt, pct
from pipeline.reports.load import ReportConfig, RunData, summary_rows

from pipeline import estimators as est
from pipeline import identify
from pipeline.schema import BAND_EDGES

__all__ = ["gradient_share_section"]


def gradient_share_section(data: RunData, charts: Charts, cfg: ReportConfig) -> Section:
    G = data.G
    sec = Section(
        "gradient-share",
        f"Gradient share by difficulty band at G = {G}",
        "The share of each estimator's total update mass that lands in each band; the bands cover every "
        "pass rate, so each estimator's bar adds up to 100%.",
    )
    df = summary_rows(data.summary, "gradient_share", G=G)
    shares = df.filter((pl.col("metric") == "share") & (pl.col("band") != "all"))
    if not shares.height:
        sec.notes.append("The summary has no gradient-share rows at this G.")
        return sec
    bands = list(dict.fromkeys(shares["band"].to_list()))
    chosen = est.get(cfg.estimator).spec
    ests = [e for e in data.estimators if e in set(shares["estimator"].to_list())]
    ests = sorted(ests, key=lambda e: e != chosen)  # the user's estimator first
    names = [f"{e} (yours)" if e == chosen else e for e in ests]
    lookup = {(r["estimator"], r["band"]): r for r in shares.iter_rows(named=True)}
    mass_texts, ranged = _mean_mass_texts(df)
    n_in = {b: lookup[(ests[0], b)]["n_prompts"] for b in bands if (ests[0], b) in lookup}
    fig = figure()
    for band in bands:
        fig.add_bar(
            x=names,
            y=[(lookup.get((e, band)) or {}).get("value") for e in ests],
            name=band_text(band),
            marker_color=BAND_COLORS.get(band),
        )
    fig.update_layout(barmode="stack")
    fig.update_yaxes(tickformat=".0%", range=[0, 1.0001])
    sec.charts.append(
        charts.make(
            fig,
            f"Share of update mass per band (G = {G})",
            "estimator",
            "share of total update mass",
            "Each bar is one estimator's whole signal, split by band (hard at the bottom, easy at the top); "
            "compare a band's part with its share of prompts in the table below. A run where every group is "
            "silent has no signal to split: no bars.",
        )
    )
    measured = data.stats.filter(pl.col("n") > 0)
    n_max = int(measured["n"].max() or 0) if measured.height else 0
    if data.run.adaptive is None and 0 < n_max <= 10:
        # with n <= 10 answers the smallest nonzero c/n is 1/n >= 0.1: a point estimate inside the hard
        # band is 0 and its mass w p q is 0, so the band's share is 0 whatever the prompts' true rates
        sec.notes.append(
            f"With at most {n_max} answers per prompt, a pass rate below {BAND_EDGES[0]:g} or above "
            f"{BAND_EDGES[1]:g} is exactly 0 or 1 here, whose update mass is 0: the hard and easy shares are 0 by "
            "construction, not a finding. An adaptive run's shares are posterior expectations and can be above 0 "
            "on the same data."
        )
    total = measured.height or 1
    columns = ["estimator"] + [f"{b} ({pct(n_in.get(b, 0) / total)} of prompts)" for b in bands]
    columns.append("mean update mass")
    rows = [
        [name] + [pct((lookup.get((e, b)) or {}).get("value")) for b in bands] + [mass_texts.get(e, fmt(None))]
        for e, name in zip(ests, names, strict=True)
    ]
    sec.tables.append(
        TableView(
            "Gradient share by band",
            columns,
            rows,
            "Bands: "
            + "; ".join(band_text(b) for b in bands)
            + "."
            + (
                f" Where some prompt has fewer than G answers the mean update mass is a posterior estimate; the "
                f"range is every value a population of pass rates that fits the counts gives "
                f"({identify.LEVEL:.0%} likelihood interval)."
                if ranged
                else ""
            ),
        )
    )
    return sec


def _mean_mass_texts(df: pl.DataFrame) -> tuple[dict[str, str], bool]:
    """Each estimator's mean update mass as shown, with the range every population of pass rates that
    fits the counts allows where some prompt has fewer than G answers; and whether any has one."""
    mean_mass = {r["estimator"]: r["value"] for r in df.filter(pl.col("metric") == "mean_mass").iter_rows(named=True)}
    allowed = {
        (r["estimator"], r["metric"]): r["value"]
        for r in df.filter(pl.col("metric").is_in(["mean_mass_lo", "mean_mass_hi"])).iter_rows(named=True)
    }
    texts = {}
    for e, value in mean_mass.items():
        lo, hi = allowed.get((e, "mean_mass_lo")), allowed.get((e, "mean_mass_hi"))
        texts[e] = fmt(value) + (f" (counts allow {fmt(lo)} to {fmt(hi)})" if lo is not None and hi is not None else "")
    return texts, bool(allowed)
