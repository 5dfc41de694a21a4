"""A verl curriculum, dry run: verl 0.9.1's own config, dataset loading and dataloader draw batches through
`CurriculumRLHFDataset`, which picks each batch's prompts from the difficulty in the data directory.
No GPU and no rollout: only the dataloader a `verl.trainer.main_ppo` run would build.

Usage (in verl's environment): python examples/verl_curriculum.py --data-dir DATA_DIR [--batches 3] [--batch-size 4]
"""

import argparse
from itertools import islice
from pathlib import Path

from hydra import compose, initialize_config_module
from torchdata.stateful_dataloader import StatefulDataLoader
from verl.trainer.ppo.utils import create_rl_dataset, create_rl_sampler
from verl.utils import hf_tokenizer
from verl.utils.dataset.rl_dataset import collate_fn

import pipeline
from pipeline.export import ExportConfig, export_run
from pipeline.sample.models import prepare
from pipeline.store import Store

parser = argparse.ArgumentParser()
parser.add_argument("--data-dir", default="difficulty-data")
parser.add_argument("--batches", type=int, default=3)
parser.add_argument("--batch-size", type=int, default=4)
args = parser.parse_args()
data_dir = Path(args.data_dir).resolve()

# The newest profile written back in verl's format: a top-level prompt_id, the difficulty in extra_info.
run = pipeline.open(data_dir).runs().pl().row(0, named=True)
files = {}
for split in ("train", "val"):  # verl's validation file must be another file: it gets verl's own dataset
    files[split] = data_dir / "exports" / f"{run['run_id']}-verl-{split}.parquet"
    export_run(Store(data_dir), run["run_id"], files[split], ExportConfig(format="verl"))

# What `python -m verl.trainer.main_ppo` composes from these overrides (the rest of a run's are left out).
overrides = [
    f"data.train_files={files['train']}",
    f"data.val_files={files['val']}",
    f"data.train_batch_size={args.batch_size}",
    "data.dataloader_num_workers=0",
    "data.custom_cls.path=pkg://pipeline.integrations.verl_curriculum",
    "data.custom_cls.name=CurriculumRLHFDataset",
    f"+data.curriculum.data_dir={data_dir}",
    f"+data.curriculum.dataset={run['dataset']}",
    "+data.curriculum.group_size=8",
]
with initialize_config_module(config_module="verl.trainer.config", version_base=None):
    config = compose(config_name="ppo_trainer", overrides=overrides)

# The train dataloader as verl's RayPPOTrainer._create_dataloader builds it.
tokenizer = hf_tokenizer(str(prepare().path))  # the bundled model's tokenizer
train = create_rl_dataset(config.data.train_files, config.data, tokenizer, None)
loader = StatefulDataLoader(
    dataset=train,
    batch_size=config.data.train_batch_size,
    num_workers=0,
    drop_last=True,
    collate_fn=collate_fn,
    sampler=create_rl_sampler(config.data, train),
)
print(f"{type(train).__name__}: {len(train)} rows, policy {type(train.schedule.policy).__name__}")
for i, batch in enumerate(islice(loader, args.batches)):
    rates = [e["difficulty"]["pass_rate"] for e in batch["extra_info"]]
    print(f"batch {i}: prompts {list(batch['prompt_id'])}, profiled pass rates {[round(r, 2) for r in rates]}")
