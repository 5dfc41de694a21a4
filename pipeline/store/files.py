"""Table files: the layout, writes and reads of tables, and the checks every file read passes.

A file under a table's folder is read only if it is a complete Parquet file of that table: a
footer that parses and a schema that conforms (no unknown column, every required one present,
types castable). Anything else (a truncated shard, a stray copy, another program's output) is
moved to ``<root>/quarantine/<UTC time>/<its relative path>``, never deleted, so one bad file
cannot break every query and a quarantined shard is sampled again by the next run.

A shard file is kept only if its footer digest equals the digest registered for that shard in
``plans`` (``shard_files``); a run with no stored plan keeps all its shard files.

A verdict is cached by the file's stamp (location, size, modification time, inode): per process
(``fs.CHECKED``), and, for a local data directory, between processes in the user's cache
(``load_verdicts``, ``save_verdicts``; never in the data directory, which a query only reads), so
a quick command over unchanged files reads no footer and imports no pyarrow. The stamp is the one
the per-process cache already trusts: the store replaces a file whole (a new inode, a new time),
a file changed in place gets a new modification time or size, and either is checked again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline import schema
from pipeline.errors import StoreError
from pipeline.paths import user_cache
from pipeline.store import fs
from pipeline.store.fs import Facade, Location

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

log = logging.getLogger("pipeline.store")

QUARANTINE_DIR = "quarantine"
TMP_MAX_AGE_S = fs.TMP_MAX_AGE_S  # a write's temporary file older than this was left by a dead writer
SHARD_FILE = re.compile(r"^shard-(\d{5,})\.parquet$")  # shard_name(); more digits past 99999
# What ``doctor`` removes once older than ``TMP_MAX_AGE_S``: fs.put's temporary files, another
# tool's half-written uploads (``.tmp-*``) and the probe objects of ``Store.open``. Never a lease
# (``.lock``), which no writer leaves behind for an hour while it holds it.
TEMPORARY = re.compile(r"^(\..+\.[0-9a-f]{32}\.tmp|\.tmp-.+|\.write-probe-[0-9a-f]{32})$")
PARTITION = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.+)$")
SHARD_DIGEST_KEY = "difficulty.shard_digest"  # footer key: the plan digest of a shard file
WRITE_ID_KEY = "difficulty.write_id"  # footer key: one shard write, shared by its answer counts file
LOADED_AT_KEY = "difficulty.loaded_at"  # footer key: when a problems file was loaded (UTC, sortable)
FOOTER_PREFIX = b"difficulty."  # the footer keys of the pipeline's own (the verdicts file keeps only these)
VERDICTS_ENV = "DIFFICULTY_CHECKS_CACHE"  # the folder of the saved verdicts, one file per data directory
# Roots whose verdicts file this process has read, and those with verdicts it has not saved yet.
_VERDICTS_READ: set[str] = set()
_VERDICTS_NEW: set[str] = set()
# A plans file's planned shards ({run id: {shard: digest}}), by the file's stamp as in fs.CHECKED:
# read once per file version, saved with its verdict.
PLANNED: dict[tuple, dict[str, dict[int, str]]] = {}


def now() -> datetime:
    return datetime.now(UTC)


def shard_name(shard: int) -> str:
    return f"shard-{shard:05d}"


def conform(data: pa.Table, table: str) -> pa.Table:
    """Cast ``data`` to the table's schema: missing nullable columns become nulls, extras are an error."""
    import pyarrow as pa

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


def _castable(src: pa.DataType, dst: pa.DataType) -> bool:
    """Whether a stored column type reads as the declared one without changing what it means:
    dictionary encoding aside, the same type or one of the same family (integers to integers or
    floats, floats, strings, timestamps, lists of castable items)."""
    import pyarrow as pa

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


# --- layout -----------------------------------------------------------------------------------


def partition_dir(s: Facade, table: str, partition: dict[str, str] | None = None) -> Location:
    parts = [table]
    for name, value in (partition or {}).items():
        value = str(value)
        if not fs.SAFE_VALUE.match(value):
            raise StoreError(f"partition value {value!r} for {name!r} has characters unsafe in a path")
        parts.append(f"{name}={value}")
    return fs.location(s, *parts)


