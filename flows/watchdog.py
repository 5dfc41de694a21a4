"""Nothing a profile starts outlives it: a watchdog ends this process's children if it is killed.

Prefect's ephemeral API server is a uvicorn subprocess; when ``difficulty profile`` is killed with
SIGKILL it is re-parented to PID 1 and keeps running (about 200 MB each time). ``guard()`` starts
a small watchdog process that blocks on a pipe whose only writer is this process: end of file
means this process is gone (killed, or exited). It then terminates every process that carries
this process's marker in its environment: everything started after ``guard()`` inherits it (the
API server, grading workers), and nothing else does. A process started with an environment of
its own (a local Ray cluster's agents) is named to the watchdog by ``also_end``.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

log = logging.getLogger(__name__)

MARKER = "DIFFICULTY_GUARD"
GRACE_S = 5.0  # SIGTERM first; SIGKILL what is still there after this

_writer: int | None = None  # the pipe's write end, held open for this process's lifetime


def guard() -> None:
    """Start this process's watchdog (once); later children are ended when this process ends."""
    global _writer
    if _writer is not None and os.environ.get(MARKER):
        return
    token = uuid.uuid4().hex
    read_end, write_end = os.pipe()  # close-on-exec: no child started later holds the write end
    env = {k: v for k, v in os.environ.items() if k != MARKER}  # the watchdog is not its own victim
    subprocess.Popen(
        [sys.executable, "-m", "pipeline.flows.watchdog", token],
        stdin=read_end,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        start_new_session=True,  # Ctrl-C in the terminal reaches the CLI, not its watchdog
    )
    os.close(read_end)
    _writer = write_end
    os.environ[MARKER] = token


def also_end(needle: str) -> None:
    """Have the watchdog also end the processes holding a file open whose path contains ``needle``:
    the processes a local Ray cluster starts with an environment of their own (its dashboard and
    runtime-env agents, which do not carry the marker), named by the cluster's session folder.
    Sent down the watchdog's pipe; nothing happens without ``guard()``."""
    if _writer is not None and "\n" not in needle:
        os.write(_writer, needle.encode() + b"\n")


def marked(token: str, needles: tuple[str, ...] = ()) -> list[int]:
    """The processes whose environment carries ``MARKER=token``, or that hold open a file whose
    path contains one of ``needles``."""
    needle = f"{MARKER}={token}".encode() + b"\0"
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:  # gone meanwhile, or another user's process: not ours either way
            continue
        if needle in environ + b"\0" or (needles and any(n in f for f in _open_files(entry) for n in needles)):
            found.append(int(entry.name))
    return found


def _open_files(proc: Path) -> list[str]:
    """The files a process holds open (a Ray agent renames its command line, but keeps its log
    files in its session folder open)."""
    try:
        return [os.readlink(fd) for fd in (proc / "fd").iterdir()]
    except OSError:
        return []


def end_marked(token: str, grace_s: float = GRACE_S, needles: tuple[str, ...] = ()) -> list[int]:
    """SIGTERM every marked process, then SIGKILL those still alive after ``grace_s``."""
    victims = marked(token, needles)
    for pid in victims:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and marked(token, needles):
        time.sleep(0.1)
    for pid in marked(token, needles):
        _signal(pid, signal.SIGKILL)
    return victims


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        log.debug("process %d already ended", pid)


def main() -> None:
    token = sys.argv[1]
    sent = sys.stdin.buffer.read()  # blocks until the guarded process is gone (also_end's lines)
    end_marked(token, needles=tuple(line for line in sent.decode(errors="replace").splitlines() if line))


if __name__ == "__main__":
    main()
