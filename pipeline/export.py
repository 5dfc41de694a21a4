"""A run's dataset written back in a trainer's format, with the run's measurements on every row.

A user starts from the file their trainer reads; ``export_run`` writes that file back: every row
of the run's dataset with its original fields as they were loaded (``problems.original``), plus two
fields whose names never depend on the run, so a reward function or a curriculum reads the same
key after every new profile or ``current --save``:

- ``prompt_id``, top level: the pipeline's id of the row's prompt (what ``observations``, the TRL
  recorder and the curriculum policies key on);
- ``difficulty`` (``ExportConfig.field``; ``--field`` renames it), the measurements of the row's prompt:

    run_id, prompt_id, status, answers_drawn (the profile's n), answers_correct (its c), pass_rate
    (c / n), interval_lo, interval_hi, interval_level (Wilson), band, G (the trainer's group size),
    zero_signal (the chance a group of G is silent), truncated_share (of the answers drawn, those
    cut by the token limit), tokens_per_answer (its answers' mean length in tokens), tokens_expected
    (its price: its expected answer length under the run's population, docs/tokens.md), undecided
    (an adaptive run's prompt that stopped without a decision; null for a fixed-n run),
    allocated_rollouts (the run's allocation, when one exists)

``zero_signal`` is a prediction for the trainer's groups, not a count over the profile's answers:
``E[p^G + (1 - p)^G]`` under the prompt's posterior (``stats.silent_chance``): ``Beta(1 + c,
1 + n - c)`` (a flat prior) for a fixed-n run, the run's own posterior for an adaptive one (the
prior its decisions were made under). So 6 of 8 right is 0.125 at G = 8, never 0.

Formats:

- ``verl``: Parquet in verl's RL layout. A verl row is written back with the measurements inside
  its ``extra_info`` mapping (verl's ``RLHFDataset`` reads ``extra_info`` with ``.get``: extra keys
  are passed through to reward functions) and ``prompt_id`` as one more column (verl passes extra
  columns through to the batch); every other field is untouched. A row of another format becomes a
  verl row: ``data_source`` (the dataset), ``prompt`` (the run's template applied to the problem, as
  one user message), ``ability`` ``math``, ``reward_model`` (``style`` ``rule``, ``ground_truth``),
  and ``extra_info`` holding the original fields, ``index`` and the measurements.
- ``trl``: Parquet as TRL's ``GRPOTrainer`` reads it: ``prompt`` (conversational: the messages the
  run sent, a verl row's own or the run's template applied as one user message), ``answer`` (the gold
  answer the run graded against, which TRL hands to reward functions as ``answer=``), ``prompt_id``
  and the measurements as top-level columns, then the original fields. An original ``prompt`` or
  ``answer`` that differs from these is kept as ``original_prompt`` / ``original_answer``.
- ``parquet`` and ``jsonl``: the original rows with ``prompt_id`` and the measurements as top-level
  fields. A JSON Lines row is its original line, as written, with the two fields appended.

A row that has a field of the measurements' name already, or a ``prompt_id`` of its own, is an
error naming it (``--field`` picks another name), unless it is an earlier export's (a mapping with
``run_id`` and ``pass_rate``), which is replaced. A row the pipeline rebuilt (a hub or generated
dataset, with no stored original) has its difficulty label as ``difficulty_label``.

Which rows: ``keep`` selects a band. By default a prompt's band is decided at the trainer's G, so
that runs that drew different numbers of answers (an adaptive run, a fixed n of 8 or 64) keep
comparable sets: ``informative`` when the prompt has a right and a wrong answer and a group of G
is more likely than not to mix them (each chance under the prompt's posterior, as for
``zero_signal``), ``hard`` when it has no right answer or a group of G is more likely than not all
wrong, ``easy`` likewise. At n = G with a fixed-n run this is exactly "at least one right and one
wrong answer"; 1 right of 40 is ``hard`` for groups of 8. With ``band`` edges ``lo < hi`` it is
the measured pass rate ``p = c / n`` instead (``schema.band_of``): ``hard`` is ``p <= lo``, ``easy`` is ``p >= hi``,
``informative`` the rest.

A prompt that would be ``hard`` but whose wrong answers were mostly cut by the token limit
(``prompt_stats.truncated``) is ``truncated``: its difficulty is the token budget's, so
``informative`` does not drop it as hard; it is written with ``informative`` and ``all`` unless
``drop_truncated`` (``keep`` ``truncated`` selects only those; ``hard`` never includes them).
``all`` keeps every row, unmeasured ones included (a problem the run could not grade,
``empty_answer``, carries its status and null measurements). Nothing is dropped without a count:
``ExportResult`` says how many rows each band had, how many were written and left out, and the ids
left out can be written to an exclude list. A filter that keeps nothing is an error, not an empty
file.

The run's model and settings are in the ``runs`` table; they are repeated, with the export's own
settings and counts, as JSON under the key ``difficulty`` of the Parquet footer (JSON Lines: in a
``<output>.meta.json`` beside it).
"""