# --- checks -----------------------------------------------------------------------------------


def scan(s: Facade, table: str, where: dict[str, str] | None = None) -> tuple[list[Location], list[FileProblem]]:
    """The good files of a table (or partition), and the bad ones found and quarantined."""
    good, bad = [], []
    load_verdicts(s)
    listed = fs.listing(s, partition_dir(s, table, where), ".parquet")
    footers = fs.tails(s, listed)
    for loc, st in listed:
        try:
            reason = check(s, table, loc, st, footers.get(str(loc)))
        except (FileNotFoundError, StoreError) as exc:
            # An object deleted between its listing and its read can fail either way on an object
            # store; the error is only the store's when the file is still there.
            if isinstance(exc, StoreError) and fs.exists(s, loc):
                raise
            log.info("%s disappeared while it was checked (replaced or moved by another process)", loc)
            continue
        if reason is None:
            good.append(loc)
        else:
            bad.append(quarantine_file(s, table, loc, reason))
    return good, bad


def check_file(s: Facade, table: str, path: Location) -> str | None:
    """Why ``path`` is not a complete Parquet file of ``table`` (None when it is one); see
    ``Store.check_file``."""
    return check(s, table, fs.as_location(s, str(path)), fs.info_stamp(s, path))


def check(s: Facade, table: str, loc: Location, st: tuple, meta: pq.FileMetaData | None = None) -> str | None:
    """``file_problem`` of ``loc``, cached per process by (location, stamp)."""
    cached = (str(loc), *st)
    if cached in fs.CHECKED:
        fs.LATEST[str(loc)] = cached
        return fs.CHECKED[cached]
    found: list[pq.FileMetaData] = [meta] if meta is not None else []
    reason = file_problem(s, table, loc, st, found)
    if len(fs.CHECKED) >= fs.CHECKED_MAX:
        fs.CHECKED.clear()
        fs.FOOTERS.clear()
        fs.LATEST.clear()
        PLANNED.clear()
    fs.CHECKED[cached] = reason
    _VERDICTS_NEW.add(str(s.root))
    if reason is None and found:
        fs.FOOTERS[cached] = found[0].metadata or {}
        fs.LATEST[str(loc)] = cached
    return reason


def verdicts_version() -> str:
    """What a saved verdict was decided under: this module's checks and the declared schemas (a
    new column, or a new rule, makes every saved verdict void)."""
    digest = hashlib.sha256()
    for module in (__file__, schema.__file__):
        digest.update(Path(module).read_bytes())
    return digest.hexdigest()[:16]


def verdicts_path(root: str) -> Path:
    """The file of a local data directory's saved verdicts, in the user's cache."""
    return user_cache("checks", VERDICTS_ENV) / f"{hashlib.sha256(root.encode()).hexdigest()[:24]}.json"


def load_verdicts(s: Facade) -> None:
    """Add the verdicts saved under a local data directory to this process's cache (once per
    process). An object store keeps none: its listing's ETags would allow it, a PUT per command
    would not pay."""
    root = str(s.root)
    if s.remote or root in _VERDICTS_READ:
        return
    _VERDICTS_READ.add(root)
    path = verdicts_path(root)
    try:
        saved = json.loads(path.read_bytes())
        if saved.get("version") != verdicts_version() or saved.get("root") != root:
            return
        for rel, (size, modified, inode, kind, footer, *planned) in saved["files"].items():
            cached = (f"{root}/{rel}", size, modified, inode, kind)
            fs.CHECKED.setdefault(cached, None)
            fs.FOOTERS.setdefault(cached, {k.encode(): v.encode() for k, v in footer.items()})
            if planned:  # a plans file's planned shards; JSON's keys are strings
                runs = planned[0].items()
                PLANNED.setdefault(cached, {run: {int(k): v for k, v in shards.items()} for run, shards in runs})
    except FileNotFoundError:
        return
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:  # checked again, saved anew
        log.info("ignoring the saved file checks %s: %s", path, exc)
        _VERDICTS_NEW.add(root)


