"""Dataset adapters: every source becomes rows of the ``problems`` table.

Sources are the Hugging Face hub (by name, at a pinned revision), local files (Parquet, JSON Lines
or CSV; a single file or the hub layout ``data/<split>-*.parquet``) and the bundled ``arithmetic``
generator, the default that needs no data at all.

Trainer formats are read as they are: verl's RL parquet (``prompt`` as chat messages,
``reward_model.ground_truth``, ``data_source``, ``extra_info``), MATH (``problem``, ``solution``,
``answer``, ``level``, ``subject``) and TRL / open-r1 (``problem`` with ``answer`` or ``solution``).
A row loaded from a local file keeps its original fields, as JSON, in ``problems.original``, so
``pipeline.export`` can write it back unchanged (``original_json`` / ``original_row``).
"""

from __future__ import annotations

import base64
import datetime
import gzip
import hashlib
import json
import logging
import math
import os
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq

from pipeline import schema
from pipeline.errors import ConfigError, DatasetError
from pipeline.grade.extract import last_box

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Adapter:
    """How one dataset maps onto the ``problems`` table."""

    name: str
    description: str
    hub: str | None = None
    config: str | None = None
    revision: str | None = None
    split: str = "train"
    columns: tuple[str, ...] = ()  # source columns needed (only these are read)
    convert: Callable[[pa.Table], dict[str, pa.Array | list]] | None = None
    # Columns a file must have (default: ``columns`` less ``difficulty`` and ``source``); a
    # converter checks alternatives itself (MATH: ``answer`` or ``solution``).
    required: tuple[str, ...] | None = None


#: Schema metadata key of a loaded problems table: its collapsed rows (``collapsed_rows``).
COLLAPSED_KEY = "pipeline.collapsed"


@dataclass(frozen=True)
class LoadResult:
    """Problems plus what the load summary reports."""

    problems: pa.Table
    rows_read: int
    duplicates: int
    status_counts: dict[str, int] = field(default_factory=dict)
    #: Each source row collapsed into an earlier one: ``(row number, prompt_id it became, original
    #: JSON text or None)``, for matching a log that names the dropped row (``observe/match``).
    collapsed: tuple[tuple[int, str, str | None], ...] = ()


# --- stable ids ---------------------------------------------------------------------------------

_SPACE = re.compile(r"\s+")


def normalize_problem(text: str) -> str:
    """Whitespace-collapsed, stripped problem text: the part of a problem its id depends on."""
    return _SPACE.sub(" ", text or "").strip()


def prompt_id(dataset: str, problem: str) -> str:
    """Stable id of a problem: the same on every run and machine (sha256 of dataset + text)."""
    digest = hashlib.sha256(f"{dataset}\n{normalize_problem(problem)}".encode()).hexdigest()
    return digest[:16]


def cell_text(value: Any, *, origin: str, column: str, row: int) -> str | None:
    """One cell of a text column (problem, answer, completion, id) as text; None when missing.

    A number is text (answers are ``4`` as often as ``"4"``). NaN is missing, not ``"nan"``: it is
    how pandas writes an empty cell of a numeric column. Bytes must be UTF-8. A list or a mapping
    has no one text form (which element is the answer?) and is a ``DatasetError`` naming
    ``origin`` (the file), the column, the row (0-based) and the value.
    """
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, float):
        return None if math.isnan(value) else str(value)
    if isinstance(value, Decimal):
        return None if value.is_nan() else str(value)
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DatasetError(
                f"{origin}: column {column!r} row {row} is not UTF-8 text ({exc.reason}): {value[:60]!r}"
            ) from exc
    if isinstance(value, list | tuple | dict | set):
        raise DatasetError(
            f"{origin}: column {column!r} row {row} holds a {type(value).__name__} {str(value)[:200]!r}, "
            "not a text or a number; write one value per row (e.g. the final answer as a string)"
        )
    return str(value)


# --- converters per source ----------------------------------------------------------------------


def _col(table: pa.Table, name: str) -> list:
    return table.column(name).to_pylist()


def gsm8k_gold(solution: str | None) -> str | None:
    """GSM8K's gold answer: the text after ``####``, commas removed (None without one, NaN included)."""
    if not isinstance(solution, str) or "####" not in solution:
        return None
    return solution.rsplit("####", 1)[1].strip().replace(",", "")


def _convert_gsm8k(table: pa.Table) -> dict:
    return {"problem": _col(table, "question"), "answer": [gsm8k_gold(s) for s in _col(table, "answer")]}


def _convert_bigmath(table: pa.Table) -> dict:
    rates = _col(table, "llama8b_solve_rate")
    prior_n, prior_c = [], []
    for i, rate in enumerate(rates):
        if rate is None or rate != rate:  # null or NaN: no prior measurement, kept as null
            prior_n.append(None)
            prior_c.append(None)
            continue
        if not 0.0 <= float(rate) <= 1.0:
            raise DatasetError(f"row {i}: llama8b_solve_rate {rate!r} is not in [0, 1]")
        prior_n.append(64)
        prior_c.append(round(64 * float(rate)))
    return {
        "problem": _col(table, "problem"),
        "answer": _col(table, "answer"),
        "source": _col(table, "source"),
        "domain": [", ".join(d) if isinstance(d, list) else d for d in _col(table, "domain")],
        "prior_n": prior_n,
        "prior_c": prior_c,
    }


def _convert_deepmath(table: pa.Table) -> dict:
    return {
        "problem": _col(table, "question"),
        "answer": _col(table, "final_answer"),
        "difficulty": _col(table, "difficulty"),
        "topic": _col(table, "topic"),
    }


