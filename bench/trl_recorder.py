"""Bench: what ``record_rewards`` (``pipeline.integrations.trl``) adds to a GRPO step.

Three measurements, each printed as a ratio against a baseline measured in this process:

1. Calls of a trivial reward function over 64 completions (16 prompts x 4), wrapped and bare,
   ``--calls`` of them, best of ``--repeat``: with every call at one step (the trainer's thread
   only: counting) and with every call a new step (each call also hands a step to the writer,
   whose Parquet write then competes for the GIL: the worst case, a real step lasts seconds).
2. One synchronous ``record.write_step`` of such a step: what a recorder without its thread would
   add to the trainer's step.
3. With ``--trl`` (the default; ``--no-trl`` skips it), a real TRL ``GRPOTrainer`` on the CPU
   (the bundled model, converted once into the model cache; 8 completions a step, 12 tokens each)
   for ``--steps`` steps: the recorder's added time per step on the trainer's thread and its
   writer's time per step, against the measured step time (the target: under 1%).

    PYTHONPATH=$PWD python bench/trl_recorder.py
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa

from pipeline.integrations.trl import record_rewards
from pipeline.observe import record
from pipeline.store import Store

IDS = [f"p{i // 4}" for i in range(64)]
REWARDS = [float(i % 3 == 0) for i in range(64)]


def bare(prompts, completions, **kwargs):
    return REWARDS


def call(fn, step: int):
    return fn(
        prompts=IDS,
        completions=IDS,
        completion_ids=[[1]] * 64,
        prompt_id=IDS,
        answer=["1"] * 64,
        trainer_state=SimpleNamespace(global_step=step),
    )


def per_call(fn, calls: int, new_step: bool) -> float:
    t0 = time.perf_counter()
    for i in range(calls):
        call(fn, i if new_step else 0)
    return (time.perf_counter() - t0) / calls


def micro(store: Store, calls: int, repeat: int) -> float:
    bare_s = min(per_call(bare, calls, False) for _ in range(repeat))
    print(f"bare reward function: {bare_s * 1e6:8.1f} us/call (64 completions)")
    for new_step in (False, True):
        best = float("inf")
        for r in range(repeat):
            recorder = record_rewards(bare, data_dir=store, source=f"bench:micro-{int(new_step)}-{r}", dataset="bench")
            best = min(best, per_call(recorder, calls, new_step))
            recorder.close()
        label = "a new step every call" if new_step else "one step"
        print(
            f"wrapped, {label:22s}: {best * 1e6:8.1f} us/call, added {(best - bare_s) * 1e6:7.1f} us "
            f"({best / bare_s:.1f}x the bare call)"
        )
    rows = record.observation_rows(
        "bench:sync", "training", 0, "bench", [f"p{i}" for i in range(16)], [4] * 16, [2] * 16, None
    )
    t0 = time.perf_counter()
    for _ in range(20):
        record.write_step(store, "bench:sync", 0, rows)  # the same step, replaced each time
    sync_s = (time.perf_counter() - t0) / 20
    print(
        f"one synchronous write_step of a 16-prompt step: {sync_s * 1e3:.2f} ms ({sync_s / bare_s:.0f}x the bare call)"
    )
    return bare_s


def real(store: Store, steps: int, tmp: Path) -> None:
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from pipeline.integrations import trl as integration
    from pipeline.sample import models

    inner = {"s": 0.0}
    outer = {"s": 0.0}
    writes = {"s": 0.0, "n": 0}

    def reward(prompts, completions, **kwargs):
        t0 = time.perf_counter()
        out = [float(any(ch.isdigit() for ch in c)) for c in completions]
        inner["s"] += time.perf_counter() - t0
        return out

    write_step = record.write_step

    def timed_write(*a, **kw):  # the writer thread's time per step
        t0 = time.perf_counter()
        try:
            return write_step(*a, **kw)
        finally:
            writes["s"] += time.perf_counter() - t0
            writes["n"] += 1

    integration.record.write_step = timed_write
    recorder = record_rewards(reward, data_dir=store, source="bench:trl", dataset="bench")

    def wrapped(**kwargs):
        t0 = time.perf_counter()
        try:
            return recorder(**kwargs)
        finally:
            outer["s"] += time.perf_counter() - t0

    wrapped.__name__ = "reward"

    class StepTimes(TrainerCallback):
        def __init__(self):
            self.times, self.t0 = [], None

        def on_step_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            self.times.append(time.perf_counter() - self.t0)

    train = Dataset.from_dict(
        {
            "prompt": [f"What is {a} + {a + 3}? Answer:" for a in range(2 * steps)],
            "prompt_id": [f"q{a}" for a in range(2 * steps)],
        }
    )
    timer = StepTimes()
    args = GRPOConfig(
        output_dir=str(tmp / "trl-out"),
        use_cpu=True,
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=12,
        max_steps=steps,
        save_strategy="no",
        report_to=[],
    )
    trainer = GRPOTrainer(
        model=str(models.prepare().path), reward_funcs=wrapped, args=args, train_dataset=train, callbacks=[timer]
    )
    trainer.train()
    recorder.close()
    integration.record.write_step = write_step
    step_s = sum(timer.times) / len(timer.times)
    added = (outer["s"] - inner["s"]) / len(timer.times)
    writer = writes["s"] / max(writes["n"], 1)
    print(f"real GRPOTrainer (CPU, 8 completions/step): {len(timer.times)} steps, {step_s:.2f} s/step")
    print(f"  recorder on the trainer's thread: {added * 1e6:.1f} us/step = {added / step_s:.2e} of a step")
    print(
        f"  writer thread: {writer * 1e3:.2f} ms/step = {writer / step_s:.2e} of a step "
        f"({writes['n']} step files; overlaps the next step, an upper bound of its GIL share)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--trl", action=argparse.BooleanOptionalAction, default=True)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-trl-recorder-"))
    try:
        store = Store.open(tmp / "data")
        ids = sorted({*IDS, *(f"q{a}" for a in range(2 * args.steps))})  # the bench's prompts, as a stored dataset
        rows = [{"dataset": "bench", "prompt_id": pid, "problem": pid, "status": "ok"} for pid in ids]
        store.add_problems(pa.Table.from_pylist(rows), "bench")
        micro(store, args.calls, args.repeat)
        if args.trl:
            real(store, args.steps, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
