"""Files other prompt selectors warm-start from, written from a run's counts.

- **MoPPS** (thu-rllab/MoPPS, ``recipe/ours/mopps.py``, ``PosteriorSampler.initialize_from_json``):
  ``index_score.json``, a JSON object from each verl row's ``extra_info.index`` (as text) to that
  prompt's 0/1 outcomes; MoPPS sets the row's Beta posterior to ``alpha = 3 * sum + prior_alpha``,
  ``beta = 3 * (len - sum) + prior_beta`` and looks rows up by ``str(index)`` as it samples. Its own
  prior pass (``recipe/ours/main_generation_prior.py``) writes the same file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import DatasetError, StoreError
from pipeline.observe.match import index_of
from pipeline.store import Store

MOPPS_FILE = "index_score.json"


@dataclass(frozen=True)
class MoppsFile:
    """What ``write_mopps`` wrote: the file, the rows keyed, and the prompts it left out (no row index)."""

    path: Path
    rows: int
    outcomes: int
    no_index: int


def mopps_index_score(store: Store, run_id: str) -> tuple[dict[str, list[int]], int]:
    """Each of the run's measured prompts as MoPPS reads it: ``{str(extra_info.index): [1] * c + [0] * (n - c)}``
    (the order of a prompt's outcomes is not kept by the run and MoPPS only sums them), and the count of
    measured prompts whose row has no index. Two prompts on one index are a ``DatasetError``."""
    run = store.get_run(run_id)
    stats = store.read_table("prompt_stats", {"run_id": run_id})
    if stats.num_rows == 0:
        raise StoreError(f"run {run_id} has no analysis yet (status {run.status!r}): finish it first")
    problems = store.read_table("problems", {"dataset": run.dataset})
    index = dict(zip(problems.column("prompt_id").to_pylist(),
                     map(index_of, problems.column("original").to_pylist()), strict=True))  # fmt: skip
    out: dict[str, list[int]] = {}
    owner: dict[str, str] = {}
    missing = 0
    for pid, n, c in zip(*(stats.column(k).to_pylist() for k in ("prompt_id", "n", "c")), strict=True):
        key = index.get(pid)
        if not n:
            continue
        if key is None:
            missing += 1
            continue
        key = str(key)
        if key in out:
            raise DatasetError(f"prompts {owner[key]} and {pid} share extra_info.index {key}: MoPPS keys rows by it")
        owner[key] = pid
        out[key] = [1] * c + [0] * (n - c)
    return out, missing


def write_mopps(store: Store, run_id: str, path: str | Path) -> MoppsFile:
    """``index_score.json`` for MoPPS's ``tasksampler.bandit_init_dir``, written whole (temp file, rename)."""
    scores, missing = mopps_index_score(store, run_id)
    if not scores:
        raise DatasetError(
            f"run {run_id}: no measured prompt has a row index (verl's extra_info.index), which MoPPS keys on"
        )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(scores, indent=1))
    tmp.replace(path)
    return MoppsFile(path, len(scores), sum(len(v) for v in scores.values()), missing)
