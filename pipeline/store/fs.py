"""The filesystem seam: every byte a ``Store`` reads or writes goes through these functions.

A data directory is a folder of one fsspec filesystem: fsspec's ``LocalFileSystem`` for a local
folder, ``s3fs`` for an ``s3://bucket/prefix``. The functions here take the store (its ``root``,
``remote`` and ``fs``) and work the same on both; what differs between a disk and an object store
is said once, here:

- the atomic write (``put``): on a disk, a hidden temporary file in the same folder renamed into
  place (``os.replace``); on an object store, one PUT of the finished bytes (S3 has no rename, and
  an object never shows half an upload);
- errors (``call``): an object store's failures become a ``StoreError`` that names the cause a user
  can fix (``remote_error``); a disk's ``OSError`` is passed through as it is;
- footers of many files (``tails``): fetched concurrently from an object store (one ranged GET
  each), read one by one from a disk (a read there costs no round trip).

Locations handed out are Paths in a local store and full URLs (``s3://bucket/key``) in a remote one.
"""

from __future__ import annotations

import errno
import functools
import glob
import hashlib
import logging
import math
import os
import re
import shutil
import socket
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import duckdb

from pipeline.errors import ConfigError, DiskFullError, MissingDependencyError, StoreError

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

log = logging.getLogger("pipeline.store")

DATA_DIR_ENV = "DIFFICULTY_DATA"
DEFAULT_DATA_DIR = "difficulty-data"
SAFE_VALUE = re.compile(r"^[A-Za-z0-9._:+-]+$")
REMOTE_SCHEMES = ("s3",)  # object stores the data directory may live on (through fsspec)

# A location: a Path in a local data directory, a full URL (s3://bucket/key) in a remote one.
Location = Path | str

# Object-store requests: short connect timeout and few retries, so an unreachable endpoint or a
# refused credential fails in seconds with a named error instead of retrying for minutes. Each
# attempt waits at most ``read_timeout`` for the endpoint's next bytes; the read timeout is set
# from the total bound (``s3_client_config``) so that 3 attempts fit within it.
S3_CLIENT_CONFIG = {"connect_timeout": 5, "read_timeout": 15, "retries": {"max_attempts": 3, "mode": "standard"}}
# The most seconds one request to the object store may take, its retries included. Without it an
# endpoint that accepts connections and never answers stalls a run silently: aiohttp waits for a
# PUT's "100 Continue" with no timeout at all, and s3fs retries (5 times) on top of botocore's
# attempts, so a read timeout of R seconds meant up to 20 R. A listing page is requested by
# botocore's paginator outside s3fs's ``_call_s3``: the attempts' read timeouts bound it.
S3_TIMEOUT_ENV = "DIFFICULTY_S3_TIMEOUT"
DEFAULT_S3_TIMEOUT = 60.0
# s3fs's own retries of a request botocore already retried: one more, for an error botocore does not
# retry (a response body cut off while it is read).
S3FS_RETRIES = 2

# errnos of a write that found no room: a full disk, a used-up quota.
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)

# Per process: (location, size, version, type) -> None for a good file, else why it is bad. A file
# changed in place gets a new key, so it is checked again; an unchanged one costs nothing past the
# listing. Filled by ``files.check``; read here so a footer batch skips the files already checked.
CHECKED: dict[tuple, str | None] = {}
CHECKED_MAX = 500_000
# The footer key-values of the files checked (same keys), and each location's latest key: a
# shard's plan digest is then read once per process, with its check.
FOOTERS: dict[tuple, dict[bytes, bytes]] = {}
LATEST: dict[str, tuple] = {}
# An object's last bytes fetched to read its footer in one ranged GET (a shard's footer is a few KB).
FOOTER_TAIL = 1 << 16


class Rooted(Protocol):
    """What these functions need of a store: its root, whether it is remote, its filesystem."""

    root: Location

    @property
    def remote(self) -> bool: ...

    @property
    def fs(self) -> Any: ...


# The ``Store`` facade as the other rooms take it (``files``, ``registry``, ``query``). Not imported:
# the facade imports them, and no module of this package imports the facade.
Facade = Any


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


