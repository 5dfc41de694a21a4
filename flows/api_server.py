"""Prefect's API server for a one-off run, started early so that its start overlaps the command's.

Without ``PREFECT_API_URL``, Prefect starts a temporary API server (a uvicorn subprocess) the
moment a flow first needs one: it first imports its whole server in the command's own process
(about 4 s of CPU on the 2-core machine, only to reach the class that launches it), then waits
while the subprocess imports the same again and opens the database (about 6 s). A 50-prompt
simulate profile paid that on its critical path: 12 s through Prefect against 3.3 s without.

``start()`` launches the same server, with the same command and environment as Prefect's
``SubprocessASGIServer``, before Prefect is imported, and returns at once; the command goes on
importing Prefect and loading what its run needs while the server starts. ``ensure()``, called by
the flow entry points, waits until it answers and returns its URL, which the flow then uses as
``PREFECT_API_URL`` (so Prefect neither imports its server here nor starts a second one). One
server per process: a second flow in the same process reuses it; it is stopped when the process
exits (``atexit``), and the watchdog (``watchdog.guard``) ends it if the process is killed.

A server of the user's own (``PREFECT_API_URL`` set, in the environment or the Prefect profile)
is always used instead: then nothing is started here, and a run pays no start-up at all.
"""

from __future__ import annotations

import atexit
import gc
import importlib.util
import logging
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO

from pipeline.flows import watchdog

from pipeline.errors import ConfigError, OrchestrationError

log = logging.getLogger(__name__)

STARTUP_TIMEOUT_S = 90.0  # a busy 2-core machine has taken 60 s (Prefect's own default is 20 s)
TIMEOUT_ENV = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"  # Prefect's own setting, honoured if longer
STOP_GRACE_S = 5.0  # SIGTERM, then SIGKILL after this (as Prefect's own server does)
POLL_S = 0.05
STARTUP_FAILED = 3  # uvicorn's exit status when it could not bind its port or its app did not start
PORT_TRIES = 5
# What Prefect's own temporary server is started with: no UI, ephemeral services only.
SERVER_ENV = {"PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1"}
EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit)\b:?")  # a traceback's last line
HINT = "run with --no-prefect, or point PREFECT_API_URL at a running server (`prefect server start`)"


@dataclass
class ApiServer:
    """One uvicorn process serving Prefect's API on loopback; its output goes to ``output``."""

    port: int
    process: subprocess.Popen
    output: IO[bytes]
    ready: bool = False
    started: float = field(default_factory=time.monotonic)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    def answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2) as reply:  # noqa: S310 - loopback
                return reply.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def printed(self, limit: int = 20_000) -> str:
        """The end of what the server printed. Read at an offset: the server shares the file's
        position, which a seek here would move under its writes."""
        fd = self.output.fileno()
        size = os.fstat(fd).st_size
        return os.pread(fd, limit, max(0, size - limit)).decode(errors="replace")

    def reason(self) -> str:
        """Why it failed, in one line: the last exception it printed, else its last line."""
        lines = [line.strip() for line in self.printed().splitlines() if line.strip()]
        errors = [line for line in lines if EXCEPTION_LINE.match(line)]
        return (errors or lines or ["(it printed nothing)"])[-1][:500]

    def port_taken(self) -> bool:
        return self.process.poll() == STARTUP_FAILED and "address already in use" in self.printed().lower()


_server: ApiServer | None = None
_lock = threading.Lock()
_atexit_registered = False


def user_url() -> str | None:
    """The API URL Prefect is configured with: the environment's, else, once Prefect is imported,
    the current settings' (its profile, ``temporary_settings``); read without importing Prefect."""
    if os.environ.get("PREFECT_API_URL"):
        return os.environ["PREFECT_API_URL"]
    if "prefect.settings" in sys.modules:
        from prefect.settings import PREFECT_API_URL

        return PREFECT_API_URL.value() or None
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _launch() -> ApiServer:
    if importlib.util.find_spec("prefect") is None:  # finds the package without importing it
        raise OrchestrationError(f"Prefect is not installed in {sys.executable}; {HINT}")
    port = _free_port()
    output = tempfile.TemporaryFile()
    command = [sys.executable, "-m", "pipeline.flows.api_server", str(port)]
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"} | SERVER_ENV
    process = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=output, stderr=output)
    log.debug("Prefect API server starting on port %d (pid %d)", port, process.pid)
    return ApiServer(port, process, output)


