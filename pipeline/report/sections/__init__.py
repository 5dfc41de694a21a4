"""The sections of a run report, built from a ``RunData``.

The run card, the pass-rate distribution, every estimator's implied weight over that
distribution, gradient share by difficulty band, zero-signal rates against G, rollout allocation,
pass@k, breakdowns by source / domain / topic / difficulty, answer concentration, and prompts
worth a look. A section whose data the run lacks (no priors, no answers, no source column) shows
a short note instead of an empty chart. Definitions: ``docs/estimators.md``.
"""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots

from pipeline import estimators as est
from pipeline.report.calibration import calibration_section
from pipeline.report.charts import (
    Charts,
    Section,
    TableView,
    band_text,
    figure,
    floats,
    fmt,
    hist,
    pass_rate_bins,
    pct,
    sample_rows,
    short,
)
from pipeline.report.load import ReportConfig, RunData, summary_rows
from pipeline.report.rounds import adaptive_section, posterior_note
from pipeline.report.training import training_section

__all__ = ["ALLOCATION_KEY", "BREAKDOWN_COLUMNS", "allocation_label", "allocation_parts", "build_sections"]

BREAKDOWN_COLUMNS = ("source", "domain", "topic", "difficulty")


def _run_card(data: RunData) -> Section:
    run, s = data.run, data.stats
    sec = Section("run", "Run card", "What was sampled, how, and what came back.")
    params = ", ".join(f"{k}={v}" for k, v in sorted(data.params.items())) or "not recorded"
    versions = ", ".join(f"{k} {v}" for k, v in sorted(data.versions.items())) or "not recorded"
    measured = s.filter(pl.col("n") > 0)
    sec.items = [
        ("Run", data.run_id),
        ("Dataset", str(run.get("dataset") or "")),
        ("Model", str(run.get("model") or "")),
        ("Backend", str(run.get("backend") or "")),
        ("Sampling", params),
        ("Seed", fmt(run.get("seed"))),
        ("Grader", str(run.get("grader") or "")),
        ("Status", str(run.get("status") or "")),
        ("Created", fmt(run.get("created_at"))),
        ("Updated", fmt(run.get("updated_at"))),
        (
            "Prompts",
            f"{s.height:,} analysed, {measured.height:,} with samples"
            + (f" (registry: {run['n_prompts']:,})" if run.get("n_prompts") else ""),
        ),
        (
            "Samples",
            f"{data.sample_info.get('samples') or 0:,}"
            + (f", {measured['n'].min()}–{measured['n'].max()} per prompt" if measured.height else ""),
        ),
        ("Mean pass rate", pct(measured["pass_rate"].mean()) if measured.height else ""),
        (
            "All correct / all wrong",
            (
                f"{pct((measured['c'] == measured['n']).mean())} / {pct((measured['c'] == 0).mean())}"
                if measured.height
                else ""
            ),
        ),
        ("Mean completion tokens", fmt(data.sample_info.get("mean_tokens"), 1)),
        ("Truncated (finish = length)", fmt(data.sample_info.get("truncated"))),
        ("Versions", versions),
    ]
    if run.get("prompt_template"):
        sec.items.append(("Prompt template", short(run["prompt_template"], 300)))
    total = sum(r["n"] for r in data.grade_counts) or 1
    sec.tables.append(
        TableView(
            "Grade statuses",
            ["status", "samples", "share"],
            [[r["status"], fmt(r["n"]), pct(r["n"] / total)] for r in data.grade_counts],
            "" if data.grade_counts else "No samples are stored for this run.",
        )
    )
    if data.computed:
        sec.notes.append("Not stored for this run, computed for this report: " + ", ".join(data.computed) + ".")
    sec.notes += data.notes
    if note := posterior_note(data):
        sec.notes.append(note)
    return sec


def _pass_rates(data: RunData, charts: Charts, cfg: ReportConfig) -> Section:
    sec = Section(
        "pass-rates",
        "Pass-rate distribution",
        "Where the prompts sit between always wrong (0) and always right (1).",
    )
    s = data.stats.filter(pl.col("n") > 0)
    if not s.height:
        sec.notes.append("No prompt has samples yet.")
        return sec
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

    # intervals for a sample of prompts, sorted by pass rate
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
    return sec


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


