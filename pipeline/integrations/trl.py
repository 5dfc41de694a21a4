"""TRL's ``GRPOTrainer``: each step's per-prompt pass counts, recorded from the reward function.

``GRPOTrainer`` calls every reward function once per generation batch with keyword arguments
(``prompts``, ``completions``, ``completion_ids``, each dataset column as a list with one entry per
completion, ``trainer_state``, ``log_extra``, ``log_metric``; TRL 1.16.0, ``_calculate_rewards``).
Wrapping the function is therefore the one place that sees every completion's reward next to its
``prompt_id`` without changing the trainer::

    from pipeline.integrations.trl import record_rewards

    trainer = GRPOTrainer(..., reward_funcs=record_rewards(
        my_reward, data_dir="difficulty-data", source="trl:run-1", dataset="local-math500-test"))

Per step and group of a prompt the recorder keeps ``n`` (completions whose reward is not NaN or None)
and ``c`` (rewards ``>= threshold``), the binomial counts of ``docs/estimators.md`` §1, and writes them
as one ``observations`` file per step (``record.write_step``, kind ``training``), one row per group: a
prompt the sampler gave ``m`` groups in a step is ``m`` rows (``group_index``). The rewards go back to
TRL unchanged: the very list the function returned (unless ``rollouts=`` caps them, below).

``rollouts={prompt_id: m}`` (an allocation, e.g. ``difficulty allocate``) keeps only the first ``m``
completions of each group of a prompt: the others get NaN, which TRL's group statistics leave out
(``nanmean``/``nanstd`` over ``rewards.view(-1, num_generations)``; an all-NaN completion gets advantage
0), and which the recorder does not count. A prompt absent from the mapping keeps all its completions;
``m >= num_generations`` keeps all. Caveat: TRL still generates ``num_generations`` completions per
prompt, so the compute of the masked ones is spent; only their reward, and with it their policy
gradient, is dropped (with ``beta > 0`` their KL term still acts, and their tokens still count in the
loss normaliser). A group is a run of consecutive completions of one prompt, as TRL lays them out for
one process; so ``rollouts=`` needs a single process, and must be the only reward function (TRL marks
a completion NaN only when every reward function returned NaN for it). To give prompts different
rollouts without generating completions only to mask them, use a curriculum's multiplicity instead
(``max_groups``, docs/curriculum.md §9): the sampler repeats a prompt's index, and it trains as ``m``
whole groups of ``num_generations``.

Why each choice:

- ``threshold`` defaults to 1.0, for 0/1 correctness rewards. A reward that is neither 0 nor 1
  without an explicit ``threshold=`` raises ``ConfigError`` at the call that returns it: a shaped
  reward (format bonus, length penalty) is not correctness, and counting ``r >= 1`` of it would
  record pass rates that mean nothing. With ``threshold=`` given, any finite reward is allowed.
- The step is ``trainer_state.global_step`` (TRL passes it), so a run resumed from a checkpoint
  writes the same step numbers again and ``write_step`` replaces them; a caller that passes no
  ``trainer_state`` gets a call counter (0, 1, ...). Calls at the same step (``steps_per_generation``
  is one generation for several optimizer steps; an evaluation at step k, then the training batch
  at step k) add into that step.
- A step is written when a call for another step arrives, or at ``flush()``/``close()``/exit. A
  step flushed while still open is written again with its full counts if more calls arrive for it
  (the file is replaced, never added to), and a ``flush()`` with nothing new writes nothing.
- Writing runs on one background thread: a step costs the trainer a dictionary update per
  completion; the Parquet write (and on ``s3://`` the PUT) overlaps the next generation.
  ``bench/trl_recorder.py`` measures the cost.
- A write failure is logged when it happens and raised (``StoreError``) at the next call, at
  ``flush()`` or at ``close()``: a training run never loses its counts silently.
- A prompt whose rewards were all NaN/None in a step has ``n = 0`` and no row (the table holds
  ``n >= 1``).
- Under ``torchrun``/``accelerate`` each process sees only its share of the completions, and two
  processes writing one source's step would replace each other's file: with ``WORLD_SIZE > 1`` the
  source must hold ``{rank}`` (``source="trl:run-1:rank{rank}"``), one source per process.

No TRL import is needed here: the wrapper is a plain callable. A ``TrainerCallback`` cannot see the
per-completion rewards, so the wrapper is the integration; ``close()`` at the end of training (or
the ``atexit`` hook) writes the last step.
"""

