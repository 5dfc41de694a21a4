"""Grading: answer extraction, an exact numeric fast path, and math-verify in a killable pool.

A completion is graded in three steps:

1. **Extraction** (in the calling process, cheap): the last ``\\boxed{...}`` / ``\\fbox{...}``
   (balanced braces, nesting allowed), else the text after the last ``####``, else the last number
   in the text. Scans are bounded so a 1 MB completion costs milliseconds.
2. **Numeric fast path** (in the calling process): when the gold answer and the extracted answer
   both read as plain numbers (integers, decimals, ``a/b``, ``\\frac{a}{b}``, with ``,`` thousands
   separators, ``$`` and ``%`` stripped), they are compared exactly as fractions.
3. **math-verify** for everything else, gold first: ``verify(parse(gold), parse(pred))``. It runs
   in worker processes (its timeouts rely on ``signal``, which only works in a main thread). Each
   item has a soft deadline (a ``SIGALRM`` raised inside the worker) and a hard deadline: a worker
   that does not answer in time is killed and replaced, and its other items are re-queued, so one
   pathological item can neither hang the stage nor stall the rest.

Every row gets one of the statuses in :data:`pipeline.schema.GRADE_STATUSES` and a short reason;
rows are never dropped and keep their order.

Modules: :mod:`pipeline.grade.extract` (steps 1 and 2, :class:`GradeConfig`, pure code),
:mod:`pipeline.grade.pool` (step 3: the worker processes and :class:`GradingPool`) and this one
(:func:`grade_table`, which glues them together, and the public names re-exported). Importing the
package must stay light: worker processes import it to start, so nothing here imports pyarrow
(or :mod:`pipeline.schema`, which does) at module level.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from pipeline.grade.extract import (
    BOXED_SCAN_CHARS,
    BOXED_TRIES,
    CORRECT,
    ERROR,
    GRADER_NAME,
    HARD_GRACE_FRACTION,
    HARD_GRACE_MIN_S,
    INCORRECT,
    MAX_ANSWER_CHARS,
    STATUSES,
    TIMEOUT,
    UNPARSED,
    GradeConfig,
    _normalise_string,
    extract_answer,
    grader_version,
    parse_number,
)
from pipeline.grade.pool import (
    CHECK_TIMEOUT_S,
    GOLD_CACHE_SIZE,
    MAX_BATCH_BYTES,
    MAX_START_FAILURES,
    WORKER_START_TIMEOUT_S,
    GradeFn,
    GradingPool,
    math_verify_grade,
)

__all__ = [
    # pipeline.grade.extract
    "BOXED_SCAN_CHARS",
    "BOXED_TRIES",
    "CORRECT",
    "ERROR",
    "GRADER_NAME",
    "HARD_GRACE_FRACTION",
    "HARD_GRACE_MIN_S",
    "INCORRECT",
    "MAX_ANSWER_CHARS",
    "STATUSES",
    "TIMEOUT",
    "UNPARSED",
    "GradeConfig",
    "extract_answer",
    "grader_version",
    "parse_number",
    # pipeline.grade.pool
    "CHECK_TIMEOUT_S",
    "GOLD_CACHE_SIZE",
    "MAX_BATCH_BYTES",
    "MAX_START_FAILURES",
    "WORKER_START_TIMEOUT_S",
    "GradeFn",
    "GradingPool",
    "math_verify_grade",
    # this module
    "OUTPUT_COLUMNS",
    "grade_table",
]

if TYPE_CHECKING:
    import pyarrow as pa

logger = logging.getLogger(__name__)

OUTPUT_COLUMNS = ("extracted_answer", "grade_status", "grade_reason", "correct", "grader")


# --------------------------------------------------------------------------- table API


def _column(items: pa.Table, *names: str) -> list[Any]:
    for name in names:
        if name in items.column_names:
            return items.column(name).to_pylist()
    raise ValueError(f"items table needs a column {names[0]!r}; it has {items.column_names}")


def grade_table(
    items: pa.Table,
    config: GradeConfig | None = None,
    progress: Callable[[int], None] | None = None,
    pool: GradingPool | None = None,
) -> pa.Table:
    """Grades every row of ``items``; row order and count are preserved.

    Identical ``(gold, extracted answer)`` pairs are graded once. Numeric pairs are compared
    exactly in this process; the rest go to math-verify workers (or exact string matching when
    ``config.use_math_verify`` is False).

    Args:
        items: Table with columns ``prompt_id``, ``sample_idx``, ``completion`` and ``gold``
            (``answer`` is accepted in place of ``gold``); other columns are kept.
        config: Grading settings; defaults to ``GradeConfig()``.
        progress: Called with the cumulative number of rows graded so far (for a progress bar).
        pool: A running :class:`GradingPool` to reuse; otherwise one is started if needed.

    Returns:
        ``items`` with ``extracted_answer``, ``grade_status``, ``grade_reason``, ``correct`` and
        ``grader`` set (replaced if present). ``correct`` is True only for status ``correct``.
    """
    import pyarrow as pa

    config = config or GradeConfig()
    started = time.perf_counter()
    completions = _column(items, "completion")
    golds = _column(items, "gold", "answer")
    n = len(completions)
    extracted: list[str | None] = [None] * n
    statuses: list[str] = [""] * n
    reasons: list[str] = [""] * n
    numbers: dict[str, Fraction | None] = {}  # parse_number per distinct gold or answer
    # Unique (gold, pred) pairs that need math-verify -> the rows waiting on them.
    waiting: dict[tuple[str, str], list[int]] = {}
    done = 0

    for i in range(n):
        gold = golds[i]
        gold = gold.strip() if isinstance(gold, str) else ("" if gold is None else str(gold))
        answer, method = extract_answer(completions[i])
        extracted[i] = answer
        if not gold:
            statuses[i], reasons[i] = ERROR, "no gold answer"
        elif answer is None:
            statuses[i] = UNPARSED
            reasons[i] = "empty completion" if not (completions[i] or "").strip() else ("no answer found")
        elif len(answer) > MAX_ANSWER_CHARS:
            statuses[i], reasons[i] = UNPARSED, f"answer too long ({len(answer)} chars)"
        else:
            g = numbers[gold] if gold in numbers else numbers.setdefault(gold, parse_number(gold))
            p = None
            if g is not None:
                p = numbers[answer] if answer in numbers else numbers.setdefault(answer, parse_number(answer))
            if p is not None:
                ok = g == p
                statuses[i] = CORRECT if ok else INCORRECT
                reasons[i] = f"numeric exact ({method})"
            elif config.use_math_verify:
                waiting.setdefault((gold, answer), []).append(i)
                continue
            else:
                ok = _normalise_string(gold) == _normalise_string(answer)
                statuses[i] = CORRECT if ok else INCORRECT
                reasons[i] = f"string match ({method})" if ok else f"string mismatch ({method})"
        done += 1
    if progress is not None and done:
        progress(done)

    if waiting:
        # Sorted by gold so each batch shares golds and a worker parses each gold about once.
        pairs = sorted(waiting)

        def on_done(j: int) -> None:
            nonlocal done
            done += len(waiting[pairs[j]])
            if progress is not None:
                progress(done)

        own_pool = pool is None
        active = pool if pool is not None else GradingPool(config)
        try:
            graded = active.grade(pairs, on_done=on_done)
        finally:
            if own_pool:
                active.close()
        for pair, (status, reason) in zip(pairs, graded, strict=True):
            for i in waiting[pair]:
                statuses[i], reasons[i] = status, reason

    grader = grader_version(config)
    out = items
    for name in OUTPUT_COLUMNS:
        if name in out.column_names:
            out = out.drop_columns([name])
    out = out.append_column("extracted_answer", pa.array(extracted, pa.string()))
    out = out.append_column("grade_status", pa.array(statuses, pa.string()))
    out = out.append_column("grade_reason", pa.array(reasons, pa.string()))
    out = out.append_column("correct", pa.array([s == CORRECT for s in statuses], pa.bool_()))
    out = out.append_column("grader", pa.array([grader] * n, pa.string()))
    if logger.isEnabledFor(logging.INFO):
        counts = {s: statuses.count(s) for s in STATUSES}
        logger.info(
            "graded %d rows (%d sent to math-verify) in %.2fs: %s",
            n,
            sum(len(v) for v in waiting.values()),
            time.perf_counter() - started,
            counts,
        )
    return out
