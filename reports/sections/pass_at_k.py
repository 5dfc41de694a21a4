"""Mean pass@k against k (the unbiased estimator, ``docs/estimators.md`` §4)."""

from __future__ import annotations

from pipeline.reports.charts import Charts, Section, figure
from pipeline.reports.load import RunData, summary_rows
from pipeline.reports.sections.rounds import posterior_note

__all__ = ["pass_at_k_section"]


def pass_at_k_section(data: RunData, charts: Charts) -> Section:
    sec = Section(
        "pass-at-k",
        "Mean pass@k",
        "The chance that at least one of k answers is right, averaged over prompts "
        "(unbiased estimator, docs/estimators.md §4).",
    )
    df = summary_rows(data.summary, "pass_at_k", metric="mean_pass_at_k").sort("k")
    if not df.height:
        sec.notes.append("The summary has no pass@k rows.")
        return sec
    if note := posterior_note(data, short=True):
        sec.notes.append(note)
    fig = figure()
    fig.add_scatter(
        x=df["k"].to_numpy(),
        y=df["value"].to_numpy(),
        mode="lines+markers",
        name="mean pass@k",
        text=[f"{n} prompts" for n in df["n_prompts"].to_list()],
    )
    # ticks at the powers of two and the largest k: plotly's own log ticks label stray digits ("9")
    kmax = int(df["k"].max())
    ticks = sorted({2**i for i in range(kmax.bit_length()) if 2**i <= kmax} | {kmax})
    fig.update_xaxes(type="log", tickvals=ticks, ticktext=[str(k) for k in ticks])
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