def _weights_section(data: RunData, charts: Charts) -> Section:
    G = data.G
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
                "there."
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
            fig.add_scatter(x=grid, y=y, mode="lines", name=spec)
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


def _gradient_share(data: RunData, charts: Charts) -> Section:
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


def _zero_signal(data: RunData, charts: Charts) -> Section:
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

    def series(metric: str) -> list:
        lookup = {r["G"]: r["value"] for r in df.filter(pl.col("metric") == metric).iter_rows(named=True)}
        return [lookup.get(G) for G in Gs]

    fig = figure()
    styles = [
        (
            "observed",
            "observed (unbiased; posterior mean when n < G)",
            {"width": 3, "color": "#3366cc"},
        ),
        (
            "predicted_plugin",
            "predicted from per-prompt rates (plug-in, biased up)",
            {"dash": "dot", "color": "#dc3912"},
        ),
        ("iid", "iid from the mean pass rate", {"dash": "dash", "color": "#ff9900"}),
        ("observed_all_correct", "observed: all correct", {"width": 1.5, "color": "#109618"}),
        ("observed_all_wrong", "observed: all wrong", {"width": 1.5, "color": "#990099"}),
    ]
    for metric, name, line in styles:
        fig.add_scatter(x=Gs, y=series(metric), mode="lines+markers", name=name, line=line)
    fig.update_xaxes(type="log", tickvals=Gs, ticktext=[str(g) for g in Gs])
    fig.update_yaxes(tickformat=".0%", rangemode="tozero")
    if data.G in Gs:
        fig.add_vline(x=data.G, line={"dash": "dot", "color": "grey"})
    sec.charts.append(
        charts.make(
            fig,
            "Share of silent groups by group size",
            "group size G (log scale)",
            "share of groups with no signal",
            "The blue line is what this dataset wastes at each G; its distance above the orange line is "
            "the Jensen gap: spread-out difficulty wastes more than the mean pass rate suggests.",
        )
    )
    post = series("share_posterior")
    if note := posterior_note(data, short=True):
        sec.notes.append(note)
    elif any(v for v in post if v):
        first = next(G for G, v in zip(Gs, post, strict=True) if v)
        sec.notes.append(
            f"From G = {first} on, some prompts have fewer than G samples; their rates "
            "are Beta-posterior means, not unbiased estimates."
        )
    fill = {
        r["G"]: r["value"] for r in summary_rows(data.summary, "dapo", metric="oversampling_fill").iter_rows(named=True)
    }
    rows = []
    for G, obs, iid, gap, allc, allw in zip(
        Gs,
        series("observed"),
        series("iid"),
        series("jensen_gap"),
        series("observed_all_correct"),
        series("observed_all_wrong"),
        strict=True,
    ):
        rows.append([str(G), pct(obs), pct(allc), pct(allw), pct(iid), pct(gap), fmt(fill.get(G))])
    sec.tables.append(
        TableView(
            "Zero-signal rates",
            [
                "G",
                "observed",
                "all correct",
                "all wrong",
                "iid",
                "Jensen gap",
                "DAPO oversampling 1/(1-D)",
            ],
            rows,
        )
    )
    return sec


# What identifies one allocation of a run (``allocate.allocation_key``): two stored allocations
# differing in any of these are separate series, bars and table rows.
ALLOCATION_KEY = ("objective", "estimator", "budget", "posterior")


def allocation_label(objective: str, estimator: str | None, budget: int | None, posterior: bool | None) -> str:
    """``signal grpo · 720 rollouts · posterior``: an allocation named by everything that identifies it."""
    parts = [" ".join(x for x in (objective, estimator) if x)]
    if budget is not None:
        parts.append(f"{budget:,} rollouts")
    if posterior is not None:
        parts.append("posterior" if posterior else "point estimates")
    return " · ".join(parts)


