"""Rollout allocation: each stored allocation of the run against the uniform one
(``docs/estimators.md`` §5)."""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
import polars as pl
from pipeline.reports.charts import Charts, Section, TableView, figure, fmt
from pipeline.reports.load import ReportConfig, RunData

from pipeline import verdict

__all__ = ["ALLOCATION_KEY", "allocation_label", "allocation_parts", "allocation_section"]

# What identifies one allocation of a run (``allocate.allocation_key``): two stored allocations
# differing in any of these are separate series, bars and table rows.
ALLOCATION_KEY = ("objective", "estimator", "budget", "posterior", "price_unit")


def allocation_label(
    objective: str, estimator: str | None, budget: int | None, posterior: bool | None, price_unit: str | None = None
) -> str:
    """``signal grpo · 720 rollouts · posterior``: an allocation named by everything that identifies it
    (a budget priced in tokens, ``allocate --price-unit tokens``, is in tokens; null is rollouts)."""
    parts = [" ".join(x for x in (objective, estimator) if x)]
    if budget is not None:
        parts.append(f"{budget:,} {price_unit or 'rollouts'}")
    if posterior is not None:
        parts.append("posterior" if posterior else "point estimates")
    return " · ".join(parts)


def allocation_parts(a: pl.DataFrame) -> list[tuple[str, pl.DataFrame]]:
    """The allocations of a run's allocation rows, in stored order: ``(label, rows)`` each."""
    parts = []
    if "price_unit" not in a.columns:  # rows stored before allocations could be priced in tokens
        a = a.with_columns(pl.lit(None, dtype=pl.String).alias("price_unit"))
    for key in a.select(ALLOCATION_KEY).unique(maintain_order=True).iter_rows(named=True):
        match = pl.all_horizontal(
            [pl.col(name).eq_missing(pl.lit(value, dtype=a.schema[name])) for name, value in key.items()]
        )
        parts.append((allocation_label(**key), a.filter(match)))
    return parts


def allocation_section(data: RunData, charts: Charts, cfg: ReportConfig) -> Section:
    sec = Section(
        "allocation",
        "Rollout allocation",
        "How many rollouts each prompt deserves under a fixed budget (docs/estimators.md §5).",
    )
    a = data.allocation
    if not a.height:
        sec.notes.append("No allocation is stored or could be computed for this run.")
        return sec
    parts = allocation_parts(a)
    _rollouts_chart(sec, charts, parts)
    _against_uniform(sec, charts, parts)
    return sec


def _rollouts_chart(sec: Section, charts: Charts, parts: list[tuple[str, pl.DataFrame]]) -> None:
    """Rollouts per prompt against pass rate, one series per allocation, and each uniform share."""
    fig = figure()
    uniform_levels: dict[float, None] = {}
    for label, part in parts:
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
        uniform = part["uniform_n"].drop_nulls()
        if uniform.len():
            uniform_levels.setdefault((int(uniform.min()) + int(uniform.max())) / 2, None)
    for level in uniform_levels:  # one line per distinct uniform share (several budgets: several)
        fig.add_scatter(
            x=[0, 1],
            y=[level] * 2,
            mode="lines",
            name="uniform" if len(uniform_levels) == 1 else f"uniform, {level:g} per prompt",
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


def _against_uniform(sec: Section, charts: Charts, parts: list[tuple[str, pl.DataFrame]]) -> None:
    """Each allocation's value against the uniform allocation of its budget: a chart and a table."""
    labels = [label for label, _ in parts]
    rows, ratios = [], []
    for label, part in parts:
        total = float(part["expected_value"].sum())
        utotal = float(part["uniform_value"].sum())
        gain = verdict.reallocation_gain(part.to_arrow())  # the verdict's rule, one place
        ratio = float("nan") if gain is None else gain
        ratios.append(ratio)
        rows.append(
            [
                label,
                str(part["method"][0] or ""),
                fmt(part["budget"][0]),
                fmt(part.height),
                fmt(total),
                fmt(utotal),
                f"{ratio:.3f}×" if not math.isnan(ratio) else "",
                _gap_cell(part),
            ]
        )
    fig = figure(
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
            "allocation",
            "value / uniform value",
            "How much more of the objective the allocation buys than spreading the same budget evenly "
            "(for the variance objective: how many times smaller the variance is).",
            height=380,
        )
    )
    if ratios and all(not r >= verdict.REALLOCATION_PAYS for r in ratios):
        sec.notes.append(
            f"Reallocation does not pay here: no allocation gets {verdict.REALLOCATION_PAYS:.2f}x the uniform "
            "allocation's value or more. Keep the same G for every prompt; filtering the silent prompts "
            "(`difficulty export --keep informative`) is what changes the signal."
        )
    sec.tables.append(
        TableView(
            "Allocations",
            ["allocation", "method", "budget", "prompts", "value", "uniform value", "gain", "certified gap"],
            rows,
        )
    )


def _gap_cell(part) -> str:
    """The certified gap of one allocation (docs/estimators.md §5): "exact", the gap relative to the
    value for the Lagrangian relaxation, or blank where it was not stored."""
    gap = part["gap"][0] if "gap" in part.columns else None
    if gap is None:
        return ""
    if part["method"][0] != "lagrangian":
        return "exact"
    total = abs(float(part["expected_value"].sum()))
    return f"{gap:.3g} ({gap / total:.1e} of the value)" if total else f"{gap:.3g}"
