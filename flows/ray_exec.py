"""The Ray executor: one engine per actor, each writing its own shards straight to the data directory.

Prefect stays the orchestrator (one retried task per shard); Ray only executes. Each actor loads
the model once and then samples, grades, checks and writes whole shards (``run.ShardJob`` in,
``run.write_graded_shard``); the driver receives only the count, so its memory does not grow with
the samples and no sample crosses the network twice. Every node must therefore reach the data
directory: an ``s3://`` one (credentials from each node's standard AWS environment), or a folder
shared by every node. A shard is written once, atomically, whatever number of times an actor died
on it (a write is a rename, or one PUT).

Resources per actor: vLLM takes ``tensor_parallel_size`` GPUs (one by default), llama.cpp takes as
many CPUs as it has threads (one by default, so ``--replicas`` actors fill ``--replicas`` cores),
an OpenAI-compatible client takes one CPU.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from dataclasses import replace
from typing import Any, Self

from pipeline.flows import watchdog

from pipeline import run
from pipeline.errors import ConfigError, MissingDependencyError
from pipeline.sample import GGUF_BACKENDS
from pipeline.store import Store

log = logging.getLogger(__name__)

_EXTRA_HINT = "pip install 'difficulty-pipeline[ray]'"


def _import_ray():
    try:
        import ray
    except ImportError as exc:
        raise MissingDependencyError(f"--executor ray needs Ray; install it with: {_EXTRA_HINT}") from exc
    return ray


def _session_dir() -> str | None:
    """The session folder of the local Ray cluster this process started (Ray's own attribute: None
    if a Ray version no longer has it; the agents then end on their own, a minute later)."""
    try:
        from ray._private import worker

        return worker._global_node.get_session_dir_path()
    except (ImportError, AttributeError):
        return None


def actor_resources(config: run.ProfileConfig) -> dict[str, float]:
    """Ray resources of one engine actor for this backend."""
    opts = config.engine.backend_options
    if config.engine.backend == "vllm":
        return {"num_cpus": 1, "num_gpus": float(opts.get("tensor_parallel_size") or 1)}
    if config.engine.backend in GGUF_BACKENDS:
        return {"num_cpus": float(opts.get("n_threads") or 1), "num_gpus": 0}
    return {"num_cpus": 1, "num_gpus": 0}


def actor_config(config: run.ProfileConfig) -> run.ProfileConfig:
    """The config an actor samples with: llama.cpp threads pinned to the actor's CPUs.

    Grading inside an actor uses one worker process: the actor's CPUs are already counted.
    """
    opts = dict(config.engine.backend_options)
    if config.engine.backend in GGUF_BACKENDS:
        opts.setdefault("n_threads", 1)
    return replace(
        config, engine=replace(config.engine, backend_options=opts), grading=replace(config.grading, workers=1)
    )


class _Engine:
    """The actor: one sampler, reused for every shard sent to it."""

    def __init__(self, config: dict[str, Any]) -> None:
        import logging as _logging

        _logging.basicConfig(level=_logging.WARNING)
        self.config = run.ProfileConfig.from_dict(config)
        engine = self.config.engine
        self.sampler = run.get_sampler(engine.backend, engine.model, engine.backend_options)

    def model_name(self) -> str:
        return self.sampler.model_name

    def write_shard(self, store: Store, job: run.ShardJob) -> int:
        return run.write_graded_shard(store, job, run.sample_and_grade(self.config, job, self.sampler))


class RayExecutor:
    """A pool of engine actors; ``write_shard`` is thread-safe (one shard per actor at a time).

    It is an ``run.Executor``: the driver never loads a model (``model_name`` comes from the
    actors). Use as a context manager: it connects to Ray (``config.ray_address``, or the already
    initialised Ray of this process, or a new local cluster), starts ``config.replicas`` actors,
    and on exit kills them and disconnects from any Ray it started itself.
    """

    def __init__(self, config: run.ProfileConfig) -> None:
        if config.execution.executor != "ray":
            raise ConfigError(f"executor={config.execution.executor!r}: RayExecutor needs executor='ray'")
        self.config = actor_config(config)
        self.concurrency = config.execution.replicas
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
            # A new local cluster sized to the actors, unless an address (the option, else
            # RAY_ADDRESS) says where the cluster is. "local": never the latest cluster another
            # process started on this machine, whose processes the watchdog below would end.
            address = self.config.execution.ray_address or os.environ.get("RAY_ADDRESS")
            if not address:
                watchdog.guard()  # a local cluster's processes end with this one, even on kill -9
            ray.init(address=address or "local", log_to_driver=False)
            self._started_ray = True
            if not address:
                # Its dashboard and runtime-env agents get an environment of their own (no
                # watchdog marker) and, their raylet gone, wait 60 s on the dead GCS before exiting:
                # named by the session folder their open log files are in.
                session = _session_dir()
                if session:
                    watchdog.also_end(session)
        res = actor_resources(self.config)
        self._cls = ray.remote(**res)(_Engine)
        for _ in range(self.concurrency):
            self._add_actor()
        # Fail here, not in the first shard, when an actor cannot load its model.
        names = ray.get([a.model_name.remote() for a in self._actors])
        self.model_name = names[0]  # what the run registry records
        log.info("ray: %d actors of %s with %s", len(names), names[0], res)
        return self

    def _add_actor(self):
        actor = self._cls.remote(self.config.to_dict())
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

    def write_shard(self, store: Store, job: run.ShardJob) -> int:
        """Sample, grade and write one shard on the next idle actor; only the count comes back."""
        return self._on_actor(lambda actor: actor.write_shard.remote(store, job))

    def _on_actor(self, call):
        """``call(actor)`` on the next idle actor; a dead actor is replaced before re-raising."""
        ray = self._ray
        actor = self._idle.get()
        try:
            result = ray.get(call(actor))
        except ray.exceptions.RayActorError:
            with self._lock:
                if actor in self._actors:
                    self._actors.remove(actor)
            log.warning("ray actor died; starting a replacement")
            self._add_actor()
            raise
        self._idle.put(actor)
        return result
