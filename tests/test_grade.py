"""Tests for pipeline.grade: extraction, the numeric fast path, math-verify in the killable pool."""

from __future__ import annotations

import os
import re
import signal
import time
from fractions import Fraction

import pyarrow as pa
import pytest

from pipeline import grade
from pipeline.errors import ConfigError
from pipeline.grade import (
    GradeConfig,
    GradingPool,
    extract_answer,
    grade_table,
    grader_version,
    math_verify_grade,
    parse_number,
)

NESTED_POWER = "2^{" * 6 + "2" + "}" * 6  # 2^2^2^2^2^2^2: verify against 4 never finishes


def hang_or_crash(gold: str, pred: str, cache: dict) -> tuple[str, ...]:
    """Worker grade_fn for tests: ignores the soft alarm on HANG, dies on CRASH.

    ``pred`` is the text the worker parses: here the whole completion, ``\\boxed{HANG}``.
    """
    if pred == "\\boxed{HANG}":
        # Blocking SIGALRM stands in for C code that never returns to the interpreter.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        time.sleep(120)
    if pred == "\\boxed{CRASH}":
        os._exit(3)
    if pred == "\\boxed{BIG}":
        return ("correct", "big") if gold.startswith("BIG") else ("incorrect", "big")
    return math_verify_grade(gold, pred, cache)


def _items(rows: list[tuple[str | None, str | None]], prompt: str = "p") -> pa.Table:
    return pa.table(
        {
            "prompt_id": [f"{prompt}{i // 4}" for i in range(len(rows))],
            "sample_idx": pa.array([i % 4 for i in range(len(rows))], pa.int32()),
            "completion": [c for c, _ in rows],
            "gold": [g for _, g in rows],
        }
    )


@pytest.fixture(scope="module")
def short_pool():
    """Workers with a short soft timeout (0.5 s) that understand the HANG and CRASH hooks."""
    config = GradeConfig(workers=2, timeout_s=0.5, batch_size=2)
    with GradingPool(config, grade_fn=hang_or_crash) as p:
        yield p


@pytest.fixture(scope="module")
def pool():
    # Generous soft timeout: symbolic simplification is slow on a loaded 2-core CI machine.
    with GradingPool(GradeConfig(workers=2, timeout_s=4.0, batch_size=4)) as p:
        yield p


# --------------------------------------------------------------------------- extraction


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        # Several boxes: math-verify reads them together ({1, 1/2} here), not the last one alone.
        ("so \\boxed{1} then \\boxed{\\frac{1}{2}}.", (None, "math-verify")),
        ("\\boxed{\\frac{\\sqrt{3}}{\\sqrt{4}}}", ("\\frac{\\sqrt{3}}{\\sqrt{4}}", "boxed")),
        ("The answer is $\\boxed{72}$.", ("72", "boxed")),
        ("answer: \\fbox{7} done", (None, "math-verify")),  # math-verify finds no answer here
        ("\\boxed{12} and later \\boxed{5", (None, "math-verify")),  # last one unbalanced
        ("\\boxed{3} then \\boxed{}", (None, "math-verify")),  # last one empty
        ("$\\boxed 42$", (None, "math-verify")),
        ("\\boxedfoo{3} so 4", (None, "math-verify")),
        ("$\\frac{10}{9}$", (None, "math-verify")),  # a LaTeX span: only math-verify can say
        ("Natalia sold 48/2 = 24 clips.\n#### 72\n", ("72", "hash")),
        ("#### **1,234.** \nmore 9", ("1,234", "hash")),
        # Plain text: math-verify's own patterns, not the last number.
        ("it is 5, then 7.5 more, total -12.", ("-12", "plain")),
        ("5-3", ("5", "plain")),  # arithmetic in prose is not evaluated
        ("roughly 3/4 of it", ("3/4", "plain")),
        ("so the answer is .4", ("0.4", "plain")),
        ("The answer is 12. Then 3 more.", ("12", "plain")),
        ("So the total is $18.", ("18", "plain")),
        ("0,111", ("0.111", "plain")),
        ("no digits here", (None, "plain")),
        ("", (None, "none")),
        (None, (None, "none")),
    ],
)
def test_extract_answer(completion, expected):
    assert extract_answer(completion) == expected


def test_extract_answer_megabyte_completion_is_fast():
    filler = "lorem ipsum dolor " * 60_000  # ~1 MB
    cases = {
        filler + "\\boxed{17}": ("17", "boxed"),
        "\\boxed{" + "{" * 1_000_000: (None, "plain"),  # unbalanced; its last 64 KiB hold no LaTeX
        "\\boxed{5} " + "{" * 1_000_000 + " 9": (None, "math-verify"),
        filler + " 41 " + filler: (None, "plain"),  # math-verify reads only the last 64 KiB
        filler: (None, "plain"),
    }
    for text, expected in cases.items():
        start = time.perf_counter()
        got = extract_answer(text)
        elapsed = time.perf_counter() - start
        assert got == expected
        assert elapsed < 0.25, f"{elapsed:.3f}s on a {len(text)}-char completion"


