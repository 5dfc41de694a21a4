"""The report section of an adaptive run (``docs/adaptive.md`` §2, §5, §10): rounds, prior, savings.

Shown only for a run registered with adaptive settings: per round, the prompts still open and the
rollouts spent; the fitted prior over the pass-rate histogram; where the prompts stopped; and the
rollouts saved against the fixed n that the same prior expects to give the same misclassification
(``frontier.equivalent_fixed_n``: exact beta-binomial expectations, no simulation).
"""

from __future__ import annotations

import numpy as np
import polars as pl
from pipeline.reports.charts import Charts, Section, TableView, figure, floats, fmt, hist, pct
from pipeline.reports.load import RunData, run_verdict

from pipeline import adaptive, verdict
from pipeline.store import RoundCount

__all__ = ["adaptive_settings", "adaptive_section", "posterior_note"]


def adaptive_settings(data: RunData) -> adaptive.AdaptiveConfig | None:
    """The run's adaptive settings from its registry record (None for a fixed-n run)."""
    return data.run.adaptive


def posterior_note(data: RunData, short: bool = False) -> str | None:
    """What an adaptive run's estimates are, for the sections that show them (None otherwise)."""
    prior = data.run.prior
    if adaptive_settings(data) is None or prior is None:
        return None
    if short:
        return (
            f"Adaptive run: these are posterior means under the fitted prior, {prior.label}, "
            "not the unbiased estimates (see the adaptive-profiling section)."
        )
    return (
        f"This run is adaptive: each prompt stopped when its samples decided it, so c/n and the unbiased "
        f"estimators are biased here. Its estimates (zero-signal rates, weights and mass, pass@k, the mean "
        f"pass rate and the band shares of the summary) are posterior expectations under the fitted prior, "
        f"{prior.label} (docs/adaptive.md §7, estimates under adaptive stopping)"
        + (
            ", its grid part run to the maximum likelihood: the run decided under the same fit stopped early, "
            "a smoother for deciding (docs/adaptive.md §7, estimated under the maximum)."
            if prior.family_weight("grid") > 0
            else "."
        )
    )


def adaptive_section(data: RunData, charts: Charts) -> Section | None:
    """The adaptive-profiling section, or None for a fixed-n run."""
    acfg = adaptive_settings(data)
    if acfg is None:
        return None
    t = acfg.target
    if t.kind == "band" and t.cost:
        question = (
            f"one more sample of a prompt was not worth its price ({t.cost:g} of a misclassified prompt per "
            f"rollout) in deciding which side of {t.lo:g} < p < {t.hi:g} it is on; decided means posterior "
            f"probability >= {1 - t.delta:g}"
        )
    elif t.kind == "band":
        question = (
            f"it was decided which side of {t.lo:g} < p < {t.hi:g} each prompt is on (posterior probability "
            f">= {1 - t.delta:g})"
        )
    else:
        question = f"each pass rate was known to +-{t.h:g} (central {1 - t.delta:g} credible interval)"
    sec = Section(
        "adaptive",
        "Adaptive profiling",
        f"Sampled in rounds until {question}: {acfg.n_min} samples per prompt in round 0, at most "
        f"{acfg.n_max}, round rule {acfg.rule.spec}, prior {acfg.prior}.",
    )
    prior = data.run.prior
    note = posterior_note(data)
    if note:
        sec.notes.append(note)
    s = data.stats.filter(pl.col("n") > 0)
    rounds = data.run.rounds or ()
    total = int(s["n"].sum()) if s.height else 0
    undecided = int(s["undecided"].fill_null(False).sum()) if "undecided" in s.columns and s.height else 0
    at_top = int((s["n"] >= acfg.n_max).sum()) if s.height else 0
    sec.items = [
        ("Target", t.spec),
        ("Prior", prior.label if prior else "not recorded"),
        ("Rounds", str(len(rounds))),
        ("Rollouts", f"{total:,} ({total / s.height:.2f} per prompt)" if s.height else ""),
        ("Stopped undecided", f"{undecided:,} ({pct(undecided / s.height)})" if s.height else ""),
        ("Stopped at n_max", f"{at_top:,} ({pct(at_top / s.height)})" if s.height else ""),
    ]
    if rounds:
        _rounds_chart(sec, charts, rounds)
    if prior is not None and s.height:
        _prior_chart(sec, charts, s, prior)
        sv = run_verdict(data).savings  # the verdict's simulation, once per run: the report's top shows it too
        if sv is not None:
            _savings(sec, sv, acfg.target)
    return sec


