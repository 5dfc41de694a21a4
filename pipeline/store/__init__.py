"""Storage: a data directory of hive-partitioned Parquet (the source of truth) and DuckDB views.

Layout under the data directory (a local folder or an ``s3://bucket/prefix``)::

    problems/dataset=<name>/load-<digest>.parquet   (one file per distinct load)
    runs/run_id=<id>/run.parquet
    samples/run_id=<id>/shard-00000.parquet
    prompt_stats|weights|summary|allocation/run_id=<id>/part-0.parquet

A file becomes visible only when complete: on a local disk it is written under a hidden temporary
name and renamed into place; on object storage it is one PUT of the finished bytes under its final
key (S3 has no rename, and an object never shows half an upload). So an interrupted write never
leaves half a file and a finished shard is never redone. Partition columns are kept inside the
files too (files are self-describing); DuckDB reads them with ``hive_partitioning=false`` so
numeric-looking partition values are never re-typed.

``Store`` is a facade over four rooms, each plain functions taking the store:

- ``fs``: the filesystem seam (fsspec's local filesystem or ``s3fs``), the one atomic write,
  object-store errors and retries, listings and footer reads;
- ``files``: table layout, writes and reads, file checks, quarantine, ``doctor``, shard files;
- ``registry``: the run registry, run locks and leases;
- ``query``: DuckDB views, the SQL sandbox, named queries and queries over given files.
"""

from __future__ import annotations

import functools
import os
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from pipeline import schema
from pipeline.errors import StoreError
from pipeline.store import files, fs, query, registry
from pipeline.store.files import (
    QUARANTINE_DIR,
    SHARD_DIGEST_KEY,
    TMP_MAX_AGE_S,
    WRITE_ID_KEY,
    FileProblem,
    conform,
    schema_problem,
    shard_name,
)
from pipeline.store.fs import (
    DATA_DIR_ENV,
    DEFAULT_DATA_DIR,
    REMOTE_SCHEMES,
    S3_CLIENT_CONFIG,
    Location,
    disk_full,
    is_remote,
    no_space,
    resolve_data_dir,
    writable_output,
)
from pipeline.store.query import DERIVED_VIEWS, load_sql
from pipeline.store.registry import LEASE_RENEW_S, LEASE_TTL_S, RoundCount, RunRecord

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "DATA_DIR_ENV",
    "DEFAULT_DATA_DIR",
    "DERIVED_VIEWS",
    "LEASE_RENEW_S",
    "LEASE_TTL_S",
    "QUARANTINE_DIR",
    "REMOTE_SCHEMES",
    "RoundCount",
    "RunRecord",
    "S3_CLIENT_CONFIG",
    "SHARD_DIGEST_KEY",
    "TMP_MAX_AGE_S",
    "WRITE_ID_KEY",
    "FileProblem",
    "Location",
    "Store",
    "conform",
    "disk_full",
    "is_remote",
    "no_space",
    "load_sql",
    "resolve_data_dir",
    "schema",
    "schema_problem",
    "shard_name",
    "writable_output",
]