def _convert_generic(table: pa.Table) -> dict:
    return {"problem": _col(table, "problem"), "answer": _col(table, "answer"), **_convert_generic_optional(table)}


def _missing_value(value: Any) -> bool:
    """A cell that holds no answer: null, NaN, or blank text."""
    if value is None:
        return True
    if isinstance(value, float):
        return math.isnan(value)
    return isinstance(value, str) and not value.strip()


def _answer_or_boxed(table: pa.Table) -> list:
    """Each row's ``answer``, or the last box of its ``solution`` when the answer is missing
    (MATH's gold answer; read by the grader's one box reader, ``grade.extract.last_box``)."""
    n = table.num_rows
    answers = _col(table, "answer") if "answer" in table.column_names else [None] * n
    solutions = _col(table, "solution") if "solution" in table.column_names else [None] * n
    return [last_box(s) if _missing_value(a) else a for a, s in zip(answers, solutions, strict=True)]


def _need_answer(table: pa.Table, adapter: str) -> None:
    if "answer" not in table.column_names and "solution" not in table.column_names:
        raise DatasetError(
            f"adapter {adapter!r} needs column 'answer' or 'solution' (whose last \\boxed{{}} is the answer); "
            f"columns found: {table.column_names}"
        )


_TRAILING_NUMBER = re.compile(r"([-+]?\d+(?:\.\d+)?)\s*$")


def label_number(value: Any) -> float | None:
    """A difficulty label as a number: ``5``, ``"5"``, ``"Level 5"`` give 5.0; None when it has none.

    MATH writes its level as ``"Level 5"`` (and ``"Level ?"`` for a few rows), MATH-500 as 5,
    verl's copy of MATH-500 as ``"5"``.
    """
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float | Decimal):
        number = float(value)
        return number if math.isfinite(number) else None
    if isinstance(value, str):
        match = _TRAILING_NUMBER.search(value.strip())
        return float(match[1]) if match else None
    return None


def _convert_math(table: pa.Table) -> dict:
    _need_answer(table, "math")
    out = {"problem": _col(table, "problem"), "answer": _answer_or_boxed(table)}
    if "level" in table.column_names:
        out["difficulty"] = [label_number(v) for v in _col(table, "level")]
    for topic in ("subject", "type"):  # MATH-500 says subject, the original MATH type
        if topic in table.column_names:
            out["topic"] = _col(table, topic)
            break
    for optional in ("source", "domain", "split"):
        if optional in table.column_names:
            out[optional] = _col(table, optional)
    return out


def _convert_trl(table: pa.Table) -> dict:
    _need_answer(table, "trl")
    out = _convert_generic_optional(table)
    out.update({"problem": _col(table, "problem"), "answer": _answer_or_boxed(table)})
    return out


_FRACTION = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


def difficulty_value(value: Any) -> float | None:
    """A ``difficulty`` cell as a number: a label (``label_number``), or a pass rate written as a
    fraction (POLARIS: ``"7/8"`` gives 0.875)."""
    if isinstance(value, str) and (match := _FRACTION.match(value)) and int(match[2]) > 0:
        return int(match[1]) / int(match[2])
    return label_number(value)


def _convert_generic_optional(table: pa.Table) -> dict:
    out = {}
    for optional in ("source", "domain", "topic", "difficulty", "prior_n", "prior_c", "split"):
        if optional in table.column_names:
            out[optional] = _col(table, optional)
    if "difficulty" in out:  # a text label ("Level 5", POLARIS's "7/8") as a number, not a failed cast
        out["difficulty"] = [difficulty_value(v) for v in out["difficulty"]]
    return out


# --- verl's RL format ---------------------------------------------------------------------------

VERL_PREFIX = "verl-"  # dataset names of files read with the verl adapter: their rows bring their own messages


def sends_own_messages(dataset: str | None) -> bool:
    """Whether a dataset's rows are sent as their own chat messages (verl's ``prompt``), not
    through a template (``sample.templates.template_for``)."""
    return bool(dataset) and dataset.startswith(VERL_PREFIX)


def _message_text(content: Any) -> str:
    """A message's text: a string, or the text parts of a multimodal content list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text") or "" for p in content if isinstance(p, dict) and p.get("type") == "text")
    return "" if content is None else str(content)


def verl_messages(value: Any, *, origin: str = "verl prompt", row: int | None = None) -> list[dict]:
    """verl's ``prompt`` cell as a list of chat messages (``role``, ``content``).

    A list of mappings is the format; a JSON string of one is read; a plain string is one user
    message. Anything else is a ``DatasetError`` naming the row and the value.
    """
    where = f"{origin}: column 'prompt'" + (f" row {row}" if row is not None else "")
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                value = json.loads(text)
            except json.JSONDecodeError:
                return [{"role": "user", "content": value}]
        else:
            return [{"role": "user", "content": value}]
    if value is None:
        return []
    if not isinstance(value, list | tuple) or not all(isinstance(m, dict) and "content" in m for m in value):
        raise DatasetError(
            f"{where} is {str(value)[:200]!r}, not chat messages; verl's prompt is a list of "
            "{'role': ..., 'content': ...} (tokenizer.apply_chat_template's input)"
        )
    return [dict(m) for m in value]


def user_text(messages: list[dict]) -> str:
    """The user-visible problem of a conversation: the last user message's text (its
    instruction included), or the last message's when none says ``user``."""
    users = [m for m in messages if m.get("role") == "user"] or messages[-1:]
    return _message_text(users[-1].get("content")) if users else ""