def _rounds_chart(sec: Section, charts: Charts, rounds: tuple[RoundCount, ...]) -> None:
    r = [x.round for x in rounds]
    sampled = [x.prompts for x in rounds]
    spent = [x.rollouts for x in rounds]
    fig = figure()
    fig.add_bar(x=r, y=sampled, name="prompts sampled in the round", marker_color="#3366cc")
    fig.add_scatter(
        x=r, y=spent, name="rollouts spent (right axis)", mode="lines+markers", yaxis="y2", line={"color": "#dc3912"}
    )
    fig.update_layout(
        yaxis2={"overlaying": "y", "side": "right", "title": {"text": "rollouts"}, "rangemode": "tozero"},
        bargap=0.2,
    )
    fig.update_xaxes(dtick=1)
    sec.charts.append(
        charts.make(
            fig,
            "Prompts still open and rollouts spent, per round",
            "round",
            "prompts",
            "Round 0 samples every prompt; each later round samples only the prompts still open "
            "(not stopped and below n_max). Most prompts of a U-shaped dataset stop in the first rounds.",
        )
    )
    cum = np.cumsum(spent)
    sec.tables.append(
        TableView(
            "Rounds",
            ["round", "prompts sampled", "rollouts", "cumulative rollouts", "shards", "open after the round"],
            [
                [
                    str(x.round),
                    fmt(x.prompts),
                    fmt(x.rollouts),
                    fmt(int(c)),
                    fmt(x.shards),
                    fmt(x.open_after),
                ]
                for x, c in zip(rounds, cum, strict=True)
            ],
        )
    )


#: How the chart names a prior held on the grid, by its method.
_GRID_KIND = {"inflated": "inflated Beta", "mixture": "mixture prior", "grid": "grid prior"}


def _prior_chart(sec: Section, charts: Charts, s: pl.DataFrame, prior: adaptive.Prior) -> None:
    """The dataset's pass-rate distribution as the fitted prior estimates it, beside the per-prompt
    histograms: those show where stopping left the prompts (a prompt decided "informative" at 2 of 4
    puts a spike at 0.5), not how the pass rates are spread."""
    from scipy.stats import beta

    edges = np.linspace(0, 1, 21)
    centres, width = (edges[:-1] + edges[1:]) / 2, 0.05
    fig = figure()
    if prior.is_grid:
        p, w = prior.grid()
        mass = np.bincount(np.minimum((p / width).astype(int), len(centres) - 1), weights=w, minlength=len(centres))
        fig.add_bar(
            x=centres,
            y=mass / width,
            width=width * 0.9,
            name="dataset's pass rates: fitted " + _GRID_KIND.get(prior.method, "grid prior"),
            marker_color="rgba(220,57,18,0.75)",
        )
    fig.add_bar(
        x=centres,
        y=hist(floats(s, "pass_rate"), edges) / width,
        width=width * 0.9,
        name="c / n per prompt (shaped by stopping)",
        marker_color="rgba(120,120,120,0.35)",
    )
    if "post_mean" in s.columns:
        fig.add_bar(
            x=centres,
            y=hist(floats(s, "post_mean"), edges) / width,
            width=width * 0.9,
            name="posterior mean per prompt (shrunk)",
            marker_color="rgba(51,102,204,0.35)",
        )
    if not prior.is_grid:
        x = np.linspace(0.002, 0.998, 300)
        density = beta.pdf(x, prior.a, prior.b)
        cap = max(8.0, float(np.nanmax(hist(floats(s, "pass_rate"), edges) / width)) * 1.2)
        fig.add_scatter(
            x=x,
            y=np.minimum(density, cap),
            mode="lines",
            name=f"dataset's pass rates: fitted prior Beta({prior.a:.3g}, {prior.b:.3g})",
            line={"color": "#dc3912", "width": 3},
        )
    fig.update_layout(barmode="overlay")
    fig.update_xaxes(range=[-0.02, 1.02])
    fitted = (
        "The red bars are the mixture prior auto fitted to every prompt's counts (a Beta, a zero-one-inflated "
        f"Beta and the grid prior, weighted by their evidence): {prior.label}; the bars at the ends hold the "
        "point masses at 0 and 1."
        if prior.method == "mixture"
        else "The red bars are the zero-one-inflated Beta prior fitted to every prompt's counts (maximum likelihood): "
        f"{prior.label}; the bars at the ends hold the point masses at 0 and 1."
        if prior.method == "inflated"
        else "The red bars are the grid prior: the maximum-likelihood distribution of pass rates fitted to every "
        "prompt's counts, with point masses at 0 and 1 (the bars at the ends hold them)."
        if prior.is_grid
        else "The red curve is the Beta prior fitted to round 0 (beta-binomial maximum likelihood); it is cut "
        "at the top of the plot where it runs to infinity at 0 or 1."
    )
    sec.charts.append(
        charts.make(
            fig,
            "The dataset's pass rates (fitted prior) beside the per-prompt estimates",
            "pass rate",
            "density",
            f"{fitted} It is the estimate of how this dataset's pass rates are spread, and every posterior of "
            "the run starts from it. The grey and blue histograms are per prompt, c / n and the posterior mean: "
            "they show where adaptive stopping left each prompt, not the spread of pass rates. A prompt decided "
            "at 2 of 4 sits at 0.5 whatever its rate, so their spike at 0.5 is an artefact of stopping.",
        )
    )


