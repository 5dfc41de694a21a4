"""The OpenAI-compatible HTTP backend: a scripted local server for failures, and the real
llama-cpp-python server started on loopback with the bundled model."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

import httpx
import pytest

from pipeline.sample import Sampler, SamplingError, SamplingParams, derive_seed, make_sampler

PROBLEMS = [
    {"prompt_id": "alpha", "problem": "1 + 1"},
    {"prompt_id": "beta", "problem": "2 + 2"},
]


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:  # dropped sockets: quiet
        pass


class ScriptedServer:
    """A tiny OpenAI-style server. `script` lists what the next requests get before normal
    answers: 'http500', 'http429', 'http400', 'malformed', 'nochoices', 'drop', 'slow'.
    `always` fails every request the same way. `honour_n=False` answers one choice whatever n.
    `most_n` refuses a larger n with a 400, in llama.cpp's words (`say_cap=False`: without the cap)."""

    def __init__(
        self,
        script: list[str] | None = None,
        always: str | None = None,
        honour_n: bool = True,
        most_n: int | None = None,
        say_cap: bool = True,
    ) -> None:
        self.script = list(script or [])
        self.always = always
        self.honour_n = honour_n
        self.most_n = most_n
        self.say_cap = say_cap
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, code: int, body: bytes, extra: dict[str, str] | None = None) -> None:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for k, v in (extra or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                if self.path.endswith("/models"):
                    self._send(200, json.dumps({"data": [{"id": "served-model"}]}).encode())
                else:
                    self._send(404, b"{}")

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with outer.lock:
                    outer.requests.append(body)
                    outer.headers.append(dict(self.headers))
                    action = outer.always or (outer.script.pop(0) if outer.script else "ok")
                if action == "http500":
                    return self._send(500, b'{"error": "boom"}')
                if action == "http429":
                    return self._send(429, b'{"error": "slow down"}', {"Retry-After": "0"})
                if action == "http400":
                    return self._send(400, b'{"error": "bad request"}')
                if action == "malformed":
                    return self._send(200, b'{"choices": [{"message": ')
                if action == "nochoices":
                    return self._send(200, b'{"choices": []}')
                if action == "drop":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return None
                if action == "slow":
                    time.sleep(1.0)
                if outer.most_n is not None and body.get("n", 1) > outer.most_n:
                    limit = f"1 <= value <= {outer.most_n}" if outer.say_cap else "within the server's limit"
                    message = f"Field 'n': Value must be between {limit}, but got {body['n']}"
                    return self._send(400, json.dumps({"error": {"code": 400, "message": message}}).encode())
                n = body.get("n", 1) if outer.honour_n else 1
                user = body["messages"][-1]["content"]
                choices = [
                    {
                        "index": i,
                        "message": {
                            "role": "assistant",
                            "content": f"{user} | seed={body['seed']} i={i} \\boxed{{2}}",
                        },
                        "finish_reason": "stop",
                    }
                    for i in range(n)
                ]
                usage = {"prompt_tokens": 5, "completion_tokens": 7 * n, "total_tokens": 5 + 7 * n}
                return self._send(200, json.dumps({"choices": choices, "usage": usage}).encode())

        self.httpd = _Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


FAST = {"backoff": 0.01, "max_backoff": 0.05}


def _check_rows(table: Any, n: int) -> None:
    rows = table.to_pylist()
    assert [r["prompt_id"] for r in rows] == [p["prompt_id"] for p in PROBLEMS for _ in range(n)]
    assert [r["sample_idx"] for r in rows] == list(range(n)) * len(PROBLEMS)


def test_honoured_n_one_request_per_prompt(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-123")
    with ScriptedServer() as srv:
        s = make_sampler("openai", "m", base_url=srv.url, **FAST)
        assert isinstance(s, Sampler) and s.backend == "openai" and s.model_name == "m"
        table = s.sample(PROBLEMS, SamplingParams(n=3, max_tokens=9, seed=4, temperature=0.5))
    _check_rows(table, 3)
    assert len(srv.requests) == 2
    req = next(r for r in srv.requests if "1 + 1" in r["messages"][-1]["content"])
    assert (req["n"], req["max_tokens"], req["temperature"], req["model"]) == (3, 9, 0.5, "m")
    assert req["seed"] == derive_seed(4, "alpha", 0)
    assert all(h.get("Authorization") == "Bearer sk-test-123" for h in srv.headers)
    # n choices in one answer: the usage total cannot be split per sample.
    assert table.column("n_tokens").null_count == 6
    assert table.column("completion").to_pylist()[1].endswith("i=1 \\boxed{2}")


def test_server_ignoring_n_is_topped_up() -> None:
    with ScriptedServer(honour_n=False) as srv:
        s = make_sampler("openai", "m", base_url=srv.url, concurrency=1, **FAST)
        table = s.sample(PROBLEMS, SamplingParams(n=4, seed=9))
    _check_rows(table, 4)
    assert len(srv.requests) == 8  # one sample per answer: 4 requests per prompt
    for r in table.to_pylist():
        # Each sample came from the request carrying its own derived seed.
        assert f"seed={derive_seed(9, r['prompt_id'], r['sample_idx'])} " in r["completion"]
        assert r["n_tokens"] == 7 and r["finish_reason"] == "stop"


@pytest.mark.parametrize(
    ("say_cap", "asked", "starts"),
    [(True, [8, 3, 3, 2], [0, 3, 6]), (False, [8, 4, 2, 2, 2, 2], [0, 2, 4, 6])],
    ids=["cap-said", "cap-unsaid"],
)
def test_a_server_capping_n_gets_the_samples_in_requests_it_takes(say_cap, asked, starts) -> None:
    """A server that refuses n above 3 with a 400 (llama.cpp's server past its slots): the refusal is
    read as the cap (from the message, or by halving until one is taken), each later request asks
    for at most that many, with the seed of its first sample, and every sample arrives once, in
    order; the sampler keeps the cap for its next calls."""
    with ScriptedServer(most_n=3, say_cap=say_cap) as srv:
        s = make_sampler("openai", "m", base_url=srv.url, concurrency=1, **FAST)
        table = s.sample(PROBLEMS[:1], SamplingParams(n=8, seed=3))
        assert [r["n"] for r in srv.requests] == asked
        assert [r["seed"] for r in srv.requests[len(asked) - len(starts) :]] == [
            derive_seed(3, "alpha", i) for i in starts
        ]
        for r in table.to_pylist():  # a sample's text names its request's seed and its place in the answer
            at = max(i for i in starts if i <= r["sample_idx"])
            assert f"seed={derive_seed(3, 'alpha', at)} i={r['sample_idx'] - at} " in r["completion"]
        assert table.column("sample_idx").to_pylist() == list(range(8))
        srv.requests.clear()
        _check_rows(s.sample(PROBLEMS, SamplingParams(n=8, seed=4)), 8)
        assert max(r["n"] for r in srv.requests) == asked[-len(starts)]  # nothing refused again


def test_retries_every_failure_kind_then_succeeds() -> None:
    script = ["http500", "malformed", "drop", "http429", "slow", "nochoices", "http500"]
    with ScriptedServer(script=script) as srv:
        s = make_sampler("openai", "m", base_url=srv.url, concurrency=1, timeout=0.3, max_retries=6, **FAST)
        table = s.sample(PROBLEMS, SamplingParams(n=2, seed=1))
    _check_rows(table, 2)
    assert len(srv.requests) == len(script) + 2
    assert not srv.script


def test_always_failing_names_the_prompt() -> None:
    with ScriptedServer(always="http500") as srv:
        s = make_sampler("openai", "m", base_url=srv.url, max_retries=2, **FAST)
        with pytest.raises(SamplingError, match=r"prompt (alpha|beta).*3 attempts.*HTTP 500"):
            s.sample(PROBLEMS, SamplingParams(n=2))


def test_dropped_connections_exhaust_retries() -> None:
    with ScriptedServer(always="drop") as srv:
        s = make_sampler("openai", "m", base_url=srv.url, max_retries=1, concurrency=1, **FAST)
        with pytest.raises(SamplingError, match=r"prompt alpha.*connection error"):
            s.sample(PROBLEMS[:1], SamplingParams(n=1))
    assert len(srv.requests) == 2


def test_client_error_is_not_retried() -> None:
    with ScriptedServer(always="http400") as srv:
        s = make_sampler("openai", "m", base_url=srv.url, **FAST)
        with pytest.raises(SamplingError, match=r"prompt alpha.*HTTP 400"):
            s.sample(PROBLEMS[:1], SamplingParams(n=2))
    assert len(srv.requests) == 1


def test_model_from_server_and_bad_options() -> None:
    with ScriptedServer() as srv:
        assert make_sampler("openai", None, base_url=srv.url).model_name == "served-model"
    with pytest.raises(ValueError, match="concurrency=0"):
        make_sampler("openai", "m", base_url="http://127.0.0.1:9/v1", concurrency=0)
    with pytest.raises(ValueError, match="base_url='localhost:8000'"):
        make_sampler("openai", "m", base_url="localhost:8000")


# --- the real llama.cpp OpenAI-compatible server (xllamacpp's, listening on loopback) ---------


@pytest.fixture(scope="module")
def llama_server() -> Iterator[str]:
    """llama.cpp's own HTTP server on loopback, as the xllamacpp backend starts it (4 slots)."""
    with make_sampler("xllamacpp", None, n_threads=1, n_ctx=1024, parallel=4) as engine:
        url = engine.server.listening_address.rstrip("/") + "/v1"  # type: ignore[attr-defined]
        assert httpx.get(f"{url}/models", timeout=10).status_code == 200
        yield url


@pytest.mark.slow
def test_real_llama_cpp_server(llama_server: str) -> None:
    s = make_sampler("openai", None, base_url=llama_server, concurrency=2)
    problems = PROBLEMS + [{"prompt_id": "gamma", "problem": "3 + 4"}]
    params = SamplingParams(n=3, temperature=0.8, max_tokens=10, seed=2)
    table = s.sample(problems, params)
    rows = table.to_pylist()
    assert [r["prompt_id"] for r in rows] == [p["prompt_id"] for p in problems for _ in range(3)]
    assert [r["sample_idx"] for r in rows] == [0, 1, 2] * 3
    assert {r["finish_reason"] for r in rows} <= {"stop", "length"}
    assert all(isinstance(r["completion"], str) for r in rows)
    # llama.cpp's server answers n choices in one response, with one usage count for all of them:
    # a choice's own token count is unknown, so none is made up.
    assert s._honours_n is True
    assert all(r["n_tokens"] is None for r in rows)
    one = make_sampler("openai", None, base_url=llama_server).sample(PROBLEMS[:1], SamplingParams(n=1, max_tokens=10))
    assert 1 <= one.column("n_tokens")[0].as_py() <= 10
    # More samples than the server has slots (4): it refuses n=6, and the samples come 4 then 2.
    wide = make_sampler("openai", None, base_url=llama_server)
    six = wide.sample(PROBLEMS[:1], SamplingParams(n=6, temperature=0.8, max_tokens=10, seed=5))
    assert six.column("sample_idx").to_pylist() == list(range(6)) and wide._most_n == 4


def test_sample_from_inside_an_event_loop() -> None:
    import asyncio

    with ScriptedServer() as srv:
        s = make_sampler("openai", "m", base_url=srv.url, **FAST)

        async def caller() -> Any:
            return s.sample(PROBLEMS, SamplingParams(n=2))

        table = asyncio.run(caller())
    _check_rows(table, 2)
