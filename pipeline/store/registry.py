"""The run registry (``runs``), and the lock a process holds on a run while it works on it.

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
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline import schema
from pipeline.errors import DiskFullError, StoreError
from pipeline.store import files, fs
from pipeline.store.fs import Facade, Location

if TYPE_CHECKING:
    import pyarrow as pa

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


def register_run(s: Facade, run: dict[str, Any]) -> str:
    """See ``Store.register_run``."""
    run_id = run["run_id"]
    row = dict(s.get_run(run_id, missing_ok=True) or {})
    row.update({k: v for k, v in run.items() if v is not None})
    for name in ("params", "versions"):
        if isinstance(row.get(name), dict):
            row[name] = json.dumps(row[name], sort_keys=True)
    row.setdefault("created_at", files.now())
    row["updated_at"] = files.now()
    row.setdefault("status", "created")
    _write_run(s, row)
    return run_id


def _write_run(s: Facade, row: dict[str, Any]) -> None:
    import pyarrow as pa

    names = schema.RUNS.names
    data = pa.Table.from_pylist([{k: row.get(k) for k in names}], schema=schema.RUNS)
    s.write_table("runs", data, {"run_id": row["run_id"]}, part="run")


def get_run(s: Facade, run_id: str, *, missing_ok: bool = False) -> dict | None:
    rows = s.read_table("runs", {"run_id": run_id}).to_pylist()
    if not rows:
        if missing_ok:
            return None
        known = s.list_runs().column("run_id").to_pylist()
        raise StoreError(f"unknown run {run_id!r}; known runs: {known or 'none'}")
    return rows[0]


def set_run_status(s: Facade, run_id: str, status: schema.RunStatus) -> None:
    if status not in schema.RUN_STATUSES:
        raise StoreError(f"run status {status!r} is unknown: allowed {', '.join(schema.RUN_STATUSES)}")
    row = s.get_run(run_id)
    row["status"] = status
    row["updated_at"] = files.now()
    try:
        _write_run(s, row)
    except DiskFullError:
        # The disk filled up during the run: free the room kept for this write and try once more.
        reserve = None if s.remote else Path(reserve_path(s, run_id))
        if reserve is None or not reserve.exists():
            raise
        reserve.unlink()
        _write_run(s, row)


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
