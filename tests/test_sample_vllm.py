"""The vllm backend's request/response mapping, against a stand-in module (and a real GPU test).

The stand-in plays vLLM at the GPU boundary; the tests that model a GPU pass ``device="cuda"``
(torch is installed beside vLLM's CPU build, and sees no GPU here). The CPU defaults and the
converted-model cache are checked against the same stand-in; the real CPU engine is in
``test_vllm_cpu.py``.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from pipeline.errors import MissingDependencyError, MissingFileError
from pipeline.sample import (
    SAMPLE_ROWS,
    Sampler,
    SamplingParams,
    bundled_model_path,
    derive_seed,
    make_sampler,
    render_prompt,
)
from pipeline.sample import models as model_cache
from pipeline.sample.vllm import VllmOptions

FAKE_DIR = str(Path(__file__).parent / "fake_vllm")


@pytest.fixture
def fake_vllm(monkeypatch: pytest.MonkeyPatch):
    """Put the stand-in `vllm` first on sys.path (and drop any real one already imported)."""
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.syspath_prepend(FAKE_DIR)
    mod = importlib.import_module("vllm")
    assert mod.__version__ == "0.0.0-fake"
    mod.CALLS.clear()
    yield mod
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        sys.modules.pop(name, None)


PROBLEMS = [
    {"prompt_id": "p-a", "problem": "What is 2 + 3?"},
    {"prompt_id": "p-b", "problem": "What is 7 * 6?"},
    {"prompt_id": "p-c", "problem": "Compute {1, 2} size."},
]


def test_request_mapping(fake_vllm) -> None:
    params = SamplingParams(n=4, temperature=0.7, top_p=0.9, max_tokens=20, seed=11)
    sampler = make_sampler("vllm", "org/tiny", tensor_parallel_size=2, system="Be brief.", device="cuda")
    assert isinstance(sampler, Sampler) and sampler.model_name == "org/tiny"
    table = sampler.sample(PROBLEMS, params, template="Q: {problem}")

    llm_call = fake_vllm.CALLS[0]
    assert llm_call["call"] == "LLM" and llm_call["model"] == "org/tiny"
    # The GPU defaults, unchanged: nothing of the CPU settings.
    assert llm_call["kwargs"] == {
        "tensor_parallel_size": 2,
        "gpu_memory_utilization": 0.9,
        "dtype": "auto",
        "enforce_eager": False,
    }
    chats = [c for c in fake_vllm.CALLS if c["call"] == "chat"]
    assert len(chats) == 1  # one batched call for all prompts
    chat = chats[0]
    assert chat["use_tqdm"] is False and chat["add_generation_prompt"] is True
    assert chat["messages"][1] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": render_prompt("Q: {problem}", "What is 7 * 6?")},
    ]
    for prob, sp in zip(PROBLEMS, chat["sampling_params"], strict=True):
        # max_tokens explicit (vLLM's default is 16), seed derived per prompt.
        assert (sp.n, sp.temperature, sp.top_p, sp.max_tokens) == (4, 0.7, 0.9, 20)
        assert sp.seed == derive_seed(11, prob["prompt_id"], 0)
    assert table.schema == SAMPLE_ROWS


def test_response_mapping(fake_vllm) -> None:
    params = SamplingParams(n=5, temperature=1.0, max_tokens=12, seed=3)
    sampler = make_sampler("vllm", "org/tiny")
    table = sampler.sample(pa.Table.from_pylist(PROBLEMS), params)
    assert table.num_rows == 15
    rows = table.to_pylist()
    assert [r["prompt_id"] for r in rows] == [p["prompt_id"] for p in PROBLEMS for _ in range(5)]
    assert [r["sample_idx"] for r in rows] == list(range(5)) * 3
    # The fake returns children in reverse order: rows must follow CompletionOutput.index.
    llm = fake_vllm.LLM("x")
    sp = fake_vllm.SamplingParams(n=5, temperature=1.0, max_tokens=12, seed=derive_seed(3, "p-b", 0))
    direct = llm.chat([{"role": "user", "content": sampler_prompt("What is 7 * 6?")}], sp)[0]
    by_index = {c.index: c for c in direct.outputs}
    for r in rows[5:10]:
        c = by_index[r["sample_idx"]]
        assert r["completion"] == c.text
        assert r["n_tokens"] == len(c.token_ids)
        assert r["finish_reason"] == c.finish_reason
    reasons = set(table.column("finish_reason").to_pylist())
    assert reasons <= {"stop", "length"} and "length" in reasons  # max_tokens=12 truncates some
    assert all(n <= 12 for n in table.column("n_tokens").to_pylist())


def sampler_prompt(problem: str) -> str:
    from pipeline.sample import DEFAULT_TEMPLATE

    return render_prompt(DEFAULT_TEMPLATE, problem)


def test_rerun_reproduces_and_seed_changes(fake_vllm) -> None:
    sampler = make_sampler("vllm", "org/tiny")
    a = sampler.sample(PROBLEMS, SamplingParams(n=3, seed=1, max_tokens=64))
    # Same prompts in another order and split: per-prompt samples are identical.
    b1 = sampler.sample(PROBLEMS[2:], SamplingParams(n=3, seed=1, max_tokens=64))
    b2 = sampler.sample(PROBLEMS[:2], SamplingParams(n=3, seed=1, max_tokens=64))
    assert pa.concat_tables([b2, b1]).equals(a)
    c = sampler.sample(PROBLEMS, SamplingParams(n=3, seed=2, max_tokens=64))
    assert c.column("completion").to_pylist() != a.column("completion").to_pylist()


def test_data_parallel_workers(fake_vllm, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    problems = [{"prompt_id": f"q{i}", "problem": f"{i} + {i}"} for i in range(7)]
    params = SamplingParams(n=2, seed=5, max_tokens=64)
    advanced: list[int] = []
    with make_sampler("vllm", "org/tiny", data_parallel_size=2, gpus=[4, 6], device="cuda") as dp:
        table = dp.sample(problems, params, progress=advanced.append)
    assert sum(advanced) == 14
    rows = table.to_pylist()
    assert [r["prompt_id"] for r in rows] == [p["prompt_id"] for p in problems for _ in range(2)]
    # Worker 0 (GPU 4) takes the first 4 prompts, worker 1 (GPU 6) the last 3.
    devs = [r["completion"].rsplit("[dev=", 1)[1].rstrip("]") for r in rows]
    assert devs == ["4"] * 8 + ["6"] * 6
    # The same samples as a single in-process engine, apart from the device tag.
    single = make_sampler("vllm", "org/tiny", device="cuda").sample(problems, params).to_pylist()

    def strip(text: str) -> str:
        return text.rsplit(" [dev=", 1)[0]

    assert [strip(r["completion"]) for r in rows] == [strip(r["completion"]) for r in single]
    assert "CUDA_VISIBLE_DEVICES" not in os.environ  # the parent's environment is untouched


def test_options_validated(fake_vllm) -> None:
    with pytest.raises(ValueError, match="tensor_parallel_size=0"):
        make_sampler("vllm", "org/tiny", tensor_parallel_size=0)
    with pytest.raises(ValueError, match="needs 4"):
        make_sampler("vllm", "org/tiny", data_parallel_size=2, tensor_parallel_size=2, gpus=[0])
    with pytest.raises(ValueError, match="needs a model on a CUDA machine"):
        make_sampler("vllm", None, device="cuda")
    with pytest.raises(FileNotFoundError, match="no/such/dir"):
        make_sampler("vllm", "/no/such/dir")
    with pytest.raises(ValueError, match="device='tpu'"):
        make_sampler("vllm", "org/tiny", device="tpu")
    with pytest.raises(ValueError, match="kv_cache_gib=0"):
        make_sampler("vllm", "org/tiny", kv_cache_gib=0)
    with pytest.raises(ValueError, match="data_parallel_size=2 needs GPUs"):
        make_sampler("vllm", "org/tiny", data_parallel_size=2, device="cpu")
    assert not [c for c in fake_vllm.CALLS if c["call"] == "LLM"]  # nothing was loaded


def test_missing_vllm_names_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm -> ImportError
    with pytest.raises(ImportError, match=r"difficulty-pipeline\[gpu\].*make vllm-cpu"):
        make_sampler("vllm", "org/tiny")


# --- the CPU defaults, each overridable -----------------------------------------------------------


def test_cpu_engine_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    assert VllmOptions().llm_args("cpu") == {
        "tensor_parallel_size": 1,
        "gpu_memory_utilization": 0.9,
        "dtype": "float32",
        "enforce_eager": True,
        "enable_chunked_prefill": False,  # seeded requests crash a chunked prefill on the CPU
        "kv_cache_memory_bytes": 2**30,
        "distributed_executor_backend": "uni",
    }
    # Each one overridable, by its field or by llm_kwargs (which wins over everything).
    args = VllmOptions(
        dtype="bfloat16",
        enforce_eager=False,
        chunked_prefill=True,
        kv_cache_gib=0.5,
        in_process=False,
        llm_kwargs={"max_num_seqs": 8, "dtype": "float16"},
    ).llm_args("cpu")
    assert args == {
        "tensor_parallel_size": 1,
        "gpu_memory_utilization": 0.9,
        "dtype": "float16",
        "enforce_eager": False,
        "enable_chunked_prefill": True,
        "kv_cache_memory_bytes": 2**29,
        "max_num_seqs": 8,
    }
    # vLLM's own variables are respected: a KV cache size, an engine process asked for.
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "2")
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")
    args = VllmOptions().llm_args("cpu")
    assert "kv_cache_memory_bytes" not in args and "distributed_executor_backend" not in args
    # On a GPU: vLLM's defaults, as before.
    assert VllmOptions().llm_args("cuda") == {
        "tensor_parallel_size": 1,
        "gpu_memory_utilization": 0.9,
        "dtype": "auto",
        "enforce_eager": False,
    }


def _fake_cached_model(root: Path, gguf: Path) -> Path:
    """A cache folder as a conversion leaves it (the files only; the stand-in loads nothing)."""
    sha = model_cache.file_sha256(gguf)
    folder = root / model_cache.folder_name(gguf, sha)
    folder.mkdir(parents=True)
    for name in model_cache.REQUIRED_FILES:
        (folder / name).write_text("{}")
    manifest = {"source": str(gguf), "source_sha256": sha, "dtype": "float32", "created_at": "t", "converter": "x"}
    (folder / model_cache.MANIFEST).write_text(json.dumps(manifest))
    return folder


def test_cpu_without_model_uses_the_cached_bundled_model(
    fake_vllm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(model_cache.CACHE_ENV, str(tmp_path / "cache"))
    # Set, then deleted: monkeypatch restores the variable as it was after the test, so the one
    # the sampler sets does not leak into the tests after this one.
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "unset")
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING")
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    folder = _fake_cached_model(tmp_path / "cache", bundled_model_path())
    sampler = make_sampler("vllm", None, device="cpu")
    # The run records the folder's name (the GGUF's hash), not this machine's cache path.
    assert sampler.model_name == folder.name and sampler.model_name.startswith("SmolLM2-135M-Instruct-Q4_1-f32-")
    assert sampler.model_path == str(folder)
    [llm_call] = [c for c in fake_vllm.CALLS if c["call"] == "LLM"]
    assert llm_call["model"] == str(folder)
    assert llm_call["kwargs"]["dtype"] == "float32" and llm_call["kwargs"]["enable_chunked_prefill"] is False
    assert llm_call["kwargs"]["distributed_executor_backend"] == "uni"
    assert os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"  # the engine runs in this process
    table = sampler.sample(PROBLEMS, SamplingParams(n=2, seed=1, max_tokens=8))
    assert table.num_rows == 6


def test_model_cache_listing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "cache"
    monkeypatch.setenv(model_cache.CACHE_ENV, str(root))
    assert model_cache.cache_root() == root and model_cache.list_models() == []
    folder = _fake_cached_model(root, bundled_model_path())
    (root / ".tmp-half-written-123").mkdir()  # a conversion in progress or killed: not listed
    (root / "someone-elses-folder").mkdir()  # no manifest: not ours
    incomplete = root / "incomplete"
    incomplete.mkdir()
    (incomplete / model_cache.MANIFEST).write_text("{}")
    listed = {m.name: m for m in model_cache.list_models()}
    assert set(listed) == {folder.name, "incomplete"}
    assert listed[folder.name].ready and not listed["incomplete"].ready
    # prepare() finds the ready folder without converting anything.
    assert model_cache.prepare().path == folder
    monkeypatch.delenv(model_cache.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert model_cache.cache_root() == tmp_path / "xdg" / "difficulty-pipeline" / "models"


def test_model_cache_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(model_cache.CACHE_ENV, str(tmp_path / "cache"))
    with pytest.raises(MissingFileError, match="nope.gguf"):
        model_cache.prepare(tmp_path / "nope.gguf")
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"GGUF not really")
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers -> ImportError
    with pytest.raises(MissingDependencyError, match="make vllm-cpu"):
        model_cache.prepare(gguf)
    cache = tmp_path / "cache"
    assert not cache.exists() or not list(cache.iterdir())  # no temporary folder left behind


def _cuda_available() -> bool:
    """Asked in a child process: importing torch here would load it into the test process for
    every test after this one. (A CUDA machine without vLLM then fails the test, naming the extra.)"""
    code = "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"
    try:
        return subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=300).returncode == 0
    except subprocess.TimeoutExpired:
        return False


@pytest.mark.gpu
@pytest.mark.slow
def test_real_vllm_samples() -> None:
    if not _cuda_available():
        pytest.skip("needs a CUDA GPU and vLLM")
    model = os.environ.get("DIFFICULTY_GPU_MODEL", "Qwen/Qwen2.5-0.5B-Instruct")
    problems = [
        {"prompt_id": "g1", "problem": "What is 12 + 30?"},
        {"prompt_id": "g2", "problem": "What is 9 * 8?"},
    ]
    params = SamplingParams(n=4, temperature=0.8, max_tokens=48, seed=7)
    with make_sampler("vllm", model, gpu_memory_utilization=0.5, max_model_len=1024) as s:
        assert s.device == "cuda" and s.options.llm_args(s.device)["enforce_eager"] is False  # GPU defaults
        a = s.sample(problems, params)
        b = s.sample(problems, params)
    assert a.num_rows == 8
    assert a.column("sample_idx").to_pylist() == [0, 1, 2, 3] * 2
    assert all(0 < n <= 48 for n in a.column("n_tokens").to_pylist())
    assert set(a.column("finish_reason").to_pylist()) <= {"stop", "length"}
    assert all(isinstance(t, str) and t for t in a.column("completion").to_pylist())
    # Seeded: a rerun on the same engine reproduces the samples.
    assert a.column("completion").to_pylist() == b.column("completion").to_pylist()


def test_greedy_asks_for_one_sample_and_repeats_it(fake_vllm) -> None:
    """vLLM refuses n > 1 with temperature 0; every greedy sample is the same one."""
    sampler = make_sampler("vllm", "org/tiny", device="cuda")
    table = sampler.sample(PROBLEMS, SamplingParams(n=3, temperature=0.0, max_tokens=12, seed=1))
    [chat] = [c for c in fake_vllm.CALLS if c["call"] == "chat"]
    assert {sp.n for sp in chat["sampling_params"]} == {1}
    rows = table.to_pylist()
    assert [r["sample_idx"] for r in rows] == [0, 1, 2] * 3
    for i in range(3):
        assert len({(r["completion"], r["n_tokens"]) for r in rows[3 * i : 3 * i + 3]}) == 1


def test_a_rounds_groups_go_to_the_engine_in_one_call(fake_vllm) -> None:
    """An adaptive round's prompts differ in their first sample index and count: the shard's samples
    come from one engine call, row for row what one call per group gives (each request is seeded by
    its prompt and first sample index), so a round costs the longest answer of all, not the sum of
    each group's longest."""
    from pipeline.run.shards import FIRST_IDX, N_SAMPLES, _sample_batches

    problems = pa.table(
        {
            "prompt_id": ["p-a", "p-b", "p-c", "p-d"],
            "problem": ["1 + 1", "2 + 2", "3 + 3", "4 + 4"],
            FIRST_IDX: [4, 8, 4, 16],
            N_SAMPLES: [4, 8, 4, 16],
        }
    )
    batches = _sample_batches(problems, SamplingParams(seed=5, max_tokens=30))
    assert len(batches) == 3
    sampler = make_sampler("vllm", "org/tiny")
    one = sampler.sample_batches(batches)
    assert [c["call"] for c in fake_vllm.CALLS].count("chat") == 1
    apart = pa.concat_tables([sampler.sample(sub, p) for sub, p in batches])
    assert one.equals(apart)
    assert [c["call"] for c in fake_vllm.CALLS].count("chat") == 4
    pairs = list(zip(one["prompt_id"].to_pylist(), one["sample_idx"].to_pylist(), strict=True))
    firsts = {pid: min(i for q, i in pairs if q == pid) for pid in ("p-a", "p-b", "p-d")}
    assert firsts == {"p-a": 4, "p-b": 8, "p-d": 16}
    done: list[int] = []
    sampler.sample_batches(batches, done.append)
    assert sum(done) == one.num_rows == 4 + 8 + 4 + 16
