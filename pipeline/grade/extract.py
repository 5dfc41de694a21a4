"""Reading a completion the way math-verify does, the exact numeric fast path, and the settings.

The reference is math-verify 0.9.0 on the whole completion, gold first and the gold read as a
boxed answer: ``verify(parse("\\boxed{" + gold + "}"), parse(completion))``. This module decides,
cheaply and in the calling process, how much of that can be known without sympy:

* :func:`read_completion` finds the answer math-verify would take when the completion has a shape
  whose reading can be proven from math-verify's own rules (one clean ``\\boxed{}``, plain text,
  a GSM8K ``####`` line); otherwise it names the bounded text a worker must ``parse``.
* :func:`read_latex_number` and the plain-text reader give the exact value, sympy type and
  fallback string that math-verify's ``parse`` produces for a plain number (integers, thousands
  groups, decimals, ``\\frac{a}{b}``, ``a/b``, percentages).
* :func:`numeric_verdict` replays math-verify's comparison of two such numbers (its string
  comparison, its percent rules, its 6-digit float rounding) where the outcome is certain, and
  returns None (defer to math-verify) where it is not.

Deliberate differences from the reference are few and listed in docs/guide/grading.md:
the GSM8K ``####`` line, plain-text arithmetic that restates the problem, very long completions
and boxes longer than :data:`MAX_ANSWER_CHARS`.

Nothing here starts a process, handles a signal or imports pyarrow or sympy: the math-verify
workers of :mod:`pipeline.grade.pool` import this module to start. The plain-text patterns are
math-verify's own (MIT licence, copyright 2024 The HuggingFace Team), rebuilt here without its
sympy import; ``tests/test_grade_regression.py`` checks they equal the installed version's.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from importlib import resources

from pipeline.checks import check_bool, check_int, check_number

# The same values as pipeline.schema.GRADE_STATUSES, spelled here so that worker processes need
# not import pyarrow (through pipeline.schema) to start.
CORRECT, INCORRECT, UNPARSED, TIMEOUT, ERROR = STATUSES = (
    "correct",
    "incorrect",
    "unparsed",
    "timeout",
    "error",
)

GRADER_NAME = "math-verify"

# Bounds that keep the calling process's work small whatever the completion's size.
MAX_ANSWER_CHARS = 2_000  # a longer box or #### line is not an answer; never sent to the parser
BOXED_SCAN_CHARS = 10_000  # a \boxed{ whose brace does not close within this is unbalanced
BOXED_TRIES = 8  # earlier boxes tried by the string fallback (use_math_verify=False) only
# math-verify reads at most this much of a completion (its last characters, from a line start);
# its regex pass costs about 0.4 ms per KiB, so this keeps one item near 25 ms before sympy.
MAX_PARSE_CHARS = 65_536
LINE_SEARCH_CHARS = 2_048  # how far past the cut the tail window looks for a line start

# The grade timeout (seconds one item may take in math-verify) is in (0, MAX_TIMEOUT_S]: an hour
# per answer is already far past any useful grading; check_timeout is the one check of it.
MAX_TIMEOUT_S = 3600
MAX_WORKERS = 256  # math-verify worker processes; check_workers is the one check of their number

# Hard deadline = timeout_s + max(HARD_GRACE_MIN_S, HARD_GRACE_FRACTION * timeout_s): the soft
# SIGALRM inside the worker normally fires first; the kill is for code that ignores signals.
HARD_GRACE_MIN_S = 1.0
HARD_GRACE_FRACTION = 0.5

# Where the fast path trusts math-verify's float rounding (round to 6 places, then compare) to be
# the identity: both values on the 1e-6 grid, well inside 15 significant digits.
FLOAT_ROUNDING = 6
FLOAT_MAX_ABS = 10**6
FLOAT_MAX_DIGITS = 15

# The ways a completion is read (the ``method`` of :class:`Reading`).
BOXED, HASH, PLAIN, MATH_VERIFY, NONE = "boxed", "hash", "plain", "math-verify", "none"

# Added by the worker to its reason when the text was a lone box whose content did not parse:
# math-verify would then read on past the box in the whole completion, so the item is redone.
BOX_NOT_PARSED = "; the box alone did not parse"


# --------------------------------------------------------------------------- settings


def _default_workers() -> int:
    try:
        cpus = len(os.sched_getaffinity(0))  # what this process may use, not the host's count
    except AttributeError:
        cpus = os.cpu_count() or 1
    return max(1, min(2, cpus))


def check_timeout(timeout_s: object, name: str = "timeout_s") -> None:
    """The one check of a grade timeout: a number of seconds in ``(0, MAX_TIMEOUT_S]``.

    ``name`` is how the caller's user spells the setting (``grade_timeout_s`` in a run's config);
    the ``ConfigError`` (a ``ValueError``) names it, the value and the range.
    """
    check_number(name, timeout_s, 0, MAX_TIMEOUT_S, lo_open=True, unit="seconds")


def check_workers(workers: object, name: str = "workers") -> None:
    """The one check of a number of grading workers: an integer in ``[1, MAX_WORKERS]``; ``name``
    as :func:`check_timeout`'s."""
    check_int(name, workers, 1, MAX_WORKERS)