def start() -> None:
    """Launch this process's API server (once) and return at once, unless Prefect is configured
    with a server of the user's. Call it before importing Prefect: the server starts meanwhile."""
    global _server, _atexit_registered
    with _lock:
        if _server is not None and _server.process.poll() is None:
            return
        if user_url():
            return
        watchdog.guard()  # the server carries this process's marker: a kill -9 here ends it too
        _server = _launch()
        if not _atexit_registered:
            atexit.register(stop)
            _atexit_registered = True


def startup_timeout_s() -> float:
    """How long a start may take: ``STARTUP_TIMEOUT_S``, or the user's Prefect setting if longer."""
    try:
        return max(STARTUP_TIMEOUT_S, float(os.environ.get(TIMEOUT_ENV) or 0))
    except ValueError:
        raise ConfigError(f"{TIMEOUT_ENV}={os.environ[TIMEOUT_ENV]!r} is not a number of seconds") from None


def ensure(timeout_s: float | None = None) -> str | None:
    """The URL of this process's API server once it answers (started now if ``start()`` was not
    called); None when Prefect is configured with a server of the user's (``PREFECT_API_URL`` in
    the environment, the Prefect profile or the current settings), which is then used as it is.

    Raises:
        OrchestrationError: the server exited or did not answer within ``timeout_s`` (default
            ``startup_timeout_s()``); the message has its exit status and its reason.
    """
    configured = user_url()
    with _lock:
        ours = _server.url if _server is not None else None
    if configured and configured != ours:
        stop()  # the user's server (set in the Prefect profile, read once Prefect is imported)
        return None
    start()
    with _lock:
        return _wait(startup_timeout_s() if timeout_s is None else timeout_s)


def _wait(timeout_s: float) -> str:
    """Wait (holding the lock) until the server answers; relaunch on another port if its port was
    taken meanwhile."""
    global _server
    assert _server is not None
    if _server.ready and _server.process.poll() is None:
        return _server.url
    deadline = time.monotonic() + timeout_s
    tries = 1
    while True:
        status = _server.process.poll()
        if tries < PORT_TRIES and _server.port_taken():
            tries += 1
            _server.output.close()
            _server = _launch()
            continue
        if status is not None:
            failed, _server = _server, None
            reason = failed.reason()
            failed.output.close()
            raise OrchestrationError(
                f"Prefect's API server (port {failed.port}) exited with status {status} before "
                f"answering: {reason}; {HINT}"
            )
        if _server.answers():
            _server.ready = True
            log.debug("Prefect API server answered after %.2f s", time.monotonic() - _server.started)
            return _server.url
        if time.monotonic() > deadline:
            port, reason = _server.port, _server.reason()
            _stop_locked()
            raise OrchestrationError(
                f"Prefect's API server (port {port}) did not answer within {timeout_s:g} s "
                f"(its last words: {reason}); {HINT}"
            )
        time.sleep(POLL_S)


def running() -> ApiServer | None:
    """This process's API server, if one was started and has not exited."""
    with _lock:
        return _server if _server is not None and _server.process.poll() is None else None


def stop() -> None:
    """Stop this process's API server (nothing when none runs): SIGTERM, then SIGKILL."""
    with _lock:
        _stop_locked()


def _stop_locked() -> None:
    global _server
    server, _server = _server, None
    if server is None:
        return
    if server.process.poll() is None:
        server.process.terminate()
        try:
            server.process.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait()
    server.output.close()


@contextmanager
def gc_paused() -> Iterator[None]:
    """The garbage collector off for a block of imports (Prefect's: a fifth less CPU, measured
    4.1 s against 3.3 s of user time for Prefect and the flows): they build objects that live as
    long as the process, which the collector would only scan."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def serve(port: int) -> None:
    """The server process: Prefect's API app under uvicorn on loopback, as Prefect's own temporary
    server runs it (``uvicorn --factory prefect.server.api.server:create_app``), with the garbage
    collector off until the app is built: its start is imports and pydantic models, objects that
    live as long as the process, and the collector's passes over them cost a quarter of its CPU
    time (5.7 s against 4.3 s of user time for the import and ``create_app``, measured)."""
    gc.disable()
    import uvicorn
    from prefect.server.api import server

    def create_app():
        app = server.create_app()
        gc.freeze()  # what exists now lives as long as the server: never scanned again
        gc.enable()
        return app

    uvicorn.run(create_app, factory=True, host="127.0.0.1", port=port, log_level="error", lifespan="on")


if __name__ == "__main__":
    serve(int(sys.argv[1]))