def _struct_cells(table: pa.Table, name: str, origin: str) -> list[dict | None]:
    """A mapping column (a struct, or JSON text of objects) as dicts; None where null."""
    values = _col(table, name)
    out: list[dict | None] = []
    for i, v in enumerate(values):
        if isinstance(v, str):
            try:
                v = json.loads(v)
            except json.JSONDecodeError as exc:
                raise DatasetError(
                    f"{origin}: column {name!r} row {i} is text that is not a JSON object: {v[:200]!r}"
                ) from exc
        if v is not None and not isinstance(v, dict):
            raise DatasetError(f"{origin}: column {name!r} row {i} holds {str(v)[:200]!r}, not a mapping")
        out.append(v)
    return out


def _convert_verl(table: pa.Table) -> dict:
    origin = "verl file"
    reward = table.schema.field("reward_model").type
    if pa.types.is_struct(reward) and "ground_truth" not in [reward.field(i).name for i in range(reward.num_fields)]:
        names = [reward.field(i).name for i in range(reward.num_fields)]
        raise DatasetError(
            f"column 'reward_model' has no field 'ground_truth' (fields: {names}); verl's reward "
            "functions read reward_model['ground_truth'], the gold answer"
        )
    rewards = _struct_cells(table, "reward_model", origin)
    if not any(r is not None and "ground_truth" in r for r in rewards):
        raise DatasetError(
            "no row's 'reward_model' has a 'ground_truth'; verl's reward functions read "
            "reward_model['ground_truth'], the gold answer"
        )
    prompts = _col(table, "prompt")
    messages = [verl_messages(v, origin=origin, row=i) for i, v in enumerate(prompts)]
    out: dict[str, list] = {
        "problem": [user_text(m) for m in messages],
        "answer": [None if r is None else r.get("ground_truth") for r in rewards],
    }
    if "data_source" in table.column_names:
        out["source"] = _col(table, "data_source")
    if "ability" in table.column_names:
        out["domain"] = _col(table, "ability")
    if "extra_info" in table.column_names:
        extra = [e or {} for e in _struct_cells(table, "extra_info", origin)]
        topics = [e.get("subject", e.get("topic")) for e in extra]
        levels = [label_number(e.get("level", e.get("difficulty"))) for e in extra]
        if any(t is not None for t in topics):
            out["topic"] = [None if t is None else str(t) for t in topics]
        if any(v is not None for v in levels):
            out["difficulty"] = levels
        splits = [e.get("split") for e in extra]
        if all(isinstance(v, str) for v in splits):
            out["split"] = splits
    return out


ADAPTERS: dict[str, Adapter] = {
    a.name: a
    for a in (
        Adapter(
            "gsm8k",
            "Grade-school math word problems; gold is the text after '####'.",
            hub="openai/gsm8k",
            config="main",
            revision="cc7b047b6e5bb11b4f1af84efc572db110a51b3c",
            split="test",
            columns=("question", "answer"),
            convert=_convert_gsm8k,
        ),
        Adapter(
            "bigmath",
            "Big-Math RL-verified problems with Llama-8B solve rates (64 rollouts) as priors.",
            hub="SynthLabsAI/Big-Math-RL-Verified",
            revision="main",
            columns=("problem", "answer", "source", "domain", "llama8b_solve_rate"),
            convert=_convert_bigmath,
            required=("problem", "answer", "llama8b_solve_rate"),
        ),
        Adapter(
            "deepmath",
            "DeepMath-103K: hard problems with difficulty ratings and topics.",
            hub="zwhe99/DeepMath-103K",
            revision="5cf055d1fe3d7a2eb19719ac020211469736ae44",
            columns=("question", "final_answer", "difficulty", "topic"),
            convert=_convert_deepmath,
        ),
        Adapter(
            "arithmetic",
            "Bundled seeded arithmetic in difficulty tiers (no download); the default.",
            columns=("problem", "answer", "difficulty", "source"),
            convert=_convert_generic,
        ),
        Adapter(
            "verl",
            "verl's RL parquet: 'prompt' (chat messages, sent as they are), 'reward_model.ground_truth', "
            "'data_source', 'extra_info'.",
            columns=("prompt", "reward_model", "data_source", "ability", "extra_info"),
            convert=_convert_verl,
            required=("prompt", "reward_model"),
        ),
        Adapter(
            "math",
            "MATH: 'problem', 'solution', 'answer' (else the last \\boxed{} of the solution), 'level', 'subject'.",
            columns=("problem", "solution", "answer", "level", "subject"),
            convert=_convert_math,
            required=("problem",),
        ),
        Adapter(
            "trl",
            "TRL / open-r1: 'problem' with 'answer' or 'solution' (its last \\boxed{} is the answer).",
            columns=("problem", "answer", "solution"),
            convert=_convert_trl,
            required=("problem",),
        ),
        Adapter(
            "local",
            "Any local file with 'problem' and 'answer' columns (or a --columns mapping).",
            columns=("problem", "answer"),
            convert=_convert_generic,
        ),
    )
}

# Adapters of local files whose datasets are named after the file (``local-<stem>``, see
# ``local_name``): a file loaded as ``local`` before the MATH and TRL adapters existed keeps its
# name and prompt ids.
FILE_NAMED = ("local", "math", "trl")


