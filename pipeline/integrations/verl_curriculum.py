"""A curriculum inside verl 0.9.1: its custom dataset class draws each batch's prompts from a policy.

verl 0.9.1 has no sampler hook (``verl/trainer/ppo/utils.py::create_rl_sampler`` only picks a random
or a sequential sampler; the ``data.sampler.class_path`` curriculum sampler of early-2026 main is
gone). Its remaining hook is the dataset class: ``create_rl_dataset`` calls ``get_dataset_class``,
which loads ``data.custom_cls.path`` / ``data.custom_cls.name`` (``pkg://module`` or a file; the
class must subclass ``torch.utils.data.Dataset``) and builds it as
``cls(data_files=..., tokenizer=..., processor=..., config=<data config>, max_samples=...)``.

``CurriculumRLHFDataset`` subclasses verl's ``RLHFDataset`` (built on first access to the name, so
importing this module never imports verl)::

    python -m verl.trainer.main_ppo ... \\
        data.train_files=train.parquet data.val_files=val.parquet \\
        data.custom_cls.path=pkg://pipeline.integrations.verl_curriculum \\
        data.custom_cls.name=CurriculumRLHFDataset \\
        data.dataloader_num_workers=0 \\
        trainer.rollout_data_dir=rollouts \\
        +data.curriculum.data_dir=difficulty-data +data.curriculum.group_size=8

The dataset of ``data.train_files`` ignores the index the sampler asks for: the ``j``-th item the
dataloader fetches is slot ``j mod B`` of curriculum batch ``j // B`` (``B`` verl's batch,
``data.gen_batch_size`` or ``data.train_batch_size``), and each curriculum batch is one
``policy.choose_groups(B)`` over the file's prompts, so ``data.shuffle`` does not matter. With
multiplicity (a policy with ``max_groups`` > 1, e.g. ``signal:objective=mass,max_groups=2``) a prompt
fills ``m`` slots of a batch, in a row: verl gives every batch row its own ``uid`` before it repeats
each row ``actor_rollout_ref.rollout.n`` times (``RayPPOTrainer.fit``), and its group advantages
(``compute_grpo_outcome_advantage``) group by ``uid``, so the prompt trains as ``m`` groups of ``n``
rollouts each, all generated, none masked. The counter lives
in the one process that iterates: ``data.dataloader_num_workers`` must be 0 (each worker would count
on its own), as verl's removed curriculum sampler required too. The dataset of ``data.val_files`` is
verl's own, unchanged.

verl's V1 agent loop (``verl/trainer/ppo/v1/agent_loop_tq.py``, verl PR #6710; after 0.9.1) reads a
row's own rollout count, ``prompt.pop("__rollout_n__", rollout.n)``, and runs that many sessions under
the row's one uid. With ``+data.curriculum.rollout_n=true`` a prompt the policy gives ``m`` groups
takes one slot with ``__rollout_n__ = m * group_size``: one group of ``m * n`` rollouts, a baseline over
all of them, where the multiplicity route (the default, for verl versions without the key) makes ``m``
groups of ``n``. The slots it frees go to the policy's next prompts, one group of ``n`` each.

Outcomes come back through the data directory, not through verl: verl dumps each step's rollouts
(``trainer.rollout_data_dir``), ``difficulty track <dir> --data-file train.parquet`` imports them
into the ``observations`` table (``--interval 60`` keeps importing), and before each batch the dataset
checks the table's file list (a listing, cached checks): when it changed, the policy's counts are
replaced by each prompt's discounted counts from ``observe.current`` (forgetting ``lambda`` of the
policy, relative to the latest step), the policy's memory of what it picked when (the coverage
floor) is kept. A profile imported with ``difficulty track --run RUN_ID`` is the prior at step 0.

Settings (``data.curriculum.*``, added with hydra's ``+``): ``data_dir`` (default
``$DIFFICULTY_DATA``, then ``./difficulty-data``), ``policy`` (a spec of ``curriculum.make_policy``,
default ``signal``), ``dataset`` (the stored dataset the rows are prompts of; default: the one
``difficulty load --data-file`` makes of the train file, loaded and stored if missing),
``group_size`` (``G`` of the policy's score, say ``actor_rollout_ref.rollout.n``), ``seed``,
``rollout_n`` (true: per-prompt rollout counts through ``__rollout_n__``; needs ``group_size``).
Rows are matched to prompt ids as ``difficulty track`` matches verl rows: by problem text (the last
user message), else by ``extra_info.index``; a row matching nothing is a prompt of its own, never
observed (its prior only).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline import datasets
from pipeline.checks import check_bool, check_int
from pipeline.curriculum import DEFAULT_POLICY, make_policy
from pipeline.errors import ConfigError, DatasetError, StoreError

log = logging.getLogger(__name__)

CLASS_NAME = "CurriculumRLHFDataset"
CONFIG_KEY = "curriculum"  # data.curriculum.* in verl's config
# A batch row's own rollout count: verl's V1 agent loop runs ``prompt.pop("__rollout_n__", rollout.n)``
# sessions of the row under its one uid (verl/trainer/ppo/v1/agent_loop_tq.py, verl PR #6710).
ROLLOUT_N_KEY = "__rollout_n__"


@dataclass(frozen=True)
class VerlCurriculumConfig:
    """``data.curriculum.*`` (module docstring)."""

    data_dir: str | None = None
    policy: str = DEFAULT_POLICY
    dataset: str | None = None
    group_size: int | None = None
    seed: int = 0
    rollout_n: bool = False

    def __post_init__(self) -> None:
        if self.group_size is not None:
            check_int("data.curriculum.group_size", self.group_size, 1)
        check_int("data.curriculum.seed", self.seed)
        check_bool("data.curriculum.rollout_n", self.rollout_n)
        if self.rollout_n and self.group_size is None:
            raise ConfigError(
                "data.curriculum.rollout_n=true needs data.curriculum.group_size: the rollouts of one group, "
                "actor_rollout_ref.rollout.n"
            )


def curriculum_config(data_config: Mapping) -> VerlCurriculumConfig:
    """The ``curriculum`` mapping of verl's data config (absent: every default); unknown keys are errors."""
    raw = data_config.get(CONFIG_KEY) if hasattr(data_config, "get") else None
    raw = {} if raw is None else {str(k): raw[k] for k in raw}
    known = [f.name for f in fields(VerlCurriculumConfig)]
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise ConfigError(f"data.{CONFIG_KEY} has unknown key(s) {unknown}; known: {known}")
    return VerlCurriculumConfig(**raw)