@dataclass(frozen=True)
class GradeConfig:
    """Settings of the grading stage.

    Attributes:
        workers: Worker processes running math-verify (1 to :data:`MAX_WORKERS`, :func:`check_workers`).
        timeout_s: Wall-clock seconds one item may take in math-verify before it is marked
            ``timeout`` (0 < timeout_s <= :data:`MAX_TIMEOUT_S`, :func:`check_timeout`). A worker
            that ignores the soft deadline is killed a grace period later and replaced.
        batch_size: Items sent to a worker per message (1 to 10,000).
        use_math_verify: When False, answers that the numeric fast path cannot settle are
            compared as whitespace-normalised strings and no worker process is started.
    """

    workers: int = field(default_factory=_default_workers)
    timeout_s: float = 5.0
    batch_size: int = 16
    use_math_verify: bool = True

    def __post_init__(self) -> None:
        check_workers(self.workers)
        check_timeout(self.timeout_s)
        check_int("batch_size", self.batch_size, 1, 10_000)
        check_bool("use_math_verify", self.use_math_verify)

    @property
    def hard_timeout_s(self) -> float:
        """Seconds after which a worker that has not answered is killed."""
        return self.timeout_s + max(HARD_GRACE_MIN_S, HARD_GRACE_FRACTION * self.timeout_s)


@lru_cache(maxsize=1)
def source_hash() -> str:
    """Short hash of the grading code (this package's modules), so a change to extraction or
    comparison changes the grader version recorded on every sample."""
    digest = hashlib.sha256()
    package = resources.files("pipeline.grade")
    for name in ("extract.py", "pool.py", "__init__.py"):
        digest.update(name.encode() + b"\0" + package.joinpath(name).read_bytes() + b"\0")
    return digest.hexdigest()[:8]


def grader_version(config: GradeConfig | None = None) -> str:
    """Name and version of the grader, recorded on the run and on every sample.

    Args:
        config: The grading config; with ``use_math_verify=False`` the grader is the numeric
            fast path plus exact string matching.

    Returns:
        For example ``"math-verify==0.9.0+numeric+g1a2b3c4d"`` or ``"numeric+string+g1a2b3c4d"``;
        the ``g`` suffix is :func:`source_hash`.
    """
    if config is not None and not config.use_math_verify:
        return f"numeric+string+g{source_hash()}"
    from importlib.metadata import PackageNotFoundError, version

    try:
        mv = version("math-verify")
    except PackageNotFoundError:
        mv = "missing"
    return f"{GRADER_NAME}=={mv}+numeric+g{source_hash()}"


# --------------------------------------------------------------------------- numbers