def allocation_parts(a: pl.DataFrame) -> list[tuple[str, pl.DataFrame]]:
    """The allocations of a run's allocation rows, in stored order: ``(label, rows)`` each."""
    parts = []
    for key in a.select(ALLOCATION_KEY).unique(maintain_order=True).iter_rows(named=True):
        match = pl.all_horizontal(
            [pl.col(name).eq_missing(pl.lit(value, dtype=a.schema[name])) for name, value in key.items()]
        )
        parts.append((allocation_label(**key), a.filter(match)))
    return parts


def _allocation_section(data: RunData, charts: Charts, cfg: ReportConfig) -> Section:
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
    labels = [label for label, _ in parts]
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
    rows, ratios = [], []
    for label, part in parts:
        objective = part["objective"][0]
        total = float(part["expected_value"].sum())
        utotal = float(part["uniform_value"].sum())
        if objective == "variance":  # minimised: better is smaller
            ratio = utotal / total if total else float("nan")
        else:
            ratio = total / utotal if utotal else float("nan")
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
    sec.tables.append(
        TableView(
            "Allocations",
            ["allocation", "method", "budget", "prompts", "value", "uniform value", "gain", "certified gap"],
            rows,
        )
    )
    return sec


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


def _pass_at_k(data: RunData, charts: Charts) -> Section:
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
    fig.update_xaxes(type="log")
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


def _breakdown_groups(s: pl.DataFrame, col: str) -> tuple[pl.DataFrame, str]:
    if col == "difficulty":
        distinct = s["difficulty"].drop_nulls().n_unique()
        if distinct > 20:
            lo, hi = s["difficulty"].min(), s["difficulty"].max()
            step = (hi - lo) / 10 or 1.0
            key = ((pl.col("difficulty") - lo) / step).floor().clip(0, 9) * step + lo
            expr = pl.format("{}–{}", key.round(2), (key + step).round(2))
            return s.with_columns(expr.alias("group")), "difficulty (10 equal ranges)"
        return s.with_columns(pl.col("difficulty").round(3).cast(pl.String).alias("group")), "difficulty"
    return s.with_columns(pl.col(col).alias("group")), col


def _breakdown(data: RunData, charts: Charts, cfg: ReportConfig) -> Section:
    G = data.G
    sec = Section(
        "breakdown",
        "Breakdown by source, domain, topic and difficulty",
        f"Pass rate and silent share at G = {G} per group of the dataset's own labels.",
    )
    s = data.stats.filter(pl.col("n") > 0)
    e = est.get(cfg.estimator)
    s = s.with_columns(pl.Series("mass", np.nan_to_num(e.mass(np.nan_to_num(floats(s, "pass_rate")), G))))
    total_mass = float(s["mass"].sum()) or 1.0
    shown = 0
    for col in BREAKDOWN_COLUMNS:
        present = s.filter(pl.col(col).is_not_null())
        if present.height == 0:
            continue
        if present[col].n_unique() < 2:
            sec.notes.append(f"Every prompt has the same {col} ({present[col][0]}); nothing to compare.")
            continue
        grouped, label = _breakdown_groups(present, col)
        g = grouped.group_by("group").agg(
            pl.len().alias("prompts"),
            pl.col("pass_rate").mean().alias("pass_rate"),
            pl.col("zero_signal_G").mean().alias("silent"),
            (pl.col("c") == 0).mean().alias("all_wrong"),
            (pl.col("c") == pl.col("n")).mean().alias("all_correct"),
            (pl.col("mass").sum() / total_mass).alias("mass_share"),
        )
        more = max(g.height - 30, 0)
        g = g.sort("prompts", descending=True).head(30).sort("pass_rate")
        groups = [str(v) for v in g["group"].to_list()]
        fig = figure()
        fig.add_bar(x=groups, y=g["pass_rate"].to_numpy(), name="mean pass rate", marker_color="#3366cc")
        fig.add_bar(
            x=groups,
            y=g["silent"].to_numpy(),
            name=f"silent share at G = {G}",
            marker_color="#dc3912",
        )
        fig.add_bar(
            x=groups,
            y=g["mass_share"].to_numpy(),
            name=f"share of {e.spec} update mass",
            marker_color="#109618",
        )
        fig.update_layout(barmode="group")
        fig.update_yaxes(tickformat=".0%", rangemode="tozero")
        sec.charts.append(
            charts.make(
                fig,
                f"By {label}",
                label,
                "share",
                f"Groups sorted by mean pass rate; a group whose green bar is small next to its share "
                f"of prompts gets little of the {e.spec} signal, a tall red bar means its groups of "
                f"{G} are mostly unanimous.",
            )
        )
        sec.tables.append(
            TableView(
                f"By {label}",
                [
                    label,
                    "prompts",
                    "mean pass rate",
                    "all wrong",
                    "all correct",
                    f"silent at G = {G}",
                    "update-mass share",
                ],
                [
                    [
                        grp,
                        fmt(r["prompts"]),
                        pct(r["pass_rate"]),
                        pct(r["all_wrong"]),
                        pct(r["all_correct"]),
                        pct(r["silent"]),
                        pct(r["mass_share"]),
                    ]
                    for grp, r in zip(groups, g.iter_rows(named=True), strict=True)
                ],
                f"{more} smaller groups not shown." if more else "",
            )
        )
        shown += 1
    if not shown:
        sec.notes.append("The dataset has no source, domain, topic or difficulty labels to break the results down by.")
    return sec


