"""The ``observations`` table: one file per (source, step), written whole and atomically.

A source's step is written once as ``observations/source=<source>/step-<step>.parquet``; writing it
again replaces that one file, so an import that is run again, or resumed after a kill, never counts
an outcome twice. What a source has recorded so far is the list of its files: an incremental import
reads only the steps after it.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline import schema
from pipeline.checks import check_int
from pipeline.errors import ConfigError
from pipeline.store import Store

TABLE = "observations"
_SOURCE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:+-]{0,127}$")  # safe as a partition value
_STEP_PART = re.compile(r"^step-(\d+)$")
# The range of a step and of a count: the table stores counts as int32 and a step of 10^18 would
# make every other step of its source weigh nothing in ``current``; such a value is a bad cell.
MAX_STEP = 2**31 - 1
MAX_COUNT = 2**31 - 1
# Footer keys of a step read from a file its trainer writes (a verl dump): the bytes, rows, content
# digest and modification time read, so a later import sees the file has changed (grown, or written
# again at the same size) and reads the step again.
SOURCE_BYTES_KEY = "difficulty.source_bytes"
SOURCE_ROWS_KEY = "difficulty.source_rows"
SOURCE_DIGEST_KEY = "difficulty.source_digest"
SOURCE_MTIME_KEY = "difficulty.source_mtime_ns"


@dataclass(frozen=True)
class FileRead:
    """The source file a step was read from, as read: bytes, rollouts, content digest (``digest``)
    and modification time in ns (None: a step stored before these were kept)."""

    size: int
    rows: int
    digest: str | None = None
    mtime_ns: int | None = None


def digest(data: bytes) -> str:
    """A step file's content digest: a rewrite that keeps the byte count changes it."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def check_source(source: str) -> str:
    """A source name usable as a partition value (``ConfigError`` names a bad one)."""
    if not _SOURCE.match(source or ""):
        raise ConfigError(
            f"source name {source!r} is not allowed: use letters, digits and . _ : + - (at most 128, "
            "starting with a letter or digit), e.g. verl:grpo-run-3"
        )
    return source


def check_step(step: object, where: str) -> int:
    """A step number as an int (``checks.check_int``: an integer from 0 to ``MAX_STEP``)."""
    return check_int(f"{where}: step", step, 0, MAX_STEP)


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
    groups: list[int] | None = None,
) -> pa.Table:
    """One source step as ``observations`` rows, checked: ``0 <= c <= n``, ``n >= 1``, one row per
    prompt, or with ``groups`` (each row's ``group_index``) one row per group of a prompt."""
    if kind not in schema.OBSERVATION_KINDS:
        raise ConfigError(f"observation kind {kind!r} is unknown: allowed {', '.join(schema.OBSERVATION_KINDS)}")
    check_step(step, f"source {source}")
    for pid, k, ok in zip(prompt_ids, n, c, strict=True):
        if not 0 <= ok <= k or k < 1 or k > MAX_COUNT:
            raise ConfigError(
                f"source {source} step {step}: prompt {pid} has c={ok} of n={k}: need 0 <= c <= n, "
                f"1 <= n <= {MAX_COUNT}"
            )
    if groups is None:
        if len(set(prompt_ids)) != len(prompt_ids):
            raise ConfigError(f"source {source} step {step}: a prompt appears twice; merge its counts first")
    elif len(groups) != len(prompt_ids) or len(set(zip(prompt_ids, groups, strict=True))) != len(prompt_ids):
        raise ConfigError(f"source {source} step {step}: each row needs its own (prompt, group), one group index each")
    elif any(isinstance(g, bool) or not isinstance(g, int) or not 0 <= g <= MAX_COUNT for g in groups):
        raise ConfigError(f"source {source} step {step}: group indices must be integers >= 0, got {groups[:5]}")
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
            pa.array([None] * rows if groups is None else groups, pa.int32()),
        ],
        schema=schema.OBSERVATIONS,
    )


def group_numbers(prompt_codes: np.ndarray) -> np.ndarray:
    """Each rollout's group among its prompt's groups in one step, told by the counts alone (the
    rollouts in the order read, ``prompt_codes`` one code per rollout): a trainer gives every group
    the same size ``G``, so where every prompt's rollouts are a multiple of the smallest prompt's,
    that is ``G`` and a prompt with ``k G`` rollouts had ``k`` groups, its rollouts taken ``G`` at a
    time in order. Otherwise (sizes that are not one ``G``) each prompt is one group. A step where
    every prompt had the same number of groups cannot tell them apart this way: one group each.
    Rollouts of one prompt at one pass rate are exchangeable, so the groups' silent shares are those
    the trainer saw even where the order is not the trainer's (verl balances a batch before it dumps)."""
    codes = np.asarray(prompt_codes, dtype=np.int64)
    if codes.size == 0:
        return np.zeros(0, np.int64)
    sizes = np.bincount(codes)
    size = int(sizes[sizes > 0].min())
    if np.any(sizes % size):
        return np.zeros(codes.size, np.int64)
    # The rank of each rollout among its prompt's rollouts, in order: a stable sort by prompt.
    order = np.argsort(codes, kind="stable")
    starts = np.cumsum(sizes) - sizes
    rank = np.empty(codes.size, np.int64)
    rank[order] = np.arange(codes.size) - starts[codes[order]]
    return rank // size


