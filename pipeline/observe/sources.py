"""Readers of the outcomes users already have, per step: ``(observations, unmatched)`` tables.

Three kinds of source, each matched to one dataset's prompts by a ``match.Matcher``:

- **verl rollout dumps** (``trainer.rollout_data_dir``): one ``<global_step>.jsonl`` per step, one
  line per rollout, written by verl's ``RayPPOTrainer._write_generations`` (verl 0.9.1,
  ``verl/trainer/ppo/ray_trainer.py``): ``input`` (the chat prompt decoded with special tokens
  skipped), ``output``, ``gts`` (the gold answer), ``score`` (the summed token-level reward),
  ``step``, then every per-rollout field the reward function returned (``acc``, ``pred``, ...).
  ``verl_steps`` lists the files, ``read_verl_step`` reads one. A prompt given ``m`` groups in a
  step is stored as ``m`` rows (``group_index``): by ``uid`` when the dump has it, else by the counts
  (``record.group_numbers``).
- **generic tables** (CSV, Parquet, JSON Lines; ``read_table``): counts ``step, <key>, n, c``; one
  row per rollout ``step, <key>, reward``; or POLARIS-style lines ``step, index: [...], score:
  [...]`` (one score per rollout). ``<key>`` is ``prompt_id``, ``index`` (the dataset's own row
  index) or ``problem`` (its text), looked for in that order.
- **labels** a dataset ships (``read_labels``): pass rates some model reached, step 0, kind
  ``label``, read from each problem's original row.

Correctness is a binary field, never a shaped reward: ``score`` counts only when it is 0/1 or when
the user names a threshold (``score >= threshold``); DAPO's -1/1 or a length-penalised score is a
``ConfigError`` that says so. Rows that match no prompt are returned in ``unmatched`` with the
reason (the caller stores them): nothing is dropped silently.
"""

from __future__ import annotations

import io
import json
import logging
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

from pipeline import datasets, schema
from pipeline.errors import ConfigError, DatasetError, MissingFileError
from pipeline.observe import record
from pipeline.observe.match import Matcher, cut

log = logging.getLogger(__name__)

Step = tuple[pa.Table, pa.Table]  # (observations, unmatched) of one source step

_STEP_FILE = re.compile(r"^(\d+)\.jsonl$")
VERL_CORRECT_FIELD = "acc"  # the binary field verl's math reward functions return beside ``score``
VERL_GROUP_FIELD = "uid"  # verl's id of a batch row: the rollouts of one group share it
KEYS = ("prompt_id", "index", "problem")  # generic tables: how a row names its prompt, first found wins


def _unmatched(source: str, step: int, rows: list[int], reasons: list[str], texts: list[Any]) -> pa.Table:
    size = len(rows)
    return pa.Table.from_arrays(
        [
            pa.array([source] * size, pa.string()),
            pa.array([step] * size, pa.int64()),
            pa.array(rows, pa.int64()),
            pa.array(reasons, pa.string()),
            pa.array([cut(t) for t in texts], pa.string()),
        ],
        schema=schema.UNMATCHED,
    )


def _shaped(field: str, values: list, origin: str) -> ConfigError:
    shown = sorted({v for v in values if v is not None and v not in (0, 1)}, key=repr)[:5]
    return ConfigError(
        f"{origin}: {field} takes values {shown} besides 0 and 1: a shaped score is not correctness. "
        f"Name a binary field (--correct-field, e.g. acc) or the score that counts as correct "
        f"(--score-threshold, e.g. 1.0 for DAPO's -1/1: correct when {field} >= threshold)"
    )


def _binary(values: pa.Array | pa.ChunkedArray, field: str, origin: str, threshold: float | None) -> np.ndarray:
    """A column as 0/1 per rollout: ``>= threshold`` when one is named, else it must be 0/1 (or bool)."""
    if values.null_count:
        at = pc.index(pc.is_null(values), True).as_py()
        raise DatasetError(f"{origin}: {field} is missing on row {at}; every rollout needs one")
    if pa.types.is_boolean(values.type):
        if threshold is not None:
            raise ConfigError(f"{origin}: {field} is true/false; a --score-threshold applies to a numeric score")
        return pc.cast(values, pa.int8()).to_numpy(zero_copy_only=False).astype(np.int64)
    if not (pa.types.is_integer(values.type) or pa.types.is_floating(values.type)):
        raise DatasetError(f"{origin}: {field} holds {values.type} values, not numbers or booleans")
    x = pc.cast(values, pa.float64()).to_numpy(zero_copy_only=False)
    if threshold is not None:
        return (x >= threshold).astype(np.int64)
    if not np.isin(x, (0.0, 1.0)).all():
        raise _shaped(field, x[~np.isin(x, (0.0, 1.0))].tolist(), origin)
    return x.astype(np.int64)


