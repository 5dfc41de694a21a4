"""A run's results, read, computed and written in one place: its counts read from the store, its
analysis (``analyze``, pure) and default allocation computed from them, and both stored.

The analysis itself knows nothing of storage; this module is the step around it that loads and
saves. A profile's finish (``run.finish_run``: a sampled, imported or regraded run) and a saved
current difficulty (``observe.snapshot``) end in ``finish_from_counts``, which marks the run
``done`` and returns what it computed (``FinishedRun``), so the steps after it (the run's
observations, its verdict, its report, the command line's summary) take it from there instead of
reading the tables back. A later reader of a run (the report, export, calibration, the round
planner, the CLI) gets its counts and analysis here too: ``run_counts``, ``adaptive_counts``,
``analysis_of_run``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from pipeline import allocate, analyze, labelprior, schema
from pipeline.errors import PipelineError, StoreError
from pipeline.store import RunRecord, Store

__all__ = [
    "ANALYSIS_TABLES",
    "OBSERVATIONS_BACKEND",
    "FinishedRun",
    "adaptive_counts",
    "analysis_of_run",
    "analyze_run",
    "counts_from_samples",
    "finish_from_counts",
    "read_analysis",
    "run_counts",
    "token_counts",
    "write_analysis",
]

ANALYSIS_TABLES = ("prompt_stats", "weights", "summary")

# A run saved from observations (``observe.snapshot``) has no samples: its counts are its prompt_stats.
OBSERVATIONS_BACKEND = "observations"


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
    write_analysis(store, run_id, analysis)
    table, alloc_config = allocate.default_allocation(run_id, counts, budget_per_prompt)
    allocate.write_allocation(store, run_id, table, alloc_config)
    return FinishedRun(store.set_run_status(run_id, "done"), analysis, table)


# --- a run's counts ------------------------------------------------------------------------------


def counts_from_samples(store: Store, run_id: str, answers: bool = True) -> pa.Table:
    """Per-prompt counts of one run, from one DuckDB ``GROUP BY`` over its samples (``Store.sample_counts``).

    ``n`` counts every sample and ``c`` the correct ones (ungradable samples count as not correct;
    ``sql/prompt_counts.sql``). With ``answers`` the query groups by (prompt, extracted answer)
    instead (``sql/answer_histogram.sql``), still one pass over the samples, and the per-prompt
    answer histograms come back as ``answer_values``, ``answer_counts`` and
    ``answer_correct_counts`` (null answers counted in n, not listed; order:
    ``analyze.counts_from_histogram``). Prompts come in prompt_id order without answers, in the
    query's order with them.

    Raises:
        StoreError: the run has no samples.
    """
    flat = store.sample_counts(run_id, answers=answers)
    return analyze.counts_from_histogram(flat) if answers else flat


def adaptive_counts(store: Store, run_id: str, n_min: int) -> pa.Table:
    """Per prompt of an adaptive run (prompt-id order), ``n`` and ``c`` over all its samples and
    ``n0``, ``c0`` over round 0's (``sql/adaptive_counts.sql``, over its finished shard files):
    what its prior is fitted to (``analyze.run_prior``).

    Raises:
        PipelineError: the run has no finished shards.
    """
    files = [f for _, f in sorted(store.shard_files(run_id).items())]
    if not files:
        raise PipelineError(f"run {run_id} has no finished shards")
    return store.files_query("adaptive_counts", files, {"n_min": n_min})


def _registered(store: Store, run_id: str) -> RunRecord:
    """The run's registry record; a run whose samples were written without one (tables made by
    hand, by an older version) is read as a fixed-n run."""
    return store.get_run(run_id, missing_ok=True) or RunRecord(run_id)


def token_counts(store: Store, run_id: str) -> pa.Table:
    """Per prompt of a run, its answers cut by the token limit and its answers' lengths in tokens,
    overall and by outcome (``sql/prompt_tokens.sql``: one pass over its finished shard files; the
    columns ``analyze.with_tokens`` joins onto the counts)."""
    files = [f for _, f in sorted(store.shard_files(run_id).items())]
    if not files:
        raise StoreError(f"run {run_id!r} has no samples under {store.root}")
    return store.files_query("prompt_tokens", files)


def _run_counts(store: Store, run: RunRecord, answers: bool) -> pa.Table:
    if run.backend != OBSERVATIONS_BACKEND:
        counts = counts_from_samples(store, run.run_id, answers=answers)
        return analyze.with_tokens(counts, token_counts(store, run.run_id))
    stats_table = store.read_table("prompt_stats", {"run_id": run.run_id})
    if stats_table.num_rows == 0:
        raise StoreError(f"run {run.run_id} was saved from observations and has no prompt_stats: save it again")
    return stats_table.select(["prompt_id", "n", "c"])


def run_counts(store: Store, run_id: str, answers: bool = True) -> pa.Table:
    """A run's per-prompt counts: from its samples (``counts_from_samples``, with each prompt's answers
    cut by the token limit and its answers' lengths: ``analyze.with_tokens``), or, for a run saved
    from observations, its stored ``prompt_stats``' ``n`` and ``c``.

    Raises:
        StoreError: the run has no samples (or, saved from observations, no prompt_stats).
    """
    return _run_counts(store, _registered(store, run_id), answers)


def prompt_labels(store: Store, dataset: str, prompt_ids: list[str]) -> tuple[str | None, list]:
    """The label the label prior conditions on, per prompt: another model's pass rate
    (``prior_c / prior_n``) where the dataset's problems carry one, else their ``difficulty``; ``(None,
    [None, ...])`` when they carry neither."""
    problems = store.read_table("problems", {"dataset": dataset})
    ids = problems.column("prompt_id").to_pylist()
    pn, pc_ = problems.column("prior_n").to_pylist(), problems.column("prior_c").to_pylist()
    rate = dict(zip(ids, [c / m if m and c is not None else None for m, c in zip(pn, pc_, strict=True)], strict=True))
    difficulty = dict(zip(ids, problems.column("difficulty").to_pylist(), strict=True))
    for name, values in (("prior_c / prior_n", rate), ("difficulty", difficulty)):
        out = [values.get(pid) for pid in prompt_ids]
        if any(v is not None for v in out):
            return name, out
    return None, [None] * len(prompt_ids)


# --- a run's analysis ----------------------------------------------------------------------------


def analyze_run(store: Store, run_id: str, config: analyze.AnalyzeConfig | None = None) -> analyze.Analysis:
    """A run analysed from its counts with ``config``, nothing written. An adaptive run keeps what
    makes its analysis valid, exactly as its finish made it: each prompt's decision and every
    estimate a posterior expectation under its prior, fitted to its samples (``analyze.run_prior``)."""
    run = _registered(store, run_id)
    counts = _run_counts(store, run, answers=True)
    acfg = run.adaptive
    if acfg is None:
        return analyze.analyze(counts, run_id, config)
    prior = analyze.run_prior(acfg, adaptive_counts(store, run_id, acfg.n_min))
    plans = store.read_table("plans", {"run_id": run_id})
    labels = run_label_priors(store, run, counts, prior)
    counts, settings = analyze.posterior_inputs(counts, config, acfg, prior, plans, labels)
    return analyze.analyze(counts, run_id, settings)


def run_label_priors(store: Store, run: RunRecord, counts: pa.Table, prior) -> labelprior.LabelPriors | None:
    """A ``labels`` run's per-prompt priors at its end (``labelprior.fit_label_priors`` on its final
    counts, as each round fitted them on the counts so far), so its reported bands are decided as its
    rounds were; None for any other prior, or a dataset without labels (its rounds used the population's)."""
    if run.adaptive.prior != "labels":
        return None
    ids = counts.column("prompt_id").to_pylist()
    name, labels = prompt_labels(store, run.dataset, ids)
    if name is None:
        return None
    n, c = (counts.column(k).to_numpy().astype(np.int64) for k in ("n", "c"))
    return labelprior.fit_label_priors(n, c, labelprior.label_bins(labels), prior)


def read_analysis(store: Store, run_id: str, *, weights: bool = True) -> analyze.Analysis | None:
    """The analysis tables stored for a run, or None when any of them is missing. Without
    ``weights`` the ``weights`` table (a row per prompt, estimator and group size: 8.8 M rows at
    160,000 prompts) is only checked to be there, and the result holds it empty."""
    names = [name for name in ANALYSIS_TABLES if weights or name != "weights"]
    tables = {name: store.read_table(name, {"run_id": run_id}) for name in names}
    if any(t.num_rows == 0 for t in tables.values()):
        return None
    if not weights:
        if not store.files("weights", {"run_id": run_id}):
            return None
        tables["weights"] = schema.WEIGHTS.empty_table()
    return analyze.Analysis(**tables)


def write_analysis(store: Store, run_id: str, result: analyze.Analysis) -> None:
    """Store a run's analysis tables, replacing any earlier analysis of the run."""
    for name in ANALYSIS_TABLES:
        store.replace_partition(name, getattr(result, name), {"run_id": run_id})


def analysis_of_run(
    store: Store, run_id: str, config: analyze.AnalyzeConfig | None = None, *, weights: bool = True
) -> tuple[analyze.Analysis, bool]:
    """The analysis of a run: the stored tables, else ``analyze_run`` (computed, not written).

    Returns ``(analysis, computed)``; ``computed`` is True when it was not stored. ``weights=False``:
    a stored analysis comes without its ``weights`` rows (see ``read_analysis``); a computed one
    has them all.
    """
    stored = read_analysis(store, run_id, weights=weights)
    if stored is not None:
        return stored, False
    return analyze_run(store, run_id, config), True
