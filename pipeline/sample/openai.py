"""Sampling from any OpenAI-compatible server (`vllm serve`, SGLang, llama.cpp's server) over HTTP.

Requests go to `POST {base_url}/chat/completions` with at most `concurrency` in flight. A request
that fails with 429, 408, a 5xx status, a timeout, a dropped connection or a malformed body is
retried with exponential backoff (honouring Retry-After); after `max_retries` retries the whole
call fails with a `SamplingError` naming the prompt, or a `BackendUnavailableError` when no attempt
got an answer at all (timeouts, refused or dropped connections: the server is down or hung).

A request keeps its concurrency slot through its retries, so a retry never queues behind the first
attempts of other prompts: with a hung server the first error comes after at most
`OpenAIOptions.worst_case_s()` (each attempt is bounded by `timeout` as a whole, not per read),
whatever the number of prompts. With the defaults that is 3 x 60 s plus at most 1.5 s of backoff.

A server's handling of `n` is never trusted: each request asks for the samples still missing and
counts the choices that come back (llama-cpp-python's server returns one whatever `n` says). Each
request carries the seed derived for its first sample index; once a server is seen to ignore `n`,
the remaining samples are requested one per request, concurrently, each with its own seed.

A server may also cap `n` and refuse more with a 400 (llama.cpp's server at its slot count: "Field
'n': Value must be between 1 <= value <= 4"). Such a refusal of a request for several samples is
read as the cap (from the message; half the request where the message does not say), and the
prompt's samples are then asked for at most that many at a time, each request with the seed of its
first sample index; the cap holds for the rest of the call.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import os
import random
import re
from dataclasses import dataclass
from typing import Any, Self

import httpx
import pyarrow as pa

from pipeline.checks import check_int, check_number
from pipeline.errors import BackendUnavailableError, ConfigError, SamplingError
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

DEFAULT_BASE_URL = "http://127.0.0.1:8000/v1"
# A hung server must fail in minutes, not hours: 3 attempts of at most 60 s each. A completion
# that really needs longer (long reasoning traces on a loaded server) asks for a larger timeout.
DEFAULT_TIMEOUT_S = 60.0
DEFAULT_MAX_RETRIES = 2
_RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})
Row = tuple[str, int, str | None, str | None, int | None]


# A 400 that refuses the number of choices (llama.cpp: "Field 'n': Value must be between 1 <= value
# <= 4, but got 8"; others: "n must be ..."), and the cap where the message names one.
_N_REFUSED = re.compile(r"""(?:['"]n['"]|\bn\b)\s*(?::|must|should|is|exceeds|cannot)""")
_N_CAP = re.compile(r"(?:<=|at most|up to)\s*(\d+)")


class _NRefused(Exception):
    """The server refused ``n`` samples in one request; ``most`` is what to ask for instead: the cap
    its message names, or half of ``n`` where it names none (or one that is no smaller)."""

    def __init__(self, n: int, cap: int | None) -> None:
        super().__init__(f"n={n} refused (cap {cap})")
        self.most = cap if cap is not None and 1 <= cap < n else max(1, n // 2)


def _n_refusal(text: str, n: int) -> _NRefused | None:
    """The refusal of ``n`` a 400's body holds, or None."""
    if not _N_REFUSED.search(text):
        return None
    caps = [int(v) for v in _N_CAP.findall(text)]
    return _NRefused(n, max(caps) if caps else None)


class _Retryable(Exception):
    """A failure worth another try (the message says what happened)."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@dataclass(frozen=True)
class OpenAIOptions:
    """Options of the OpenAI-compatible HTTP backend.

    Attributes:
        base_url: server root including `/v1` (default: env OPENAI_BASE_URL, else
            http://127.0.0.1:8000/v1).
        api_key: bearer token (default: env OPENAI_API_KEY; none sent when unset).
        concurrency: requests in flight at once, 1 to 4096.
        timeout: seconds one attempt of a request may take in all (connect, send, wait for the
            answer, read it), > 0.
        max_retries: retries per request after the first try, 0 to 100.
        backoff: first retry delay in seconds, doubled each retry, 0 to 60.
        max_backoff: cap on one retry delay in seconds.
        system: optional system message.
        extra_body: further JSON fields sent with every request (e.g. {"top_k": 20} for vLLM).
    """

    base_url: str | None = None
    api_key: str | None = None
    concurrency: int = 16
    timeout: float = DEFAULT_TIMEOUT_S
    max_retries: int = DEFAULT_MAX_RETRIES
    backoff: float = 0.5
    max_backoff: float = 30.0
    system: str | None = None
    extra_body: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.base_url is None:
            object.__setattr__(self, "base_url", os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL)
        if self.api_key is None:
            object.__setattr__(self, "api_key", os.environ.get("OPENAI_API_KEY") or None)
        url = str(self.base_url)
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"base_url={url!r} must start with http:// or https://")
        object.__setattr__(self, "base_url", url.rstrip("/"))
        check_int("concurrency", self.concurrency, 1, 4096)
        check_number("timeout", self.timeout, 0, lo_open=True, unit="seconds")
        check_int("max_retries", self.max_retries, 0, 100)
        check_number("backoff", self.backoff, 0, 60, unit="seconds")
        check_number("max_backoff", self.max_backoff, unit="seconds")
        if not self.max_backoff >= self.backoff:
            raise ConfigError(f"max_backoff={self.max_backoff!r} must be >= backoff={self.backoff}")

    def worst_case_s(self) -> float:
        """Seconds before a request to a server that never answers fails: every attempt runs
        into `timeout`, and the backoff between attempts is at most its un-jittered value."""
        waits = sum(min(self.max_backoff, self.backoff * 2**i) for i in range(self.max_retries))
        return (self.max_retries + 1) * self.timeout + waits

    def headers(self) -> dict[str, str]:
        h = {"Content-Type": "application/json"}
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        return h


def _parse_choices(resp: httpx.Response) -> list[dict[str, Any]]:
    """The choices of a chat completion response; a malformed body is retryable."""
    try:
        body = resp.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise _Retryable(f"malformed JSON in response ({exc})") from exc
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list):
        raise _Retryable(f"response has no 'choices' list: {str(body)[:200]!r}")
    for c in choices:
        if not isinstance(c, dict) or not isinstance(c.get("message"), dict):
            raise _Retryable(f"malformed choice in response: {str(c)[:200]!r}")
    usage = body.get("usage") if isinstance(body, dict) else None
    if len(choices) == 1 and isinstance(usage, dict):
        # With one choice the usage count is exactly that choice's.
        choices[0].setdefault("_completion_tokens", usage.get("completion_tokens"))
    return choices


def _retry_after(resp: httpx.Response) -> float | None:
    value = resp.headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


class OpenAISampler:
    """Samples from an OpenAI-compatible chat completions endpoint.

    Args:
        model: the model id the server serves; None asks the server's `/models` for its first.
        **options: fields of `OpenAIOptions`.
    """

    backend = "openai"

    def __init__(self, model: str | None = None, **options: Any) -> None:
        self.options = OpenAIOptions(**options)
        self._honours_n: bool | None = None  # learnt from the first multi-sample answer
        self._most_n: int | None = None  # the server's cap on n, learnt from its refusal
        self.model_name = model or self._served_model()

    def _served_model(self) -> str:
        url = f"{self.options.base_url}/models"
        try:
            resp = httpx.get(url, headers=self.options.headers(), timeout=self.options.timeout)
        except httpx.TransportError as exc:  # timeouts included: no answer at all
            raise BackendUnavailableError(
                f"no model given and {url} did not answer ({type(exc).__name__}: {exc}; 1 attempt, "
                f"timeout {self.options.timeout:g} s); is the server running at that URL?"
            ) from exc
        try:
            resp.raise_for_status()
            return str(resp.json()["data"][0]["id"])
        except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
            raise SamplingError(
                f"no model given and {url} did not name one ({exc}); pass the model explicitly"
            ) from exc

    # -- one HTTP request, with retries -------------------------------------------------------

    async def _request(
        self,
        client: httpx.AsyncClient,
        sem: asyncio.Semaphore,
        item: PromptItem,
        params: SamplingParams,
        n: int,
        seed: int,
    ) -> tuple[list[dict[str, Any]], int]:
        """The choices of one request for ``n`` samples (at most the server's cap on n, once
        learnt: read when the request gets its slot, so requests queued before the cap was learnt
        keep to it), and the n asked."""
        opts = self.options
        payload: dict[str, Any] = {
            "model": self.model_name,
            "messages": chat_messages(item.prompt, opts.system),
            "n": n,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "max_tokens": params.max_tokens,
            "seed": seed,
        }
        if opts.extra_body:
            payload.update(opts.extra_body)
        last = "no attempt"
        answered = False  # whether any attempt got an HTTP answer (even a 5xx or a malformed body)
        attempts = opts.max_retries + 1
        # The slot is held through the retries and their backoff: a retry that queued again behind
        # the first attempts of every other prompt would turn a hung server's bounded wait
        # (`worst_case_s`) into one proportional to the number of prompts.
        async with sem:
            n = payload["n"] = min(n, self._most_n or n)
            for attempt in range(attempts):
                delay = None
                try:
                    async with asyncio.timeout(opts.timeout):  # the whole attempt, not each read
                        resp = await client.post("/chat/completions", json=payload)
                    answered = True
                    if resp.status_code in _RETRY_STATUS:
                        raise _Retryable(f"HTTP {resp.status_code}: {resp.text[:200]!r}", _retry_after(resp))
                    if resp.status_code == 400 and n > 1 and (refused := _n_refusal(resp.text, n)):
                        raise refused
                    if resp.status_code >= 400:
                        raise SamplingError(
                            f"prompt {item.prompt_id}: server refused the request with HTTP "
                            f"{resp.status_code}: {resp.text[:300]!r}"
                        )
                    return _parse_choices(resp), n
                except _Retryable as exc:
                    last, delay = str(exc), exc.retry_after
                except (httpx.TimeoutException, TimeoutError) as exc:
                    last = f"timeout after {opts.timeout:g} s ({type(exc).__name__})"
                except httpx.TransportError as exc:  # refused, reset, dropped mid-response
                    last = f"connection error ({type(exc).__name__}: {exc})"
                if attempt < opts.max_retries:
                    if delay is None:
                        delay = min(opts.max_backoff, opts.backoff * 2**attempt)
                        delay *= 0.5 + random.random() / 2  # jitter: spread retries of many requests
                    log.debug("prompt %s: %s; retry %d in %.2fs", item.prompt_id, last, attempt + 1, delay)
                    await asyncio.sleep(min(delay, opts.max_backoff))
        url = f"{opts.base_url}/chat/completions"
        if not answered:
            raise BackendUnavailableError(
                f"prompt {item.prompt_id}: {url} did not answer any of {attempts} attempts "
                f"(timeout {opts.timeout:g} s each, max_retries={opts.max_retries}); last error: {last}. "
                "Is the server running and reachable at that URL? A server that is up but slow needs a "
                "larger --request-timeout"
            )
        raise SamplingError(
            f"prompt {item.prompt_id}: request to {url} failed after {attempts} attempts; last error: {last}"
        )

    # -- all samples of one prompt ------------------------------------------------------------

    async def _sample_prompt(
        self,
        client: httpx.AsyncClient,
        sem: asyncio.Semaphore,
        item: PromptItem,
        params: SamplingParams,
        progress: Progress | None,
    ) -> list[Row]:
        rows: list[Row] = []
        empty = 0

        def take(choices: list[dict[str, Any]], limit: int) -> int:
            taken = 0
            for c in choices[:limit]:
                msg = c["message"]
                text = msg.get("content") or ""
                n_tok = c.get("_completion_tokens")
                rows.append(
                    (
                        item.prompt_id,
                        params.first_idx + len(rows),
                        text,
                        c.get("finish_reason"),
                        int(n_tok) if isinstance(n_tok, int) else None,
                    )
                )
                taken += 1
            if progress is not None and taken:
                progress(taken)
            return taken

        def seed_of(i: int) -> int:  # i counts from the call's first sample index
            return derive_seed(params.seed, item.prompt_id, params.first_idx + i)

        while len(rows) < params.n:
            start = len(rows)
            missing = params.n - start
            if self._honours_n is False and missing > 1:
                # Known to ignore n: one request per sample, all at once, each with its seed.
                got = await asyncio.gather(
                    *(self._request(client, sem, item, params, 1, seed_of(start + j)) for j in range(missing))
                )
                taken = 0
                for choices, _ in got:  # in index order, so sample_idx keeps its seed
                    taken += take(choices, 1)
            else:
                try:
                    choices, ask = await self._request(client, sem, item, params, missing, seed_of(start))
                except _NRefused as exc:
                    self._most_n = min(exc.most, self._most_n or exc.most)
                    log.info("server refused %s: asking for at most %d samples a request", exc, self._most_n)
                    continue
                if ask > 1 and self._honours_n is None and choices:
                    self._honours_n = len(choices) >= ask
                    if not self._honours_n:
                        log.info(
                            "server returned %d choices for n=%d: not trusting n",
                            len(choices),
                            ask,
                        )
                taken = take(choices, ask)
            empty = 0 if taken else empty + 1
            if empty > self.options.max_retries:
                raise SamplingError(
                    f"prompt {item.prompt_id}: server returned no choices "
                    f"{empty} times in a row ({len(rows)} of n={params.n} samples collected)"
                )
        return rows

    async def _sample_all(
        self, items: list[PromptItem], params: SamplingParams, progress: Progress | None
    ) -> list[Row]:
        opts = self.options
        sem = asyncio.Semaphore(opts.concurrency)
        limits = httpx.Limits(max_connections=opts.concurrency, max_keepalive_connections=opts.concurrency)
        async with httpx.AsyncClient(
            base_url=opts.base_url,
            headers=opts.headers(),
            timeout=httpx.Timeout(opts.timeout),
            limits=limits,
        ) as client:
            tasks = [asyncio.ensure_future(self._sample_prompt(client, sem, it, params, progress)) for it in items]
            try:
                per_prompt = await asyncio.gather(*tasks)
            finally:
                for t in tasks:  # on the first error, stop the others before the client closes
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
        return [row for rows in per_prompt for row in rows]

    def sample(
        self,
        problems: Any,
        params: SamplingParams,
        progress: Progress | None = None,
        *,
        template: str | None = None,
    ) -> pa.Table:
        """Sample `params.n` completions per problem (see `Sampler.sample`).

        Raises:
            SamplingError: a request still failed after its retries (names the prompt).
        """
        items = prepare_prompts(problems, template)
        if not items:
            return rows_to_table([])

        def run() -> list[Row]:
            return asyncio.run(self._sample_all(items, params, progress))

        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return rows_to_table(run())
        # Called from inside an event loop (a notebook, an async flow): run on a fresh thread.
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            return rows_to_table(pool.submit(run).result())

    def close(self) -> None:
        """Nothing to release: each `sample` call opens and closes its own connections."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
