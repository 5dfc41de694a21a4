"""The one graded-shard routine, the engines it uses, and the executors that run it.

A shard job (``ShardJob``) is self-contained: the shard's problems with the sample indices each
gets, the template and the plan's digest. Whatever produces its samples (a sampler for a profile,
a stored run for a regrade, a file of rollouts for an import), ``grade_samples`` joins the gold
answers, grades and tags them, and ``write_graded_shard`` checks them against the job and writes
one atomic file. Every executor implements one method, ``write_shard(store, job) -> int``:
``InlineExecutor`` here (this process), or the Ray actor pool of ``pipeline.flows.ray_exec``
(each actor writes its own shards to the data directory).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from typing import Any, Protocol, Self

import pyarrow as pa

from pipeline import analyze, grade
from pipeline.errors import PipelineError, StoreError
from pipeline.run import progress
from pipeline.run.config import ProfileConfig
from pipeline.run.plan import RunPlan, pending_shards
from pipeline.sample import SamplingParams, make_sampler
from pipeline.store import Store, conform

log = logging.getLogger(__name__)


def _progress(shard: int, stage: str, done: int) -> None:
    counter = progress.current()
    if counter is not None:
        counter.update(shard, stage, done)


# --- engines are expensive: one per process, reused by every shard and run -------------------------

_ENGINES: dict[tuple, Any] = {}
_ENGINES_LOCK = threading.Lock()


def get_sampler(backend: str, model: str | None, options: dict[str, Any]):
    """The process's sampler for this backend, model and options (loaded once)."""
    key = (backend, model, json.dumps(options, sort_keys=True, default=str))
    with _ENGINES_LOCK:
        if key not in _ENGINES:
            _ENGINES[key] = make_sampler(backend, model, **options)
        return _ENGINES[key]


def get_grading_pool(config: grade.GradeConfig) -> grade.GradingPool:
    """The process's math-verify workers, kept across shards (each start costs about a second)."""
    key = ("grade", config.workers, config.timeout_s)
    with _ENGINES_LOCK:
        if key not in _ENGINES:
            _ENGINES[key] = grade.GradingPool(config)
        return _ENGINES[key]


def close_engines() -> None:
    """Free the cached samplers (models) and grading workers of this process."""
    with _ENGINES_LOCK:
        while _ENGINES:
            _, engine = _ENGINES.popitem()
            engine.close()


# --- one shard's job -----------------------------------------------------------------------------

# Columns a job adds to its problems: which sample indices each prompt gets (``first_idx ..
# first_idx + n_samples - 1``). They travel with the problems, so every executor samples exactly
# the plan's indices.
FIRST_IDX, N_SAMPLES = "first_idx", "n_samples"


@dataclass(frozen=True)
class ShardJob:
    """One shard's work, self-contained: what an executor's worker needs to produce, grade, check
    and write it where the driver cannot (a Ray actor on another machine)."""

    run_id: str
    shard: int
    digest: str  # the plan's digest of this shard, written into the file's footer
    problems: pa.Table  # the shard's problems with FIRST_IDX and N_SAMPLES columns
    template: str

    def expected(self) -> list[tuple[str, int]]:
        ids = self.problems.column("prompt_id").to_pylist()
        firsts = self.problems.column(FIRST_IDX).to_pylist()
        counts = self.problems.column(N_SAMPLES).to_pylist()
        pairs = zip(ids, firsts, counts, strict=True)
        return sorted((pid, first + k) for pid, first, count in pairs for k in range(count))


def shard_job(plan: RunPlan, shard: int) -> ShardJob:
    problems = plan.problems.take(plan.shards[shard])
    entries = plan.entries[shard]
    problems = problems.append_column(FIRST_IDX, pa.array([first for _, first, _ in entries], pa.int64()))
    problems = problems.append_column(N_SAMPLES, pa.array([count for _, _, count in entries], pa.int64()))
    return ShardJob(plan.run_id, shard, plan.digests[shard], problems, plan.template)


def grade_samples(samples: pa.Table, job: ShardJob, config: grade.GradeConfig) -> pa.Table:
    """A shard's samples graded against its problems' gold answers and tagged with the run id
    (``samples`` rows; nothing is written). Touches no store, so it runs where the data is not."""
    gold = dict(
        zip(job.problems.column("prompt_id").to_pylist(), job.problems.column("answer").to_pylist(), strict=True)
    )
    ids = samples.column("prompt_id").to_pylist()
    unknown = sorted({p for p in ids if p not in gold})
    if unknown:
        raise PipelineError(f"run {job.run_id} shard {job.shard}: samples of prompts {unknown[:3]} not in the shard")
    items = samples.append_column("gold", pa.array([gold[p] for p in ids], pa.string()))
    graded = grade.grade_table(
        items, config, pool=get_grading_pool(config), progress=lambda k: _progress(job.shard, progress.GRADE, k)
    )
    return graded.drop_columns(["gold"]).append_column("run_id", pa.array([job.run_id] * graded.num_rows, pa.string()))


def check_shard(job: ShardJob, graded: pa.Table) -> None:
    """A shard's samples are exactly its plan's (prompt, index) pairs, once each."""
    want = job.expected()
    got = sorted(zip(graded.column("prompt_id").to_pylist(), graded.column("sample_idx").to_pylist(), strict=True))
    if got != want:
        raise PipelineError(
            f"run {job.run_id} shard {job.shard}: the executor returned {len(got)} samples that are not the "
            f"plan's {len(want)} (prompt, sample index) pairs"
        )


