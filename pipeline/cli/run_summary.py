"""What the commands that make or analyse a run (``profile``, ``grade``, ``regrade``, ``analyze``,
``current --save``) print after it: the pass-rate spread, zero-signal rates, gradient shares, an
adaptive run's rounds, and last the run's verdict (``pipeline.verdict``): what it means for training
and the commands to act on it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.cli.output import print_table, say
from pipeline.schema import DEFAULT_G, edge_params

if TYPE_CHECKING:
    import pyarrow as pa

    from pipeline.analyze import Analysis
    from pipeline.finish import FinishedRun
    from pipeline.store import Store
    from pipeline.verdict import Verdict


# The trainer's group size the summary and the verdict are read at.
SUMMARY_G = DEFAULT_G

ZERO_SIGNAL_TITLE = (
    "zero-signal (silent group) rate by group size G; estimated: some prompt has fewer than G answers, "
    "so the value is a posterior estimate, not a count; counts_allow_lo..hi (adaptive runs): the 90% range "
    "of every population of pass rates that fits the counts, an extrapolation where wide"
)


def run_tables(analysis: Analysis, run_id: str, G: int) -> list[tuple[str, str, pa.Table]]:
    """The zero-signal and gradient-share tables of an analysis, ``(key, title, table)`` each, by the
    named queries every command prints them with."""
    from pipeline.store import Store

    tables = {"prompt_stats": analysis.prompt_stats, "summary": analysis.summary}
    return [
        ("zero_signal", ZERO_SIGNAL_TITLE, Store.tables_query("zero_signal_summary", tables, {"run_id": run_id})),
        (
            "gradient_share",
            f"gradient share by difficulty band at G = {G} (the bands cover every pass rate; a row sums to 1)",
            Store.tables_query("gradient_shares", tables, {"run_id": run_id, "G": G}),
        ),
    ]


def print_run_summary(
    store: Store, run_id: str, finished: FinishedRun | None = None, G: int = SUMMARY_G, estimator: str | None = None
) -> None:
    """The end-of-run summary: pass-rate spread, zero-signal rates, gradient shares at G = 8; from
    what the run's finish computed when given (not read back), else from the stored tables."""

    def rows(name: str, params: dict) -> pa.Table:
        if finished is None:
            return store.named_query(name, params)
        tables = {"prompt_stats": finished.analysis.prompt_stats, "summary": finished.analysis.summary}
        return store.tables_query(name, tables, params)

    simulated = finished is not None and finished.run.backend == "simulate"
    made_up = " (simulated pass rates: --backend simulate)" if simulated else ""
    spread = rows("pass_rate_spread", {"run_id": run_id, **edge_params()})
    print_table(spread, title=f"pass-rate spread, run {run_id}{made_up}")
    print_table(rows("zero_signal_summary", {"run_id": run_id}), title=ZERO_SIGNAL_TITLE)
    shares = rows("gradient_shares", {"run_id": run_id, "G": G})
    title = f"gradient share by difficulty band at G = {G} (the bands cover every pass rate)"
    if estimator is not None:  # the one the user trains with; the others are in the report
        import pyarrow.compute as pc

        shown = shares.filter(pc.equal(shares.column("estimator"), estimator))
        shares = shown if shown.num_rows else shares
        title = f"{title}; the other estimators: the report, or --all-estimators"
    posterior = finished is not None and finished.run.adaptive is not None
    if not posterior:  # a band no measured rate reaches (hard at n <= 10) is 0 by construction: not shown
        bands = ("hard", "informative_hard", "informative_mid", "informative_easy", "easy")
        empty = [b for b in bands if b in shares.column_names and not any(shares.column(b).to_pylist())]
        shares = shares.drop_columns(empty) if shares.num_rows else shares
    print_table(shares, title=title)
    if shares.num_rows and not any(shares.column("mean_mass").to_pylist()):
        say(f"no estimator has any update mass at G = {G}: every group is silent, so there are no shares")


