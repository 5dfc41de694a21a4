"""The current difficulty stored as a run of its own, so every command that reads a run works on it.

``difficulty current --dataset D --save`` registers the run ``current-<hash>`` (backend
``observations``): its per-prompt counts are each prompt's discounted counts rounded to whole
outcomes, ``n = round(sum w n)`` and ``c = round(sum w c)`` (exact when nothing is forgotten), analysed
and allocated like a profile run's. ``difficulty export --run current-...`` then writes the
dataset back with the current difficulty on every row, and ``difficulty allocate --run ...``
spends a budget where the signal is now. The id hashes the dataset, the settings and the
observations used, so saving the same state again finds the same run.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.errors import ConfigError
from pipeline.finish import OBSERVATIONS_BACKEND as BACKEND
from pipeline.finish import finish_from_counts
from pipeline.observe import record
from pipeline.observe.current import CurrentConfig, current_difficulty, pooled_observations
from pipeline.store import RunRecord, Store


def snapshot_counts(observations: pa.Table, dataset: str, config: CurrentConfig) -> pa.Table:
    """``(prompt_id, n, c)`` of a dataset's current difficulty, discounted counts rounded (prompts
    whose rounded ``n`` is 0, all forgotten, are left out)."""
    obs = observations.filter(pc.equal(observations.column("dataset"), dataset))
    now = current_difficulty(obs, config)
    if now.num_rows == 0:
        chosen = "".join(f", {k} {list(getattr(config, k))}" for k in ("sources", "models") if getattr(config, k))
        raise ConfigError(
            f"no observations of dataset {dataset!r} of kinds {list(config.kinds)}{chosen}: `difficulty track` first"
        )
    n = np.rint(now.column("n_eff").to_numpy()).astype(np.int64)
    c = np.minimum(np.rint(now.column("c_eff").to_numpy()).astype(np.int64), n)
    keep = n > 0
    return pa.table({"prompt_id": now.column("prompt_id").filter(pa.array(keep)), "n": n[keep], "c": c[keep]})


def save_current(store: Store, dataset: str, config: CurrentConfig | None = None) -> str:
    """Store the dataset's current difficulty as a run (analysis and default allocation); its id."""
    config = config or CurrentConfig()
    obs = record.read_observations(store)
    counts = snapshot_counts(obs, dataset, config)
    settings = {
        "forgetting": config.forgetting,
        "kinds": list(config.kinds),
        "prior": [config.prior_a, config.prior_b],
    }
    # The sources and models pooled (a selection's) are in the id through the sources and the counts.
    used = pooled_observations(obs.filter(pc.equal(obs.column("dataset"), dataset)), config)
    sources = sorted(set(used.column("source").to_pylist()))
    digest = hashlib.sha256(
        json.dumps({"dataset": dataset, "settings": settings, "sources": sources}, sort_keys=True).encode()
    )
    for column in ("prompt_id", "n", "c"):
        digest.update(json.dumps(counts.column(column).to_pylist()).encode())
    run_id = "current-" + digest.hexdigest()[:12]
    store.register_run(
        RunRecord(
            run_id,
            dataset=dataset,
            model=", ".join(sorted({m for m in used.column("model").to_pylist() if m})) or None,
            backend=BACKEND,
            params={**settings, "sources": sources, "latest_step": pc.max(used.column("step")).as_py()},
            seed=0,
            versions={},
            n_prompts=counts.num_rows,
            status="sampling",
        )
    )
    return finish_from_counts(store, run_id, counts).run_id
