"""A run's dataset written back in its own format, with the run's measurements on every row.

A user starts from the file their trainer reads; ``export_run`` writes that file back: every row
of the run's dataset with its original fields as they were loaded (``problems.original``), plus one
field named after the run, ``difficulty_<run_id>``, holding the measurements of the row's prompt:

    prompt_id, status, n, c, pass_rate, interval_lo, interval_hi, interval_level (Wilson),
    band, G, zero_signal (rate at the trainer's G), n_rollouts (the allocation, when one exists)

Formats:

- ``verl``: Parquet in verl's RL layout. A verl row is written back with the measurements inside
  its ``extra_info`` mapping (verl's ``RLHFDataset`` reads ``extra_info`` with ``.get``: extra keys
  are passed through to reward functions); every other field is untouched. A row of another
  format becomes a verl row: ``data_source`` (the dataset), ``prompt`` (the run's template
  applied to the problem, as one user message), ``ability`` ``math``, ``reward_model``
  (``style`` ``rule``, ``ground_truth``), and ``extra_info`` holding the original fields, ``index``
  and the measurements.
- ``parquet`` and ``jsonl``: the original rows with the measurements as one more top-level field.
  A JSON Lines row is its original line, as written, with the field appended.

Which rows: ``keep`` selects a band of the measured pass rate ``p = c / n`` with edges
``lo < hi`` (default 0 and 1): ``hard`` is ``p <= lo``, ``easy`` is ``p >= hi``, ``informative``
the rest; ``all`` keeps every row, unmeasured ones included (a problem the run could not grade,
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
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline import allocate, analyze, datasets, schema, stats
from pipeline import estimators as est
from pipeline.checks import check_choice, check_int
from pipeline.errors import ConfigError, DatasetError, StoreError
from pipeline.sample.templates import CHAT_MESSAGES, render_prompt
from pipeline.store import Store, disk_full, no_space, writable_output

log = logging.getLogger(__name__)

__all__ = [
    "BANDS",
    "FORMATS",
    "KEEP",
    "MEASUREMENT",
    "METADATA_KEY",
    "ExportConfig",
    "ExportResult",
    "band_of",
    "export_run",
    "measurement_key",
    "read_metadata",
]

FORMATS = ("verl", "parquet", "jsonl")
KEEP = ("all", "informative", "easy", "hard")
BANDS = ("informative", "easy", "hard")
UNMEASURED = "unmeasured"  # the band of a row the run has no samples for
METADATA_KEY = "difficulty"  # Parquet footer key of the export's metadata (JSON)

# The measurements of one row: a fixed type, so every row's field has the same shape (verl and
# ``datasets`` need one struct type per column).
MEASUREMENT = pa.struct(
    [
        ("prompt_id", pa.string()),
        ("status", pa.string()),
        ("n", pa.int32()),
        ("c", pa.int32()),
        ("pass_rate", pa.float64()),
        ("interval_lo", pa.float64()),
        ("interval_hi", pa.float64()),
        ("interval_level", pa.float64()),
        ("band", pa.string()),
        ("G", pa.int32()),
        ("zero_signal", pa.float64()),
        ("n_rollouts", pa.int32()),
    ]
)


def measurement_key(run_id: str) -> str:
    """The field that holds a run's measurements: ``difficulty_<run_id>``."""
    return f"difficulty_{run_id}"


