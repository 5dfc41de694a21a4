"""DuckDB over the data directory: one view per table, the sandbox for a user's SQL, named queries
(``sql/<name>.sql``) and queries over a given list of files or over tables in memory."""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from importlib import resources
from typing import TYPE_CHECKING, Any

import duckdb

from pipeline import schema
from pipeline.errors import StoreError
from pipeline.store import files, fs
from pipeline.store.fs import Facade, Location

if TYPE_CHECKING:
    import pyarrow as pa

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
    """The text of ``sql/<name>.sql``."""
    try:
        return resources.files("pipeline.sql").joinpath(f"{name}.sql").read_text()
    except FileNotFoundError as exc:
        known = sorted(p.name[:-4] for p in resources.files("pipeline.sql").iterdir() if p.name.endswith(".sql"))
        raise StoreError(f"no query named {name!r}; known: {known}") from exc


# Words of a query that reads DuckDB's catalogue (SHOW TABLES, information_schema, duckdb_views()
# and every other duckdb_* function): it sees every view.
CATALOGUE_WORDS = frozenset({"show", "describe", "pragma", "information_schema", "pg_catalog"})


def _words(sql: str) -> set[str]:
    return set(re.findall(r"[a-z_][a-z0-9_]*", sql.lower()))


def views_named(sql: str) -> set[str] | None:
    """The views one query can read: those it names (as words: a name inside a string only adds a
    view) and the tables the derived ones among them are built on; None (every view) when it reads
    the catalogue. A query then lists and checks only its own tables' files."""
    words = _words(sql)
    if words & CATALOGUE_WORDS or any(w.startswith("duckdb_") for w in words):
        return None
    known = {*schema.TABLES, *DERIVED_VIEWS}
    named, added = set(), words & known
    while added:  # a derived view may be built on another
        named |= added
        added = {v for view in added & set(DERIVED_VIEWS) for v in _words(load_sql(view)) & known} - named
    return named


# An object replaced between the listing and the read of it (on S3, a run's record that another
# process rewrote: s3fs's FileExpired, "... no longer exists") is read again from a fresh listing.
CHANGED_UNDER_READ = ("FileExpired", "no longer exists")
OPEN_ATTEMPTS = 3


def connect(s: Facade, *, confined: bool = False, views: set[str] | None = None) -> duckdb.DuckDBPyConnection:
    """See ``Store.connect``."""
    for _ in range(OPEN_ATTEMPTS - 1):
        try:
            return _connect(s, confined=confined, views=views)
        except StoreError as exc:
            if not any(w in str(exc) for w in CHANGED_UNDER_READ):
                raise
            log.info("a file changed while the tables were opened; listing them again: %s", exc)
    return _connect(s, confined=confined, views=views)


def _connect(s: Facade, *, confined: bool, views: set[str] | None) -> duckdb.DuckDBPyConnection:
    con = fs.duckdb_connection(s)
    try:
        wanted = [table for table in schema.TABLES if views is None or table in views]
        found = {table: s.files(table) for table in wanted}
        if "samples" in found or "answer_counts" in found:
            # Only the shard files their runs' plans own (and the answer counts written with them):
            # a shard copied under another name is quarantined, never counted twice.
            shards = found["samples"] if "samples" in found else s.files("samples")
            owned, counts = files.owned_files(s, shards, found.get("answer_counts", []), con=con)
            found.update({k: v for k, v in (("samples", owned), ("answer_counts", counts)) if k in found})
        if "problems" in found:
            found["problems"] = files.load_order(s, found["problems"])
        for table in wanted:
            paths = [str(f) for f in found[table]]
            if not paths:
                empty_relation(con, table).create_view(table)
            elif table == "problems":  # one row per prompt: its latest load's
                con.sql(load_sql("problems_latest"), params={"files": paths}).create_view(table)
            else:
                # Partition columns live inside each file: hive partitioning stays off, so a
                # numeric-looking run id is never re-typed.
                con.read_parquet(paths, hive_partitioning=False, union_by_name=True).create_view(table)
        for view in DERIVED_VIEWS:
            if views is None or view in views:
                con.sql(load_sql(view)).create_view(view)
        if confined:
            roots, spill = fs.confinement(s)
            params = {"allowed_directories": roots, "temp_directory": str(spill)}
            for statement in con.extract_statements(load_sql("confine_connection")):
                con.execute(statement.query, {k: params[k] for k in statement.named_parameters})
    except duckdb.Error as exc:
        con.close()
        raise StoreError(f"cannot open the tables under {s.root}: {exc}") from exc
    files.save_verdicts(s)
    return con


