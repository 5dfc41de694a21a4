"""Fault injection and bad input: a hung or absent OpenAI-compatible server, rollout files whose
prompt ids disagree, and data files with NaN, list, mixed-type or non-UTF-8 cells, no rows, or an
export path in a missing folder. Each test reproduces one reported case with real files and
sockets; errors must be ``PipelineError`` subclasses naming the file, row or value."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from pipeline import datasets
from pipeline.cli import app
from pipeline.cli.profile_options import profile_config
from pipeline.errors import BackendUnavailableError, ConfigError, DatasetError, SamplingError
from pipeline.ingest import ImportConfig, import_rollouts
from pipeline.sample import SamplingParams
from pipeline.sample.openai import DEFAULT_BASE_URL, OpenAIOptions, OpenAISampler
from pipeline.store import Store

pytestmark = pytest.mark.faults

runner = CliRunner()

# 2^2^2^2^2^2^2 against 4: math-verify never finishes, so the item can only end as a timeout.
NESTED_POWER = "2^{" * 6 + "2" + "}" * 6


# --- servers that never answer ------------------------------------------------------------------


class SilentServer:
    """A TCP server that accepts every connection and never sends a byte (a hung server)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0), backlog=128)
        self.sock.settimeout(0.05)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        self.accepted: list[socket.socket] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            self.accepted.append(conn)  # held open, never read from or written to

    def __enter__(self) -> SilentServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(5)
        for conn in self.accepted:
            conn.close()
        self.sock.close()


@pytest.fixture
def silent_server() -> Iterator[SilentServer]:
    with SilentServer() as srv:
        yield srv


@pytest.fixture
def refused_url() -> str:
    """A loopback URL where nothing listens: every connection is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


@pytest.fixture
def unavailable_503() -> Iterator[str]:
    """A server that answers every request, always with HTTP 503."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            return None

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            body = b'{"error": "overloaded"}'
            self.send_response(503)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


PROBLEMS = [{"prompt_id": f"p{i}", "problem": f"{i} + 1"} for i in range(3)]
FAST = {"backoff": 0.01, "max_backoff": 0.05}


def test_hung_server_fails_within_the_worst_case_whatever_the_number_of_prompts(silent_server):
    # 100 prompts, 2 in flight: when retries queued behind the other prompts' first attempts, the
    # first error came after about 100 / 2 x 0.2 s = 10 s or more, not after 3 x 0.2 s.
    sampler = OpenAISampler("m", base_url=silent_server.url, timeout=0.2, max_retries=2, concurrency=2, **FAST)
    worst = sampler.options.worst_case_s()
    problems = [{"prompt_id": f"p{i}", "problem": f"{i} + 1"} for i in range(100)]
    start = time.perf_counter()
    with pytest.raises(BackendUnavailableError) as info:
        sampler.sample(problems, SamplingParams(n=1))
    elapsed = time.perf_counter() - start
    message = str(info.value)
    assert f"{silent_server.url}/chat/completions" in message
    assert "did not answer any of 3 attempts" in message
    assert "prompt p" in message and "timeout" in message
    assert isinstance(info.value, SamplingError)
    assert silent_server.accepted, "the requests never reached the server"
    assert elapsed < 10 * worst, (elapsed, worst)


def test_refused_connection_is_backend_unavailable(refused_url):
    sampler = OpenAISampler("m", base_url=refused_url, timeout=5, max_retries=1, **FAST)
    with pytest.raises(
        BackendUnavailableError, match=r"prompt p0: .*did not answer any of 2 attempts.*connection error"
    ):
        sampler.sample(PROBLEMS[:1], SamplingParams(n=1))


def test_no_model_and_no_server_is_backend_unavailable(refused_url):
    with pytest.raises(BackendUnavailableError, match=rf"{refused_url}/models did not answer"):
        OpenAISampler(None, base_url=refused_url, timeout=1)


def test_a_server_that_answers_with_errors_is_not_unavailable(unavailable_503):
    sampler = OpenAISampler("m", base_url=unavailable_503, max_retries=1, **FAST)
    with pytest.raises(SamplingError, match=r"prompt p0: .*2 attempts.*HTTP 503") as info:
        sampler.sample(PROBLEMS[:1], SamplingParams(n=1))
    assert not isinstance(info.value, BackendUnavailableError)