# --- verl rollout dumps -------------------------------------------------------------------------


def verl_steps(folder: str | Path) -> list[tuple[int, Path]]:
    """The step files of a verl ``rollout_data_dir``, by step: ``[(global_step, path), ...]``.

    Other files are left alone (logged). Two files of one step (``7.jsonl`` and ``007.jsonl``) are a
    ``DatasetError`` naming both: which one is the step is not for the reader to guess.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise MissingFileError(f"verl rollout folder {str(folder)!r} does not exist (trainer.rollout_data_dir)")
    steps: dict[int, Path] = {}
    for path in sorted(folder.iterdir()):
        match = _STEP_FILE.match(path.name)
        if not match or not path.is_file():
            log.info("%s: not a verl step file (<global_step>.jsonl), left alone", path)
            continue
        step = int(match.group(1))
        if step > record.MAX_STEP:
            raise DatasetError(
                f"{str(path)!r}: step {step} is out of range (a step is an integer from 0 to {record.MAX_STEP}); "
                "not a verl step file: move it out of the rollout folder"
            )
        if step in steps:
            raise DatasetError(
                f"duplicate step {step} in {str(folder)!r}: {steps[step].name} and {path.name}; keep one file per step"
            )
        steps[step] = path
    return sorted(steps.items())


def _complete_body(path: Path, data: bytes) -> bytes | None:
    """The file's bytes when its last line is whole JSON; None when it is not (still being written:
    verl's writer thread opens the file with mode "w" and writes line by line)."""
    end = data.rstrip()
    if not end:
        return None
    last = end[end.rfind(b"\n") + 1 :]
    try:
        json.loads(last)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return end + b"\n"


def _parse_lines(path: Path, body: bytes, names: tuple[str, ...]) -> tuple[dict[str, list], list[int]]:
    """The named fields of every line, in Python (the slow path: names the bad line)."""
    out: dict[str, list] = {name: [] for name in names}
    rows: list[int] = []
    for at, raw in enumerate(body.split(b"\n")[:-1]):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            reason = exc.msg if isinstance(exc, json.JSONDecodeError) else "not UTF-8"
            raise DatasetError(
                f"{str(path)!r}: line {at + 1} is not valid JSON ({reason}): {raw[:200]!r}; only the last line "
                "of the newest step may be cut (still being written)"
            ) from exc
        if not isinstance(obj, dict):
            raise DatasetError(f"{str(path)!r}: line {at + 1} holds a JSON {type(obj).__name__}, not an object")
        for name in names:
            out[name].append(obj.get(name, _ABSENT))
        rows.append(at)
    return out, rows


_ABSENT = object()