def _frontier_note(sv: verdict.Savings) -> str:
    """The run's settings against the frontier, both expectations under the fitted prior: the best
    stopping rule's rollouts at the settings' misclassification, and the misclassifications at the
    settings' rollouts (docs/adaptive.md §10)."""
    if sv.rule_cost is None:
        return ""
    text = (
        f" Against the best any stopping rule can do (the priced rule, one sample per round; every number an "
        f"expectation under the fitted prior, these settings simulated on pass rates drawn from it): these settings "
        f"spend {sv.rule_cost:.2f} per prompt for {pct(sv.rule_mis)} misclassified"
    )
    if sv.realised is not None:
        text += (
            f", where a fixed n needs {sv.rule_fixed_n:.1f} and the best rule {sv.frontier_cost:.2f}: they realise "
            f"{pct(sv.realised)} of the best rule's saving"
        )
    if sv.frontier_mis is not None:
        text += (
            f"; at {sv.rule_cost:.2f} per prompt the best rule misclassifies {pct(sv.frontier_mis)} and a fixed n "
            f"{pct(sv.fixed_mis)}"
        )
    return text + "."


def _savings(sec: Section, sv: verdict.Savings, t: adaptive.Target) -> None:
    """Rollouts saved against the fixed n expected to give the same misclassification (the verdict's
    numbers, ``verdict.adaptive_savings``)."""
    per_prompt, mis, decided, top, curve = sv.per_prompt, sv.misclassification, sv.decided, sv.n_top, sv.curve
    n_eq, where = sv.fixed_n, sv.where
    measure = (
        f"expected band misclassification {pct(mis)} (the mean posterior probability that a prompt's reported "
        "band is wrong)"
        if t.kind == "band"
        else f"expected share of prompts decided {pct(decided)}"
    )
    if where == "inside":
        saved = 1.0 - per_prompt / n_eq
        finding = (
            f"A fixed n of {n_eq:.1f} per prompt is expected to give the same; this run used {per_prompt:.2f} per "
            f"prompt: {pct(saved)} of the rollouts saved."
        )
    elif where == "below":
        finding = f"Even the smallest fixed n ({n_eq:.0f}) matches it; this run used {per_prompt:.2f} per prompt."
    else:
        finding = (
            f"No fixed n up to {top} is expected to match it: more than {pct(1 - per_prompt / top)} of the rollouts "
            "saved."
        )
    sec.notes.append(
        f"This run: {measure}. {finding} Both sides are expectations under the fitted prior (the fixed-n side "
        "gives each prompt its most probable band), so they compare like with like." + _frontier_note(sv)
    )
    grid = [n for n in (4, 8, 16, 32, 64, 128, 256) if n <= top]
    sec.tables.append(
        TableView(
            "Fixed n under the same prior",
            ["n per prompt", "expected misclassification", "expected share decided"],
            [[str(n), pct(curve[n - 1][1]), pct(curve[n - 1][2])] for n in grid]
            + [[f"adaptive ({per_prompt:.2f} on average)", pct(mis), pct(decided)]],
            "Expected values under the fitted prior: each prompt's pass rate drawn from it, its counts binomial.",
        )
    )
