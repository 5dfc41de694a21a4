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
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

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


# Sized for the bundled 135M model on 2 CPU cores: short numeric answers, a temperature that
# keeps easy tiers near 1 and hard tiers near 0, and few enough problems to finish in minutes.
BUNDLED_DEFAULTS: dict[str, Any] = {"temperature": 0.7, "max_tokens": 24, "limit": 45}
# Real datasets: the usual RL rollout temperature and room for a worked solution.
GENERIC_DEFAULTS: dict[str, Any] = {"temperature": 1.0, "max_tokens": 1024, "limit": None}


@dataclass(frozen=True)
class ProfileConfig:
    """Everything that defines a profile run.

    Attributes:
        dataset: adapter name (default ``arithmetic``, the bundled set).
        data_file: local file or hub-layout folder instead of the hub.
        split: dataset split.
        limit: number of problems (default: 45 for the bundled set, all otherwise).
        backend: ``llamacpp``, ``vllm`` or ``openai``.
        model: model path or name (default: the backend's default, the bundled model on CPU).
        n: samples per problem.
        temperature, top_p, max_tokens, seed: sampling parameters; temperature and max_tokens
            default to ``BUNDLED_DEFAULTS`` on the bundled set and ``GENERIC_DEFAULTS`` otherwise.
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
    allocation_budget_factor: int = 16
    executor: str = "local"  # local: shards in this process; ray: shards on Ray actors
    ray_address: str | None = None
    replicas: int = 1

    def __post_init__(self) -> None:
        defaults = BUNDLED_DEFAULTS if self.is_bundled() else GENERIC_DEFAULTS
        for name in ("temperature", "max_tokens", "limit"):
            if getattr(self, name) is None and defaults.get(name) is not None:
                object.__setattr__(self, name, defaults[name])
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
            n=self.n,
            temperature=self.temperature,
            top_p=self.top_p,
            max_tokens=self.max_tokens,
            seed=self.seed,
        )

    def is_bundled(self) -> bool:
        """True for the bundled arithmetic set (no data file)."""
        return self.data_file is None and (self.dataset or "arithmetic") == "arithmetic"


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


def get_grading_pool(config: ProfileConfig) -> grade.GradingPool:
    """The process's math-verify workers, kept across shards (each start costs about a second)."""
    cfg = _grade_config(config)
    key = ("grade", cfg.workers, cfg.timeout_s)
    if key not in _SAMPLERS:
        _SAMPLERS[key] = grade.GradingPool(cfg)
    return _SAMPLERS[key]


def close_samplers() -> None:
    """Free the cached samplers (models) and grading workers of this process."""
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


def prepare_run(config: ProfileConfig, data_dir: Path, sampler=None) -> RunPlan:
    """Load the problems, store them, register the run and split it into shards.

    The sampler comes first, so a model path that does not exist fails before any work.
    """
    sampler = sampler or get_sampler(config.backend, config.model, config.backend_options)
    result = datasets.load(
        config.dataset if config.data_file is None or config.dataset != "arithmetic" else None,
        data_file=config.data_file,
        split=config.split,
        limit=config.limit,
        seed=config.seed,
    )
    problems = result.problems
    if problems.num_rows == 0:
        raise datasets.DatasetError("the dataset has no problems")
    dataset = problems.column("dataset")[0].as_py()
    template = template_for(dataset, config.template_file)
    store.write_table(data_dir, "problems", problems, {"dataset": dataset})
    model = sampler.model_name
    ok = pc.equal(problems.column("status"), schema.PROBLEM_OK)
    gradable = problems.filter(ok)
    skipped = {k: v for k, v in result.status_counts.items() if k != schema.PROBLEM_OK}
    params = config.sampling().to_dict()
    run_id = compute_run_id(dataset, model, config.backend, params, template, gradable.column("prompt_id").to_pylist())
    store.register_run(
        data_dir,
        {
            "run_id": run_id,
            "dataset": dataset,
            "model": model,
            "backend": config.backend,
            "params": {**params, "limit": config.limit, "shard_size": config.shard_size},
            "seed": config.seed,
            "prompt_template": template,
            "grader": grade.grader_version(_grade_config(config)),
            "versions": _versions(),
            "n_prompts": gradable.num_rows,
            "status": "sampling",
        },
    )
    shards = [
        list(range(start, min(start + config.shard_size, gradable.num_rows)))
        for start in range(0, gradable.num_rows, config.shard_size)
    ]
    return RunPlan(run_id, dataset, model, template, gradable, shards, skipped)


def _grade_config(config: ProfileConfig) -> grade.GradeConfig:
    return grade.GradeConfig(workers=config.grade_workers, timeout_s=config.grade_timeout_s)


