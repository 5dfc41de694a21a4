"""The run registry (``runs``), and the lock a process holds on a run while it works on it.

A run's row is one typed record, ``RunRecord``: its JSON columns (``params``, ``versions``,
``adaptive``, ``prior``, ``rounds``) are encoded and decoded here and nowhere else, so a writer
builds a record and a reader gets one. A row that cannot be decoded raises ``RunRecordError``
(naming the run and the field) for every reader alike.

Locally the lock is a ``flock`` on ``runs/run_id=<id>/.lock`` (released by the kernel if the
process dies). An object store has no locks: a lease object there, renewed every
``LEASE_RENEW_S`` by a thread; a lease not renewed for ``LEASE_TTL_S``, or whose holder is a dead
process of this machine, is taken over.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline import schema
from pipeline.errors import DiskFullError, RunRecordError, StoreError
from pipeline.store import files, fs
from pipeline.store.fs import Facade, Location

if TYPE_CHECKING:
    import pyarrow as pa

    from pipeline.adaptive import AdaptiveConfig
    from pipeline.prior import Prior

log = logging.getLogger("pipeline.store")

LEASE_TTL_S = 90.0  # a remote run lease not renewed for this long was left by a dead process
LEASE_RENEW_S = 20.0
# Room kept on a local disk while a run is worked on, freed for the write of its status when the
# disk fills up during the run: a run row is about 7 KB, so the ``failed`` status still lands.
STATUS_RESERVE = 64 * 1024


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return pid > 0


@dataclass(frozen=True)
class RoundCount:
    """One round of an adaptive run as its row records it: prompts sampled, rollouts, shards, and
    prompts still open after it (rows written before ``shards``/``open_after`` existed lack them)."""

    round: int
    prompts: int
    rollouts: int
    shards: int | None = None
    open_after: int | None = None


@dataclass(frozen=True)
class RunRecord:
    """A run's registry row, typed. A field left None is not recorded (``register_run`` keeps the
    stored value there).

    ``adaptive`` is the adaptive settings (None: a fixed-n run); ``prior`` the prior its posteriors
    use and ``rounds`` its rounds so far, both recorded as the rounds go (stored as the columns
    ``prior_a``, ``prior_b``, ``prior`` and ``rounds``).
    """

    run_id: str
    dataset: str | None = None
    model: str | None = None
    backend: str | None = None
    params: dict[str, Any] | None = None
    seed: int | None = None
    prompt_template: str | None = None
    grader: str | None = None
    versions: dict[str, str] | None = None
    n_prompts: int | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    status: schema.RunStatus | None = None
    adaptive: AdaptiveConfig | None = None
    prior: Prior | None = None
    rounds: tuple[RoundCount, ...] | None = None


_PLAIN = ("run_id", "dataset", "model", "backend", "seed", "prompt_template", "grader", "n_prompts")
_PLAIN += ("created_at", "updated_at", "status")


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def encode_run(record: RunRecord) -> dict[str, Any]:
    """The row of the ``runs`` table that holds ``record`` (None where it records nothing)."""
    row: dict[str, Any] = {name: getattr(record, name) for name in _PLAIN}
    row["params"] = None if record.params is None else _dumps(record.params)
    row["versions"] = None if record.versions is None else _dumps(record.versions)
    row["adaptive"] = None if record.adaptive is None else _dumps(record.adaptive.to_dict())
    prior = record.prior
    row["prior_a"], row["prior_b"] = (None, None) if prior is None else (prior.a, prior.b)
    row["prior"] = None if prior is None else _dumps(prior.to_dict())
    if record.rounds is not None:  # no sort_keys: a round's keys in the order they are declared
        row["rounds"] = json.dumps([{k: v for k, v in vars(r).items() if v is not None} for r in record.rounds])
    return row


def decode_run(row: dict[str, Any]) -> RunRecord:
    """The record a ``runs`` row holds.

    Raises:
        RunRecordError: a JSON field does not parse, or its adaptive settings, prior or rounds are
            not valid ones.
    """
    # NumPy comes with them: imported once a row is read, which ``difficulty sql`` never does.
    from pipeline.adaptive import AdaptiveConfig
    from pipeline.prior import Prior

    run_id = row["run_id"]

    def json_field(name: str, kind: type, build=lambda v: v, check=lambda v: None):
        """The field's value: its JSON parsed, built into its record and checked (``check`` says
        what is wrong, or None)."""
        text = row.get(name)
        if text is None or text == "":
            return None
        try:
            value = json.loads(text)
            why = None if isinstance(value, kind) else f"a JSON {kind.__name__} was expected"
            if why is None:
                value = build(value)
                why = check(value)
        except (ValueError, TypeError, KeyError) as exc:  # ConfigError is a ValueError
            why = str(exc)
        if why is not None:
            raise RunRecordError(
                f"run {run_id}: its registry field {name} = {text!r} cannot be read ({why}); it was not "
                f"written by this pipeline: restore runs/run_id={run_id} from a copy, or move it aside and "
                "profile the run again"
            )
        return value

    def rounds_why(rounds: tuple[RoundCount, ...]) -> str | None:
        ints = all(isinstance(getattr(r, f.name), int | None) for r in rounds for f in fields(RoundCount))
        return None if ints else "a round's counts must be integers"

    def prior_why(prior: Prior) -> str | None:
        numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (prior.a, prior.b))
        return None if numbers else "the prior's a and b must be numbers"

    prior = json_field("prior", dict, Prior.from_dict, prior_why)
    if prior is None and row.get("prior_a") is not None and row.get("prior_b") is not None:
        prior = Prior(float(row["prior_a"]), float(row["prior_b"]))  # a row from before the prior's JSON
    return RunRecord(
        **{name: row.get(name) for name in _PLAIN},
        params=json_field("params", dict),
        versions=json_field("versions", dict),
        adaptive=json_field("adaptive", dict, AdaptiveConfig.from_dict),
        prior=prior,
        rounds=json_field("rounds", list, lambda v: tuple(RoundCount(**r) for r in v), rounds_why),
    )


def register_run(s: Facade, run: RunRecord) -> str:
    """See ``Store.register_run``."""
    stored = s.get_run(run.run_id, missing_ok=True)
    given = {f.name: v for f in fields(RunRecord) if (v := getattr(run, f.name)) is not None}
    record = replace(stored, **given) if stored is not None else run
    now = files.now()
    record = replace(record, created_at=record.created_at or now, updated_at=now, status=record.status or "created")
    _write_run(s, record)
    return run.run_id


def update_run(s: Facade, run_id: str, **changes: Any) -> RunRecord:
    """See ``Store.update_run``."""
    record = replace(s.get_run(run_id), **changes, updated_at=files.now())
    _write_run(s, record)
    return record


def _write_run(s: Facade, record: RunRecord) -> None:
    import pyarrow as pa

    row = encode_run(record)
    data = pa.Table.from_pylist([{k: row.get(k) for k in schema.RUNS.names}], schema=schema.RUNS)
    s.write_table("runs", data, {"run_id": record.run_id}, part="run")


def get_run(s: Facade, run_id: str, *, missing_ok: bool = False) -> RunRecord | None:
    rows = s.read_table("runs", {"run_id": run_id}).to_pylist()
    if not rows:
        if missing_ok:
            return None
        known = s.list_runs().column("run_id").to_pylist()
        where = "" if known or s.exists(s.root) else f" (there is no data directory at {str(s.root)!r})"
        raise StoreError(f"unknown run {run_id!r}; known runs: {known or 'none'}{where}")
    return decode_run(rows[0])


def set_run_status(s: Facade, run_id: str, status: schema.RunStatus) -> RunRecord:
    if status not in schema.RUN_STATUSES:
        raise StoreError(f"run status {status!r} is unknown: allowed {', '.join(schema.RUN_STATUSES)}")
    record = replace(s.get_run(run_id), status=status, updated_at=files.now())
    try:
        _write_run(s, record)
    except DiskFullError:
        # The disk filled up during the run: free the room kept for this write and try once more.
        reserve = None if s.remote else Path(reserve_path(s, run_id))
        if reserve is None or not reserve.exists():
            raise
        reserve.unlink()
        _write_run(s, record)
    return record


def list_runs(s: Facade) -> pa.Table:
    runs = s.read_table("runs")
    if runs.num_rows:
        runs = runs.sort_by([("created_at", "descending")])
        stored = runs.column("status").to_pylist()
        status = [
            schema.RUN_INTERRUPTED if st == "sampling" and not s.run_is_live(r) else st
            for r, st in zip(runs.column("run_id").to_pylist(), stored, strict=True)
        ]
        if status != stored:  # a new column only then: building one from a list imports pandas (0.15 s)
            import pyarrow as pa

            runs = runs.set_column(runs.schema.get_field_index("status"), "status", pa.array(status, pa.string()))
    return runs


def lock_path(s: Facade, run_id: str) -> Location:
    return fs.child(s, files.partition_dir(s, "runs", {"run_id": run_id}), ".lock")


@contextmanager
def lock_run(s: Facade, run_id: str) -> Iterator[None]:
    """See ``Store.lock_run``."""
    if s.remote:
        with _lease(s, run_id):
            yield
        return
    path = Path(lock_path(s, run_id))
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
        reserve = Path(reserve_path(s, run_id))
        try:
            reserve.write_bytes(bytes(STATUS_RESERVE))
        except OSError as exc:  # the disk is full already: the run's first write will say so
            log.warning("run %s: no room for the %d bytes kept for its status (%s)", run_id, STATUS_RESERVE, exc)
            reserve.unlink(missing_ok=True)
        try:
            yield
        finally:
            reserve.unlink(missing_ok=True)
            fcntl.flock(fh, fcntl.LOCK_UN)


def reserve_path(s: Facade, run_id: str) -> Location:
    """The room kept for a run's status while it is worked on (a hidden file, never listed)."""
    return fs.child(s, files.partition_dir(s, "runs", {"run_id": run_id}), ".status-reserve")


