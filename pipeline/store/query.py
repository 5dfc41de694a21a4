"""DuckDB over the data directory: one view per table, the sandbox for a user's SQL, named queries
(``pipeline/sql/<name>.sql``) and queries over a given list of files."""

from __future__ import annotations

import logging
import threading
from importlib import resources

import duckdb
import pyarrow as pa

from pipeline import schema
from pipeline.errors import StoreError
from pipeline.store import files, fs
from pipeline.store.fs import Facade, Location

log = logging.getLogger("pipeline.store")

# SQL views over the base tables, defined in sql/ (created after the tables' own views).
DERIVED_VIEWS = (
    "history_drift",
    "history_silent",
    "history_zero_signal",
    "history_checkpoints",
    "observation_steps",
)


def load_sql(name: str) -> str:
    """The text of ``pipeline/sql/<name>.sql``."""
    try:
        return resources.files("pipeline.sql").joinpath(f"{name}.sql").read_text()
    except FileNotFoundError as exc:
        known = sorted(p.name[:-4] for p in resources.files("pipeline.sql").iterdir() if p.name.endswith(".sql"))
        raise StoreError(f"no query named {name!r}; known: {known}") from exc


def connect(s: Facade, *, confined: bool = False) -> duckdb.DuckDBPyConnection:
    """See ``Store.connect``."""
    con = fs.duckdb_connection(s)
    try:
        found = {table: s.files(table) for table in schema.SCHEMAS}
        # Only the shard files their runs' plans own (and the answer counts written with them):
        # a shard copied under another name is quarantined, never counted twice.
        found["samples"], found["answer_counts"] = files.owned_files(s, found["samples"], found["answer_counts"])
        found["problems"] = files.load_order(s, found["problems"])
        for table, target in schema.SCHEMAS.items():
            paths = [str(f) for f in found[table]]
            if not paths:
                con.register(table, target.empty_table())
            elif table == "problems":  # one row per prompt: its latest load's
                con.sql(load_sql("problems_latest"), params={"files": paths}).create_view(table)
            else:
                # Partition columns live inside each file: hive partitioning stays off, so a
                # numeric-looking run id is never re-typed.
                con.read_parquet(paths, hive_partitioning=False, union_by_name=True).create_view(table)
        for view in DERIVED_VIEWS:
            con.sql(load_sql(view)).create_view(view)
        if confined:
            roots, spill = fs.confinement(s)
            params = {"allowed_directories": roots, "temp_directory": str(spill)}
            for statement in duckdb.extract_statements(load_sql("confine_connection")):
                con.execute(statement.query, {k: params[k] for k in statement.named_parameters})
    except duckdb.Error as exc:
        con.close()
        raise StoreError(f"cannot open the tables under {s.root}: {exc}") from exc
    return con


def query(s: Facade, sql: str, params: list | dict | None = None) -> pa.Table:
    con = s.connect()
    try:
        rel = con.sql(sql, params=params or None)
        if rel is None:  # a statement with no result (e.g. SET): nothing to show
            return pa.table({})
        return rel.to_arrow_table()
    except duckdb.Error as exc:
        raise StoreError(str(exc)) from exc
    finally:
        con.close()


def files_db() -> tuple[duckdb.DuckDBPyConnection, threading.Lock]:
    """One DuckDB connection per store for ``files_query`` (no views, no user SQL), one query
    at a time: a fresh connection per query cost half the floor again at Big-Math scale
    (DuckDB's buffers and allocator start cold), ``bench/analysis.py``."""
    return duckdb.connect(":memory:"), threading.Lock()


def files_query(s: Facade, name: str, found: list[Location], params: dict | None = None) -> pa.Table:
    """See ``Store.files_query``."""
    con, lock = s._files_db
    with fs.local_paths(s, found) as local, lock:
        try:
            return con.sql(load_sql(name), params={"files": local, **(params or {})}).to_arrow_table()
        except duckdb.Error as exc:
            raise StoreError(f"{name}: cannot read {len(found)} files under {s.root}: {exc}") from exc


def user_query(s: Facade, sql: str, *, write: bool = False) -> pa.Table:
    """See ``Store.user_query``."""
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise StoreError(f"cannot parse the SQL: {exc}") from exc
    if len(statements) != 1:
        raise StoreError(
            f"refused: sql runs exactly one statement, got {len(statements)}; "
            "run them one at a time (several statements could write where a query only reads)"
        )
    kind = statements[0].type
    if not write and kind not in (duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN):
        raise StoreError(
            f"refused {kind.name} statement: sql is read-only and runs one SELECT or EXPLAIN; pass "
            f"--write to run a writing statement (even then only files under {s.root} can be touched)"
        )
    con = s.connect(confined=True)
    try:
        rel = con.sql(sql)
        return pa.table({}) if rel is None else rel.to_arrow_table()
    except duckdb.PermissionException as exc:
        raise StoreError(
            f"refused: {exc}; sql may only use the views and files under {s.root} (absolute paths), "
            "and cannot install or load extensions"
        ) from exc
    except duckdb.Error as exc:
        if "configuration has been locked" in str(exc):
            raise StoreError(f"refused: {exc}; sql cannot change DuckDB's settings") from exc
        raise StoreError(str(exc)) from exc
    finally:
        con.close()


def sample_counts(s: Facade, run_id: str, answers: bool = True) -> pa.Table:
    """See ``Store.sample_counts``."""
    shards = s.shard_files(run_id)
    if not shards:
        raise StoreError(f"run {run_id!r} has no samples under {s.root}")
    found = [f for _, f in sorted(shards.items())]
    try:
        stored = files.stored_answer_counts(s, run_id, shards) if answers else None
        if stored is not None:  # the shards' own counts: one row per distinct answer, not per sample
            return s.files_query("answer_histogram_stored", stored)
        return s.files_query("answer_histogram" if answers else "prompt_counts", found)
    except StoreError as exc:
        raise StoreError(f"cannot read the samples of run {run_id!r}: {exc}") from exc