def sample_and_grade(config: ProfileConfig, problems: pa.Table, template: str, run_id: str, sampler=None) -> pa.Table:
    """Sample and grade a batch of problems; returns ``samples`` rows (nothing is written).

    This is the unit of work an executor runs: in this process (``run_shard``) or on a Ray actor
    (``pipeline.flows.ray_exec``). It touches no store, so it can run on a machine without the
    data directory.
    """
    params = config.sampling()
    sampler = sampler or get_sampler(config.backend, config.model, config.backend_options)
    total = problems.num_rows * params.n
    done = [0]

    def sampled(k: int) -> None:
        done[0] += k
        _progress("sample", done[0], total)

    samples = sampler.sample(problems, params, sampled, template=template)
    gold = dict(zip(problems.column("prompt_id").to_pylist(), problems.column("answer").to_pylist(), strict=True))
    items = samples.append_column(
        "gold", pa.array([gold[p] for p in samples.column("prompt_id").to_pylist()], pa.string())
    )
    graded = grade.grade_table(
        items,
        _grade_config(config),
        pool=get_grading_pool(config),
        progress=lambda k: _progress("grade", k, len(items)),
    )
    return graded.drop_columns(["gold"]).append_column("run_id", pa.array([run_id] * graded.num_rows, pa.string()))


def run_shard(config: ProfileConfig, data_dir: Path, plan: RunPlan, shard: int, sampler=None) -> int:
    """Sample and grade one shard and write it; a shard already written is skipped.

    Returns the number of samples written (0 when the shard was already done).
    """
    if shard in store.finished_shards(data_dir, plan.run_id):
        log.info("run %s shard %d already done", plan.run_id, shard)
        return 0
    graded = sample_and_grade(config, plan.problems.take(plan.shards[shard]), plan.template, plan.run_id, sampler)
    store.write_shard(data_dir, plan.run_id, shard, graded)
    return graded.num_rows


def pending_shards(data_dir: Path, plan: RunPlan) -> list[int]:
    """Shards of the plan not written yet (what a rerun still has to do)."""
    done = store.finished_shards(data_dir, plan.run_id)
    return [s for s in range(len(plan.shards)) if s not in done]


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
    # The default allocation: GRPO's expected signal on each prompt's Beta posterior.
    alloc_config = allocate.AllocationConfig(
        budget=config.allocation_budget_factor * counts.num_rows,
        n_max=max(64, config.allocation_budget_factor * 4),
        posterior=True,
    )
    counts_n, counts_c = counts.column("n").to_numpy(), counts.column("c").to_numpy()
    table, _ = allocate.allocate_prompts(plan.run_id, counts.column("prompt_id"), counts_n, counts_c, alloc_config)
    store.write_table(data_dir, "allocation", table, partition)
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
    if config.executor == "ray":
        from pipeline.flows import ray_exec

        with ray_exec.ShardPool(config) as pool:
            plan = prepare_run(config, data_dir, sampler=pool)
            with _failed_on_error(data_dir, plan.run_id):
                pool.run_all(data_dir, plan, pending_shards(data_dir, plan))
    else:
        plan = prepare_run(config, data_dir)
        with _failed_on_error(data_dir, plan.run_id):
            for shard in pending_shards(data_dir, plan):
                run_shard(config, data_dir, plan, shard)
    return finish_run(config, data_dir, plan)


@contextmanager
def _failed_on_error(data_dir: Path, run_id: str):
    """Mark the run failed in the registry when sampling stops with an error."""
    try:
        yield
    except BaseException:
        store.set_run_status(data_dir, run_id, "failed")
        raise


# --- Prefect ------------------------------------------------------------------------------------


def run_label(config: ProfileConfig | dict, run_id: str | None = None) -> str:
    """The Prefect flow run name: ``<dataset>/<model>/<run id>`` (``pending`` before it is known)."""
    cfg = config if isinstance(config, dict) else asdict(config)
    dataset = cfg.get("dataset") or (Path(cfg["data_file"]).stem if cfg.get("data_file") else "local")
    model = Path(cfg["model"]).name if cfg.get("model") else f"{cfg.get('backend', 'llamacpp')}-default"
    return f"{dataset}/{model}/{run_id or 'pending'}"


def prefect_settings(**extra: Any):
    """Settings that make an interactive flow run cheap, as a context manager.

    Turns off the flow-run heartbeat (its thread costs about a second per flow run, and a
    profile is watched by the user anyway) and result persistence (results live in the store),
    and gives the ephemeral API server time to start on a busy machine. Served (scheduled) runs
    keep Prefect's defaults: there, heartbeats detect crashed runs.
    """
    from prefect.settings import (
        PREFECT_FLOWS_HEARTBEAT_FREQUENCY,
        PREFECT_RESULTS_PERSIST_BY_DEFAULT,
        PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS,
        temporary_settings,
    )

    updates = {PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None, PREFECT_RESULTS_PERSIST_BY_DEFAULT: False}
    if PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS.value() < 90:
        updates[PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS] = 90
    updates.update(extra)
    return temporary_settings(updates=updates)


def profile_flow_fn():
    """The Prefect ``profile`` flow object (imported lazily: importing Prefect takes seconds)."""
    from pipeline.flows import prefect_flows

    return prefect_flows.profile


def profile_flow(config: ProfileConfig, data_dir: str | Path | None = None) -> dict[str, Any]:
    """Run the profile as a Prefect flow (named ``<dataset>/<model>/<run id>`` in Prefect)."""
    path = store.resolve_data_dir(data_dir)
    flow = profile_flow_fn()
    with prefect_settings():
        return flow(config=asdict(config), data_dir=str(path))