from __future__ import annotations

import json
import logging
import math
import os
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline import allocate, analyze, datasets, finish, schema, stats
from pipeline import estimators as est
from pipeline.checks import check_bool, check_choice, check_int
from pipeline.errors import ConfigError, DatasetError, StoreError
from pipeline.sample.templates import CHAT_MESSAGES, render_prompt
from pipeline.schema import UNMEASURED, band_of
from pipeline.store import Store, disk_full, fs, no_space, writable_output

log = logging.getLogger(__name__)

__all__ = [
    "BANDS",
    "FIELD",
    "FORMATS",
    "KEEP",
    "MEASUREMENT",
    "METADATA_KEY",
    "PROMPT_ID",
    "ExportConfig",
    "ExportResult",
    "export_run",
    "read_metadata",
]

FORMATS = ("verl", "trl", "parquet", "jsonl")
FIELD = "difficulty"  # the measurements' field, the same for every run (``--field`` renames it)
PROMPT_ID = "prompt_id"  # the top-level id column every format gets
LABEL_FIELD = "difficulty_label"  # a rebuilt row's difficulty label (its ``difficulty`` is the measurements')
TRL_COLUMNS = ("prompt", "answer")  # what GRPOTrainer reads: the prompt, and the gold answer for the reward
KEEP = ("all", "informative", "easy", "hard", "truncated")
BANDS = schema.BANDS
TRUNCATED = "truncated"  # the band of a would-be hard prompt whose wrong answers were mostly cut off
FLAT_PRIOR = (1.0, 1.0)  # a fixed-n run's prior for zero_signal and the bands at G
METADATA_KEY = "difficulty"  # Parquet footer key of the export's metadata (JSON)

# The measurements of one row: a fixed type, so every row's field has the same shape (verl and
# ``datasets`` need one struct type per column).
MEASUREMENT = pa.struct(
    [
        ("run_id", pa.string()),
        ("prompt_id", pa.string()),
        ("status", pa.string()),
        ("answers_drawn", pa.int32()),
        ("answers_correct", pa.int32()),
        ("pass_rate", pa.float64()),
        ("interval_lo", pa.float64()),
        ("interval_hi", pa.float64()),
        ("interval_level", pa.float64()),
        ("band", pa.string()),
        ("G", pa.int32()),
        ("zero_signal", pa.float64()),
        ("truncated_share", pa.float64()),
        ("tokens_per_answer", pa.float64()),
        ("tokens_expected", pa.float64()),
        ("undecided", pa.bool_()),
        ("allocated_rollouts", pa.int32()),
    ]
)


