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
from pipeline.checks import check_int
from pipeline.errors import ConfigError, DatasetError
from pipeline.result import ProfileResult, conclude
from pipeline.run import (
    InlineExecutor,
    RunPlan,
    ShardEntries,
    ShardJob,
    finish_stored_run,
    run_pending_shards,
    save_plan,
    working_on,
)
from pipeline.store import RunRecord, Store

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
        grade_workers: math-verify worker processes.
        grade_timeout_s: seconds math-verify may spend on one answer before it is graded
            ``timeout`` (0 < grade_timeout_s <= ``grade.MAX_TIMEOUT_S``; ``GradeConfig`` checks it).
        report: write the HTML report of the run.
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
    grade_timeout_s: float = grade.GradeConfig.timeout_s
    report: bool = True

    def __post_init__(self) -> None:
        if self.problem_col is None and self.prompt_id_col is None:
            raise ConfigError("give --problem-col or --prompt-id-col: rows need a problem or an id")
        check_int("shard_size", self.shard_size, 1)
        grade.check_workers(self.grade_workers, "grade_workers")
        grade.check_timeout(self.grade_timeout_s, "grade_timeout_s")

    def grading(self) -> grade.GradeConfig:
        """The grading stage's settings."""
        return grade.GradeConfig(workers=self.grade_workers, timeout_s=self.grade_timeout_s)


def _text_column(raw: pa.Table, column: str, origin: str) -> list[str | None]:
    """A column as text (numbers as text, NaN as missing; a list is a ``DatasetError``)."""
    return [
        datasets.cell_text(v, origin=origin, column=column, row=i) for i, v in enumerate(raw.column(column).to_pylist())
    ]


def _check_same_prompt(
    origin: str, ids: list[str], problem: list[str | None], gold: list[str | None], by_text: bool
) -> dict[str, int]:
    """The first row of each prompt id; ``DatasetError`` when rows of one id disagree.

    Several rows of one id are several rollouts of one prompt, so they must carry the same problem
    (whitespace aside) and the same gold answer. Two problems under one id would be merged into one
    prompt with the pooled n and c of both, and silently: the file's ids are wrong.
    """
    first: dict[str, int] = {}
    for i, pid in enumerate(ids):
        j = first.setdefault(pid, i)
        if j == i:
            continue
        if by_text and datasets.normalize_problem(problem[i] or "") != datasets.normalize_problem(problem[j] or ""):
            raise DatasetError(
                f"{origin}: prompt id {pid!r} has two different problems: row {j} {(problem[j] or '')[:80]!r} "
                f"and row {i} {(problem[i] or '')[:80]!r}; rows of one prompt id must share its problem "
                "(give each problem its own id, or leave --prompt-id-col out to derive ids from the text)"
            )
        if (gold[i] or None) != (gold[j] or None):  # empty and missing are the same empty answer
            raise DatasetError(
                f"{origin}: prompt id {pid!r} has two different gold answers: row {j} {gold[j]!r} and "
                f"row {i} {gold[i]!r}; rows of one prompt must share its gold answer"
            )
    return first


def import_rollouts(config: ImportConfig, store: Store) -> ProfileResult:
    """Grade and store a file of rollouts as a run with backend ``import``; returns it finished
    (``result.ProfileResult``, with its verdict and report), its ``details`` the ``grade_status``
    counts, ``samples`` and ``prompts``.

    Raises:
        DatasetError: the file cannot be read, a column is missing, a cell is not text, or two rows
            of one prompt id carry different problems or gold answers (names the file and rows).
    """
    raw = datasets.read_local(config.input)
    origin = repr(str(config.input))
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
    problem = _text_column(raw, config.problem_col, origin) if config.problem_col else [None] * n
    if config.prompt_id_col:
        ids = _text_column(raw, config.prompt_id_col, origin)
        for i, pid in enumerate(ids):
            if not pid:
                raise DatasetError(f"{config.input}: row {i} has an empty {config.prompt_id_col!r}")
    else:
        ids = [datasets.prompt_id(dataset, p or "") for p in problem]
    gold = [None if g is None else g.strip() for g in _text_column(raw, config.answer_col, origin)]
    if any(g and "####" in g for g in gold):  # GSM8K format: the gold is what follows ####
        gold = [datasets.gsm8k_gold(g) for g in gold]
    completion = _text_column(raw, config.completion_col, origin)

    # One problems row per prompt (first occurrence), sample_idx in file order within a prompt.
    first = _check_same_prompt(origin, ids, problem, gold, by_text=bool(config.problem_col))
    sample_idx = []
    seen_count: dict[str, int] = {}
    for pid in ids:
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
    store.add_problems(problems, dataset)
    digest = hashlib.sha256()
    for pid, c in zip(ids, completion, strict=False):
        digest.update(f"{pid}\x1f{c}\x1e".encode())
    run_id = "import-" + digest.hexdigest()[:12]
    grade_config = config.grading()
    store.register_run(
        RunRecord(
            run_id,
            dataset=dataset,
            model=config.model,
            backend="import",
            params={"input": str(config.input), "rows": n},
            seed=0,
            grader=grade.grader_version(grade_config),
            versions={},
            n_prompts=len(rows),
            status="sampling",
        )
    )
    samples = pa.table(
        {
            "prompt_id": ids,
            "sample_idx": pa.array(sample_idx, pa.int32()),
            "completion": completion,
        }
    )
    starts = list(range(0, n, config.shard_size))
    plan = RunPlan.build(
        run_id,
        [
            _entries(ids[start : start + config.shard_size], sample_idx[start : start + config.shard_size])
            for start in starts
        ],
        problems,
        dataset=dataset,
        model=config.model,
        template="",
        skipped={},
    )
    save_plan(store, plan)

    def file_rows(job: ShardJob) -> pa.Table:  # shard s holds rows s * shard_size onwards, in file order
        return samples.slice(starts[job.shard], config.shard_size)

    with working_on(store, run_id), InlineExecutor(config.model, file_rows, grade_config) as executor:
        run_pending_shards(store, plan, executor)
        finished = finish_stored_run(store, plan)
    statuses = store.named_query("grade_statuses", {"run_id": run_id})
    details = {
        "grade_status": dict(
            sorted(zip(statuses.column("status").to_pylist(), statuses.column("n").to_pylist(), strict=True))
        ),
        "samples": n,
        "prompts": len(rows),
    }
    return conclude(store, finished, report=config.report, details=details)


def _entries(ids: list[str], sample_idx: list[int]) -> ShardEntries:
    """What a slice of rollout rows holds: per prompt (in first-seen order) its first index and
    count; a prompt's indices within one slice are consecutive, as they are numbered in file order."""
    first: dict[str, int] = {}
    count: dict[str, int] = {}
    for pid, idx in zip(ids, sample_idx, strict=True):
        first.setdefault(pid, idx)
        count[pid] = count.get(pid, 0) + 1
    return [(pid, first[pid], count[pid]) for pid in first]
