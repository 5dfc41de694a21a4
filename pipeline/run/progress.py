"""One progress display per run: samples done of the run's total, rate and time left.

The counting (``RunProgress``) is fed from two places only, whatever the executor: the driver
(``begin``, before each round's shards, with the plan) and ``run_shard`` (``shard_done`` when a
shard is written, ``shard_failed`` when it is not); a shard sampled and graded in this process
(inline, or a Prefect task in this process) also reports its samples as they are sampled and
graded (``update``). A Ray actor's shard advances the count when it is written, since its
samples are counted in another process. So the count is the run's, across shards, rounds and
actors, never one shard's.

An adaptive run's total is the samples planned so far: it grows with each round, and the line
says so with the bound it cannot pass (every prompt at ``n_max``).

A sample counts as done once graded. Rate and time left count a sample half done once sampled,
so they move during a shard's sampling (llama.cpp, vLLM) as well as its grading (simulate).

``display()`` draws the line on a terminal; when the stream is not one (a pipe, a file, CI) it
writes the same line as plain text, without terminal codes, every ``PLAIN_EVERY_S`` seconds while
the count moves, and the last count at the end if it wrote any: a run shorter than that writes nothing.
"""

from __future__ import annotations

import io
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TextIO

SAMPLE, GRADE = "sample", "grade"

# Seconds between two plain lines (a stream that is not a terminal: a log keeps every line).
PLAIN_EVERY_S = 10.0


@dataclass(frozen=True)
class Snapshot:
    """Where the run stands: what the line shows."""

    run_id: str | None
    total: int  # samples planned so far (an adaptive run's grows with each round)
    graded: int  # samples done: sampled and graded (written, or about to be)
    sampled: int
    shards_done: int
    shards: int
    rate: float | None  # samples per second in this process (None before any work)
    eta_s: float | None  # seconds left at that rate
    round: int | None  # an adaptive run's current round
    bound: int | None  # an adaptive run's most samples (every prompt at n_max)


class RunProgress:
    """Counts of one run at a time; thread-safe (Prefect and Ray run shards on several threads)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._run_id: str | None = None
        self._counts: list[int] = []  # samples of each shard of the plan
        self._finished: set[int] = set()
        self._partial: dict[int, dict[str, int]] = {}
        self._round: int | None = None
        self._bound: int | None = None
        self._start_t = 0.0
        self._start_work = 0.0

    def begin(
        self,
        run_id: str,
        shard_counts: list[int],
        finished: set[int],
        round_: int | None = None,
        bound: int | None = None,
    ) -> None:
        """A plan's shards are about to run: ``shard_counts`` the samples of every shard of the
        plan (all rounds so far), ``finished`` those already written (a resumed run, earlier
        rounds). The rate keeps running across the rounds of one run."""
        with self._lock:
            same_run = run_id == self._run_id
            self._run_id = run_id
            self._counts = list(shard_counts)
            self._finished = set(finished)
            self._partial = {}
            self._round, self._bound = round_, bound
            if not same_run:
                self._start_t = self._clock()
                self._start_work = float(self._done_count())

    def update(self, shard: int, stage: str, done: int) -> None:
        """``done`` samples of ``shard`` have passed ``stage`` (SAMPLE or GRADE) so far."""
        with self._lock:
            if shard not in self._finished:
                self._partial.setdefault(shard, {})[stage] = done

    def shard_done(self, shard: int) -> None:
        with self._lock:
            self._partial.pop(shard, None)
            self._finished.add(shard)

    def shard_failed(self, shard: int) -> None:
        """A failed attempt's samples are not done (a retry counts them again from zero)."""
        with self._lock:
            self._partial.pop(shard, None)

    def _done_count(self) -> int:
        return sum(self._counts[s] for s in self._finished if s < len(self._counts))

    def snapshot(self) -> Snapshot:
        with self._lock:
            done = self._done_count()
            sampled = done + sum(p.get(SAMPLE, 0) for p in self._partial.values())
            graded = done + sum(p.get(GRADE, 0) for p in self._partial.values())
            total = sum(self._counts)
            work = (sampled + graded) / 2
            elapsed = self._clock() - self._start_t
            rate = (work - self._start_work) / elapsed if elapsed > 0 and work > self._start_work else None
            eta = max(total - work, 0.0) / rate if rate else None
            return Snapshot(
                self._run_id,
                total,
                min(graded, total),
                min(sampled, total),
                len(self._finished),
                len(self._counts),
                rate,
                eta,
                self._round,
                self._bound,
            )