def batch_size(data_config: Mapping) -> int:
    """verl's train dataloader batch: ``gen_batch_size``, else ``train_batch_size`` (``RayPPOTrainer``)."""
    value = data_config.get("gen_batch_size") or data_config.get("train_batch_size")
    if value is None or int(value) != value or value < 1:
        raise ConfigError(f"data.train_batch_size={value!r}: the curriculum needs a batch size >= 1")
    return int(value)


def _files(value: Any) -> list[str]:
    if value is None:
        return []
    return [str(value)] if isinstance(value, str | Path) else [str(v) for v in value]


def is_train_dataset(data_files: Any, data_config: Mapping) -> bool:
    """Whether verl builds this dataset from ``data.train_files`` (the curriculum's) or the validation files.

    Raises:
        ConfigError: train and validation are the same files (which one is being built is unknown).
    """
    files, train, val = _files(data_files), _files(data_config.get("train_files")), _files(data_config.get("val_files"))
    if train and train == val:
        raise ConfigError(
            f"data.train_files and data.val_files are the same ({train}): the curriculum dataset cannot tell "
            "validation from training; give a separate validation file"
        )
    return files == train


def check_loader(data_config: Mapping) -> None:
    """The dataloader settings the curriculum's fetch counter needs."""
    workers = data_config.get("dataloader_num_workers", 0)
    if workers:
        raise ConfigError(
            f"data.dataloader_num_workers={workers}: the curriculum counts the dataloader's fetches in one process; "
            "set data.dataloader_num_workers=0"
        )


# --- rows to prompts --------------------------------------------------------------------------


def row_prompt_ids(
    prompts: Sequence[Any], extra_infos: Sequence[Any], matcher, row_ids: Sequence[Any] | None = None
) -> list[str]:
    """Each verl row's prompt id: its own ``prompt_id`` (the column `difficulty export` writes) when it is a
    prompt of the dataset, else problem text (last user message), else ``extra_info.index``; a row matching
    none is ``row-<i>`` (a prompt never observed)."""
    out = []
    row_ids = row_ids if row_ids is not None else [None] * len(prompts)
    for i, (prompt, extra, own) in enumerate(zip(prompts, extra_infos, row_ids, strict=True)):
        pid, _ = matcher.by_id(own) if own is not None else (None, None)
        if pid is not None:
            out.append(pid)
            continue
        text = datasets.user_text(datasets.verl_messages(prompt, origin="verl train file", row=i))
        pid, _ = matcher.by_problem(text)
        if pid is None and isinstance(extra, Mapping) and extra.get("index") is not None:
            pid, _ = matcher.by_index(extra.get("index"))
        out.append(pid if pid is not None else f"row-{i}")
    return out


