"""Sampling shards on Ray actors: one engine per actor, results written through the same store.

Prefect stays the orchestrator (one retried task per shard); Ray only executes. Each actor loads
the model once and then samples and grades whole shards (``profile.sample_and_grade``); the
graded table comes back to the driver, which writes it with ``store.write_shard``. So the data
directory need only be reachable from the driver, and a shard is written once, atomically, no
matter how many times an actor died on it.

Resources per actor: vLLM takes ``tensor_parallel_size`` GPUs (one by default), llama.cpp takes as
many CPUs as it has threads (one by default, so ``--replicas`` actors fill ``--replicas`` cores),
an OpenAI-compatible client takes one CPU.
"""

from __future__ import annotations

import logging
import queue
import threading
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Self

import pyarrow as pa

from pipeline import store
from pipeline.flows import profile as stages

log = logging.getLogger(__name__)

_EXTRA_HINT = "pip install 'difficulty-pipeline[ray]'"


def _import_ray():
    try:
        import ray
    except ImportError as exc:
        raise ImportError(f"--executor ray needs Ray; install it with: {_EXTRA_HINT}") from exc
    return ray


def actor_resources(config: stages.ProfileConfig) -> dict[str, float]:
    """Ray resources of one engine actor for this backend."""
    opts = config.backend_options
    if config.backend == "vllm":
        return {"num_cpus": 1, "num_gpus": float(opts.get("tensor_parallel_size") or 1)}
    if config.backend == "llamacpp":
        return {"num_cpus": float(opts.get("n_threads") or 1), "num_gpus": 0}
    return {"num_cpus": 1, "num_gpus": 0}


def actor_config(config: stages.ProfileConfig) -> stages.ProfileConfig:
    """The config an actor samples with: llama.cpp threads pinned to the actor's CPUs.

    Grading inside an actor uses one worker process: the actor's CPUs are already counted.
    """
    opts = dict(config.backend_options)
    if config.backend == "llamacpp":
        opts.setdefault("n_threads", 1)
    return replace(config, backend_options=opts, grade_workers=1)


class _Engine:
    """The actor: one sampler, reused for every shard sent to it."""

    def __init__(self, config: dict[str, Any]) -> None:
        import logging as _logging

        _logging.basicConfig(level=_logging.WARNING)
        self.config = stages.ProfileConfig(**config)
        self.sampler = stages.get_sampler(self.config.backend, self.config.model, self.config.backend_options)

    def model_name(self) -> str:
        return self.sampler.model_name

    def sample_and_grade(self, problems: pa.Table, template: str, run_id: str) -> pa.Table:
        return stages.sample_and_grade(self.config, problems, template, run_id, self.sampler)


class ShardPool:
    """A pool of engine actors; ``run_shard`` is thread-safe (one shard per actor at a time).

    It stands in for the sampler in ``prepare_run`` (it has the ``model_name``), so the driver
    never loads a model. Use as a context manager: it connects to Ray (``config.ray_address``, or the already
    initialised Ray of this process, or a new local cluster), starts ``config.replicas`` actors,
    and on exit kills them and disconnects from any Ray it started itself.
    """

    def __init__(self, config: stages.ProfileConfig) -> None:
        if config.executor != "ray":
            raise ValueError(f"executor={config.executor!r}: ShardPool needs executor='ray'")
        self.config = actor_config(config)
        self.replicas = config.replicas
        self._ray = _import_ray()
        self._started_ray = False
        self._idle: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        self._actors: list[Any] = []
        self._cls = None
        self.model_name: str | None = None

    # --- lifecycle --------------------------------------------------------------------------

    def __enter__(self) -> Self:
        ray = self._ray
        if not ray.is_initialized():
            # A local cluster sized to the actors, unless an address says where the cluster is.
            kwargs: dict[str, Any] = {"address": self.config.ray_address} if self.config.ray_address else {}
            ray.init(log_to_driver=False, **kwargs)
            self._started_ray = True
        res = actor_resources(self.config)
        self._cls = ray.remote(**res)(_Engine)
        for _ in range(self.replicas):
            self._add_actor()
        # Fail here, not in the first shard, when an actor cannot load its model.
        names = ray.get([a.model_name.remote() for a in self._actors])
        self.model_name = names[0]  # what the run registry records (prepare_run reads it)
        log.info("ray: %d actors of %s with %s", len(names), names[0], res)
        return self

    def _add_actor(self):
        actor = self._cls.remote(asdict(self.config))
        with self._lock:
            self._actors.append(actor)
        self._idle.put(actor)
        return actor

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        ray = self._ray
        with self._lock:
            actors, self._actors = self._actors, []
        for actor in actors:
            try:
                ray.kill(actor)
            except ValueError:  # not an actor handle any more
                log.debug("actor already gone")
        if self._started_ray:
            ray.shutdown()
            self._started_ray = False

    # --- work -------------------------------------------------------------------------------

    def sample_and_grade(self, problems: pa.Table, template: str, run_id: str) -> pa.Table:
        """Run one batch on the next idle actor; a dead actor is replaced before re-raising."""
        ray = self._ray
        actor = self._idle.get()
        try:
            result = ray.get(actor.sample_and_grade.remote(problems, template, run_id))
        except ray.exceptions.RayActorError:
            with self._lock:
                if actor in self._actors:
                    self._actors.remove(actor)
            log.warning("ray actor died; starting a replacement")
            self._add_actor()
            raise
        self._idle.put(actor)
        return result

    def run_shard(self, data_dir: Path, plan: stages.RunPlan, shard: int) -> int:
        """Like ``profile.run_shard``, with the sampling and grading on an actor."""
        if shard in store.finished_shards(data_dir, plan.run_id):
            return 0
        graded = self.sample_and_grade(plan.problems.take(plan.shards[shard]), plan.template, plan.run_id)
        store.write_shard(data_dir, plan.run_id, shard, graded)
        return graded.num_rows

    def run_all(self, data_dir: Path, plan: stages.RunPlan, shards: list[int]) -> int:
        """Run shards concurrently, one thread per actor (used without Prefect)."""
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=self.replicas) as pool:
            return sum(pool.map(lambda s: self.run_shard(data_dir, plan, s), shards))