@dataclass(frozen=True)
class ExportConfig:
    """Settings of one export.

    Attributes:
        format: ``verl``, ``trl``, ``parquet``, ``jsonl``, or None: ``verl`` for a verl dataset,
            else ``jsonl`` when the output ends in ``.jsonl``/``.json``, else ``parquet``.
        keep: ``all``, ``informative``, ``easy``, ``hard`` or ``truncated``; None: ``informative``
            when a ``band`` is given, else ``all``.
        band: the edges ``(lo, hi)`` of the informative band of measured pass rates,
            ``0 <= lo < hi <= 1``; None: the bands at G (informative: a right and a wrong answer,
            and a group of G more likely than not to mix them; see the module docstring).
        G: the trainer's group size, for the zero-signal chance and the bands (``docs/estimators.md`` §3).
        field: the name of the measurements' field (``difficulty``).
        drop_truncated: leave out the ``truncated`` prompts, which ``informative`` and ``all`` write.
    """

    format: str | None = None
    keep: str | None = None
    band: tuple[float, float] | None = None
    G: int = schema.DEFAULT_G
    field: str = FIELD
    drop_truncated: bool = False

    def __post_init__(self) -> None:
        if self.format is not None:
            check_choice("format", self.format, FORMATS)
        if self.keep is not None and self.keep != "all":
            # One band vocabulary (schema.BANDS); the old names users typed still read.
            old = schema.OLD_BAND_NAMES.get(str(self.keep).strip().lower())
            object.__setattr__(self, "keep", old or self.keep)
        if self.keep is not None:
            check_choice("keep", self.keep, KEEP)
        if self.band is not None:
            lo, hi = self.band
            if not (0.0 <= lo < hi <= 1.0):
                raise ConfigError(f"band=({lo!r}, {hi!r}) must be two pass rates 0 <= lo < hi <= 1")
        check_int("G", self.G, 1)
        check_bool("drop_truncated", self.drop_truncated)
        if self.drop_truncated and self.keep == TRUNCATED:
            raise ConfigError("keep='truncated' with drop_truncated=True keeps nothing; give one of them")
        taken = (PROMPT_ID, *TRL_COLUMNS, "extra_info")
        if not isinstance(self.field, str) or not self.field.strip() or self.field in taken:
            raise ConfigError(f"field={self.field!r} must be a name other than {', '.join(taken)}")

    @property
    def selection(self) -> str:
        return self.keep or ("informative" if self.band is not None else "all")

    @property
    def rule(self) -> str:
        """How a row's band is decided, in words (the metadata and the messages say it)."""
        if self.band is not None:
            return f"pass rate c/n: hard <= {self.band[0]:g}, easy >= {self.band[1]:g}"
        return (
            f"at G = {self.G}: informative with a right and a wrong answer and a group of {self.G} more likely "
            "than not to mix them"
        )

    def writes(self, band: str) -> bool:
        """Whether a row of ``band`` is written: its band selected; a ``truncated`` one also with
        ``informative`` (what a trainer keeps: the token limit, not the problem, made it silent, so
        it is not dropped as hard), unless ``drop_truncated``. ``hard`` and ``easy`` select only
        their own band."""
        if band == TRUNCATED:
            return not self.drop_truncated and self.selection in ("all", "informative", TRUNCATED)
        return self.selection in ("all", band)


@dataclass(frozen=True)
class ExportResult:
    """What an export wrote and left out (every row of the dataset is in one count)."""

    path: Path
    format: str
    field: str  # the measurements' field (inside extra_info for verl)
    rows: int  # rows of the run's dataset (its problems partition)
    written: int
    left_out: int
    by_band: dict[str, dict[str, int]]  # band (or unmeasured, not_in_run) -> written / left_out
    missing: int  # prompts of the run that have no stored problem row (nothing to write back)
    exclude_list: Path | None
    metadata: dict[str, Any] = field(default_factory=dict)


# --- what the run measured ----------------------------------------------------------------------


def posterior_run(prompt_stats: pa.Table) -> bool:
    """An adaptive run's analysis: every per-G value is already a posterior expectation under the
    run's prior (``post_mean`` is set only then)."""
    return prompt_stats.num_rows > 0 and prompt_stats.column("post_mean").null_count < prompt_stats.num_rows


def silence_at(prompt_stats: pa.Table, G: int) -> tuple[np.ndarray, np.ndarray]:
    """Each prompt's chance that a group of G is all right, and all wrong, under its posterior: an
    adaptive run's analysed values at G (its own prior), else ``Beta(1 + c, 1 + n - c)``
    (``FLAT_PRIOR``); NaN for a prompt without answers. Not the counted rate at G = n, which is 0
    for any prompt with a right and a wrong answer however likely a silent group of G is.

    The report's frame of a run (``prompt_stats`` with the per-G lists replaced by their values at
    its G, ``silent_all_correct_G``; the report asks at that G) is read the same way."""
    n = np.asarray(prompt_stats.column("n").to_numpy(zero_copy_only=False), float)
    c = np.asarray(prompt_stats.column("c").to_numpy(zero_copy_only=False), float)
    right, wrong = stats.silent_chance(FLAT_PRIOR[0] + c, FLAT_PRIOR[1] + n - c, G)
    names = prompt_stats.column_names
    if posterior_run(prompt_stats) and "group_sizes" not in names and "silent_all_correct_G" in names:
        at_G = [prompt_stats.column(f"silent_all_{x}_G").to_numpy(zero_copy_only=False) for x in ("correct", "wrong")]
        given = ~np.isnan(np.asarray(at_G[0], float))
        right, wrong = np.where(given, at_G[0], right), np.where(given, at_G[1], wrong)
    elif posterior_run(prompt_stats):
        sizes = prompt_stats.column("group_sizes").to_pylist()
        plus = prompt_stats.column("silent_all_correct").to_pylist()
        minus = prompt_stats.column("silent_all_wrong").to_pylist()
        for i, gs in enumerate(sizes):
            if gs and G in gs and plus[i] is not None and plus[i][gs.index(G)] is not None:
                right[i], wrong[i] = plus[i][gs.index(G)], minus[i][gs.index(G)]
    known = n > 0
    return np.where(known, right, np.nan), np.where(known, wrong, np.nan)


