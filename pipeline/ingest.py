"""Rollouts people already have (verl or TRL training logs, eval dumps) become a run.

Each row carries a problem (or a prompt id), a gold answer and a completion. The rows are grouped
by prompt, numbered in file order, graded like sampled ones and stored as a run with backend
``import``, so analysis, SQL and reports work on it as on a sampled run.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, replace

import pyarrow as pa

from pipeline import datasets, grade, schema
from pipeline.errors import ConfigError, DatasetError
from pipeline.run import ProfileConfig, RunPlan, finish_run
from pipeline.store import Store

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ImportConfig:
    """Where the columns of an imported rollout file are.

    Attributes:
        input: JSON Lines or Parquet file.
        dataset: dataset name for the problems (default: ``import-<file stem>``).
        problem_col: column with the problem text (or None when only ids are given).
        prompt_id_col: column with a prompt id (used as is when given).
        answer_col: column with the gold answer.
        completion_col: column with the model's completion.
        model: model name recorded on the run.
        shard_size: rows of samples per stored shard.
    """

    input: str
    dataset: str | None = None
    problem_col: str | None = "problem"
    prompt_id_col: str | None = None
    answer_col: str = "answer"
    completion_col: str = "completion"
    model: str = "imported"
    shard_size: int = 50_000
    grade_workers: int = 2
    report: bool = True

    def __post_init__(self) -> None:
        if self.problem_col is None and self.prompt_id_col is None:
            raise ConfigError("give --problem-col or --prompt-id-col: rows need a problem or an id")
        if self.shard_size < 1:
            raise ConfigError(f"shard_size={self.shard_size} must be >= 1")


def import_rollouts(config: ImportConfig, store: Store) -> dict:
    """Grade and store a file of rollouts as a run with backend ``import``; returns run info."""
    raw = datasets.read_local(config.input)
    if config.problem_col == "problem" and "problem" not in raw.column_names and "question" in raw.column_names:
        config = replace(config, problem_col="question")  # GSM8K and DeepMath name it so
    needed = [c for c in (config.problem_col, config.prompt_id_col, config.answer_col, config.completion_col) if c]
    missing = [c for c in needed if c not in raw.column_names]
    if missing:
        raise DatasetError(
            f"{config.input}: missing column(s) {missing}; columns found: {raw.column_names} "
            "(map them with --problem-col, --prompt-id-col, --answer-col, --completion-col)"
        )
    dataset = config.dataset or datasets.local_name(config.input, prefix="import-")
    n = raw.num_rows
    problem = raw.column(config.problem_col).to_pylist() if config.problem_col else [None] * n
    if config.prompt_id_col:
        ids = [None if v is None else str(v) for v in raw.column(config.prompt_id_col).to_pylist()]
        for i, pid in enumerate(ids):
            if not pid:
                raise DatasetError(f"{config.input}: row {i} has an empty {config.prompt_id_col!r}")
    else:
        ids = [datasets.prompt_id(dataset, p or "") for p in problem]
    gold = [None if v is None else str(v).strip() for v in raw.column(config.answer_col).to_pylist()]
    if any(g and "####" in g for g in gold):  # GSM8K format: the gold is what follows ####
        gold = [datasets.gsm8k_gold(g) for g in gold]
    completion = [None if v is None else str(v) for v in raw.column(config.completion_col).to_pylist()]

    # One problems row per prompt (first occurrence), sample_idx in file order within a prompt.
    first: dict[str, int] = {}
    sample_idx = []
    seen_count: dict[str, int] = {}
    for i, pid in enumerate(ids):
        first.setdefault(pid, i)
        sample_idx.append(seen_count.get(pid, 0))
        seen_count[pid] = sample_idx[-1] + 1
    rows = list(first.values())
    problems = pa.table(
        {
            "dataset": [dataset] * len(rows),
            "split": [None] * len(rows),
            "prompt_id": [ids[i] for i in rows],
            "problem": [problem[i] for i in rows],
            "answer": [gold[i] for i in rows],
            "status": [
                schema.problem_status(problem[i], gold[i], needs_problem=bool(config.problem_col)) for i in rows
            ],
        }
    )
    store.write_table("problems", problems, {"dataset": dataset})
    digest = hashlib.sha256()
    for pid, c in zip(ids, completion, strict=False):
        digest.update(f"{pid}\x1f{c}\x1e".encode())
    run_id = "import-" + digest.hexdigest()[:12]
    grade_config = grade.GradeConfig(workers=config.grade_workers)
    store.register_run(
        {
            "run_id": run_id,
            "dataset": dataset,
            "model": config.model,
            "backend": "import",
            "params": {"input": str(config.input), "rows": n},
            "seed": 0,
            "prompt_template": None,
            "grader": grade.grader_version(grade_config),
            "versions": {},
            "n_prompts": len(rows),
            "status": "sampling",
        },
    )
    samples = pa.table(
        {
            "prompt_id": ids,
            "sample_idx": pa.array(sample_idx, pa.int32()),
            "completion": completion,
            "gold": gold,
        }
    )
    shards = []
    done = store.finished_shards(run_id)
    with grade.GradingPool(grade_config) as pool:  # workers start once, not once per shard
        for shard, start in enumerate(range(0, n, config.shard_size)):
            shards.append([])
            if shard in done:
                continue
            part = grade.grade_table(samples.slice(start, config.shard_size), grade_config, pool=pool)
            part = part.drop_columns(["gold"]).append_column("run_id", pa.array([run_id] * part.num_rows, pa.string()))
            store.write_shard(run_id, shard, part)
    plan = RunPlan(run_id, dataset, config.model, "", problems, shards, {})
    info = finish_run(ProfileConfig(report=config.report), store, plan)
    statuses = store.named_query("grade_statuses", {"run_id": run_id})
    info["grade_status"] = dict(
        sorted(zip(statuses.column("status").to_pylist(), statuses.column("n").to_pylist(), strict=True))
    )
    info["samples"] = n
    info["prompts"] = len(rows)
    return info