class CurriculumSchedule:
    """The dataloader's ``j``-th fetch to a row: slot ``j mod B`` of curriculum batch ``j // B``.

    ``row_ids`` holds each row's prompt id; a prompt on several rows is drawn as its first row. Before
    each batch ``counts()`` is asked for the current ``(n, c)`` per prompt of ``self.ids`` (None: no
    change), then ``policy.choose_groups(B)`` fills the batch's ``B`` slots (a prompt given ``m``
    groups in ``m`` slots in a row). ``chosen`` keeps every batch's ids, in order, one per slot.

    With ``rollout_n`` (verl's V1 agent loop, ``ROLLOUT_N_KEY``) a prompt given ``m`` groups takes one
    slot instead, drawing ``m * group_size`` rollouts in one group (``slot_n``); the slots it frees go
    to the next prompts the policy chooses among the rest, one group each.
    """

    def __init__(
        self,
        row_ids: Sequence[str],
        batch: int,
        *,
        policy: str = DEFAULT_POLICY,
        seed: int = 0,
        group_size: int | None = None,
        counts: Callable[[], tuple[np.ndarray, np.ndarray] | None] | None = None,
        rollout_n: bool = False,
    ) -> None:
        if rollout_n and group_size is None:
            raise ConfigError("rollout_n needs group_size: the rollouts of one group (actor_rollout_ref.rollout.n)")
        first: dict[str, int] = {}
        for i, pid in enumerate(row_ids):
            first.setdefault(str(pid), i)
        self.ids = list(first)
        self.policy = make_policy(policy, self.ids, seed=seed, G=group_size)
        most = len(first) * self.policy.max_groups
        if batch < 1 or batch > most:
            raise ConfigError(
                f"batch size {batch} must be between 1 and the {len(first)} distinct prompts of the train file"
                + (f" times max_groups={self.policy.max_groups}" if self.policy.max_groups > 1 else "")
            )
        self.first_row = first
        self.batch = batch
        self.counts = counts
        self.fetched = 0
        self.rows: list[int] = []
        self.chosen: list[list[str]] = []
        self.group_size = group_size
        self.rollout_n = rollout_n
        self.slot_n: list[int] = []  # with rollout_n: each slot's rollouts in the current batch
        self.dataset: str | None = None  # the stored dataset, when built from the data directory

    def next_row(self) -> int:
        return self.next_slot()[0]

    def next_slot(self) -> tuple[int, int | None]:
        """The next fetch's row and, with ``rollout_n``, its rollouts (None without)."""
        slot = self.fetched % self.batch
        if slot == 0:
            self._choose()
        self.fetched += 1
        return self.rows[slot], (self.slot_n[slot] if self.rollout_n else None)

    def _choose(self) -> None:
        got = self.counts() if self.counts is not None else None
        if got is not None:
            n, c = got
            # Discounted to the newest step imported: later updates age them from there.
            self.policy.set_counts(n, c, getattr(self.counts, "latest_step", None))
        step = getattr(self.policy, "t", None)
        pids = self.policy.choose_groups(self.batch)
        if self.rollout_n:
            groups = dict(Counter(pids))  # a prompt's groups are one slot of m * G rollouts
            if len(groups) < self.batch:
                if step is not None:  # the freed slots are picks of the same step
                    self.policy.t = step
                rest = [p for p in self.ids if p not in groups]
                groups.update(dict.fromkeys(self.policy.choose(self.batch - len(groups), among=rest), 1))
            pids = list(groups)
            self.slot_n = [m * self.group_size for m in groups.values()]
        self.chosen.append(pids)
        self.rows = [self.first_row[p] for p in pids]


class ObservedCounts:
    """Each prompt's discounted counts from the ``observations`` table, re-read only when its files change.

    Called, it returns ``(n_eff, c_eff)`` aligned with ``ids`` (0 for a prompt never observed), or None
    when the table's files are those of the last call. ``latest_step`` is the newest step seen.
    """

    def __init__(self, store, dataset: str, ids: Sequence[str], forgetting: float) -> None:
        from pipeline.observe.current import CurrentConfig

        self.store = store
        self.dataset = dataset
        self.ids = list(ids)
        self.config = CurrentConfig(forgetting=forgetting)
        self.seen: tuple[str, ...] | None = None
        self.latest_step: int | None = None

    def __call__(self) -> tuple[np.ndarray, np.ndarray] | None:
        from pipeline.observe.current import current_difficulty
        from pipeline.observe.record import TABLE, read_observations, simulated_sources

        files = tuple(sorted(str(f) for f in self.store.files(TABLE)))
        if files == self.seen:
            return None
        self.seen = files
        obs = read_observations(self.store)
        obs = obs.filter(pc.equal(obs.column("dataset"), pa.scalar(self.dataset)))
        # a simulate run's made-up rates never steer a real training run
        current = current_difficulty(obs, replace(self.config, simulated=simulated_sources(self.store)))
        where = {p: i for i, p in enumerate(self.ids)}
        n, c = np.zeros(len(self.ids)), np.zeros(len(self.ids))
        for pid, ne, ce in zip(
            current.column("prompt_id").to_pylist(),
            current.column("n_eff").to_pylist(),
            current.column("c_eff").to_pylist(),
            strict=True,
        ):
            if pid in where:
                n[where[pid]], c[where[pid]] = ne, ce
        if current.num_rows:
            self.latest_step = int(pc.max(current.column("last_step")).as_py())
        return n, c