def save_verdicts(s: Facade) -> None:
    """Save the good verdicts of a local data directory's files (those read and those decided by
    this process) for the next process, when this one decided new ones. Only verdicts whose file
    still has its stamp are kept (a file moved to quarantine or replaced is dropped); two processes
    saving at once lose one's new verdicts, which are then decided again."""
    root = str(s.root)
    if s.remote or root not in _VERDICTS_NEW:
        return
    _VERDICTS_NEW.discard(root)
    prefix = root + "/"
    entries = {}
    for cached, reason in list(fs.CHECKED.items()):
        loc, *st = cached
        if reason is not None or not loc.startswith(prefix) or fs.LATEST.get(loc, cached) != cached:
            continue
        try:
            info = os.stat(loc)
        except OSError:  # gone (quarantined, removed): nothing to keep
            continue
        if (info.st_size, info.st_mtime, info.st_ino) != tuple(st[:3]):
            continue
        footer = fs.FOOTERS.get(cached, {})
        kept = {k.decode(): v.decode() for k, v in footer.items() if k.startswith(FOOTER_PREFIX)}
        entries[loc[len(prefix) :]] = [*st, kept, *([PLANNED[cached]] if cached in PLANNED else [])]
    saved = {"root": root, "version": verdicts_version(), "files": entries}
    try:
        fs.put(s, verdicts_path(root), json.dumps(saved, separators=(",", ":")).encode())
    except (OSError, StoreError) as exc:  # a cache: the next process checks the footers again
        log.warning("cannot save the file checks under %s: %s", root, exc)


def file_problem(s: Facade, table: str, loc: Location, st: tuple, found: list[pq.FileMetaData]) -> str | None:
    """Why ``loc`` is bad, or None; the footer read (or given, in ``found``) is left in ``found``."""
    if st[-1] == "directory":
        return "a folder named like a Parquet file"
    parts = fs.relative(s, loc).split("/")
    for part in parts[1:-1]:
        match = PARTITION.match(part)
        if not match or match[1] not in {c.name for c in schema.TABLES[table]} or not fs.SAFE_VALUE.match(match[2]):
            return f"folder {part!r} is not a partition folder (<column>=<value>) of table {table!r}"
    if table == "samples" and not SHARD_FILE.match(parts[-1]):
        return "not a shard's name (shard-NNNNN.parquet)"
    import pyarrow as pa  # only here, on a file not checked before: the quick commands' checks are cached

    try:
        if not found:
            found.append(fs.metadata(s, loc))
        stored = found[0].schema.to_arrow_schema()
    except pa.ArrowInvalid as exc:
        return f"not a complete Parquet file: {exc}"
    except OSError as exc:
        if exc.errno is not None:  # the file system's error, not the file's content
            if isinstance(exc, FileNotFoundError):
                raise
            raise StoreError(f"cannot read {loc}: {exc.strerror or exc}") from exc
        if s.remote and not isinstance(exc, pa.ArrowException):
            raise fs.remote_error(exc, f"cannot read {fs.relative(s, loc)}", s.root) from exc
        return f"not a complete Parquet file: {exc}"  # e.g. a footer that does not deserialize
    except Exception as exc:
        if s.remote:  # botocore's errors: the store's fault, never the file's
            raise fs.remote_error(exc, f"cannot read {fs.relative(s, loc)}", s.root) from exc
        raise
    return schema_problem(stored, table)


# --- quarantine and doctor ----------------------------------------------------------------------


