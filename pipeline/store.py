"""Storage: a data directory of hive-partitioned Parquet (the source of truth) and DuckDB views.

Layout under the data directory (a local folder or an ``s3://bucket/prefix``)::

    problems/dataset=<name>/part-0.parquet
    runs/run_id=<id>/run.parquet
    samples/run_id=<id>/shard-00000.parquet
    prompt_stats|weights|summary|allocation/run_id=<id>/part-0.parquet

A file becomes visible only when complete: on a local disk it is written under a hidden temporary
name and renamed into place; on object storage it is one PUT of the finished bytes under its final
key (S3 has no rename, and an object never shows half an upload). So an interrupted write never
leaves half a file and a finished shard is never redone. Partition columns are kept inside the
files too (files are self-describing); DuckDB reads them with ``hive_partitioning=false`` so
numeric-looking partition values are never re-typed.
"""

from __future__ import annotations

import fcntl
import functools
import json
import logging
import os
import re
import socket
import stat
import tempfile
import threading
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
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline import schema
from pipeline.errors import MissingDependencyError, StoreError

log = logging.getLogger(__name__)

DATA_DIR_ENV = "DIFFICULTY_DATA"
DEFAULT_DATA_DIR = "difficulty-data"
_SAFE_VALUE = re.compile(r"^[A-Za-z0-9._:+-]+$")
REMOTE_SCHEMES = ("s3",)  # object stores the data directory may live on (through fsspec)

# A location: a Path in a local data directory, a full URL (s3://bucket/key) in a remote one.
Location = Path | str


def is_remote(data_dir: str | os.PathLike) -> bool:
    """Whether ``data_dir`` names an object store (``s3://...``) rather than a local folder."""
    return isinstance(data_dir, str) and "://" in data_dir and not data_dir.startswith("file://")


def resolve_data_dir(data_dir: str | os.PathLike | None = None) -> Location:
    """The data directory: the flag, then ``$DIFFICULTY_DATA``, then ``./difficulty-data``; a local
    one as an absolute Path, a remote one as its URL without a trailing slash."""
    raw = data_dir if data_dir is not None else os.environ.get(DATA_DIR_ENV, DEFAULT_DATA_DIR)
    if is_remote(raw):
        scheme, _, rest = str(raw).partition("://")
        if scheme.lower() not in REMOTE_SCHEMES:
            raise StoreError(
                f"data directory {raw!r}: scheme {scheme!r} is not supported; use a local folder or "
                f"{' or '.join(s + '://bucket/prefix' for s in REMOTE_SCHEMES)}"
            )
        bucket = rest.strip("/").split("/", 1)[0]
        if len(bucket) < 3:
            raise StoreError(f"data directory {raw!r}: {bucket!r} is not a bucket name (3 to 63 characters)")
        return f"{scheme.lower()}://{rest.strip('/')}"
    if isinstance(raw, str) and raw.startswith("file://"):
        raw = raw[len("file://") :]
    return Path(raw).expanduser().resolve()


# Object-store requests: short connect timeout and few retries, so an unreachable endpoint or a
# refused credential fails in seconds with a named error instead of retrying for minutes.
S3_CLIENT_CONFIG = {"connect_timeout": 5, "read_timeout": 60, "retries": {"max_attempts": 3, "mode": "standard"}}


def _remote_filesystem(scheme: str):
    """fsspec's filesystem for an object store. Credentials, region and endpoint come from the
    standard AWS environment variables and config files (``AWS_ACCESS_KEY_ID``,
    ``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``, ``~/.aws/...``), never from an argument: no
    secret is ever part of a Store, a flow parameter or a table."""
    try:
        import s3fs
    except ImportError as exc:
        raise MissingDependencyError(
            "an s3:// data directory needs s3fs; install it with: pip install 'difficulty-pipeline[s3]'"
        ) from exc
    # No listing cache: another process (a Ray actor) may write a shard at any time.
    return s3fs.S3FileSystem(config_kwargs=S3_CLIENT_CONFIG, use_listings_cache=False, skip_instance_cache=True)


