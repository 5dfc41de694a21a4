"""The run's one progress display: counts of the run (not of a shard) across shards, rounds,
threads and a retried Prefect task; plain lines when standard error is not a terminal."""

from __future__ import annotations

import fcntl
import io
import os
import pty
import re
import select
import struct
import termios
import threading
import time

import pytest
from pipeline.flows import executors, prefect_flows

from pipeline import run
from pipeline.run import progress
from pipeline.run.progress import GRADE, SAMPLE, RunProgress

SIM = {"backend": "simulate", "limit": 7, "n": 4, "shard_size": 2, "grade_workers": 1, "report": False}


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class Recorder(RunProgress):
    """The counter, keeping every snapshot taken after an event (what a display could show)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[progress.Snapshot] = []

    def update(self, shard: int, stage: str, done: int) -> None:
        super().update(shard, stage, done)
        self.seen.append(self.snapshot())

    def shard_done(self, shard: int) -> None:
        super().shard_done(shard)
        self.seen.append(self.snapshot())


@pytest.fixture
def counter(monkeypatch) -> Recorder:
    """A counter installed as the process's display (without drawing anything)."""
    rec = Recorder()
    monkeypatch.setattr(progress, "_current", rec)
    return rec


def test_counts_add_up_across_shards_with_rate_and_time_left():
    clock = Clock()
    c = RunProgress(clock)
    assert progress.describe(c.snapshot()).startswith("preparing the run")  # no plan yet: no 0/0
    c.begin("r", [10, 10, 6], finished={0})  # a resumed run: shard 0 was written before
    snap = c.snapshot()
    assert (snap.total, snap.graded, snap.shards_done, snap.shards) == (26, 10, 1, 3)
    assert snap.rate is None and snap.eta_s is None  # nothing done in this process yet
    c.update(1, SAMPLE, 10)
    c.update(1, GRADE, 4)
    c.update(2, SAMPLE, 6)
    clock.t += 2.0
    snap = c.snapshot()
    assert (snap.graded, snap.sampled) == (14, 26)
    # half a unit per sampled sample, the other half when graded: (16 / 2 + 4 / 2) / 2 s
    assert snap.rate == pytest.approx(5.0)
    assert snap.eta_s == pytest.approx((26 - (26 + 14) / 2) / 5.0)
    c.shard_done(1)
    c.shard_failed(2)  # its samples are not done: a retry counts them from zero
    snap = c.snapshot()
    assert (snap.graded, snap.sampled, snap.shards_done) == (20, 20, 2)
    c.update(1, GRADE, 3)  # a late event of a finished shard counts nothing twice
    assert c.snapshot().graded == 20


def test_an_adaptive_total_grows_by_round_and_says_so():
    c = RunProgress(Clock())
    c.begin("r", [8, 8], finished=set(), round_=0, bound=40)
    c.shard_done(0)
    c.shard_done(1)
    c.begin("r", [8, 8, 5], finished={0, 1}, round_=1, bound=40)
    snap = c.snapshot()
    assert (snap.total, snap.graded, snap.round) == (21, 16, 1)
    line = progress.describe(snap)
    assert "samples 16/21 (76%)" in line and "round 1" in line and "grows" in line and "at most 40" in line
    c.begin("other", [3], finished=set())
    assert "round" not in progress.describe(c.snapshot())


def _check_run_counts(counter: Recorder, total: int, shards: int) -> None:
    assert counter.seen, "the run reported no progress"
    assert {s.total for s in counter.seen} == {total}, "a count other than the run's total was shown"
    graded = [s.graded for s in counter.seen]
    assert max(graded) == total and graded[-1] == total
    assert counter.snapshot().shards_done == shards
    assert all(s.graded <= s.sampled <= s.total for s in counter.seen)


def test_an_inline_run_counts_the_runs_samples_not_the_last_shards(store, counter, close_engines):
    cfg = run.ProfileConfig.build(**SIM)
    executors.profile_direct(cfg, store)
    _check_run_counts(counter, 7 * 4, shards=4)
    # Sampling and grading inside a shard advance the count between shard ends.
    assert len({s.graded for s in counter.seen}) > 4


class ThreadedExecutor:
    """Shards on three threads at once, each sampled and graded here (as Prefect's thread pool
    runs a Ray executor's shards)."""

    concurrency = 3

    def __init__(self, config) -> None:
        self.config = config
        self.model_name = run.get_sampler("simulate", None, {}).model_name

    def write_shard(self, store, job):
        time.sleep(0.01)
        return run.write_graded_shard(store, job, run.sample_and_grade(self.config, job))