def quarantine_file(s: Facade, table: str, path: Location, reason: str) -> FileProblem:
    """Move a bad file to ``<root>/quarantine/<UTC time>/<relative path>`` (never deleted) and
    append a line to ``quarantine/log.jsonl``; a file that cannot be moved is only left out."""
    rel = fs.relative(s, path)
    dest = fs.location(s, QUARANTINE_DIR, now().strftime("%Y%m%dT%H%M%SZ"), *rel.split("/"))
    if fs.exists(s, dest):
        dest = fs.as_location(s, f"{dest}.{uuid.uuid4().hex[:8]}")
    try:
        fs.move(s, path, dest)
    except FileNotFoundError:
        log.info("%s (%s) was moved by another process first", rel, reason)
        return FileProblem(rel, table, reason, "already moved by another process")
    except (OSError, StoreError) as exc:
        why = getattr(exc, "strerror", None) or exc
        log.warning("skipping %s: %s; it cannot be moved to quarantine (%s)", path, reason, why)
        return FileProblem(rel, table, reason, f"left in place and skipped: {why}")
    moved = fs.relative(s, dest)
    log.warning("quarantined %s: %s; moved to %s", path, reason, dest)
    entry = {"at": now().isoformat(), "file": rel, "table": table, "reason": reason, "moved_to": moved}
    log_loc = fs.location(s, QUARANTINE_DIR, "log.jsonl")
    try:
        fs.append(s, log_loc, (json.dumps(entry) + "\n").encode())
    except (OSError, StoreError) as exc:
        log.warning("cannot append to %s: %s", log_loc, exc)
    return FileProblem(rel, table, reason, f"moved to {moved}")


def forget(s: Facade) -> None:
    """Drop every verdict, footer and plan this process holds for the store's files, and skip the
    saved ones: the next check of each file reads its footer again. A file rewritten in place with
    its size, modification time and inode kept (bit rot, ``rsync --inplace -t``, a ``cat`` over
    another file and its time restored) keeps its stamp, which only a fresh read sees through."""
    root = str(s.root)
    prefix = root.rstrip("/") + "/"
    for cache in (fs.CHECKED, fs.FOOTERS, PLANNED):
        for key in [k for k in cache if k[0].startswith(prefix)]:
            del cache[key]
    for loc in [loc for loc in fs.LATEST if loc.startswith(prefix)]:
        del fs.LATEST[loc]
    _VERDICTS_READ.add(root)  # the saved verdicts are not loaded: doctor decides every file again
    _VERDICTS_NEW.add(root)  # and saves what it decided, so a file found bad is trusted no more


def doctor(s: Facade, tmp_max_age_s: float = TMP_MAX_AGE_S, kept: list[str] | None = None) -> list[FileProblem]:
    """See ``Store.doctor``."""
    forget(s)
    found: list[FileProblem] = []
    good = {}
    for table in schema.TABLES:
        good[table], bad = scan(s, table)
        found += bad
    owned_files(s, good["samples"], good["answer_counts"], found)
    current = time.time()
    for tmp, modified in fs.hidden_files(s, s.root):
        rel = fs.relative(s, tmp)
        name = rel.rsplit("/", 1)[-1]
        age = current - modified
        if rel.startswith(f"{QUARANTINE_DIR}/") or not TEMPORARY.match(name):
            continue
        gone = not s.remote and fs.writer_gone(name)
        if not gone and age < tmp_max_age_s:
            if kept is not None:
                kept.append(rel)
            continue
        try:
            fs.unlink(s, tmp)
        except FileNotFoundError:  # renamed into place or removed meanwhile: not a leftover
            log.info("%s was renamed or removed while the data directory was checked", tmp)
            continue
        if gone:
            reason = f"temporary file of a write whose process is gone, {age / 3600:.1f} h old"
        else:
            reason = f"temporary file of an interrupted write, {age / 3600:.1f} h old"
        found.append(FileProblem(rel, rel.split("/")[0] if "/" in rel else "", reason, "removed"))
    save_verdicts(s)  # replaces the saved verdicts: those of the files found bad are gone
    return found


# --- tables -----------------------------------------------------------------------------------


def write_table(
    s: Facade,
    table: str,
    data: pa.Table,
    partition: dict[str, str] | None = None,
    part: str = "part-0",
    metadata: dict[str, str] | None = None,
) -> Location:
    """See ``Store.write_table``."""
    data = conform(data, table)
    if metadata:
        data = data.replace_schema_metadata(metadata)
    final = fs.child(s, partition_dir(s, table, partition), f"{part}.parquet")
    fs.put(s, final, data)
    return final