@dataclass(frozen=True)
class ExportConfig:
    """Settings of one export.

    Attributes:
        format: ``verl``, ``parquet``, ``jsonl``, or None: ``verl`` for a verl dataset, else
            ``jsonl`` when the output ends in ``.jsonl``/``.json``, else ``parquet``.
        keep: ``all``, ``informative``, ``easy`` or ``hard``; None: ``informative`` when a
            ``band`` is given, else ``all``.
        band: the edges ``(lo, hi)`` of the informative band, ``0 <= lo < hi <= 1``; None is
            ``(0, 1)``: informative means at least one right and one wrong answer.
        G: the trainer's group size, for the zero-signal rate (``docs/estimators.md`` §3).
    """

    format: str | None = None
    keep: str | None = None
    band: tuple[float, float] | None = None
    G: int = 8

    def __post_init__(self) -> None:
        if self.format is not None:
            check_choice("format", self.format, FORMATS)
        if self.keep is not None:
            check_choice("keep", self.keep, KEEP)
        if self.band is not None:
            lo, hi = self.band
            if not (0.0 <= lo < hi <= 1.0):
                raise ConfigError(f"band=({lo!r}, {hi!r}) must be two pass rates 0 <= lo < hi <= 1")
        check_int("G", self.G, 1)

    @property
    def edges(self) -> tuple[float, float]:
        return self.band if self.band is not None else (0.0, 1.0)

    @property
    def selection(self) -> str:
        return self.keep or ("informative" if self.band is not None else "all")


@dataclass(frozen=True)
class ExportResult:
    """What an export wrote and left out (every row of the dataset is in one count)."""

    path: Path
    format: str
    key: str
    rows: int  # rows of the run's dataset (its problems partition)
    written: int
    left_out: int
    by_band: dict[str, dict[str, int]]  # band (or unmeasured, not_in_run) -> written / left_out
    missing: int  # prompts of the run that have no stored problem row (nothing to write back)
    exclude_list: Path | None
    metadata: dict[str, Any] = field(default_factory=dict)


def band_of(p: float | None, lo: float, hi: float) -> str:
    """The band of a pass rate: ``hard`` (``p <= lo``), ``easy`` (``p >= hi``) or ``informative``."""
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return UNMEASURED
    if p <= lo:
        return "hard"
    if p >= hi:
        return "easy"
    return "informative"


# --- what the run measured ----------------------------------------------------------------------


def _zero_signal_at(prompt_stats: pa.Table, G: int) -> list[float | None]:
    """Each prompt's zero-signal rate at G: the analysed value when G was analysed, else computed
    from (n, c) the same way (unbiased for n >= G, Jeffreys posterior mean for n < G)."""
    sizes = prompt_stats.column("group_sizes").to_pylist()
    rates = prompt_stats.column("zero_signal").to_pylist()
    n = prompt_stats.column("n").to_numpy(zero_copy_only=False)
    c = prompt_stats.column("c").to_numpy(zero_copy_only=False)
    computed = stats.zero_signal(n, c, G) if len(n) else np.array([])
    out: list[float | None] = []
    for i, (gs, zs) in enumerate(zip(sizes, rates, strict=True)):
        if n[i] == 0:
            out.append(None)
        elif gs and G in gs and zs is not None:
            out.append(zs[gs.index(G)])
        else:
            out.append(float(computed[i]))
    return out


def _chosen_allocation(store: Store, run_id: str, n_prompts: int) -> tuple[dict[str, int], dict[str, Any] | None]:
    """The rollouts per prompt of the run's allocation (the default policy's when stored, else the
    only one, else the largest budget), and what it was; empty and None without one."""
    table = store.read_table("allocation", {"run_id": run_id})
    if not table.num_rows:
        return {}, None
    rows = table.to_pylist()
    keys = sorted(
        {(r["objective"], r["estimator"], r["budget"], r["posterior"]) for r in rows},
        key=lambda k: (-(k[2] or 0), str(k)),
    )
    default = allocate.default_config(max(n_prompts, 1))
    want = (default.objective, est.get(default.estimator).spec, default.budget, default.posterior)
    key = want if want in keys else keys[0]
    chosen = {
        r["prompt_id"]: r["n_rollouts"]
        for r in rows
        if (r["objective"], r["estimator"], r["budget"], r["posterior"]) == key
    }
    info = {"objective": key[0], "estimator": key[1], "budget": key[2], "posterior": key[3], "default": key == want}
    if len(keys) > 1:
        info["others"] = len(keys) - 1
    return chosen, info


