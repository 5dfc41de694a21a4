"""Run in the verl environment (``make venv-verl``) by ``tests/test_verl_curriculum.py``; not a test itself.

Builds the train and validation dataloaders the way verl 0.9.1's ``RayPPOTrainer._create_dataloader``
does (hydra-composed ``ppo_trainer`` config with the command line's overrides, ``create_rl_dataset``,
``create_rl_sampler``, ``StatefulDataLoader`` with verl's ``collate_fn``), with ``data.custom_cls``
naming the curriculum dataset. Prints one JSON line (after ``MARK``) after ``batches`` batches, waits for a line on
stdin (the test imports a new rollout step meanwhile), then prints one after ``batches`` more.
Each batch is listed as its rows' ``extra_info.index``.

With ``rollout_n`` in the spec it instead forms the first batch's groups as ``RayPPOTrainer.fit`` does
(a ``uid`` per batch row, then ``batch.repeat(rollout_n, interleave=True)``), scores each rollout by
its position (the ``j``-th group of the batch has ``j mod rollout_n`` correct), computes verl's GRPO
advantages grouped by ``uid`` (``compute_grpo_outcome_advantage``), and prints each rollout's
``extra_info.index``, ``uid``, reward and advantage.
"""

from __future__ import annotations

import json
import sys

MARK = "CURRICULUM-JSON "  # verl prints to stdout too: the test reads the lines that start with this


def emit(obj: dict) -> None:
    print(MARK + json.dumps(obj), flush=True)


def main(spec: dict) -> None:
    from hydra import compose, initialize_config_module
    from torchdata.stateful_dataloader import StatefulDataLoader
    from verl.trainer.ppo.utils import create_rl_dataset, create_rl_sampler
    from verl.utils import hf_tokenizer
    from verl.utils.dataset.rl_dataset import collate_fn

    overrides = [
        f"data.train_files={spec['train']}",
        f"data.val_files={spec['val']}",
        f"data.train_batch_size={spec['batch']}",
        "data.dataloader_num_workers=0",
        "data.custom_cls.path=pkg://pipeline.integrations.verl_curriculum",
        "data.custom_cls.name=CurriculumRLHFDataset",
        *spec["overrides"],
    ]
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        config = compose(config_name="ppo_trainer", overrides=overrides)
    data = config.data
    tokenizer = hf_tokenizer(spec["tokenizer"])
    train = create_rl_dataset(data.train_files, data, tokenizer, None, max_samples=data.get("train_max_samples", -1))
    val = create_rl_dataset(data.val_files, data, tokenizer, None, max_samples=data.get("val_max_samples", -1))
    loader = StatefulDataLoader(
        dataset=train,
        batch_size=data.get("gen_batch_size", None) or data.train_batch_size,
        num_workers=data["dataloader_num_workers"],
        drop_last=True,
        collate_fn=collate_fn,
        sampler=create_rl_sampler(data, train),
    )
    val_loader = StatefulDataLoader(
        dataset=val,
        batch_size=data.val_batch_size or len(val),
        num_workers=data["dataloader_num_workers"],
        shuffle=data.get("validation_shuffle", True),
        drop_last=False,
        collate_fn=collate_fn,
    )
    val_indices = [int(e["index"]) for b in val_loader for e in b["extra_info"]]
    if "rollout_n" in spec:
        emit(groups(next(iter(loader)), int(spec["rollout_n"])))
        return

    def epochs():
        while True:  # the trainer's `for epoch ...: for batch_dict in self.train_dataloader`
            yield from loader

    batches = epochs()

    def draw() -> list[list[int]]:
        return [[int(e["index"]) for e in next(batches)["extra_info"]] for _ in range(spec["batches"])]

    first = draw()
    emit(
        {
            "train_class": type(train).__name__,
            "val_class": type(val).__name__,
            "val_curriculum": val.schedule is not None,
            "val_indices": val_indices,
            "batches_per_epoch": len(loader),
            "latest_step": train.schedule.counts.latest_step,
            "indices": first,
        }
    )
    sys.stdin.readline()
    second = draw()
    emit({"latest_step": train.schedule.counts.latest_step, "indices": second})


def groups(batch_dict: dict, n: int) -> dict:
    """verl's groups of one batch (module docstring): the trainer's own lines, then its advantage."""
    import uuid

    import numpy as np
    import torch
    from verl import DataProto
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    batch = DataProto.from_single_dict(batch_dict)
    # RayPPOTrainer.fit: "add uid to batch", then each row repeated rollout.n times, interleaved.
    batch.non_tensor_batch["uid"] = np.array([str(uuid.uuid4()) for _ in range(len(batch.batch))], dtype=object)
    batch = batch.repeat(repeat_times=n, interleave=True)
    rows = len(batch.batch)
    rewards = [1.0 if i % n < (i // n) % n else 0.0 for i in range(rows)]
    token_rewards = torch.zeros(rows, 3)
    token_rewards[:, -1] = torch.tensor(rewards)
    advantages, _ = compute_grpo_outcome_advantage(
        token_level_rewards=token_rewards, response_mask=torch.ones(rows, 3), index=batch.non_tensor_batch["uid"]
    )
    return {
        "indices": [int(e["index"]) for e in batch.non_tensor_batch["extra_info"]],
        "uids": [str(u) for u in batch.non_tensor_batch["uid"]],
        "rewards": rewards,
        "advantages": advantages[:, -1].tolist(),
    }


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