def bands(prompt_stats: pa.Table, config: ExportConfig) -> list[str]:
    """Each prompt's band under ``config`` (the module docstring's rule): at G, or from the pass rate
    between ``config.band``'s edges; ``truncated`` in place of ``hard`` for a prompt flagged
    ``truncated``; ``unmeasured`` without answers.

    At G a prompt is ``informative`` when it has a right and a wrong answer and a group of G is more
    likely than not to mix them (``silence_at``); one with no right answer is ``hard`` and one with
    no wrong answer ``easy`` whatever its posterior says: with fewer answers than G a flat prior
    leaves 0 of 4 right more likely than not to mix at G = 8, and the counts, not the prior, should
    decide that. So a fixed-n run at n = G keeps exactly the prompts with a right and a wrong
    answer, and a run that drew many more (an adaptive one) no longer keeps 1 right of 40 as
    informative for groups of 8."""
    n = prompt_stats.column("n").to_pylist()
    c = prompt_stats.column("c").to_pylist()
    flags = prompt_stats.column("truncated").to_pylist()
    if config.band is not None:
        rates = [r if k else None for r, k in zip(prompt_stats.column("pass_rate").to_pylist(), n, strict=True)]
        out = [band_of(p, *config.band) for p in rates]
    else:
        right, wrong = silence_at(prompt_stats, config.G)
        out = [
            UNMEASURED if not k else "hard" if ok == 0 or w >= 0.5 else "easy" if ok == k or r >= 0.5 else "informative"
            for k, ok, r, w in zip(n, c, right.tolist(), wrong.tolist(), strict=True)
        ]
    return [TRUNCATED if b == "hard" and flag else b for b, flag in zip(out, flags, strict=True)]


def _chosen_allocation(store: Store, run_id: str, n_prompts: int) -> tuple[dict[str, int], dict[str, Any] | None]:
    """The rollouts per prompt of the run's allocation (the default policy's when stored, else the
    only one, else the largest budget), and what it was; empty and None without one."""
    table = store.read_table("allocation", {"run_id": run_id})
    if not table.num_rows:
        return {}, None
    rows = table.to_pylist()

    def key_of(r: dict) -> tuple:  # a row made before the price unit existed was priced in rollouts
        return (r["objective"], r["estimator"], r["budget"], r["posterior"], r.get("price_unit") or "rollouts")

    # budgets in rollouts first (a budget in tokens is not comparable), the largest first
    keys = sorted({key_of(r) for r in rows}, key=lambda k: (k[4] != "rollouts", -(k[2] or 0), str(k)))
    default = allocate.default_config(max(n_prompts, 1))
    want = (default.objective, est.get(default.estimator).spec, default.budget, default.posterior, "rollouts")
    key = want if want in keys else keys[0]
    chosen = {r["prompt_id"]: r["n_rollouts"] for r in rows if key_of(r) == key}
    info = {"objective": key[0], "estimator": key[1], "budget": key[2], "posterior": key[3], "default": key == want}
    if key[4] != "rollouts":
        info["price_unit"] = key[4]
    if len(keys) > 1:
        info["others"] = len(keys) - 1
    return chosen, info


def _at_G(store: Store, run_id: str, prompt_stats: pa.Table, G: int) -> pa.Table:
    """``prompt_stats`` with G among its analysed group sizes where the run is adaptive and its
    analysis left G out: its posterior values at G, under its own prior, are computed again."""
    sizes = prompt_stats.column("group_sizes").to_pylist()
    if not posterior_run(prompt_stats) or all(G in (gs or ()) for gs in sizes):
        return prompt_stats
    config = analyze.AnalyzeConfig(group_sizes=(G,), estimators=("grpo",), pass_at_k=False)
    return finish.analyze_run(store, run_id, config).prompt_stats


