"""DuckDB over the data directory: one view per table, the sandbox for a user's SQL, named queries
(``sql/<name>.sql``) and queries over a given list of files or over tables in memory."""

from __future__ import annotations

import logging
import os
import re
import select
import shutil
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from pipeline import schema
from pipeline.checks import check_number
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


def connect(
    s: Facade, *, confined: bool = False, views: set[str] | None = None, unordered: bool = False
) -> duckdb.DuckDBPyConnection:
    """See ``Store.connect``."""
    for _ in range(OPEN_ATTEMPTS - 1):
        try:
            return _connect(s, confined=confined, views=views, unordered=unordered)
        except StoreError as exc:
            if not any(w in str(exc) for w in CHANGED_UNDER_READ):
                raise
            log.info("a file changed while the tables were opened; listing them again: %s", exc)
    return _connect(s, confined=confined, views=views, unordered=unordered)


def _connect(s: Facade, *, confined: bool, views: set[str] | None, unordered: bool) -> duckdb.DuckDBPyConnection:
    con = fs.duckdb_connection(s)
    try:
        if unordered:  # before the configuration is locked
            con.execute("SET preserve_insertion_order = false")
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


WATCH_S = 0.05  # how often the watcher looks at the clock of a time limit


def check_timeout(timeout_s: float | None) -> float | None:
    """A query's time limit in seconds (None: none), checked: more than 0."""
    return None if timeout_s is None else check_number("--timeout", timeout_s, 0, unit="seconds", lo_open=True)


@contextmanager
def interruptible(con: duckdb.DuckDBPyConnection, timeout_s: float | None = None) -> Iterator[None]:
    """Stop the statement ``con`` runs in the block on SIGINT (Ctrl-C, a notebook's interrupt) or
    after ``timeout_s`` seconds, with DuckDB's ``interrupt()``.

    Python runs a signal's handler only once DuckDB hands back the main thread, so a long query
    would never see it: a thread waits on the signal's wakeup file descriptor (written by Python's
    C handler the moment the signal arrives) and interrupts the connection. Meanwhile SIGINT's
    handler only notes it; once the connection and the handler are as they were, a SIGINT seen is
    ``KeyboardInterrupt`` and a time limit passed a ``StoreError`` naming it. SIGINT is watched from
    the main thread only (the one Python delivers signals to)."""
    stop = threading.Event()
    why: list[str] = []
    wake = _Wakeup.start()

    def watch() -> None:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not stop.is_set():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                why.append("timeout")
                con.interrupt()
                return
            if wake is None:
                stop.wait(WATCH_S if left is None else min(left, WATCH_S))
            elif wake.signalled(None if left is None else min(left, WATCH_S)) and not stop.is_set():
                why.append("interrupt")
                con.interrupt()
                return

    watcher = None
    if wake is not None or timeout_s is not None:
        watcher = threading.Thread(target=watch, name="query-interrupt", daemon=True)
        watcher.start()
    stopped = None
    try:
        yield
    except duckdb.InterruptException as exc:
        stopped = exc
    finally:
        stop.set()
        if wake is not None:
            wake.poke()
        if watcher is not None:
            watcher.join()
        seen = wake.close() if wake is not None else False
    if seen or (stopped is not None and "interrupt" in why):
        raise KeyboardInterrupt from stopped
    if stopped is not None:
        if "timeout" in why:
            raise StoreError(
                f"the query ran past its time limit of {timeout_s:g} s (--timeout) and was stopped"
            ) from stopped
        raise stopped


class _Wakeup:
    """SIGINT made visible to a thread while the main thread is inside DuckDB: a socket pair whose
    write end is Python's signal wakeup file descriptor, and a handler that only notes the signal."""

    def __init__(self, reader: socket.socket, writer: socket.socket, previous: int, handler: Any) -> None:
        self.reader, self.writer, self.previous, self.handler = reader, writer, previous, handler
        self.seen = False

    @classmethod
    def start(cls) -> _Wakeup | None:
        """None off the main thread, or when SIGINT has no Python handler (ignored, default)."""
        handler = signal.getsignal(signal.SIGINT)
        if threading.current_thread() is not threading.main_thread() or not callable(handler):
            return None
        reader, writer = socket.socketpair()
        reader.setblocking(False)
        writer.setblocking(False)
        try:
            previous = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        except ValueError:
            reader.close()
            writer.close()
            return None
        wake = cls(reader, writer, previous, handler)
        signal.signal(signal.SIGINT, wake._note)
        return wake

    def _note(self, signum: int, frame: Any) -> None:
        self.seen = True

    def signalled(self, wait_s: float | None) -> bool:
        """Whether SIGINT arrived within ``wait_s`` seconds (None: until something arrives)."""
        if not select.select([self.reader], [], [], wait_s)[0]:
            return False
        try:
            got = self.reader.recv(64)
        except BlockingIOError:
            return False
        if self.previous >= 0:  # whoever listened before (an asyncio loop) still hears of it
            try:
                os.write(self.previous, got)
            except OSError:
                pass
        return bytes([signal.SIGINT]) in got

    def poke(self) -> None:
        """Wake the waiting thread: no signal is numbered 0."""
        try:
            self.writer.send(b"\0")
        except OSError:
            pass

    def close(self) -> bool:
        """Put SIGINT's handler and the wakeup descriptor back; whether SIGINT was seen meanwhile."""
        signal.signal(signal.SIGINT, self.handler)
        signal.set_wakeup_fd(self.previous)
        self.reader.close()
        self.writer.close()
        return self.seen


