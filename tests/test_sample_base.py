"""Sampling parameters, seed derivation, problem input and prompt templates."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from pipeline.errors import ConfigError
from pipeline.sample import (
    DEFAULT_TEMPLATE,
    SAMPLE_ROWS,
    SamplingParams,
    derive_seed,
    make_sampler,
    prepare_prompts,
    render_prompt,
    template_for,
)
from pipeline.sample.base import rows_to_table


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n": 0}, r"n=0 is out of range: allowed \[1, 100000\]"),
        ({"n": 2.0}, r"n=2.0 must be an integer"),
        ({"temperature": -0.1}, r"temperature=-0.1 is out of range: allowed \[0, 10\]"),
        ({"temperature": float("nan")}, r"temperature=nan is out of range"),
        ({"top_p": 0.0}, r"top_p=0.0 is out of range: allowed \(0, 1\]"),
        ({"top_p": 1.5}, r"top_p=1.5 is out of range"),
        ({"max_tokens": 0}, r"max_tokens=0 is out of range"),
        ({"seed": -1}, r"seed=-1 is out of range"),
        ({"n": True}, r"n=True must be an integer"),
    ],
)
def test_params_validation_names_value_and_range(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        SamplingParams(**kwargs)


def test_params_frozen_and_dict() -> None:
    p = SamplingParams(n=3, temperature=0, top_p=0.5, max_tokens=10, seed=9)
    with pytest.raises(AttributeError):
        p.n = 4  # type: ignore[misc]
    assert p.to_dict() == {"n": 3, "temperature": 0, "top_p": 0.5, "max_tokens": 10, "seed": 9}


def test_derive_seed_stable_across_processes_and_distinct() -> None:
    code = (
        "from pipeline.sample import derive_seed;"
        "print([derive_seed(s, p, i) for s in (0, 7) for p in ('a', 'b') for i in range(3)])"
    )
    outs = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={"PYTHONHASHSEED": str(h), "PATH": ""},
            cwd=Path(__file__).resolve().parents[1],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for h in (1, 2)
    }
    assert len(outs) == 1
    here = [derive_seed(s, p, i) for s in (0, 7) for p in ("a", "b") for i in range(3)]
    assert outs.pop().strip() == str(here)
    assert len(set(here)) == len(here)
    assert all(0 <= x < 2**31 - 1 for x in here)
    many = {derive_seed(0, f"p{i}", j) for i in range(200) for j in range(50)}
    assert len(many) > 9990  # 10,000 draws from 2**31: collisions are rare


def test_prepare_prompts_from_table_dicts_and_objects() -> None:
    class P:
        def __init__(self, prompt_id: str, problem: str) -> None:
            self.prompt_id, self.problem = prompt_id, problem

    table = pa.table({"prompt_id": ["x", "y"], "problem": ["1+1", "{a}^2"], "answer": ["2", "a"]})
    from_table = prepare_prompts(table, "Q: {problem}")
    assert [(i.prompt_id, i.prompt) for i in from_table] == [("x", "Q: 1+1"), ("y", "Q: {a}^2")]
    from_dicts = prepare_prompts(table.to_pylist(), "Q: {problem}")
    assert from_dicts == from_table
    assert prepare_prompts([P("x", "1+1"), P("y", "{a}^2")], "Q: {problem}") == from_table
    assert prepare_prompts([], None) == []


def test_prepare_prompts_bad_input() -> None:
    with pytest.raises(ValueError, match="prompt_id 'x' appears twice"):
        prepare_prompts([{"prompt_id": "x", "problem": "a"}, {"prompt_id": "x", "problem": "b"}], None)
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['problem'\]"):
        prepare_prompts(pa.table({"prompt_id": ["x"]}), None)
    with pytest.raises(ValueError, match="problem row 1: prompt_id=None"):
        prepare_prompts([{"prompt_id": "x", "problem": "a"}, {"problem": "b"}], None)
    with pytest.raises(ConfigError, match="problem q: problem=None"):
        prepare_prompts([{"prompt_id": "q", "problem": None}], None)


def test_templates_bundled_and_from_file(tmp_path: Path) -> None:
    for ds in ("gsm8k", "default"):
        tpl = template_for(ds)
        assert tpl.count("{problem}") == 1 and "\\boxed{}" in tpl
    # The bundled 135M model answers bare arithmetic better without \boxed{} (see templates.py).
    assert template_for("arithmetic") == "{problem} Reply with only the final number."
    assert template_for("gsm8k") != template_for("arithmetic")
    assert template_for("deepmath") == template_for(None) == DEFAULT_TEMPLATE
    own = tmp_path / "t.txt"
    own.write_text("Answer in \\boxed{}: {problem}\n")
    assert template_for("gsm8k", own) == "Answer in \\boxed{}: {problem}\n"
    assert render_prompt(template_for("gsm8k", own), " 3*{x} ") == "Answer in \\boxed{}: 3*{x}"
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        template_for("gsm8k", tmp_path / "nope.txt")
    bad = tmp_path / "bad.txt"
    bad.write_text("no placeholder here")
    with pytest.raises(ValueError, match=r"bad.txt.*\{problem\} exactly once \(found 0\)"):
        template_for(None, bad)


def test_rows_to_table_schema() -> None:
    empty = rows_to_table([])
    assert empty.schema == SAMPLE_ROWS and empty.num_rows == 0
    t = rows_to_table([("a", 0, "x", "stop", 3), ("a", 1, None, None, None)])
    assert t.schema == SAMPLE_ROWS
    assert t.column("sample_idx").type == pa.int32() and t.column("n_tokens").type == pa.int32()


def test_make_sampler_unknown_backend_and_missing_model(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="backend='tgi' is unknown: allowed xllamacpp, vllm, openai"):
        make_sampler("tgi")
    missing = tmp_path / "missing.gguf"
    with pytest.raises(FileNotFoundError, match="missing.gguf"):
        make_sampler("xllamacpp", str(missing))
