"""What the commands that make a run (``profile``, ``grade``, ``regrade``) print after it:
the pass-rate spread, zero-signal rates, gradient shares, and an adaptive run's rounds."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.cli.output import print_table, say

if TYPE_CHECKING:
    import pyarrow as pa

    from pipeline.finish import FinishedRun
    from pipeline.store import Store


def print_run_summary(store: Store, run_id: str, finished: FinishedRun | None = None) -> None:
    """The end-of-run summary: pass-rate spread, zero-signal rates, gradient shares at G = 8; from
    what the run's finish computed when given (not read back), else from the stored tables."""

    def rows(name: str, params: dict) -> pa.Table:
        if finished is None:
            return store.named_query(name, params)
        tables = {"prompt_stats": finished.analysis.prompt_stats, "summary": finished.analysis.summary}
        return store.tables_query(name, tables, params)

    print_table(rows("pass_rate_spread", {"run_id": run_id}), title=f"pass-rate spread, run {run_id}")
    silent = rows("zero_signal_summary", {"run_id": run_id})
    print_table(silent, title="zero-signal (silent group) rate by group size G")
    shares = rows("gradient_shares", {"run_id": run_id, "G": 8})
    print_table(shares, title="gradient share by difficulty band at G = 8")


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
    say(
        f"adaptive {acfg.target.spec} (n {acfg.n_min}..{acfg.n_max}, {acfg.rule.spec}): "
        f"{len(run.rounds or ())} rounds, {total:,} rollouts ({total / max(stats.num_rows, 1):.2f} per prompt), "
        f"{undecided} prompts stopped undecided; prior {prior}"
        + ("" if acfg.prior in prior else f" ({acfg.prior})")
        + "; the analysis uses posterior expectations under it"
    )
