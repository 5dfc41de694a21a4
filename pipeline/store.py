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

import fcntl
import json
import logging
import os
import re
import socket
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
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

# --- file checks and quarantine ---------------------------------------------------------------
# A file under a table's folder is read only if it is a complete Parquet file of that table: a
# footer that parses and a schema that conforms (no unknown column, every required one present,
# types castable). Anything else (a truncated shard, a stray copy, another program's output) is
# moved to <root>/quarantine/<UTC time>/<its relative path>, never deleted, so one bad file cannot
# break every query and a quarantined shard is sampled again by the next run.

QUARANTINE_DIR = "quarantine"
TMP_MAX_AGE_S = 3600  # a write's temporary file older than this was left by a dead writer
_SHARD_FILE = re.compile(r"^shard-(\d{5,})\.parquet$")  # shard_name(); more digits past 99999
_TMP_FILE = re.compile(r"^\..+\.[0-9a-f]{32}\.tmp$")  # write_table's temporary names
_PARTITION = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.+)$")
# Per process: (path, size, mtime_ns) -> None for a good file, else why it is bad. A file changed
# in place gets a new key, so it is checked again; an unchanged one costs one stat.
_CHECKED: dict[tuple[str, int, int], str | None] = {}
_CHECKED_MAX = 500_000


def _castable(src: pa.DataType, dst: pa.DataType) -> bool:
    """Whether a stored column type reads as the declared one without changing what it means:
    dictionary encoding aside, the same type or one of the same family (integers to integers or
    floats, floats, strings, timestamps, lists of castable items)."""
    src = src.value_type if pa.types.is_dictionary(src) else src
    dst = dst.value_type if pa.types.is_dictionary(dst) else dst
    if src == dst or pa.types.is_null(src):
        return True
    t = pa.types
    if t.is_integer(src):
        return t.is_integer(dst) or t.is_floating(dst)
    strings = (t.is_string, t.is_large_string, t.is_string_view)
    lists = (t.is_list, t.is_large_list, t.is_fixed_size_list, t.is_list_view, t.is_large_list_view)
    for family in (strings, lists, (t.is_floating,), (t.is_timestamp,)):
        if any(f(src) for f in family) and any(f(dst) for f in family):
            return family is not lists or _castable(src.value_type, dst.value_type)
    return False


def schema_problem(stored: pa.Schema, table: str) -> str | None:
    """Why a file's schema cannot be read as ``table`` (what ``conform`` would refuse), or None."""
    target = schema.SCHEMAS[table]
    names = stored.names
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated:
        return f"duplicated columns {duplicated}"
    unknown = [n for n in names if n not in target.names]
    if unknown:
        return f"unknown columns {unknown} (table {table!r} has {target.names})"
    missing = [f.name for f in target if not f.nullable and f.name not in names]
    if missing:
        return f"missing required columns {missing}"
    wrong = [
        f"{f.name} is {stored.field(f.name).type}, not {f.type}"
        for f in target
        if f.name in names and not _castable(stored.field(f.name).type, f.type)
    ]
    return f"column types do not match: {'; '.join(wrong)}" if wrong else None


@dataclass(frozen=True)
class FileProblem:
    """A file found bad (or a temporary leftover) and what was done with it; paths relative to the root."""

    file: str
    table: str
    reason: str
    action: str


SHARD_DIGEST_KEY = "difficulty.shard_digest"  # footer key: the plan digest of a shard file


