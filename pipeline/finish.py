"""A run's last step, written once: its analysis and default allocation computed from its counts and
stored, and the run marked ``done``.

A profile's finish (``run.finish_run``: a sampled, imported or regraded run) and a saved current
difficulty (``observe.snapshot``) both end here. What was computed is returned, so the steps after
it (the run's observations, its report, the command line's summary) take it from there instead of
reading the tables back.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from pipeline import allocate, analyze
from pipeline.store import RunRecord, Store

__all__ = ["FinishedRun", "finish_from_counts"]


@dataclass(frozen=True)
class FinishedRun:
    """What a run's finish computed and stored: its registry record as marked done, its analysis
    and its default allocation."""

    run: RunRecord
    analysis: analyze.Analysis
    allocation: pa.Table

    @property
    def run_id(self) -> str:
        return self.run.run_id


def finish_from_counts(
    store: Store,
    run_id: str,
    counts: pa.Table,
    settings: analyze.AnalyzeConfig | None = None,
    budget_per_prompt: int = allocate.DEFAULT_BUDGET_PER_PROMPT,
) -> FinishedRun:
    """Analyze ``counts`` (an adaptive run's with its decisions and posterior ``settings``:
    ``analyze.posterior_inputs``), write the analysis and the default allocation, mark the run done."""
    analysis = analyze.analyze(counts, run_id, settings)
    analyze.write_analysis(store, run_id, analysis)
    table, alloc_config = allocate.default_allocation(run_id, counts, budget_per_prompt)
    allocate.write_allocation(store, run_id, table, alloc_config)
    return FinishedRun(store.set_run_status(run_id, "done"), analysis, table)