def _remote_error(exc: BaseException, what: str, root: str) -> StoreError:
    """An object store's failure as a StoreError that names the cause a user can fix."""
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, FileNotFoundError) and "bucket" in str(exc).lower():
        bucket = root.split("://", 1)[1].split("/", 1)[0]
        return StoreError(f"{what}: bucket {bucket!r} does not exist ({root}); create it or fix --data-dir")
    if isinstance(exc, PermissionError) or any(
        k in text for k in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "Forbidden", "credentials")
    ):
        return StoreError(
            f"{what}: the object store refused the credentials for {root} ({exc}); check AWS_ACCESS_KEY_ID, "
            "AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) and the bucket's policy"
        )
    if any(k in text for k in ("EndpointConnectionError", "ConnectTimeout", "Could not connect", "ConnectionError")):
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or "the default AWS"
        return StoreError(
            f"{what}: cannot reach the object store at {endpoint} endpoint ({exc}); check AWS_ENDPOINT_URL"
        )
    return StoreError(f"{what} on {root}: {text}")


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
# Per process: (location, size, mtime_ns or ETag) -> None for a good file, else why it is bad. A
# file changed in place gets a new key, so it is checked again; an unchanged one costs one stat
# (locally) or nothing past the listing (on an object store).
_CHECKED: dict[tuple, str | None] = {}
_CHECKED_MAX = 500_000
# The footer key-values of the files checked (same keys), and each location's latest key: a
# shard's plan digest is then read once per process, with its check.
_FOOTERS: dict[tuple, dict[bytes, bytes]] = {}
_LATEST: dict[str, tuple] = {}
# An object's last bytes fetched to read its footer in one ranged GET (a shard's footer is a few KB).
_FOOTER_TAIL = 1 << 16


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
WRITE_ID_KEY = "difficulty.write_id"  # footer key: one shard write, shared by its answer counts file
LEASE_TTL_S = 90.0  # a remote run lease not renewed for this long was left by a dead process
LEASE_RENEW_S = 20.0


def _now() -> datetime:
    return datetime.now(UTC)