def write_graded_shard(store: Store, job: ShardJob, graded: pa.Table) -> int:
    """Check a graded shard against its job and write it (one atomic file, with its answer
    counts); returns the samples written."""
    check_shard(job, graded)
    graded = conform(graded, "samples")  # the columns the answer counts read, as the shard stores them
    counts = analyze.answer_counts(job.run_id, job.shard, graded)
    store.write_shard(job.run_id, job.shard, graded, digest=job.digest, answer_counts=counts)
    return graded.num_rows


# --- sampling ------------------------------------------------------------------------------------


def _sample_batches(problems: pa.Table, params: SamplingParams) -> list[tuple[pa.Table, SamplingParams]]:
    """The problems split by their (first sample index, count), in order of first appearance, each
    with its sampling parameters; without the plan columns every prompt gets ``params.n`` from 0."""
    if FIRST_IDX not in problems.column_names:
        return [(problems, params)]
    firsts = problems.column(FIRST_IDX).to_pylist()
    counts = problems.column(N_SAMPLES).to_pylist()
    rows: dict[tuple[int, int], list[int]] = {}
    for i, key in enumerate(zip(firsts, counts, strict=True)):
        rows.setdefault(key, []).append(i)
    bare = problems.drop_columns([FIRST_IDX, N_SAMPLES])
    if len(rows) == 1:
        [(first, count)] = rows
        return [(bare, replace(params, n=count, first_idx=first))]
    return [(bare.take(idx), replace(params, n=count, first_idx=first)) for (first, count), idx in rows.items()]


def sample_job(config: ProfileConfig, job: ShardJob, sampler=None) -> pa.Table:
    """Sample a shard's problems at its plan's sample indices (ungraded ``samples`` rows)."""
    engine = config.engine
    sampler = sampler or get_sampler(engine.backend, engine.model, engine.backend_options)
    batches = _sample_batches(job.problems, config.sampling.params())
    done = [0]

    def sampled(k: int) -> None:
        done[0] += k
        _progress(job.shard, progress.SAMPLE, done[0])

    together = getattr(sampler, "sample_batches", None)  # an engine that takes them in one call (vLLM)
    if together is not None and len(batches) > 1:
        return together(batches, sampled, template=job.template)
    parts = [sampler.sample(sub, p, sampled, template=job.template) for sub, p in batches]
    return pa.concat_tables(parts) if len(parts) != 1 else parts[0]


def sample_and_grade(config: ProfileConfig, job: ShardJob, sampler=None) -> pa.Table:
    """Sample and grade one shard (nothing is written): what every profile executor runs."""
    return grade_samples(sample_job(config, job, sampler), job, config.grading)


# --- executors -----------------------------------------------------------------------------------


class Executor(Protocol):
    """Runs shard jobs; safe to call from several threads."""

    model_name: str
    concurrency: int  # how many shards it can usefully run at once

    def write_shard(self, store: Store, job: ShardJob) -> int:
        """Produce, grade, check and write the job's shard; returns the samples written."""
        ...


class InlineExecutor:
    """Shards in this process, one at a time: ``produce(job)`` gives each shard's ungraded samples
    (a sampler, a stored run, a file of rollouts), graded here with ``grading``. Leaving the
    ``with`` block frees the process's engines (models and grading workers)."""

    concurrency = 1

    def __init__(self, model_name: str, produce: Callable[[ShardJob], pa.Table], grading: grade.GradeConfig) -> None:
        self.model_name = model_name
        self._produce = produce
        self._grading = grading
        self._lock = threading.Lock()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        # Freed now: left to interpreter shutdown, llama.cpp's finaliser runs after its library
        # is unloaded and prints a traceback (served runs).
        close_engines()

    def write_shard(self, store: Store, job: ShardJob) -> int:
        with self._lock:
            return write_graded_shard(store, job, grade_samples(self._produce(job), job, self._grading))


def local_executor(config: ProfileConfig) -> InlineExecutor:
    """The profile's executor in this process: the config's sampler (loaded now, so a model that
    does not exist fails before any work)."""
    engine = config.engine
    sampler = get_sampler(engine.backend, engine.model, engine.backend_options)
    return InlineExecutor(sampler.model_name, lambda job: sample_job(config, job, sampler), config.grading)


def run_shard(store: Store, plan: RunPlan, shard: int, executor: Executor) -> int:
    """Run one shard through the executor; a shard already written is skipped. Returns the samples
    written (0 when the shard was already done)."""
    if store.shard_digest(plan.run_id, shard) == plan.digests[shard]:
        log.info("run %s shard %d already done", plan.run_id, shard)
        return 0
    counter = progress.current()  # the run's display, if one is drawn
    try:
        written = executor.write_shard(store, shard_job(plan, shard))
    except BaseException:
        if counter is not None:
            counter.shard_failed(shard)
        raise
    if store.shard_digest(plan.run_id, shard) != plan.digests[shard]:
        if counter is not None:
            counter.shard_failed(shard)
        raise StoreError(
            f"run {plan.run_id} shard {shard} was written by a worker but is not in {store.root} as this "
            "process sees it: every node must reach the same data directory (an s3:// one, or a shared folder)"
        )
    if counter is not None:
        counter.shard_done(shard)
    return written


def run_pending_shards(store: Store, plan: RunPlan, executor: Executor) -> int:
    """Run every pending shard, ``executor.concurrency`` at a time; every shard gets its chance
    before the first failure is raised. Returns the samples written."""
    pending = pending_shards(store, plan)
    if executor.concurrency <= 1:
        return sum(run_shard(store, plan, s, executor) for s in pending)
    with ThreadPoolExecutor(max_workers=executor.concurrency) as pool:
        futures = [pool.submit(run_shard, store, plan, s, executor) for s in pending]
        wait(futures)
        return sum(f.result() for f in futures)