def empty_relation(con: duckdb.DuckDBPyConnection, table: str) -> duckdb.DuckDBPyRelation:
    """No rows, with the columns of ``table`` as DuckDB reads them from its files (the view of a
    table with no files yet). Built from the declaration, without pyarrow."""
    columns = [
        duckdb.ConstantExpression(None).cast(con.type(schema.duckdb_type(c.type))).alias(c.name)
        for c in schema.TABLES[table]
    ]
    return con.table_function("range", [0]).select(*columns)  # range(0): no rows


def arrow(rel: duckdb.DuckDBPyRelation | None) -> pa.Table:
    """A relation's rows as an Arrow table (an empty one for a statement with no result, e.g. SET)."""
    if rel is None:
        import pyarrow as pa

        return pa.table({})
    return rel.to_arrow_table()


def query(s: Facade, sql: str, params: list | dict | None = None) -> pa.Table:
    con = s.connect(views=views_named(sql))  # the query's own tables: the others' files are not listed
    try:
        return arrow(con.sql(sql, params=params or None))
    except duckdb.Error as exc:
        raise StoreError(str(exc)) from exc
    finally:
        con.close()


def tables_query(name: str, tables: dict[str, pa.Table], params: dict | None = None) -> pa.Table:
    """See ``Store.tables_query``."""
    con = duckdb.connect(":memory:")
    try:
        for table, data in tables.items():
            con.register(table, data)
        return arrow(con.sql(load_sql(name), params=params or None))
    except duckdb.Error as exc:
        raise StoreError(f"{name}: {exc}") from exc
    finally:
        con.close()


def files_db() -> tuple[duckdb.DuckDBPyConnection, threading.Lock]:
    """One DuckDB connection per store for ``files_query`` (no views, no user SQL), one query
    at a time: a fresh connection per query cost half the floor again at Big-Math scale
    (DuckDB's buffers and allocator start cold), ``bench/analysis.py``."""
    return duckdb.connect(":memory:"), threading.Lock()


def files_query(s: Facade, name: str, found: list[Location], params: dict | None = None) -> pa.Table:
    """See ``Store.files_query``."""
    return _files_result(s, name, found, params, arrow)


def files_rows(
    s: Facade,
    name: str,
    found: list[Location],
    params: dict | None = None,
    con: duckdb.DuckDBPyConnection | None = None,
) -> list[tuple]:
    """See ``Store.files_rows``."""
    return _files_result(s, name, found, params, lambda rel: rel.fetchall(), con)


def _files_result(
    s: Facade,
    name: str,
    found: list[Location],
    params: dict | None,
    fetch: Callable[[duckdb.DuckDBPyRelation], Any],
    con: duckdb.DuckDBPyConnection | None = None,
) -> Any:
    """``sql/<name>.sql`` over ``found`` on ``con``, else the store's own connection."""
    db, lock = s._files_db if con is None else (con, nullcontext())
    with fs.local_paths(s, found) as local, lock:
        try:
            return fetch(db.sql(load_sql(name), params={"files": local, **(params or {})}))
        except duckdb.Error as exc:
            raise StoreError(f"{name}: cannot read {len(found)} files under {s.root}: {exc}") from exc


def split_statements(sql: str) -> list[str]:
    """The statements of a script, each on its own (DuckDB's parser: a ';' inside a string or a
    comment does not split); ``StoreError`` when it does not parse."""
    try:
        return [statement.query for statement in duckdb.extract_statements(sql)]
    except duckdb.Error as exc:
        raise StoreError(f"cannot parse the SQL: {exc}") from exc