def filesystem(root: Location):
    """The fsspec filesystem of a data directory: the local one, or an object store's.

    An object store's credentials, region and endpoint come from the standard AWS environment
    variables and config files (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
    ``AWS_ENDPOINT_URL``, ``~/.aws/...``), never from an argument: no secret is ever part of a
    Store, a flow parameter or a table."""
    if not isinstance(root, str):
        from fsspec.implementations.local import LocalFileSystem

        return LocalFileSystem()
    try:
        import s3fs
    except ImportError as exc:
        raise MissingDependencyError(
            "an s3:// data directory needs s3fs; install it with: pip install 'difficulty-pipeline[s3]'"
        ) from exc
    total = s3_timeout()
    # No listing cache: another process (a Ray actor) may write a shard at any time.
    return _bounded_s3(s3fs)(
        config_kwargs=s3_client_config(total),
        use_listings_cache=False,
        skip_instance_cache=True,
        request_bound=total,
    )


def s3_timeout() -> float:
    """The bound on one object-store request, retries included: ``$DIFFICULTY_S3_TIMEOUT`` seconds,
    else ``DEFAULT_S3_TIMEOUT``."""
    raw = os.environ.get(S3_TIMEOUT_ENV)
    if raw is None or not raw.strip():
        return DEFAULT_S3_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(f"{S3_TIMEOUT_ENV}={raw!r} must be a number of seconds > 0 (default {DEFAULT_S3_TIMEOUT:g})")
    return value


def s3_client_config(total: float) -> dict:
    """botocore's settings under a total bound of ``total`` seconds per request: the connect and
    read timeouts of one attempt are at most a quarter of it, so the 3 attempts and their backoff
    end first and the bound only catches what they cannot (a PUT waiting for "100 Continue")."""
    return {
        **S3_CLIENT_CONFIG,
        "connect_timeout": min(S3_CLIENT_CONFIG["connect_timeout"], total / 4),
        "read_timeout": min(S3_CLIENT_CONFIG["read_timeout"], total / 4),
    }


def endpoint_name() -> str:
    """The object store's endpoint as the AWS environment sets it (the default AWS one otherwise)."""
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or "the default AWS"


@functools.cache
def _bounded_s3(s3fs):
    """``s3fs.S3FileSystem`` with every request bounded in time (``request_bound`` seconds, its
    retries included) and without the "Expect: 100-continue" header on uploads, whose wait has no
    timeout in aiohttp. Every S3 call of s3fs (a listing page, a GET of a byte range that pyarrow
    or DuckDB asks for, a PUT) goes through ``_call_s3``, so the bound covers reads that do not
    pass through ``call`` too."""
    import asyncio  # here, with s3fs (which imports it anyway): a local store's commands never pay it

    from botocore.handlers import add_expect_header

    class BoundedS3FileSystem(s3fs.S3FileSystem):
        retries = S3FS_RETRIES

        def __init__(self, *args, request_bound: float = DEFAULT_S3_TIMEOUT, **kwargs):
            self.request_bound = request_bound
            super().__init__(*args, **kwargs)

        async def set_session(self, refresh=False, kwargs=None):
            client = await super().set_session(refresh=refresh, kwargs=kwargs or {})
            client.meta.events.unregister("before-call.s3", add_expect_header)
            return client

        async def _call_s3(self, method, *akwarglist, **kwargs):
            # asyncio.wait, not wait_for: a TimeoutError raised inside is botocore's or s3fs's, and
            # ours must not be one (s3fs would retry it, as it does socket timeouts).
            task = asyncio.ensure_future(super()._call_s3(method, *akwarglist, **kwargs))
            done, _ = await asyncio.wait({task}, timeout=self.request_bound)
            if task in done:
                return task.result()
            task.cancel()
            target = "/".join(str(kwargs[k]) for k in ("Bucket", "Key", "Prefix") if kwargs.get(k))
            raise StoreError(
                f"the object store at {endpoint_name()} endpoint did not answer {method} "
                f"{target} within {self.request_bound:g} s ({S3_TIMEOUT_ENV}); it accepts connections but does "
                f"not respond: check the endpoint (AWS_ENDPOINT_URL) and its health, or raise {S3_TIMEOUT_ENV}"
            )

    return BoundedS3FileSystem


