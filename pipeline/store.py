"""Storage: a data directory of hive-partitioned Parquet (the source of truth) and DuckDB views.

Layout under the data directory::

    problems/dataset=<name>/part-0.parquet
    runs/run_id=<id>/run.parquet
    samples/run_id=<id>/shard-00000.parquet
    prompt_stats|weights|summary|allocation/run_id=<id>/part-0.parquet

Every write goes to a hidden temporary name in the same folder and is renamed into place when
complete, so an interrupted write never leaves half a file and a finished shard is never redone.
Partition columns are kept inside the files too (files are self-describing); DuckDB reads them
with ``hive_partitioning=false`` so numeric-looking partition values are never re-typed.
"""

from __future__ import annotations

import json
import logging
import os
import re
import uuid
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline import schema

log = logging.getLogger(__name__)

DATA_DIR_ENV = "DIFFICULTY_DATA"
DEFAULT_DATA_DIR = "difficulty-data"
_SAFE_VALUE = re.compile(r"^[A-Za-z0-9._:+-]+$")


class StoreError(RuntimeError):
    """A storage problem the user can act on (bad data directory, unknown run, bad SQL)."""


def resolve_data_dir(data_dir: str | os.PathLike | None = None, *, create: bool = True) -> Path:
    """Return the data directory (flag, then ``$DIFFICULTY_DATA``, then ``./difficulty-data``).

    Fails before any work when the directory cannot be created or written.
    """
    raw = data_dir if data_dir is not None else os.environ.get(DATA_DIR_ENV, DEFAULT_DATA_DIR)
    path = Path(raw).expanduser().resolve()
    if not create:
        return path
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".write-probe-{uuid.uuid4().hex}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise StoreError(
            f"data directory {str(path)!r} is not writable ({exc.strerror or exc}); "
            f"pass --data-dir or set {DATA_DIR_ENV} to a writable folder"
        ) from exc
    return path


def _partition_dir(data_dir: Path, table: str, partition: dict[str, str] | None) -> Path:
    folder = Path(data_dir) / table
    for key, value in (partition or {}).items():
        value = str(value)
        if not _SAFE_VALUE.match(value):
            raise StoreError(f"partition value {value!r} for {key!r} has characters unsafe in a path")
        folder = folder / f"{key}={value}"
    return folder


def conform(data: pa.Table, table: str) -> pa.Table:
    """Cast ``data`` to the table's schema: missing nullable columns become nulls, extras are an error."""
    target = schema.SCHEMAS[table]
    extra = set(data.column_names) - set(target.names)
    if extra:
        raise StoreError(f"table {table!r} has no columns {sorted(extra)}; expected {target.names}")
    columns = []
    for field in target:
        if field.name in data.column_names:
            col = data.column(field.name)
            if col.type != field.type:
                col = col.cast(field.type)
        else:
            if not field.nullable:
                raise StoreError(f"table {table!r} needs column {field.name!r}")
            col = pa.nulls(data.num_rows, field.type)
        if not field.nullable and col.null_count:
            raise StoreError(f"table {table!r}: column {field.name!r} has {col.null_count} nulls")
        columns.append(col)
    return pa.Table.from_arrays(columns, schema=target)


def write_table(
    data_dir: str | os.PathLike,
    table: str,
    data: pa.Table,
    partition: dict[str, str] | None = None,
    part: str = "part-0",
) -> Path:
    """Atomically write ``data`` as ``<data_dir>/<table>/<k>=<v>/.../<part>.parquet``."""
    data = conform(data, table)
    folder = _partition_dir(Path(data_dir), table, partition)
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / f"{part}.parquet"
    tmp = folder / f".{part}.{uuid.uuid4().hex}.tmp"
    try:
        pq.write_table(data, tmp, compression="zstd")
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
    return final


def delete_partition(data_dir: str | os.PathLike, table: str, partition: dict[str, str]) -> None:
    """Remove every file of one partition (used before rewriting a run's analysis tables)."""
    folder = _partition_dir(Path(data_dir), table, partition)
    if folder.exists():
        for file in folder.rglob("*.parquet"):
            file.unlink()


def partition_files(data_dir: str | os.PathLike, table: str, where: dict[str, str] | None = None) -> list[Path]:
    """The complete Parquet files of a table, or of one partition of it (temporary files excluded)."""
    folder = _partition_dir(Path(data_dir), table, where)
    if not folder.exists():
        return []
    return sorted(p for p in folder.rglob("*.parquet") if not p.name.startswith("."))


def read_table(data_dir: str | os.PathLike, table: str, where: dict[str, str] | None = None) -> pa.Table:
    """Read a table (or one partition of it) into memory with its declared schema."""
    files = partition_files(Path(data_dir), table, where)
    target = schema.SCHEMAS[table]
    if not files:
        return target.empty_table()
    return pa.concat_tables([conform(pq.read_table(f), table) for f in files])


