"""Model-free sampling: every prompt is answered correctly with a known true pass rate.

The `simulate` backend needs no model, GPU or server. It is for testing the pipeline end to end
and for checking the analyses against a ground truth: each prompt has a true pass rate ``p``,
and each sample is right with probability ``p``, independently.

True pass rates:
    * With a pass-rate file (option ``pass_rates``, or the ``model`` argument): Parquet, CSV or
      JSON Lines with a ``pass_rate`` column in [0, 1] and a key column, ``prompt_id`` or else
      ``problem`` (the problem text, matched exactly); rates may be numbers or numeric text.
      A null, NaN or out-of-range rate, a duplicate key, a missing column, or a prompt that is
      not in the file is a `SamplingError` naming the row or prompt, never a default.
    * Without a file (the default rule): ``p0 = sin(pi * u / 2) ** 2``, where ``u`` in (0, 1) is a
      BLAKE2b hash of the prompt id; ``p0`` is Beta(0.5, 0.5)-distributed (U-shaped, mean 0.5)
      over prompts. When the problem's own ``difficulty`` is a finite number ``d`` (a tier or
      rating where larger is harder: 1-9 on the bundled arithmetic set, 1-10 on DeepMath), the
      rate is ``p = p0 ** k`` with ``k = 2 ** ((clamp(d, 0, 12) - 3) / 2)``: tier 3 keeps ``p0``,
      tier 1 raises the mean to 0.64, tier 5 lowers it to 0.375 and tier 9 to 0.20, and every
      tier stays U-shaped (prompts near 0 and near 1). Only the row's own values are used, so a
      prompt's rate never depends on the other prompts it is sampled with.

Outcomes:
    Sample ``i`` of prompt ``pid`` (``i`` from ``params.first_idx``) is correct when ``s / (2**31 - 1) < p``, where
    ``s = derive_seed(seed, pid, i)`` is the per-sample seed every backend uses. Reruns and
    resumed runs therefore give identical tables, and a sample's outcome does not depend on
    shards, batch order or the other prompts; ``p = 0`` is never right and ``p = 1`` always.

Completions:
    A correct sample is ``The answer is \\boxed{<gold>}.`` (surrounding ``$`` removed). A wrong one
    boxes a different answer the grader reads as wrong: for a gold the grader reads as a plain
    number (``grade.extract.parse_number``: integer, decimal, ``a/b``, ``\\frac{a}{b}``, with ``,``
    separators, ``$``, or ``%`` as a hundredth) the gold's value plus a nonzero integer offset in
    [-9, 9] drawn from the sample's seed; for ``\\infty``-like golds the
    opposite infinity; for any other gold ``<gold>+k`` with k in 1..9. ``n_tokens`` is the number
    of whitespace-separated words and ``finish_reason`` is ``stop``, unless the completion has
    more words than ``max_tokens``: then it is cut to ``max_tokens`` words and finishes with
    ``length``, as a real model's would (so it may lose its answer). Temperature and top_p are
    ignored, and so is the template (the prompts are still rendered, to validate them).

Every problem needs its gold ``answer`` (the problems table carries it).
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any, Self

import pyarrow as pa
import pyarrow.csv as pacsv

from pipeline.errors import ConfigError, DatasetError, SamplingError
from pipeline.grade.extract import parse_number
from pipeline.sample.base import (
    Progress,
    SamplingParams,
    derive_seed,
    prepare_prompts,
    rows_to_table,
)

__all__ = [
    "SimulateOptions",
    "SimulateSampler",
    "default_pass_rate",
    "format_number",
    "load_pass_rates",
    "wrong_answer",
]

BACKEND = "simulate"
# `derive_seed` returns values in [0, 2**31 - 1): dividing by this maps them into [0, 1).
_SEED_RANGE = 2**31 - 1
_KEYS = ("prompt_id", "problem")
_MAX_DIFFICULTY = 12.0
_HASH_CHARS = 12


@dataclass(frozen=True)
class SimulateOptions:
    """Options of the simulate backend.

    Attributes:
        pass_rates: a Parquet, CSV or JSON Lines file of true pass rates (see the module
            docstring); None for the default rule.
        fail_once: prompt ids whose first sampling attempt in this process raises
            ``SamplingError``, to rehearse retries and resume without a flaky engine.
    """

    pass_rates: str | os.PathLike[str] | None = None
    fail_once: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "fail_once", tuple(str(p) for p in self.fail_once))


# --- true pass rates ---------------------------------------------------------------------------


def default_pass_rate(prompt_id: str, difficulty: float | None = None) -> float:
    """The default rule's true pass rate of a prompt (see the module docstring)."""
    digest = hashlib.blake2b(f"simulate\x1f{prompt_id}".encode(), digest_size=8).digest()
    u = (int.from_bytes(digest, "little") + 0.5) / 2.0**64
    p = math.sin(math.pi * u / 2.0) ** 2
    if difficulty is not None and isinstance(difficulty, int | float) and math.isfinite(difficulty):
        d = min(max(float(difficulty), 0.0), _MAX_DIFFICULTY)
        p = p ** (2.0 ** ((d - 3.0) / 2.0))
    return p


