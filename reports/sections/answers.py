"""Answer concentration (the ReCo view, ``docs/estimators.md`` §6): distinct answers and the
modal answer's share against pass rate."""

from __future__ import annotations

import polars as pl
from pipeline.reports.charts import Charts, Section, TableView, figure, floats, fmt, pct, sample_rows
from pipeline.reports.load import ReportConfig, RunData
from plotly.subplots import make_subplots

__all__ = ["answers_section"]


def answers_section(data: RunData, charts: Charts, cfg: ReportConfig) -> Section:
    sec = Section(
        "answers",
        "Answer concentration (the ReCo view)",
        "How many distinct final answers a prompt gets and how dominant the most common one is "
        "(docs/estimators.md §6).",
    )
    s = data.stats.filter((pl.col("n") > 0) & pl.col("n_answered").is_not_null() & (pl.col("n_answered") > 0))
    if not s.height:
        sec.notes.append("This run has no extracted answers, so answer concentration is unknown.")
        return sec
    rows = sample_rows(s.height, cfg.max_points, cfg.seed)
    sub = s[rows.tolist()]
    p = floats(sub, "pass_rate")
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.1, figure=figure())
    fig.add_scatter(
        x=p,
        y=floats(sub, "modal_share"),
        mode="markers",
        name="modal share",
        text=sub["prompt_id"].to_list(),
        row=1,
        col=1,
        marker={
            "color": floats(sub, "n_distinct_answers"),
            "colorscale": "Viridis",
            "size": 7,
            "opacity": 0.7,
            "showscale": True,
            "colorbar": {"title": {"text": "distinct"}, "x": 1.02},
        },
    )
    fig.add_scatter(
        x=p,
        y=floats(sub, "n_distinct_answers"),
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
    sec.tables.append(_means_table(s))
    return sec


def _means_table(s: pl.DataFrame) -> TableView:
    """Answer concentration averaged over the prompts with answers, GRPO's push beside ReCo's."""
    means = s.select(
        pl.col("n_distinct_answers").mean(),
        pl.col("modal_share").mean(),
        pl.col("answer_entropy").mean(),
        pl.col("modal_correct_share_grpo").mean(),
        pl.col("modal_correct_share_reco").mean(),
    ).row(0)
    return TableView(
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
                fmt(means[0], 2),
                pct(means[1]),
                fmt(means[2], 3),
                pct(means[3]),
                pct(means[4]),
            ]
        ],
        "GRPO gives every correct response the same advantage, so a correct answer produced often "
        "takes most of the push; ReCo gives every distinct correct answer an equal share.",
    )