def _read_verl_lines(path: Path, body: bytes, correct_field: str | None) -> tuple[dict[str, Any], np.ndarray]:
    """Columns ``input``, ``gts`` (text), ``score``, ``step`` and the correct field, plus the line of
    each row. Arrow's reader first; on any failure (a bad line, a column changing type) Python's."""
    if b"\n\n" not in body:
        try:
            table = pajson.read_json(
                io.BytesIO(body),
                parse_options=pajson.ParseOptions(
                    explicit_schema=pa.schema([("input", pa.string()), ("step", pa.int64())]),
                    unexpected_field_behavior="infer",
                ),
            )
            cols: dict[str, Any] = {name: table.column(name).combine_chunks() for name in table.column_names}
            gts = cols.get("gts")
            if gts is not None and not pa.types.is_string(gts.type) and gts.type != pa.null():
                cols["gts"] = pa.array([_gold(v) for v in gts.to_pylist()], pa.string())
            return cols, np.arange(table.num_rows)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            log.info("%s: Arrow's JSON reader failed (%s); reading line by line", path, exc)
    fields = ("input", "gts", "score", "step", VERL_GROUP_FIELD, correct_field or VERL_CORRECT_FIELD)
    values, rows = _parse_lines(path, body, fields)
    cols = {}
    for name in fields:
        got = values[name]
        if all(v is _ABSENT for v in got):
            continue
        got = [None if v is _ABSENT else v for v in got]
        if name == "input":
            bad = next((i for i, v in enumerate(got) if v is not None and not isinstance(v, str)), None)
            if bad is not None:
                raise DatasetError(f"{str(path)!r}: line {rows[bad] + 1}: input is {got[bad]!r}, not text")
            cols[name] = pa.array(got, pa.string())
        elif name == "gts":
            cols[name] = pa.array([_gold(v) for v in got], pa.string())
        elif name == VERL_GROUP_FIELD:  # an id: text or a number, compared as text
            cols[name] = pa.array([None if v is None else str(v) for v in got], pa.string())
        else:
            bad = next((i for i, v in enumerate(got) if v is not None and not isinstance(v, int | float)), None)
            if bad is not None:
                raise DatasetError(f"{str(path)!r}: line {rows[bad] + 1}: {name} is {got[bad]!r}, not a number")
            if {type(v) for v in got if v is not None} == {bool}:
                cols[name] = pa.array(got, pa.bool_())
            else:  # numbers, or booleans mixed with numbers: 0/1 either way
                cols[name] = pa.array([None if v is None else float(v) for v in got], pa.float64())
    return cols, np.asarray(rows, dtype=np.int64)