def detect_adapter(columns: list[str]) -> str:
    """Pick an adapter from the columns a local file has, first match wins:

    ``prompt`` and ``reward_model``: verl; ``problem``, ``answer`` and ``llama8b_solve_rate``:
    bigmath; ``question`` and ``final_answer``: deepmath; ``problem``, ``solution`` and ``level``:
    math; ``problem`` with ``answer`` or ``solution``: trl; ``question`` and ``answer``: gsm8k;
    anything else: local (which names the columns it lacks). A file with both ``problem`` and
    ``question`` (AIME 2024) is read by its ``problem``.
    """
    cols = set(columns)
    if {"prompt", "reward_model"} <= cols:
        return "verl"
    if {"problem", "answer", "llama8b_solve_rate"} <= cols:
        return "bigmath"
    if {"question", "final_answer"} <= cols:
        return "deepmath"
    if {"problem", "solution", "level"} <= cols:
        return "math"
    if "problem" in cols and cols & {"answer", "solution"}:
        return "trl"
    if {"question", "answer"} <= cols:
        return "gsm8k"
    return "local"


# --- the bundled arithmetic generator -----------------------------------------------------------


# Tiers from easy to hopeless for the bundled 135M model (measured at temperature 0.7: the first
# tiers pass about 60-80% of the time, the last ones never). Each maker returns (text, value).
def _tier_makers(rng: random.Random) -> list[tuple[str, Callable[[], tuple[str, int]]]]:
    r = rng.randint

    def add(lo_a: int, hi_a: int, lo_b: int, hi_b: int) -> Callable[[], tuple[str, int]]:
        return lambda: (lambda a, b: (f"{a} + {b}", a + b))(r(lo_a, hi_a), r(lo_b, hi_b))

    def mul(lo_a: int, hi_a: int, lo_b: int, hi_b: int) -> Callable[[], tuple[str, int]]:
        return lambda: (lambda a, b: (f"{a} * {b}", a * b))(r(lo_a, hi_a), r(lo_b, hi_b))

    return [
        ("add one", add(1, 8, 1, 1)),
        ("small add", add(1, 5, 1, 5)),
        ("add zero", add(2, 30, 0, 0)),
        ("1-digit add", add(1, 9, 1, 9)),
        ("1-digit mul", mul(2, 9, 2, 9)),
        ("2-digit + 1-digit", add(10, 99, 1, 9)),
        ("2-digit add", add(10, 99, 10, 99)),
        ("two steps", lambda: (lambda a, b, c: (f"({a} + {b}) * {c}", (a + b) * c))(r(2, 9), r(2, 9), r(2, 9))),
        ("3x2-digit mul", mul(101, 999, 11, 99)),
    ]


# The distinct texts each tier above can make (the product of its operands' ranges), in order: no
# seed makes more problems than their sum, so a larger size is refused before any is drawn.
_TIER_SIZES = (8, 25, 29, 81, 64, 90 * 9, 90 * 90, 8**3, 899 * 89)
ARITHMETIC_MAX = sum(_TIER_SIZES)


def arithmetic_problems(n: int = 180, seed: int = 0) -> pa.Table:
    """Seeded arithmetic problems with exact integer answers, tiers interleaved.

    Rows cycle through the tiers, so the first ``k`` rows of any size are balanced across
    difficulty; ``difficulty`` is the tier number (1 = easiest) and ``source`` its label.
    """
    if n < 1:
        raise DatasetError(f"arithmetic size must be >= 1, got {n}")
    if n > ARITHMETIC_MAX:
        raise DatasetError(
            f"arithmetic size {n} is more than the {ARITHMETIC_MAX} distinct problems it can make; "
            f"--limit at most {ARITHMETIC_MAX}"
        )
    rng = random.Random(seed)
    tiers = _tier_makers(rng)
    rows, seen = [], set()
    exhausted: set[int] = set()  # small tiers (1-digit sums, products) run out of new problems
    tier = -1
    while len(rows) < n:
        if len(exhausted) == len(tiers):
            raise DatasetError(f"arithmetic size {n} is more than the {len(rows)} distinct problems it can make")
        tier = (tier + 1) % len(tiers)
        if tier in exhausted:
            continue
        label, make = tiers[tier]
        for _ in range(200):
            text, value = make()
            if text not in seen:
                break
        else:
            exhausted.add(tier)
            continue
        seen.add(text)
        rows.append(
            {"problem": f"Calculate {text}.", "answer": str(value), "difficulty": float(tier + 1), "source": label}
        )
    return pa.Table.from_pylist(rows)


# --- reading files and the hub ------------------------------------------------------------------


def read_local(path: str | os.PathLike, split: str | None = None) -> pa.Table:
    """Read a Parquet, JSON Lines or CSV file, or a folder in the hub layout.

    A file with no rows, text that is not UTF-8 or a JSON line that is not an object is a
    ``DatasetError`` naming the file and the line (JSON Lines, CSV) or the column and row (Parquet).
    A JSON Lines column mixing strings and numbers (answers ``"1/2"`` and ``4``) is read as text.
    """
    path = Path(path)
    if not path.exists():
        raise DatasetError(f"data file {str(path)!r} does not exist")
    if path.is_dir():
        pattern = f"{split}-*.parquet" if split else "*.parquet"
        files = sorted((path / "data").glob(pattern)) or sorted(path.rglob(pattern))
        if not files:
            raise DatasetError(f"no Parquet files matching {pattern!r} under {str(path)!r}")
        table = pa.concat_tables([_read_parquet(f) for f in files], promote_options="permissive")
        return _nonempty(table, path)
    suffix = "".join(path.suffixes[-2:]).lower() if path.suffix == ".gz" else path.suffix.lower()
    if suffix == ".parquet":
        return _nonempty(_read_parquet(path), path)
    if suffix in (".jsonl", ".json", ".ndjson", ".jsonl.gz"):
        return _nonempty(_read_json(path), path)
    if suffix in (".csv", ".csv.gz"):
        return _nonempty(_read_csv(path), path)
    raise DatasetError(f"unsupported file type {path.suffix!r} for {str(path)!r}; use .parquet, .jsonl or .csv")