def _measurements(store: Store, run_id: str, config: ExportConfig) -> tuple[dict[str, dict], dict | None, bool]:
    analysis, computed = finish.analysis_of_run(store, run_id, weights=False)
    if computed:
        log.info("run %s has no stored analysis; measurements computed from its samples", run_id)
    prompt_stats = _at_G(store, run_id, analysis.prompt_stats, config.G)
    right, wrong = silence_at(prompt_stats, config.G)
    rollouts, allocation = _chosen_allocation(store, run_id, prompt_stats.num_rows)
    out: dict[str, dict] = {}
    rows = prompt_stats.to_pylist()
    for row, band, z in zip(rows, bands(prompt_stats, config), (right + wrong).tolist(), strict=True):
        p = row["pass_rate"] if row["n"] else None
        out[row["prompt_id"]] = {
            "run_id": run_id,
            "prompt_id": row["prompt_id"],
            "status": schema.PROBLEM_OK,
            "answers_drawn": row["n"],
            "answers_correct": row["c"],
            "pass_rate": p,
            "interval_lo": row["wilson_lo"] if p is not None else None,
            "interval_hi": row["wilson_hi"] if p is not None else None,
            "interval_level": row["interval_level"],
            "band": band,
            "G": config.G,
            "zero_signal": None if math.isnan(z) else z,
            "truncated_share": row["truncated_share"] if p is not None else None,
            # its answers' mean length, and its price: the expected length under the run's population
            "tokens_per_answer": row.get("tokens_per_answer") if p is not None else None,
            "tokens_expected": row.get("tokens_expected"),
            "undecided": row["undecided"],
            "allocated_rollouts": rollouts.get(row["prompt_id"]),
        }
    return out, allocation, posterior_run(prompt_stats)


def _unmeasured(run_id: str, prompt_id: str, status: str, G: int) -> dict:
    row = dict.fromkeys(MEASUREMENT.names)
    row.update({"run_id": run_id, "prompt_id": prompt_id, "status": status, "band": UNMEASURED, "G": G})
    return row


# --- rows back in their format ------------------------------------------------------------------


def _fallback_row(problem: dict) -> dict:
    """A problem with no stored original row (loaded from the hub or generated): its own fields, its
    difficulty label as ``difficulty_label`` (``difficulty`` is the measurements' field)."""
    keep = ("problem", "answer", "source", "domain", "topic", "difficulty", "split")
    return {LABEL_FIELD if k == "difficulty" else k: problem[k] for k in keep if problem.get(k) is not None}


def _is_verl(row: dict) -> bool:
    return datasets.detect_adapter(list(row)) == "verl"


def _earlier(value: Any) -> bool:
    """An earlier export's measurements (an export exported again): replaced, not an error."""
    return isinstance(value, dict) and {"run_id", "pass_rate"} <= value.keys()


def _check_own(holder: dict, field: str, row: dict, problem: dict) -> None:
    """``ConfigError`` when the export would overwrite a field that is the dataset's own: one named
    like the measurements (in ``holder``: the row, or a verl row's ``extra_info``), or a ``prompt_id``
    that is not the pipeline's; an earlier export's are replaced."""
    pid, dataset = problem["prompt_id"], problem["dataset"]
    earlier = _earlier(holder.get(field))
    if field in holder and not earlier:
        raise ConfigError(
            f"dataset {dataset}: its rows have a field {field!r} of their own ({str(holder[field])[:60]!r} "
            f"for prompt {pid}); `--field NAME` writes the measurements under another name"
        )
    if row.get(PROMPT_ID, pid) != pid and not earlier:
        raise ConfigError(
            f"dataset {dataset}: its rows have a {PROMPT_ID!r} of their own ({str(row[PROMPT_ID])[:60]!r} for "
            f"prompt {pid}), which the export's {PROMPT_ID} column would replace; rename that field in the file"
        )


def _drop(row: dict, *names: str) -> dict:
    return {k: v for k, v in row.items() if k not in names}


