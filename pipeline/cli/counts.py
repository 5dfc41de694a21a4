"""The counts ``analyze`` and ``allocate`` work on: a run's samples (``--run``) or a dataset's
prior counts (``--dataset``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.errors import ConfigError, DatasetError

if TYPE_CHECKING:
    import pyarrow as pa

    from pipeline.store import Store


def counts_of(store: Store, run: str | None, dataset: str | None, answers: bool = True) -> tuple[str, pa.Table]:
    """``(run_id, counts)`` of ``--run`` (its samples) or ``--dataset`` (prior counts, ``prior-<name>``)."""
    from pipeline import analyze, finish

    if (run is None) == (dataset is None):
        raise ConfigError("give exactly one of --run RUN_ID or --dataset NAME")
    if run is not None:
        return run, finish.run_counts(store, run, answers=answers)
    problems = store.read_table("problems", {"dataset": dataset})
    if problems.num_rows == 0:
        raise DatasetError(f"no problems stored for dataset {dataset!r}; run `difficulty load` first")
    return f"prior-{dataset}", analyze.counts_from_priors(problems)