def _gold(value: Any) -> str | None:
    """A ``gts`` cell as text for the answer check (lists and numbers as JSON)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], str):
        return value[0]
    return json.dumps(value, ensure_ascii=False)


def count_rows(path: str | Path) -> int:
    """The rollouts of a verl step file: its non-empty lines (a cut last line counts)."""
    return sum(1 for line in Path(path).read_bytes().split(b"\n") if line.strip())


@dataclass(frozen=True)
class VerlFile:
    """One verl step file as read: its step, and what was read (the bytes up to the last whole line,
    the rollouts, the file's modification time, seconds since the epoch, and ``read``: the file's
    stamp kept with the stored step)."""

    observations: pa.Table
    unmatched: pa.Table
    size: int
    rows: int
    modified: float
    read: record.FileRead


def read_verl_step(
    path: str | Path,
    step: int,
    matcher: Matcher,
    *,
    source: str,
    model: str | None,
    correct_field: str | None = None,
    score_threshold: float | None = None,
) -> Step | None:
    """One verl step file as ``(observations, unmatched)``; None when its last line is cut
    (``read_verl_file``)."""
    got = read_verl_file(
        path, step, matcher, source=source, model=model, correct_field=correct_field, score_threshold=score_threshold
    )
    return None if got is None else (got.observations, got.unmatched)


def read_verl_file(
    path: str | Path,
    step: int,
    matcher: Matcher,
    *,
    source: str,
    model: str | None,
    correct_field: str | None = None,
    score_threshold: float | None = None,
) -> VerlFile | None:
    """One verl step file, read; None when the step is still being written.

    Per group of a prompt (``_count_rows``), ``n`` is its rollouts in the file and ``c`` the correct
    ones: from ``correct_field`` when named, else ``acc`` when the dump has it, else ``score`` (0/1,
    or ``>= score_threshold``).
    A row whose ``input`` contains no problem of the dataset, or whose ``gts`` is not the dataset's
    answer, is an unmatched row (its line, from 0, and the reason). A last line that is not whole
    JSON means verl's writer is still on this file: the step is skipped this time (logged) and read
    on a later import. A last line that parses does not make the step complete (a write may end on a
    line boundary): ``track.track_verl`` decides that. Any other bad line, or a row of another step,
    is a ``DatasetError``. ``observed_at`` is the file's modification time: when verl wrote the step.
    """
    path = Path(path)
    record.check_source(source)
    if correct_field is not None and score_threshold is not None:
        raise ConfigError(
            f"correct_field={correct_field!r} and score_threshold={score_threshold!r}: name one way to count a "
            "rollout correct, a binary field or a threshold on score"
        )
    try:
        before = path.stat()
        data = path.read_bytes()
        after = path.stat()
    except FileNotFoundError as exc:
        raise MissingFileError(f"verl step file {str(path)!r} does not exist") from exc
    if (before.st_size, before.st_mtime_ns) != (after.st_size, after.st_mtime_ns) or len(data) != after.st_size:
        log.warning("%s: changed while read (verl is writing step %d); step skipped this time", path, step)
        return None
    mtime = after.st_mtime
    body = _complete_body(path, data)
    if body is None:
        log.warning("%s: last line is cut (verl is still writing step %d); step skipped this time", path, step)
        return None
    cols, lines = _read_verl_lines(path, body, correct_field)
    origin = str(path)
    if "input" not in cols:
        raise DatasetError(f"{origin!r}: no 'input' field (fields: {sorted(cols)}); not a verl rollout dump")
    steps = cols.get("step")
    if steps is not None:  # compared as floats: a step of 1e20 is a wrong step, not an overflow
        wrong = pc.not_equal(pc.fill_null(pc.cast(steps, pa.float64()), -1.0), float(step))
        if pc.any(wrong).as_py():
            at = pc.index(wrong, True).as_py()
            raise DatasetError(
                f"duplicate step: {origin!r} is step {step} but line {lines[at] + 1} is a row of step "
                f"{steps[at].as_py()}; one file per step, each holding its own step's rollouts"
            )
    if score_threshold is not None:
        field = "score"
    elif correct_field is not None:
        if correct_field not in cols:
            raise ConfigError(f"correct_field={correct_field!r} is not a field of {origin!r}: fields {sorted(cols)}")
        field = correct_field
    else:
        field = VERL_CORRECT_FIELD if VERL_CORRECT_FIELD in cols else "score"
    if field not in cols:
        raise DatasetError(f"{origin!r}: no {field!r} field (fields: {sorted(cols)}) to count correct rollouts")
    correct = _binary(cols[field], field, origin, score_threshold)
    obs, unmatched = _count_rows(
        matcher, cols["input"], cols.get("gts"), correct, lines, source=source, step=step, model=model,
        observed_at=datetime.fromtimestamp(mtime, UTC), uids=_uids(cols, origin),
    )  # fmt: skip
    read = record.FileRead(len(data), len(lines), record.digest(data), after.st_mtime_ns)
    return VerlFile(obs, unmatched, len(data), len(lines), mtime, read)


def _uids(cols: dict[str, Any], origin: str) -> pa.Array | None:
    """The dump's ``uid`` column (verl's id of a batch row, shared by the row's group), when it has
    one; a uid missing on some rows is a ``DatasetError`` naming the first."""
    uids = cols.get(VERL_GROUP_FIELD)
    if uids is None or uids.type == pa.null():
        return None
    if uids.null_count:
        at = pc.index(pc.is_null(uids), True).as_py()
        raise DatasetError(f"{origin!r}: {VERL_GROUP_FIELD} is missing on row {at}; every rollout of a dump needs one")
    return uids


def _codes(values: pa.Array) -> tuple[np.ndarray, list]:
    enc = pc.dictionary_encode(values, null_encoding="encode")
    return enc.indices.to_numpy(zero_copy_only=False).astype(np.int64), enc.dictionary.to_pylist()


def _count_rows(
    matcher: Matcher,
    inputs: pa.Array,
    gts: pa.Array | None,
    correct: np.ndarray,
    lines: np.ndarray,
    *,
    source: str,
    step: int,
    model: str | None,
    observed_at: datetime,
    uids: pa.Array | None = None,
) -> Step:
    """Match each distinct (input, gold) pair once, then count per group of a prompt with numpy
    (``uids``: each rollout's group id, verl's ``uid``; else ``record.group_numbers``)."""
    in_idx, in_vals = _codes(inputs)
    if gts is None or gts.type == pa.null():
        g_idx, g_vals = np.zeros(len(in_idx), np.int64), [None]
    else:
        g_idx, g_vals = _codes(gts)
    pairs, inverse = np.unique(in_idx * len(g_vals) + g_idx, return_inverse=True)
    pids: list[str] = []
    pid_code: dict[str, int] = {}
    code = np.empty(len(pairs), np.int64)
    reasons: list[str | None] = []
    for k, pair in enumerate(pairs.tolist()):
        i, g = divmod(pair, len(g_vals))
        pid, reason = matcher.by_chat(in_vals[i])
        if pid is not None:
            reason = matcher.check_answer(pid, g_vals[g])
            if reason is not None:
                pid = None
        reasons.append(reason)
        if pid is None:
            code[k] = -1
        else:
            code[k] = pid_code.setdefault(pid, len(pid_code))
            if code[k] == len(pids):
                pids.append(pid)
    row_code = code[inverse.reshape(-1)]
    ok = row_code >= 0
    # One row per group of a prompt: by verl's uid when the dump has one, else by the counts.
    if uids is not None:
        group = record.group_codes(row_code[ok], _codes(uids)[0][ok])
    else:
        group = record.group_numbers(row_code[ok])
    width = int(group.max(initial=0)) + 1
    cell = row_code[ok] * width + group
    cells, cell_of = np.unique(cell, return_inverse=True)
    n = np.bincount(cell_of, minlength=len(cells))
    c = np.bincount(cell_of, weights=correct[ok], minlength=len(cells)).astype(np.int64)
    obs = record.observation_rows(
        source, "training", step, matcher.dataset, [pids[k] for k in (cells // width).tolist()], n.tolist(),
        c.tolist(), model, observed_at, groups=(cells % width).tolist(),
    )  # fmt: skip
    bad = np.flatnonzero(~ok)
    pair_of = inverse.reshape(-1)
    texts = [in_vals[in_idx[r]] for r in bad.tolist()]
    miss = _unmatched(source, step, lines[bad].tolist(), [reasons[pair_of[r]] for r in bad.tolist()], texts)
    return obs, miss


# --- generic tables ------------------------------------------------------------------------------

LAYOUTS = (
    "counts: step, <key>, n, c",
    "rollouts: step, <key>, reward (0/1)",
    "POLARIS-style: step, index (list), score (list, one per rollout)",
)


def _layout(table: pa.Table, path: Path) -> tuple[str, str]:
    cols = table.column_names
    key = next((k for k in KEYS if k in cols), None)
    if "step" in cols and key == "index" and pa.types.is_list(table.schema.field("index").type):
        if "score" in cols and pa.types.is_list(table.schema.field("score").type):
            return "polaris", "index"
    elif "step" in cols and key is not None:
        if {"n", "c"} <= set(cols):
            return "counts", key
        if "reward" in cols:
            return "rollouts", key
    raise DatasetError(
        f"{str(path)!r}: columns {cols} fit no layout; accepted: {'; '.join(LAYOUTS)}, where <key> is one of "
        f"{', '.join(KEYS)}"
    )


def _lookup(matcher: Matcher, key: str) -> Callable[[Any], tuple[str | None, str | None]]:
    find = {"prompt_id": matcher.by_id, "index": matcher.by_index, "problem": matcher.by_problem}[key]
    cache: dict[Any, tuple[str | None, str | None]] = {}

    def look(value: Any) -> tuple[str | None, str | None]:
        hit = cache.get(value)
        if hit is None:
            hit = cache[value] = find(value)
        return hit

    return look


def _int_cells(values: list, name: str, origin: str, rows: list[int], high: int) -> list[int]:
    """The cells as ints, each an integer from 0 to ``high`` (``DatasetError`` names the row)."""
    out = []
    for v, r in zip(values, rows, strict=True):
        if isinstance(v, bool) or v is None or (isinstance(v, float) and not v.is_integer()):
            raise DatasetError(f"{origin}: row {r}: {name}={v!r} is not an integer")
        try:
            k = int(v)
        except (TypeError, ValueError, OverflowError) as exc:
            raise DatasetError(f"{origin}: row {r}: {name}={v!r} is not an integer") from exc
        if not 0 <= k <= high:
            raise DatasetError(f"{origin}: row {r}: {name}={v!r} is out of range: an integer from 0 to {high}")
        out.append(k)
    return out


def read_table(
    path: str | Path,
    matcher: Matcher,
    *,
    source: str,
    model: str | None,
    score_threshold: float | None = None,
) -> dict[int, Step]:
    """A generic table (CSV, Parquet, JSON Lines) as ``{step: (observations, unmatched)}``, by step.

    The layout is read from the columns (``LAYOUTS``); rows of one step and prompt are summed. A
    reward or score that is not 0/1 needs ``score_threshold`` (correct when ``>=``), as for verl.
    Unmatched rows carry their row number in the file, from 0.
    """
    path = Path(path)
    record.check_source(source)
    origin = repr(str(path))
    table = datasets.read_local(path)
    layout, key = _layout(table, path)
    look = _lookup(matcher, key)
    rows = list(range(table.num_rows))
    steps = _int_cells(table.column("step").to_pylist(), "step", origin, rows, record.MAX_STEP)
    keys = table.column(key).to_pylist()
    if layout == "counts":
        n = _int_cells(table.column("n").to_pylist(), "n", origin, rows, record.MAX_COUNT)
        c = _int_cells(table.column("c").to_pylist(), "c", origin, rows, record.MAX_COUNT)
    elif layout == "rollouts":
        n = [1] * table.num_rows
        c = _binary(table.column("reward"), "reward", origin, score_threshold).tolist()
    else:  # polaris: one line per step, aligned lists of dataset indices and scores
        flat_steps, flat_keys, flat_rows = [], [], []
        scores = table.column("score")
        for r, (s, idx, sc) in enumerate(zip(steps, keys, scores.to_pylist(), strict=True)):
            if idx is None or sc is None or len(idx) != len(sc):
                raise DatasetError(
                    f"{origin}: row {r}: index has {None if idx is None else len(idx)} entries, score "
                    f"{None if sc is None else len(sc)}; one score per rollout"
                )
            flat_steps += [s] * len(idx)
            flat_keys += idx
            flat_rows += [r] * len(idx)
        c = _binary(pc.list_flatten(scores), "score", origin, score_threshold).tolist()
        steps, keys, rows, n = flat_steps, flat_keys, flat_rows, [1] * len(flat_keys)
    sums: dict[int, dict[str, list[int]]] = {}
    misses: dict[int, list[tuple[int, str, Any]]] = {}
    for s, k, r, nn, cc in zip(steps, keys, rows, n, c, strict=True):
        pid, reason = look(k)
        if pid is None:
            misses.setdefault(s, []).append((r, reason, k))
            sums.setdefault(s, {})
            continue
        tot = sums.setdefault(s, {}).setdefault(pid, [0, 0])
        tot[0] += nn
        tot[1] += cc
    out: dict[int, Step] = {}
    for s in sorted(sums):
        per = sums[s]
        obs = record.observation_rows(
            source, "training", s, matcher.dataset, list(per), [v[0] for v in per.values()],
            [v[1] for v in per.values()], model,
        )  # fmt: skip
        miss = misses.get(s, [])
        out[s] = obs, _unmatched(source, s, [m[0] for m in miss], [m[1] for m in miss], [m[2] for m in miss])
    return out


# --- labels a dataset ships ----------------------------------------------------------------------

# label -> (n rollouts behind the rate, the model that drew them). Override either by argument.
KNOWN_LABELS: dict[str, tuple[int, str | None]] = {
    "llama8b_solve_rate": (64, "Llama-3.1-8B-Instruct"),  # Big-Math
    "qwen2.5_7b_pass_rate": (16, "Qwen2.5-7B-Instruct"),  # Guru
    "qwen3_30b_pass_rate": (16, "Qwen3-30B-A3B"),  # Guru
    "difficulty": (8, None),  # POLARIS: the pass rate as a string ("7/8" or "0.875"); name the model
    "model_difficulty": (16, None),  # Skywork-OR1 extra_info: {model: rollouts of 16}; counts= says which
}
COUNTS = ("correct", "wrong")


def _label_cell(row: dict, label: str) -> Any:
    """The label in a source row: a top-level field, a dotted path, or a field of ``extra_info``."""
    if label in row:
        return row[label]
    node: Any = row
    for part in label.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    if node is not None:
        return node
    extra = row.get("extra_info")
    if isinstance(extra, str) and extra.strip().startswith("{"):
        extra = json.loads(extra)
    return extra.get(label) if isinstance(extra, dict) else None


def _rate(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return None
        try:
            return float(Fraction(text))
        except (ValueError, ZeroDivisionError):
            return math.nan
    try:
        rate = float(value)
    except (TypeError, ValueError):
        return math.nan
    return None if math.isnan(rate) else rate


def read_labels(
    problems: pa.Table,
    label: str,
    *,
    source: str,
    model: str | None = None,
    n: int | None = None,
    counts: str | None = None,
) -> Step:
    """A dataset's shipped pass rates as ``label`` observations at step 0, matched by prompt_id.

    ``label`` is a field of each problem's original row (``problems.original``): a known one
    (``KNOWN_LABELS``: Big-Math ``llama8b_solve_rate``, Guru ``qwen2.5_7b_pass_rate`` and
    ``qwen3_30b_pass_rate``, POLARIS ``difficulty``, Skywork-OR1 ``model_difficulty``) or any field
    with ``n`` given. A rate gives ``c = round(rate * n)`` and must be a multiple of ``1/n`` within
    1e-6 (else a ``DatasetError`` naming the row). With ``counts`` (``"correct"`` or ``"wrong"``)
    the value is a count of ``n`` instead; Skywork's ``model_difficulty`` is one per model
    (``model`` picks it) and its direction is not written in the data, so ``counts`` is required.
    A row with no value (null rate, no original row) is an unmatched row with the reason.
    """
    record.check_source(source)
    known_n, known_model = KNOWN_LABELS.get(label, (None, None))
    n = n if n is not None else known_n
    if n is None or isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(
            f"n={n!r} for label {label!r}: give the number of rollouts behind it (an integer >= 1); "
            f"known labels: {', '.join(KNOWN_LABELS)}"
        )
    if counts is not None and counts not in COUNTS:
        raise ConfigError(f"counts={counts!r} must be one of {COUNTS} (what the label's integer counts)")
    per_model = label == "model_difficulty"
    if per_model and counts is None:
        raise ConfigError(
            "label 'model_difficulty' counts rollouts of 16 but not which: state counts='correct' (solved) or "
            "counts='wrong' (failed); the data does not say, so there is no default"
        )
    if label == "difficulty" and model is None:
        raise ConfigError("label 'difficulty' (POLARIS): name the model whose pass rate it is (model=...)")
    model = model if model is not None else known_model
    pids = problems.column("prompt_id").to_pylist()
    dataset_names = problems.column("dataset").to_pylist()
    originals = problems.column("original").to_pylist()
    prior_n = problems.column("prior_n").to_pylist()
    prior_c = problems.column("prior_c").to_pylist()
    out_p, out_c, miss = [], [], []
    chosen = model
    for r, (pid, original) in enumerate(zip(pids, originals, strict=True)):
        row = datasets.original_row(original)
        if row is None:
            if label == "llama8b_solve_rate" and prior_n[r] == n and prior_c[r] is not None:
                out_p.append(pid)  # a hub load of Big-Math keeps the rate as its prior only
                out_c.append(prior_c[r])
            else:
                miss.append((r, f"no original row to read {label} from (hub rows keep none)", pid))
            continue
        value = _label_cell(row, label)
        if per_model and value is not None:
            if not isinstance(value, dict):
                raise DatasetError(f"row {r} (prompt {pid}): model_difficulty is {value!r}, not a mapping")
            if chosen is None:
                if len(value) != 1:
                    raise ConfigError(
                        f"model_difficulty holds counts of models {sorted(value)}: pick one with model=..."
                    )
                chosen = next(iter(value))
            if chosen not in value:
                raise DatasetError(f"row {r} (prompt {pid}): model_difficulty has no {chosen!r} (has {sorted(value)})")
            value = value[chosen]
        if value is None:
            miss.append((r, f"{label} is null", pid))
            continue
        if counts is not None:
            if isinstance(value, bool) or not isinstance(value, int | float) or float(value) != int(value):
                raise DatasetError(f"row {r} (prompt {pid}): {label}={value!r} is not an integer count")
            k = int(value)
            if not 0 <= k <= n:
                raise DatasetError(f"row {r} (prompt {pid}): {label}={k} is not a count of n={n} rollouts")
            out_p.append(pid)
            out_c.append(k if counts == "correct" else n - k)
            continue
        rate = _rate(value)
        if rate is None:
            miss.append((r, f"{label} is null", pid))
            continue
        c = round(rate * n) if math.isfinite(rate) else -1
        if not 0.0 <= rate <= 1.0 or abs(rate - c / n) > 1e-6:
            raise DatasetError(
                f"row {r} (prompt {pid}): {label}={value!r} is not a pass rate of n={n} rollouts (a multiple of "
                f"1/{n} in [0, 1]); give the right n"
            )
        out_p.append(pid)
        out_c.append(c)
    names = sorted(set(dataset_names))
    if len(names) != 1:
        raise DatasetError(f"labels are read from one dataset's problems, got {names}")
    obs = record.observation_rows(source, "label", 0, names[0], out_p, [n] * len(out_p), out_c, chosen)
    return obs, _unmatched(source, 0, [m[0] for m in miss], [m[1] for m in miss], [m[2] for m in miss])