class UserRelation:
    """A DuckDB relation of a user's statement whose errors are ``StoreError`` when it is read too
    (``sandbox_errors``): DuckDB runs a relation only then, so a refused ``sniff_csv('/etc/passwd')``
    fails at ``.fetchall()``, not when the relation is made. Every method of the relation works;
    a relation it returns (``.limit``, ``.filter``, ...) is guarded the same way. Each read stops on
    SIGINT or after ``timeout_s`` (``interruptible``)."""

    __slots__ = ("_con", "_relation", "_store", "_timeout_s")

    def __init__(
        self,
        relation: duckdb.DuckDBPyRelation,
        s: Facade,
        con: duckdb.DuckDBPyConnection,
        timeout_s: float | None = None,
    ) -> None:
        self._relation = relation
        self._store = s
        self._con = con
        self._timeout_s = timeout_s

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._relation, name)
        if not callable(value):
            return value

        def guarded(*args: Any, **kwargs: Any) -> Any:
            args = tuple(a._relation if isinstance(a, UserRelation) else a for a in args)
            with sandbox_errors(self._store), interruptible(self._con, self._timeout_s):
                out = value(*args, **kwargs)
            if isinstance(out, duckdb.DuckDBPyRelation):
                return UserRelation(out, self._store, self._con, self._timeout_s)
            return out

        return guarded

    def __repr__(self) -> str:
        with sandbox_errors(self._store), interruptible(self._con, self._timeout_s):
            return repr(self._relation)

    def __len__(self) -> int:
        with sandbox_errors(self._store), interruptible(self._con, self._timeout_s):
            return len(self._relation)


def user_relation(
    s: Facade,
    con: duckdb.DuckDBPyConnection,
    sql: str,
    params: list | dict | None = None,
    timeout_s: float | None = None,
) -> UserRelation:
    """One read-only statement of a user's on a confined connection (``connect(confined=True)``),
    as a DuckDB relation (not run until read: ``.pl()``, ``.arrow()``, ``.fetchall()``), its
    errors ``StoreError`` whenever they happen (``UserRelation``), each read stopped on SIGINT or
    after ``timeout_s`` seconds."""
    check_statement(s, con, sql)
    with sandbox_errors(s), interruptible(con, timeout_s):
        relation = con.sql(sql, params=params or None)
    return relation if relation is None else UserRelation(relation, s, con, timeout_s)


def user_query(s: Facade, sql: str, *, write: bool = False, timeout_s: float | None = None) -> pa.Table:
    """See ``Store.user_query``."""
    return user_result(s, sql, arrow, write=write, timeout_s=timeout_s)


def user_result(
    s: Facade,
    sql: str,
    fetch: Callable[[duckdb.DuckDBPyRelation | None], Any],
    *,
    write: bool = False,
    timeout_s: float | None = None,
    unordered: bool = False,
) -> Any:
    """See ``Store.user_result``."""
    timeout_s = check_timeout(timeout_s)
    con = s.connect(confined=True, views=views_named(sql), unordered=unordered)
    try:
        check_statement(
            s,
            con,
            sql,
            write=write,
            hint=f"; pass --write to run a writing statement (even then only files under {s.root} can be touched)",
        )
        with sandbox_errors(s), interruptible(con, timeout_s):
            return fetch(con.sql(sql))
    finally:
        con.close()


# ``difficulty sql --output``'s formats DuckDB writes itself, and how (COPY's options).
WRITTEN_FORMATS = ("csv", "json", "parquet")
_COPY_OPTIONS = {"csv": "FORMAT csv, HEADER true", "json": "FORMAT json, ARRAY true", "parquet": "FORMAT parquet"}


def write_result(s: Facade, rel: duckdb.DuckDBPyRelation | None, fmt: str, output: str | os.PathLike) -> bool:
    """A user's query result written to the local file ``output`` by DuckDB (``COPY ... TO``),
    streamed: no table is held in Python. False (nothing written) for a statement with no result.

    A confined connection may write only inside the data directory and its spill folder, so the
    file is written in the spill folder under a temporary name (``doctor`` removes one a killed
    command left) and moved onto ``output`` (``fs.replacing``: renamed, or copied across disks).
    On a connection opened ``unordered`` DuckDB streams the rows instead of buffering them to keep
    the files' order (an ORDER BY is kept)."""
    if rel is None:
        return False
    spill = Path(rel.query("_result", "select current_setting('temp_directory')").fetchall()[0][0])
    spill.mkdir(parents=True, exist_ok=True)
    tmp = fs.temporary(spill / Path(output).name)
    try:
        target = str(tmp).replace("'", "''")
        rel.query("_result", f"COPY _result TO '{target}' ({_COPY_OPTIONS[fmt]})")
        with fs.replacing(output) as out:
            shutil.move(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return True


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