def test_concurrent_shards_add_up(store, counter, close_engines):
    cfg = run.ProfileConfig.build(**SIM)
    run.profile(cfg, store, ThreadedExecutor(cfg))
    _check_run_counts(counter, 7 * 4, shards=4)


def test_an_adaptive_run_counts_every_round(store, counter, close_engines):
    cfg = run.ProfileConfig.build(**{**SIM, "limit": 40, "shard_size": 10}, adaptive="band", n_min=4, n_max=16)
    result = executors.profile_direct(cfg, store)
    total = store.read_table("samples", {"run_id": result.run_id}).num_rows
    rounds = sorted({s.round for s in counter.seen})
    assert len(rounds) > 1, "the run stopped after round 0: no growth to check"
    final = counter.snapshot()
    assert (final.total, final.graded, final.bound) == (total, total, 40 * 16)
    totals = [s.total for s in counter.seen]
    assert totals == sorted(totals) and totals[0] < total  # it grew with the rounds


def test_a_retried_prefect_shard_is_counted_once(prefect_api, store, counter, close_engines):
    with executors.open_executor(run.ProfileConfig.build(**SIM)) as ex:
        ids = run.prepare_run(run.ProfileConfig.build(**SIM), store, ex.model_name).problems.column("prompt_id")
    cfg = run.ProfileConfig.build(**SIM, backend_options={"fail_once": [ids[3].as_py()]})  # shard 1 fails once
    result = prefect_flows.profile_flow(cfg, store)
    _check_run_counts(counter, 7 * 4, shards=4)
    # the flow hands back what its start found, as a run without Prefect does
    assert result.details["load"]["prompts"] == 7 and result.details["reuse"]["shards"] == 4


def test_plain_lines_when_not_a_terminal(store, close_engines):
    """Piped or redirected: the same line as plain text every few seconds, no terminal codes."""
    r, w = os.pipe()
    with os.fdopen(r) as piped_r, os.fdopen(w, "w") as piped:
        with progress.plain_lines(piped, every_s=0.05) as counter:
            assert progress.current() is counter
            counter.begin("r", [10, 10, 10], finished=set())
            counter.update(0, SAMPLE, 10)
            counter.update(0, GRADE, 10)
            counter.shard_done(0)
            time.sleep(0.3)
            counter.update(1, SAMPLE, 5)
            time.sleep(0.3)
        assert progress.current() is None
        piped.close()
        lines = piped_r.read().splitlines()
    assert lines and "\x1b" not in "".join(lines)
    assert lines[0].startswith("samples 10/30 (33%)") and "shards 1/3" in lines[0]
    assert any("sampled 15" in line for line in lines)
    assert len(lines) == len(set(lines)), "a line that says nothing new was written again"
    # display() on a stream that is no terminal counts the run; one shorter than the interval
    # (PLAIN_EVERY_S) writes nothing: a quick command stays quiet in a pipe.
    out = io.StringIO()
    with progress.display(out) as counter:
        assert counter is not None and progress.current() is counter
        executors.profile_direct(run.ProfileConfig.build(**SIM), store)
    assert counter.snapshot().graded == 7 * 4
    assert out.getvalue() == ""


def test_plain_lines_end_on_the_runs_total(store, close_engines):
    out = io.StringIO()
    with progress.plain_lines(out, every_s=0.001) as counter:
        executors.profile_direct(run.ProfileConfig.build(**SIM), store)
        time.sleep(0.05)
    lines = out.getvalue().splitlines()
    assert lines and lines[-1].startswith(f"samples {7 * 4}/{7 * 4} (100%)") and "shards 4/4" in lines[-1]
    assert counter.snapshot().graded == 7 * 4 and "\x1b" not in out.getvalue()


def test_a_terminal_shows_the_line():
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 160, 0, 0))  # 24 rows, 160 columns
    chunks: list[bytes] = []

    def drain() -> None:  # read while it draws, so the terminal's buffer never fills
        while True:
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                return
            try:
                data = os.read(master, 65536)
            except OSError:
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain)
    reader.start()
    with os.fdopen(slave, "w") as tty:
        with progress.display(tty, refresh_s=0.05) as counter:
            assert counter is not None and progress.current() is counter
            counter.begin("r", [10, 10, 10], finished=set())
            counter.update(0, SAMPLE, 10)
            counter.update(0, GRADE, 10)
            counter.shard_done(0)
            counter.update(1, SAMPLE, 5)
            time.sleep(0.3)
        assert progress.current() is None
    reader.join()
    os.close(master)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode("utf-8", "replace"))
    assert "samples 10/30 (33%)" in text and "sampled 15" in text and "shards 1/3" in text
