"""The profile flow: load, then per shard sample and grade, then analyze, allocate and report.

The stage work lives in plain functions (``prepare_run``, ``run_shard``, ``finish_run``) so the
same code runs under Prefect (``profile_flow``: one coarse task per shard of prompts, retried) or
called directly (``profile_direct``, used by the overhead benchmark and by tests). Every result goes
through the store, so a retried task, a rerun flow or a rerun after ``kill -9`` skips the shards
already written and never duplicates a sample.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline import allocate, analyze, datasets, grade, schema, store
from pipeline.sample import SamplingParams, make_sampler, template_for

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


@dataclass(frozen=True)
class ProfileConfig:
    """Everything that defines a profile run.

    Attributes:
        dataset: adapter name (default ``arithmetic``, the bundled set).
        data_file: local file or hub-layout folder instead of the hub.
        split: dataset split.
        limit: number of problems (default: 72 for the bundled set, all otherwise).
        backend: ``llamacpp``, ``vllm`` or ``openai``.
        model: model path or name (default: the backend's default, the bundled model on CPU).
        n: samples per problem.
        temperature, top_p, max_tokens, seed: sampling parameters.
        template_file: prompt template overriding the dataset's bundled one.
        shard_size: prompts per shard (the unit of work, retry and resume).
        grade_workers: math-verify worker processes.
        grade_timeout_s: per-item math-verify wall-clock limit.
        backend_options: extra options of the backend (threads, base_url, ...).
        report: write the HTML report at the end (when the report stage is installed).
        allocation_budget_factor: the default allocation spends this many rollouts per prompt.
    """

    dataset: str | None = "arithmetic"
    data_file: str | None = None
    split: str | None = None
    limit: int | None = None
    backend: str = "llamacpp"
    model: str | None = None
    n: int = 8
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 48
    seed: int = 0
    template_file: str | None = None
    shard_size: int = 256
    grade_workers: int = 2
    grade_timeout_s: float = 5.0
    backend_options: dict[str, Any] = field(default_factory=dict)
    report: bool = True
    allocation_budget_factor: int = 16
    executor: str = "local"  # local: shards in this process; ray: shards on Ray actors
    ray_address: str | None = None
    replicas: int = 1

    def __post_init__(self) -> None:
        if self.shard_size < 1:
            raise ValueError(f"shard_size={self.shard_size} must be >= 1")
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"limit={self.limit} must be >= 1")
        if self.allocation_budget_factor < 2:
            raise ValueError(f"allocation_budget_factor={self.allocation_budget_factor} must be >= 2")
        if self.executor not in ("local", "ray"):
            raise ValueError(f"executor={self.executor!r} is unknown: allowed local, ray")
        if self.replicas < 1:
            raise ValueError(f"replicas={self.replicas} must be >= 1")
        self.sampling()  # validates n, temperature, top_p, max_tokens, seed

    def sampling(self) -> SamplingParams:
        return SamplingParams(
            n=self.n, temperature=self.temperature, top_p=self.top_p,
            max_tokens=self.max_tokens, seed=self.seed,
        )

    def effective_limit(self) -> int | None:
        if self.limit is None and self.data_file is None and (self.dataset or "arithmetic") == "arithmetic":
            return 72
        return self.limit


@dataclass(frozen=True)
class RunPlan:
    """What ``prepare_run`` decided: the run, its problems and its shards."""

    run_id: str
    dataset: str
    model: str
    template: str
    problems: pa.Table  # gradable problems, in shard order
    shards: list[list[int]]  # row indices into ``problems`` per shard
    skipped: dict[str, int]  # problem status -> count not sampled


# --- samplers are expensive: one per process, reused by every shard ------------------------------

_SAMPLERS: dict[tuple, Any] = {}


def get_sampler(backend: str, model: str | None, options: dict[str, Any]):
    key = (backend, model, json.dumps(options, sort_keys=True, default=str))
    if key not in _SAMPLERS:
        _SAMPLERS[key] = make_sampler(backend, model, **options)
    return _SAMPLERS[key]


def close_samplers() -> None:
    while _SAMPLERS:
        _, sampler = _SAMPLERS.popitem()
        sampler.close()


# --- the stages, as plain functions ----------------------------------------------------------------


def _versions() -> dict[str, str]:
    out = {}
    for dist in ("difficulty-pipeline", "llama_cpp_python", "vllm", "math-verify", "prefect", "duckdb"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return out


def compute_run_id(dataset: str, model: str, backend: str, params: dict, template: str, prompt_ids: list[str]) -> str:
    """Hash of dataset, model, backend, sampling parameters, template and the prompt set."""
    blob = json.dumps(
        {
            "dataset": dataset, "model": model, "backend": backend, "params": params,
            "template": template,
            "prompts": hashlib.sha256("\n".join(prompt_ids).encode()).hexdigest(),
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def prepare_run(config: ProfileConfig, data_dir: Path, sampler=None) -> RunPlan:
    """Load the problems, store them, register the run and split it into shards."""
    result = datasets.load(
        config.dataset if config.data_file is None or config.dataset != "arithmetic" else None,
        data_file=config.data_file,
        split=config.split,
        limit=config.effective_limit(),
        seed=config.seed,
    )
    problems = result.problems
    if problems.num_rows == 0:
        raise datasets.DatasetError("the dataset has no problems")
    dataset = problems.column("dataset")[0].as_py()
    store.write_table(data_dir, "problems", problems, {"dataset": dataset})
    template = template_for(dataset, config.template_file)
    sampler = sampler or get_sampler(config.backend, config.model, config.backend_options)
    model = sampler.model_name
    ok = pc.equal(problems.column("status"), schema.PROBLEM_OK)
    gradable = problems.filter(ok)
    skipped = {k: v for k, v in result.status_counts.items() if k != schema.PROBLEM_OK}
    params = config.sampling().to_dict()
    run_id = compute_run_id(
        dataset, model, config.backend, params, template, gradable.column("prompt_id").to_pylist()
    )
    store.register_run(
        data_dir,
        {
            "run_id": run_id, "dataset": dataset, "model": model, "backend": config.backend,
            "params": {**params, "limit": config.effective_limit(), "shard_size": config.shard_size},
            "seed": config.seed, "prompt_template": template,
            "grader": grade.grader_version(_grade_config(config)),
            "versions": _versions(), "n_prompts": gradable.num_rows, "status": "sampling",
        },
    )
    shards = [
        list(range(start, min(start + config.shard_size, gradable.num_rows)))
        for start in range(0, gradable.num_rows, config.shard_size)
    ]
    return RunPlan(run_id, dataset, model, template, gradable, shards, skipped)


def _grade_config(config: ProfileConfig) -> grade.GradeConfig:
    return grade.GradeConfig(workers=config.grade_workers, timeout_s=config.grade_timeout_s)


def run_shard(config: ProfileConfig, data_dir: Path, plan: RunPlan, shard: int, sampler=None) -> int:
    """Sample and grade one shard and write it; a shard already written is skipped.

    Returns the number of samples written (0 when the shard was already done).
    """
    if shard in store.finished_shards(data_dir, plan.run_id):
        log.info("run %s shard %d already done", plan.run_id, shard)
        return 0
    problems = plan.problems.take(plan.shards[shard])
    params = config.sampling()
    sampler = sampler or get_sampler(config.backend, config.model, config.backend_options)
    total = problems.num_rows * params.n
    done = [0]

    def sampled(k: int) -> None:
        done[0] += k
        _progress("sample", done[0], total)

    samples = sampler.sample(problems, params, sampled, template=plan.template)
    gold = dict(zip(problems.column("prompt_id").to_pylist(), problems.column("answer").to_pylist()))
    items = samples.append_column("gold", pa.array([gold[p] for p in samples.column("prompt_id").to_pylist()], pa.string()))
    graded = grade.grade_table(items, _grade_config(config), progress=lambda k: _progress("grade", k, len(items)))
    graded = graded.drop_columns(["gold"]).append_column(
        "run_id", pa.array([plan.run_id] * graded.num_rows, pa.string())
    )
    store.write_shard(data_dir, plan.run_id, shard, graded)
    return graded.num_rows


def allocation_table(run_id: str, counts: pa.Table, objective: str = "signal", estimator: str = "grpo",
                     budget: int | None = None, n_min: int = 2, n_max: int = 64, posterior: bool = True,
                     method: str = "fast") -> tuple[pa.Table, allocate.Allocation]:
    """Allocate a rollout budget over a run's prompts and shape it as the ``allocation`` table."""
    n = counts.column("n").to_numpy()
    c = counts.column("c").to_numpy()
    budget = budget if budget is not None else 16 * len(n)
    cfg = allocate.AllocationConfig(
        budget=budget, objective=objective, estimator=estimator, n_min=n_min, n_max=n_max,
        posterior=posterior, method=method,
    )
    result = allocate.allocate(n, c, cfg)
    rows = len(n)
    table = pa.table(
        {
            "run_id": [run_id] * rows, "objective": [objective] * rows,
            "estimator": [estimator if objective == "signal" else None] * rows,
            "method": [method] * rows, "posterior": [posterior] * rows, "budget": [budget] * rows,
            "prompt_id": counts.column("prompt_id"), "p": result.p, "n_rollouts": result.n.astype(np.int32),
            "expected_value": result.value, "uniform_n": result.uniform_n.astype(np.int32),
            "uniform_value": result.uniform_value,
        }
    )
    return table, result


def finish_run(config: ProfileConfig, data_dir: Path, plan: RunPlan) -> dict[str, Any]:
    """Analyze the stored samples, write the analysis and allocation tables, and the report."""
    missing = set(range(len(plan.shards))) - store.finished_shards(data_dir, plan.run_id)
    if missing:
        raise RuntimeError(f"run {plan.run_id}: shards {sorted(missing)} are not finished")
    counts = analyze.counts_from_samples(data_dir, plan.run_id)
    result = analyze.analyze(counts, plan.run_id)
    partition = {"run_id": plan.run_id}
    for name in ("prompt_stats", "weights", "summary"):
        store.write_table(data_dir, name, getattr(result, name), partition)
    alloc, _ = allocation_table(plan.run_id, counts, budget=config.allocation_budget_factor * counts.num_rows,
                                n_max=max(64, config.allocation_budget_factor * 4))
    store.write_table(data_dir, "allocation", alloc, partition)
    report_path = None
    if config.report:
        report_path = _write_report(data_dir, plan.run_id)
    store.set_run_status(data_dir, plan.run_id, "done")
    return {"run_id": plan.run_id, "report": str(report_path) if report_path else None}


def _write_report(data_dir: Path, run_id: str) -> Path | None:
    try:
        from pipeline import report
    except ImportError:  # the report stage is optional at this point of the pipeline
        return None
    out = Path(data_dir) / "reports" / f"{run_id}.html"
    out.parent.mkdir(parents=True, exist_ok=True)
    return report.render_report(data_dir, run_id, out)


def profile_direct(config: ProfileConfig, data_dir: str | Path | None = None) -> dict[str, Any]:
    """Run the whole profile without Prefect (same stages, same store)."""
    data_dir = store.resolve_data_dir(data_dir)
    plan = prepare_run(config, data_dir)
    try:
        for shard in range(len(plan.shards)):
            run_shard(config, data_dir, plan, shard)
    except BaseException:
        store.set_run_status(data_dir, plan.run_id, "failed")
        raise
    return finish_run(config, data_dir, plan)


# --- Prefect ------------------------------------------------------------------------------------


def profile_flow_fn():
    """Build the Prefect flow lazily (importing Prefect costs about a second)."""
    from prefect import flow, task

    shard_task = task(
        run_shard, name="sample-and-grade-shard", retries=2, retry_delay_seconds=2,
        task_run_name="shard-{shard}", persist_result=False, cache_policy=None,
    )
    prepare_task = task(prepare_run, name="load-and-register", persist_result=False, cache_policy=None)
    finish_task = task(finish_run, name="analyze-allocate-report", persist_result=False, cache_policy=None)

    @flow(name="profile", flow_run_name="{run_label}", persist_result=False, log_prints=False)
    def profile(config: dict, data_dir: str, run_label: str = "profile") -> dict:
        cfg = ProfileConfig(**config)
        path = store.resolve_data_dir(data_dir)
        plan = prepare_task(cfg, path)
        try:
            for shard in range(len(plan.shards)):
                shard_task(cfg, path, plan, shard)
        except BaseException:
            store.set_run_status(path, plan.run_id, "failed")
            raise
        return finish_task(cfg, path, plan)

    return profile


def profile_flow(config: ProfileConfig, data_dir: str | Path | None = None) -> dict[str, Any]:
    """Run the profile as a Prefect flow (named ``<dataset>-<model>-<time>`` in Prefect)."""
    path = store.resolve_data_dir(data_dir)
    label = f"{config.dataset or 'local'}-{Path(config.model).name if config.model else config.backend}-" + datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
    return profile_flow_fn()(asdict(config), str(path), run_label=label)