def _duration(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def describe(snap: Snapshot) -> str:
    """The display's line, e.g. ``samples 12,000/77,184 (16%) | sampled 12,800 | 3,400/s |
    0:00:19 left | shards 46/302``."""
    if snap.run_id is None:
        return "preparing the run: its problems, its plan, the engine"
    pct = 100 * snap.graded / snap.total if snap.total else 0.0
    parts = [f"samples {snap.graded:,}/{snap.total:,} ({pct:.0f}%)"]
    if snap.sampled > snap.graded:
        parts.append(f"sampled {snap.sampled:,}")
    parts.append(f"{snap.rate:,.0f}/s" if snap.rate else "-/s")
    parts.append(f"{_duration(snap.eta_s)} left" if snap.eta_s is not None else "time left -")
    parts.append(f"shards {snap.shards_done}/{snap.shards}")
    if snap.round is not None:
        bound = f", at most {snap.bound:,}" if snap.bound else ""
        parts.append(f"adaptive round {snap.round}: total grows with each round{bound}")
    return " | ".join(parts)


# --- the process's current display: fed by the driver and run_shard, drawn by display() -----------

_current: RunProgress | None = None


def current() -> RunProgress | None:
    """The installed counter (None: no display, nothing counted)."""
    return _current


@contextmanager
def _installed(counter: RunProgress) -> Iterator[None]:
    global _current
    previous, _current = _current, counter
    try:
        yield
    finally:
        _current = previous


@contextmanager
def plain_lines(stream: TextIO, every_s: float = PLAIN_EVERY_S) -> Iterator[RunProgress]:
    """Write the run's line to ``stream`` as plain text every ``every_s`` seconds while its count
    moves, and the last count when the block ends if any line was written."""
    counter = RunProgress()
    stop = threading.Event()
    written: list[str] = []

    def write(final: bool = False) -> None:
        line = describe(counter.snapshot())
        if (written and line == written[-1]) or (final and not written):
            return
        try:
            stream.write(line + "\n")
            stream.flush()
        except (OSError, ValueError):  # a closed pipe must not stop the run
            return
        written.append(line)

    def loop() -> None:
        while not stop.wait(every_s):
            write()

    thread = threading.Thread(target=loop, name="progress-lines", daemon=True)
    with _installed(counter):
        thread.start()
        try:
            yield counter
        finally:
            stop.set()
            thread.join()
            write(final=True)


@contextmanager
def display(stream: TextIO | None = None, refresh_s: float = 0.25) -> Iterator[RunProgress]:
    """Show the run's line on ``stream`` (default standard error) while the block runs: drawn under a
    bar on a terminal, refreshed every ``refresh_s``; else as plain lines (``plain_lines``)."""
    stream = stream if stream is not None else sys.stderr
    if not stream.isatty():
        with plain_lines(stream) as counter:
            yield counter
        return
    from rich.console import Console, Group
    from rich.live import Live
    from rich.progress_bar import ProgressBar
    from rich.text import Text

    counter = RunProgress()

    def render() -> Group:
        snap = counter.snapshot()
        bar = ProgressBar(total=max(snap.total, 1), completed=snap.graded, width=40)
        return Group(bar, Text(describe(snap)))

    try:  # the stream's own width: standard output may be piped while standard error is not
        width = os.get_terminal_size(stream.fileno()).columns or None
    except (OSError, ValueError, io.UnsupportedOperation):
        width = None
    console = Console(file=stream, force_terminal=True, width=width)
    with (
        _installed(counter),
        Live(get_renderable=render, console=console, refresh_per_second=1 / refresh_s, transient=False),
    ):
        yield counter