def group_codes(prompt_codes: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Each rollout's group among its prompt's groups, told by a key per rollout (verl's ``uid``):
    a prompt's distinct keys numbered 0, 1, ... in the order they first appear."""
    codes = np.asarray(prompt_codes, dtype=np.int64)
    keys = np.asarray(keys, dtype=np.int64)
    if codes.size == 0:
        return np.zeros(0, np.int64)
    pair = codes * (int(keys.max()) + 1) + keys
    pairs, first, inverse = np.unique(pair, return_index=True, return_inverse=True)
    prompt = codes[first]
    order = np.lexsort((first, prompt))  # each prompt's groups in the order they first appear
    starts = np.searchsorted(prompt[order], prompt[order])
    rank = np.empty(len(pairs), np.int64)
    rank[order] = np.arange(len(pairs)) - starts
    return rank[inverse.reshape(-1)]


def write_step(
    store: Store,
    source: str,
    step: int,
    rows: pa.Table,
    unmatched: pa.Table | None = None,
    read: FileRead | None = None,
) -> int:
    """Store one source step's observations (replacing that step if it was there; a step whose rows
    all matched nothing is stored empty, so it counts as read) and its unmatched rows; returns the
    observations written. ``read``: the source file the step was read from, kept in the footer
    (``stored_steps``)."""
    check_source(source)
    other = pc.unique(rows.column("source")).to_pylist() + pc.unique(rows.column("step")).to_pylist()
    if any(v not in (source, step) for v in other):
        raise ConfigError(f"write_step({source!r}, {step}): the rows hold sources and steps {other}")
    if unmatched is not None:
        where = {"source": source}
        # An earlier read's unmatched rows of this step are replaced, by none when none are left.
        earlier = store.location("unmatched", f"source={source}", f"{step_part(step)}.parquet")
        if unmatched.num_rows or store.exists(earlier):
            store.write_table("unmatched", unmatched, where, step_part(step))
    meta = None
    if read is not None:
        meta = {SOURCE_BYTES_KEY: str(read.size), SOURCE_ROWS_KEY: str(read.rows)}
        if read.digest is not None:
            meta[SOURCE_DIGEST_KEY] = read.digest
        if read.mtime_ns is not None:
            meta[SOURCE_MTIME_KEY] = str(read.mtime_ns)
    store.write_table(TABLE, rows, {"source": source}, step_part(step), metadata=meta)
    return rows.num_rows


def recorded_steps(store: Store, source: str) -> set[int]:
    """The steps of ``source`` already in the table."""
    return set(stored_steps(store, source))


def stored_steps(store: Store, source: str) -> dict[int, FileRead | None]:
    """The steps of ``source`` in the table, each with the source file it was read from (None: a
    step of a source that does not grow, or stored before this was kept). The footers were read by
    the files' check: this costs no read."""
    out = {}
    for file in store.files(TABLE, {"source": check_source(source)}):
        match = _STEP_PART.match(str(file).rsplit("/", 1)[-1].removesuffix(".parquet"))
        if match:
            size, rows = store.footer_value(file, SOURCE_BYTES_KEY), store.footer_value(file, SOURCE_ROWS_KEY)
            mtime = store.footer_value(file, SOURCE_MTIME_KEY)
            content = store.footer_value(file, SOURCE_DIGEST_KEY)
            read = FileRead(int(size), int(rows), content, int(mtime) if mtime else None) if size and rows else None
            out[int(match.group(1))] = read
    return out


def simulated_sources(store: Store) -> tuple[str, ...]:
    """The sources of profile runs whose pass rates were made up (backend ``simulate``): what
    ``current``, its snapshot and the curriculum hooks leave out unless a source names them."""
    runs = store.list_runs()
    if runs.num_rows == 0:
        return ()
    ids, backends = runs.column("run_id").to_pylist(), runs.column("backend").to_pylist()
    return tuple(sorted(f"profile:{r}" for r, b in zip(ids, backends, strict=True) if b == "simulate"))


def read_observations(store: Store, source: str | None = None) -> pa.Table:
    """The table (one source's rows when named)."""
    return store.read_table(TABLE, {"source": check_source(source)} if source else None)