def _footer_digest(path: Path) -> str | None:
    meta = pq.read_metadata(path).metadata or {}
    value = meta.get(SHARD_DIGEST_KEY.encode())
    return value.decode() if value else None


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
        """The complete Parquet files of a table, or of one partition of it (temporary files excluded).

        Each file is checked (``check_file``); a bad one is quarantined with a warning and left out,
        so every reader (``read_table``, ``connect``, ``finished_shards``, ``sample_counts``) sees
        only good files, and a quarantined shard is no longer finished.
        """
        return self._scan(table, where)[0]

    def _scan(self, table: str, where: dict[str, str] | None = None) -> tuple[list[Path], list[FileProblem]]:
        """The good files of a table (or partition), and the bad ones found and quarantined."""
        folder = self.partition_dir(table, where)
        if not folder.exists():
            return [], []
        good, bad = [], []
        for path in sorted(p for p in folder.rglob("*.parquet") if not p.name.startswith(".")):
            try:
                reason = self.check_file(table, path)
            except FileNotFoundError:
                log.info("%s disappeared while it was checked (replaced or moved by another process)", path)
                continue
            if reason is None:
                good.append(path)
            else:
                bad.append(self._quarantine(table, path, reason))
        return good, bad

    def check_file(self, table: str, path: Path) -> str | None:
        """Why ``path`` is not a complete Parquet file of ``table`` (None when it is one).

        Cheap: the name, the folders, then only the footer (``pq.read_metadata``) and its schema,
        never the data; cached per process by (path, size, mtime_ns). A folder between the table
        and the file must be a partition (``<column>=<value>``); in ``samples`` only
        ``shard-NNNNN.parquet`` is a shard.

        Raises:
            FileNotFoundError: the file is gone (another process replaced or moved it).
            StoreError: the file cannot be read for a reason that says nothing about it (permissions,
                too many open files): moving it aside would hide good data.
        """
        st = path.stat()
        key = (str(path), st.st_size, st.st_mtime_ns)
        if key in _CHECKED:
            return _CHECKED[key]
        reason = self._file_problem(table, path)
        if len(_CHECKED) >= _CHECKED_MAX:
            _CHECKED.clear()
        _CHECKED[key] = reason
        return reason

    def _file_problem(self, table: str, path: Path) -> str | None:
        if path.is_dir():
            return "a folder named like a Parquet file"
        for part in path.relative_to(self.root / table).parts[:-1]:
            match = _PARTITION.match(part)
            if not match or match[1] not in schema.SCHEMAS[table].names or not _SAFE_VALUE.match(match[2]):
                return f"folder {part!r} is not a partition folder (<column>=<value>) of table {table!r}"
        if table == "samples" and not _SHARD_FILE.match(path.name):
            return "not a shard's name (shard-NNNNN.parquet)"
        try:
            stored = pq.read_metadata(path).schema.to_arrow_schema()
        except pa.ArrowInvalid as exc:
            return f"not a complete Parquet file: {exc}"
        except OSError as exc:
            if exc.errno is not None:  # the file system's error, not the file's content
                if isinstance(exc, FileNotFoundError):
                    raise
                raise StoreError(f"cannot read {path}: {exc.strerror or exc}") from exc
            return f"not a complete Parquet file: {exc}"  # e.g. a footer that does not deserialize
        return schema_problem(stored, table)

    def _quarantine(self, table: str, path: Path, reason: str) -> FileProblem:
        """Move a bad file to ``<root>/quarantine/<UTC time>/<relative path>`` (never deleted) and
        append a line to ``quarantine/log.jsonl``; a file that cannot be moved is only left out."""
        rel = path.relative_to(self.root)
        dest = self.root / QUARANTINE_DIR / _now().strftime("%Y%m%dT%H%M%SZ") / rel
        if dest.exists():
            dest = dest.with_name(f"{dest.name}.{uuid.uuid4().hex[:8]}")
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.rename(path, dest)
        except FileNotFoundError:
            log.info("%s (%s) was moved by another process first", rel, reason)
            return FileProblem(str(rel), table, reason, "already moved by another process")
        except OSError as exc:
            log.warning("skipping %s: %s; it cannot be moved to quarantine (%s)", path, reason, exc.strerror or exc)
            return FileProblem(str(rel), table, reason, f"left in place and skipped: {exc.strerror or exc}")
        moved = str(dest.relative_to(self.root))
        log.warning("quarantined %s: %s; moved to %s", path, reason, dest)
        entry = {"at": _now().isoformat(), "file": str(rel), "table": table, "reason": reason, "moved_to": moved}
        try:
            with open(self.root / QUARANTINE_DIR / "log.jsonl", "a", encoding="utf-8") as fh:
                fh.write(json.dumps(entry) + "\n")
        except OSError as exc:
            log.warning("cannot append to %s: %s", self.root / QUARANTINE_DIR / "log.jsonl", exc)
        return FileProblem(str(rel), table, reason, f"moved to {moved}")

    def doctor(self, tmp_max_age_s: float = TMP_MAX_AGE_S) -> list[FileProblem]:
        """Check every table's files: bad ones are quarantined, temporary files older than
        ``tmp_max_age_s`` (left by a writer that died before its rename) removed. What was found;
        empty when the data directory is clean, so a second call finds nothing."""
        found: list[FileProblem] = []
        now = time.time()
        for table in schema.SCHEMAS:
            found += self._scan(table)[1]
            folder = self.root / table
            for tmp in sorted(folder.rglob(".*.tmp")) if folder.exists() else []:
                try:
                    age = now - tmp.stat().st_mtime
                    if not _TMP_FILE.match(tmp.name) or not tmp.is_file() or age < tmp_max_age_s:
                        continue
                    tmp.unlink()
                except FileNotFoundError:  # renamed into place or removed meanwhile: not a leftover
                    log.info("%s was renamed or removed while the data directory was checked", tmp)
                    continue
                reason = f"temporary file of an interrupted write, {age / 3600:.1f} h old"
                found.append(FileProblem(str(tmp.relative_to(self.root)), table, reason, "removed"))
        return found

    # --- tables -----------------------------------------------------------------------------

    def write_table(
        self,
        table: str,
        data: pa.Table,
        partition: dict[str, str] | None = None,
        part: str = "part-0",
        metadata: dict[str, str] | None = None,
    ) -> Path:
        """Atomically write ``data`` as ``<root>/<table>/<k>=<v>/.../<part>.parquet``
        (``metadata``: key-value pairs for the file's footer)."""
        data = conform(data, table)
        if metadata:
            data = data.replace_schema_metadata(metadata)
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
        """All runs, newest first; a ``sampling`` run that no process holds shows as ``interrupted``."""
        runs = self.read_table("runs")
        if runs.num_rows:
            runs = runs.sort_by([("created_at", "descending")])
            status = [
                schema.RUN_INTERRUPTED if s == "sampling" and not self.run_is_live(r) else s
                for r, s in zip(runs.column("run_id").to_pylist(), runs.column("status").to_pylist(), strict=True)
            ]
            runs = runs.set_column(runs.schema.get_field_index("status"), "status", pa.array(status, pa.string()))
        return runs

    def _lock_path(self, run_id: str) -> Path:
        return self.partition_dir("runs", {"run_id": run_id}) / ".lock"

    @contextmanager
    def lock_run(self, run_id: str) -> Iterator[None]:
        """Hold a run's lock while a process works on it (released by the kernel if it dies).

        Raises:
            StoreError: another process holds it (the same run is being profiled twice).
        """
        path = self._lock_path(run_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a+") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                fh.seek(0)
                holder = fh.read().strip() or "another process"
                raise StoreError(f"run {run_id} is being worked on by {holder}; wait for it or stop it") from None
            fh.seek(0)
            fh.truncate()
            fh.write(f"pid {os.getpid()} on {socket.gethostname()}")
            fh.flush()
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def run_is_live(self, run_id: str) -> bool:
        """Whether a process holds the run's lock now."""
        path = self._lock_path(run_id)
        if not path.exists():
            return False
        with open(path) as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(fh, fcntl.LOCK_UN)
            return False

    # --- shards -----------------------------------------------------------------------------

    def write_shard(self, run_id: str, shard: int, samples: pa.Table, digest: str | None = None) -> Path:
        """Write one finished shard of samples, with its plan's ``digest`` in the footer."""
        metadata = {SHARD_DIGEST_KEY: digest} if digest else None
        return self.write_table("samples", samples, {"run_id": run_id}, part=shard_name(shard), metadata=metadata)

    def read_shard(self, run_id: str, shard: int, columns: list[str] | None = None) -> pa.Table:
        """One shard file of a run (only ``columns``, when given)."""
        path = self.shard_files(run_id).get(shard)
        if path is None:
            raise StoreError(f"run {run_id} has no shard {shard}")
        return pq.read_table(path, columns=columns)

    def shard_digest(self, run_id: str, shard: int) -> str | None:
        """The plan digest in one shard file's footer (None: no such file, a bad one, or no digest)."""
        path = self.partition_dir("samples", {"run_id": run_id}) / f"{shard_name(shard)}.parquet"
        try:
            reason = self.check_file("samples", path)  # this file only: run_shard asks once per shard
        except FileNotFoundError:
            return None
        if reason is not None:
            self._quarantine("samples", path, reason)
            return None
        return _footer_digest(path)

    def shard_digests(self, run_id: str) -> dict[int, tuple[Path, str | None]]:
        """Every shard file of a run: its path and the plan digest in its footer."""
        out = {}
        for path in self.files("samples", {"run_id": run_id}):
            match = _SHARD_FILE.match(path.name)
            if match:
                out[int(match[1])] = (path, _footer_digest(path))
        return out

    def quarantine(self, path: Path, reason: str) -> FileProblem:
        """Move one file of this store aside (see ``doctor``), saying why."""
        return self._quarantine(Path(path).relative_to(self.root).parts[0], Path(path), reason)

    def finished_shards(self, run_id: str) -> set[int]:
        """Indices of the shards of a run that are written and hold what the run's plan says."""
        return set(self.shard_files(run_id))

    def shard_files(self, run_id: str) -> dict[int, Path]:
        """The run's shard files whose footer digest is their shard's in the stored plan.

        A file that is not its plan's (a copy under another shard's name, a leftover of another
        plan, a file of a version that wrote no digest) is moved to quarantine, so every reader
        (resume, analysis, report) counts each (prompt, sample index) once. A run with no stored
        plan (imported before plans existed) keeps all its shard files.
        """
        plan = self.read_table("plans", {"run_id": run_id})
        planned = dict(zip(plan.column("shard").to_pylist(), plan.column("digest").to_pylist(), strict=True))
        out = {}
        for shard, (path, digest) in self.shard_digests(run_id).items():
            if not planned or planned.get(shard) == digest:
                out[shard] = path
            else:
                why = "no shard of that number" if shard not in planned else "another content"
                self.quarantine(path, f"shard {shard} is not what run {run_id}'s plan says ({why})")
        return out

    # --- SQL --------------------------------------------------------------------------------

    def connect(self, *, confined: bool = False) -> duckdb.DuckDBPyConnection:
        """An in-memory DuckDB connection with one view per table over its Parquet files.

        A table with no files yet gets an empty view of its declared schema, so queries on a fresh
        data directory work and return no rows. A view lists the table's checked files (``files``),
        not a glob, so a bad file is quarantined before the view exists and never read.

        ``confined`` (for a user's SQL): after the views exist, ``sql/confine_connection.sql``
        limits every file access to the data directory, turns off extension loading and locks
        the configuration.
        """
        con = duckdb.connect(":memory:")
        try:
            for table, target in schema.SCHEMAS.items():
                files = self.files(table)
                if files:
                    # Partition columns live inside each file: hive partitioning stays off, so a
                    # numeric-looking run id is never re-typed.
                    paths = [str(f) for f in files]
                    con.read_parquet(paths, hive_partitioning=False, union_by_name=True).create_view(table)
                else:
                    con.register(table, target.empty_table())
            for view in DERIVED_VIEWS:
                con.sql(load_sql(view)).create_view(view)
            if confined:
                roots = sorted({str(self.root.absolute()), str(self.root.resolve())})
                params = {"allowed_directories": roots, "temp_directory": str(self.root.resolve() / ".duckdb-tmp")}
                for statement in duckdb.extract_statements(load_sql("confine_connection")):
                    con.execute(statement.query, {k: params[k] for k in statement.named_parameters})
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

    def user_query(self, sql: str, *, write: bool = False) -> pa.Table:
        """Run a user's SQL (``difficulty sql``): exactly one statement, on a connection confined to
        the data directory (``connect(confined=True)``: no file, URL or extension outside it, no
        SET); without ``write`` only a SELECT (or EXPLAIN), so nothing can be written at all.

        ``query`` stays for the pipeline's own named queries, which need none of this.

        Raises:
            StoreError: what was refused and why, or DuckDB's error.
        """
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
                f"--write to run a writing statement (even then only files under {self.root} can be touched)"
            )
        con = self.connect(confined=True)
        try:
            rel = con.sql(sql)
            return pa.table({}) if rel is None else rel.to_arrow_table()
        except duckdb.PermissionException as exc:
            raise StoreError(
                f"refused: {exc}; sql may only use the views and files under {self.root} (absolute paths), "
                "and cannot install or load extensions"
            ) from exc
        except duckdb.Error as exc:
            if "configuration has been locked" in str(exc):
                raise StoreError(f"refused: {exc}; sql cannot change DuckDB's settings") from exc
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
        files = [str(f) for _, f in sorted(self.shard_files(run_id).items())]
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