def _messages(row: dict, problem: dict, template: str | None) -> list[dict]:
    """The chat messages the run sent: the template applied to the problem as one user message, or a
    verl row's own messages (template ``{messages}``)."""
    if template == CHAT_MESSAGES and _is_verl(row):
        return row["prompt"]
    if template and template != CHAT_MESSAGES:
        return [{"role": "user", "content": render_prompt(template, problem["problem"])}]
    return [{"role": "user", "content": problem["problem"]}]


def _to_verl(row: dict, problem: dict, index: int, template: str | None) -> dict:
    """A row of another format as a verl row (the original fields kept under ``extra_info``)."""
    extra = dict(row)
    extra.setdefault("index", index)
    return {
        "data_source": problem["dataset"],
        "prompt": _messages(row, problem, template),
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": problem["answer"]},
        "extra_info": extra,
    }


def _shaped(fmt: str, row: dict, problem: dict, index: int, template: str | None, field: str) -> dict:
    """A row in the output format, without ``prompt_id`` and the measurements (``_table`` adds them
    as typed columns); ``ConfigError`` when either would overwrite a field of the dataset's own."""
    if fmt == "verl" and _is_verl(row):
        extra = row.get("extra_info")
        _check_own(extra if isinstance(extra, dict) else {}, field, row, problem)
        out = _drop(row, PROMPT_ID)
        if isinstance(extra, dict):
            out["extra_info"] = _drop(extra, field)
        return out
    _check_own(row, field, row, problem)
    own = _drop(row, field, PROMPT_ID)
    if fmt == "verl":
        return _to_verl(own, problem, index, template)
    if fmt == "trl":
        lead = {"prompt": _messages(own, problem, template), "answer": problem["answer"]}
        # The dataset's own prompt or answer, when it is not what TRL gets, is kept under another name.
        moved = {f"original_{k}": own[k] for k in TRL_COLUMNS if k in own and own[k] != lead[k]}
        return {**lead, **moved, **_drop(own, *TRL_COLUMNS)}
    return own


def _column(values: list[Any], name: str) -> pa.Array:
    """One column from Python values; a column that mixes kinds Arrow cannot hold in one type
    (text and numbers) is written as JSON text, with a warning."""
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        log.warning("column %r mixes value types (%s); written as JSON text", name, exc)
        return pa.array(
            [None if v is None else v if isinstance(v, str) else datasets.original_json(v) for v in values],
            pa.string(),
        )


def _with_field(struct: pa.Array, name: str, child: pa.Array) -> pa.StructArray:
    """A struct column with one more field (or that field replaced); a null mapping becomes a
    mapping with null fields, so ``extra_info.get(...)`` works on every row."""
    if isinstance(struct, pa.ChunkedArray):
        struct = struct.combine_chunks()
    if pa.types.is_null(struct.type):
        return pa.StructArray.from_arrays([child], names=[name])
    if not pa.types.is_struct(struct.type):
        raise DatasetError(
            f"extra_info is {struct.type}, not a mapping: the measurements cannot go inside it; "
            "use --format parquet to add them as a top-level field"
        )
    names = [struct.type.field(i).name for i in range(struct.type.num_fields)]
    children = struct.flatten()
    if name in names:
        children[names.index(name)] = child
    else:
        names.append(name)
        children.append(child)
    return pa.StructArray.from_arrays(children, names=names)


def _table(rows: list[dict], ids: list[str], field: str, measures: list[dict], fmt: str) -> pa.Table:
    """The shaped rows as a table (columns in first-seen order, types from the values) with
    ``prompt_id`` and the measurements (one struct type): for verl the measurements inside
    ``extra_info``; for trl ``prompt``, ``answer``, ``prompt_id`` and the measurements first."""
    names = list(dict.fromkeys(k for r in rows for k in r))
    columns = {name: _column([r.get(name) for r in rows], name) for name in names}
    measured = pa.array(measures, MEASUREMENT)
    ids_column = pa.array(ids, pa.string())
    if fmt == "verl":
        columns["extra_info"] = _with_field(columns.get("extra_info", pa.nulls(len(rows))), field, measured)
        columns[PROMPT_ID] = ids_column
    elif fmt == "trl":
        lead = {name: columns.pop(name) for name in TRL_COLUMNS}
        columns = {**lead, PROMPT_ID: ids_column, field: measured, **columns}
    else:
        columns[PROMPT_ID] = ids_column
        columns[field] = measured
    return pa.table(columns)