def remote_error(exc: BaseException, what: str, root: str) -> StoreError:
    """An object store's failure as a StoreError that names the cause a user can fix."""
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, StoreError):  # already named (a request past its bound)
        return StoreError(f"{what}: {exc}")
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
    if any(k in text for k in ("ReadTimeoutError", "Read timeout on endpoint")):
        return StoreError(
            f"{what}: the object store at {endpoint_name()} endpoint did not answer in time ({exc}); it "
            f"accepts connections but does not respond: check the endpoint (AWS_ENDPOINT_URL) and its health, or "
            f"raise {S3_TIMEOUT_ENV}"
        )
    if any(k in text for k in ("EndpointConnectionError", "ConnectTimeout", "Could not connect", "ConnectionError")):
        return StoreError(
            f"{what}: cannot reach the object store at {endpoint_name()} endpoint ({exc}); check AWS_ENDPOINT_URL"
        )
    return StoreError(f"{what} on {root}: {text}")


def parquet_bytes(data: pa.Table) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = pa.BufferOutputStream()
    pq.write_table(data, sink, compression="zstd")
    return sink.getvalue().to_pybytes()


# --- locations --------------------------------------------------------------------------------


def location(s: Rooted, *parts: str) -> Location:
    """``root/parts...``: a Path locally, a URL on an object store."""
    return child(s, s.root, *parts)


def as_location(s: Rooted, text: str) -> Location:
    """A location from its full name (a path, or a URL)."""
    return text if s.remote else Path(text)


def child(s: Rooted, loc: Location, *names: str) -> Location:
    """``loc/names...``, a location of the same kind."""
    return as_location(s, "/".join([str(loc), *names])) if names else loc


def relative(s: Rooted, loc: Location) -> str:
    """A location's path below the root, with ``/`` separators."""
    if s.remote:
        return str(loc)[len(s.root) + 1 :]
    return Path(loc).relative_to(s.root).as_posix()


def _named(s: Rooted, loc: Location) -> str:
    """A location as an error message names it: below the root, or whole when it is elsewhere."""
    try:
        return relative(s, loc)
    except ValueError:
        return str(loc)


def key(s: Rooted, loc: Location) -> Location:
    """The filesystem's name of a location: the local Path itself, or ``bucket/prefix/...`` (no
    scheme) on an object store. Both fsspec and pyarrow (``filesystem=s.fs``) take it."""
    return str(loc).split("://", 1)[1] if s.remote else Path(loc)


def stamp(info: dict) -> tuple:
    """What changes when a file does, from its fsspec info: size, version (an object's ETag or
    modification time, a local file's modification time), inode (local) and type."""
    return (
        info.get("size"),
        info.get("ETag") or info.get("LastModified") or info.get("mtime"),
        info.get("ino"),
        info.get("type"),
    )


# --- calls ------------------------------------------------------------------------------------


def call(s: Rooted, what: str, fn, *args, **kwargs):
    """Run a filesystem call; an object store's failure becomes a StoreError naming the cause (a
    missing key stays a FileNotFoundError); a disk's OSError is raised as it is."""
    if not s.remote:
        return fn(*args, **kwargs)
    try:
        return fn(*args, **kwargs)
    except FileNotFoundError as exc:
        if "bucket" in str(exc).lower():
            raise remote_error(exc, what, s.root) from exc
        raise
    except Exception as exc:
        raise remote_error(exc, what, s.root) from exc


def _find(s: Rooted, base: str) -> dict:
    """Every entry under ``base`` with its info, from the object store or the local disk."""
    if s.remote:
        return call(s, "cannot list the data directory", s.fs.find, base, detail=True)
    return _find_local(base)


def listing(s: Rooted, folder: Location, suffix: str) -> list[tuple[Location, tuple]]:
    """Files under ``folder`` (recursively) whose name ends in ``suffix`` and is not hidden,
    sorted, each with its ``stamp``. On a disk a folder named like such a file is listed too (its
    check then refuses it); an object store has no folders of its own."""
    base = str(key(s, folder)).rstrip("/")
    found = _find(s, base)
    out = []
    for name, info in found.items():
        leaf = name.rsplit("/", 1)[-1]
        if leaf.endswith(suffix) and not leaf.startswith(".") and info.get("type") in ("file", "directory"):
            out.append((name[len(base) + 1 :].split("/"), info))
    out.sort(key=lambda item: item[0])  # by path parts, as Paths sort
    return [(child(s, folder, *parts), stamp(info)) for parts, info in out]