@dataclass(frozen=True, slots=True)
class Number:
    """A plain number as math-verify's ``parse`` returns it: ``[sympy value, fallback string]``.

    Attributes:
        value: The number as written (before a ``%``), exactly; None when the fast path cannot
            know it (``3/0``, ``3/4.``): such a number is always left to math-verify.
        kind: The sympy type of that number: ``int`` (Integer), ``rational`` (Rational, not an
            integer), ``float`` (Float), ``quotient`` (an unevaluated ``a/b`` read from plain
            text, a ``Mul`` that math-verify compares through ``doit``).
        percent: Whether math-verify wrapped it as a percentage (``value * 1/100``, kept
            unevaluated: ``20%`` equals ``20`` there, but also ``0.2``).
        text: math-verify's fallback string, which ``verify`` also compares, as text.
        digits: Significant digits as written (floats only: a Float holds about 15).
    """

    value: Fraction | None
    kind: str
    percent: bool
    text: str
    digits: int = 0

    @property
    def evaluated(self) -> Fraction | None:
        """The value after ``doit``: a percentage divided by 100."""
        if self.value is None:
            return None
        return self.value / 100 if self.percent else self.value

    def parse_text(self) -> str:
        """A text whose ``parse`` gives back this number and fallback string (plain text only)."""
        return self.text + ("%" if self.percent else "")


def _significant_digits(s: str) -> int:
    return len(s.replace("-", "").replace(".", "").replace(",", "").lstrip("0")) or 1


# A plain number inside a box (or a gold answer), as math-verify's LaTeX path reads it after
# normalize_latex: "\$" or "$" removed, "{,}" made ",", "\dfrac" made "\frac", "a/b" made
# "\frac{a}{b}", a leading "." given a 0 and exactly "0.5" made "\frac{1}{2}".
_LATEX_NUMBER = re.compile(
    r"""
    (?P<cur>\\\$|\$)?(?:
      (?P<int>-?(?:0|[1-9]\d*))
    | (?P<thou>-?[1-9]\d{0,2}(?:,\d{3})+)(?P<thoudec>\.\d+)?
    | (?P<dec>-?(?:0|[1-9]\d*)\.\d+)
    | (?P<lead>\.\d+)
    )
    | (?P<fsign>-?)\\[dt]?frac\{(?P<fnum>-?(?:0|[1-9]\d*))\}\{(?P<fden>[1-9]\d*)\}
    | (?P<snum>-?(?:0|[1-9]\d*))/(?P<sden>[1-9]\d*)
    | (?P<pnum>(?:0|[1-9]\d*)(?:\.\d+)?)(?P<pct>\\%|%)
    """,
    re.VERBOSE,
)


def _fraction(num: int, den: int, text: str) -> Number:
    value = Fraction(num, den)
    return Number(value, "int" if value.denominator == 1 else "rational", False, text)


def read_latex_number(content: str) -> Number | None:
    """What math-verify's ``parse`` gives for ``\\boxed{content}`` when ``content`` is a plain
    number; None for anything else (which is then math-verify's to read).

    Args:
        content: A box's content or a gold answer (surrounding whitespace ignored).

    Returns:
        The :class:`Number`, or None.
    """
    s = content.strip()
    if len(s) > 64 or not s:
        return None
    return _read_latex_number(s)