def _answers(data: RunData, charts: Charts, cfg: ReportConfig) -> Section:
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
    means = s.select(
        pl.col("n_distinct_answers").mean(),
        pl.col("modal_share").mean(),
        pl.col("answer_entropy").mean(),
        pl.col("modal_correct_share_grpo").mean(),
        pl.col("modal_correct_share_reco").mean(),
    ).row(0)
    sec.tables.append(
        TableView(
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
    )
    return sec


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
        ]
        row += [fn(r.get(key)) for _, key, fn in extra]
        out.append(row)
    return out


def _prompt_tables(data: RunData, cfg: ReportConfig) -> Section:
    G = data.G
    sec = Section("prompts", "Prompts worth a look", f"Silent at G = {G}, most weighted, least certain.")
    s = data.stats.filter(pl.col("n") > 0)
    if not s.height:
        sec.notes.append("No prompt has samples yet.")
        return sec
    base = ["prompt", "problem", "answer", "correct", "pass rate", "Wilson interval"]
    silent = s.filter(pl.col("zero_signal_G") >= 0.999)
    n_c = silent.filter(pl.col("c") == pl.col("n")).height
    sec.tables.append(
        TableView(
            f"Silent at G = {G}: {silent.height:,} prompts ({pct(silent.height / s.height)}; "
            f"{n_c:,} all correct, {silent.height - n_c:,} all wrong)",
            base + [f"silent rate at G = {G}"],
            _prompt_rows(
                silent.sort(["n", "prompt_id"], descending=[True, False]).head(cfg.top),
                [("z", "zero_signal_G", pct)],
            ),
            "Every group of these prompts is unanimous: they cost rollouts and teach nothing at this G.",
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
    uncertain = (
        s.with_columns((pl.col("wilson_hi") - pl.col("wilson_lo")).alias("width"))
        .sort(["width", "prompt_id"], descending=[True, False])
        .head(cfg.top)
    )
    sec.tables.append(
        TableView(
            "Least certain",
            base + ["interval width"],
            _prompt_rows(uncertain, [("width", "width", pct)]),
            "Widest Wilson intervals: more samples here would change the picture most.",
        )
    )
    return sec


def build_sections(data: RunData, cfg: ReportConfig, prefix: str = "r") -> list[Section]:
    """All eleven sections of a run report, and an adaptive run's rounds section after the pass rates."""
    charts = Charts(prefix)
    sections = [_run_card(data), _pass_rates(data, charts, cfg)]
    rounds = adaptive_section(data, charts)
    if rounds is not None:
        sections.append(rounds)
    return sections + [
        _weights_section(data, charts),
        _gradient_share(data, charts),
        _zero_signal(data, charts),
        _allocation_section(data, charts, cfg),
        _pass_at_k(data, charts),
        _breakdown(data, charts, cfg),
        calibration_section(data, charts),
        training_section(data, charts),
        _answers(data, charts, cfg),
        _prompt_tables(data, cfg),
    ]
