"""Grading: math-verify's reading of a completion, an exact numeric fast path, a killable pool.

The reference is math-verify on the whole completion, gold first and the gold in a box:
``verify(parse("\\boxed{" + gold + "}"), parse(completion))``. A completion is graded in three
steps:

1. **Reading** (in the calling process, cheap): :func:`read_completion` finds the answer
   math-verify would take where that can be proven from its own rules (one clean ``\\boxed{}``,
   text without LaTeX, read with math-verify's own expression patterns) or where a rule of ours
   applies (a GSM8K ``####`` line), and otherwise names the bounded text a worker must parse.
2. **Numeric fast path** (in the calling process): when the gold answer and the answer both
   parse to plain numbers, :func:`numeric_verdict` gives math-verify's verdict where it is
   certain (percent and 6-digit float rounding included) and defers where it is not.
3. **math-verify** for everything else, ``verify(parse(gold in a box), parse(text))``, in worker
   processes (its timeouts rely on ``signal``, which only works in a main thread). A clean box is
   parsed alone first, once per distinct answer: that gives the whole completion's result
   whenever the box's content parses, and the row is redone on its completion when it does not.
   Each item has a soft deadline (a ``SIGALRM`` raised inside the worker) and a hard deadline: a
   worker that does not answer in time is killed and replaced, and its other items are
   re-queued, so one pathological item can neither hang the stage nor stall the rest.

The deliberate differences from the reference are listed in docs/guide/grading.md. Every
row gets one of the statuses in :data:`pipeline.schema.GRADE_STATUSES` and a short reason; rows
are never dropped and keep their order.

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
from typing import TYPE_CHECKING, Any

from pipeline.errors import ConfigError
from pipeline.grade.extract import (
    BOX_NOT_PARSED,
    BOXED_SCAN_CHARS,
    BOXED_TRIES,
    CORRECT,
    ERROR,
    GRADER_NAME,
    HARD_GRACE_FRACTION,
    HARD_GRACE_MIN_S,
    INCORRECT,
    MAX_ANSWER_CHARS,
    MAX_PARSE_CHARS,
    MAX_TIMEOUT_S,
    MAX_WORKERS,
    STATUSES,
    TIMEOUT,
    UNPARSED,
    GradeConfig,
    Number,
    Reading,
    check_timeout,
    check_workers,
    extract_answer,
    grader_version,
    last_box,
    normalise_string,
    numeric_verdict,
    parse_number,
    read_completion,
    read_gold,
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
    "MAX_PARSE_CHARS",
    "MAX_TIMEOUT_S",
    "MAX_WORKERS",
    "STATUSES",
    "TIMEOUT",
    "UNPARSED",
    "GradeConfig",
    "Number",
    "Reading",
    "check_timeout",
    "check_workers",
    "extract_answer",
    "grader_version",
    "last_box",
    "numeric_verdict",
    "parse_number",
    "read_completion",
    "read_gold",
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
    raise ConfigError(f"items table needs a column {names[0]!r}; it has {items.column_names}")


def grade_table(
    items: pa.Table,
    config: GradeConfig | None = None,
    progress: Callable[[int], None] | None = None,
    pool: GradingPool | None = None,
) -> pa.Table:
    """Grades every row of ``items``; row order and count are preserved.

    Plain numbers are compared in this process where math-verify's verdict is certain; the rest
    go to math-verify workers (or to exact string matching when ``config.use_math_verify`` is
    False). Identical pairs are graded once: a completion with one clean box as ``(gold, the box
    alone)``, so samples that reach the same boxed answer share one parse (redone on the whole
    completion in the rare case the box's content does not parse), anything else as
    ``(gold, text to parse)``.

    Args:
        items: Table with columns ``prompt_id``, ``sample_idx``, ``completion`` and ``gold``
            (``answer`` is accepted in place of ``gold``); other columns are kept.
        config: Grading settings; defaults to ``GradeConfig()``.
        progress: Called with the cumulative number of rows graded so far (for a progress bar).
        pool: A running :class:`GradingPool` to reuse; otherwise one is started if needed.

    Returns:
        ``items`` with ``extracted_answer``, ``grade_status``, ``grade_reason``, ``correct`` and
        ``grader`` set (replaced if present). ``correct`` is True only for status ``correct``.
        ``extracted_answer`` is the answer as read here, or math-verify's string of the answer
        it took.
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
    gold_numbers: dict[str, Number | None] = {}
    readings: dict[str, Reading] = {}  # per distinct completion
    # Unique (gold, text to parse) pairs that need math-verify -> the rows waiting on them.
    waiting: dict[tuple[str, str], list[int]] = {}
    done = 0

    for i in range(n):
        gold = golds[i]
        gold = gold.strip() if isinstance(gold, str) else ("" if gold is None else str(gold))
        completion = completions[i] or ""
        reading = readings.get(completion)
        if reading is None:
            reading = readings[completion] = read_completion(completion)
        extracted[i] = reading.answer
        if not gold:
            statuses[i], reasons[i] = ERROR, "no gold answer"
        elif reading.problem is not None:
            statuses[i], reasons[i] = UNPARSED, reading.problem
        else:
            verdict = None
            if reading.number is not None:
                g = gold_numbers[gold] if gold in gold_numbers else gold_numbers.setdefault(gold, read_gold(gold))
                if g is not None:
                    verdict = numeric_verdict(g, reading.number)
            if verdict is not None:
                statuses[i] = CORRECT if verdict else INCORRECT
                reasons[i] = f"numeric exact ({reading.method})"
            elif config.use_math_verify:
                text = reading.span or reading.parse_text
                assert text is not None
                waiting.setdefault((gold, text), []).append(i)
                continue
            else:
                statuses[i], reasons[i], extracted[i] = _string_match(gold, reading, completion)
        done += 1
    if progress is not None and done:
        progress(done)

    if waiting:
        own_pool = pool is None
        active = pool if pool is not None else GradingPool(config)
        try:
            # A box whose content did not parse: math-verify reads on past it in the whole
            # completion, so such rows are graded again on their own (bounded) completion.
            again: dict[tuple[str, str], list[int]] = {}
            for (gold, text), rows, result in _grade_pairs(active, waiting, progress, done):
                for i in rows:
                    own = readings[completions[i] or ""].parse_text
                    if result[1].endswith(BOX_NOT_PARSED) and own is not None and own != text:
                        again.setdefault((gold, own), []).append(i)
                    else:
                        _fill(i, result, statuses, reasons, extracted)
            for _, rows, result in _grade_pairs(active, again, None, 0):
                for i in rows:
                    _fill(i, result, statuses, reasons, extracted)
        finally:
            if own_pool:
                active.close()

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


def _grade_pairs(
    pool: GradingPool,
    waiting: dict[tuple[str, str], list[int]],
    progress: Callable[[int], None] | None,
    done: int,
) -> list[tuple[tuple[str, str], list[int], tuple[str, str, str | None]]]:
    """Grades the waiting pairs in ``pool``: ``(pair, rows, (status, reason, extracted))`` each."""
    if not waiting:
        return []
    # Sorted by gold so each batch shares golds and a worker parses each gold about once.
    pairs = sorted(waiting)

    def on_done(j: int) -> None:
        nonlocal done
        done += len(waiting[pairs[j]])
        if progress is not None:
            progress(done)

    graded = pool.grade(pairs, on_done=on_done)
    return [(pair, waiting[pair], result) for pair, result in zip(pairs, graded, strict=True)]


def _fill(
    i: int,
    result: tuple[str, str, str | None],
    statuses: list[str],
    reasons: list[str],
    extracted: list[str | None],
) -> None:
    status, reason, answer = result
    statuses[i], reasons[i] = status, reason.removesuffix(BOX_NOT_PARSED)
    if extracted[i] is None:
        extracted[i] = answer


def _string_match(gold: str, reading: Reading, completion: str) -> tuple[str, str, str | None]:
    """Without math-verify: the answer read here (else the last box) against the gold, as text."""
    answer = reading.answer if reading.answer is not None else last_box(completion)
    if answer is None:
        return UNPARSED, "no answer found without math-verify", None
    ok = normalise_string(gold) == normalise_string(answer)
    return (CORRECT if ok else INCORRECT), f"string {'match' if ok else 'mismatch'} ({reading.method})", answer