def replace_partition(s: Facade, table: str, data: pa.Table, partition: dict[str, str], part: str) -> Location:
    final = s.write_table(table, data, partition, part)
    for file in s.files(table, partition):
        if str(file) != str(final):
            fs.unlink(s, file)
    return final


def delete_partition(s: Facade, table: str, partition: dict[str, str]) -> None:
    for file in s.files(table, partition):
        fs.unlink(s, file)


def read_table(s: Facade, table: str, where: dict[str, str] | None = None) -> pa.Table:
    import pyarrow as pa

    if table == "problems":
        return read_problems(s, where)
    files = s.files(table, where)
    if not files:
        return schema.SCHEMAS[table].empty_table()
    return pa.concat_tables([conform(fs.read_parquet(s, f), table) for f in files])


# --- problems ---------------------------------------------------------------------------------


def load_order(s: Facade, files: list[Location]) -> list[Location]:
    """Problems files oldest load first (by the load time in each footer, ``LOADED_AT_KEY``; a
    file without one, of the layout before loads had files of their own, first): the order
    ``sql/problems_latest.sql`` ranks them in, so a prompt's row is the one of its latest load.
    The footers were read by the files' check: this costs no read."""
    stamped = [(fs.footer_value(s, f, LOADED_AT_KEY) or "", str(f), f) for f in files]
    return [f for _, _, f in sorted(stamped, key=lambda item: item[:2])]


def read_problems(s: Facade, where: dict[str, str] | None = None) -> pa.Table:
    """The problems table (or a dataset's partition): one row per (dataset, prompt), its latest load's."""
    found = load_order(s, s.files("problems", where))
    if not found:
        return schema.PROBLEMS.empty_table()
    return conform(s.files_query("problems_latest", found), "problems")


def add_problems(s: Facade, problems: pa.Table, dataset: str) -> Location | None:
    """Store one load of a dataset's problems as a file of its own, never rewriting another's rows.

    The file is named by its content (``load-<digest>.parquet``) and carries the time of the load
    in its footer: a load adds problems and updates those it loads again (the latest load of a
    prompt wins, see ``read_problems``), and never drops a problem another load stored, which a run
    may refer to. Two loads at once write two files (or, for the same problems, the same file
    twice), so neither loses the other's rows, on a disk and on an object store alike, with no
    lock; and since no load ever removes a file, no reader finds one gone. Loading the same problems
    again rewrites their one file with the new time. Nothing is written for an empty load.
    """
    import pyarrow as pa

    data = conform(problems, "problems")
    if data.num_rows == 0:
        return None
    others = set(data.column("dataset").to_pylist()) - {dataset}
    if others:
        raise StoreError(f"problems of dataset {dataset!r} include rows of {sorted(others)}")
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, data.schema) as writer:
        writer.write_table(data)
    digest = hashlib.sha256(sink.getvalue()).hexdigest()[:16]
    loaded_at = now().strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return s.write_table(
        "problems", data, {"dataset": dataset}, part=f"load-{digest}", metadata={LOADED_AT_KEY: loaded_at}
    )


# --- shards -----------------------------------------------------------------------------------


def shard_location(s: Facade, run_id: str, shard: int) -> Location:
    return fs.child(s, partition_dir(s, "samples", {"run_id": run_id}), f"{shard_name(shard)}.parquet")


def write_shard(
    s: Facade,
    run_id: str,
    shard: int,
    samples: pa.Table,
    digest: str | None = None,
    answer_counts: pa.Table | None = None,
) -> Location:
    """See ``Store.write_shard``."""
    samples = conform(samples, "samples")
    write_id = uuid.uuid4().hex
    metadata = {WRITE_ID_KEY: write_id, **({SHARD_DIGEST_KEY: digest} if digest else {})}
    where = {"run_id": run_id}
    path = s.write_table("samples", samples, where, part=shard_name(shard), metadata=metadata)
    if answer_counts is not None:
        s.write_table("answer_counts", answer_counts, where, part=shard_name(shard), metadata={WRITE_ID_KEY: write_id})
    return path


