"""The calibration section: does the dataset's own difficulty label rank prompts as this model does?

The stored calibrations of the run (``difficulty calibrate``, summary section ``calibration``) are
shown as they are; without one, the run's ``difficulty`` label (else its prior solve rate) is
calibrated for the report in memory, nothing written (``pipeline.calibrate``: Spearman's rho with
a percentile bootstrap interval, the mean pass rate per label value).
"""

from __future__ import annotations

import math

from pipeline.reports.charts import Charts, Section, TableView, figure, fmt, pct
from pipeline.reports.load import RunData, summary_rows

from pipeline import calibrate as cal

__all__ = ["calibration_section"]

# Bootstrap resamples of a calibration computed for the report: fewer on a large run, where each
# resample is a pass over every prompt (the interval's percentiles settle well before 1,000).
_BOOTSTRAP = 1000
_BOOTSTRAP_LARGE = 200
_LARGE = 20_000


def _in_memory(data: RunData) -> tuple[cal.Calibration | None, str | None]:
    s = data.stats
    rates = [p if n else None for p, n in zip(s["pass_rate"].to_list(), s["n"].to_list(), strict=True)]
    difficulty = s["difficulty"].to_list() if "difficulty" in s.columns else []
    if any(v is not None for v in difficulty):
        label, source, values = "difficulty", "problems column", difficulty
    else:
        prior = [
            c / n if n and c is not None else None
            for n, c in zip(s["prior_n"].to_list(), s["prior_c"].to_list(), strict=True)
        ]
        if not any(v is not None for v in prior):
            return None, None
        label, source, values = cal.PRIOR_RATE, "prior_c / prior_n", prior
    config = cal.CalibrationConfig(bootstrap=_BOOTSTRAP if s.height <= _LARGE else _BOOTSTRAP_LARGE)
    result = cal.calibrate(data.run_id, label, source, values, rates, config, s["prompt_id"].to_list())
    note = (
        f"Computed for this report from the label {label} ({config.bootstrap} bootstrap resamples), not stored; "
        f"`difficulty calibrate --run {data.run_id} --label COL` stores a calibration of any numeric field."
    )
    return result, note


def _interval(c: cal.Calibration) -> str:
    if not math.isfinite(c.lo):
        return "—"
    level = f"{c.level:.0%} " if math.isfinite(c.level) else ""
    return f"{level}[{c.lo:.3f}, {c.hi:.3f}]"


def _rho_text(c: cal.Calibration) -> str:
    """Spearman's rho and its interval in words, or why there is none."""
    if not math.isfinite(c.rho):
        return (
            "Spearman rho is undefined: the pass rates (or the labels) are all equal, so there is no ranking to compare"
        )
    return f"Spearman rho = {fmt(c.rho)}" + (f", {_interval(c)}" if math.isfinite(c.lo) else "")


def calibration_section(data: RunData, charts: Charts) -> Section:
    """Spearman's rho of each calibrated label and the mean pass rate per label value."""
    sec = Section(
        "calibration",
        "Difficulty labels against pass rates",
        "Whether the dataset's own difficulty label (a MATH level, a DeepMath rating, a prior solve rate) "
        "ranks the prompts as this model's pass rates do.",
    )
    stored = summary_rows(data.summary, cal.SECTION)
    calibrations = cal.from_summary(stored.to_dicts(), data.run_id) if stored.height else []
    if not calibrations:
        computed, note = _in_memory(data)
        if computed is None:
            sec.notes.append(
                "The run's problems have no difficulty label and no prior solve rate; "
                f"`difficulty calibrate --run {data.run_id} --label COL` calibrates any numeric field of its rows."
            )
            return sec
        calibrations = [computed]
        sec.notes.append(note)
    sec.tables.append(
        TableView(
            "Rank correlation of label and pass rate",
            ["label", "Spearman rho", "interval (bootstrap)", "prompts", "without a label"],
            [
                [c.label, fmt(c.rho) if math.isfinite(c.rho) else "undefined (no ranking)", _interval(c)]
                + [fmt(c.n_prompts), fmt(c.n_unlabelled)]
                for c in calibrations
            ],
            "A negative rho: a larger label is harder (a level, a rating); positive: a larger label is easier "
            "(a solve rate). Near 0: the label says little about this model's pass rates.",
        )
    )
    for c in calibrations:
        sec.notes += c.notes
        groups = [g for g in c.groups if g["mean_pass_rate"] is not None]
        if not groups:
            sec.notes.append(f"Label {c.label}: no prompt has both a label and samples.")
            continue
        fig = figure()
        fig.add_scatter(
            x=[g["group"] for g in groups],
            y=[g["mean_pass_rate"] for g in groups],
            mode="lines+markers",
            name="mean pass rate",
            text=[f"{g['prompts']} prompts" for g in groups],
            hovertemplate="%{x}<br>mean pass rate %{y:.3f}<br>%{text}<extra></extra>",
        )
        fig.update_yaxes(range=[0, 1])
        sec.charts.append(
            charts.make(
                fig,
                f"Mean pass rate by {c.label}",
                c.label,
                "mean pass rate",
                f"Each point: the prompts with one value of {c.label} (or a quantile bin of them). "
                f"{_rho_text(c)}; over {c.n_prompts:,} prompts.",
            )
        )
        sec.tables.append(
            TableView(
                f"Pass rate by {c.label}",
                ["group", "prompts", "mean pass rate"],
                [[g["group"], fmt(g["prompts"]), pct(g["mean_pass_rate"])] for g in groups],
            )
        )
    return sec
