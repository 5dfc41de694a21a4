"""The pass-rate distribution, against the dataset's prior rates where it has them, and the
Wilson and Jeffreys intervals of a random sample of prompts."""

from __future__ import annotations

import numpy as np
import polars as pl
from pipeline.reports.charts import Charts, Section, figure, floats, hist, pass_rate_bins, sample_rows
from pipeline.reports.load import ReportConfig, RunData

__all__ = ["pass_rates_section"]


def pass_rates_section(data: RunData, charts: Charts, cfg: ReportConfig) -> Section:
    sec = Section(
        "pass-rates",
        "Pass-rate distribution",
        "Where the prompts sit between always wrong (0) and always right (1).",
    )
    s = data.stats.filter(pl.col("n") > 0)
    if not s.height:
        sec.notes.append("No prompt has samples yet.")
        return sec
    has_prior = _histogram(sec, charts, s)
    _intervals(sec, charts, s, cfg, has_prior)
    return sec


def _histogram(sec: Section, charts: Charts, s: pl.DataFrame) -> bool:
    """The pass-rate histogram, with the dataset's prior rates overlaid; whether it has any."""
    p = floats(s, "pass_rate")
    prior = s.filter(pl.col("prior_n").is_not_null() & (pl.col("prior_n") > 0))
    has_prior = prior.height > 0
    edges, centres, width = pass_rate_bins(None if has_prior else s)
    fig = figure()
    fig.add_bar(
        x=centres,
        y=hist(p, edges),
        width=width * 0.9,
        name="this run",
        marker_color="#3366cc",
        opacity=0.75 if has_prior else 1.0,
    )
    if has_prior:
        pp = floats(prior, "prior_c") / floats(prior, "prior_n")
        fig.add_bar(
            x=centres,
            y=hist(pp, edges),
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
    return has_prior


def _intervals(sec: Section, charts: Charts, s: pl.DataFrame, cfg: ReportConfig, has_prior: bool) -> None:
    """Wilson and Jeffreys intervals of a random sample of prompts, sorted by pass rate."""
    rows = sample_rows(s.height, cfg.interval_sample, cfg.seed)
    sample = s[rows.tolist()].sort(["pass_rate", "prompt_id"])
    x = np.arange(1, sample.height + 1)
    pr, wl, wh = floats(sample, "pass_rate"), floats(sample, "wilson_lo"), floats(sample, "wilson_hi")
    jl, jh = floats(sample, "jeffreys_lo"), floats(sample, "jeffreys_hi")
    ids = sample["prompt_id"].to_list()
    fig = figure()
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
            floats(sample, "prior_c") / np.maximum(floats(sample, "prior_n"), 1),
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
