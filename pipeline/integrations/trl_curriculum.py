"""A curriculum inside TRL's ``GRPOTrainer``: a policy picks each step's prompts and learns their outcomes.

``curriculum_trainer(policy, recorder)`` returns a ``GRPOTrainer`` subclass that

- samples prompts by asking ``policy.choose(k)`` once per generation batch, ``k`` the prompts TRL
  generates for at once (``generation_batch_size // num_generations``), and yields their dataset
  indices in ``RepeatSampler``'s layout: each index ``num_generations`` times in a row, the batch of
  ``k`` repeated ``num_iterations * steps_per_generation`` times (TRL reuses one generation for that many
  dataloader batches);
- rewards through ``recorder`` (a ``RewardRecorder`` of ``record_rewards``, which writes each step's
  per-prompt ``(n, c)`` to the ``observations`` table, ``docs/estimators.md`` §1), then hands those same
  counts, training calls only, to ``policy.update(prompt_ids, n, c)``. Per-prompt rollout counts are the
  recorder's ``rollouts=`` (NaN past a prompt's count; see ``pipeline.integrations.trl``)::

    from pipeline.integrations.trl import record_rewards
    from pipeline.integrations.trl_curriculum import curriculum_trainer

    recorder = record_rewards(my_reward, data_dir="difficulty-data", source="trl:run-1", dataset="gsm8k")
    Trainer = curriculum_trainer(policy, recorder)
    Trainer(model=..., args=GRPOConfig(...), train_dataset=ds).train()   # ds has a prompt_id column
    recorder.close()

TRL internals relied on (TRL 1.16.0, transformers 5.19, accelerate 1.15; checked by
``tests/test_trl_curriculum.py``):

- ``GRPOTrainer._get_train_sampler(dataset)`` supplies the train dataloader's sampler (via
  ``get_train_dataloader``, map-style datasets only), with ``RepeatSampler``'s layout and the dataloader
  batch ``per_device_train_batch_size * steps_per_generation``; ``args.generation_batch_size``,
  ``num_generations``, ``num_iterations``, ``args.steps_per_generation`` as attributes.
- ``_calculate_rewards`` calls a plain callable reward function with the dataset columns as keyword
  lists and ``trainer_state``; ``self.model.training`` tells a training call from an evaluation.
- Group statistics are NaN-aware (for ``rollouts=``).

Timing: the dataloader (accelerate's ``DataLoaderShard``) fetches one batch ahead, and the Trainer
fetches ``gradient_accumulation_steps`` batches at once, so ``choose`` for generation ``t + 1`` runs
before the outcomes of generation ``t`` reach ``update``: a policy decides with one generation of lag.
The policy runs in the one process: with several processes each would choose on its own, so the
trainer refuses ``num_processes > 1``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable

from pipeline.checks import check_int
from pipeline.errors import ConfigError
from pipeline.integrations.trl import RewardRecorder


@runtime_checkable
class CurriculumPolicy(Protocol):
    """Chooses the next prompts and learns from their outcomes (``pipeline.curriculum``'s interface)."""

    def choose(self, k: int) -> list[str]:
        """The ``k`` distinct prompt ids of the next generation batch."""
        ...

    def update(self, prompt_ids: list[str], n: list[int], c: list[int]) -> None:
        """One generation's outcomes: per prompt, ``n`` counted completions and ``c`` correct ones."""
        ...


class CurriculumSampler:
    """Dataset indices of the policy's choices in TRL's ``RepeatSampler`` layout (module docstring).

    One epoch has as many generation batches as ``RepeatSampler`` would (``len(dataset) // k``), so the
    Trainer's epoch and step arithmetic is unchanged; each batch is a fresh ``choose(k)``.
    ``chosen`` keeps every choice, in order.
    """

    def __init__(self, policy: CurriculumPolicy, ids: list[str], *, k: int, G: int, repeat: int) -> None:
        for name, value in (("k", k), ("G", G), ("repeat", repeat)):
            check_int(name, value, 1)
        index: dict[str, int] = {}
        for i, pid in enumerate(ids):
            pid = str(pid)
            if pid in index:
                raise ConfigError(f"prompt id {pid!r} is on rows {index[pid]} and {i}: a curriculum needs unique ids")
            index[pid] = i
        self.policy = policy
        self.index = index
        self.k, self.G, self.repeat = k, G, repeat
        self.batches = len(ids) // k
        self.chosen: list[list[str]] = []

    def choose(self) -> list[int]:
        pids = [str(p) for p in self.policy.choose(self.k)]
        if len(pids) != self.k or len(set(pids)) != self.k:
            raise ConfigError(f"policy.choose({self.k}) returned {pids!r}: it must return {self.k} distinct prompt ids")
        unknown = [p for p in pids if p not in self.index]
        if unknown:
            raise ConfigError(f"policy.choose({self.k}) returned prompt ids not in the training dataset: {unknown}")
        self.chosen.append(pids)
        return [self.index[p] for p in pids]

    def __iter__(self) -> Iterator[int]:
        for _ in range(self.batches):
            chunk = self.choose()
            for _ in range(self.repeat):
                for i in chunk:
                    for _ in range(self.G):
                        yield i

    def __len__(self) -> int:
        return self.batches * self.k * self.G * self.repeat


class CurriculumReward:
    """``recorder`` as TRL's reward function, then the recorded counts of a training call to the policy.

    ``trainer`` is set by the trainer; without one (a bare call) every call counts as training.
    Prompts whose completions were all masked or unscored (``n = 0``) are not passed to ``update``,
    as they get no row in the ``observations`` table.
    """

    def __init__(self, policy: CurriculumPolicy, recorder: RewardRecorder) -> None:
        self.policy = policy
        self.recorder = recorder
        self.__name__ = recorder.__name__
        self.trainer: Any = None

    def __call__(self, *args: Any, **kwargs: Any) -> list:
        rewards = self.recorder(*args, **kwargs)
        if self.trainer is None or self.trainer.model.training:
            counts = self.recorder.last_counts
            pids = list(counts)
            self.policy.update(pids, [counts[p][0] for p in pids], [counts[p][1] for p in pids])
        return rewards


def curriculum_trainer(policy: CurriculumPolicy, recorder: RewardRecorder, base: type | None = None) -> type:
    """A ``GRPOTrainer`` subclass (of ``base``, default ``trl.GRPOTrainer``) driven by ``policy``.

    Its ``reward_funcs`` default to the recorder; given, they must hold ``recorder`` once, which is
    replaced by the curriculum reward, and with ``recorder.rollouts`` it must be the only one. The
    built trainer exposes ``curriculum_sampler`` (its choices) and ``curriculum_reward``.
    """
    if not isinstance(policy, CurriculumPolicy):
        raise ConfigError(f"policy={policy!r} needs choose(k) and update(prompt_ids, n, c) methods")
    if not isinstance(recorder, RewardRecorder):
        raise ConfigError(f"recorder={recorder!r} must be a RewardRecorder, from record_rewards(...)")
    if base is None:
        from trl import GRPOTrainer

        base = GRPOTrainer
    reward = CurriculumReward(policy, recorder)
    column = recorder.column

    class CurriculumGRPOTrainer(base):
        def __init__(self, *args: Any, reward_funcs: Any = None, **kwargs: Any) -> None:
            funcs = [recorder] if reward_funcs is None else list(_as_list(reward_funcs))
            if sum(f is recorder for f in funcs) != 1:
                raise ConfigError("reward_funcs must hold the recorder given to curriculum_trainer exactly once")
            if recorder.rollouts is not None and len(funcs) > 1:
                raise ConfigError(
                    "rollouts= masks completions with NaN, which TRL leaves out only when every reward function "
                    f"returns NaN: the recorder must be the only reward function (got {len(funcs)})"
                )
            funcs = [reward if f is recorder else f for f in funcs]
            self.curriculum_reward = reward
            self.curriculum_sampler: CurriculumSampler | None = None
            super().__init__(*args, reward_funcs=funcs, **kwargs)
            if self.accelerator.num_processes > 1:
                raise ConfigError(
                    f"a curriculum runs in one process (got {self.accelerator.num_processes}): each would choose "
                    f"and update its own policy"
                )
            reward.trainer = self

        def _get_train_sampler(self, dataset: Any = None) -> CurriculumSampler:
            dataset = self.train_dataset if dataset is None else dataset
            names = getattr(dataset, "column_names", None)
            if names is None or column not in names:
                raise ConfigError(
                    f"the training dataset needs a {column!r} column (a map-style datasets.Dataset) for the curriculum"
                )
            self.curriculum_sampler = CurriculumSampler(
                policy,
                list(dataset[column]),
                k=self.args.generation_batch_size // self.num_generations,
                G=self.num_generations,
                repeat=self.num_iterations * self.args.steps_per_generation,
            )
            return self.curriculum_sampler

    return CurriculumGRPOTrainer


def _as_list(funcs: Any) -> list:
    return funcs if isinstance(funcs, list | tuple) else [funcs]