def stored_answer_counts(s: Facade, run_id: str, shards: dict[int, Location]) -> list[Location] | None:
    """The answer counts files of every one of ``shards``, each written with its shard (the same
    write id); None when any shard lacks them (a run written before they existed, a shard written
    without them, a kill between the two writes), and the samples are read instead."""
    counts = {}
    for loc in s.files("answer_counts", {"run_id": run_id}):
        match = SHARD_FILE.match(str(loc).rsplit("/", 1)[-1])
        if match:
            counts[int(match[1])] = loc
    out = []
    for shard, loc in sorted(shards.items()):
        stored = counts.get(shard)
        write_id = fs.footer_value(s, loc, WRITE_ID_KEY)
        if stored is None or write_id is None or fs.footer_value(s, stored, WRITE_ID_KEY) != write_id:
            log.info("run %s shard %d has no answer counts of its own; reading the samples", run_id, shard)
            return None
        out.append(stored)
    return out


def read_shard(s: Facade, run_id: str, shard: int, columns: list[str] | None = None) -> pa.Table:
    path = s.shard_files(run_id).get(shard)
    if path is None:
        raise StoreError(f"run {run_id} has no shard {shard}")
    return fs.read_parquet(s, path, columns=columns)


def shard_digest(s: Facade, run_id: str, shard: int) -> str | None:
    """The plan digest in one shard file's footer (None: no such file, a bad one, or no digest)."""
    path = shard_location(s, run_id, shard)
    try:
        reason = s.check_file("samples", path)  # this file only: run_shard asks once per shard
    except FileNotFoundError:
        return None
    if reason is not None:
        quarantine_file(s, "samples", path, reason)
        return None
    return fs.footer_value(s, path, SHARD_DIGEST_KEY)


def shard_digests(s: Facade, run_id: str) -> dict[int, tuple[Location, str | None]]:
    """Every shard file of a run: its location and the plan digest in its footer."""
    out = {}
    for path in s.files("samples", {"run_id": run_id}):
        match = SHARD_FILE.match(str(path).rsplit("/", 1)[-1])
        if match:
            out[int(match[1])] = (path, fs.footer_value(s, path, SHARD_DIGEST_KEY))
    return out


def shard_files(s: Facade, run_id: str) -> dict[int, Location]:
    """The run's shard files whose footer digest is their shard's in the stored plan.

    A shard file is kept only if its footer digest equals the digest registered for that shard in
    ``plans``. A file that is not its plan's (a copy under another shard's name, a leftover of
    another plan, a file of a version that wrote no digest) is moved to quarantine, so every
    reader (resume, analysis, report, the ``samples`` view, ``doctor``) counts each (prompt, sample
    index) once. A run with no stored plan (imported before plans existed) keeps all its shard files.
    """
    planned = planned_digests(s, s.files("plans", {"run_id": run_id}))
    return owned_shards(s, run_id, planned.get(run_id, {}), s.shard_digests(run_id))


def planned_digests(s: Facade, plans: list[Location], con: Any = None) -> dict[str, dict[int, str]]:
    """Each run's planned shards and their digests, from the (checked) ``plans`` files: a plan has
    a row per (shard, prompt), DuckDB keeps one per shard (``sql/plan_digests.sql``); on ``con``
    when given (a connection being opened: a second DuckDB database costs a quick command 0.04 s).
    A local file's are kept by its stamp (``PLANNED``, saved with its verdict): an unchanged plan
    is read once."""
    stamps = {str(loc): fs.LATEST.get(str(loc)) for loc in plans}
    todo = plans if s.remote else [loc for loc in plans if stamps[str(loc)] not in PLANNED]
    read: dict[str, dict[str, dict[int, str]]] = {}  # by the file's name as DuckDB read it
    for name, run_id, shard, digest in s.files_rows("plan_digests", todo, con=con) if todo else []:
        read.setdefault(name, {}).setdefault(run_id, {})[shard] = digest
    if s.remote:  # read from local copies under other names: nothing kept
        found = list(read.values())
    else:
        for loc in todo:
            if stamps[str(loc)] is not None:
                PLANNED[stamps[str(loc)]] = read.get(str(loc), {})
                _VERDICTS_NEW.add(str(s.root))
        found = [PLANNED.get(stamps[str(loc)]) or read.get(str(loc), {}) for loc in plans]
    out: dict[str, dict[int, str]] = {}
    for runs in found:
        for run_id, shards in runs.items():
            out.setdefault(run_id, {}).update(shards)
    return out


