"""What a run hands back once it is finished: ``ProfileResult``, one typed record for every way a
run is made (``profile``, ``regrade``, ``import_rollouts``).

It holds what the finish computed (``finish.FinishedRun``: the registry record as marked done, the
analysis, the default allocation), the run's verdict, computed once here from those (only the
sample counts are read), and where its report was written, rendered from the same: nothing is read
back from the tables, and the command line prints the verdict the report shows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pipeline import reports
from pipeline import verdict as verdicts
from pipeline.errors import ReportError, StoreError
from pipeline.finish import FinishedRun
from pipeline.schema import DEFAULT_G
from pipeline.store import RunRecord, Store

__all__ = ["ProfileResult", "conclude", "finished_verdict"]


@dataclass(frozen=True)
class ProfileResult:
    """A finished run: what its finish computed, its verdict and its report's path (None when no
    report was asked for). ``details``: what the command that made it adds (a regrade's source,
    grader and changed grades; an import's grade statuses, samples and prompts)."""

    finished: FinishedRun
    verdict: verdicts.Verdict
    report: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)

    @property
    def run_id(self) -> str:
        return self.finished.run_id

    @property
    def run(self) -> RunRecord:
        return self.finished.run


def finished_verdict(store: Store, finished: FinishedRun, G: int = DEFAULT_G) -> verdicts.Verdict:
    """The verdict of a finished run at the trainer's ``G``, from what its finish computed (its
    record, analysis and default allocation) and its sample counts (``sql/sample_info.sql``)."""
    sample_info = store.named_query("sample_info", {"run_id": finished.run_id}).to_pylist()[0]
    analysis = finished.analysis
    return verdicts.verdict(
        finished.run_id,
        analysis.prompt_stats,
        analysis.summary,
        G=G,
        allocation=finished.allocation,
        sample_info=sample_info,
        run=finished.run,
    )


def conclude(
    store: Store, finished: FinishedRun, *, report: bool, details: Mapping[str, Any] | None = None, G: int = DEFAULT_G
) -> ProfileResult:
    """A finished run's verdict at the trainer's ``G``, computed once, and (``report``) its report
    rendered with it, at the same G.

    Raises:
        ReportError: the report could not be written (a full disk); the run itself is stored and done.
    """
    verdict = finished_verdict(store, finished, G)
    path = None
    if report:
        try:
            path = reports.write_run_report(store, finished.run_id, finished, verdict)
        except StoreError as exc:
            raise ReportError(
                f"run {finished.run_id} is done and stored, but its report was not written: {exc}; write it "
                f"later with `difficulty report --run {finished.run_id}`"
            ) from exc
    return ProfileResult(finished, verdict, path, dict(details or {}))