def _nonempty(table: pa.Table, path: Path) -> pa.Table:
    if table.num_rows == 0:
        raise DatasetError(f"{str(path)!r} has no rows (columns: {table.column_names}); nothing to load")
    return table


def _read_parquet(path: Path) -> pa.Table:
    try:
        table = pq.read_table(path)
    except pa.ArrowInvalid as exc:
        raise DatasetError(f"cannot read {str(path)!r}: {exc}") from exc
    _check_utf8(table, path)
    return table


def _check_utf8(table: pa.Table, path: Path) -> None:
    """``DatasetError`` naming the column and row of the first string that is not UTF-8.

    Parquet and Arrow's JSON reader do not check that string bytes decode; a bad one would only
    fail much later, in whatever first turns it into Python text, naming nothing.
    """
    try:
        table.validate(full=True)
        return
    except pa.ArrowInvalid as exc:
        cause = exc
    for name in table.column_names:
        column = table.column(name)
        if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
            continue
        offset = 0
        for chunk in column.chunks:
            target = pa.large_binary() if pa.types.is_large_string(chunk.type) else pa.binary()
            for i, raw in enumerate(chunk.view(target).to_pylist()):
                if raw is None:
                    continue
                try:
                    raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise DatasetError(
                        f"{str(path)!r}: column {name!r} row {offset + i} is not UTF-8 text "
                        f"({exc.reason} at byte {exc.start}): {raw[max(0, exc.start - 20) : exc.start + 20]!r}"
                    ) from exc
            offset += len(chunk)
    raise DatasetError(f"cannot read {str(path)!r}: {cause}") from cause


def _open_binary(path: Path):
    return gzip.open(path, "rb") if path.suffix.lower() == ".gz" else open(path, "rb")


def _first_bad_utf8_line(path: Path) -> str | None:
    """Where the first byte that is not UTF-8 is, as ``line L (...)``; None when every line decodes."""
    with _open_binary(path) as fh:
        for line_no, raw in enumerate(fh, 1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                return (
                    f"line {line_no} is not UTF-8 text ({exc.reason} at byte {exc.start} of the line): "
                    f"{raw[max(0, exc.start - 20) : exc.start + 20]!r}"
                )
    return None


def _read_csv(path: Path) -> pa.Table:
    try:
        table = pacsv.read_csv(path)
    except pa.ArrowInvalid as exc:
        raise DatasetError(f"cannot read {str(path)!r}: {exc}") from exc
    # Arrow's CSV reader turns a column with bytes that are not UTF-8 into binary: problems would
    # become "b'...'" strings. Name the line instead.
    binary = [f.name for f in table.schema if pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type)]
    if binary:
        where = _first_bad_utf8_line(path) or "a cell is not UTF-8 text"
        raise DatasetError(f"{str(path)!r}: {where} (column(s) {binary}); save the file as UTF-8")
    return table


def _read_json(path: Path) -> pa.Table:
    """Arrow's fast JSON Lines reader; on any failure, a line-by-line reader that names the line."""
    try:
        table = pajson.read_json(path)
        table.validate(full=True)  # Arrow's JSON reader lets bytes that are not UTF-8 through
        return table
    except pa.ArrowInvalid as exc:
        # A column changing type ("changed from string to number in row 1"), a syntax error, bad
        # UTF-8: the slow reader either reads it (mixed text and numbers become text) or raises
        # a DatasetError naming the line.
        log.info("%s: Arrow's JSON reader failed (%s); reading line by line", path, exc)
    return _read_json_lines(path)