def build_schedule(frame, data_files: Any, data_config: Mapping, prompt_key: str = "prompt") -> CurriculumSchedule:
    """The schedule of a train dataset: its rows (``frame``, verl's ``datasets.Dataset`` after filtering)
    matched to the stored dataset's prompts, the policy's counts read from the data directory."""
    from pipeline.observe.match import Matcher
    from pipeline.observe.track import dataset_problems
    from pipeline.store import Store, resolve_data_dir

    settings = curriculum_config(data_config)
    check_loader(data_config)
    root = resolve_data_dir(settings.data_dir)
    store = Store(root)
    # Never made here: a mistyped data_dir would be a new empty folder that `difficulty track`
    # never writes to, and the policy would never see an outcome.
    if not store.exists(store.root):
        raise StoreError(
            f"data.curriculum.data_dir: no data directory at {str(root)!r}; give the folder `difficulty track` "
            "imports into (made by `difficulty load --data-file <train file> --data-dir ...`)"
        )
    files = _files(data_files)
    if settings.dataset is None and len(files) != 1:
        raise ConfigError(f"{len(files)} train files: name their stored dataset with +data.curriculum.dataset=NAME")
    if settings.dataset is not None:
        problems = dataset_problems(store, settings.dataset)
    else:
        problems = dataset_problems(store, data_file=files[0])
    if problems.num_rows == 0:
        raise DatasetError(f"no problems in {files[0]!r}")
    dataset = problems.column("dataset")[0].as_py()
    names = frame.column_names
    if prompt_key not in names:
        raise DatasetError(f"the train file has no {prompt_key!r} column (data.prompt_key); columns: {names}")
    extra = frame["extra_info"] if "extra_info" in names else [None] * len(frame)
    own = frame["prompt_id"] if "prompt_id" in names else None
    ids = row_prompt_ids(frame[prompt_key], extra, Matcher.from_problems(problems), own)
    known = set(problems.column("prompt_id").to_pylist())
    matched = sum(pid in known for pid in ids)
    if not matched:
        raise DatasetError(
            f"none of the {len(ids)} rows of the train file {files} is a prompt of dataset {dataset!r} (by prompt_id, "
            "problem text or extra_info.index): the policy would never see an outcome; name the dataset the file was "
            "loaded as (+data.curriculum.dataset=...), or leave it out to load the train file itself"
        )
    if matched < len(ids):
        log.warning("%d of %d rows of %s are no prompt of dataset %r: never observed", len(ids) - matched, len(ids),
                    files, dataset)  # fmt: skip
    schedule = CurriculumSchedule(
        ids,
        batch_size(data_config),
        policy=settings.policy,
        seed=settings.seed,
        group_size=settings.group_size,
        rollout_n=settings.rollout_n,
    )
    schedule.counts = ObservedCounts(store, dataset, schedule.ids, schedule.policy.forgetting)
    schedule.dataset = dataset
    return schedule


def dataset_class(base: type | None = None) -> type:
    """``CurriculumRLHFDataset``: ``base`` (default verl's ``RLHFDataset``) whose train instance draws by the
    policy (``schedule``); the validation instance is ``base`` unchanged."""
    if base is None:
        from verl.utils.dataset.rl_dataset import RLHFDataset

        base = RLHFDataset

    class CurriculumRLHFDataset(base):
        def __init__(self, data_files, tokenizer, config, processor=None, max_samples: int = -1) -> None:
            super().__init__(
                data_files=data_files, tokenizer=tokenizer, config=config, processor=processor, max_samples=max_samples
            )
            self.schedule: CurriculumSchedule | None = None
            if is_train_dataset(data_files, config):
                self.schedule = build_schedule(
                    self.dataframe, self.original_data_files, config, config.get("prompt_key", "prompt")
                )

        def __getitem__(self, item):
            if self.schedule is None:
                return super().__getitem__(item)
            row, n = self.schedule.next_slot()
            got = super().__getitem__(row)
            if n is not None:
                got[ROLLOUT_N_KEY] = n
            return got

    return CurriculumRLHFDataset


_BUILT: dict[str, type] = {}


def __getattr__(name: str) -> Any:
    # verl's load_extern_object reads the class with getattr: build it (importing verl) on that first read.
    if name == CLASS_NAME:
        if name not in _BUILT:
            _BUILT[name] = dataset_class()
        return _BUILT[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
