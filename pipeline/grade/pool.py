"""math-verify in a pool of killable worker processes.

Items that the numeric fast path of :mod:`pipeline.grade.extract` cannot settle are graded by
math-verify, gold first: ``verify(parse(gold_in_a_box), parse(text))``, where ``text`` is what
:func:`pipeline.grade.extract.read_completion` chose: the completion itself (at most
:data:`~pipeline.grade.extract.MAX_PARSE_CHARS` of it), a ``####`` line in a box, or the number
read from plain text. It runs in worker processes (its timeouts rely on ``signal``, which only
works in a main thread). Each item has a soft deadline (a ``SIGALRM`` raised inside the worker)
and a hard deadline: a worker that does not answer in time is killed and replaced, and its other
items are re-queued, so one pathological item can neither hang the stage nor stall the rest.

A worker is a fresh interpreter started with
``python -c "from pipeline.grade.pool import _worker_entry; _worker_entry()"``; it imports this
module, :mod:`pipeline.grade.extract` and the package's ``__init__``, none of which import
pyarrow at module level, so a worker starts without it.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import pickle
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any, Self

from pipeline.errors import ConfigError
from pipeline.grade.extract import (
    BOX_NOT_PARSED,
    CORRECT,
    ERROR,
    HARD_GRACE_MIN_S,
    INCORRECT,
    MAX_ANSWER_CHARS,
    TIMEOUT,
    UNPARSED,
    GradeConfig,
    is_lone_box,
    latex_wrap,
)

logger = logging.getLogger(__name__)

# Limits of the pool. An item's hard deadline is GradeConfig.hard_timeout_s (HARD_GRACE_MIN_S and
# HARD_GRACE_FRACTION live with GradeConfig in pipeline.grade.extract).
WORKER_START_TIMEOUT_S = 120.0
MAX_START_FAILURES = 3
GOLD_CACHE_SIZE = 8_192
CHECK_TIMEOUT_S = 10.0  # the self-check after a soft timeout (7 small pairs, ~0.1 s when warm)
MAX_BATCH_BYTES = 64 * 1024  # a batch stops growing at about this size, whatever batch_size

# (gold, text, gold cache) -> (status, reason) or (status, reason, extracted answer)
GradeFn = Callable[[str, str, dict[str, Any]], tuple[str, ...]]
Result = tuple[str, str, str | None]  # status, reason, the answer math-verify extracted


# --------------------------------------------------------------------------- math-verify worker


class _SoftTimeout(BaseException):
    """Raised by SIGALRM inside a worker; a BaseException so math-verify's handlers let it pass."""


_TIMED_OUT = object()  # gold cache marker: parsing this gold ran out of time once already
_alarm_armed = False


def _on_alarm(signum: int, frame: Any) -> None:
    if _alarm_armed:
        raise _SoftTimeout()


def math_verify_grade(gold: str, text: str, gold_cache: dict[str, Any]) -> tuple[str, str, str | None]:
    """Grades one item with math-verify, gold first; gold parses are cached.

    The gold is parsed in a box (:func:`~pipeline.grade.extract.latex_wrap`); ``text`` is
    parsed as it is, the way math-verify parses a whole completion. Runs inside a worker process
    with math-verify's own timeouts disabled: the worker's alarm and the pool's kill bound the
    time instead.

    Args:
        gold: The gold answer.
        text: What to parse for the answer (see :func:`pipeline.grade.extract.read_completion`).
        gold_cache: Per-worker cache of parsed gold answers, keyed by the gold string.

    Returns:
        ``(status, reason, extracted)``: ``extracted`` is math-verify's string of the answer it
        took (its fallback string), or None when it found none.
    """
    from math_verify import parse, verify

    parsed_gold = gold_cache.get(gold)
    if parsed_gold is _TIMED_OUT:
        return TIMEOUT, "parsing the gold answer timed out", None
    if parsed_gold is None:
        if len(gold_cache) >= GOLD_CACHE_SIZE:
            gold_cache.clear()
        try:
            parsed_gold = parse(latex_wrap(gold), parsing_timeout=None)
        except _SoftTimeout:
            gold_cache[gold] = _TIMED_OUT
            raise
        gold_cache[gold] = parsed_gold
    if not parsed_gold:
        return ERROR, "math-verify could not parse the gold answer", None
    parsed = parse(text, parsing_timeout=None)
    # The fallback string, not str(expr): printing a huge sympy expression can take forever.
    extracted = next((p for p in reversed(parsed) if isinstance(p, str)), None)
    note = "" if not is_lone_box(text) or _box_parsed(parsed, extracted) else BOX_NOT_PARSED
    if extracted is not None:
        extracted = extracted[:MAX_ANSWER_CHARS]
    if not parsed:
        return UNPARSED, "math-verify found no answer" + note, None
    if verify(parsed_gold, parsed, timeout_seconds=None):
        return CORRECT, "math-verify: equivalent" + note, extracted
    return INCORRECT, "math-verify: not equivalent" + note, extracted