def check_statement(
    s: Facade, con: duckdb.DuckDBPyConnection, sql: str, *, write: bool = False, hint: str = ""
) -> None:
    """The sandbox's rule for a user's SQL: exactly one statement and, without ``write``, a SELECT
    or EXPLAIN (``StoreError`` says what was refused; ``hint`` says how to write instead). Parsed on
    the query's own connection: ``duckdb.extract_statements`` would start DuckDB's default database,
    a second instance that costs ``difficulty sql`` 0.04 s."""
    try:
        statements = con.extract_statements(sql)
    except duckdb.Error as exc:
        raise StoreError(f"cannot parse the SQL: {exc}") from exc
    if len(statements) != 1:
        raise StoreError(
            f"refused: sql runs exactly one statement, got {len(statements)}; "
            "run them one at a time (several statements could write where a query only reads)"
        )
    kind = statements[0].type
    if not write and kind not in (duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN):
        raise StoreError(f"refused {kind.name} statement: sql is read-only and runs one SELECT or EXPLAIN{hint}")


@contextmanager
def sandbox_errors(s: Facade) -> Iterator[None]:
    """DuckDB's errors on a confined connection as ``StoreError``, saying why a refusal happened."""
    try:
        yield
    except duckdb.PermissionException as exc:
        raise StoreError(
            f"refused: {exc}; sql may only use the views and files under {s.root} (absolute paths), "
            "and cannot install or load extensions"
        ) from exc
    except duckdb.Error as exc:
        if "configuration has been locked" in str(exc):
            raise StoreError(f"refused: {exc}; sql cannot change DuckDB's settings") from exc
        raise StoreError(str(exc)) from exc


class UserRelation:
    """A DuckDB relation of a user's statement whose errors are ``StoreError`` when it is read too
    (``sandbox_errors``): DuckDB runs a relation only then, so a refused ``sniff_csv('/etc/passwd')``
    fails at ``.fetchall()``, not when the relation is made. Every method of the relation works;
    a relation it returns (``.limit``, ``.filter``, ...) is guarded the same way."""

    __slots__ = ("_relation", "_store")

    def __init__(self, relation: duckdb.DuckDBPyRelation, s: Facade) -> None:
        self._relation = relation
        self._store = s

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._relation, name)
        if not callable(value):
            return value

        def guarded(*args: Any, **kwargs: Any) -> Any:
            args = tuple(a._relation if isinstance(a, UserRelation) else a for a in args)
            with sandbox_errors(self._store):
                out = value(*args, **kwargs)
            return UserRelation(out, self._store) if isinstance(out, duckdb.DuckDBPyRelation) else out

        return guarded

    def __repr__(self) -> str:
        with sandbox_errors(self._store):
            return repr(self._relation)

    def __len__(self) -> int:
        with sandbox_errors(self._store):
            return len(self._relation)


def user_relation(
    s: Facade, con: duckdb.DuckDBPyConnection, sql: str, params: list | dict | None = None
) -> UserRelation:
    """One read-only statement of a user's on a confined connection (``connect(confined=True)``),
    as a DuckDB relation (not run until read: ``.pl()``, ``.arrow()``, ``.fetchall()``), its
    errors ``StoreError`` whenever they happen (``UserRelation``)."""
    check_statement(s, con, sql)
    with sandbox_errors(s):
        relation = con.sql(sql, params=params or None)
    return relation if relation is None else UserRelation(relation, s)


def user_query(s: Facade, sql: str, *, write: bool = False) -> pa.Table:
    """See ``Store.user_query``."""
    return user_result(s, sql, arrow, write=write)


def user_result(
    s: Facade, sql: str, fetch: Callable[[duckdb.DuckDBPyRelation | None], Any], *, write: bool = False
) -> Any:
    """See ``Store.user_result``."""
    con = s.connect(confined=True, views=views_named(sql))
    try:
        check_statement(
            s,
            con,
            sql,
            write=write,
            hint=f"; pass --write to run a writing statement (even then only files under {s.root} can be touched)",
        )
        with sandbox_errors(s):
            return fetch(con.sql(sql))
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
