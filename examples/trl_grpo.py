"""GRPO with TRL on the CPU: the bundled model trains on the prompts a curriculum picks from a profile,
and every step's outcomes are recorded back into the data directory.

Usage: python examples/trl_grpo.py --data-dir DATA_DIR [--steps 2] [--G 4] [--prompts-per-step 2] [--threads N]
"""

import argparse
import re
from pathlib import Path

import torch
from datasets import load_dataset
from trl import GRPOConfig

import pipeline
from pipeline.curriculum import make_policy
from pipeline.export import ExportConfig, export_run
from pipeline.integrations.trl import record_rewards
from pipeline.integrations.trl_curriculum import curriculum_trainer
from pipeline.sample.models import prepare
from pipeline.store import Store

parser = argparse.ArgumentParser()
parser.add_argument("--data-dir", default="difficulty-data")
parser.add_argument("--steps", type=int, default=2)
parser.add_argument("--G", type=int, default=4, help="completions per prompt (num_generations)")
parser.add_argument("--prompts-per-step", type=int, default=2)
# On cores shared with other work, torch's threads spin-wait on each other: 1 thread ran twice as fast.
parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
args = parser.parse_args()
if args.threads:
    torch.set_num_threads(args.threads)

# The newest profile, written back as TRL reads it: prompt, answer, prompt_id and its difficulty.
run = pipeline.open(args.data_dir).runs().pl().row(0, named=True)
train_file = Path(args.data_dir) / "exports" / f"{run['run_id']}-trl.parquet"
export_run(Store(args.data_dir), run["run_id"], train_file, ExportConfig(format="trl", G=args.G))
print(f"same as: difficulty export --run {run['run_id']} --format trl --output {train_file}")
train = load_dataset("parquet", data_files=str(train_file), split="train")


def correct(completions, answer, **kwargs):
    """1.0 when the completion's last number is the gold answer (TRL passes the `answer` column)."""
    texts = [c[-1]["content"] for c in completions]  # conversational prompts: completions are messages
    return [
        1.0 if (found := re.findall(r"-?\d+", t)) and found[-1] == a else 0.0
        for t, a in zip(texts, answer, strict=True)
    ]


# A curriculum that starts from the profile's counts, and a recorder that feeds each step's back to it.
counts = train["difficulty"]
policy = make_policy(
    "signal",
    train["prompt_id"],
    [d["answers_drawn"] or 0 for d in counts],
    [d["answers_correct"] or 0 for d in counts],
    G=args.G,
)
recorder = record_rewards(
    correct, data_dir=args.data_dir, source="trl:example", dataset=run["dataset"], model=run["model"]
)
Trainer = curriculum_trainer(policy, recorder)
trainer = Trainer(
    model=str(prepare().path),  # the bundled SmolLM2-135M-Instruct, converted once for transformers
    args=GRPOConfig(
        output_dir=str(Path(args.data_dir) / "trl-example"),
        use_cpu=True,
        num_generations=args.G,
        per_device_train_batch_size=args.G * args.prompts_per_step,
        max_completion_length=16,
        max_steps=args.steps,
        save_strategy="no",
        report_to=[],
    ),
    train_dataset=train,
)
trainer.train()
recorder.close()

# What training drew, per step: the same table `difficulty current` reads.
steps = pipeline.open(args.data_dir).sql(
    "select step, count(*) as prompts, sum(n)::int as rollouts, sum(c)::int as correct from observations"
    " where source = 'trl:example' group by step order by step"
)
print(steps.pl())