def _parquet_bytes(data: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(data, sink, compression="zstd")
    return sink.getvalue().to_pybytes()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return pid > 0


def _answer_counts(run_id: str, shard: int, samples: pa.Table) -> pa.Table:
    """A shard's ``answer_counts`` rows: per (prompt, extracted answer, null included) its samples
    and how many were graded correct (a null grade counts as not correct, as in the SQL)."""
    ok = pc.cast(pc.fill_null(samples.column("correct"), False), pa.int64())
    keyed = pa.table({"prompt_id": samples.column("prompt_id"), "extracted_answer": samples.column("extracted_answer")})
    grouped = keyed.append_column("ok", ok).group_by(["prompt_id", "extracted_answer"], use_threads=False)
    table = grouped.aggregate([([], "count_all"), ("ok", "sum")])
    rows = table.num_rows
    return pa.table(
        {
            "run_id": pa.array([run_id] * rows, pa.string()),
            "shard": pa.array(np.full(rows, shard, np.int32)),
            "prompt_id": table.column("prompt_id"),
            "extracted_answer": table.column("extracted_answer"),
            "cnt": table.column("count_all"),
            "cc": pc.fill_null(table.column("ok_sum"), 0),
        }
    )


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
        """The fsspec filesystem of a remote store (built on first use, from the environment)."""
        if not self.remote:
            raise StoreError(f"{self.root} is a local folder: it has no object-store filesystem")
        return _remote_filesystem(self.root.split("://", 1)[0])

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
            probe = store._key(f".write-probe-{uuid.uuid4().hex}")
            try:
                store.fs.pipe(probe, b"")
                store.fs.rm(probe)
            except Exception as exc:  # botocore's and s3fs's errors share no base class
                raise _remote_error(exc, "cannot write to the data directory", root) from exc
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

    # --- the filesystem seam: every byte read or written goes through these -------------------

    def location(self, *parts: str) -> Location:
        """``root/parts...``: a Path locally, a URL on an object store."""
        if self.remote:
            return "/".join([self.root, *parts]) if parts else self.root
        return self.root.joinpath(*parts)

    def _child(self, loc: Location, *names: str) -> Location:
        return "/".join([str(loc), *names]) if self.remote else Path(loc).joinpath(*names)

    def relative(self, loc: Location) -> str:
        """A location's path below the root, with ``/`` separators."""
        if self.remote:
            return str(loc)[len(self.root) + 1 :]
        return Path(loc).relative_to(self.root).as_posix()

    def _key(self, loc_or_rel: Location) -> str:
        """fsspec's name of a remote location (no scheme): ``bucket/prefix/...``."""
        text = str(loc_or_rel)
        if "://" not in text:
            text = f"{self.root}/{text}"
        return text.split("://", 1)[1]

    def _call(self, what: str, fn, *args, **kwargs):
        """Run an object-store call; its failure becomes a StoreError naming the cause."""
        try:
            return fn(*args, **kwargs)
        except FileNotFoundError as exc:
            if "bucket" in str(exc).lower():
                raise _remote_error(exc, what, self.root) from exc
            raise
        except Exception as exc:
            raise _remote_error(exc, what, self.root) from exc

    def _list(self, folder: Location, suffix: str) -> list[tuple[Location, tuple]]:
        """Files under ``folder`` (recursively) whose name ends in ``suffix`` and is not hidden,
        sorted, each with a key that changes when the file does (size and modification)."""
        out = []
        if self.remote:
            found = self._call("cannot list the data directory", self.fs.find, self._key(folder), detail=True)
            for key, info in found.items():
                name = key.rsplit("/", 1)[-1]
                if info.get("type") == "file" and name.endswith(suffix) and not name.startswith("."):
                    stamp = (info.get("size"), str(info.get("ETag") or info.get("LastModified")))
                    out.append((f"{self.root.split('://')[0]}://{key}", stamp))
            return sorted(out)
        folder = Path(folder)
        if not folder.exists():
            return []
        for path in sorted(p for p in folder.rglob(f"*{suffix}") if not p.name.startswith(".")):
            try:
                st = path.stat()
            except FileNotFoundError:
                log.info("%s disappeared while it was listed (replaced or moved by another process)", path)
                continue
            out.append((path, (st.st_size, st.st_mtime_ns, stat.S_ISDIR(st.st_mode))))
        return out

    def exists(self, loc: Location) -> bool:
        if self.remote:
            return bool(self._call("cannot read the data directory", self.fs.exists, self._key(loc)))
        return Path(loc).exists()

    def _put(self, loc: Location, data: bytes | pa.Table) -> None:
        """Make ``loc`` hold ``data`` (bytes, or a table as Parquet), all at once: a reader sees the
        old file, or the new one whole."""
        if self.remote:
            # One PUT of finished bytes: S3 shows an object only when its upload is complete.
            body = _parquet_bytes(data) if isinstance(data, pa.Table) else data
            self._call(f"cannot write {self.relative(loc)}", self.fs.pipe, self._key(loc), body)
            return
        loc = Path(loc)
        loc.parent.mkdir(parents=True, exist_ok=True)
        tmp = loc.parent / f".{loc.stem}.{uuid.uuid4().hex}.tmp"
        try:
            if isinstance(data, pa.Table):  # streamed to the file: no second copy of a big table in memory
                pq.write_table(data, tmp, compression="zstd")
            else:
                tmp.write_bytes(data)
            os.replace(tmp, loc)
        finally:
            tmp.unlink(missing_ok=True)

    def read_bytes(self, loc: Location) -> bytes:
        if self.remote:
            return self._call(f"cannot read {self.relative(loc)}", self.fs.cat_file, self._key(loc))
        return Path(loc).read_bytes()

    def write_bytes(self, loc: Location, data: bytes) -> Location:
        """Write a whole file (a report, a plotly.min.js beside it) under the data directory."""
        self._put(loc, data)
        return loc

    def _unlink(self, loc: Location) -> None:
        if self.remote:
            self._call(f"cannot remove {self.relative(loc)}", self.fs.rm, self._key(loc))
        else:
            Path(loc).unlink()

    def _move(self, src: Location, dst: Location) -> None:
        """Move a file (a rename on a disk; a copy then delete on an object store)."""
        if self.remote:
            self._call(f"cannot move {self.relative(src)}", self.fs.mv, self._key(src), self._key(dst))
            return
        Path(dst).parent.mkdir(parents=True, exist_ok=True)
        os.rename(src, dst)

    def _metadata(self, loc: Location) -> pq.FileMetaData:
        if self.remote:
            with self.fs.open(self._key(loc), "rb") as fh:
                return pq.read_metadata(fh)
        return pq.read_metadata(loc)

    def _read_parquet(self, loc: Location, columns: list[str] | None = None) -> pa.Table:
        if self.remote:
            return self._call(
                f"cannot read {self.relative(loc)}", pq.read_table, self._key(loc), columns=columns, filesystem=self.fs
            )
        return pq.read_table(loc, columns=columns)

    def _footer_digest(self, loc: Location) -> str | None:
        return self._footer_value(loc, SHARD_DIGEST_KEY)

    def _footer_value(self, loc: Location, name: str) -> str | None:
        """One key of a file's footer metadata (from the check's cache when the file was checked)."""
        key = _LATEST.get(str(loc))
        meta = _FOOTERS.get(key) if key is not None else None
        if meta is None:
            meta = self._metadata(loc).metadata or {}
        value = meta.get(name.encode())
        return value.decode() if value else None

    def _tails(self, listed: list[tuple[Location, tuple]]) -> dict[str, pq.FileMetaData]:
        """The footers of remote files, their last bytes fetched concurrently (one ranged GET each).
        A file whose footer is not within the fetched bytes, or is not a footer, is left out: the
        one-by-one check then reads (or refuses) it."""
        if not self.remote:
            return {}
        todo = [(loc, stamp[0]) for loc, stamp in listed if (str(loc), *stamp) not in _CHECKED and stamp[0]]
        if not todo:
            return {}
        keys = [self._key(loc) for loc, _ in todo]
        starts = [max(0, size - _FOOTER_TAIL) for _, size in todo]
        ends = [size for _, size in todo]
        tails = self._call("cannot read the data directory", self.fs.cat_ranges, keys, starts, ends, on_error="return")
        out = {}
        for (loc, _), start, tail in zip(todo, starts, tails, strict=True):
            if not isinstance(tail, bytes) or len(tail) < 12 or tail[-4:] != b"PAR1":
                continue
            if int.from_bytes(tail[-8:-4], "little") + 8 > len(tail) and start > 0:
                continue
            try:
                out[str(loc)] = pq.read_metadata(pa.BufferReader(tail))
            except (pa.ArrowException, OSError):
                continue
        return out

    def _duckdb(self) -> duckdb.DuckDBPyConnection:
        """An in-memory DuckDB connection that can read this store's files (``s3://`` URLs through
        the registered fsspec filesystem: DuckDB 2.0's httpfs cannot be installed offline)."""
        con = duckdb.connect(":memory:")
        if self.remote:
            con.register_filesystem(self.fs)
        return con

    # --- layout -----------------------------------------------------------------------------

    def partition_dir(self, table: str, partition: dict[str, str] | None = None) -> Location:
        parts = [table]
        for key, value in (partition or {}).items():
            value = str(value)
            if not _SAFE_VALUE.match(value):
                raise StoreError(f"partition value {value!r} for {key!r} has characters unsafe in a path")
            parts.append(f"{key}={value}")
        return self.location(*parts)

    def report_path(self, name: str) -> Location:
        """Where a report named ``name`` (a run id, or a comparison's name) is written by default."""
        return self.location("reports", f"{name}.html")

    def files(self, table: str, where: dict[str, str] | None = None) -> list[Location]:
        """The complete Parquet files of a table, or of one partition of it (temporary files excluded).

        Each file is checked (``check_file``); a bad one is quarantined with a warning and left out,
        so every reader (``read_table``, ``connect``, ``finished_shards``, ``sample_counts``) sees
        only good files, and a quarantined shard is no longer finished.
        """
        return self._scan(table, where)[0]

    def _scan(self, table: str, where: dict[str, str] | None = None) -> tuple[list[Location], list[FileProblem]]:
        """The good files of a table (or partition), and the bad ones found and quarantined."""
        good, bad = [], []
        listed = self._list(self.partition_dir(table, where), ".parquet")
        footers = self._tails(listed)
        for loc, stamp in listed:
            try:
                reason = self._check(table, loc, stamp, footers.get(str(loc)))
            except FileNotFoundError:
                log.info("%s disappeared while it was checked (replaced or moved by another process)", loc)
                continue
            if reason is None:
                good.append(loc)
            else:
                bad.append(self._quarantine(table, loc, reason))
        return good, bad

    def check_file(self, table: str, path: Location) -> str | None:
        """Why ``path`` is not a complete Parquet file of ``table`` (None when it is one).

        Cheap: the name, the folders, then only the footer (``pq.read_metadata``) and its schema,
        never the data; cached per process by (location, size, modification). A folder between
        the table and the file must be a partition (``<column>=<value>``); in ``samples`` only
        ``shard-NNNNN.parquet`` is a shard.

        Raises:
            FileNotFoundError: the file is gone (another process replaced or moved it).
            StoreError: the file cannot be read for a reason that says nothing about it (permissions,
                too many open files, an unreachable object store): moving it aside would hide good data.
        """
        if self.remote:
            info = self._call("cannot read the data directory", self.fs.info, self._key(path))
            return self._check(table, path, (info.get("size"), str(info.get("ETag") or info.get("LastModified"))))
        st = Path(path).stat()
        return self._check(table, Path(path), (st.st_size, st.st_mtime_ns, stat.S_ISDIR(st.st_mode)))

    def _check(self, table: str, loc: Location, stamp: tuple, meta: pq.FileMetaData | None = None) -> str | None:
        key = (str(loc), *stamp)
        if key in _CHECKED:
            _LATEST[str(loc)] = key
            return _CHECKED[key]
        found: list[pq.FileMetaData] = [meta] if meta is not None else []
        reason = self._file_problem(table, loc, found)
        if len(_CHECKED) >= _CHECKED_MAX:
            _CHECKED.clear()
            _FOOTERS.clear()
            _LATEST.clear()
        _CHECKED[key] = reason
        if reason is None and found:
            _FOOTERS[key] = found[0].metadata or {}
            _LATEST[str(loc)] = key
        return reason

    def _file_problem(self, table: str, loc: Location, found: list[pq.FileMetaData]) -> str | None:
        """Why ``loc`` is bad, or None; the footer read (or given, in ``found``) is left in ``found``."""
        if not self.remote and Path(loc).is_dir():
            return "a folder named like a Parquet file"
        parts = self.relative(loc).split("/")
        for part in parts[1:-1]:
            match = _PARTITION.match(part)
            if not match or match[1] not in schema.SCHEMAS[table].names or not _SAFE_VALUE.match(match[2]):
                return f"folder {part!r} is not a partition folder (<column>=<value>) of table {table!r}"
        if table == "samples" and not _SHARD_FILE.match(parts[-1]):
            return "not a shard's name (shard-NNNNN.parquet)"
        try:
            if not found:
                found.append(self._metadata(loc))
            stored = found[0].schema.to_arrow_schema()
        except pa.ArrowInvalid as exc:
            return f"not a complete Parquet file: {exc}"
        except OSError as exc:
            if exc.errno is not None:  # the file system's error, not the file's content
                if isinstance(exc, FileNotFoundError):
                    raise
                raise StoreError(f"cannot read {loc}: {exc.strerror or exc}") from exc
            if self.remote and not isinstance(exc, pa.ArrowException):
                raise _remote_error(exc, f"cannot read {self.relative(loc)}", self.root) from exc
            return f"not a complete Parquet file: {exc}"  # e.g. a footer that does not deserialize
        except Exception as exc:
            if self.remote:  # botocore's errors: the store's fault, never the file's
                raise _remote_error(exc, f"cannot read {self.relative(loc)}", self.root) from exc
            raise
        return schema_problem(stored, table)

    def _quarantine(self, table: str, path: Location, reason: str) -> FileProblem:
        """Move a bad file to ``<root>/quarantine/<UTC time>/<relative path>`` (never deleted) and
        append a line to ``quarantine/log.jsonl``; a file that cannot be moved is only left out."""
        rel = self.relative(path)
        dest = self.location(QUARANTINE_DIR, _now().strftime("%Y%m%dT%H%M%SZ"), *rel.split("/"))
        if self.exists(dest):
            dest = (
                f"{dest}.{uuid.uuid4().hex[:8]}"
                if self.remote
                else dest.with_name(f"{dest.name}.{uuid.uuid4().hex[:8]}")
            )
        try:
            self._move(path, dest)
        except FileNotFoundError:
            log.info("%s (%s) was moved by another process first", rel, reason)
            return FileProblem(rel, table, reason, "already moved by another process")
        except (OSError, StoreError) as exc:
            why = getattr(exc, "strerror", None) or exc
            log.warning("skipping %s: %s; it cannot be moved to quarantine (%s)", path, reason, why)
            return FileProblem(rel, table, reason, f"left in place and skipped: {why}")
        moved = self.relative(dest)
        log.warning("quarantined %s: %s; moved to %s", path, reason, dest)
        entry = {"at": _now().isoformat(), "file": rel, "table": table, "reason": reason, "moved_to": moved}
        log_loc = self.location(QUARANTINE_DIR, "log.jsonl")
        try:
            if self.remote:  # no append on an object store: rewrite (quarantining is rare)
                old = self.read_bytes(log_loc) if self.exists(log_loc) else b""
                self._put(log_loc, old + (json.dumps(entry) + "\n").encode())
            else:
                with open(log_loc, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps(entry) + "\n")
        except (OSError, StoreError) as exc:
            log.warning("cannot append to %s: %s", log_loc, exc)
        return FileProblem(rel, table, reason, f"moved to {moved}")

    def doctor(self, tmp_max_age_s: float = TMP_MAX_AGE_S) -> list[FileProblem]:
        """Check every table's files: bad ones are quarantined, temporary files older than
        ``tmp_max_age_s`` (left by a writer that died before its rename) removed. What was found;
        empty when the data directory is clean, so a second call finds nothing. (An object store
        has no temporary files: a write is one PUT.)"""
        found: list[FileProblem] = []
        now = time.time()
        for table in schema.SCHEMAS:
            found += self._scan(table)[1]
            folder = self.location(table)
            if self.remote or not folder.exists():
                continue
            for tmp in sorted(folder.rglob(".*.tmp")):
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
    ) -> Location:
        """Atomically write ``data`` as ``<root>/<table>/<k>=<v>/.../<part>.parquet``
        (``metadata``: key-value pairs for the file's footer)."""
        data = conform(data, table)
        if metadata:
            data = data.replace_schema_metadata(metadata)
        final = self._child(self.partition_dir(table, partition), f"{part}.parquet")
        self._put(final, data)
        return final

    def replace_partition(
        self, table: str, data: pa.Table, partition: dict[str, str], part: str = "part-0"
    ) -> Location:
        """Write ``data`` as the only file of one partition (a rerun's analysis replaces the last one)."""
        final = self.write_table(table, data, partition, part)
        for file in self.files(table, partition):
            if str(file) != str(final):
                self._unlink(file)
        return final

    def delete_partition(self, table: str, partition: dict[str, str]) -> None:
        """Remove every file of one partition."""
        for file in self.files(table, partition):
            self._unlink(file)

    def read_table(self, table: str, where: dict[str, str] | None = None) -> pa.Table:
        """Read a table (or one partition of it) into memory with its declared schema."""
        files = self.files(table, where)
        if not files:
            return schema.SCHEMAS[table].empty_table()
        return pa.concat_tables([conform(self._read_parquet(f), table) for f in files])

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

    def _lock_path(self, run_id: str) -> Location:
        return self._child(self.partition_dir("runs", {"run_id": run_id}), ".lock")

    @contextmanager
    def lock_run(self, run_id: str) -> Iterator[None]:
        """Hold a run's lock while a process works on it.

        Locally a ``flock`` (released by the kernel if the process dies). On an object store, which
        has no locks, a lease object renewed every ``LEASE_RENEW_S`` by a thread: a lease not
        renewed for ``LEASE_TTL_S``, or whose holder is a dead process of this machine, is taken
        over. (Two drivers
        starting the same run within one PUT of each other are not told apart.)

        Raises:
            StoreError: another process holds it (the same run is being profiled twice).
        """
        if self.remote:
            with self._lease(run_id):
                yield
            return
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

    def _read_lease(self, run_id: str) -> dict | None:
        loc = self._lock_path(run_id)
        try:
            lease = json.loads(self.read_bytes(loc))
        except (FileNotFoundError, ValueError):
            return None
        if lease.get("host") == socket.gethostname() and not _pid_alive(int(lease.get("pid", 0))):
            return None  # its holder died on this machine: no need to wait for the lease to age
        return lease if time.time() - float(lease.get("renewed", 0)) < LEASE_TTL_S else None

    @contextmanager
    def _lease(self, run_id: str) -> Iterator[None]:
        held = self._read_lease(run_id)
        me = f"pid {os.getpid()} on {socket.gethostname()}"
        token = uuid.uuid4().hex
        if held is not None:
            raise StoreError(f"run {run_id} is being worked on by {held.get('holder')}; wait for it or stop it")
        loc = self._lock_path(run_id)

        def renew() -> None:
            lease = {"holder": me, "host": socket.gethostname(), "pid": os.getpid(), "token": token}
            self._put(loc, json.dumps({**lease, "renewed": time.time()}).encode())

        renew()
        stop = threading.Event()

        def keep() -> None:
            while not stop.wait(LEASE_RENEW_S):
                try:
                    renew()
                except StoreError as exc:
                    log.warning("cannot renew the lease of run %s: %s", run_id, exc)

        thread = threading.Thread(target=keep, name=f"lease-{run_id}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
            lease = self._read_lease(run_id)
            if lease is not None and lease.get("token") == token:
                self._unlink(loc)

    def run_is_live(self, run_id: str) -> bool:
        """Whether a process holds the run's lock (or a fresh lease, on an object store) now."""
        if self.remote:
            return self._read_lease(run_id) is not None
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

    def shard_location(self, run_id: str, shard: int) -> Location:
        return self._child(self.partition_dir("samples", {"run_id": run_id}), f"{shard_name(shard)}.parquet")

    def write_shard(self, run_id: str, shard: int, samples: pa.Table, digest: str | None = None) -> Location:
        """Write one finished shard of samples, with its plan's ``digest`` in the footer, then its
        (prompt, extracted answer) counts (``answer_counts``), which the analysis reads instead of
        the samples. Both footers carry one new write id: counts left by an earlier write of the
        shard (a kill between the two files) never match it, and the analysis then reads the samples."""
        samples = conform(samples, "samples")
        write_id = uuid.uuid4().hex
        metadata = {WRITE_ID_KEY: write_id, **({SHARD_DIGEST_KEY: digest} if digest else {})}
        where = {"run_id": run_id}
        path = self.write_table("samples", samples, where, part=shard_name(shard), metadata=metadata)
        counts = _answer_counts(run_id, shard, samples)
        self.write_table("answer_counts", counts, where, part=shard_name(shard), metadata={WRITE_ID_KEY: write_id})
        return path

    def _stored_answer_counts(self, run_id: str, shards: dict[int, Location]) -> list[Location] | None:
        """The answer counts files of every one of ``shards``, each written with its shard (the same
        write id); None when any shard lacks them (a run written before they existed, a kill between
        the two writes), and the samples are read instead."""
        counts = {}
        for loc in self.files("answer_counts", {"run_id": run_id}):
            match = _SHARD_FILE.match(str(loc).rsplit("/", 1)[-1])
            if match:
                counts[int(match[1])] = loc
        out = []
        for shard, loc in sorted(shards.items()):
            stored = counts.get(shard)
            write_id = self._footer_value(loc, WRITE_ID_KEY)
            if stored is None or write_id is None or self._footer_value(stored, WRITE_ID_KEY) != write_id:
                log.info("run %s shard %d has no answer counts of its own; reading the samples", run_id, shard)
                return None
            out.append(stored)
        return out

    def read_shard(self, run_id: str, shard: int, columns: list[str] | None = None) -> pa.Table:
        """One shard file of a run (only ``columns``, when given)."""
        path = self.shard_files(run_id).get(shard)
        if path is None:
            raise StoreError(f"run {run_id} has no shard {shard}")
        return self._read_parquet(path, columns=columns)

    def shard_digest(self, run_id: str, shard: int) -> str | None:
        """The plan digest in one shard file's footer (None: no such file, a bad one, or no digest)."""
        path = self.shard_location(run_id, shard)
        try:
            reason = self.check_file("samples", path)  # this file only: run_shard asks once per shard
        except FileNotFoundError:
            return None
        if reason is not None:
            self._quarantine("samples", path, reason)
            return None
        return self._footer_digest(path)

    def shard_digests(self, run_id: str) -> dict[int, tuple[Location, str | None]]:
        """Every shard file of a run: its location and the plan digest in its footer."""
        out = {}
        for path in self.files("samples", {"run_id": run_id}):
            match = _SHARD_FILE.match(str(path).rsplit("/", 1)[-1])
            if match:
                out[int(match[1])] = (path, self._footer_digest(path))
        return out

    def quarantine(self, path: Location, reason: str) -> FileProblem:
        """Move one file of this store aside (see ``doctor``), saying why."""
        return self._quarantine(self.relative(path).split("/")[0], path, reason)

    def finished_shards(self, run_id: str) -> set[int]:
        """Indices of the shards of a run that are written and hold what the run's plan says."""
        return set(self.shard_files(run_id))

    def shard_files(self, run_id: str) -> dict[int, Location]:
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
        con = self._duckdb()
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
                if self.remote:
                    roots = [self.root + "/"]
                    spill = Path(os.environ.get("TMPDIR", "/tmp")) / f"difficulty-duckdb-{uuid.uuid4().hex}"
                else:
                    roots = sorted({str(self.root.absolute()), str(self.root.resolve())})
                    spill = self.root.resolve() / ".duckdb-tmp"
                params = {"allowed_directories": roots, "temp_directory": str(spill)}
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

    def files_query(self, name: str, files: list[Location], params: dict | None = None) -> pa.Table:
        """Run ``pipeline/sql/<name>.sql`` over just ``files`` (bound as ``$files``), without the
        other tables' views (no listing of the whole data directory).

        On an object store the files are first copied, concurrently, to a temporary local folder
        (removed after): DuckDB reading through the Python filesystem is one blocking request at a
        time, 6 to 14 times slower than the copy plus a native read (``bench/storage.py``).
        """
        con, lock = self._files_db
        with self._staged(files) as local, lock:
            try:
                return con.sql(load_sql(name), params={"files": local, **(params or {})}).to_arrow_table()
            except duckdb.Error as exc:
                raise StoreError(f"{name}: cannot read {len(files)} files under {self.root}: {exc}") from exc

    @functools.cached_property
    def _files_db(self) -> tuple[duckdb.DuckDBPyConnection, threading.Lock]:
        """One DuckDB connection per store for ``files_query`` (no views, no user SQL), one query
        at a time: a fresh connection per query cost half the floor again at Big-Math scale
        (DuckDB's buffers and allocator start cold), ``bench/analysis.py``."""
        return duckdb.connect(":memory:"), threading.Lock()

    @contextmanager
    def _staged(self, files: list[Location]) -> Iterator[list[str]]:
        """Local paths of ``files``: themselves in a local store, temporary copies of remote ones."""
        if not self.remote:
            yield [str(f) for f in files]
            return
        with tempfile.TemporaryDirectory(prefix="difficulty-stage-") as tmp:
            local = [os.path.join(tmp, f"{i:06d}.parquet") for i in range(len(files))]
            self._call(f"cannot read {len(files)} files", self.fs.get, [self._key(f) for f in files], local)
            yield local

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
        shards = self.shard_files(run_id)
        if not shards:
            raise StoreError(f"run {run_id!r} has no samples under {self.root}")
        files = [f for _, f in sorted(shards.items())]
        try:
            stored = self._stored_answer_counts(run_id, shards) if answers else None
            if stored is not None:  # the shards' own counts: one row per distinct answer, not per sample
                return self.files_query("answer_histogram_stored", stored)
            return self.files_query("answer_histogram" if answers else "prompt_counts", files)
        except StoreError as exc:
            raise StoreError(f"cannot read the samples of run {run_id!r}: {exc}") from exc
