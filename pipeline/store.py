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
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline import schema
from pipeline.errors import StoreError

log = logging.getLogger(__name__)

DATA_DIR_ENV = "DIFFICULTY_DATA"
DEFAULT_DATA_DIR = "difficulty-data"
_SAFE_VALUE = re.compile(r"^[A-Za-z0-9._:+-]+$")


def resolve_data_dir(data_dir: str | os.PathLike | None = None) -> Path:
    """The data directory's path: the flag, then ``$DIFFICULTY_DATA``, then ``./difficulty-data``."""
    raw = data_dir if data_dir is not None else os.environ.get(DATA_DIR_ENV, DEFAULT_DATA_DIR)
    return Path(raw).expanduser().resolve()


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


def shard_name(shard: int) -> str:
    return f"shard-{shard:05d}"


def load_sql(name: str) -> str:
    """The text of ``pipeline/sql/<name>.sql``."""
    try:
        return resources.files("pipeline.sql").joinpath(f"{name}.sql").read_text()
    except FileNotFoundError as exc:
        known = sorted(p.name[:-4] for p in resources.files("pipeline.sql").iterdir() if p.name.endswith(".sql"))
        raise StoreError(f"no query named {name!r}; known: {known}") from exc


# SQL views over the base tables, defined in sql/ (created after the tables' own views).
DERIVED_VIEWS = ("history_drift", "history_silent", "history_zero_signal", "history_checkpoints")


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Store:
    """A data directory: its layout, atomic writes, the run registry, DuckDB views and every read.

    Everything that touches the files of a data directory goes through one ``Store``, so it is
    the single seam where another filesystem would plug in. Build one with ``Store.open`` (which
    resolves the default location and checks the folder is writable) or ``Store(path)``;
    ``dataclasses.asdict(store)`` is its serialised form (a Prefect flow parameter).
    """

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    @classmethod
    def open(cls, data_dir: str | os.PathLike | None = None, *, create: bool = True) -> Store:
        """The store at ``data_dir`` (flag, then ``$DIFFICULTY_DATA``, then ``./difficulty-data``).

        With ``create`` the folder is made and probed, so a read-only location fails before any work.
        """
        path = resolve_data_dir(data_dir)
        if create:
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
        return cls(path)

    # --- layout -----------------------------------------------------------------------------

    def partition_dir(self, table: str, partition: dict[str, str] | None = None) -> Path:
        folder = self.root / table
        for key, value in (partition or {}).items():
            value = str(value)
            if not _SAFE_VALUE.match(value):
                raise StoreError(f"partition value {value!r} for {key!r} has characters unsafe in a path")
            folder = folder / f"{key}={value}"
        return folder

    def report_path(self, name: str) -> Path:
        """Where a report named ``name`` (a run id, or a comparison's name) is written by default."""
        return self.root / "reports" / f"{name}.html"

    def files(self, table: str, where: dict[str, str] | None = None) -> list[Path]:
        """The complete Parquet files of a table, or of one partition of it (temporary files excluded)."""
        folder = self.partition_dir(table, where)
        if not folder.exists():
            return []
        return sorted(p for p in folder.rglob("*.parquet") if not p.name.startswith("."))

    # --- tables -----------------------------------------------------------------------------

    def write_table(
        self, table: str, data: pa.Table, partition: dict[str, str] | None = None, part: str = "part-0"
    ) -> Path:
        """Atomically write ``data`` as ``<root>/<table>/<k>=<v>/.../<part>.parquet``."""
        data = conform(data, table)
        folder = self.partition_dir(table, partition)
        folder.mkdir(parents=True, exist_ok=True)
        final = folder / f"{part}.parquet"
        tmp = folder / f".{part}.{uuid.uuid4().hex}.tmp"
        try:
            pq.write_table(data, tmp, compression="zstd")
            os.replace(tmp, final)
        finally:
            tmp.unlink(missing_ok=True)
        return final

    def replace_partition(self, table: str, data: pa.Table, partition: dict[str, str], part: str = "part-0") -> Path:
        """Write ``data`` as the only file of one partition (a rerun's analysis replaces the last one)."""
        final = self.write_table(table, data, partition, part)
        for file in self.files(table, partition):
            if file != final:
                file.unlink()
        return final

    def delete_partition(self, table: str, partition: dict[str, str]) -> None:
        """Remove every file of one partition."""
        for file in self.files(table, partition):
            file.unlink()

    def read_table(self, table: str, where: dict[str, str] | None = None) -> pa.Table:
        """Read a table (or one partition of it) into memory with its declared schema."""
        files = self.files(table, where)
        if not files:
            return schema.SCHEMAS[table].empty_table()
        return pa.concat_tables([conform(pq.read_table(f), table) for f in files])

    # --- run registry -----------------------------------------------------------------------

    def register_run(self, run: dict[str, Any]) -> str:
        """Record a run (idempotent: an existing run keeps its created_at). Returns its run_id."""
        run_id = run["run_id"]
        row = dict(self.get_run(run_id, missing_ok=True) or {})
        row.update({k: v for k, v in run.items() if v is not None})
        for key in ("params", "versions"):
            if isinstance(row.get(key), dict):
                row[key] = json.dumps(row[key], sort_keys=True)
        row.setdefault("created_at", _now())
        row["updated_at"] = _now()
        row.setdefault("status", "created")
        self._write_run(row)
        return run_id

    def _write_run(self, row: dict[str, Any]) -> None:
        names = schema.RUNS.names
        data = pa.Table.from_pylist([{k: row.get(k) for k in names}], schema=schema.RUNS)
        self.write_table("runs", data, {"run_id": row["run_id"]}, part="run")

    def get_run(self, run_id: str, *, missing_ok: bool = False) -> dict | None:
        """One run's registry row as a dict (params and versions still JSON strings)."""
        rows = self.read_table("runs", {"run_id": run_id}).to_pylist()
        if not rows:
            if missing_ok:
                return None
            known = self.list_runs().column("run_id").to_pylist()
            raise StoreError(f"unknown run {run_id!r}; known runs: {known or 'none'}")
        return rows[0]

    def set_run_status(self, run_id: str, status: schema.RunStatus) -> None:
        """Update a run's status."""
        if status not in schema.RUN_STATUSES:
            raise StoreError(f"run status {status!r} is unknown: allowed {', '.join(schema.RUN_STATUSES)}")
        row = self.get_run(run_id)
        row["status"] = status
        row["updated_at"] = _now()
        self._write_run(row)

    def list_runs(self) -> pa.Table:
        """All runs, newest first."""
        runs = self.read_table("runs")
        if runs.num_rows:
            runs = runs.sort_by([("created_at", "descending")])
        return runs

    # --- shards -----------------------------------------------------------------------------

    def write_shard(self, run_id: str, shard: int, samples: pa.Table) -> Path:
        """Write one finished shard of samples; its presence marks the shard done."""
        return self.write_table("samples", samples, {"run_id": run_id}, part=shard_name(shard))

    def finished_shards(self, run_id: str) -> set[int]:
        """Indices of the shards of a run already written (complete by construction)."""
        return {int(p.stem.split("-")[1]) for p in self.files("samples", {"run_id": run_id})}

    # --- SQL --------------------------------------------------------------------------------

    def connect(self) -> duckdb.DuckDBPyConnection:
        """An in-memory DuckDB connection with one view per table over its Parquet files.

        A table with no files yet gets an empty view of its declared schema, so queries on a fresh
        data directory work and return no rows.
        """
        con = duckdb.connect(":memory:")
        try:
            for table, target in schema.SCHEMAS.items():
                if self.files(table):
                    # Partition columns live inside each file: hive partitioning stays off, so a
                    # numeric-looking run id is never re-typed.
                    glob = str(self.root / table / "**" / "*.parquet")
                    con.read_parquet(glob, hive_partitioning=False, union_by_name=True).create_view(table)
                else:
                    con.register(table, target.empty_table())
            for view in DERIVED_VIEWS:
                con.sql(load_sql(view)).create_view(view)
        except duckdb.Error as exc:
            con.close()
            raise StoreError(f"cannot open the tables under {self.root}: {exc}") from exc
        return con

    def query(self, sql: str, params: list | dict | None = None) -> pa.Table:
        """Run one read query over the data directory's views; DuckDB errors become StoreError."""
        con = self.connect()
        try:
            rel = con.sql(sql, params=params or None)
            if rel is None:  # a statement with no result (e.g. SET): nothing to show
                return pa.table({})
            return rel.to_arrow_table()
        except duckdb.Error as exc:
            raise StoreError(str(exc)) from exc
        finally:
            con.close()

    def named_query(self, name: str, params: dict | None = None) -> pa.Table:
        """Run the query ``pipeline/sql/<name>.sql`` with its parameters bound."""
        return self.query(load_sql(name), params)

    def sample_counts(self, run_id: str, answers: bool = True) -> pa.Table:
        """Per-prompt counts of one run's samples (``sql/prompt_counts.sql``), or with ``answers``
        per (prompt, extracted answer) (``sql/answer_histogram.sql``).

        Only the run's own files are read, without the other views: their list is a bound parameter.

        Raises:
            StoreError: the run has no samples.
        """
        files = [str(f) for f in self.files("samples", {"run_id": run_id})]
        if not files:
            raise StoreError(f"run {run_id!r} has no samples under {self.root}")
        con = duckdb.connect(":memory:")
        try:
            query = load_sql("answer_histogram" if answers else "prompt_counts")
            return con.sql(query, params={"files": files}).to_arrow_table()
        except duckdb.Error as exc:
            raise StoreError(f"cannot read the samples of run {run_id!r}: {exc}") from exc
        finally:
            con.close()