def _read_lease(s: Facade, run_id: str) -> dict | None:
    loc = lock_path(s, run_id)
    try:
        lease = json.loads(fs.read_bytes(s, loc))
    except (FileNotFoundError, ValueError):
        return None
    if lease.get("host") == socket.gethostname() and not _pid_alive(int(lease.get("pid", 0))):
        return None  # its holder died on this machine: no need to wait for the lease to age
    return lease if time.time() - float(lease.get("renewed", 0)) < LEASE_TTL_S else None


@contextmanager
def _lease(s: Facade, run_id: str) -> Iterator[None]:
    held = _read_lease(s, run_id)
    me = f"pid {os.getpid()} on {socket.gethostname()}"
    token = uuid.uuid4().hex
    if held is not None:
        raise StoreError(f"run {run_id} is being worked on by {held.get('holder')}; wait for it or stop it")
    loc = lock_path(s, run_id)

    def renew() -> None:
        lease = {"holder": me, "host": socket.gethostname(), "pid": os.getpid(), "token": token}
        fs.put(s, loc, json.dumps({**lease, "renewed": time.time()}).encode())

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
        lease = _read_lease(s, run_id)
        if lease is not None and lease.get("token") == token:
            fs.unlink(s, loc)


def run_is_live(s: Facade, run_id: str) -> bool:
    """See ``Store.run_is_live``."""
    if s.remote:
        return _read_lease(s, run_id) is not None
    path = Path(lock_path(s, run_id))
    if not path.exists():
        return False
    with open(path) as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fh, fcntl.LOCK_UN)
        return False
