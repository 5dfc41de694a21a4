"""What a report reads about one run: its registry row, sample counts, analysis and allocations.

The analysis is the run's own (``finish.analysis_of_run``: the stored tables, else computed from
its samples with the default settings, never written); the allocation is the stored one(s), else
the one default policy (``allocate.default_allocation``). A run just finished hands its record and
analysis over (``finish.FinishedRun``) and its verdict with them: neither is read back. Tables
computed for the report rather than stored are listed in ``RunData.computed`` so the run card can
say so. Every query is a named file of ``sql/`` run through the ``Store``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from pipeline import allocate as alloc
from pipeline import analyze, finish, schema
from pipeline import estimators as est
from pipeline import verdict as verdicts
from pipeline.checks import check_choice, check_int
from pipeline.errors import ReportError, StoreError
from pipeline.store import RunRecord, Store

log = logging.getLogger(__name__)

__all__ = ["PLOTLY_JS_MODES", "ReportConfig", "RunData", "load_run", "metric", "run_verdict", "summary_rows"]

# How plotly.js reaches a report (validated here, where the settings are; used by ``render``).
PLOTLY_JS_MODES = ("inline", "shared")


@dataclass(frozen=True)
class ReportConfig:
    """Settings of the report stage.

    Attributes:
        plotly_js: ``inline`` (self-contained file) or ``shared`` (one plotly.min.js beside it).
        G: the group size the report is read at (silent prompts, weights, gradient share).
        estimator: estimator spec of the "most weighted" prompts and the breakdown's mass share.
        top: rows of each prompt table.
        max_points: most points of a per-prompt scatter (a seeded random sample beyond that).
        interval_sample: prompts shown with their intervals.
        seed: seed of the samples drawn for display.
    """

    plotly_js: str = "inline"
    G: int = schema.DEFAULT_G
    estimator: str = "grpo"
    top: int = 15
    max_points: int = 3000
    interval_sample: int = 40
    seed: int = 0

    def __post_init__(self) -> None:
        check_choice("plotly_js", self.plotly_js, PLOTLY_JS_MODES)
        for name in ("G", "top", "max_points", "interval_sample"):
            check_int(name, getattr(self, name), 1)
        check_int("seed", self.seed, 0)
        est.get(self.estimator)  # unknown names fail here, listing the registry


@dataclass
class RunData:
    """Everything a report reads about one run (analysis tables stored or computed in memory)."""

    run_id: str
    run: RunRecord
    stats: pl.DataFrame  # prompt_stats joined with the problems' text and metadata
    summary: pl.DataFrame
    allocation: pl.DataFrame
    grade_counts: list[dict]
    sample_info: dict
    group_sizes: list[int]
    G: int  # the group size used (the asked G, or the nearest analysed one)
    estimators: list[str]
    top_mass: pl.DataFrame | None = None  # weights rows with the largest mass at G
    computed: list[str] = field(default_factory=list)  # tables computed in memory
    observations: pa.Table | None = None  # the run's dataset's observations (profiles, training, labels)
    notes: list[str] = field(default_factory=list)
    verdict: verdicts.Verdict | None = None  # at G: its finish's, else computed once (``run_verdict``)

    @property
    def params(self) -> dict:
        return self.run.params or {}

    @property
    def versions(self) -> dict:
        return self.run.versions or {}

    @property
    def label(self) -> str:
        model = self.run.model or "?"
        return f"{self.run_id} ({model})"


def load_run(
    store: Store,
    run_id: str,
    config: ReportConfig | None = None,
    finished: finish.FinishedRun | None = None,
    verdict: verdicts.Verdict | None = None,
) -> RunData:
    """Read one run's tables; compute what is not stored in memory (never written back).

    The registry row is read here, so a report shows the run's status at the time it is rendered.
    ``finished``: what the run's finish computed, when the caller holds it: its record (marked
    done) and analysis are not read back. ``verdict``: the run's verdict computed with it, used
    where it is at the report's G (else computed from the report's tables, once: ``run_verdict``).

    Raises:
        StoreError: unknown run.
        ReportError: the run has neither analysis tables nor samples.
    """
    if not isinstance(store, Store):
        raise TypeError(f"load_run takes a pipeline.store.Store (Store.open(data_dir)), not {type(store).__name__}")
    config = config or ReportConfig()
    run = finished.run if finished is not None else store.get_run(run_id)
    grade_counts = store.named_query("grade_statuses", {"run_id": run_id}).to_pylist()
    sample_info = store.named_query("sample_info", {"run_id": run_id}).to_pylist()[0]
    if finished is not None:
        analysis, analysis_computed = finished.analysis, False
    else:
        analysis, analysis_computed = _analysis(store, run_id)
    computed = list(finish.ANALYSIS_TABLES) if analysis_computed else []
    notes: list[str] = []

    group_sizes = _group_sizes(analysis.prompt_stats)
    G = min(group_sizes, key=lambda g: (abs(g - config.G), g)) if group_sizes else config.G
    if G != config.G:
        notes.append(f"G = {config.G} was not analysed for this run; the report uses G = {G}.")
    spec = est.get(config.estimator).spec
    if analysis.weights.num_rows:  # in memory: computed, or the finish's
        top_mass = _top_mass_in_memory(analysis.weights, spec, G, config.top)
    else:
        top_mass = _top_mass_stored(store, run_id, spec, G, config.top)

    stats_df = _join_problems(store, run, analysis.prompt_stats, G, group_sizes)
    allocation_t = store.read_table("allocation", {"run_id": run_id})
    if allocation_t.num_rows == 0:
        allocation_t, note, ok = _default_allocation(run_id, analysis.prompt_stats)
        if ok:
            computed.append("allocation")
        notes.append(note)
    if computed:
        log.info("run %s: computed %s in memory for the report", run_id, ", ".join(computed))
    return RunData(
        run_id=run_id,
        run=run,
        stats=stats_df,
        summary=pl.from_arrow(analysis.summary),
        allocation=pl.from_arrow(allocation_t),
        grade_counts=grade_counts,
        sample_info=sample_info,
        group_sizes=group_sizes,
        G=G,
        estimators=_estimators(analysis.summary),
        top_mass=top_mass,
        computed=computed,
        notes=notes,
        observations=store.named_query("dataset_observations", {"dataset": run.dataset}),
        verdict=verdict if verdict is not None and verdict.G == G else None,
    )


def run_verdict(data: RunData) -> verdicts.Verdict:
    """The run's verdict (``pipeline.verdict``) at the report's G: the one handed over with the run,
    else computed from what the report read and kept on ``data``, so the block at the report's top
    and the rounds section (an adaptive run's savings, a simulation) share one computation."""
    if data.verdict is None:
        data.verdict = verdicts.verdict(
            data.run_id,
            data.stats.to_arrow(),
            data.summary.to_arrow(),
            G=data.G,
            allocation=data.allocation.to_arrow() if data.allocation.height else None,
            sample_info=data.sample_info,
            run=data.run,
        )
    return data.verdict


def summary_rows(summary: pl.DataFrame, section: str, **where) -> pl.DataFrame:
    """Rows of a summary table in one section, filtered by equality on the given columns."""
    df = summary.filter(pl.col("section") == section)
    for key, value in where.items():
        df = df.filter(pl.col(key) == value)
    return df


def metric(summary: pl.DataFrame, section: str, name: str, **where) -> float | None:
    """The value of one summary metric, or None when the summary lacks it."""
    df = summary_rows(summary, section, metric=name, **where)
    return df["value"][0] if df.height else None


def _analysis(store: Store, run_id: str) -> tuple[analyze.Analysis, bool]:
    """The run's analysis and whether it was computed (not stored)."""
    try:
        # A stored analysis's weights stay on disk: the report reads its top rows by query.
        return finish.analysis_of_run(store, run_id, weights=False)
    except StoreError as exc:
        if store.files("samples", {"run_id": run_id}):
            raise  # the samples exist but cannot be read: say why, not that they are missing
        raise ReportError(f"run {run_id!r} has no analysis tables and no samples to compute them from") from exc


def _default_allocation(run_id: str, stats_t: pa.Table) -> tuple[pa.Table, str, bool]:
    """The default allocation of the run's counts, a note saying what it is, and whether it worked."""
    # in prompt_id order, as ``finish.counts_from_samples`` gives them: ties of marginal gain go
    # to prompts in input order, so the same counts in the same order give the same allocation
    counts = stats_t.select(["prompt_id", "n", "c"]).sort_by("prompt_id")
    try:
        table, cfg = alloc.default_allocation(run_id, counts)
    except ValueError as exc:  # an impossible budget or bounds: show the reason, not a crash
        log.warning("allocation for the report failed: %s", exc)
        return schema.ALLOCATION.empty_table(), f"No allocation could be computed: {exc}", False
    what = f"{cfg.objective} of {est.get(cfg.estimator).spec}" if cfg.objective == "signal" else cfg.objective
    prior = "each prompt's Beta posterior" if cfg.posterior else "point estimates"
    note = (
        f"Computed for this report with the default policy: {cfg.budget:,} rollouts "
        f"({alloc.DEFAULT_BUDGET_PER_PROMPT} per prompt), between {cfg.n_min} and {cfg.n_max} per prompt, "
        f"{what} on {prior}."
    )
    return table, note, True


def _top_mass_stored(store: Store, run_id: str, estimator: str, G: int, top: int) -> pl.DataFrame | None:
    table = store.named_query("top_mass", {"run_id": run_id, "estimator": estimator, "G": G, "top": top})
    return pl.from_arrow(table) if table.num_rows else None


def _top_mass_in_memory(weights: pa.Table, estimator: str, G: int, top: int) -> pl.DataFrame | None:
    w = weights.filter(
        pc.and_(
            pc.equal(weights["estimator"].cast(pa.string()), estimator),
            pc.equal(weights["G"], G),
        )
    )
    if not w.num_rows:
        return None
    w = w.select(["prompt_id", "weight", "mass"]).cast(
        pa.schema([("prompt_id", pa.string()), ("weight", pa.float64()), ("mass", pa.float64())])
    )
    return pl.from_arrow(w).drop_nulls("mass").sort(["mass", "prompt_id"], descending=[True, False]).head(top)


def _group_sizes(stats_t: pa.Table) -> list[int]:
    col = stats_t.column("group_sizes").drop_null()
    return [int(g) for g in col[0].as_py()] if len(col) else []


def _estimators(summary_t: pa.Table) -> list[str]:
    names = summary_t.filter(pc.equal(summary_t["section"], "gradient_share")).column("estimator")
    seen: dict[str, None] = {}
    for name in names.to_pylist():
        if name is not None:
            seen.setdefault(name, None)
    return list(seen) or [est.get(s).spec for s in est.DEFAULT_ESTIMATORS]


def _join_problems(store: Store, run: RunRecord, stats_t: pa.Table, G: int, group_sizes: list[int]) -> pl.DataFrame:
    """prompt_stats with per-G columns at the chosen G and the problems' text and metadata."""
    df = pl.from_arrow(stats_t.drop_columns(["pass_at_k"]))
    j = group_sizes.index(G) if G in group_sizes else None
    for name in ("zero_signal", "silent_all_correct", "silent_all_wrong", "zero_signal_plugin"):
        expr = pl.col(name).list.get(j, null_on_oob=True) if j is not None else pl.lit(None)
        df = df.with_columns(expr.cast(pl.Float64).alias(f"{name}_G"))
    df = df.drop(["group_sizes", "zero_signal", "silent_all_correct", "silent_all_wrong", "zero_signal_plugin"])
    problems = schema.PROBLEMS.empty_table()
    dataset = run.dataset
    if dataset:
        try:
            problems = store.read_table("problems", {"dataset": dataset})
        except StoreError as exc:  # a dataset name unsafe as a path has no partition
            log.warning("problems of dataset %r unreadable: %s", dataset, exc)
    keep = ["prompt_id", "problem", "answer", "source", "domain", "topic", "difficulty", "prior_n", "prior_c"]
    prob = pl.from_arrow(problems.select(keep)).unique("prompt_id", keep="first")
    return df.join(prob, on="prompt_id", how="left")