# --------------------------------------------------------------------------- numeric fast path


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("72", Fraction(72)),
        ("-3", Fraction(-3)),
        ("0.50", Fraction(1, 2)),
        ("1,234,567", Fraction(1234567)),
        ("1{,}000", Fraction(1000)),
        ("\\$18", Fraction(18)),
        ("$18.00", Fraction(18)),
        ("25%", Fraction(1, 4)),  # math-verify's percentage; the old 25 ignored the sign
        ("25\\%", Fraction(1, 4)),
        ("3/4", Fraction(3, 4)),
        ("\\frac{3}{4}", Fraction(3, 4)),
        ("-\\dfrac{6}{8}", Fraction(-3, 4)),
        ("\\text{12}", None),  # math-verify reads a symbol named 12
        ("7.", None),  # math-verify keeps "7." as text
        ("0,111", None),  # math-verify reads 0.111, not 111
        ("1\\,000", None),  # math-verify reads 1 + 000
        ("x", None),
        ("1,2", None),
        ("1/0", None),
        ("\\sqrt{2}", None),
        ("\\frac{1}{0}", None),
        ("", None),
        (None, None),
    ],
)
def test_parse_number(text, value):
    assert parse_number(text) == value


def test_numeric_fast_path_needs_no_workers(monkeypatch):
    def no_pool(*args, **kwargs):
        raise AssertionError("numeric items must not start math-verify workers")

    monkeypatch.setattr(grade, "GradingPool", no_pool)
    items = _items(
        [
            ("\\boxed{0.5}", "1/2"),
            ("#### 1,000", "1000"),
            ("so the total is $18.", "18"),
            ("\\boxed{19}", "18"),
            ("\\boxed{\\frac{2}{4}}", "0.5"),
        ]
    )
    out = grade_table(items, GradeConfig())
    assert out.column("grade_status").to_pylist() == [
        "correct",
        "correct",
        "correct",
        "incorrect",
        "correct",
    ]
    assert out.column("correct").to_pylist() == [True, True, True, False, True]
    assert all(r.startswith("numeric exact") for r in out.column("grade_reason").to_pylist())


def test_without_math_verify_symbolic_answers_compare_as_strings(monkeypatch):
    monkeypatch.setattr(grade, "GradingPool", None)  # would fail if used
    items = _items([("\\boxed{\\sqrt{2}}", "\\sqrt{2}"), ("\\boxed{x+1}", "1+x")])
    config = GradeConfig(use_math_verify=False)
    out = grade_table(items, config)
    assert out.column("grade_status").to_pylist() == ["correct", "incorrect"]
    assert set(out.column("grader").to_pylist()) == {grader_version(config)}
    assert grader_version(config) != grader_version(GradeConfig())