def _box_parsed(parsed: list[Any], first: str | None) -> bool:
    """Whether math-verify's answer for a lone box is the box's content (not something inside it
    that it fell back to). ``first`` is its string of the first candidate tried, the box's
    normalised content; parsing it again is a hit in math-verify's own cache when it parsed."""
    from math_verify.parser import parse_latex_cached

    if first is None or len(parsed) < 2 or isinstance(parsed[0], str):
        return False
    try:
        parse_latex_cached(first)
    except Exception:  # noqa: BLE001 - any parser error means the box did not parse; the caller redoes it
        return False
    return True


# Pairs that load math-verify's lazy parts (grammars, regexes, sympy submodules) before any item
# is timed, and that a healthy worker must grade "correct": the canary after a soft timeout.
_WARM_UP = (
    ("\\frac{1}{2}", "so it is 0.5"),
    ("x+1", "\\boxed{1+x}"),
    ("\\sqrt{2}", "$2^{1/2}$"),
    ("(1,2]", "\\boxed{(1, 2]}"),
    ("\\{1,2\\}", "\\boxed{\\{2,1\\}}"),
    ("x=3", "The answer is 3."),
    ("3\\pi", "$3\\pi$"),
)


def _healthy() -> bool:
    cache: dict[str, Any] = {}
    return all(math_verify_grade(g, p, cache)[0] == CORRECT for g, p in _WARM_UP)


def _healthy_within(timeout_s: float) -> bool:
    global _alarm_armed
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    _alarm_armed = True
    try:
        ok = _healthy()
        _alarm_armed = False
        return ok
    except _SoftTimeout:
        return False
    except Exception:  # noqa: BLE001 - any failure means this worker is not to be trusted
        return False
    finally:
        _alarm_armed = False
        signal.setitimer(signal.ITIMER_REAL, 0)


def _worker_main(conn_in: Connection, conn_out: Connection, timeout_s: float, grade_fn: GradeFn) -> None:
    """Worker loop: receive batches of ``(key, gold, text)``, send one result per item.

    After a soft timeout the worker checks itself on known pairs and retires (tells the parent
    and exits) if the interruption left math-verify or sympy in a bad state.
    """
    global _alarm_armed
    # Ctrl-C goes to the whole process group; the parent decides when workers stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGALRM, _on_alarm)
    # Timeouts are handled here; math-verify would warn about disabled ones in every process.
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    cache: dict[str, Any] = {}
    try:
        # Outside any alarm: an import or lazy set-up interrupted half-way leaves sympy broken.
        if not _healthy():
            raise RuntimeError("math-verify fails its warm-up checks")
        conn_out.send(("ready",))
        while True:
            batch = conn_in.recv()
            if batch is None:
                return
            for key, gold, pred in batch:
                interrupted = False
                signal.setitimer(signal.ITIMER_REAL, timeout_s)
                _alarm_armed = True
                extracted = None
                try:
                    status, reason, *rest = grade_fn(gold, pred, cache)
                    _alarm_armed = False
                    extracted = rest[0] if rest else None
                except _SoftTimeout:
                    status, reason = TIMEOUT, f"exceeded {timeout_s:g}s"
                    interrupted = True
                except Exception as exc:  # noqa: BLE001 - a parser crash is a status, not a loss
                    status, reason = ERROR, f"{type(exc).__name__}: {str(exc)[:200]}"
                finally:
                    _alarm_armed = False
                    signal.setitimer(signal.ITIMER_REAL, 0)
                conn_out.send((key, status, reason, extracted))
                if interrupted:
                    conn_out.send(("checking",))  # gives the check its own time at the parent
                    if not _healthy_within(max(timeout_s, CHECK_TIMEOUT_S)):
                        conn_out.send(("retire",))
                        return
                    conn_out.send(("checked",))  # restarts the parent's clock for the next item
    except (EOFError, BrokenPipeError, KeyboardInterrupt):
        return


