"""A curriculum inside TRL's ``GRPOTrainer``: a policy picks each step's prompts and learns their outcomes.

``curriculum_trainer(policy, recorder)`` returns a ``GRPOTrainer`` subclass that

- samples prompts by asking ``policy.choose(k)`` once per generation batch, ``k`` the groups TRL
  generates at once (``generation_batch_size // num_generations``), and yields their dataset
  indices in ``RepeatSampler``'s layout: each index ``num_generations`` times in a row, the batch of
  ``k`` repeated ``num_iterations * steps_per_generation`` times (TRL reuses one generation for that many
  dataloader batches);
- with a policy that has ``choose_groups(k)`` (``pipeline.curriculum``'s; multiplicity when its
  ``max_groups`` > 1), asks that instead: ``k`` prompt ids, one per group, a prompt given ``m`` groups
  ``m`` times in a row. Its index then fills ``m`` consecutive runs of ``num_generations``, and TRL,
  which forms groups by position (``rewards.view(-1, num_generations)``), trains ``m`` groups of it,
  each normalised on its own: per-prompt rollouts the trainer really generates, no completion masked;
- rewards through ``recorder`` (a ``RewardRecorder`` of ``record_rewards``, which writes each step's
  per-prompt ``(n, c)`` to the ``observations`` table, ``docs/estimators.md`` §1), then hands those same
  counts, training calls only, to ``policy.update(prompt_ids, n, c, step=...)`` (the recorder's step,
  ``trainer_state.global_step``, when ``update`` takes a ``step``: forgetting is then by step, as in
  ``observe/current``); a prompt with ``m`` groups is one count, ``n = m * num_generations``.
  The recorder's ``rollouts=`` (NaN past a prompt's count; see ``pipeline.integrations.trl``) is the
  older way to vary rollouts, spending the masked ones' compute; it reads a run of one prompt's
  completions as one group, so a batch with a prompt in several groups refuses it::

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

import inspect
from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable

from pipeline.checks import check_int
from pipeline.errors import ConfigError
from pipeline.integrations.trl import RewardRecorder


@runtime_checkable
class CurriculumPolicy(Protocol):
    """Chooses the next prompts and learns from their outcomes (``pipeline.curriculum``'s interface)."""

    def choose(self, k: int) -> list[str]:
        """The ``k`` distinct prompt ids of the next generation batch (a policy may instead have
        ``choose_groups(k)``: ``k`` ids, one per group, repeats in a row; module docstring)."""
        ...

    def update(self, prompt_ids: list[str], n: list[int], c: list[int]) -> None:
        """One generation's outcomes: per prompt, ``n`` counted completions and ``c`` correct ones
        (a policy whose ``update`` also takes ``step=`` is given the training step)."""
        ...


class CurriculumSampler:
    """Dataset indices of the policy's choices in TRL's ``RepeatSampler`` layout (module docstring).

    One epoch has as many generation batches as ``RepeatSampler`` would (``len(dataset) // k``), so the
    Trainer's epoch and step arithmetic is unchanged; each batch is a fresh ``choose(k)``, or
    ``choose_groups(k)`` where the policy has it (a prompt in ``m`` groups ``m`` times in a row; with
    ``repeats=False`` a prompt in two groups is an error). ``chosen`` keeps every choice, in order,
    one id per group.
    """

    def __init__(
        self, policy: CurriculumPolicy, ids: list[str], *, k: int, G: int, repeat: int, repeats: bool = True
    ) -> None:
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
        self.groups = callable(getattr(policy, "choose_groups", None))
        self.repeats = repeats
        self.batches = len(ids) // k
        self.chosen: list[list[str]] = []

    def choose(self) -> list[int]:
        if self.groups:
            call = f"policy.choose_groups({self.k})"
            pids = [str(p) for p in self.policy.choose_groups(self.k)]
            if len(pids) != self.k:
                raise ConfigError(f"{call} returned {pids!r}: it must return {self.k} prompt ids, one per group")
            runs = [p for i, p in enumerate(pids) if i == 0 or p != pids[i - 1]]
            if len(set(runs)) != len(runs):
                raise ConfigError(f"{call} returned {pids!r}: a prompt's groups must be in a row")
            if not self.repeats and len(runs) != len(pids):
                raise ConfigError(
                    f"{call} gave a prompt several groups ({pids!r}), but the recorder's rollouts= reads a run of one "
                    "prompt's completions as one group: leave rollouts= out (multiplicity replaces it) or use "
                    "max_groups=1"
                )
        else:
            call = f"policy.choose({self.k})"
            pids = [str(p) for p in self.policy.choose(self.k)]
            if len(pids) != self.k or len(set(pids)) != self.k:
                raise ConfigError(f"{call} returned {pids!r}: it must return {self.k} distinct prompt ids")
        unknown = [p for p in pids if p not in self.index]
        if unknown:
            raise ConfigError(f"{call} returned prompt ids not in the training dataset: {unknown}")
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
        self._takes_step = "step" in inspect.signature(policy.update).parameters

    def __call__(self, *args: Any, **kwargs: Any) -> list:
        rewards = self.recorder(*args, **kwargs)
        if self.trainer is None or self.trainer.model.training:
            counts = self.recorder.last_counts
            pids = list(counts)
            n, c = [counts[p][0] for p in pids], [counts[p][1] for p in pids]
            if self._takes_step:  # the step the recorder writes, so forgetting is lambda^(T - s) by step
                self.policy.update(pids, n, c, step=self.recorder.step)
            else:
                self.policy.update(pids, n, c)
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
                repeats=recorder.rollouts is None,
            )
            return self.curriculum_sampler

    return CurriculumGRPOTrainer


def _as_list(funcs: Any) -> list:
    return funcs if isinstance(funcs, list | tuple) else [funcs]