def test_default_timeouts_fail_a_hung_server_within_minutes():
    options = OpenAIOptions(base_url=DEFAULT_BASE_URL)
    assert options.timeout == 60 and options.max_retries == 2
    assert options.worst_case_s() <= 5 * 60  # it was 300 s x 6 attempts (~30 min) per request


def test_request_timeout_and_max_retries_reach_the_openai_backend():
    profile = profile_config(
        backend="openai", model="m", base_url="http://127.0.0.1:9/v1", request_timeout=7.5, max_retries=0
    )
    options = profile.engine.backend_options
    assert options == {"base_url": "http://127.0.0.1:9/v1", "timeout": 7.5, "max_retries": 0}
    assert profile_config(backend="openai", model="m").engine.backend_options == {}  # the backend's defaults


def test_profile_through_the_cli_fails_fast_on_a_hung_server(silent_server, data_dir):
    args = ["profile", "--backend", "openai", "--base-url", silent_server.url, "--model", "m", "--no-prefect"]
    args += ["--request-timeout", "0.2", "--max-retries", "1", "--limit", "3", "--n", "1", "--no-report"]
    start = time.perf_counter()
    out = runner.invoke(app, args)
    elapsed = time.perf_counter() - start
    assert out.exit_code == 1, out.output
    assert "did not answer any of 2 attempts" in out.stderr and silent_server.url in out.stderr
    assert elapsed < 60  # generous: the requests themselves are bounded by 2 x 0.2 s


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--backend", "simulate", "--request-timeout", "5"], "--request-timeout applies to --backend openai only"),
        (["--backend", "xllamacpp", "--max-retries", "1"], "--max-retries applies to --backend openai only"),
        (["--backend", "openai", "--request-timeout", "0"], "timeout=0.0 must be a number of seconds > 0"),
        (["--backend", "openai", "--max-retries", "-1"], "max_retries=-1 is out of range"),
        (["--backend", "simulate", "--grade-timeout", "0"], "--grade-timeout=0.0 is out of range"),
        (["--backend", "simulate", "--grade-timeout", "-2"], "--grade-timeout=-2.0 is out of range"),
    ],
)
def test_bad_profile_options_are_refused_before_any_work(args, message, data_dir):
    out = runner.invoke(app, ["profile", "--no-prefect", "--no-report", *args])
    assert out.exit_code == 1, out.output
    assert message in out.stderr
    assert not (data_dir / "runs").exists() and not (data_dir / "problems").exists()


def test_grade_timeout_reaches_the_profile_config():
    assert profile_config(backend="simulate", grade_timeout_s=0.5).grading.timeout_s == 0.5


# --- imported rollouts: prompt ids that disagree ----------------------------------------------


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_one_prompt_id_with_two_problems_is_refused(tmp_path, data_dir):
    path = _jsonl(
        tmp_path / "f.jsonl",
        [
            {"id": "p1", "problem": "1+1", "answer": "2", "completion": "2"},
            {"id": "p1", "problem": "5+5", "answer": "10", "completion": "10"},
            {"id": "p1", "problem": "1+1", "answer": "2", "completion": "3"},
        ],
    )
    out = runner.invoke(app, ["grade", "--input", str(path), "--prompt-id-col", "id", "--no-report"])
    assert out.exit_code == 1, out.output
    err = out.stderr
    assert str(path) in err and "'p1'" in err and "two different problems" in err
    assert "row 0 '1+1'" in err and "row 1 '5+5'" in err
    assert not Store(data_dir).list_runs().num_rows


def test_one_prompt_id_with_two_gold_answers_is_refused(tmp_path, store):
    path = _jsonl(
        tmp_path / "f.jsonl",
        [
            {"id": "p1", "problem": "1+1", "answer": "2", "completion": "2"},
            {"id": "p1", "problem": "1+1", "answer": "3", "completion": "2"},
        ],
    )
    with pytest.raises(DatasetError, match=r"f\.jsonl'.*'p1' has two different gold answers: row 0 '2' and row 1 '3'"):
        import_rollouts(ImportConfig(input=str(path), prompt_id_col="id", report=False), store)
    # Without ids the id comes from the text: the same problem with two golds is refused too.
    with pytest.raises(DatasetError, match=r"two different gold answers: row 0 '2' and row 1 '3'"):
        import_rollouts(ImportConfig(input=str(path), report=False), store)