def _read_rates_table(path: Path) -> pa.Table:
    """Read the file; CSV key columns are read as text (so ids like "0123" keep their zeros)."""
    from pipeline.datasets import read_local

    name = path.name.lower()
    try:
        if name.endswith((".csv", ".csv.gz")):
            # Only an empty cell is null: "nan" or "NA" stay visible in the error message.
            opts = pacsv.ConvertOptions(column_types={k: pa.string() for k in _KEYS}, null_values=[""])
            return pacsv.read_csv(path, convert_options=opts)
        return read_local(path)
    except (DatasetError, pa.ArrowInvalid, OSError) as exc:
        raise SamplingError(f"pass-rate file {str(path)!r}: cannot read it: {exc}") from exc


def _as_rate(value: Any) -> float | None:
    """The value as a float in [0, 1], or None when it is not one."""
    if isinstance(value, Decimal):
        value = float(value)
    elif isinstance(value, str):  # a text column (CSV with an "NA" cell, JSON with "0.5")
        try:
            value = float(value)
        except ValueError:
            return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) and 0.0 <= value <= 1.0 else None


def load_pass_rates(path: str | os.PathLike[str]) -> tuple[str, dict[str, float]]:
    """Read and validate a pass-rate file.

    Returns:
        ``(key, rates)``: the key column (``prompt_id``, or ``problem`` when there is no
        ``prompt_id`` column) and the pass rate of each key.

    Raises:
        FileNotFoundError: the file does not exist.
        SamplingError: the file is unreadable, lacks a column, or a row has a null or duplicate
            key or a pass rate that is null, NaN or outside [0, 1] (the message names the row
            (0-based) and the value).
    """
    p = Path(path).expanduser()
    if not p.is_file():
        raise FileNotFoundError(f"pass-rate file {str(path)!r} does not exist (or is not a file)")
    table = _read_rates_table(p)
    names = table.schema.names
    key = next((k for k in _KEYS if k in names), None)
    missing = (["pass_rate"] if "pass_rate" not in names else []) + ([] if key else ["prompt_id or problem"])
    if missing:
        raise SamplingError(f"pass-rate file {str(path)!r} lacks column(s) {', '.join(missing)}; it has {names}")
    keys = table.column(key).to_pylist()
    values = table.column("pass_rate").to_pylist()
    rates: dict[str, float] = {}
    first_row: dict[str, int] = {}
    for i, (k, v) in enumerate(zip(keys, values, strict=True)):
        if isinstance(k, int) and not isinstance(k, bool):
            k = str(k)
        if not isinstance(k, str) or (key == "prompt_id" and not k):
            raise SamplingError(f"pass-rate file {str(path)!r} row {i}: {key}={k!r} must be a non-empty string")
        rate = _as_rate(v)
        if rate is None:
            raise SamplingError(
                f"pass-rate file {str(path)!r} row {i} ({key}={_short(k)!r}): pass_rate={v!r} "
                "must be a number in [0, 1]"
            )
        if k in rates:
            raise SamplingError(f"pass-rate file {str(path)!r} row {i}: {key}={_short(k)!r} repeats row {first_row[k]}")
        rates[k] = rate
        first_row[k] = i
    return key, rates


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:_HASH_CHARS]


# --- problems -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Problem:
    prompt_id: str
    problem: str
    answer: str
    difficulty: float | None


def _get(row: Any, name: str) -> Any:
    if isinstance(row, Mapping):
        return row.get(name)
    return getattr(row, name, None)


def _problems(problems: Any, template: str | None) -> list[_Problem]:
    """The problems with their gold answers and difficulties, validated like every backend's."""
    if isinstance(problems, pa.Table | pa.RecordBatch):
        names = problems.schema.names
        n = problems.num_rows
        cols = {c: problems.column(c).to_pylist() if c in names else [None] * n for c in ("answer", "difficulty")}
        items = prepare_prompts(problems, template)  # ids, texts, duplicates: the shared checks
        texts = problems.column("problem").to_pylist()
    else:
        rows = list(problems)
        cols = {c: [_get(r, c) for r in rows] for c in ("answer", "difficulty")}
        items = prepare_prompts(rows, template)
        texts = [_get(r, "problem") for r in rows]
    out = []
    for item, text, answer, diff in zip(items, texts, cols["answer"], cols["difficulty"], strict=True):
        if answer is not None and not isinstance(answer, str):
            answer = str(answer)
        if not (answer or "").strip():
            raise SamplingError(
                f"prompt {item.prompt_id}: the simulate backend needs the gold answer "
                f"(an `answer` column or field), got {answer!r}"
            )
        usable = isinstance(diff, int | float) and not isinstance(diff, bool) and math.isfinite(diff)
        out.append(_Problem(item.prompt_id, text, answer.strip(), float(diff) if usable else None))
    return out


# --- completions --------------------------------------------------------------------------------

_INFINITY = re.compile(r"([+-]?)\s*(?:\\infty|\\infinity|oo|inf|infinity|∞)", re.IGNORECASE)