def _measurements(store: Store, run_id: str, config: ExportConfig) -> tuple[dict[str, dict], dict | None]:
    analysis, computed = analyze.analysis_of_run(store, run_id)
    if computed:
        log.info("run %s has no stored analysis; measurements computed from its samples", run_id)
    prompt_stats = analysis.prompt_stats
    zero = _zero_signal_at(prompt_stats, config.G)
    rollouts, allocation = _chosen_allocation(store, run_id, prompt_stats.num_rows)
    lo, hi = config.edges
    out: dict[str, dict] = {}
    for row, z in zip(prompt_stats.to_pylist(), zero, strict=True):
        p = row["pass_rate"] if row["n"] else None
        out[row["prompt_id"]] = {
            "prompt_id": row["prompt_id"],
            "status": schema.PROBLEM_OK,
            "n": row["n"],
            "c": row["c"],
            "pass_rate": p,
            "interval_lo": row["wilson_lo"] if p is not None else None,
            "interval_hi": row["wilson_hi"] if p is not None else None,
            "interval_level": row["interval_level"],
            "band": band_of(p, lo, hi),
            "G": config.G,
            "zero_signal": z,
            "n_rollouts": rollouts.get(row["prompt_id"]),
        }
    return out, allocation


def _unmeasured(prompt_id: str, status: str, G: int) -> dict:
    row = dict.fromkeys(MEASUREMENT.names)
    row.update({"prompt_id": prompt_id, "status": status, "band": UNMEASURED, "G": G})
    return row


# --- rows back in their format ------------------------------------------------------------------


def _fallback_row(problem: dict) -> dict:
    """A problem with no stored original row (loaded from the hub or generated): its own fields."""
    keep = ("problem", "answer", "source", "domain", "topic", "difficulty", "split")
    return {k: problem[k] for k in keep if problem.get(k) is not None}


def _is_verl(row: dict) -> bool:
    return datasets.detect_adapter(list(row)) == "verl"