@lru_cache(maxsize=16_384)
def _read_latex_number(s: str) -> Number | None:
    if "{,}" in s:
        s = s.replace("{,}", ",")
        if "," not in s or "{" in s:
            return None
    m = _LATEX_NUMBER.fullmatch(s)
    if m is None:
        return None
    g = m.group
    if g("int") is not None:
        body = g("int")
        return Number(Fraction(int(body)), "int", False, body)
    if g("thou") is not None:
        body = g("thou") + (g("thoudec") or "")
        value = Fraction(body.replace(",", ""))
        if g("thoudec"):
            return Number(value, "float", False, body, _significant_digits(body))
        return Number(value, "int", False, body)
    if g("dec") is not None or g("lead") is not None:
        body = g("dec") or "0" + g("lead")
        if body == "0.5":  # normalize_latex's "nits": exactly 0.5 becomes \frac{1}{2}
            return Number(Fraction(1, 2), "rational", False, "\\frac{1}{2}")
        return Number(Fraction(body), "float", False, body, _significant_digits(body))
    if g("fnum") is not None:
        num, den = g("fnum"), int(g("fden"))
        if num == "-0" or (g("fsign") and num.startswith("-")):
            return None
        sign = -1 if g("fsign") else 1
        return _fraction(sign * int(num), den, s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac"))
    if g("snum") is not None:
        num = g("snum")
        if num == "-0":
            return None
        return _fraction(int(num), int(g("sden")), f"\\frac{{{num}}}{{{g('sden')}}}")
    base = g("pnum")
    if "." in base:
        return Number(Fraction(base), "float", True, s, _significant_digits(base))
    return Number(Fraction(int(base)), "int", True, s)


def parse_number(text: str | None) -> Fraction | None:
    """The exact value math-verify gives ``text`` as a boxed answer, when it is a plain number.

    Integers, ``,`` or ``{,}`` thousands groups, decimals, ``a/b``, ``\\frac{a}{b}`` (also
    ``\\dfrac``, ``\\tfrac``), a leading ``$`` or ``\\$``, and percentages (``25\\%`` is 1/4).
    Anything math-verify reads differently from its face value (``0,111`` is 0.111, ``1,2`` a
    set, ``1\\,000`` the sum 1 + 000, ``7.`` text) is None, as is anything else.

    Args:
        text: A gold or extracted answer.

    Returns:
        The exact value as a Fraction, or None.
    """
    if text is None:
        return None
    number = read_latex_number(text)
    return None if number is None else number.evaluated


def _float_safe(n: Number, value: Fraction) -> bool:
    """Whether rounding ``value`` to 6 places is the identity for math-verify's Float."""
    if n.kind == "float" and n.digits > FLOAT_MAX_DIGITS:
        return False
    return abs(value) < FLOAT_MAX_ABS and (10**FLOAT_ROUNDING) % value.denominator == 0


def numeric_verdict(gold: Number, pred: Number) -> bool | None:
    """math-verify's verdict on two plain numbers, when it is certain; None to defer.

    ``verify`` compares the two parses pairwise: the fallback strings as text, and the sympy
    values through ``sympy_expr_eq``. For numbers that is structural equality, then
    ``sympy_numeric_eq`` (grader.py): with a Float on either side both sides are evaluated and
    rounded to 6 places; two Integers (a percentage counting as its Integer, so ``20%`` equals
    ``20``) compare as they are written; anything else compares evaluated; and last
    ``simplify(a - b).is_zero``, which holds exactly when the evaluated values are equal. Floats
    are settled here only when both values sit on the 1e-6 grid (rounding changes nothing) and
    are small enough for a Float's 15 digits; the rest (``1/3`` against ``0.333333``) is left to
    math-verify, as is any number whose value is unknown.
    """
    if gold.text and gold.text == pred.text:  # both stripped already, as verify strips them
        return True
    a, b = gold.evaluated, pred.evaluated
    if a is None or b is None:
        return None
    if gold.kind == "float" or pred.kind == "float":
        if _float_safe(gold, a) and _float_safe(pred, b):
            return a == b
        return None
    if gold.kind == "int" and pred.kind == "int" and gold.value == pred.value:
        return True
    return a == b


# --------------------------------------------------------------------------- math-verify's plain-text patterns


def _expr_patterns() -> tuple[tuple[re.Pattern[str], int], ...]:
    """math-verify 0.9.0's ``lazy_expr_regex(ExprExtractionConfig())``, built the same way."""
    number_re = (
        r"(?<!\d)(?:"
        r"(?P<integer1>-?[1-9]\d{0,2}(?:[ ,]\d{3})+)(?P<decimal1>\.\d+)?|"
        r"(?P<integer2>-?\d+)(?P<decimal2>[.,]\d+)|"
        r"(?P<decimal3>\.\d+)|"
        r"(?P<integer3>-?\d+)"
        r")(?P<percent>\s*(?:%|[Pp]ercent|\s*[Pp]ercentage|\s*[Pp]ct))?"
    )
    operators = [r"\+", r"\-", r"\*", r"\×", r"\/", r"\^", r"\(", r"\)", r"\÷"]
    operators_re = "".join(operators)
    all_expr_chars = r"[\d\.\s" + operators_re + r"]"
    expr_re = rf"(?P<expr>-?\(?-?\d{all_expr_chars}*[{operators_re}]{all_expr_chars}+\)?)"
    full_stop_re, comma_re, colon_re, space_re = r"\.", r",", r":", r"\s"
    currency_units = re.escape("$€£¥₹₽₪₩₫฿₡₢₣₤₥₦₧₨₩₪₫₭₮₯₰₱₲₳₴₵₶₷₸₹₺₻₼₽₾₿")
    expr_prefix_re = rf"(?:^|{space_re}|\=)(?:\*\*)?"
    expr_suffix_re = rf"(?:\*\*)?(?:{full_stop_re}|{comma_re}|{colon_re}|{space_re}|\)|\$|$)"
    expr_with_anchors = rf"(?:{expr_prefix_re}{expr_re}{expr_suffix_re})"
    number_with_anchors = rf"(?:{expr_prefix_re}[{currency_units}]?{number_re})"
    expr_or_number = rf"(?:{expr_with_anchors}|{number_with_anchors})"
    answer_prefix_re = r"(?i:answer)"
    regexes = [
        (rf"(?i:final answer is)\:?\s*{expr_or_number}\.?\s?I hope", 0),
        (rf"(?i:final answer.{{0,100}}?)\s+is\:?{expr_or_number}", 50),
        (rf"{answer_prefix_re}{colon_re}(?:.{{0,100}}=\s*|.{{0,50}}?){expr_or_number}(?!\s*=)", 100),
        (rf"{answer_prefix_re}(?:.{{0,100}}=\s*|.{{0,50}}?){expr_or_number}(?!\s*=)", 200),
        (expr_with_anchors, 300),
        (number_with_anchors, 300),
    ]
    return tuple((re.compile(pattern), priority) for pattern, priority in regexes)


EXPR_PATTERNS = _expr_patterns()
_EXPR_GROUPS = tuple(
    (priority, tuple(p for p, q in EXPR_PATTERNS if q == priority))
    for priority in sorted({q for _, q in EXPR_PATTERNS})
)
_STRIP_SEPARATORS = str.maketrans("", "", ", ")
# The one kind of plain-text expression taken as an answer (rule "plain-text arithmetic"): a/b.
_PLAIN_FRACTION = re.compile(r"(\()?(-?\d+)\s*/\s*(\d+)(?(1)\))(\.?)")


def _expr_number(m: re.Match[str]) -> Number | None:
    """math-verify's ``extract_expr`` for a number; an ``a/b`` expression; None to pass over."""
    groups = m.groupdict()
    # The first non-empty integer and decimal groups, in the pattern's order (as extract_expr).
    integer = groups.get("integer1") or groups.get("integer2") or groups.get("integer3") or ""
    decimal = groups.get("decimal1") or groups.get("decimal2") or groups.get("decimal3") or ""
    percent = bool(groups.get("percent"))
    if integer or decimal:
        integer = integer.translate(_STRIP_SEPARATORS).lstrip("0") or "0"
        text = integer + decimal.replace(",", ".")
        if decimal:
            return Number(Fraction(text), "float", percent, text, _significant_digits(text))
        return Number(Fraction(int(text)), "int", percent, text)
    expr = groups.get("expr") or ""
    f = _PLAIN_FRACTION.fullmatch(expr.strip())
    if f is None:
        return None  # arithmetic in prose is not evaluated (docs/guide/grading.md)
    num, den, dot = int(f.group(2)), int(f.group(3)), f.group(4)
    if dot and f.group(1):
        return None  # "(3/4)." is not Python: math-verify's parse_expr fails on it too
    # "3/4." is 3/4.0 to Python's parser, a Float division; "3/0" is zoo: both left to math-verify.
    value = None if dot or den == 0 else Fraction(num, den)
    return Number(value, "quotient", False, expr.strip())


def read_plain(text: str) -> Number | None:
    """The number math-verify's expression patterns take from ``text`` (no LaTeX in it).

    Priority groups in math-verify's order (``final answer ... I hope``, ``final answer is``,
    ``answer:``, ``answer``, then any number or expression), within a group the match that ends
    last first; the first that reads wins. Arithmetic other than ``a/b`` is passed over.
    """
    lower = text.lower()
    # Shortcuts that change nothing: priorities 0 and 50 need "final answer", 100 needs "answer:"
    # and 200 needs "answer" (all case-insensitive); skipping a group that cannot match is exact.
    needs = {0: "final answer", 50: "final answer", 100: "answer:", 200: "answer"}
    for priority, patterns in _EXPR_GROUPS:
        if priority in needs and needs[priority] not in lower:
            continue
        matches = [m for p in patterns for m in p.finditer(text)]
        matches.sort(key=lambda m: (m.end(), -m.start()), reverse=True)
        for m in matches:
            number = _expr_number(m)
            if number is not None:
                return number
    return None


# --------------------------------------------------------------------------- reading a completion


@dataclass(frozen=True, slots=True)
class Reading:
    """How a completion is graded.

    Attributes:
        method: ``boxed`` (one clean box), ``hash`` (a GSM8K ``####`` line), ``plain`` (text with
            no LaTeX), ``math-verify`` (only math-verify's ``parse`` can say) or ``none``.
        answer: The extracted answer, when it is known here.
        number: The answer as math-verify parses it, when it is a plain number.
        parse_text: What a math-verify worker parses to grade it (bounded); None: nothing.
        span: For one clean box, ``\\boxed{content}``: math-verify parses it exactly as the whole
            completion whenever the content parses (see :func:`_clean_box`), so it is graded
            first, once per distinct answer; ``parse_text`` only if the content does not parse.
        problem: Why there is nothing to grade (``empty completion``, ``no answer found``,
            ``answer too long (N chars)``).
    """

    method: str
    answer: str | None = None
    number: Number | None = None
    parse_text: str | None = None
    span: str | None = None
    problem: str | None = None


_CLOSER = re.compile(r"\s*(?:\$\$|\$|\\\]|\\\))")
_OPENER_AT_END = re.compile(r"(?:\$\$|\$|\\\[|\\\()\s*\Z")
# After the box: nothing math-verify could read as a later or longer answer, nor a percent sign.
_TAIL_BAD = re.compile(r"[\d\\{}\[\]%$]|(?i:percent|pct)")
# Between "final answer" and the box: nothing it could capture instead of the box.
_LEAD_BAD = re.compile(r"[\d\\{}\[\]%$]")
_FINAL_ANSWER = re.compile(r"(?i:final answer)")


def latex_wrap(answer: str) -> str:
    """A gold (or ``####``) answer as math-verify reads it: ``\\boxed{...}``, without outer ``$``.

    math-verify's ``parse`` needs a delimiter to read LaTeX: on a bare ``\\sqrt{17}`` it finds
    nothing and on ``12:00`` it reads 12; in a box both read as written.
    """
    s = answer.strip()
    if len(s) >= 2 and s[0] == "$" and s[-1] == "$":
        s = s.strip("$")
    return "\\boxed{" + s + "}"


_BRACES = re.compile(r"[{}]")


def _box_content(text: str, brace: int) -> int | None:
    """Index of the brace closing the one at ``brace``, counting every brace as math-verify's
    ``extract_boxed_content`` does (an escaped ``\\{`` too); None if it does not close soon."""
    depth = 0
    for m in _BRACES.finditer(text, brace, min(len(text), brace + BOXED_SCAN_CHARS)):
        depth += 1 if m.group() == "{" else -1
        if depth == 0:
            return m.start()
    return None


def bounded(text: str) -> str:
    """At most about :data:`MAX_PARSE_CHARS` of ``text`` for math-verify to read.

    A longer text is cut to its end, from a line start where one is near; when the cut drops
    every ``\\boxed``, the last box before it (at most :data:`MAX_ANSWER_CHARS`) is put back
    in front, since a box outranks everything after it in math-verify's extraction.
    """
    if len(text) <= MAX_PARSE_CHARS:
        return text
    cut = len(text) - MAX_PARSE_CHARS
    newline = text.find("\n", cut, cut + LINE_SEARCH_CHARS)
    window = text[newline + 1 :] if newline >= 0 else text[cut:]
    if "\\boxed" in window:
        return window
    start = text.rfind("\\boxed", 0, len(text) - len(window))
    if start < 0 or not text.startswith("{", start + 6):
        return window
    close = _box_content(text, start + 6)
    if close is None or close - start > MAX_ANSWER_CHARS:
        return window
    return text[start : close + 1] + "\n" + window


def _clean_box(text: str) -> tuple[str, int] | None:
    """``(content, start)`` of the one box whose content math-verify's ``parse`` takes as the
    answer whenever that content parses; None if the completion is not that simple.

    The proof, from math-verify's extraction: with one ``\\boxed{`` and no ``\\fbox``, every
    candidate of the boxed priority (50) contains this box and normalises to its content (the
    "all" and "last" box modes agree on one box). No candidate can come first: the
    ``final answer`` patterns (priorities 0 and 50) can capture only a LaTeX span or a number,
    and there is none between ``final answer`` and the box, nor after the box (no digit, ``\\``,
    brace, bracket or ``$`` there), so a later-ending candidate would have to contain the box;
    no percent sign or word can follow the box to make it a percentage, and no next span can
    follow it to make a set.
    """
    start = text.find("\\boxed")
    if start < 0 or text.find("\\boxed", start + 6) >= 0 or "\\fbox" in text:
        return None
    brace = start + 6
    if brace >= len(text) or text[brace] != "{":
        return None  # "\boxed {5}" and "\boxedfoo" are not read as boxes by math-verify
    close = _box_content(text, brace)
    if close is None:
        return None
    content = text[brace + 1 : close]
    if not content.strip():
        return None
    tail_start = close + 1
    m = _CLOSER.match(text, tail_start)
    if m is not None:
        tail_start = m.end()
    if _TAIL_BAD.search(text, tail_start) is not None:
        return None
    fa = _FINAL_ANSWER.search(text, 0, start)
    if fa is not None:
        lead = text[fa.start() : start]
        opener = _OPENER_AT_END.search(lead)
        if opener is not None:
            lead = lead[: opener.start()]
        if _LEAD_BAD.search(lead) is not None:
            return None
    return content, start


def is_lone_box(text: str) -> bool:
    """Whether ``text`` is one ``\\boxed{...}`` and nothing else (a :attr:`Reading.span`)."""
    return text.startswith("\\boxed{") and text.endswith("}") and _box_content(text, 6) == len(text) - 1


def _is_plain(text: str) -> bool:
    """No LaTeX math-verify could find: its LaTeX patterns all need a ``\\``, a ``[`` or two ``$``."""
    return "\\" not in text and "[" not in text and text.count("$") <= 1


def _read_answer(answer: str, method: str) -> Reading:
    """A whole answer (a box's content, a ``####`` line) read as math-verify reads a boxed one."""
    if len(answer) > MAX_ANSWER_CHARS:
        return Reading(method, answer=None, problem=f"answer too long ({len(answer)} chars)")
    wrapped = latex_wrap(answer)
    return Reading(method, answer=answer, number=read_latex_number(wrapped[7:-1]), parse_text=wrapped)


def _hash_line(text: str) -> str | None:
    pos = text.rfind("####")
    if pos < 0:
        return None
    line = text[pos + 4 : pos + 4 + MAX_ANSWER_CHARS + 1].split("\n", 1)[0]
    answer = line.strip().strip("*").strip().rstrip(".").strip()
    return answer or None


def read_completion(completion: str | None) -> Reading:
    """How math-verify would read ``completion``, decided cheaply (see :class:`Reading`).

    In order: one clean ``\\boxed{}`` (its content is the answer; see :func:`_clean_box`); a
    GSM8K ``####`` line when there is no box (read like a gold answer, in a box); text without
    LaTeX (math-verify's own expression patterns, with arithmetic other than ``a/b`` passed
    over); anything else is math-verify's to read, on the bounded completion. The work here is
    a few linear scans, so a 1 MB completion costs milliseconds.
    """
    if not completion or not completion.strip():
        return Reading(NONE, problem="empty completion")
    box = _clean_box(completion)
    if box is not None:
        content, _ = box
        if len(content) > MAX_ANSWER_CHARS:
            return Reading(BOXED, problem=f"answer too long ({len(content)} chars)")
        answer = content.strip()
        number = read_latex_number(answer) if "$" not in answer.replace("\\$", "") else None
        span = "\\boxed{" + content + "}"
        return Reading(BOXED, answer=answer, number=number, parse_text=bounded(completion), span=span)
    if "\\boxed" not in completion and "\\fbox" not in completion:
        line = _hash_line(completion)
        if line is not None:
            return _read_answer(line, HASH)
    text = bounded(completion)
    if _is_plain(text):
        number = read_plain(text)
        if number is None:
            return Reading(PLAIN, problem="no answer found")
        return Reading(PLAIN, answer=number.text, number=number, parse_text=number.parse_text())
    return Reading(MATH_VERIFY, parse_text=text)


def extract_answer(completion: str | None) -> tuple[str | None, str]:
    """The final answer and how it was found, where that is known without math-verify.

    Returns:
        ``(answer, method)``: method ``boxed``, ``hash`` or ``plain`` with the answer;
        ``math-verify`` with None when only math-verify's ``parse`` can say (several boxes, LaTeX
        spans without a box); ``none`` with None when there is nothing to read.
    """
    reading = read_completion(completion)
    return reading.answer, reading.method


def read_gold(gold: str) -> Number | None:
    """The gold answer as a plain number, read as math-verify reads ``\\boxed{gold}``."""
    return read_latex_number(latex_wrap(gold)[7:-1])


# --------------------------------------------------------------------------- without math-verify


_BOX_COMMANDS = ("\\boxed", "\\fbox")
# The content of a box written without braces, ``\boxed 5``: up to the next space or ``$``.
_BARE_BOX = re.compile(r"[^\s${}]+")


def last_box(text: str | None) -> str | None:
    """Content of the last readable ``\\boxed{}`` or ``\\fbox{}``, stripped; None if there is none.

    The one box reader without math-verify: the string fallback of grading
    (``use_math_verify=False``) and a MATH solution's gold answer (``pipeline.datasets``). Braces
    are matched, so ``\\boxed{\\frac{1}{2}}`` gives ``\\frac{1}{2}``; whitespace may separate the
    command from its brace; ``\\boxed 5`` (no braces, as some MATH solutions write it) gives the
    word after it, up to a space or ``$``. A box that is unbalanced within
    :data:`BOXED_SCAN_CHARS`, empty or unreadable is passed over for the one before it, at most
    :data:`BOXED_TRIES` boxes back.
    """
    if not isinstance(text, str):
        return None
    end = len(text)
    for _ in range(BOXED_TRIES):
        pos, cmd = max((text.rfind(c, 0, end), c) for c in _BOX_COMMANDS)
        if pos < 0:
            return None
        after = brace = pos + len(cmd)
        while brace < len(text) and text[brace].isspace():
            brace += 1
        if brace < len(text) and text[brace] == "{":
            close = _box_content(text, brace)
            if close is not None and text[brace + 1 : close].strip():
                return text[brace + 1 : close].strip()
        elif brace > after:
            bare = _BARE_BOX.match(text, brace)
            if bare is not None:
                return bare.group()
        end = pos
    return None


def normalise_string(s: str) -> str:
    """Whitespace collapsed, outer ``$``, spaces and periods removed (string fallback)."""
    return " ".join(s.split()).strip("$ .")