def test_one_prompt_id_with_the_same_problem_is_several_rollouts(tmp_path, store):
    path = _jsonl(
        tmp_path / "f.jsonl",
        [
            {"id": "p1", "problem": "1+1", "answer": "2", "completion": "\\boxed{2}"},
            {"id": "p1", "problem": " 1+1  ", "answer": "2", "completion": "\\boxed{3}"},
            {"id": "p2", "problem": "5+5", "answer": "10", "completion": "\\boxed{10}"},
        ],
    )
    info = import_rollouts(ImportConfig(input=str(path), prompt_id_col="id", grade_workers=1, report=False), store)
    assert (info.details["samples"], info.details["prompts"]) == (3, 2)
    stats = store.query("select prompt_id, n, c from prompt_stats order by prompt_id").to_pylist()
    assert stats == [{"prompt_id": "p1", "n": 2, "c": 1}, {"prompt_id": "p2", "n": 1, "c": 1}]


# --- bad cells and files ------------------------------------------------------------------------


def test_nan_gold_is_an_empty_answer_when_loading(tmp_path):
    path = tmp_path / "d.parquet"
    pq.write_table(pa.table({"problem": ["1+1", "2+2"], "answer": [float("nan"), 4.0]}), path)
    rows = datasets.load(data_file=path).problems.to_pylist()
    assert [(r["answer"], r["status"]) for r in rows] == [(None, "empty_answer"), ("4.0", "ok")]


def test_nan_gold_is_an_empty_answer_when_importing(tmp_path, store):
    path = tmp_path / "r.parquet"
    table = {"problem": ["1+1", "2+2"], "answer": [float("nan"), 4.0], "completion": ["\\boxed{2}", "\\boxed{4}"]}
    pq.write_table(pa.table(table), path)
    import_rollouts(ImportConfig(input=str(path), grade_workers=1, report=False), store)
    got = store.query(
        "select p.problem, p.answer, p.status, s.grade_status from problems p join samples s using (prompt_id) "
        "order by p.problem"
    ).to_pylist()
    assert got == [
        {"problem": "1+1", "answer": None, "status": "empty_answer", "grade_status": "error"},
        {"problem": "2+2", "answer": "4.0", "status": "ok", "grade_status": "correct"},
    ]


def test_zero_row_parquet_is_an_error_naming_the_file(tmp_path, data_dir):
    path = tmp_path / "empty.parquet"
    pq.write_table(pa.table({"problem": pa.array([], pa.string()), "answer": pa.array([], pa.string())}), path)
    out = runner.invoke(app, ["load", "--data-file", str(path)])
    assert out.exit_code == 1, out.output
    assert str(path) in out.stderr and "has no rows" in out.stderr
    with pytest.raises(DatasetError, match=r"empty\.parquet' has no rows"):
        import_rollouts(ImportConfig(input=str(path), report=False), Store.open(data_dir))


def test_list_answer_is_an_error_naming_file_column_row_and_value(tmp_path, store):
    path = tmp_path / "lists.parquet"
    table = {"problem": ["1+1", "2+2"], "answer": [["2"], ["1", "3"]], "completion": ["2", "4"]}
    pq.write_table(pa.table(table), path)
    pattern = r"lists\.parquet': column 'answer' row 0 holds a list \"\['2'\]\""
    with pytest.raises(DatasetError, match=pattern):
        datasets.load(data_file=path)
    with pytest.raises(DatasetError, match=pattern):
        import_rollouts(ImportConfig(input=str(path), report=False), store)


def test_jsonl_answers_mixing_strings_and_numbers_load_as_text(tmp_path, store):
    rows = [
        {"problem": "half of 1", "answer": "\\frac{1}{2}", "completion": "\\boxed{1/2}"},
        {"problem": "2+2", "answer": 4, "completion": "\\boxed{4}"},
        {"problem": "1.5+1", "answer": 2.5, "completion": "\\boxed{2.5}"},
        {"problem": "1-1", "answer": None, "completion": "0"},
    ]
    path = _jsonl(tmp_path / "mixed.jsonl", rows)
    loaded = datasets.load(data_file=path).problems.to_pylist()
    assert [(r["answer"], r["status"]) for r in loaded] == [
        ("\\frac{1}{2}", "ok"),
        ("4", "ok"),
        ("2.5", "ok"),
        (None, "empty_answer"),
    ]
    info = import_rollouts(ImportConfig(input=str(path), grade_workers=1, report=False), store)
    assert info.details["grade_status"] == {"correct": 3, "error": 1}


