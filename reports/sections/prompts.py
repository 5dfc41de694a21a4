"""Prompts worth a look, three tables that never list the same prompt: silent at G (all wrong first:
what ``export --keep informative`` drops, unless the token limit cut most of their wrong answers),
most weighted by the report's estimator, and nearly silent (mixed answers so far, but an interval
that reaches the hard or easy band: where more samples decide whether a prompt is worth keeping).
Every table shows each prompt's share of answers cut by the token limit (``truncated_share``) and
marks the prompts flagged ``truncated``: a wrong answer cut off mid-solution measures the budget."""

from __future__ import annotations

import numpy as np
import polars as pl
from pipeline.reports.charts import Section, TableView, floats, fmt, pct, short
from pipeline.reports.load import ReportConfig, RunData

from pipeline import estimators as est
from pipeline.schema import BAND_EDGES

__all__ = ["prompts_section"]


def _prompt_rows(df: pl.DataFrame, extra: list[tuple[str, str, callable]]) -> list[list[str]]:
    out = []
    for r in df.iter_rows(named=True):
        row = [
            r["prompt_id"],
            short(r.get("problem")),
            short(r.get("answer"), 40),
            f"{r['c']}/{r['n']}",
            pct(r.get("pass_rate")),
            f"{pct(r.get('wilson_lo'))}–{pct(r.get('wilson_hi'))}",
            pct(r.get("truncated_share")) + (" (truncated)" if r.get("truncated") else ""),
        ]
        row += [fn(r.get(key)) for _, key, fn in extra]
        out.append(row)
    return out


def prompts_section(data: RunData, cfg: ReportConfig) -> Section:
    G = data.G
    sec = Section(
        "prompts",
        "Prompts worth a look",
        f"Silent at G = {G} (all wrong first), most weighted by {est.get(cfg.estimator).spec}, and nearly silent; "
        "no prompt is in two tables.",
    )
    s = data.stats.filter(pl.col("n") > 0)
    if not s.height:
        sec.notes.append("No prompt has samples yet.")
        return sec
    base = ["prompt", "problem", "answer", "correct", "pass rate", "Wilson interval", "cut by the token limit"]
    silent = s.filter(pl.col("zero_signal_G") >= 0.999)
    n_c = silent.filter(pl.col("c") == pl.col("n")).height
    n_cut = silent.filter(pl.col("truncated").fill_null(False)).height
    cut = f", {n_cut:,} of them cut off by the token limit" if n_cut else ""
    sec.tables.append(
        TableView(
            f"Silent at G = {G}: {silent.height:,} prompts ({pct(silent.height / s.height)}; "
            f"{n_c:,} all correct, {silent.height - n_c:,} all wrong{cut})",
            base + [f"silent rate at G = {G}"],
            _prompt_rows(
                silent.sort(["c", "n", "prompt_id"], descending=[False, True, False]).head(cfg.top),
                [("z", "zero_signal_G", pct)],
            ),
            "Every group of these prompts is unanimous: they cost rollouts and teach nothing at this G. A prompt "
            "marked truncated had most of its wrong answers cut by the token limit: its silence is the budget's, "
            "not the problem's, so export keeps it (band truncated) unless --drop-truncated.",
        )
    )
    spec = est.get(cfg.estimator).spec
    if data.top_mass is not None and data.top_mass.height:
        top = data.top_mass.join(s, on="prompt_id", how="left").sort(["mass", "prompt_id"], descending=[True, False])
        source = "weights table"
    else:
        e = est.get(cfg.estimator)
        p = np.nan_to_num(floats(s, "pass_rate"))
        top = s.with_columns(pl.Series("weight", e.weight(p, G)), pl.Series("mass", e.mass(p, G)))
        top = top.sort(["mass", "prompt_id"], descending=[True, False]).head(cfg.top)
        source = "computed from the pass rates"
    sec.tables.append(
        TableView(
            f"Most weighted by {spec} at G = {G}",
            base + ["weight w", "update mass m"],
            _prompt_rows(top.head(cfg.top), [("w", "weight", fmt), ("m", "mass", fmt)]),
            f"Largest update mass m = w p (1 - p) ({source}): where this estimator's signal goes.",
        )
    )
    shown = set(top.head(cfg.top)["prompt_id"].to_list())
    # 0 < c < n, but the interval reaches the hard or the easy band: nearest the silent edge first
    lo, hi = BAND_EDGES
    near = (
        s.filter((pl.col("c") > 0) & (pl.col("c") < pl.col("n")) & ~pl.col("prompt_id").is_in(list(shown)))
        .filter((pl.col("wilson_lo") < lo) | (pl.col("wilson_hi") > hi))
        .with_columns(pl.min_horizontal(pl.col("pass_rate"), 1 - pl.col("pass_rate")).alias("edge"))
        .sort(["edge", "n", "prompt_id"])
    )
    sec.tables.append(
        TableView(
            f"Nearly silent: {near.height:,} prompts ({pct(near.height / s.height)}), nearest the edge first",
            base + ["distance to the silent edge"],
            _prompt_rows(near.head(cfg.top), [("edge", "edge", pct)]),
            f"Right and wrong answers so far, but the Wilson interval reaches p < {lo:g} or p > {hi:g}: rarely "
            "right or rarely wrong. More samples here decide whether export --keep informative should keep them.",
        )
    )
    return sec