def owned_shards(
    s: Facade,
    run_id: str,
    planned: dict[int, str],
    found: dict[int, tuple[Location, str | None]],
    problems: list[FileProblem] | None = None,
) -> dict[int, Location]:
    """The shard files of ``found`` that the run's plan owns; the others are quarantined (see
    ``shard_files``; each one's ``FileProblem`` added to ``problems``). No plan (``planned``
    empty): every file is kept."""
    out = {}
    for shard, (path, digest) in sorted(found.items()):
        if not planned or planned.get(shard) == digest:
            out[shard] = path
        else:
            why = "no shard of that number" if shard not in planned else "another content"
            moved = quarantine_file(s, "samples", path, f"shard {shard} is not what run {run_id}'s plan says ({why})")
            if problems is not None:
                problems.append(moved)
    return out


def owned_files(
    s: Facade,
    samples: list[Location],
    counts: list[Location],
    problems: list[FileProblem] | None = None,
    con: Any = None,
) -> tuple[list[Location], list[Location]]:
    """Of the (checked) files of ``samples`` and ``answer_counts``, those the runs' plans own: each
    run's ``shard_files`` (the others quarantined), and the answer counts written with one of those
    (the same shard, the same write id). What the views of both tables read, so a shard copied
    under another name is never counted. ``con``: see ``planned_digests``."""
    by_run: dict[str, dict[int, tuple[Location, str | None]]] = {}
    for path in samples:
        run_id, shard = _run_shard(s, path)
        if shard is not None:
            by_run.setdefault(run_id, {})[shard] = (path, fs.footer_value(s, path, SHARD_DIGEST_KEY))
    plans: dict[str, dict[int, str]] = {}
    if by_run:  # only the plans of these runs
        plans = planned_digests(s, [f for f in s.files("plans") if _run_of(s, f) in by_run], con)
    owned = {run: owned_shards(s, run, plans.get(run, {}), found, problems) for run, found in by_run.items()}
    kept_counts = []
    for path in counts:
        run_id, shard = _run_shard(s, path)
        shard_path = owned.get(run_id, {}).get(shard)
        write_id = fs.footer_value(s, path, WRITE_ID_KEY)
        if shard_path is not None and write_id is not None and fs.footer_value(s, shard_path, WRITE_ID_KEY) == write_id:
            kept_counts.append(path)
    return [p for run in owned.values() for _, p in sorted(run.items())], kept_counts


def _run_of(s: Facade, path: Location) -> str | None:
    """The run id of a (listed) file right under ``<table>/run_id=<id>/``; string operations only
    (``Path.relative_to`` over thousands of shards cost ``connect`` a quarter more)."""
    *_, table, folder, _name = f"/{path}".rsplit("/", 3)
    run = PARTITION.match(folder)
    inside = str(path).startswith(str(s.root)) and table in schema.TABLES
    return run[2] if inside and run and run[1] == "run_id" else None


def _run_shard(s: Facade, path: Location) -> tuple[str, int | None]:
    """The run id and shard number of a shard-named file under ``<table>/run_id=<id>/``."""
    match = SHARD_FILE.match(str(path).rsplit("/", 1)[-1])
    run_id = _run_of(s, path)
    return (run_id, int(match[1])) if match and run_id is not None else ("", None)