def _worker_entry() -> None:
    """Entry point of a worker process (``python -c``): arguments are JSON in argv[1]."""
    args = json.loads(sys.argv[1])
    sys.path[:] = args["sys_path"]  # so a grade_fn from the caller's modules can be imported
    module_name, _, qualname = args["grade_fn"].partition(":")
    grade_fn = importlib.import_module(module_name)
    for part in qualname.split("."):
        grade_fn = getattr(grade_fn, part)
    conn_in = Connection(args["fd_in"], writable=False)
    conn_out = Connection(args["fd_out"], readable=False)
    _worker_main(conn_in, conn_out, float(args["timeout_s"]), grade_fn)


# --------------------------------------------------------------------------- the pool


def _function_ref(fn: GradeFn) -> str:
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not module or "<" in qualname:
        raise ConfigError(f"grade_fn={fn!r} must be a module-level function")
    if module == "__main__":
        raise ConfigError(f"grade_fn={fn!r} must live in an importable module, not in __main__")
    return f"{module}:{qualname}"


def _worker_env() -> dict[str, str]:
    # The worker must import this package even when the caller runs it from a source tree:
    # put the directory that holds ``pipeline/`` (this file is pipeline/grade/pool.py) first.
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def _pipe_capacity(fd: int) -> int:
    """Grows the pipe to 1 MiB where Linux allows it; returns its capacity in bytes."""
    try:
        import fcntl

        try:
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, 1 << 20)
        except OSError as exc:
            # Above /proc/sys/fs/pipe-max-size (or not allowed): keep the default size.
            logger.debug("could not grow pipe fd %d to 1 MiB (%s); keeping its default size", fd, exc)
        return int(fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ))
    except (ImportError, AttributeError, OSError):
        return 16 * 1024  # the smallest capacity POSIX systems give a pipe


class _Worker:
    """One worker: a fresh interpreter started with ``python -c`` and two pipes.

    A plain subprocess rather than multiprocessing: nothing of the caller (threads, its
    ``__main__`` script) is forked or re-imported, and killing it is a plain SIGKILL.
    """

    def __init__(self, config: GradeConfig, grade_fn_ref: str) -> None:
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        args = {
            "fd_in": to_child_r,
            "fd_out": from_child_w,
            "timeout_s": float(config.timeout_s),
            "grade_fn": grade_fn_ref,
            "sys_path": [p for p in sys.path if isinstance(p, str)],
        }
        try:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    "from pipeline.grade.pool import _worker_entry; _worker_entry()",
                    json.dumps(args),
                ],
                pass_fds=(to_child_r, from_child_w),
                stdin=subprocess.DEVNULL,
                close_fds=True,
                env=_worker_env(),
            )
        except BaseException:
            for fd in (to_child_r, to_child_w, from_child_r, from_child_w):
                os.close(fd)
            raise
        # Only the child keeps its ends, so the parent reads EOF the moment the child dies.
        os.close(to_child_r)
        os.close(from_child_w)
        self.queue_bytes = _pipe_capacity(to_child_w) // 2  # what may wait unread in the pipe
        self.conn_in = Connection(from_child_r, writable=False)
        self.conn_out = Connection(to_child_w, readable=False)
        self.started = time.monotonic()
        self.ready = False
        self.checking = False  # running its self-check after a soft timeout
        self.inflight: deque[int] = deque()  # item ids sent, in the order it grades them
        self.batch_sizes: deque[int] = deque()  # items left of each batch sent
        self.last_event = self.started

    @property
    def pid(self) -> int:
        return self.proc.pid

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            logger.warning("grading worker %s did not exit after SIGKILL", self.pid)
        self.conn_in.close()
        self.conn_out.close()