def _read_json_lines(path: Path) -> pa.Table:
    rows: list[dict[str, Any]] = []
    lines: list[int] = []
    with _open_binary(path) as fh:
        for line_no, raw in enumerate(fh, 1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DatasetError(
                    f"{str(path)!r}: line {line_no} is not UTF-8 text ({exc.reason} at byte {exc.start} of the "
                    f"line): {raw[max(0, exc.start - 20) : exc.start + 20]!r}; save the file as UTF-8"
                ) from exc
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as exc:
                raise DatasetError(
                    f"{str(path)!r}: line {line_no} is not valid JSON ({exc.msg} at column {exc.colno}); "
                    "a JSON Lines file holds one JSON object per line"
                ) from exc
            if not isinstance(obj, dict):
                raise DatasetError(
                    f"{str(path)!r}: line {line_no} holds a JSON {type(obj).__name__}, not an object; "
                    "a JSON Lines file holds one JSON object per line"
                )
            rows.append(obj)
            lines.append(line_no)
    names = list(dict.fromkeys(k for obj in rows for k in obj))
    return pa.table({name: _json_column(path, name, [obj.get(name) for obj in rows], lines) for name in names})


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "list" if isinstance(value, list) else "object"


def _json_column(path: Path, name: str, values: list[Any], lines: list[int]) -> pa.Array:
    """One column of the line-by-line reader: a column mixing strings with numbers or booleans
    is text (an answer is ``4`` on one line and ``"1/2"`` on the next); NaN there is missing."""
    kinds = {_json_kind(v) for v in values if v is not None}
    if "string" in kinds and kinds <= {"string", "number", "boolean"}:
        values = [
            v if v is None or isinstance(v, str) else None if isinstance(v, float) and math.isnan(v) else json.dumps(v)
            for v in values
        ]
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        present = [(v, ln) for v, ln in zip(values, lines, strict=True) if v is not None]
        first = _json_kind(present[0][0])
        value, line_no = next(((v, ln) for v, ln in present if _json_kind(v) != first), present[-1])
        raise DatasetError(
            f"{str(path)!r}: column {name!r} mixes JSON {', '.join(sorted(kinds))} values "
            f"(line {present[0][1]} has a {first}, line {line_no} has {value!r}): {exc}"
        ) from exc


def _hub_reachable(timeout_s: float = 3.0) -> bool:
    """True when the hub answers an HTTPS request within the timeout (any status counts).

    One request, no retries: ``datasets`` itself retries for about 23 s before giving up.
    """
    import httpx

    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    try:
        httpx.head(f"{endpoint}/api/datasets", timeout=timeout_s)
    except (httpx.HTTPError, OSError):
        return False
    return True


def read_hub(adapter: Adapter, split: str | None, revision: str | None = None) -> pa.Table:
    """Load a hub dataset's needed columns at the pinned revision; fail at once when offline."""
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes")
    if offline or not _hub_reachable():
        why = "HF_HUB_OFFLINE is set" if offline else "the hub cannot be reached"
        raise DatasetError(
            f"cannot load {adapter.hub!r}: {why}. Point at a local copy instead, e.g. "
            f"`difficulty load {adapter.name} --data-file PATH` with a Parquet/JSON Lines/CSV file "
            f"or a folder in the hub layout (data/{adapter.split}-*.parquet)"
        )
    import datasets as hf  # heavy import, only when the hub is really used

    ds = hf.load_dataset(
        adapter.hub,
        adapter.config,
        split=split or adapter.split,
        revision=revision or adapter.revision,
        streaming=True,  # streams only the needed columns (DeepMath's solutions are ~5 GB)
        columns=list(adapter.columns),
    )
    return pa.Table.from_pylist(list(ds))


# --- building the problems table ----------------------------------------------------------------


def parse_column_map(spec: str | None) -> dict[str, str]:
    """Parse ``problem=question,answer=final`` into {target: source}."""
    if not spec:
        return {}
    mapping = {}
    for item in spec.split(","):
        target, sep, source = item.partition("=")
        if not sep or target.strip() not in schema.PROBLEMS.names or target.strip() == "original":
            raise DatasetError(f"bad column mapping {item!r}: use TARGET=SOURCE with TARGET in {schema.PROBLEMS.names}")
        mapping[target.strip()] = source.strip()
    return mapping


def _check_columns(table: pa.Table, needed: tuple[str, ...], adapter: str, origin: str) -> None:
    missing = [c for c in needed if c not in table.column_names]
    if missing:
        raise DatasetError(
            f"{origin}: adapter {adapter!r} needs column(s) {missing}; columns found: {table.column_names}"
        )


def to_problems(
    raw: pa.Table,
    adapter: Adapter,
    dataset: str,
    split: str | None,
    *,
    origin: str | None = None,
    limit: int | None = None,
    original: Callable[[list[int]], list[str | None]] | None = None,
) -> LoadResult:
    """Convert source rows to the ``problems`` table: ids, statuses, duplicates collapsed.

    ``origin`` (the file or hub name; default the dataset) is what an error names. ``limit``
    keeps the first problems after duplicates are collapsed; ``original`` gives the JSON text of
    source rows by index (the ``original`` column), asked for the rows kept and for the rows collapsed
    into them (``LoadResult.collapsed``, also the table's schema metadata: ``collapsed_rows``).
    """
    origin = origin or dataset
    required = adapter.required or tuple(c for c in adapter.columns if c not in ("difficulty", "source"))
    _check_columns(raw, required, adapter.name, dataset)
    try:
        converted = adapter.convert(raw)
    except DatasetError as exc:
        raise DatasetError(f"{origin}: {exc}") from exc
    n = raw.num_rows
    rows: dict[str, list] = {name: [None] * n for name in schema.PROBLEMS.names}
    for key, values in converted.items():
        rows[key] = list(values)
    rows["dataset"] = [dataset] * n
    if "split" not in converted:
        rows["split"] = [split] * n
    # A column that does not come from the source (a converter's own) keeps the name it has in
    # the problems table.
    for name in ("problem", "answer", "source", "domain", "topic", "split"):
        if name in converted:
            rows[name] = [cell_text(v, origin=origin, column=name, row=i) for i, v in enumerate(rows[name])]
    problems = ["" if p is None else p for p in rows["problem"]]
    answers = [None if a is None else a.strip() for a in rows["answer"]]
    rows["problem"], rows["answer"] = problems, answers
    rows["prompt_id"] = [prompt_id(dataset, p) for p in problems]
    rows["status"] = [schema.problem_status(p, a) for p, a in zip(problems, answers, strict=True)]
    table = pa.Table.from_pydict({k: rows[k] for k in schema.PROBLEMS.names})
    table = _cast_problems(table)
    # Duplicates (same normalised text) collapse onto their first row.
    _, first = _unique_first(table.column("prompt_id").to_pylist())
    duplicates = table.num_rows - len(first)
    if duplicates:
        log.info("%s: collapsed %d duplicate problems", dataset, duplicates)
        table = table.take(first)
    if limit is not None and table.num_rows > limit:
        table, first = table.slice(0, limit), first[:limit]
    if original is not None:
        at = table.schema.get_field_index("original")
        table = table.set_column(at, schema.PROBLEMS.field("original"), pa.array(original(first), pa.string()))
    collapsed: list[tuple[int, str, str | None]] = []
    if duplicates:
        kept_ids, kept_rows = set(table.column("prompt_id").to_pylist()), set(first)
        dropped = [i for i, pid in enumerate(rows["prompt_id"]) if i not in kept_rows and pid in kept_ids]
        texts = original(dropped) if original is not None and dropped else [None] * len(dropped)
        collapsed = [(i, rows["prompt_id"][i], t) for i, t in zip(dropped, texts, strict=True)]
        table = table.replace_schema_metadata({COLLAPSED_KEY: json.dumps(collapsed)})
    counts = pc.value_counts(table.column("status")).to_pylist()
    return LoadResult(table, n, duplicates, {c["values"]: c["counts"] for c in counts}, tuple(collapsed))


def collapsed_rows(problems: pa.Table) -> list[tuple[int, str, str | None]]:
    """``LoadResult.collapsed`` of a problems table just loaded (its schema metadata; a table read back
    from the store has none)."""
    meta = problems.schema.metadata or {}
    raw = meta.get(COLLAPSED_KEY.encode())
    return [] if raw is None else [(int(i), str(pid), text) for i, pid, text in json.loads(raw)]


# --- original rows ------------------------------------------------------------------------------
# A row read from a local file is kept as the JSON text of its object (``problems.original``):
# from a JSON Lines file, its line as written; from Parquet or CSV, ``json.dumps`` of the row, with
# the values JSON has no type for tagged ({"$bytes": base64}, {"$datetime": iso}, ...) so they come
# back as they were. Integers, floats, strings, booleans, lists and mappings round-trip exactly.

_TAGS = ("$bytes", "$datetime", "$date", "$time", "$decimal", "$timedelta_us")


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, datetime.datetime):
        return {"$datetime": value.isoformat()}
    if isinstance(value, datetime.date):
        return {"$date": value.isoformat()}
    if isinstance(value, datetime.time):
        return {"$time": value.isoformat()}
    if isinstance(value, datetime.timedelta):
        return {"$timedelta_us": value // datetime.timedelta(microseconds=1)}
    if isinstance(value, Decimal):
        return {"$decimal": str(value)}
    if isinstance(value, set | frozenset):
        return sorted(value, key=repr)
    raise TypeError(f"{type(value).__name__} {value!r} has no JSON form")


def _json_hook(obj: dict) -> Any:
    if len(obj) != 1:
        return obj
    ((key, value),) = obj.items()
    if key not in _TAGS or not isinstance(value, str | int):
        return obj
    if key == "$bytes":
        return base64.b64decode(value)
    if key == "$datetime":
        return datetime.datetime.fromisoformat(value)
    if key == "$date":
        return datetime.date.fromisoformat(value)
    if key == "$time":
        return datetime.time.fromisoformat(value)
    if key == "$timedelta_us":
        return datetime.timedelta(microseconds=int(value))
    return Decimal(value)


def original_json(row: dict[str, Any]) -> str:
    """The JSON text of one source row (see the section comment for the types it keeps)."""
    return json.dumps(row, ensure_ascii=False, default=_json_default)


def original_row(text: str | None) -> dict[str, Any] | None:
    """One source row back from ``problems.original`` (None when the problem has none)."""
    if text is None:
        return None
    return json.loads(text, object_hook=_json_hook)


def chat_messages_of(original: str | None) -> list[dict] | None:
    """The chat messages of a verl row (its ``prompt``) from ``problems.original``; None when the
    problem has no original row or the row no ``prompt``."""
    row = original_row(original)
    if not row or row.get("prompt") is None:
        return None
    return verl_messages(row["prompt"])


def _json_lines_text(path: Path) -> list[str] | None:
    """The non-blank lines of a JSON Lines file as they are written (None for other files)."""
    suffix = "".join(path.suffixes[-2:]).lower() if path.suffix == ".gz" else path.suffix.lower()
    if path.is_dir() or suffix not in (".jsonl", ".json", ".ndjson", ".jsonl.gz"):
        return None
    with _open_binary(path) as fh:
        return [line for line in (raw.decode("utf-8").strip() for raw in fh) if line]


def _originals(path: Path, raw: pa.Table) -> Callable[[list[int]], list[str | None]]:
    """Source rows by index as JSON text: a JSON Lines file's own lines, else each row dumped."""
    lines = _json_lines_text(path)
    if lines is not None and len(lines) != raw.num_rows:
        log.warning(
            "%s: %d lines but %d rows read; original rows are dumped from the rows", path, len(lines), raw.num_rows
        )
        lines = None
    if lines is not None:
        return lambda rows: [lines[i] for i in rows]
    return lambda rows: [original_json(r) for r in raw.take(pa.array(rows, pa.int64())).to_pylist()]


def _unique_first(ids: list[str]) -> tuple[set, list[int]]:
    seen: set[str] = set()
    first = []
    for i, pid in enumerate(ids):
        if pid not in seen:
            seen.add(pid)
            first.append(i)
    return seen, first


def _cast_problems(table: pa.Table) -> pa.Table:
    cols = []
    for f in schema.PROBLEMS:
        col = table.column(f.name)
        if f.type == pa.string() and col.type != pa.string():
            col = pc.cast(col, pa.string()) if col.type != pa.null() else pa.nulls(len(col), pa.string())
        cols.append(col.cast(f.type))
    return pa.Table.from_arrays(cols, schema=schema.PROBLEMS)


def load(
    name: str | None = None,
    *,
    data_file: str | os.PathLike | None = None,
    split: str | None = None,
    limit: int | None = None,
    columns: str | dict[str, str] | None = None,
    revision: str | None = None,
    seed: int = 0,
) -> LoadResult:
    """Load a dataset by adapter name, from a local file, or both (name picks the adapter).

    Args:
        name: adapter name (``gsm8k``, ``bigmath``, ``deepmath``, ``arithmetic``, ``verl``,
            ``math``, ``trl``, ``local``); with ``data_file`` and no name the adapter is chosen
            from the columns present (``detect_adapter``). A file read as ``verl`` is the dataset
            ``verl-<stem>``; as ``math``, ``trl`` or ``local``, ``local-<stem>``; a generic stem
            (``test``, ``train``, ...) takes its folder too, ``local-math500-test`` (``local_name``).
        data_file: a local Parquet / JSON Lines / CSV file or a hub-layout folder.
        split: split to read (hub) or to select (hub-layout folder).
        limit: keep the first ``limit`` problems (after duplicates are collapsed).
        columns: mapping ``TARGET=SOURCE`` for files with other column names.
        revision: override the adapter's pinned hub revision.
        seed: seed of the bundled arithmetic generator.
    """
    if limit is not None and limit < 1:
        raise DatasetError(f"--limit must be >= 1, got {limit}")
    if name is not None and name not in ADAPTERS:
        raise DatasetError(f"unknown dataset {name!r}; adapters: {sorted(ADAPTERS)}")
    mapping = parse_column_map(columns) if isinstance(columns, str) else dict(columns or {})
    if data_file is not None:
        raw = read_local(data_file, split if Path(data_file).is_dir() else None)
        original = _originals(Path(data_file), raw)  # the rows as read, before any renaming
        if mapping:
            missing = [src for src in mapping.values() if src not in raw.column_names]
            if missing:
                raise DatasetError(
                    f"mapped column(s) {missing} not in {str(data_file)!r}; columns found: {raw.column_names}"
                )
            renamed = {src: dst for dst, src in mapping.items()}
            raw = raw.rename_columns([renamed.get(c, c) for c in raw.column_names])
        adapter = ADAPTERS[name or detect_adapter(raw.column_names)]
        dataset = local_name(data_file) if adapter.name in FILE_NAMED else adapter.name
        if adapter.name == "verl":
            dataset = local_name(data_file, VERL_PREFIX)
        if adapter.name == "arithmetic":
            adapter = ADAPTERS["local"]
            dataset = "arithmetic"
    else:
        original = None  # hub rows are read with the needed columns only: nothing whole to keep
        adapter = ADAPTERS[name or "arithmetic"]
        dataset = adapter.name
        if adapter.name == "arithmetic":
            if limit is not None and limit > ARITHMETIC_MAX:
                raise ConfigError(
                    f"--limit {limit} is more than the {ARITHMETIC_MAX} distinct problems the bundled arithmetic "
                    f"set can make: give --limit {ARITHMETIC_MAX} or less"
                )
            raw = arithmetic_problems(max(limit or 180, 1), seed=seed)
        elif adapter.hub is None:
            raise DatasetError(f"adapter {adapter.name!r} needs --data-file PATH")
        else:
            raw = read_hub(adapter, split, revision)
    origin = repr(str(data_file)) if data_file is not None else (adapter.hub or adapter.name)
    return to_problems(raw, adapter, dataset, split or adapter.split, origin=origin, limit=limit, original=original)


# Words that say nothing about what a file holds: a file whose stem is made only of these (and
# numbers), such as ``test``, ``train``, ``verl_test``, ``verl_train_sub`` or the hub's shard name
# ``train-00000-of-00001``, is named with its folder too, so that ``math500/test.jsonl`` and
# ``aime24/test.jsonl`` are two datasets (``local-math500-test``, ``local-aime24-test``).
GENERIC_WORDS = frozenset(
    {
        "data",
        "dataset",
        "dev",
        "eval",
        "evaluation",
        "of",
        "problems",
        "questions",
        "sample",
        "samples",
        "sub",
        "subset",
        "test",
        "train",
        "val",
        "valid",
        "validation",
        "verl",
    }
)
_WORD_SPLIT = re.compile(r"[^A-Za-z0-9]+")
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")
# How many folders up a generic name may look for one that is not generic (data/test/x.parquet).
_NAME_FOLDERS = 3


def is_generic_stem(stem: str) -> bool:
    """Whether a file or folder name says nothing about its content (see ``GENERIC_WORDS``)."""
    words = [w for w in _WORD_SPLIT.split(stem.lower()) if w]
    return not words or all(w in GENERIC_WORDS or w.isdigit() for w in words)


def _safe(part: str) -> str:
    return _UNSAFE.sub("-", part).strip("-")


def local_name(path: str | os.PathLike, prefix: str = "local-") -> str:
    """Dataset name for a local file: the prefix and the file's stem, safe in a partition path.

    A generic stem (:func:`is_generic_stem`: ``test``, ``train``, ``verl_test``, ...) is preceded
    by the folder that holds the file, and by the folders above it while those are generic too
    (at most ``_NAME_FOLDERS``): ``math500/test.jsonl`` is ``local-math500-test``. Any other stem
    is the name alone (``local-mine``), as it always was, so those datasets keep their names and
    prompt ids. The name depends only on the path's own parts (made absolute, symlinks not
    followed), so a file keeps its name on every load, whatever the working directory.
    """
    absolute = Path(os.path.abspath(path))
    stem = _safe(absolute.name.split(".")[0]) or "data"
    parts = [stem]
    if is_generic_stem(stem):
        for folder in list(absolute.parents)[:_NAME_FOLDERS]:
            if not _safe(folder.name):
                break  # the root: nothing more to say
            parts.insert(0, folder.name)
            if not is_generic_stem(folder.name):
                break
    return prefix + "-".join(p for p in (_safe(p) for p in parts) if p)
