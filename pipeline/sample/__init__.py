"""Sampling stage: problems in, one row per sample out, behind one `Sampler` protocol.

Backends:
    xllamacpp CPU, llama.cpp prebuilt (the xllamacpp wheel); the bundled SmolLM2-135M-Instruct Q4_1
              or any GGUF path. The default: nothing to compile at install time.
    vllm      GPUs, vLLM's offline `LLM` API (tensor and data parallelism).
    openai    any OpenAI-compatible server over HTTP.
    simulate  no model: each prompt is right with a known true pass rate (a file or a default rule).

Heavy dependencies (xllamacpp, vllm) are imported only when their backend is made. Retired backends
(`RETIRED_BACKENDS`: `llamacpp`, llama-cpp-python) are refused by name; their runs stay readable.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.errors import ConfigError, SamplingError
from pipeline.sample.base import (
    SAMPLE_ROWS,
    Progress,
    Sampler,
    SamplingParams,
    derive_seed,
    prepare_prompts,
)
from pipeline.sample.templates import DEFAULT_TEMPLATE, render_prompt, template_for

BACKENDS = ("xllamacpp", "vllm", "openai", "simulate")
DEFAULT_BACKEND = "xllamacpp"
# The backends that run a GGUF file with llama.cpp on CPU threads (the same options, `n_threads`).
GGUF_BACKENDS = ("xllamacpp",)
# Backends no longer shipped, and why. Their runs stay in the store and read as before (nothing that
# reads a run makes a sampler); sampling again needs a shipped backend, under a new run id (the id
# hashes the backend's name).
RETIRED_BACKENDS = {
    "llamacpp": "llama-cpp-python compiled llama.cpp from source at install time (5 to 20 minutes); "
    "xllamacpp ships the same llama.cpp prebuilt. Re-profile with --backend xllamacpp (a new run id)",
}

__all__ = [
    "BACKENDS",
    "DEFAULT_BACKEND",
    "DEFAULT_TEMPLATE",
    "GGUF_BACKENDS",
    "RETIRED_BACKENDS",
    "SAMPLE_ROWS",
    "Progress",
    "Sampler",
    "SamplingError",
    "SamplingParams",
    "bundled_model_path",
    "check_backend",
    "derive_seed",
    "make_sampler",
    "prepare_prompts",
    "render_prompt",
    "template_for",
]


def bundled_model_path() -> Path:
    """Path of the bundled SmolLM2-135M-Instruct Q4_1 GGUF (see `gguf.bundled_model_path`)."""
    from pipeline.sample.gguf import bundled_model_path as _path

    return _path()


def check_backend(backend: str | None) -> str:
    """The backend's name, lower-cased (None: the default).

    Raises:
        ConfigError: a retired backend (naming why and what to use) or an unknown one.
    """
    name = (backend or DEFAULT_BACKEND).lower()
    if name in RETIRED_BACKENDS:
        raise ConfigError(f"backend={backend!r} was retired: {RETIRED_BACKENDS[name]}; its runs stay readable")
    if name not in BACKENDS:
        raise ConfigError(f"backend={backend!r} is unknown: allowed {', '.join(BACKENDS)}")
    return name


def make_sampler(backend: str = DEFAULT_BACKEND, model: str | None = None, **options: Any) -> Sampler:
    """Make a sampler for a backend.

    Args:
        backend: `xllamacpp`, `vllm`, `openai` or `simulate`.
        model: xllamacpp: a GGUF path (None: the bundled model); vllm: a hub name or directory
            (required); openai: the served model id (None: the server's first); simulate: a
            pass-rate file, like its `pass_rates` option (None: the default rule).
        **options: the backend's options (`XLlamaCppOptions`, `VllmOptions`, `OpenAIOptions`,
            `SimulateOptions`).

    Returns:
        A `Sampler`; its `model_name` is what the run registry records.

    Raises:
        ConfigError: unknown or retired backend, or a bad option (the message names it).
        FileNotFoundError: a model path that does not exist (before any loading).
        ImportError: the backend's optional dependency is missing (names the extra).
    """
    name = check_backend(backend)
    if name == "xllamacpp":
        from pipeline.sample.xllamacpp import XLlamaCppSampler

        return XLlamaCppSampler(model, **options)
    if name == "vllm":
        from pipeline.sample.vllm import VllmSampler

        return VllmSampler(model, **options)
    if name == "openai":
        from pipeline.sample.openai import OpenAISampler

        return OpenAISampler(model, **options)
    if name == "simulate":
        from pipeline.sample.simulate import SimulateSampler

        return SimulateSampler(model, **options)
    raise AssertionError(f"check_backend passed {name!r} without a sampler")
