"""Bench: what the verl curriculum dataset (``pipeline.integrations.verl_curriculum``) adds per batch.

A data directory holds a training run's observations (``--steps`` steps of ``--batch`` prompts out of
``--prompts``, groups of 8). Printed, each against the baseline of this process, the signal policy's
bare ``choose(batch)``:

1. a batch of the schedule when no observation file changed (the file listing, then ``choose``);
2. a batch right after a new step was written (the whole table read, the current difficulty
   computed, then ``choose``): once per training step at most.

A verl step (generation of ``batch x G`` rollouts, then the update) lasts seconds to minutes.

    PYTHONPATH=$PWD python bench/verl_curriculum.py
"""

from __future__ import annotations

import argparse
import tempfile
import time

import numpy as np

from pipeline.curriculum import make_policy
from pipeline.integrations.verl_curriculum import CurriculumSchedule, ObservedCounts
from pipeline.observe import record
from pipeline.store import Store

SOURCE, DATASET = "verl:bench", "bench"


def write(store: Store, step: int, ids: list[str], batch: int, rng: np.random.Generator) -> None:
    pick = rng.choice(len(ids), batch, replace=False)
    rows = record.observation_rows(
        SOURCE, "training", step, DATASET, [ids[i] for i in pick], [8] * batch, rng.integers(0, 9, batch).tolist(), None
    )
    record.write_step(store, SOURCE, step, rows)


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=1200)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    ids = [f"p{i:05d}" for i in range(args.prompts)]
    store = Store.open(tempfile.mkdtemp(prefix="verl-bench-") + "/data")
    for step in range(1, args.steps + 1):
        write(store, step, ids, args.batch, rng)

    policy = make_policy("signal", ids, seed=0, G=8)
    base = best(lambda: policy.choose(args.batch), args.repeat)
    schedule = CurriculumSchedule(ids, args.batch, seed=0, group_size=8)
    schedule.counts = ObservedCounts(store, DATASET, ids, schedule.policy.forgetting)

    def one_batch() -> None:
        for _ in range(args.batch):
            schedule.next_row()

    one_batch()  # the first read
    unchanged = best(one_batch, args.repeat)
    step = [args.steps]

    def new_step() -> None:
        step[0] += 1
        write(store, step[0], ids, args.batch, rng)

    timings = []
    for _ in range(args.repeat):
        new_step()
        timings.append(best(one_batch, 1))
    changed = min(timings)
    head = f"{args.steps} steps of {args.batch} of {args.prompts} prompts"
    print(f"{head}; baseline choose({args.batch}): {base * 1e3:.2f} ms")
    print(f"batch, no new step:    {unchanged * 1e3:8.2f} ms  ({unchanged / base:6.1f}x choose)")
    print(f"batch after a new step: {changed * 1e3:8.2f} ms  ({changed / base:6.1f}x choose)")


if __name__ == "__main__":
    main()