@dataclass(frozen=True)
class Store:
    """A data directory: its layout, atomic writes, the run registry, DuckDB views and every read.

    Everything that touches the files of a data directory goes through one ``Store``: it is the
    filesystem seam. ``root`` is a local folder (a Path) or an object store's URL
    (``s3://bucket/prefix``, read and written through fsspec's ``s3fs``; DuckDB reads it through
    the same filesystem, registered on each connection). Locations it hands out are Paths in a
    local store and full URLs in a remote one. Build one with ``Store.open`` (which resolves the
    default location and checks it is writable) or ``Store(path)``; ``dataclasses.asdict(store)``
    is its serialised form (a Prefect flow parameter, a Ray actor's argument): the root only,
    never a credential.
    """

    root: Location

    def __post_init__(self) -> None:
        root = resolve_data_dir(self.root) if is_remote(str(self.root)) else Path(self.root)
        object.__setattr__(self, "root", root)

    def __reduce__(self):  # pickled as its root: the filesystem (and its session) is rebuilt where it lands
        return (type(self), (self.root,))

    @property
    def remote(self) -> bool:
        return isinstance(self.root, str)

    @functools.cached_property
    def fs(self):
        """The fsspec filesystem of the store: the local one, or an object store's (built on first
        use, from the environment)."""
        return fs.filesystem(self.root)

    @classmethod
    def open(cls, data_dir: str | os.PathLike | None = None, *, create: bool = True) -> Store:
        """The store at ``data_dir`` (flag, then ``$DIFFICULTY_DATA``, then ``./difficulty-data``).

        With ``create`` the location is probed (a folder made, or an object written and removed),
        so a read-only location, a missing bucket, refused credentials or an unreachable endpoint
        fail here, before any work, and leave nothing behind.
        """
        root = resolve_data_dir(data_dir)
        store = cls(root)
        if create and store.remote:
            probe = fs.key(store, store.location(f".write-probe-{uuid.uuid4().hex}"))
            try:
                store.fs.pipe(probe, b"")
                store.fs.rm(probe)
            except Exception as exc:  # botocore's and s3fs's errors share no base class
                raise fs.remote_error(exc, "cannot write to the data directory", root) from exc
        elif create:
            try:
                root.mkdir(parents=True, exist_ok=True)
                probe = root / f".write-probe-{uuid.uuid4().hex}"
                probe.write_bytes(b"")
                probe.unlink()
            except OSError as exc:
                raise StoreError(
                    f"data directory {str(root)!r} is not writable ({exc.strerror or exc}); "
                    f"pass --data-dir or set {DATA_DIR_ENV} to a writable folder"
                ) from exc
        return store

    # --- locations and bytes (fs) -----------------------------------------------------------

    def location(self, *parts: str) -> Location:
        """``root/parts...``: a Path locally, a URL on an object store."""
        return fs.location(self, *parts)

    def as_location(self, text: str | os.PathLike) -> Location:
        """A location of this store's kind from its full name: a Path locally, a URL remotely."""
        return fs.as_location(self, str(text))

    def writer_for(self, loc: str | os.PathLike) -> tuple[Store, Location]:
        """The store that writes ``loc`` (an output named by the user: a report) and ``loc`` as its
        location: this store when ``loc`` is of its kind (an ``s3://`` URL in a remote store, a
        path in a local one), else a store of ``loc``'s own folder, so a local path is never
        taken for a key of the bucket nor a URL for a local file name."""
        remote = is_remote(str(loc))
        if remote == self.remote:
            return self, self.as_location(str(loc))
        if remote:
            return Store(str(loc).rsplit("/", 1)[0]), str(loc)
        return Store(Path(loc).parent), Path(loc)

    def relative(self, loc: Location) -> str:
        """A location's path below the root, with ``/`` separators."""
        return fs.relative(self, loc)

    def exists(self, loc: Location) -> bool:
        return fs.exists(self, loc)

    def read_bytes(self, loc: Location) -> bytes:
        return fs.read_bytes(self, loc)

    def write_bytes(self, loc: Location, data: bytes) -> Location:
        """Write a whole file (a report, a plotly.min.js beside it) atomically: renamed into place on
        a disk, one PUT on an object store (``fs.put``). ``loc`` may be outside the data directory
        in a local store."""
        fs.put(self, loc, data)
        return loc

    # --- layout and tables (files) ----------------------------------------------------------

    def partition_dir(self, table: str, partition: dict[str, str] | None = None) -> Location:
        return files.partition_dir(self, table, partition)

    def report_path(self, name: str) -> Location:
        """Where a report named ``name`` (a run id, or a comparison's name) is written by default."""
        return self.location("reports", f"{name}.html")

    def files(self, table: str, where: dict[str, str] | None = None) -> list[Location]:
        """The complete Parquet files of a table, or of one partition of it (temporary files excluded).

        Each file is checked (``check_file``); a bad one is quarantined with a warning and left out,
        so every reader (``read_table``, ``connect``, ``finished_shards``, ``sample_counts``) sees
        only good files, and a quarantined shard is no longer finished.
        """
        return files.scan(self, table, where)[0]

    def check_file(self, table: str, path: Location) -> str | None:
        """Why ``path`` is not a complete Parquet file of ``table`` (None when it is one).

        Cheap: the name, the folders, then only the footer (``pq.read_metadata``) and its schema,
        never the data; cached per process by (location, size, modification, inode), and a local
        data directory's verdicts saved for the next process (``files.save_verdicts``). A folder between
        the table and the file must be a partition (``<column>=<value>``); in ``samples`` only
        ``shard-NNNNN.parquet`` is a shard.

        Raises:
            FileNotFoundError: the file is gone (another process replaced or moved it).
            StoreError: the file cannot be read for a reason that says nothing about it (permissions,
                too many open files, an unreachable object store): moving it aside would hide good data.
        """
        return files.check_file(self, table, path)

    def footer_value(self, path: Location, key: str) -> str | None:
        """One key of a file's footer metadata (from its check's cache when it was checked)."""
        return fs.footer_value(self, path, key)

    def quarantine(self, path: Location, reason: str) -> FileProblem:
        """Move one file of this store aside (see ``doctor``), saying why."""
        return files.quarantine_file(self, self.relative(path).split("/")[0], path, reason)

    def doctor(self, tmp_max_age_s: float = TMP_MAX_AGE_S, kept: list[str] | None = None) -> list[FileProblem]:
        """Check every table's files, each footer and plan read again whatever the saved verdicts
        say (``files.forget``: a file's stamp misses a rewrite that keeps size, time and inode):
        bad ones are quarantined, and so is every shard file its run's plan does not own
        (``shard_files``, as a rerun checks them); the saved verdicts are replaced by these; temporary leftovers
        older than ``tmp_max_age_s`` (``files.TEMPORARY``: a writer that died before its rename,
        another tool's half-written upload, an interrupted write probe), or on a disk left by a
        process that is gone (``fs.writer_gone``), are removed, on a disk and on an object store;
        those kept (a writer may still be on them) are added to ``kept``. What was found; empty
        when the data directory is clean, so a second call finds nothing."""
        return files.doctor(self, tmp_max_age_s, kept)

    def write_table(
        self,
        table: str,
        data: pa.Table,
        partition: dict[str, str] | None = None,
        part: str = "part-0",
        metadata: dict[str, str] | None = None,
    ) -> Location:
        """Atomically write ``data`` as ``<root>/<table>/<k>=<v>/.../<part>.parquet``
        (``metadata``: key-value pairs for the file's footer)."""
        return files.write_table(self, table, data, partition, part, metadata)

    def replace_partition(
        self, table: str, data: pa.Table, partition: dict[str, str], part: str = "part-0"
    ) -> Location:
        """Write ``data`` as the only file of one partition (a rerun's analysis replaces the last one)."""
        return files.replace_partition(self, table, data, partition, part)

    def delete_partition(self, table: str, partition: dict[str, str]) -> None:
        """Remove every file of one partition."""
        files.delete_partition(self, table, partition)

    def read_table(self, table: str, where: dict[str, str] | None = None) -> pa.Table:
        """Read a table (or one partition of it) into memory with its declared schema
        (``problems``: one row per prompt, its latest load's; see ``add_problems``)."""
        return files.read_table(self, table, where)

    def add_problems(self, problems: pa.Table, dataset: str) -> Location | None:
        """Store one load of a dataset's problems as a file of its own (``problems/dataset=<name>/
        load-<digest>.parquet``, the load's time in its footer): it adds problems and updates those
        loaded again (the latest load wins), and never drops one that another load (and a run)
        still uses, however many loads run at once. None for an empty load (nothing written)."""
        return files.add_problems(self, problems, dataset)

    # --- shards (files) ---------------------------------------------------------------------

    def shard_location(self, run_id: str, shard: int) -> Location:
        return files.shard_location(self, run_id, shard)

    def write_shard(
        self,
        run_id: str,
        shard: int,
        samples: pa.Table,
        digest: str | None = None,
        answer_counts: pa.Table | None = None,
    ) -> Location:
        """Write one finished shard of samples, with its plan's ``digest`` in the footer, then its
        (prompt, extracted answer) counts (``answer_counts``, computed by the caller with
        ``analyze.answer_counts``), which the analysis reads instead of the samples. Both footers
        carry one new write id: counts left by an earlier write of the shard (a kill between the two
        files) never match it, and the analysis then reads the samples. Without ``answer_counts``
        no counts file is written, and the analysis reads the samples of the run."""
        return files.write_shard(self, run_id, shard, samples, digest, answer_counts)

    def read_shard(self, run_id: str, shard: int, columns: list[str] | None = None) -> pa.Table:
        """One shard file of a run (only ``columns``, when given)."""
        return files.read_shard(self, run_id, shard, columns)

    def shard_digest(self, run_id: str, shard: int) -> str | None:
        """The plan digest in one shard file's footer (None: no such file, a bad one, or no digest)."""
        return files.shard_digest(self, run_id, shard)

    def shard_digests(self, run_id: str) -> dict[int, tuple[Location, str | None]]:
        """Every shard file of a run: its location and the plan digest in its footer."""
        return files.shard_digests(self, run_id)

    def finished_shards(self, run_id: str) -> set[int]:
        """Indices of the shards of a run that are written and hold what the run's plan says."""
        return set(self.shard_files(run_id))

    def shard_files(self, run_id: str) -> dict[int, Location]:
        """The run's shard files whose footer digest is their shard's in the stored plan (a file
        that is not its plan's is quarantined; a run with no stored plan keeps all its files)."""
        return files.shard_files(self, run_id)

    # --- run registry (registry) ------------------------------------------------------------

    def register_run(self, run: RunRecord) -> str:
        """Record a run (idempotent: an existing run keeps its created_at, and every field the
        record leaves None keeps its stored value). Returns its run_id."""
        return registry.register_run(self, run)

    def get_run(self, run_id: str, *, missing_ok: bool = False) -> RunRecord | None:
        """One run's registry row, decoded (``RunRecordError`` when a field cannot be)."""
        return registry.get_run(self, run_id, missing_ok=missing_ok)

    def update_run(self, run_id: str, **changes: Any) -> RunRecord:
        """Change fields of a registered run (``RunRecord``'s names); returns the record written."""
        return registry.update_run(self, run_id, **changes)

    def set_run_status(self, run_id: str, status: schema.RunStatus) -> RunRecord:
        """Update a run's status; returns the record written."""
        return registry.set_run_status(self, run_id, status)

    def list_runs(self) -> pa.Table:
        """All runs, newest first; a ``sampling`` run that no process holds shows as ``interrupted``."""
        return registry.list_runs(self)

    @contextmanager
    def lock_run(self, run_id: str) -> Iterator[None]:
        """Hold a run's lock while a process works on it.

        Locally a ``flock`` (released by the kernel if the process dies). On an object store, which
        has no locks, a lease object renewed every ``LEASE_RENEW_S`` by a thread: a lease not
        renewed for ``LEASE_TTL_S``, or whose holder is a dead process of this machine, is taken
        over. (Two drivers starting the same run within one PUT of each other are not told apart.)

        Raises:
            StoreError: another process holds it (the same run is being profiled twice).
        """
        with registry.lock_run(self, run_id):
            yield

    def run_is_live(self, run_id: str) -> bool:
        """Whether a process holds the run's lock (or a fresh lease, on an object store) now."""
        return registry.run_is_live(self, run_id)

    # --- SQL (query) ------------------------------------------------------------------------

    def connect(
        self, *, confined: bool = False, views: set[str] | None = None, unordered: bool = False
    ) -> duckdb.DuckDBPyConnection:
        """An in-memory DuckDB connection with one view per table over its Parquet files.

        A table with no files yet gets an empty view of its declared schema, so queries on a fresh
        data directory work and return no rows. A view lists the table's checked files (``files``),
        not a glob, so a bad file is quarantined before the view exists and never read.

        ``confined`` (for a user's SQL): after the views exist, ``sql/confine_connection.sql``
        limits every file access to the data directory, turns off extension loading and locks
        the configuration.

        ``views``: only these views (``query.views_named`` of one query: the files of the other
        tables are then not even listed); None, every view.

        ``unordered``: rows without an ORDER BY may come in any order (DuckDB's
        ``preserve_insertion_order`` off), so a result written to a file streams instead of
        being buffered to keep the files' order (``sql --output``).
        """
        return query.connect(self, confined=confined, views=views, unordered=unordered)

    def query(self, sql: str, params: list | dict | None = None) -> pa.Table:
        """Run one read query over the data directory's views; DuckDB errors become StoreError."""
        return query.query(self, sql, params)

    def files_rows(
        self, name: str, files: list[Location], params: dict | None = None, con: duckdb.DuckDBPyConnection | None = None
    ) -> list[tuple]:
        """``files_query``'s rows as tuples (no Arrow table), on ``con`` when given (a connection
        being opened, whose database it shares), else on the store's own connection."""
        return query.files_rows(self, name, files, params, con)

    def files_query(self, name: str, files: list[Location], params: dict | None = None) -> pa.Table:
        """Run ``sql/<name>.sql`` over just ``files`` (bound as ``$files``), without the
        other tables' views (no listing of the whole data directory).

        On an object store the files are first copied, concurrently, to a temporary local folder
        (removed after): DuckDB reading through the Python filesystem is one blocking request at a
        time, 6 to 14 times slower than the copy plus a native read (``bench/storage.py``).
        """
        return query.files_query(self, name, files, params)

    @functools.cached_property
    def _files_db(self) -> tuple[duckdb.DuckDBPyConnection, threading.Lock]:
        """One DuckDB connection per store for ``files_query``, one query at a time."""
        return query.files_db()

    def user_query(self, sql: str, *, write: bool = False, timeout_s: float | None = None) -> pa.Table:
        """Run a user's SQL (``difficulty sql``): exactly one statement, on a connection confined to
        the data directory (``connect(confined=True)``: no file, URL or extension outside it, no
        SET); without ``write`` only a SELECT (or EXPLAIN), so nothing can be written at all. It
        stops on SIGINT (``KeyboardInterrupt``) or after ``timeout_s`` seconds (``StoreError``).

        ``query`` stays for the pipeline's own named queries, which need none of this.

        Raises:
            StoreError: what was refused and why, or DuckDB's error.
        """
        return query.user_query(self, sql, write=write, timeout_s=timeout_s)

    def user_result(
        self,
        sql: str,
        fetch: Callable[[duckdb.DuckDBPyRelation | None], Any],
        *,
        write: bool = False,
        timeout_s: float | None = None,
        unordered: bool = False,
    ) -> Any:
        """``user_query``'s statement, its result read by ``fetch`` (given the DuckDB relation, None
        for a statement with no result) while the connection is open: ``difficulty sql`` prints
        DuckDB's rows without building an Arrow table, or writes them with DuckDB's own writers
        (``unordered``: see ``connect``)."""
        return query.user_result(self, sql, fetch, write=write, timeout_s=timeout_s, unordered=unordered)

    def named_query(self, name: str, params: dict | None = None) -> pa.Table:
        """Run the query ``sql/<name>.sql`` with its parameters bound."""
        return self.query(load_sql(name), params)

    @staticmethod
    def tables_query(name: str, tables: dict[str, pa.Table], params: dict | None = None) -> pa.Table:
        """Run ``sql/<name>.sql`` over tables in memory, each under its name (the views it
        reads), instead of the stored ones: what a finished run computed, not read back."""
        return query.tables_query(name, tables, params)

    def sample_counts(self, run_id: str, answers: bool = True) -> pa.Table:
        """Per-prompt counts of one run's samples (``sql/prompt_counts.sql``), or with ``answers``
        per (prompt, extracted answer): from the shards' stored answer counts when every shard has
        its own (``sql/answer_histogram_stored.sql``), else from the samples
        (``sql/answer_histogram.sql``).

        Only the run's own files are read, without the other views: their list is a bound parameter.

        Raises:
            StoreError: the run has no samples.
        """
        return query.sample_counts(self, run_id, answers)