def _find_local(base: str) -> dict[str, dict]:
    """What ``LocalFileSystem.find(base, detail=True, withdirs=True)`` gives (every file and folder
    below ``base``, with the info fields of ``stamp``), from one ``os.scandir`` walk: fsspec's
    builds a full info per entry, 3 times the cost over thousands of shards
    (``bench/store_connect.py``). Symlinked folders are not entered."""
    out: dict[str, dict] = {}
    todo = [base]
    while todo:
        try:
            entries = os.scandir(todo.pop())
        except (FileNotFoundError, NotADirectoryError):
            continue
        with entries:
            for entry in entries:
                try:
                    st = entry.stat()
                    is_dir = entry.is_dir()
                except FileNotFoundError:
                    log.info("%s disappeared while it was listed (replaced or moved by another process)", entry.path)
                    continue
                if is_dir and not entry.is_symlink():
                    todo.append(entry.path)
                kind = "directory" if is_dir else "file"
                out[entry.path] = {"size": st.st_size, "mtime": st.st_mtime, "ino": st.st_ino, "type": kind}
    return out


def hidden_files(s: Rooted, folder: Location) -> list[tuple[Location, float]]:
    """Files under ``folder`` (recursively) whose name is hidden (``.``...), each with its
    modification time (seconds since the epoch): what ``doctor`` looks at for temporary leftovers."""
    base = str(key(s, folder)).rstrip("/")
    found = _find(s, base)
    out = []
    for name, info in sorted(found.items()):
        if info.get("type") == "file" and name.rsplit("/", 1)[-1].startswith("."):
            modified = info.get("LastModified") or info.get("mtime") or 0  # an object's is a datetime
            seconds = modified.timestamp() if hasattr(modified, "timestamp") else float(modified)
            out.append((child(s, folder, name[len(base) + 1 :]), seconds))
    return out


def info_stamp(s: Rooted, loc: Location) -> tuple:
    """One file's ``stamp`` (FileNotFoundError when it is gone)."""
    return stamp(call(s, "cannot read the data directory", s.fs.info, key(s, loc)))


def exists(s: Rooted, loc: Location) -> bool:
    return bool(call(s, "cannot read the data directory", s.fs.exists, key(s, loc)))


def read_bytes(s: Rooted, loc: Location) -> bytes:
    return call(s, f"cannot read {_named(s, loc)}", s.fs.cat_file, key(s, loc))


def put(s: Rooted, loc: Location, data: bytes | pa.Table) -> None:
    """The one atomic write: make ``loc`` hold ``data`` (bytes, or a table as Parquet), all at once,
    so a reader sees the old file, or the new one whole.

    On a disk, written under a hidden temporary name in the same folder (``temporary``, which
    ``doctor`` removes when a dead writer left it) and renamed into place; a table is
    streamed to the file, never held twice in memory. On an object store, one PUT of the finished
    bytes under the final key: S3 shows an object only when its upload is complete."""
    if s.remote:
        body = data if isinstance(data, bytes) else parquet_bytes(data)
        call(s, f"cannot write {_named(s, loc)}", s.fs.pipe, key(s, loc), body)
        return
    loc = Path(loc)
    tmp = temporary(loc)
    try:
        loc.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, bytes):
            tmp.write_bytes(data)
        else:
            import pyarrow.parquet as pq

            pq.write_table(data, tmp, compression="zstd")
        os.replace(tmp, loc)
    except OSError as exc:
        if not no_space(exc):
            raise
        size = len(data) if isinstance(data, bytes) else len(parquet_bytes(data))  # the error path only
        raise disk_full(_named(s, loc), loc, size) from exc
    finally:
        tmp.unlink(missing_ok=True)


# A temporary file left by a killed writer is removed by the next run or by ``doctor`` once its
# writer is gone (its name says which process of which host wrote it) or it is this old.
TMP_MAX_AGE_S = 3600
_OWNER = re.compile(r"\.([0-9a-f]{8})-(\d+)\.[0-9a-f]{32}\.tmp$")


@functools.cache
def _host() -> str:
    return hashlib.blake2b(socket.gethostname().encode(), digest_size=4).hexdigest()


def temporary(loc: str | os.PathLike) -> Path:
    """A hidden temporary file beside ``loc`` whose name says who writes it:
    ``.<name>.<host>-<pid>.<hex>.tmp`` (``writer_gone``)."""
    loc = Path(loc)
    return loc.parent / f".{loc.name}.{_host()}-{os.getpid()}.{uuid.uuid4().hex}.tmp"


