"""The vllm backend's request/response mapping, against a stand-in module (and a real GPU test)."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from pipeline.sample import (
    SAMPLE_ROWS,
    Sampler,
    SamplingParams,
    derive_seed,
    make_sampler,
    render_prompt,
)

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
    sampler = make_sampler("vllm", "org/tiny", tensor_parallel_size=2, system="Be brief.")
    assert isinstance(sampler, Sampler) and sampler.model_name == "org/tiny"
    table = sampler.sample(PROBLEMS, params, template="Q: {problem}")

    llm_call = fake_vllm.CALLS[0]
    assert llm_call["call"] == "LLM" and llm_call["model"] == "org/tiny"
    assert llm_call["kwargs"]["tensor_parallel_size"] == 2
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
    with make_sampler("vllm", "org/tiny", data_parallel_size=2, gpus=[4, 6]) as dp:
        table = dp.sample(problems, params, progress=advanced.append)
    assert sum(advanced) == 14
    rows = table.to_pylist()
    assert [r["prompt_id"] for r in rows] == [p["prompt_id"] for p in problems for _ in range(2)]
    # Worker 0 (GPU 4) takes the first 4 prompts, worker 1 (GPU 6) the last 3.
    devs = [r["completion"].rsplit("[dev=", 1)[1].rstrip("]") for r in rows]
    assert devs == ["4"] * 8 + ["6"] * 6
    # The same samples as a single in-process engine, apart from the device tag.
    single = make_sampler("vllm", "org/tiny").sample(problems, params).to_pylist()

    def strip(text: str) -> str:
        return text.rsplit(" [dev=", 1)[0]

    assert [strip(r["completion"]) for r in rows] == [strip(r["completion"]) for r in single]
    assert "CUDA_VISIBLE_DEVICES" not in os.environ  # the parent's environment is untouched


def test_options_validated(fake_vllm) -> None:
    with pytest.raises(ValueError, match="tensor_parallel_size=0"):
        make_sampler("vllm", "org/tiny", tensor_parallel_size=0)
    with pytest.raises(ValueError, match="needs 4"):
        make_sampler("vllm", "org/tiny", data_parallel_size=2, tensor_parallel_size=2, gpus=[0])
    with pytest.raises(ValueError, match="needs a model"):
        make_sampler("vllm", None)
    with pytest.raises(FileNotFoundError, match="no/such/dir"):
        make_sampler("vllm", "/no/such/dir")
    assert not [c for c in fake_vllm.CALLS if c["call"] == "LLM"]  # nothing was loaded


def test_missing_vllm_names_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm -> ImportError
    with pytest.raises(ImportError, match=r"difficulty-pipeline\[gpu\]"):
        make_sampler("vllm", "org/tiny")


def _have_cuda_vllm() -> bool:
    try:
        import torch
        import vllm
    except ImportError:
        return False
    return bool(getattr(vllm, "LLM", None)) and torch.cuda.is_available()


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.skipif(not _have_cuda_vllm(), reason="needs a CUDA GPU and vLLM")
def test_real_vllm_samples() -> None:
    model = os.environ.get("DIFFICULTY_GPU_MODEL", "Qwen/Qwen2.5-0.5B-Instruct")
    problems = [
        {"prompt_id": "g1", "problem": "What is 12 + 30?"},
        {"prompt_id": "g2", "problem": "What is 9 * 8?"},
    ]
    params = SamplingParams(n=4, temperature=0.8, max_tokens=48, seed=7)
    with make_sampler("vllm", model, gpu_memory_utilization=0.5, max_model_len=1024) as s:
        a = s.sample(problems, params)
        b = s.sample(problems, params)
    assert a.num_rows == 8
    assert a.column("sample_idx").to_pylist() == [0, 1, 2, 3] * 2
    assert all(0 < n <= 48 for n in a.column("n_tokens").to_pylist())
    assert set(a.column("finish_reason").to_pylist()) <= {"stop", "length"}
    assert all(isinstance(t, str) and t for t in a.column("completion").to_pylist())
    # Seeded: a rerun on the same engine reproduces the samples.
    assert a.column("completion").to_pylist() == b.column("completion").to_pylist()