def _jsonl_line(original: str | None, row: dict, own: dict, field: str, measure: dict) -> str:
    """A JSON Lines row: the original line as written with ``prompt_id`` and the measurements
    appended as the last fields (re-serialised only when the row has either field already, an
    earlier export's, or is not an object)."""
    tail = {PROMPT_ID: measure["prompt_id"], field: measure}
    if original is not None and own.keys() == row.keys():
        body = original.rstrip()
        if body.endswith("}"):
            inner = body[:-1].rstrip()
            sep = "" if inner.endswith("{") else ", "
            fields = json.dumps(tail, ensure_ascii=False, allow_nan=False)[1:-1]  # the object without braces
            return f"{inner}{sep}{fields}}}"
    return datasets.original_json({**own, **tail})


def _atomic(path: Path) -> AbstractContextManager[Path]:
    """A temporary file beside ``path``, renamed onto it when the block succeeds; what a killed
    export left beside it is removed first (``fs.replacing``)."""
    return fs.replacing(path)


def _nan_to_none(measure: dict) -> dict:
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in measure.items()}


def read_metadata(path: str | os.PathLike) -> dict[str, Any] | None:
    """The export metadata of a file written by ``export_run`` (None when it has none)."""
    path = Path(path)
    if path.suffix.lower() == ".parquet" or path.suffix.lower() == ".pq":
        meta = pq.read_schema(path).metadata or {}
        raw = meta.get(METADATA_KEY.encode())
        return json.loads(raw) if raw else None
    side = path.with_name(path.name + ".meta.json")
    return json.loads(side.read_text()) if side.exists() else None


# --- the export ---------------------------------------------------------------------------------


