"""The ``observations`` table: one file per (source, step), written whole and atomically.

A source's step is written once as ``observations/source=<source>/step-<step>.parquet``; writing it
again replaces that one file, so an import that is run again, or resumed after a kill, never counts
an outcome twice. What a source has recorded so far is the list of its files: an incremental import
reads only the steps after it.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.compute as pc

from pipeline import schema
from pipeline.errors import ConfigError
from pipeline.store import Store

TABLE = "observations"
_SOURCE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:+-]{0,127}$")  # safe as a partition value
_STEP_PART = re.compile(r"^step-(\d+)$")


def check_source(source: str) -> str:
    """A source name usable as a partition value (``ConfigError`` names a bad one)."""
    if not _SOURCE.match(source or ""):
        raise ConfigError(
            f"source name {source!r} is not allowed: use letters, digits and . _ : + - (at most 128, "
            "starting with a letter or digit), e.g. verl:grpo-run-3"
        )
    return source


def step_part(step: int) -> str:
    return f"step-{step:010d}"


def observation_rows(
    source: str,
    kind: schema.ObservationKind,
    step: int,
    dataset: str,
    prompt_ids: list[str],
    n: list[int],
    c: list[int],
    model: str | None,
    observed_at: datetime | None = None,
) -> pa.Table:
    """One source step as ``observations`` rows, checked: ``0 <= c <= n``, ``n >= 1``, one row per prompt."""
    if kind not in schema.OBSERVATION_KINDS:
        raise ConfigError(f"observation kind {kind!r} is unknown: allowed {', '.join(schema.OBSERVATION_KINDS)}")
    if step < 0:
        raise ConfigError(f"step={step} must be >= 0 (source {source})")
    for pid, k, ok in zip(prompt_ids, n, c, strict=True):
        if not 0 <= ok <= k or k < 1:
            raise ConfigError(
                f"source {source} step {step}: prompt {pid} has c={ok} of n={k}: need 0 <= c <= n, n >= 1"
            )
    if len(set(prompt_ids)) != len(prompt_ids):
        raise ConfigError(f"source {source} step {step}: a prompt appears twice; merge its counts first")
    rows = len(prompt_ids)
    when = observed_at or datetime.now(UTC)
    return pa.Table.from_arrays(
        [
            pa.array([source] * rows, pa.string()),
            pa.array([kind] * rows, pa.string()),
            pa.array([step] * rows, pa.int64()),
            pa.array([dataset] * rows, pa.string()),
            pa.array(prompt_ids, pa.string()),
            pa.array([model] * rows, pa.string()),
            pa.array(n, pa.int32()),
            pa.array(c, pa.int32()),
            pa.array([when] * rows, pa.timestamp("us", tz="UTC")),
        ],
        schema=schema.OBSERVATIONS,
    )


def write_step(store: Store, source: str, step: int, rows: pa.Table, unmatched: pa.Table | None = None) -> int:
    """Store one source step's observations (replacing that step if it was there; a step whose rows
    all matched nothing is stored empty, so it counts as read) and its unmatched rows; returns the
    observations written."""
    check_source(source)
    other = pc.unique(rows.column("source")).to_pylist() + pc.unique(rows.column("step")).to_pylist()
    if any(v not in (source, step) for v in other):
        raise ConfigError(f"write_step({source!r}, {step}): the rows hold sources and steps {other}")
    if unmatched is not None and unmatched.num_rows:
        store.write_table("unmatched", unmatched, {"source": source}, step_part(step))
    store.write_table(TABLE, rows, {"source": source}, step_part(step))
    return rows.num_rows


def recorded_steps(store: Store, source: str) -> set[int]:
    """The steps of ``source`` already in the table."""
    out = set()
    for file in store.files(TABLE, {"source": check_source(source)}):
        match = _STEP_PART.match(str(file).rsplit("/", 1)[-1].removesuffix(".parquet"))
        if match:
            out.add(int(match.group(1)))
    return out


def read_observations(store: Store, source: str | None = None) -> pa.Table:
    """The table (one source's rows when named)."""
    return store.read_table(TABLE, {"source": check_source(source)} if source else None)