def stored_verdict(store: Store, run_id: str, analysis: Analysis | None = None, G: int = SUMMARY_G) -> Verdict:
    """The verdict (``pipeline.verdict``) of a run the command did not just finish (``analyze``,
    ``current --save``), from its stored tables. ``analysis``: what the caller computed (not read
    back); else the stored one. A finished run's comes with it (``result.ProfileResult.verdict``)."""
    from pipeline import finish, verdict
    from pipeline.errors import StoreError

    if analysis is None:
        analysis, _ = finish.analysis_of_run(store, run_id, weights=False)
    try:
        run = store.get_run(run_id)
    except StoreError:  # a dataset's prior counts (``analyze --dataset``): no run, no samples
        run, sample_info = None, None
    else:
        sample_info = store.named_query("sample_info", {"run_id": run_id}).to_pylist()[0]
    allocation = store.read_table("allocation", {"run_id": run_id})
    return verdict.verdict(
        run_id, analysis.prompt_stats, analysis.summary, G=G, allocation=allocation, sample_info=sample_info, run=run
    )


def print_verdict(v: Verdict) -> None:
    """A run's verdict, last: what it means for training, a command per line."""
    say(f"verdict for training at G = {v.G} (run {v.run_id}):")
    for line in v.lines:
        say(
            f"  {'! ' if line.kind == 'warning' else '- '}{line.text}"
            + (f"\n      {line.command}" if line.command else "")
        )


# The summary's outcomes (``tokens_right``, ``tokens_wrong``, ``tokens_cut``) as the line names them.
OUTCOME_NAMES = (("right", "right"), ("wrong", "wrong"), ("cut", "cut off"))


def tokens_line(summary: pa.Table) -> str | None:
    """One line of where a run's tokens went (the summary's ``tokens`` section, docs/tokens.md): the
    total, tokens per answer overall and by outcome (right, wrong, cut off by the token limit), the
    informative band against the easy one. None for a run without answer lengths."""
    values = {
        (r["metric"], r["band"]): r["value"]
        for r in summary.to_pylist()
        if r["section"] == "tokens" and r["value"] is not None
    }
    spent = values.get(("tokens_spent", None))
    if not spent:
        return None
    line = f"tokens: {spent:,.0f} spent, {values[('tokens_per_answer', None)]:,.1f} per answer"
    outcomes = [(name, values.get((f"tokens_{key}", None))) for key, name in OUTCOME_NAMES]
    shown = [f"{name} {v:,.1f}" for name, v in outcomes if v is not None]
    if shown:
        line += f" ({', '.join(shown)})"
    if ratio := values.get(("informative_to_easy", None)):
        line += f"; informative prompts {ratio:.2f}x the easy ones' per answer"
    return line


def print_tokens_summary(finished: FinishedRun) -> None:
    """``tokens_line`` of what the run's finish computed (nothing without answer lengths)."""
    if line := tokens_line(finished.analysis.summary):
        say(line)


def print_adaptive_summary(finished: FinishedRun) -> None:
    """An adaptive run's rounds, rollouts and prior in one line (nothing for a fixed-n run), from
    what its finish computed."""
    import pyarrow.compute as pc

    run, stats = finished.run, finished.analysis.prompt_stats
    acfg = run.adaptive
    if acfg is None:
        return
    total = int(pc.sum(stats.column("n")).as_py() or 0)
    undecided = int(pc.sum(stats.column("undecided").cast("int64")).as_py() or 0)
    prior = run.prior.label if run.prior is not None else "not recorded"
    # the summary's estimates are under the grid part run to its maximum (prior.estimation_prior)
    gridded = run.prior is not None and run.prior.family_weight("grid") > 0
    say(
        f"adaptive {acfg.target.spec} (n {acfg.n_min}..{acfg.n_max}, {acfg.rule.spec}): "
        f"{len(run.rounds or ())} rounds, {total:,} rollouts ({total / max(stats.num_rows, 1):.2f} per prompt), "
        f"{undecided} prompts stopped undecided; prior {prior}"
        + ("" if acfg.prior in prior else f" ({acfg.prior})")
        + "; the analysis uses posterior expectations under it"
        + (", its grid part run to the maximum" if gridded else "")
    )
