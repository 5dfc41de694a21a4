"""Sampling shards on Ray actors (a local 2-CPU cluster) equals the single-process run."""

from __future__ import annotations

import pyarrow as pa
import pytest
import ray  # the ray extra; conftest checks it is installed
from test_flows import check_complete, llama, prefect_api  # noqa: F401

from pipeline import store
from pipeline.flows import profile as stages
from pipeline.flows import ray_exec

TINY = {"limit": 6, "n": 2, "max_tokens": 12, "shard_size": 2, "grade_workers": 1, "report": False}


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_actor_resources_per_backend():
    cpu = stages.ProfileConfig(executor="ray")
    assert ray_exec.actor_resources(cpu) == {"num_cpus": 1.0, "num_gpus": 0}
    threads = stages.ProfileConfig(executor="ray", backend_options={"n_threads": 2})
    assert ray_exec.actor_resources(threads)["num_cpus"] == 2.0
    gpu = stages.ProfileConfig(executor="ray", backend="vllm", model="m", backend_options={"tensor_parallel_size": 2})
    assert ray_exec.actor_resources(gpu) == {"num_cpus": 1, "num_gpus": 2.0}
    assert ray_exec.actor_resources(stages.ProfileConfig(executor="ray", backend="vllm", model="m"))["num_gpus"] == 1.0
    assert ray_exec.actor_config(cpu).backend_options == {"n_threads": 1}
    with pytest.raises(ValueError, match="executor='local'"):
        ray_exec.ShardPool(stages.ProfileConfig())


def sorted_samples(data_dir, run_id: str) -> pa.Table:
    table = store.read_table(data_dir, "samples", {"run_id": run_id})
    return table.sort_by([("prompt_id", "ascending"), ("sample_idx", "ascending")])


@pytest.mark.slow
@llama
def test_ray_run_equals_single_process_run(local_ray, prefect_api, tmp_path):  # noqa: F811
    single = stages.ProfileConfig(**TINY)  # llama.cpp on all cores, actors on one each
    on_ray = stages.ProfileConfig(**TINY, executor="ray", replicas=2)
    ref = stages.profile_direct(single, tmp_path / "single")
    stages.close_samplers()
    got = stages.profile_flow(on_ray, tmp_path / "ray")  # Prefect orchestrates, Ray executes
    assert got["run_id"] == ref["run_id"]
    check_complete(tmp_path / "ray", got["run_id"], 2, 6)
    assert store.finished_shards(tmp_path / "ray", got["run_id"]) == {0, 1, 2}
    a = sorted_samples(tmp_path / "single", ref["run_id"])
    b = sorted_samples(tmp_path / "ray", got["run_id"])
    assert a.equals(b), "the Ray run differs from the single-process run"
    assert store.get_run(tmp_path / "ray", got["run_id"])["status"] == "done"