from __future__ import annotations

import atexit
import inspect
import logging
import math
import os
import queue
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.checks import check_number
from pipeline.errors import ConfigError, PipelineError, StoreError
from pipeline.observe import record
from pipeline.observe.track import dataset_problems
from pipeline.store import Store, resolve_data_dir

log = logging.getLogger(__name__)

DEFAULT_THRESHOLD = 1.0
PROMPT_COLUMN = "prompt_id"
_STOP = object()


class RewardRecorder:
    """A reward function that also records per-step, per-prompt ``(n, c)``; see the module docstring.

    Attributes:
        steps_written: step files written so far (a step written again counts again).
        step: the step of the last call (None before the first).
        last_counts: the last call's ``[n, c]`` per prompt (prompts with ``n >= 1``), what a
            curriculum learns from (``trl_curriculum``).
        rollouts: completions kept per prompt's group, or None (module docstring).
    """

    def __init__(
        self,
        reward_fn: Callable[..., list],
        *,
        store: Store,
        source: str,
        dataset: str,
        model: str | None = None,
        threshold: float | None = None,
        column: str = PROMPT_COLUMN,
        rollouts: dict[str, int] | None = None,
    ) -> None:
        if not callable(reward_fn):
            raise ConfigError(f"reward_fn={reward_fn!r} must be callable (a TRL reward function)")
        if inspect.iscoroutinefunction(reward_fn) or inspect.iscoroutinefunction(type(reward_fn).__call__):
            raise ConfigError(f"reward_fn={reward_fn!r} is async: record_rewards wraps synchronous reward functions")
        if not dataset:
            raise ConfigError("dataset must name the dataset the prompt ids belong to, e.g. local-math500-test")
        if threshold is not None:
            check_number("threshold", threshold)  # a reward >= it counts as correct
        self.rollouts = _check_rollouts(rollouts)
        self.reward_fn = reward_fn
        self.__name__ = getattr(reward_fn, "__name__", type(reward_fn).__name__)  # TRL logs rewards/<name>
        self.store = store
        self.source = record.check_source(_source_for_rank(source))
        # The dataset's prompts, stored in the data directory (``DatasetError`` names a dataset that
        # is not, and the stored ones): counts keyed by ids of no stored prompt would never be read.
        self.prompts = frozenset(dataset_problems(store, dataset).column("prompt_id").to_pylist())
        self.dataset = dataset
        self.model = model
        self.threshold = threshold
        self.column = column
        self.step: int | None = None
        self.steps_written = 0
        self.last_counts: dict[str, list[int]] = {}  # the last call's [n, c] per prompt (n >= 1 only)
        self._c_at = DEFAULT_THRESHOLD if threshold is None else float(threshold)
        self._open: dict[str, list[list[int]]] = {}  # prompt_id -> [n, c] of each group of the current step
        self._dirty = False  # the current step has counts not yet handed to the writer
        self._calls = 0
        self._closed = False
        self._lock = threading.Lock()
        self._error: BaseException | None = None
        self._error_step: int | None = None
        self._queue: queue.Queue = queue.Queue()
        _warm_write_path()
        self._worker = threading.Thread(target=self._write_loop, name=f"difficulty-recorder-{self.source}", daemon=True)
        self._worker.start()
        atexit.register(self._at_exit)

    # --- the trainer's side -------------------------------------------------------------------

    def __call__(self, *args: Any, **kwargs: Any) -> list:
        self._raise_failure()
        if self._closed:
            raise ConfigError(f"the reward recorder of source {self.source} is closed; wrap the function again")
        ids = kwargs.get(self.column)
        if ids is None:
            raise ConfigError(
                f"the training dataset has no {self.column!r} column, which record_rewards needs to key each "
                f"completion's reward (columns passed: {sorted(k for k in kwargs if k not in _TRL_KWARGS)}); "
                f"`difficulty export` writes datasets with it, or add the ids of pipeline.datasets.load"
            )
        if not any(str(pid) in self.prompts for pid in ids):
            seen = sorted(set(map(str, ids)))
            raise ConfigError(
                f"none of the {len(seen)} prompt ids of this batch (e.g. {seen[:3]}) "
                f"is a prompt of dataset {self.dataset!r} under {self.store.root}: pass the dataset the training "
                f'set\'s {self.column!r} column comes from (`difficulty sql "select distinct dataset from problems"`)'
            )
        rewards = self.reward_fn(*args, **kwargs)
        if len(rewards) != len(ids):
            raise ConfigError(
                f"reward function {self.__name__} returned {len(rewards)} rewards for {len(ids)} completions"
            )
        if self.rollouts is not None:
            rewards = self._cap(ids, rewards)
        groups = self._count(ids, rewards)
        self.last_counts = {
            pid: [sum(g[0] for g in cells), sum(g[1] for g in cells)]
            for pid, cells in groups.items()
            if any(g[0] for g in cells)
        }
        state = kwargs.get("trainer_state")
        step = getattr(state, "global_step", None)
        if step is None:
            step = self._calls
        self._calls += 1
        with self._lock:
            if self.step is not None and step != self.step:
                self._hand_over()
                self._open = {}
            self.step = step
            for pid, cells in groups.items():  # a call's groups follow those earlier calls of the step gave
                self._open.setdefault(pid, []).extend(cells)
            self._dirty = True
        return rewards

    def _cap(self, ids: list, rewards: list) -> list:
        """``rewards`` with NaN past each group's first ``rollouts[prompt_id]`` completions; a group is a
        run of consecutive completions with one prompt id (TRL's layout, one process)."""
        out, prev, pos = [], None, 0
        for pid, r in zip(ids, rewards, strict=True):
            pos = pos + 1 if pid == prev else 0
            prev = pid
            m = self.rollouts.get(str(pid))
            out.append(r if m is None or pos < m else math.nan)
        return out

    def _count(self, ids: list, rewards: list) -> dict[str, list[list[int]]]:
        """This call's ``[n, c]`` per group of each prompt (in group order; a group whose rewards are
        all NaN has ``n = 0``), checked whole before anything is added to the step. The groups are
        told by the counts (``record.group_numbers``): TRL gives every group ``num_generations``
        completions, so a prompt the sampler repeated ``m`` times has ``m`` of them."""
        keys = [str(pid) for pid in ids]
        code: dict[str, int] = {}
        group = record.group_numbers(np.array([code.setdefault(k, len(code)) for k in keys], dtype=np.int64))
        counts: dict[str, list[list[int]]] = {}
        at, free = self._c_at, self.threshold is not None
        for pid, g, r in zip(keys, group.tolist(), rewards, strict=True):
            cells = counts.setdefault(pid, [])
            while len(cells) <= g:
                cells.append([0, 0])
            if r is None:
                continue
            x = float(r)
            if x != x:  # NaN: no outcome
                continue
            if not free and x != 0.0 and x != 1.0:
                raise ConfigError(
                    f"reward {r!r} of prompt {pid} is neither 0 nor 1: a shaped reward is not correctness. "
                    f"Pass threshold= (a reward >= threshold counts as correct) if it is, e.g. threshold=0.5"
                )
            cells[g][0] += 1
            if x >= at:
                cells[g][1] += 1
        return counts

    # --- writing ------------------------------------------------------------------------------

    def _hand_over(self) -> None:
        """Queue the current step's counts for the writer (caller holds the lock)."""
        if self._dirty and self.step is not None:
            snapshot = [(pid, g, k, ok) for pid, cells in self._open.items() for g, (k, ok) in enumerate(cells) if k]
            self._queue.put((self.step, snapshot, datetime.now(UTC)))
        self._dirty = False

    def _write_loop(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is _STOP:
                    return
                step, snapshot, when = item
                if not snapshot:
                    continue
                pids, groups, n, c = (list(col) for col in zip(*snapshot, strict=True))
                rows = record.observation_rows(
                    self.source, "training", step, self.dataset, pids, n, c, self.model, observed_at=when, groups=groups
                )
                record.write_step(self.store, self.source, step, rows)
                self.steps_written += 1
            except Exception as exc:  # the writer must outlive a failure: kept, logged, raised to the trainer
                log.error("recording step %s of source %s to %s failed: %s", item[0], self.source, self.store.root, exc)
                if self._error is None:
                    self._error, self._error_step = exc, item[0]
            finally:
                self._queue.task_done()

    def _raise_failure(self) -> None:
        if self._error is not None:
            exc, step = self._error, self._error_step
            self._error = self._error_step = None
            raise StoreError(
                f"recording step {step} of source {self.source} to {self.store.root} failed: {exc}"
            ) from exc

    def flush(self) -> None:
        """Write what is recorded (the open step too) and wait for it; raises a write failure."""
        with self._lock:
            self._hand_over()
        self._queue.join()
        self._raise_failure()

    def close(self) -> None:
        """Flush, then stop the writer; a second close does nothing."""
        if self._closed:
            return
        try:
            self.flush()
        finally:
            self._closed = True
            self._queue.put(_STOP)
            self._worker.join()
            atexit.unregister(self._at_exit)

    def _at_exit(self) -> None:
        try:
            self.close()
        except PipelineError as exc:  # nobody is left to raise to at exit: said loudly instead
            log.error("the reward recorder of source %s lost counts at exit: %s", self.source, exc)

    def __enter__(self) -> RewardRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _warm_write_path() -> None:
    """Build and serialise one step in memory now: pyarrow imports pandas (and with it
    ``concurrent.futures``) lazily on its first Parquet write, and an import that registers an
    ``atexit`` hook fails once the interpreter is shutting down, which is when ``close()`` runs for
    a recorder that wrote nothing before exit."""
    rows = record.observation_rows("warm-up", "training", 0, "warm-up", ["p"], [1], [1], None)
    pq.write_table(rows, pa.BufferOutputStream(), compression="zstd")


_TRL_KWARGS = frozenset({"prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric"})


def _check_rollouts(rollouts: dict[str, int] | None) -> dict[str, int] | None:
    if rollouts is None:
        return None
    bad = {pid: m for pid, m in rollouts.items() if isinstance(m, bool) or not isinstance(m, int) or m < 0}
    if bad:
        first = next(iter(bad.items()))
        raise ConfigError(
            f"rollouts[{first[0]!r}]={first[1]!r} must be an integer >= 0 (completions kept of the prompt's "
            f"group); {len(bad)} bad value(s)"
        )
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    if world > 1:
        raise ConfigError(
            f"rollouts= under WORLD_SIZE={world}: a prompt's completions are split across processes, so a "
            f"process cannot tell which of them to keep; run rollout caps on one process"
        )
    return {str(pid): m for pid, m in rollouts.items()}


def _source_for_rank(source: str) -> str:
    """``source`` with ``{rank}`` filled in; required under several processes (see the module docstring)."""
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    if "{rank}" in source:
        return source.replace("{rank}", os.environ.get("RANK", "0"))
    if world > 1:
        raise ConfigError(
            f"source={source!r} under WORLD_SIZE={world}: each process records its own completions, so the "
            f"source must hold {{rank}}, e.g. {source}:rank{{rank}}"
        )
    return source


def _existing_store(data_dir: str | os.PathLike) -> Store:
    """The data directory, opened (and probed for writing) only when it exists: never made here, as
    a mistyped one would be an empty folder holding no dataset, refused a moment later."""
    found = Store(resolve_data_dir(data_dir))
    if not found.exists(found.root):
        raise StoreError(
            f"record_rewards(data_dir={str(data_dir)!r}): no data directory at {str(found.root)!r}; give the folder "
            "the dataset was loaded into (`difficulty load ... --data-dir`)"
        )
    return Store.open(data_dir)


def record_rewards(
    reward_fn: Callable[..., list],
    *,
    data_dir: str | os.PathLike | Store,
    source: str,
    dataset: str,
    model: str | None = None,
    threshold: float | None = None,
    column: str = PROMPT_COLUMN,
    rollouts: dict[str, int] | None = None,
) -> RewardRecorder:
    """``reward_fn`` for ``GRPOTrainer(reward_funcs=...)``, recording per-step counts in ``data_dir``.

    ``data_dir`` is a folder or an ``s3://bucket/prefix`` URL (opened, and probed for writing, here,
    before training starts) or an open ``Store``: this is the user's edge, like a CLI option.
    ``threshold``: a reward ``>= threshold`` is a correct completion; default 1.0 and only 0/1
    rewards allowed (see the module docstring). ``column``: the dataset column of prompt ids.
    ``rollouts``: completions kept per prompt's group, the rest masked with NaN (module docstring).
    ``dataset`` must be stored in ``data_dir`` (``difficulty load``): one that is not, or a batch
    none of whose prompt ids is one of its prompts, is an error naming it (counts nobody reads).
    """
    store = data_dir if isinstance(data_dir, Store) else _existing_store(data_dir)
    return RewardRecorder(
        reward_fn,
        store=store,
        source=source,
        dataset=dataset,
        model=model,
        threshold=threshold,
        column=column,
        rollouts=rollouts,
    )