def writer_gone(name: str) -> bool:
    """Whether the temporary file ``name`` (``temporary``) was written by a process of this host
    that no longer runs; False when that cannot be known (another host, an older name)."""
    match = _OWNER.search(name)
    if match is None or match.group(1) != _host():
        return False
    pid = int(match.group(2))
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive, another user's
        return False
    return False


def remove_stale(loc: str | os.PathLike, max_age_s: float = TMP_MAX_AGE_S) -> list[Path]:
    """Remove the temporary files of ``loc`` a killed command left beside it (its writer gone, or
    older than ``max_age_s``); those removed."""
    loc = Path(loc)
    gone = []
    for path in loc.parent.glob(f".{glob.escape(loc.name)}.*.tmp"):
        try:
            stale = writer_gone(path.name) or time.time() - path.stat().st_mtime >= max_age_s
            if stale:
                path.unlink()
                gone.append(path)
        except FileNotFoundError:  # renamed into place or removed meanwhile
            continue
    if gone:
        log.info("removed %d temporary files a killed command left beside %s", len(gone), loc)
    return gone


@contextmanager
def replacing(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary file beside the local file ``path``, renamed onto it when the block succeeds and
    removed when it fails; the temporaries a killed earlier command left beside ``path`` are removed
    first (``remove_stale``)."""
    path = Path(path)
    remove_stale(path)
    tmp = temporary(path)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def no_space(exc: OSError) -> bool:
    """Whether an OSError is a full disk or a used-up quota (pyarrow's carries the errno in its text)."""
    return exc.errno in NO_SPACE or any(f"[errno {e}]" in str(exc).lower() for e in NO_SPACE)


def disk_full(what: str, loc: str | os.PathLike, needed: int | None) -> DiskFullError:
    """A full disk as an error that says what was being written, the space it needs and the space
    left. The partial file is gone (the atomic write removes it), so nothing stored is damaged."""
    folder = Path(loc).parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    free = shutil.disk_usage(folder).free
    need = f"it needs {needed:,} bytes" if needed is not None else "it needs more than that"
    return DiskFullError(
        f"no space left on the device writing {what} ({need}; {free:,} bytes free in "
        f"{folder}); free some space or use another --data-dir, then run the command again: what was stored "
        "before is intact"
    )


def writable_output(path: str | os.PathLike, what: str) -> Path:
    """A local file a command is about to write, checked before anything is written: not a folder,
    under a folder (not a file) where a file can be created. A probe file is made and removed in
    the nearest existing folder, so a read-only disk or a missing permission fails here, for
    every output of a command at once, rather than after the first output was written."""
    out = Path(path).expanduser().absolute()
    if out.is_dir():
        raise StoreError(f"{what} {str(path)!r} is a folder; name a file")
    folder = out.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise StoreError(f"{what} {str(path)!r} cannot be written: {str(folder)!r} is a file, not a folder")
    probe = folder / f".write-probe-{uuid.uuid4().hex}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        reason = "no space left" if no_space(exc) else (exc.strerror or str(exc))
        raise StoreError(f"{what} {str(path)!r} cannot be written: folder {str(folder)!r}: {reason}") from exc
    return out


def unlink(s: Rooted, loc: Location) -> None:
    call(s, f"cannot remove {_named(s, loc)}", s.fs.rm, key(s, loc))


def move(s: Rooted, src: Location, dst: Location) -> None:
    """Move a file (a rename on a disk, its folder made first; a copy then delete on an object
    store, which has no folders to make)."""
    if not s.remote:
        s.fs.makedirs(s.fs._parent(str(key(s, dst))), exist_ok=True)
    call(s, f"cannot move {_named(s, src)}", s.fs.mv, key(s, src), key(s, dst))


def metadata(s: Rooted, loc: Location) -> pq.FileMetaData:
    """A Parquet file's footer: a disk's file read by pyarrow from its path, an object's through
    the filesystem's file object."""
    import pyarrow.parquet as pq

    if s.remote:
        with s.fs.open(key(s, loc), "rb") as fh:
            return pq.read_metadata(fh)
    return pq.read_metadata(key(s, loc))


def read_parquet(s: Rooted, loc: Location, columns: list[str] | None = None) -> pa.Table:
    """One Parquet file: a disk's read by pyarrow from its path (no fsspec: its import costs
    ``difficulty sql`` 0.2 s, and pyarrow reads fsspec's local filesystem natively anyway), an
    object's through the filesystem.

    ``ParquetFile``, not ``pq.read_table``: the latter goes through ``pyarrow.dataset``, whose
    import pulls in pandas (0.15 s on every quick command that reads the run registry)."""

    import pyarrow.parquet as pq

    def read() -> pa.Table:
        with pq.ParquetFile(key(s, loc), filesystem=s.fs if s.remote else None) as file:
            return file.read(columns=columns)

    return call(s, f"cannot read {_named(s, loc)}", read)


def footer_value(s: Rooted, loc: Location, name: str) -> str | None:
    """One key of a file's footer metadata (from the check's cache when the file was checked)."""
    cached = LATEST.get(str(loc))
    meta = FOOTERS.get(cached) if cached is not None else None
    if meta is None:
        meta = metadata(s, loc).metadata or {}
    value = meta.get(name.encode())
    return value.decode() if value else None


def tails(s: Rooted, listed: list[tuple[Location, tuple]]) -> dict[str, pq.FileMetaData]:
    """The footers of an object store's files, their last bytes fetched concurrently (one ranged
    GET each). A file whose footer is not within the fetched bytes, or is not a footer, is left
    out: the one-by-one check then reads (or refuses) it. A disk's files are read one by one (no
    round trip to save): nothing is fetched."""
    if not s.remote:
        return {}
    import pyarrow as pa
    import pyarrow.parquet as pq

    todo = [(loc, st[0]) for loc, st in listed if (str(loc), *st) not in CHECKED and st[0]]
    if not todo:
        return {}
    keys = [key(s, loc) for loc, _ in todo]
    starts = [max(0, size - FOOTER_TAIL) for _, size in todo]
    ends = [size for _, size in todo]
    fetched = call(s, "cannot read the data directory", s.fs.cat_ranges, keys, starts, ends, on_error="return")
    out = {}
    for (loc, _), start, tail in zip(todo, starts, fetched, strict=True):
        if not isinstance(tail, bytes) or len(tail) < 12 or tail[-4:] != b"PAR1":
            continue
        if int.from_bytes(tail[-8:-4], "little") + 8 > len(tail) and start > 0:
            continue
        try:
            out[str(loc)] = pq.read_metadata(pa.BufferReader(tail))
        except (pa.ArrowException, OSError):
            continue
    return out


def duckdb_connection(s: Rooted) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection that can read this store's files: local paths natively,
    ``s3://`` URLs through the registered fsspec filesystem (DuckDB 2.0's httpfs cannot be
    installed offline)."""
    con = duckdb.connect(":memory:")
    if s.remote:
        con.register_filesystem(s.fs)
    return con


def append(s: Rooted, loc: Location, data: bytes) -> None:
    """Add ``data`` at the end of a file (made when missing): an append on a disk, so two
    processes appending at once both keep theirs; a rewrite of the whole object on an object
    store, which has no append (for rare, small files: the quarantine log)."""
    if s.remote:
        old = read_bytes(s, loc) if exists(s, loc) else b""
        put(s, loc, old + data)
        return
    try:
        with open(loc, "ab") as fh:
            fh.write(data)
    except OSError as exc:
        if not no_space(exc):
            raise
        raise disk_full(_named(s, loc), loc, len(data)) from exc


@contextmanager
def local_paths(s: Rooted, files: list[Location]) -> Iterator[list[str]]:
    """Local paths of ``files`` for a reader that needs them (DuckDB's native reader): on a disk
    the files themselves; on an object store copies fetched concurrently into a temporary folder,
    removed after."""
    if not s.remote:
        yield [str(f) for f in files]
        return
    with tempfile.TemporaryDirectory(prefix="difficulty-stage-") as tmp:
        local = [os.path.join(tmp, f"{i:06d}.parquet") for i in range(len(files))]
        call(s, f"cannot read {len(files)} files", s.fs.get, [key(s, f) for f in files], local)
        yield local


def confinement(s: Rooted) -> tuple[list[str], Path]:
    """Where a confined DuckDB connection may read and write (the data directory, as DuckDB
    names it), and the local folder it spills to."""
    if s.remote:
        return [s.root + "/"], Path(os.environ.get("TMPDIR", "/tmp")) / f"difficulty-duckdb-{uuid.uuid4().hex}"
    return sorted({str(s.root.absolute()), str(s.root.resolve())}), s.root.resolve() / ".duckdb-tmp"
