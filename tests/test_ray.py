"""Sampling shards on Ray actors (a local 2-CPU cluster) equals the single-process run."""

from __future__ import annotations

import pyarrow as pa
import pytest
import ray  # the ray extra; conftest checks it is installed
from pipeline.flows import executors, prefect_flows, ray_exec

from pipeline import run as stages
from pipeline.store import Store

TINY = {"limit": 6, "n": 2, "max_tokens": 12, "shard_size": 2, "grade_workers": 1, "report": False}


@pytest.fixture(scope="module")
def local_ray():
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_actor_resources_per_backend():
    cpu = stages.ProfileConfig.build(executor="ray")
    assert ray_exec.actor_resources(cpu) == {"num_cpus": 1.0, "num_gpus": 0}
    threads = stages.ProfileConfig.build(executor="ray", backend_options={"n_threads": 2})
    assert ray_exec.actor_resources(threads)["num_cpus"] == 2.0
    unset = stages.ProfileConfig.build(executor="ray", backend="xllamacpp")
    assert ray_exec.actor_config(unset).engine.backend_options == {"n_threads": 1}
    gpu = stages.ProfileConfig.build(
        executor="ray", backend="vllm", model="m", backend_options={"tensor_parallel_size": 2}
    )
    assert ray_exec.actor_resources(gpu) == {"num_cpus": 1, "num_gpus": 2.0}
    assert (
        ray_exec.actor_resources(stages.ProfileConfig.build(executor="ray", backend="vllm", model="m"))["num_gpus"]
        == 1.0
    )
    assert ray_exec.actor_config(cpu).engine.backend_options == {"n_threads": 1}
    assert ray_exec.actor_config(cpu).grading.workers == 1
    with pytest.raises(ValueError, match="executor='local'"):
        ray_exec.RayExecutor(stages.ProfileConfig())


def sorted_samples(data_dir, run_id: str) -> pa.Table:
    table = Store(data_dir).read_table("samples", {"run_id": run_id})
    return table.sort_by([("prompt_id", "ascending"), ("sample_idx", "ascending")])


@pytest.mark.slow
def test_ray_run_equals_single_process_run(local_ray, prefect_api, tmp_path, check_complete, close_engines):
    single = stages.ProfileConfig.build(**TINY)  # llama.cpp on all cores, actors on one each
    on_ray = stages.ProfileConfig.build(**TINY, executor="ray", replicas=2)
    ref = executors.profile_direct(single, Store.open(tmp_path / "single"))
    stages.close_engines()
    ray_store = Store.open(tmp_path / "ray")
    got = prefect_flows.profile_flow(on_ray, ray_store)  # Prefect orchestrates, Ray executes
    assert got.run_id == ref.run_id
    check_complete(ray_store, got.run_id, 2, 6)
    assert ray_store.finished_shards(got.run_id) == {0, 1, 2}
    a = sorted_samples(tmp_path / "single", ref.run_id)
    b = sorted_samples(tmp_path / "ray", got.run_id)
    assert a.equals(b), "the Ray run differs from the single-process run"
    assert ray_store.get_run(got.run_id).status == "done"


def test_ray_executor_without_prefect_on_simulate(local_ray, tmp_path, check_complete):
    """The same executor choice without Prefect; every backend runs on the actors, simulate too."""
    cfg = stages.ProfileConfig.build(backend="simulate", limit=6, n=3, shard_size=2, report=False)
    ref = executors.profile_direct(cfg, Store.open(tmp_path / "single"))
    on_ray = Store.open(tmp_path / "ray")
    got = executors.profile_direct(
        stages.ProfileConfig.build(**{**cfg.flat(), "executor": "ray", "replicas": 2}), on_ray
    )
    assert got.run_id == ref.run_id
    check_complete(on_ray, got.run_id, 3, 6)
    assert sorted_samples(tmp_path / "single", ref.run_id).equals(sorted_samples(tmp_path / "ray", got.run_id))


class OtherDiskExecutor:
    """A worker that writes its shards to its own machine's disk (no shared data directory)."""

    def __init__(self, inner, elsewhere: Store) -> None:
        self.inner, self.elsewhere = inner, elsewhere
        self.model_name, self.concurrency = inner.model_name, 1

    def write_shard(self, store, job):
        return self.inner.write_shard(self.elsewhere, job)


def test_a_shard_written_where_the_driver_cannot_see_it_is_an_error(store, tmp_path):
    """Workers writing to a data directory the driver does not share: named at the first shard,
    instead of a run that ends with every shard 'not finished'."""
    from pipeline.errors import StoreError

    cfg = stages.ProfileConfig.build(backend="simulate", limit=4, n=2, shard_size=2, grade_workers=1, report=False)
    with stages.local_executor(cfg) as local:
        plan = stages.prepare_run(cfg, store, local.model_name)
        worker = OtherDiskExecutor(local, Store.open(tmp_path / "node-2-disk"))
        with pytest.raises(StoreError, match="every node must reach the same data directory"):
            stages.run_shard(store, plan, 0, worker)


def test_the_progress_count_adds_up_the_actors_shards(local_ray, tmp_path, monkeypatch, close_engines):
    """Samples drawn on actors count in the driver's display when each shard is written: the
    run's total, every shard once, nothing counted inside another process."""
    from pipeline.run import progress

    seen: list[progress.Snapshot] = []

    class Recorder(progress.RunProgress):
        def shard_done(self, shard: int) -> None:
            super().shard_done(shard)
            seen.append(self.snapshot())

    counter = Recorder()
    monkeypatch.setattr(progress, "_current", counter)
    cfg = stages.ProfileConfig.build(**{**TINY, "backend": "simulate"}, executor="ray", replicas=2)
    executors.profile_direct(cfg, Store.open(tmp_path / "data"))
    assert [s.total for s in seen] == [12, 12, 12]
    assert sorted(s.graded for s in seen) == [4, 8, 12] and sorted(s.shards_done for s in seen) == [1, 2, 3]
    assert all(s.sampled == s.graded for s in seen)  # no partial count from another process