def _to_verl(row: dict, problem: dict, index: int, template: str | None) -> dict:
    """A row of another format as a verl row (the original fields kept under ``extra_info``)."""
    if template and template != CHAT_MESSAGES:
        text = render_prompt(template, problem["problem"])
    else:
        text = problem["problem"]
    extra = dict(row)
    extra.setdefault("index", index)
    return {
        "data_source": problem["dataset"],
        "prompt": [{"role": "user", "content": text}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": problem["answer"]},
        "extra_info": extra,
    }


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


def _table(rows: list[dict], key: str, measures: list[dict], verl: bool) -> pa.Table:
    """The rows as a table (columns in first-seen order, types from the values) with the
    measurements as ``key``: inside ``extra_info`` for verl, else a top-level column."""
    if verl:  # an extra_info that holds this run's key already (an export exported again) loses it
        rows = [
            {**r, "extra_info": {k: v for k, v in r["extra_info"].items() if k != key}}
            if isinstance(r.get("extra_info"), dict)
            else r
            for r in rows
        ]
    names = list(dict.fromkeys(k for r in rows for k in r if k != key))
    columns = {name: _column([r.get(name) for r in rows], name) for name in names}
    measured = pa.array(measures, MEASUREMENT)
    if verl:
        columns["extra_info"] = _with_field(columns.get("extra_info", pa.nulls(len(rows))), key, measured)
    else:
        columns[key] = measured
    return pa.table(columns)


def _jsonl_line(original: str | None, row: dict, key: str, measure: dict) -> str:
    """A JSON Lines row: the original line as written with the measurements appended as the last
    field (re-serialised only when the row already has that field, or is not an object)."""
    text = json.dumps(measure, ensure_ascii=False, allow_nan=False)
    if original is not None:
        body = original.rstrip()
        if body.endswith("}") and key not in row:
            inner = body[:-1].rstrip()
            sep = "" if inner.endswith("{") else ", "
            return f"{inner}{sep}{json.dumps(key)}: {text}}}"
    out = {k: v for k, v in row.items() if k != key}
    out[key] = measure
    return datasets.original_json(out)


@contextmanager
def _atomic(path: Path) -> Iterator[Path]:
    """A temporary file beside ``path``, renamed onto it when the block succeeds."""
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex}.tmp"
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


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
    measured, allocation = _measurements(store, run_id, config)
    key = measurement_key(run_id)
    rows = problems.to_pylist()
    originals = [datasets.original_row(p["original"]) or _fallback_row(p) for p in rows]
    fmt = config.format or (
        "verl"
        if originals and all(_is_verl(r) for r in originals)
        else "jsonl"
        if output.suffix.lower() in (".jsonl", ".json", ".ndjson")
        else "parquet"
    )
    if fmt == "verl" and output.suffix.lower() in (".jsonl", ".json", ".ndjson"):
        raise ConfigError(f"--format verl writes Parquet (verl reads Parquet), not {output.name!r}; name it .parquet")
    if fmt == "jsonl" and output.suffix.lower() == ".parquet":
        raise ConfigError(f"--format jsonl writes JSON Lines, not {output.name!r}; name it .jsonl")

    keep = config.selection
    lo, hi = config.edges
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
            m = _unmeasured(pid, p["status"], config.G)
        else:
            counts.setdefault("not_in_run", {"written": 0, "left_out": 0})["left_out"] += 1
            left.append((pid, "not_in_run"))
            continue
        band = m["band"]
        entry = counts.setdefault(band, {"written": 0, "left_out": 0})
        if keep == "all" or band == keep:
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
            f"run {run_id}: --keep {keep} with band ({lo:g}, {hi:g}) keeps none of the {len(rows)} rows of "
            f"dataset {dataset} ({shown}); nothing written to {str(output)!r}"
        )

    metadata = {
        "key": key,
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
        "band": [lo, hi],
        "G": config.G,
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
        _write_outputs(run, rows, originals, chosen, measures, left, missing, metadata, output, side, exclude_list)
    except OSError as exc:
        if not no_space(exc):
            raise
        raise disk_full(f"the export of run {run_id}", output, None) from exc
    exclude = Path(exclude_list) if exclude_list is not None else None
    return ExportResult(
        path=output,
        format=fmt,
        key=key,
        rows=len(rows),
        written=len(chosen),
        left_out=len(left),
        by_band=counts,
        missing=len(missing),
        exclude_list=exclude,
        metadata=metadata,
    )


def _write_outputs(run, rows, originals, chosen, measures, left, missing, metadata, output, side, exclude_list) -> None:
    """The files of an export, written once every output was checked (the metadata file beside a
    JSON Lines export, the exclude list last)."""
    fmt, key = metadata["format"], metadata["key"]
    output.parent.mkdir(parents=True, exist_ok=True)
    picked = [rows[i] for i in chosen]
    picked_rows = [originals[i] for i in chosen]
    if fmt == "jsonl":
        lines = [_jsonl_line(p["original"], r, key, m) for p, r, m in zip(picked, picked_rows, measures, strict=True)]
        with _atomic(output) as tmp:
            tmp.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        with _atomic(side) as tmp:
            tmp.write_text(json.dumps(metadata, indent=1, default=str) + "\n", encoding="utf-8")
    else:
        if fmt == "verl":
            template = run.prompt_template
            picked_rows = [
                r if _is_verl(r) else _to_verl(r, p, i, template)
                for i, (p, r) in enumerate(zip(picked, picked_rows, strict=True))
            ]
        table = _table(picked_rows, key, measures, verl=fmt == "verl")
        table = table.replace_schema_metadata({METADATA_KEY: json.dumps(metadata, default=str)})
        with _atomic(output) as tmp:
            pq.write_table(table, tmp)
    if exclude_list is not None:
        exclude = Path(exclude_list)
        exclude.parent.mkdir(parents=True, exist_ok=True)
        with _atomic(exclude) as tmp:
            tmp.write_text("".join(f"{pid}\n" for pid, _ in left) + "".join(f"{pid}\n" for pid in missing))