class GradingPool:
    """Worker processes running math-verify with per-item deadlines.

    Each item gets a soft deadline of ``config.timeout_s`` (SIGALRM inside the worker) and a
    hard one of ``config.hard_timeout_s``, after which the worker is killed, its item marked
    ``timeout``, its other items re-queued and a replacement started.

    Use it as a context manager to keep the workers across several :func:`grade_table` calls
    (each call otherwise starts and stops its own workers, about a second of start-up).

    Args:
        config: Worker count, timeout and batch size.
        grade_fn: Module-level function ``(gold, text, gold_cache) -> (status, reason)`` or
            ``(status, reason, extracted)`` run in the workers; :func:`math_verify_grade` unless
            a test substitutes another.
    """

    def __init__(self, config: GradeConfig, grade_fn: GradeFn = math_verify_grade) -> None:
        self.config = config
        self._grade_fn_ref = _function_ref(grade_fn)
        self._workers: list[_Worker] = []
        self.replaced = 0  # workers killed (hard timeout) or lost (crash) and replaced
        self._start_failures = 0

    def __enter__(self) -> Self:
        self._ensure_workers()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def worker_pids(self) -> list[int]:
        """Process ids of the current workers."""
        return [w.pid for w in self._workers]

    def _ensure_workers(self) -> None:
        while len(self._workers) < self.config.workers:
            self._workers.append(_Worker(self.config, self._grade_fn_ref))

    def close(self) -> None:
        """Stops the workers. They hold nothing worth a clean exit, so they are killed (an
        interpreter with sympy loaded takes a second or more to shut down politely)."""
        for w in self._workers:
            w.kill()
        self._workers = []

    def _deadline(self, w: _Worker) -> float:
        """When a busy worker that has not spoken since ``w.last_event`` is given up on."""
        if not w.ready:
            return w.started + WORKER_START_TIMEOUT_S
        if w.checking:
            return w.last_event + max(self.config.timeout_s, CHECK_TIMEOUT_S) + HARD_GRACE_MIN_S
        return w.last_event + self.config.hard_timeout_s

    def _replace(self, w: _Worker) -> None:
        w.kill()
        self._workers.remove(w)
        self.replaced += 1
        self._ensure_workers()

    def grade(
        self,
        pairs: Sequence[tuple[str, str]],
        on_done: Callable[[int], None] | None = None,
    ) -> list[Result]:
        """Grades ``(gold, text)`` pairs; returns ``(status, reason, extracted)`` per pair, in order.

        Args:
            pairs: Gold answers and the texts to parse for the answer. Pairs sharing a gold are
                best kept adjacent so each worker parses that gold once.
            on_done: Called with the index of each pair as soon as it is graded.

        Returns:
            One ``(status, reason, extracted)`` per pair; ``extracted`` is None when the grade
            function gave none (or the item timed out or crashed).

        Raises:
            RuntimeError: If workers repeatedly die, or hang, before becoming ready.
        """
        try:
            return self._grade(pairs, on_done)
        except BaseException:
            # Workers may hold items of this call; they must not answer into the next one.
            self.close()
            raise

    def _grade(
        self,
        pairs: Sequence[tuple[str, str]],
        on_done: Callable[[int], None] | None,
    ) -> list[Result]:
        results: list[Result | None] = [None] * len(pairs)
        remaining = len(pairs)
        pending: deque[int] = deque(range(len(pairs)))
        batch_size = self.config.batch_size
        hard_timeout = self.config.hard_timeout_s
        self._ensure_workers()

        def finish(i: int, status: str, reason: str, extracted: str | None = None) -> None:
            nonlocal remaining
            if results[i] is None:
                results[i] = (status, reason, extracted)
                remaining -= 1
                if on_done is not None:
                    on_done(i)

        def lose_worker(w: _Worker, status: str, reason: str) -> None:
            # The item at the head was running; the rest go back to the front of the queue.
            if w.inflight:
                finish(w.inflight.popleft(), status, reason)
            pending.extendleft(reversed(w.inflight))
            w.inflight.clear()
            w.batch_sizes.clear()
            self._replace(w)

        while remaining:
            now = time.monotonic()
            dead: list[_Worker] = []
            for w in self._workers:
                # Up to two batches in flight, so a worker never waits on the parent between
                # batches. A batch the worker is not already waiting for must fit in the pipe:
                # a write into a full pipe would block this loop behind a hung worker, and then
                # nothing could kill it.
                while pending and len(w.batch_sizes) < 2:
                    idle = not w.inflight
                    ids, size = [], 0
                    while pending and len(ids) < batch_size and size < MAX_BATCH_BYTES:
                        i = pending.popleft()
                        ids.append(i)
                        size += len(pairs[i][0]) + len(pairs[i][1]) + 32
                    data = pickle.dumps([(i, pairs[i][0], pairs[i][1]) for i in ids])
                    if (w.batch_sizes or not w.ready) and len(data) > w.queue_bytes:
                        pending.extendleft(reversed(ids))
                        break
                    if idle:
                        w.last_event = now  # its clock starts now
                    try:
                        w.conn_out.send_bytes(data)
                    except OSError:
                        pending.extendleft(reversed(ids))
                        dead.append(w)
                        break
                    w.inflight.extend(ids)
                    w.batch_sizes.append(len(ids))

            busy = {w.conn_in: w for w in self._workers if w.inflight or not w.ready}
            deadlines = [self._deadline(w) for w in busy.values()]
            wait_s = min([0.5, *(d - now for d in deadlines)])
            for conn in wait(list(busy), timeout=max(0.0, wait_s)):
                w = busy[conn]
                try:
                    while conn.poll():
                        msg = conn.recv()
                        w.last_event = time.monotonic()
                        if msg[0] == "ready":
                            w.ready = True
                            self._start_failures = 0
                            continue
                        if msg[0] == "checking":
                            w.checking = True
                            continue
                        if msg[0] == "checked":
                            w.checking = False
                            continue
                        if msg[0] == "retire":
                            # Its remaining items never started: re-queue them, blame none.
                            logger.warning(
                                "grading worker %s failed its check after a timeout; replacing it",
                                w.pid,
                            )
                            pending.extendleft(reversed(w.inflight))
                            w.inflight.clear()
                            w.batch_sizes.clear()
                            self._replace(w)
                            break
                        key, status, reason, extracted = msg
                        if w.inflight and w.inflight[0] == key:
                            w.inflight.popleft()
                            w.batch_sizes[0] -= 1
                            if not w.batch_sizes[0]:
                                w.batch_sizes.popleft()
                        finish(key, status, reason, extracted)
                except (EOFError, OSError):
                    dead.append(w)

            for w in dict.fromkeys(dead):
                if w not in self._workers:
                    continue  # retired and replaced already
                try:
                    code = w.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    code = None
                if not w.ready:
                    self._start_failures += 1
                    if self._start_failures >= MAX_START_FAILURES:
                        self.close()
                        raise RuntimeError(
                            f"grading workers die on start-up (exit code {code}); is math-verify "
                            "installed? pip install 'difficulty-pipeline' (it depends on "
                            "math-verify)"
                        )
                logger.warning("grading worker %s died (exit code %s); replacing it", w.pid, code)
                lose_worker(w, ERROR, f"worker died (exit code {code})")

            now = time.monotonic()
            for w in list(self._workers):
                if w.ready and w.inflight and now > self._deadline(w):
                    logger.warning(
                        "grading worker %s spent over %.1fs on one item; killing it",
                        w.pid,
                        hard_timeout,
                    )
                    lose_worker(w, TIMEOUT, f"no result within {hard_timeout:g}s; worker killed")
                elif not w.ready and now - w.started > WORKER_START_TIMEOUT_S:
                    self.close()
                    raise RuntimeError(f"grading worker did not start within {WORKER_START_TIMEOUT_S:g}s")
        return [r for r in results if r is not None]
