"""Answer extraction, the exact numeric fast path, and the grading settings: pure code only.

A completion's final answer is extracted in the calling process, cheaply: the last
``\\boxed{...}`` / ``\\fbox{...}`` (balanced braces, nesting allowed), else the text after the
last ``####``, else the last number in the text. Scans are bounded so a 1 MB completion costs
milliseconds.

When the gold answer and the extracted answer both read as plain numbers (integers, decimals,
``a/b``, ``\\frac{a}{b}``, with ``,`` thousands separators, ``$`` and ``%`` stripped), they are
compared exactly as fractions, also in the calling process (:func:`parse_number`).

Nothing here starts a process, handles a signal or imports pyarrow: the math-verify workers of
:mod:`pipeline.grade.pool` import this module to start.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from fractions import Fraction

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

# Bounds that keep extraction linear in a small window whatever the completion's size.
MAX_ANSWER_CHARS = 2_000  # a longer "answer" is not an answer; never sent to the parser
BOXED_SCAN_CHARS = 10_000  # a \boxed{ whose brace does not close within this is unbalanced
BOXED_TRIES = 8  # earlier \boxed occurrences tried when the last ones are unbalanced or empty

# Hard deadline = timeout_s + max(HARD_GRACE_MIN_S, HARD_GRACE_FRACTION * timeout_s): the soft
# SIGALRM inside the worker normally fires first; the kill is for code that ignores signals.
HARD_GRACE_MIN_S = 1.0
HARD_GRACE_FRACTION = 0.5


# --------------------------------------------------------------------------- settings


def _default_workers() -> int:
    try:
        cpus = len(os.sched_getaffinity(0))  # what this process may use, not the host's count
    except AttributeError:
        cpus = os.cpu_count() or 1
    return max(1, min(2, cpus))


@dataclass(frozen=True)
class GradeConfig:
    """Settings of the grading stage.

    Attributes:
        workers: Worker processes running math-verify (1 to 256).
        timeout_s: Wall-clock seconds one item may take in math-verify before it is marked
            ``timeout`` (0 < timeout_s <= 3600). A worker that ignores the soft deadline is
            killed a grace period later and replaced.
        batch_size: Items sent to a worker per message (1 to 10,000).
        use_math_verify: When False, answers that are not plain numbers are compared as
            whitespace-normalised strings and no worker process is started.
    """

    workers: int = field(default_factory=_default_workers)
    timeout_s: float = 5.0
    batch_size: int = 16
    use_math_verify: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.workers, bool) or not isinstance(self.workers, int):
            raise TypeError(f"workers must be an int, got {self.workers!r}")
        if not 1 <= self.workers <= 256:
            raise ValueError(f"workers={self.workers} is out of range; allowed 1 to 256")
        if isinstance(self.timeout_s, bool) or not isinstance(self.timeout_s, int | float):
            raise TypeError(f"timeout_s must be a number, got {self.timeout_s!r}")
        if not 0 < self.timeout_s <= 3600:
            raise ValueError(f"timeout_s={self.timeout_s} is out of range; allowed (0, 3600]")
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int):
            raise TypeError(f"batch_size must be an int, got {self.batch_size!r}")
        if not 1 <= self.batch_size <= 10_000:
            raise ValueError(f"batch_size={self.batch_size} is out of range; allowed 1 to 10000")
        if not isinstance(self.use_math_verify, bool):
            raise TypeError(f"use_math_verify must be a bool, got {self.use_math_verify!r}")

    @property
    def hard_timeout_s(self) -> float:
        """Seconds after which a worker that has not answered is killed."""
        return self.timeout_s + max(HARD_GRACE_MIN_S, HARD_GRACE_FRACTION * self.timeout_s)


def grader_version(config: GradeConfig | None = None) -> str:
    """Name and version of the grader, recorded on the run and on every sample.

    Args:
        config: The grading config; with ``use_math_verify=False`` the grader is the numeric
            fast path plus exact string matching.

    Returns:
        For example ``"math-verify==0.9.0+numeric"`` or ``"numeric+string"``.
    """
    if config is not None and not config.use_math_verify:
        return "numeric+string"
    from importlib.metadata import PackageNotFoundError, version

    try:
        mv = version("math-verify")
    except PackageNotFoundError:
        mv = "missing"
    return f"{GRADER_NAME}=={mv}+numeric"


# --------------------------------------------------------------------------- extraction

_BOX_COMMANDS = ("\\boxed", "\\fbox")
_BRACE = re.compile(r"(?<!\\)[{}]")  # "\{" and "\}" are literal braces of a set
_BARE_TOKEN = re.compile(r"[^\s$]+")
# A minus sign counts only where it cannot be a binary minus ("5-3" ends in 3, not -3).
_LAST_NUMBER = re.compile(r"(?:(?<![\w)\]}])-)?(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?(?:/\d+)?)")


def _boxed_content(text: str, start: int, command: str) -> str | None:
    """Content of the box command at ``start``; None if it is unbalanced or not a box."""
    i = start + len(command)
    n = len(text)
    if i < n and text[i].isalpha():
        return None  # "\boxedfoo" is another command
    while i < n and text[i] == " ":
        i += 1
    if i >= n:
        return None
    if text[i] != "{":
        # "\boxed 5": TeX takes one token; accept what runs up to a space or a "$".
        m = _BARE_TOKEN.match(text, i, min(n, i + MAX_ANSWER_CHARS))
        return m.group(0) if m else None
    depth = 0
    for m in _BRACE.finditer(text, i, min(n, i + BOXED_SCAN_CHARS)):
        depth += 1 if m.group(0) == "{" else -1
        if depth == 0:
            return text[i + 1 : m.start()]
    return None


def _extract_boxed(text: str) -> tuple[str, str] | None:
    end = len(text)
    for _ in range(BOXED_TRIES):
        found = max((text.rfind(cmd, 0, end), cmd) for cmd in _BOX_COMMANDS)
        pos, cmd = found
        if pos < 0:
            return None
        content = _boxed_content(text, pos, cmd)
        if content is not None and content.strip():
            return content.strip(), cmd.lstrip("\\")
        end = pos
    return None


def _extract_hash(text: str) -> str | None:
    pos = text.rfind("####")
    if pos < 0:
        return None
    line = text[pos + 4 : pos + 4 + MAX_ANSWER_CHARS].split("\n", 1)[0]
    answer = line.strip().strip("*").strip().rstrip(".").strip()
    return answer or None


def _extract_last_number(text: str) -> str | None:
    # rfind per digit runs at memory speed, so the last number costs nothing to locate even in
    # a megabyte; the regex then reads only the few hundred characters that end at it.
    last_digit = max(text.rfind(d) for d in "0123456789")
    if last_digit < 0:
        return None
    found = _LAST_NUMBER.findall(text, max(0, last_digit - 200), last_digit + 1)
    return found[-1] if found else None


def extract_answer(completion: str | None) -> tuple[str | None, str]:
    """Extracts the final answer from a completion.

    Order: the last ``\\boxed{...}`` or ``\\fbox{...}`` with balanced braces (an unbalanced or
    empty last box falls back to the one before it), then the text after the last ``####`` up to
    the end of its line, then the last number in the text.

    Args:
        completion: The model's completion; None or blank gives no answer.

    Returns:
        ``(answer, method)`` with method one of ``boxed``, ``fbox``, ``hash``, ``last_number``;
        ``(None, "none")`` when nothing was found.
    """
    if not completion or not completion.strip():
        return None, "none"
    boxed = _extract_boxed(completion)
    if boxed is not None:
        return boxed
    answer = _extract_hash(completion)
    if answer is not None:
        return answer, "hash"
    answer = _extract_last_number(completion)
    if answer is not None:
        return answer, "last_number"
    return None, "none"


# --------------------------------------------------------------------------- numeric fast path

_DECIMAL = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)")
_THOUSANDS = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d*)?")
_SLASH = re.compile(r"([+-]?\d+)\s*/\s*(\d+)")
_TEX_FRAC = re.compile(r"([+-]?)\\[dt]?frac\{\s*([+-]?\d+)\s*\}\{\s*(\d+)\s*\}")
_TEX_TEXT = re.compile(r"\\(?:text|mathrm|textbf|mathbf)\{([^{}]*)\}")
_STRIP = str.maketrans("", "", "$%")


def parse_number(text: str | None) -> Fraction | None:
    """Reads a plain number exactly, or returns None when ``text`` is anything more.

    Accepts integers, decimals, ``a/b`` and ``\\frac{a}{b}`` (also ``\\dfrac``, ``\\tfrac``), with
    ``,`` thousands separators (``1,000``, ``1{,}000``, ``1\\,000``), ``$`` and ``%`` stripped, an
    optional ``\\text{...}`` wrapper and a trailing period.

    Args:
        text: A gold or extracted answer.

    Returns:
        The exact value as a Fraction, or None when the text is not a plain number (or divides
        by zero).
    """
    if text is None or len(text) > 64:
        return None
    s = text.strip()
    if s.startswith("\\"):
        m = _TEX_TEXT.fullmatch(s)
        if m is not None:
            s = m.group(1)
    if "\\" in s:
        s = s.replace("\\!", "").replace("\\,", "").replace("\\$", "").replace("\\%", "")
        m = _TEX_FRAC.fullmatch(s.strip())
        if m is not None:
            sign, num, den = m.groups()
            if int(den) == 0:
                return None
            value = Fraction(int(num), int(den))
            return -value if sign == "-" else value
        if "\\" in s:
            return None
    s = s.translate(_STRIP).replace("{,}", ",").replace("\u2212", "-").strip().rstrip(".")
    if not s:
        return None
    if "," in s:
        if _THOUSANDS.fullmatch(s) is None:
            return None
        s = s.replace(",", "")
    if _DECIMAL.fullmatch(s) is not None:
        # Fraction(int) skips Fraction's string parser: integers are the common case.
        return Fraction(int(s)) if s.lstrip("+-").isdigit() else Fraction(s)
    m = _SLASH.fullmatch(s)
    if m is not None:
        den = int(m.group(2))
        return Fraction(int(m.group(1)), den) if den else None
    return None


def _normalise_string(s: str) -> str:
    return " ".join(s.split()).strip("$ .")


# --------------------------------------------------------------------------- math-verify input


def _latex_wrap(answer: str) -> str:
    # math-verify's LaTeX extraction wants a delimiter; \boxed{} accepts LaTeX and plain forms.
    s = answer.strip()
    if len(s) >= 2 and s[0] == "$" and s[-1] == "$":
        s = s.strip("$")
    return "\\boxed{" + s + "}"
