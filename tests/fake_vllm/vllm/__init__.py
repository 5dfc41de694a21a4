"""A stand-in for the parts of vLLM's offline API the vllm backend uses (tests only).

It follows vLLM's documented shapes: `LLM(model, **engine_args)`, `LLM.chat(messages,
sampling_params=None, use_tqdm=True, ...) -> list[RequestOutput]`, `SamplingParams(n, temperature,
top_p, seed, max_tokens=16, ...)`, `RequestOutput.outputs: list[CompletionOutput]` with `index`,
`text`, `token_ids` and `finish_reason` ("stop" or "length"). Like vLLM V1, a request with n > 1
and a seed gives child sample i the seed `seed + i`.

Generation is a deterministic function of (seed + i, the last user message, max_tokens). Every
`LLM` and `chat` call is recorded in `CALLS` (per process), and each completion names the process's
CUDA_VISIBLE_DEVICES so data-parallel tests can see which worker produced it.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from typing import Any

__version__ = "0.0.0-fake"
CALLS: list[dict[str, Any]] = []


class SamplingParams:
    """The subset of `vllm.SamplingParams` used here; vLLM's defaults (max_tokens=16)."""

    def __init__(
        self,
        n: int = 1,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | None = None,
        max_tokens: int | None = 16,
        **extra: Any,
    ) -> None:
        if n < 1:
            raise ValueError(f"n must be at least 1, got {n}.")
        if not 0.0 < top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}.")
        if max_tokens is not None and max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {max_tokens}.")
        self.n = n
        self.temperature = temperature
        self.top_p = top_p
        self.seed = seed
        self.max_tokens = max_tokens
        self.extra = extra


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None = None
    logprobs: Any = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int] | None
    prompt_logprobs: Any
    outputs: list[CompletionOutput] = field(default_factory=list)
    finished: bool = True


def _generate(content: str, seed: int | None, max_tokens: int) -> tuple[str, list[int], str]:
    rng = random.Random(f"{seed}|{content}" if seed is not None else None)
    words = ["Let", "us", "compute.", "The", "answer", "is"]
    length = rng.randint(3, 40)
    devices = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    text_tokens = [rng.choice(words) for _ in range(length)]
    if length <= max_tokens:
        text_tokens.append(f"\\boxed{{{rng.randint(0, 99)}}}")
        finish = "stop"
    else:
        text_tokens = text_tokens[:max_tokens]
        finish = "length"
    text = " ".join(text_tokens) + f" [dev={devices}]"
    return text, list(range(len(text_tokens))), finish


class LLM:
    def __init__(self, model: str, *, tensor_parallel_size: int = 1, **kwargs: Any) -> None:
        if kwargs.get("data_parallel_size", 1) > 1:
            raise ValueError("data_parallel_size > 1 is not supported in-process (offline LLM)")
        self.model = model
        self.kwargs = dict(kwargs, tensor_parallel_size=tensor_parallel_size)
        CALLS.append({"call": "LLM", "model": model, "kwargs": self.kwargs})
        self._counter = 0

    def chat(
        self,
        messages: list[dict[str, Any]] | list[list[dict[str, Any]]],
        sampling_params: SamplingParams | list[SamplingParams] | None = None,
        use_tqdm: bool = True,
        lora_request: Any = None,
        chat_template: str | None = None,
        chat_template_content_format: str = "auto",
        add_generation_prompt: bool = True,
        continue_final_message: bool = False,
        tools: Any = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        mm_processor_kwargs: dict[str, Any] | None = None,
    ) -> list[RequestOutput]:
        conversations = messages if messages and isinstance(messages[0], list) else [messages]
        if sampling_params is None:
            sampling_params = SamplingParams()
        if isinstance(sampling_params, list):
            if len(sampling_params) != len(conversations):
                raise ValueError("The lengths of prompts and sampling_params must be the same.")
            per = sampling_params
        else:
            per = [sampling_params] * len(conversations)
        CALLS.append(
            {
                "call": "chat",
                "messages": conversations,
                "sampling_params": per,
                "use_tqdm": use_tqdm,
                "add_generation_prompt": add_generation_prompt,
            }
        )
        results = []
        for conv, sp in zip(conversations, per, strict=True):
            for m in conv:
                if set(m) - {"role", "content"} or m["role"] not in {"system", "user", "assistant"}:
                    raise ValueError(f"bad message {m!r}")
            content = conv[-1]["content"]
            outs = []
            for i in range(sp.n):
                seed = None if sp.seed is None else sp.seed + i
                text, ids, finish = _generate(content, seed, sp.max_tokens or 16)
                outs.append(CompletionOutput(index=i, text=text, token_ids=ids, finish_reason=finish))
            # vLLM may finish children in any order; the index says which is which.
            outs.reverse()
            results.append(RequestOutput(str(self._counter), None, [1, 2, 3], None, outs, finished=True))
            self._counter += 1
        return results