def _unwrap(gold: str) -> str:
    s = gold.strip()
    if len(s) >= 2 and s[0] == "$" and s[-1] == "$":
        s = s[1:-1].strip()
    return s


def format_number(value: Fraction) -> str:
    """An exact number as the grader reads it: an integer, a finite decimal or ``a/b``."""
    if value.denominator == 1:
        return str(value.numerator)
    den = value.denominator
    for f in (2, 5):
        while den % f == 0:
            den //= f
    if den == 1:
        return format(Decimal(value.numerator) / Decimal(value.denominator), "f")
    return f"{value.numerator}/{value.denominator}"


def wrong_answer(gold: str, sample_seed: int) -> str:
    """A different answer that the grader grades incorrect (see the module docstring)."""
    s = _unwrap(gold)
    k = sample_seed % 9 + 1
    value = parse_number(s)  # the grader's own reading of a plain number (grade.extract)
    if value is not None:
        return format_number(value + (k if (sample_seed // 9) % 2 else -k))
    m = _INFINITY.fullmatch(s)
    if m is not None:
        return "\\infty" if m.group(1) == "-" else "-\\infty"
    return f"{s}+{k}"


def _completion(text: str, max_tokens: int) -> tuple[str, str, int]:
    words = text.split()
    if len(words) <= max_tokens:
        return text, "stop", len(words)
    return " ".join(words[:max_tokens]), "length", max_tokens


# --- the sampler --------------------------------------------------------------------------------


class SimulateSampler:
    """Answers each prompt correctly with its true pass rate, deterministically from the seed.

    Args:
        model: a pass-rate file (the same as ``pass_rates``), or None.
        **options: fields of `SimulateOptions`.

    Raises:
        ConfigError: an unknown option, or ``model`` and ``pass_rates`` naming different files.
        FileNotFoundError: the pass-rate file does not exist.
        SamplingError: the pass-rate file is unreadable or invalid (names the row and value).
    """

    backend = BACKEND

    def __init__(self, model: str | os.PathLike[str] | None = None, **options: Any) -> None:
        unknown = sorted(set(options) - {f.name for f in fields(SimulateOptions)})
        if unknown:
            raise ConfigError(f"the simulate backend takes only the options pass_rates and fail_once, not {unknown}")
        self.options = SimulateOptions(**options)
        self._fail_once = set(self.options.fail_once)
        path = self.options.pass_rates
        if model is not None:
            if path is not None and _resolved(model) != _resolved(path):
                raise ConfigError(
                    f"model={str(model)!r} and pass_rates={str(path)!r} name different pass-rate files; give one"
                )
            path = model
        self.rates: dict[str, float] | None = None
        self.key: str | None = None
        self.path: Path | None = None
        if path is None:
            self.model_name = BACKEND
        else:
            self.path = Path(path).expanduser()
            self.key, self.rates = load_pass_rates(self.path)
            self.model_name = f"{BACKEND}:{self.path.stem}-{_file_digest(self.path)}"

    def _pass_rates(self, problems: list[_Problem]) -> list[float]:
        if self.rates is None:
            return [default_pass_rate(p.prompt_id, p.difficulty) for p in problems]
        out = []
        for p in problems:
            rate = self.rates.get(p.prompt_id if self.key == "prompt_id" else p.problem)
            if rate is None:
                by = "" if self.key == "prompt_id" else f" (matched by its problem text {_short(p.problem)!r})"
                raise SamplingError(f"prompt {p.prompt_id}{by} is not in the pass-rate file {str(self.path)!r}")
            out.append(rate)
        return out

    def true_pass_rates(self, problems: Any) -> dict[str, float]:
        """The true pass rate of every problem, by prompt id (what sampling draws from)."""
        items = _problems(problems, None)
        return dict(zip((p.prompt_id for p in items), self._pass_rates(items), strict=True))

    def sample(
        self,
        problems: Any,
        params: SamplingParams,
        progress: Progress | None = None,
        *,
        template: str | None = None,
    ) -> pa.Table:
        """Simulate `params.n` completions per problem, sample indices from `params.first_idx`
        (see `Sampler.sample`)."""
        items = _problems(problems, template)
        for item in items:
            if item.prompt_id in self._fail_once:
                self._fail_once.discard(item.prompt_id)
                raise SamplingError(f"simulated failure on prompt {item.prompt_id} (fail_once)")
        rates = self._pass_rates(items)  # every prompt checked before any sample
        rows: list[tuple[str, int, str | None, str | None, int | None]] = []
        for item, rate in zip(items, rates, strict=True):
            gold = _unwrap(item.answer)
            for idx in params.sample_indices:
                s = derive_seed(params.seed, item.prompt_id, idx)
                answer = gold if s / _SEED_RANGE < rate else wrong_answer(gold, s)
                text, finish, n_tokens = _completion(f"The answer is \\boxed{{{answer}}}.", params.max_tokens)
                rows.append((item.prompt_id, idx, text, finish, n_tokens))
            if progress is not None:
                progress(params.n)
        return rows_to_table(rows)

    def close(self) -> None:
        """Nothing to release."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _resolved(path: str | os.PathLike[str]) -> Path:
    return Path(path).expanduser().resolve()