# --- run registry -------------------------------------------------------------------------------


def _now() -> datetime:
    return datetime.now(UTC)


def register_run(data_dir: str | os.PathLike, run: dict[str, Any]) -> str:
    """Record a run (idempotent: an existing run keeps its created_at). Returns its run_id."""
    run_id = run["run_id"]
    existing = get_run(data_dir, run_id, missing_ok=True)
    row = dict(existing or {})
    row.update({k: v for k, v in run.items() if v is not None})
    for key in ("params", "versions"):
        if isinstance(row.get(key), dict):
            row[key] = json.dumps(row[key], sort_keys=True)
    row.setdefault("created_at", _now())
    row["updated_at"] = _now()
    row.setdefault("status", "created")
    _write_run(data_dir, row)
    return run_id


def _write_run(data_dir: str | os.PathLike, row: dict[str, Any]) -> None:
    names = schema.RUNS.names
    data = pa.Table.from_pylist([{k: row.get(k) for k in names}], schema=schema.RUNS)
    write_table(data_dir, "runs", data, {"run_id": row["run_id"]}, part="run")


def get_run(data_dir: str | os.PathLike, run_id: str, *, missing_ok: bool = False) -> dict | None:
    """Return one run's registry row as a dict (params and versions still JSON strings)."""
    rows = read_table(data_dir, "runs", {"run_id": run_id}).to_pylist()
    if not rows:
        if missing_ok:
            return None
        known = list_runs(data_dir).column("run_id").to_pylist()
        raise StoreError(f"unknown run {run_id!r}; known runs: {known or 'none'}")
    return rows[0]


def set_run_status(data_dir: str | os.PathLike, run_id: str, status: str) -> None:
    """Update a run's status (created, sampling, done, failed)."""
    row = get_run(data_dir, run_id)
    row["status"] = status
    row["updated_at"] = _now()
    _write_run(data_dir, row)


def list_runs(data_dir: str | os.PathLike) -> pa.Table:
    """All runs, newest first."""
    runs = read_table(data_dir, "runs")
    if runs.num_rows:
        runs = runs.sort_by([("created_at", "descending")])
    return runs


def shard_name(shard: int) -> str:
    return f"shard-{shard:05d}"


def write_shard(data_dir: str | os.PathLike, run_id: str, shard: int, samples: pa.Table) -> Path:
    """Write one finished shard of samples; its presence marks the shard done."""
    return write_table(data_dir, "samples", samples, {"run_id": run_id}, part=shard_name(shard))


def finished_shards(data_dir: str | os.PathLike, run_id: str) -> set[int]:
    """Indices of the shards of a run already written (complete by construction)."""
    return {int(p.stem.split("-")[1]) for p in partition_files(Path(data_dir), "samples", {"run_id": run_id})}


# --- SQL ----------------------------------------------------------------------------------------


def load_sql(name: str) -> str:
    """The text of ``pipeline/sql/<name>.sql``."""
    try:
        return resources.files("pipeline.sql").joinpath(f"{name}.sql").read_text()
    except FileNotFoundError as exc:
        known = sorted(p.name[:-4] for p in resources.files("pipeline.sql").iterdir() if p.name.endswith(".sql"))
        raise StoreError(f"no query named {name!r}; known: {known}") from exc


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def connect(data_dir: str | os.PathLike) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with one view per table over its Parquet files.

    A table with no files yet gets an empty view of its declared schema, so queries on a fresh
    data directory work and return no rows.
    """
    data_dir = Path(data_dir)
    con = duckdb.connect(":memory:")
    for table, target in schema.SCHEMAS.items():
        if partition_files(data_dir, table):
            glob = str(data_dir / table / "**" / "*.parquet")
            con.execute(
                f"CREATE VIEW {table} AS SELECT * FROM read_parquet({_quote(glob)}, "
                "hive_partitioning=false, hive_types_autocast=false, union_by_name=true)"
            )
        else:
            con.register(f"_{table}_empty", target.empty_table())
            con.execute(f"CREATE VIEW {table} AS SELECT * FROM _{table}_empty")
    for view in (
        "history_drift",
        "history_silent",
        "history_zero_signal",
        "history_checkpoints",
    ):  # SQL views over the base tables, defined in sql/
        try:
            con.execute(f"CREATE VIEW {view} AS " + load_sql(view))
        except (StoreError, duckdb.Error):
            pass
    return con


def query(data_dir: str | os.PathLike, sql: str, params: list | dict | None = None) -> pa.Table:
    """Run one read query over the data directory's views; DuckDB errors become StoreError."""
    con = connect(data_dir)
    try:
        rel = con.sql(sql, params=params or None)
        if rel is None:  # a statement with no result (e.g. SET): nothing to show
            return pa.table({})
        return rel.to_arrow_table()
    except duckdb.Error as exc:
        raise StoreError(str(exc)) from exc
    finally:
        con.close()