# --------------------------------------------------------------------------- config and version


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"workers": 0}, "workers=0"),
        ({"timeout_s": 0}, "timeout_s=0"),
        ({"timeout_s": -1.5}, "timeout_s=-1.5"),
        ({"batch_size": 0}, "batch_size=0"),
    ],
)
def test_config_rejects_out_of_range(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        GradeConfig(**kwargs)


@pytest.mark.parametrize("value", [0, -1.5, 3600.5, 1e9, float("nan"), float("inf")])
def test_the_one_timeout_check_names_the_value_and_the_range(value):
    """``check_timeout`` is the one check of the grade timeout: GradeConfig (and through it the
    import and regrade configs) call it; the bound is ``MAX_TIMEOUT_S``."""
    assert grade.MAX_TIMEOUT_S == 3600
    allowed = re.escape(f"is out of range: allowed (0, {grade.MAX_TIMEOUT_S}] seconds")
    with pytest.raises(ConfigError, match=re.escape(f"timeout_s={value!r} ") + allowed):
        GradeConfig(timeout_s=value)
    with pytest.raises(ConfigError, match=re.escape(f"grade_timeout_s={value!r} ") + allowed):
        grade.check_timeout(value, "grade_timeout_s")


@pytest.mark.parametrize("value", ["5", None, True])
def test_a_timeout_that_is_not_a_number_is_a_config_error(value):
    with pytest.raises(ConfigError, match=re.escape(f"timeout_s={value!r} must be a number of seconds in (0, 3600]")):
        GradeConfig(timeout_s=value)


def test_timeouts_in_range_pass():
    for value in (1e-3, 0.5, 5, 3600, 3600.0):
        grade.check_timeout(value)
        assert GradeConfig(timeout_s=value).timeout_s == value


@pytest.mark.parametrize(
    ("text", "box"),
    [
        (r"so $\boxed{\frac{1}{2}}$.", r"\frac{1}{2}"),  # braces matched
        (r"\boxed{1} then \boxed{ 2 }", "2"),  # the last one, stripped
        (r"thus \boxed 5$.", "5"),  # MATH's box without braces: the word after it
        (r"\boxed 5}", "5"),
        (r"\fbox{7}", "7"),
        (r"\boxed {8}", "8"),  # whitespace before the brace
        ("\\boxed\n{9}", "9"),
        (r"\boxed{3} and \boxed{}", "3"),  # an empty box is passed over
        (r"\boxed{3} and \boxed{  }", "3"),
        (r"\boxed{3} and \boxed{unclosed", "3"),  # so is an unbalanced one
        (r"\boxed{3} and \boxedx{4}", "3"),  # \boxedx is no box
        (r"\boxed{\boxed{6}}", "6"),
        (r"\boxed{unclosed", None),
        (r"\boxed $5$", None),
        ("no box", None),
        ("", None),
        (None, None),
    ],
)
def test_last_box_is_the_one_box_reader(text, box):
    """The grader's string fallback and MATH's gold answer (pipeline.datasets) read boxes here."""
    assert grade.last_box(text) == box


def test_last_box_looks_back_at_most_boxed_tries_boxes():
    text = r"\boxed{1}" + r"\boxed{}" * grade.BOXED_TRIES
    assert grade.last_box(text) is None
    assert grade.last_box(r"\boxed{1}" + r"\boxed{}" * (grade.BOXED_TRIES - 1)) == "1"


def test_config_defaults_and_types():
    config = GradeConfig()
    assert 1 <= config.workers <= 2
    assert config.hard_timeout_s > config.timeout_s
    with pytest.raises(ConfigError, match="use_math_verify='yes' must be true or false"):
        GradeConfig(use_math_verify="yes")
    with pytest.raises(ConfigError, match=re.escape("workers=1.5 must be an integer in [1, 256]")):
        GradeConfig(workers=1.5)


def test_grader_version_names_math_verify():
    from importlib.metadata import version

    from pipeline.grade.extract import source_hash

    assert re.fullmatch(r"[0-9a-f]{8}", source_hash())
    assert grader_version() == f"math-verify=={version('math-verify')}+numeric+g{source_hash()}"
    assert grader_version(GradeConfig(use_math_verify=False)) == f"numeric+string+g{source_hash()}"
    assert grade.STATUSES == __import__("pipeline.schema").schema.GRADE_STATUSES


# --------------------------------------------------------------------------- math-verify path


def test_math_verify_symbolic_answers(pool):
    items = _items(
        [
            ("\\boxed{0.5}", "\\frac{1}{2}"),  # numeric fast path
            ("\\boxed{\\sqrt{2}/2}", "\\frac{\\sqrt2}{2}"),
            ("\\boxed{\\frac{\\sqrt{2}}{2}}", "\\frac{1}{\\sqrt{2}}"),
            ("\\boxed{2\\pi}", "\\pi"),
            ("\\boxed{(1, 3)}", "(1,3)"),
            ("\\boxed{x^2 + 2x + 1}", "(x+1)^2"),
            ("\\boxed{\\frac{\\pi}{2}}", "90^\\circ"),
            ("#### \\frac{3}{\\sqrt{9}}", "1"),
        ]
    )
    out = grade_table(items, pool.config, pool=pool)
    statuses = out.column("grade_status").to_pylist()
    assert statuses == [
        "correct",
        "correct",
        "correct",
        "incorrect",
        "correct",
        "correct",
        statuses[6],
        "correct",
    ]
    assert statuses[6] in {"correct", "incorrect"}
    reasons = out.column("grade_reason").to_pylist()
    assert reasons[1].startswith("math-verify")
    assert out.column("correct").to_pylist()[:6] == [True, True, True, False, True, True]


def test_statuses_and_reasons(pool):
    items = _items(
        [
            ("\\boxed{4}", None),
            ("\\boxed{4}", "   "),
            ("", "4"),
            (None, "4"),
            ("I cannot solve this.", "4"),
            ("\\boxed{" + "x" * 3000 + "}", "4"),
            ("\\boxed{}}}}", "\\sqrt{2}"),
            ("\\boxed{3}", "4"),
        ]
    )
    out = grade_table(items, pool.config, pool=pool)
    rows = out.to_pylist()
    assert [r["grade_status"] for r in rows[:6]] == [
        "error",
        "error",
        "unparsed",
        "unparsed",
        "unparsed",
        "unparsed",
    ]
    assert rows[0]["grade_reason"] == rows[1]["grade_reason"] == "no gold answer"
    assert rows[2]["grade_reason"] == "empty completion"
    assert rows[4]["grade_reason"] == "no answer found"
    assert "too long" in rows[5]["grade_reason"]
    assert rows[6]["grade_status"] in {"unparsed", "incorrect"}
    assert rows[7]["grade_status"] == "incorrect"
    assert all(r["grade_reason"] for r in rows)
    assert all(r["grade_status"] in grade.STATUSES for r in rows)
    assert [r["correct"] for r in rows] == [False] * 8


def test_order_count_and_columns_preserved(pool):
    golds = ["\\frac{1}{2}", "\\sqrt{3}", "7", "x+1"]
    answers = ["0.5", "\\sqrt{3}", "8", "1+x", "\\frac{2}{4}", "3^{1/2}", "7", "x-1"]
    rows = [(f"work... \\boxed{{{a}}}", golds[i % 4]) for i, a in enumerate(answers * 5)]
    items = _items(rows).append_column("extra", pa.array(list(range(len(rows)))))
    items = items.append_column("grade_status", pa.array(["stale"] * len(rows)))
    seen: list[int] = []
    out = grade_table(items, pool.config, progress=seen.append, pool=pool)
    assert out.num_rows == items.num_rows
    assert out.column("extra").to_pylist() == list(range(len(rows)))
    assert out.column("completion").to_pylist() == items.column("completion").to_pylist()
    expected = [
        "correct",
        "correct",
        "incorrect",
        "correct",
        "correct",
        "correct",
        "correct",
        "incorrect",
    ] * 5
    assert out.column("grade_status").to_pylist() == expected
    assert out.column_names.count("grade_status") == 1
    assert seen == sorted(seen) and seen[-1] == len(rows)


def test_pathological_items_time_out_and_the_rest_is_graded(short_pool):
    nested_200 = "2^{" * 200 + "2" + "}" * 200
    rows = [
        (f"\\boxed{{{NESTED_POWER}}}", "4"),
        (f"\\boxed{{{nested_200}}}", "4"),
        ("\\boxed{\\frac{1}{2", "\\frac{1}{2}"),  # unbalanced: falls back to the last number
        ("\\boxed{\\left( \\frac{1}{2}}", "\\sqrt{2}"),
    ] + [(f"\\boxed{{\\frac{{{k}}}{{2}} \\cdot \\sqrt{{4}}}}", str(k)) for k in range(12)]
    config = short_pool.config
    start = time.perf_counter()
    out = grade_table(_items(rows), config, pool=short_pool)
    elapsed = time.perf_counter() - start
    statuses = out.column("grade_status").to_pylist()
    assert statuses[0] == "timeout"
    assert out.column("grade_reason").to_pylist()[0] == f"exceeded {config.timeout_s:g}s"
    assert set(statuses[1:4]) <= {"timeout", "unparsed", "incorrect", "correct", "error"}
    assert statuses[4:] == ["correct"] * 12
    # A few soft timeouts, plus slack for a loaded CI machine (and a worker restart).
    assert elapsed < 4 * config.hard_timeout_s + 10


def test_worker_killed_on_hard_timeout_and_replaced(short_pool):
    config = short_pool.config
    rows = [(f"\\boxed{{\\sqrt{{{k * k}}}}}", str(k)) for k in range(1, 9)]
    rows.insert(3, ("\\boxed{HANG}", "1"))
    rows.insert(7, ("\\boxed{CRASH}", "1"))
    # Golds of 400 kB: more than a pipe holds, queued behind the hung item unless batches wait.
    rows += [("\\boxed{BIG}", f"BIG{k}" + "x" * 400_000) for k in range(6)]
    pool = short_pool
    before, replaced = set(pool.worker_pids()), pool.replaced
    start = time.perf_counter()
    out = grade_table(_items(rows), config, pool=pool)
    elapsed = time.perf_counter() - start
    after = set(pool.worker_pids())
    assert pool.replaced - replaced == 2
    assert len(after) == 2 and after != before
    # The replacement workers grade new items too.
    again = grade_table(_items(rows[:3]), config, pool=pool)
    assert again.column("grade_status").to_pylist() == ["correct"] * 3
    rows_out = out.to_pylist()
    assert rows_out[3]["grade_status"] == "timeout"
    assert "killed" in rows_out[3]["grade_reason"]
    assert rows_out[7]["grade_status"] == "error"
    assert "exit code 3" in rows_out[7]["grade_reason"]
    others = [r["grade_status"] for i, r in enumerate(rows_out) if i not in (3, 7)]
    assert others == ["correct"] * 14
    assert elapsed < config.hard_timeout_s + 15  # worker restarts are a second or two each


def test_grade_fn_must_be_importable():
    with pytest.raises(ValueError, match="module-level"):
        GradingPool(GradeConfig(), grade_fn=lambda g, p, c: ("correct", ""))
