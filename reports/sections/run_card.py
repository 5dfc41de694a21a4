"""The run card: what was sampled, how, and what came back (grade statuses, tables computed for the report)."""

from __future__ import annotations

import polars as pl
from pipeline.reports.charts import Section, TableView, fmt, pct, short
from pipeline.reports.load import RunData, metric, summary_rows
from pipeline.reports.sections.rounds import posterior_note

__all__ = ["run_card_section"]


def run_card_section(data: RunData) -> Section:
    run, s = data.run, data.stats
    sec = Section("run", "Run card", "What was sampled, how, and what came back.")
    params = ", ".join(f"{k}={v}" for k, v in sorted(data.params.items())) or "not recorded"
    versions = ", ".join(f"{k} {v}" for k, v in sorted(data.versions.items())) or "not recorded"
    measured = s.filter(pl.col("n") > 0)
    sec.items = [
        ("Run", data.run_id),
        ("Dataset", str(run.dataset or "")),
        ("Model", str(run.model or "")),
        ("Backend", str(run.backend or "")),
        ("Sampling", params),
        ("Seed", fmt(run.seed)),
        ("Grader", str(run.grader or "")),
        ("Status", str(run.status or "")),
        ("Created", fmt(run.created_at)),
        ("Updated", fmt(run.updated_at)),
        (
            "Prompts",
            f"{s.height:,} analysed, {measured.height:,} with samples"
            + (f" (registry: {run.n_prompts:,})" if run.n_prompts else ""),
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
    if run.prompt_template:
        sec.items.append(("Prompt template", short(run.prompt_template, 300)))
    if (tokens := _tokens_table(data)) is not None:
        sec.tables.append(tokens)
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


def _tokens_table(data: RunData) -> TableView | None:
    """Where the tokens went (the summary's ``tokens`` section, docs/tokens.md): tokens per answer
    and share of the tokens spent, overall and per difficulty band, with the means by outcome in the
    note; None for a run without answer lengths (saved from observations, or lengths not recorded)."""
    summary = data.summary
    total = metric(summary, "tokens", "tokens_spent")
    if not total:
        return None
    bands = summary_rows(summary, "tokens", metric="tokens_per_answer").filter(pl.col("band").is_not_null())
    rows = [["all", fmt(metric(summary, "tokens", "tokens_per_answer"), 1), "100%", fmt(total)]]
    for r in bands.to_dicts():
        share = metric(summary, "tokens", "spent_share", band=r["band"])
        rows.append([r["band"], fmt(r["value"], 1), pct(share), fmt(round(share * total)) if share is not None else ""])
    outcome = {o: metric(summary, "tokens", f"tokens_{o}") for o in ("right", "wrong", "cut")}
    ratio = metric(summary, "tokens", "informative_to_easy")
    named = {"right": "right", "wrong": "wrong", "cut": "cut by the token limit"}
    note = (
        "Tokens per answer: "
        + ", ".join(f"{named[o]} {fmt(v, 1)}" for o, v in outcome.items() if v is not None)
        + "."
        + (f" An informative prompt's answer runs {ratio:.2f}x an easy one's" if ratio else "")
        + (
            ": a rollout saved there saves more tokens than one saved on an easy prompt."
            if ratio and ratio > 1
            else "."
        )
    )
    return TableView(
        "Tokens by difficulty band", ["band", "tokens per answer", "share of tokens", "tokens"], rows, note
    )