def test_jsonl_line_that_is_not_json_is_named(tmp_path):
    path = tmp_path / "broken.jsonl"
    path.write_text('{"problem": "1+1", "answer": "2"}\n{"problem": "2+2", "answer": 4\n')
    with pytest.raises(DatasetError, match=r"broken\.jsonl': line 2 is not valid JSON"):
        datasets.load(data_file=path)


def test_non_utf8_jsonl_names_the_file_and_line(tmp_path, data_dir):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(
        '{"problem": "1+1", "answer": "2"}\n{"problem": "caf\u00e9 2+2", "answer": "4"}\n'.encode("latin-1")
    )
    out = runner.invoke(app, ["load", "--data-file", str(path)])
    assert out.exit_code == 1, out.output
    assert str(path) in out.stderr and "line 2 is not UTF-8" in out.stderr


def test_non_utf8_csv_names_the_file_and_line(tmp_path):
    path = tmp_path / "latin1.csv"
    path.write_bytes("problem,answer\n1+1,2\ncaf\u00e9 2+2,4\n".encode("latin-1"))
    with pytest.raises(DatasetError, match=r"latin1\.csv': line 3 is not UTF-8.*column\(s\) \['problem'\]"):
        datasets.load(data_file=path)


def test_non_utf8_parquet_names_the_file_column_and_row(tmp_path):
    # Parquet writers do not all check UTF-8: build the bad string from raw buffers.
    offsets = pa.py_buffer(pa.array([0, 3, 8], pa.int32()).buffers()[1])
    bad = pa.Array.from_buffers(pa.string(), 2, [None, offsets, pa.py_buffer(b"1+1ca\xe9+2")])
    path = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"problem": bad, "answer": ["2", "4"]}), path)
    with pytest.raises(DatasetError, match=r"bad\.parquet': column 'problem' row 1 is not UTF-8"):
        datasets.load(data_file=path)


def test_allocate_output_in_a_missing_folder_fails_before_writing(tmp_path, data_dir):
    path = tmp_path / "priors.parquet"
    pq.write_table(
        pa.table(
            {"problem": ["1+1", "2+2", "3+3"], "answer": ["2", "4", "6"], "prior_n": [8, 8, 8], "prior_c": [1, 4, 8]}
        ),
        path,
    )
    assert runner.invoke(app, ["load", "--data-file", str(path)]).exit_code == 0
    missing = tmp_path / "no-such-folder"
    out = runner.invoke(app, ["allocate", "--dataset", "local-priors", "--output", str(missing / "alloc.parquet")])
    assert out.exit_code == 1, out.output
    assert out.exception is None or isinstance(out.exception, SystemExit), out.exception
    assert f"folder {str(missing)!r} does not exist" in out.stderr
    assert Store(data_dir).read_table("allocation", {"run_id": "prior-local-priors"}).num_rows == 0
    assert not missing.exists()


# --- the grading timeout ------------------------------------------------------------------------


def test_grade_timeout_option_bounds_each_item(tmp_path, data_dir):
    rows = [
        {"problem": "p", "answer": "4", "completion": f"\\boxed{{{NESTED_POWER}}}"},
        {"problem": "q", "answer": "3", "completion": "\\boxed{3}"},
    ]
    path = _jsonl(tmp_path / "slow.jsonl", rows)
    out = runner.invoke(
        app, ["grade", "--input", str(path), "--grade-timeout", "0.5", "--grade-workers", "1", "--no-report"]
    )
    assert out.exit_code == 0, out.output
    got = Store(data_dir).query("select grade_status, grade_reason from samples order by sample_idx, prompt_id")
    statuses = dict(zip(got.column("grade_status").to_pylist(), got.column("grade_reason").to_pylist(), strict=True))
    assert statuses.get("timeout") == "exceeded 0.5s"
    assert "correct" in statuses


@pytest.mark.parametrize("value", ["0", "-1", "5000"])
def test_grade_timeout_out_of_range_is_refused(value, tmp_path, data_dir):
    path = _jsonl(tmp_path / "r.jsonl", [{"problem": "p", "answer": "1", "completion": "1"}])
    out = runner.invoke(app, ["grade", "--input", str(path), "--grade-timeout", value])
    assert out.exit_code == 1, out.output
    assert "--grade-timeout" in out.stderr and "out of range" in out.stderr
    with pytest.raises(ConfigError, match="grade_timeout_s"):
        ImportConfig(input=str(path), grade_timeout_s=float(value))