def export_run(
    store: Store,
    run_id: str,
    output: str | os.PathLike,
    config: ExportConfig | None = None,
    *,
    exclude_list: str | os.PathLike | None = None,
) -> ExportResult:
    """Write run ``run_id``'s dataset to ``output`` in its own format with the run's measurements.

    Rows are those of the run's dataset (its ``problems`` partition), in their stored order: each
    prompt the run measured, and each problem it could not sample (a status other than ``ok``).
    Rows of the dataset that are not in the run (the dataset was loaded again since, with more
    rows) are left out and counted as ``not_in_run``.

    Raises:
        StoreError: unknown run, or a run whose dataset has no stored problems.
        ConfigError: the filter keeps no row (nothing is written), or a bad setting.
        DatasetError: verl's ``extra_info`` is not a mapping.
    """
    config = config or ExportConfig()
    output = Path(output)
    run = store.get_run(run_id)
    dataset = run.dataset
    problems = store.read_table("problems", {"dataset": dataset}) if dataset else schema.PROBLEMS.empty_table()
    if not problems.num_rows:
        raise StoreError(f"run {run_id}: dataset {dataset!r} has no stored problems to write back; load it again")
    measured, allocation, posterior = _measurements(store, run_id, config)
    field = config.field
    rows = problems.to_pylist()
    originals = [datasets.original_row(p["original"]) or _fallback_row(p) for p in rows]
    fmt = config.format or (
        "verl"
        if originals and all(_is_verl(r) for r in originals)
        else "jsonl"
        if output.suffix.lower() in (".jsonl", ".json", ".ndjson")
        else "parquet"
    )
    if fmt in ("verl", "trl") and output.suffix.lower() in (".jsonl", ".json", ".ndjson"):
        raise ConfigError(f"--format {fmt} writes Parquet ({fmt} reads Parquet), not {output.name!r}; name it .parquet")
    if fmt == "jsonl" and output.suffix.lower() == ".parquet":
        raise ConfigError(f"--format jsonl writes JSON Lines, not {output.name!r}; name it .jsonl")

    keep = config.selection
    counts: dict[str, dict[str, int]] = {}
    chosen: list[int] = []
    measures: list[dict] = []
    left: list[tuple[str, str]] = []
    seen: set[str] = set()
    for i, p in enumerate(rows):
        pid = p["prompt_id"]
        seen.add(pid)
        if pid in measured:
            m = measured[pid]
        elif p["status"] != schema.PROBLEM_OK:
            m = _unmeasured(run_id, pid, p["status"], config.G)
        else:
            counts.setdefault("not_in_run", {"written": 0, "left_out": 0})["left_out"] += 1
            left.append((pid, "not_in_run"))
            continue
        band = m["band"]
        entry = counts.setdefault(band, {"written": 0, "left_out": 0})
        if config.writes(band):
            entry["written"] += 1
            chosen.append(i)
            measures.append(_nan_to_none(m))
        else:
            entry["left_out"] += 1
            left.append((pid, band))
    missing = sorted(set(measured) - seen)
    if missing:
        log.warning(
            "run %s: %d prompts have no stored problem row (dataset %s was loaded again since); "
            "they cannot be written back",
            run_id,
            len(missing),
            dataset,
        )
    shown = ", ".join(f"{b} {c['written'] + c['left_out']}" for b, c in sorted(counts.items()))
    if not chosen:
        raise ConfigError(
            f"run {run_id}: --keep {keep}{' --drop-truncated' if config.drop_truncated else ''} (bands "
            f"{config.rule}) keeps none of the {len(rows)} rows of dataset {dataset} ({shown}); "
            f"nothing written to {str(output)!r}"
        )

    # Every row in its format before anything is written: a field of the dataset's own that the
    # export would overwrite is an error that leaves no file behind.
    template = run.prompt_template
    shaped = [_shaped(fmt, originals[i], rows[i], k, template, field) for k, i in enumerate(chosen)]
    metadata = {
        "field": field,
        "run_id": run_id,
        "dataset": dataset,
        "model": run.model,
        "backend": run.backend,
        "params": run.params,
        "seed": run.seed,
        "prompt_template": run.prompt_template,
        "grader": run.grader,
        "run_status": run.status,
        "format": fmt,
        "keep": keep,
        "drop_truncated": config.drop_truncated,
        "band": list(config.band) if config.band is not None else None,
        "bands_by": config.rule,
        "G": config.G,
        "zero_signal": "the chance a group of G is silent under the prompt's posterior, "
        + ("the run's own prior" if posterior else "a flat prior Beta(1, 1)"),
        "interval": "wilson",
        "allocation": allocation,
        "rows": {"dataset": len(rows), "written": len(chosen), "left_out": len(left), "missing": len(missing)},
        "by_band": counts,
    }
    side = output.with_name(output.name + ".meta.json")
    # Every output is checked before any is written: a bad --exclude-list leaves no export behind.
    writable_output(output, "--output")
    if fmt == "jsonl":
        writable_output(side, "the metadata file")
    if exclude_list is not None:
        writable_output(exclude_list, "--exclude-list")
    try:
        _write_outputs(rows, originals, chosen, shaped, measures, left, missing, metadata, output, side, exclude_list)
    except OSError as exc:
        if not no_space(exc):
            raise
        raise disk_full(f"the export of run {run_id}", output, None) from exc
    exclude = Path(exclude_list) if exclude_list is not None else None
    return ExportResult(
        path=output,
        format=fmt,
        field=field,
        rows=len(rows),
        written=len(chosen),
        left_out=len(left),
        by_band=counts,
        missing=len(missing),
        exclude_list=exclude,
        metadata=metadata,
    )


def _write_outputs(
    rows, originals, chosen, shaped, measures, left, missing, metadata, output, side, exclude_list
) -> None:
    """The files of an export, written once every output was checked (the metadata file beside a
    JSON Lines export, the exclude list last)."""
    fmt, field = metadata["format"], metadata["field"]
    output.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "jsonl":
        lines = [
            _jsonl_line(rows[i]["original"], originals[i], own, field, m)
            for i, own, m in zip(chosen, shaped, measures, strict=True)
        ]
        with _atomic(output) as tmp:
            tmp.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        with _atomic(side) as tmp:
            tmp.write_text(json.dumps(metadata, indent=1, default=str) + "\n", encoding="utf-8")
    else:
        table = _table(shaped, [m["prompt_id"] for m in measures], field, measures, fmt)
        table = table.replace_schema_metadata({METADATA_KEY: json.dumps(metadata, default=str)})
        with _atomic(output) as tmp:
            pq.write_table(table, tmp)
    if exclude_list is not None:
        exclude = Path(exclude_list)
        exclude.parent.mkdir(parents=True, exist_ok=True)
        with _atomic(exclude) as tmp:
            tmp.write_text("".join(f"{pid}\n" for pid, _ in left) + "".join(f"{pid}\n" for pid in missing))
