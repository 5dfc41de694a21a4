"""Trainer formats: verl, MATH and TRL files are read as they are, with their rows kept whole.

The real files live in ``../shared/data`` beside the project (GSM8K, MATH-500 as JSON Lines and
in verl's format, a DeepScaleR subset in verl's format, AIME 2024); the tests that read them skip,
saying so, only when that folder is absent.
"""

from __future__ import annotations

import datetime
import importlib
import json
import pickle
import sys
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from pipeline import datasets
from pipeline.cli import app
from pipeline.errors import ConfigError, DatasetError
from pipeline.sample import SamplingParams, make_sampler
from pipeline.sample.base import ChatPrompt, chat_messages, prepare_prompts
from pipeline.sample.templates import CHAT_MESSAGES, template_for

runner = CliRunner()


MATH_FIRST = r"\left( 3, \frac{\pi}{2} \right)"
# file: adapter detected, dataset name, rows read, problems, duplicates, statuses, first answer
FILES = {
    "gsm8k/test.jsonl": ("gsm8k", "gsm8k", 1319, 1319, 0, {"ok": 1319}, "18"),
    "math500/test.jsonl": ("math", "local-math500-test", 500, 500, 0, {"ok": 500}, MATH_FIRST),
    "math500/verl_test.parquet": ("verl", "verl-math500-verl_test", 500, 500, 0, {"ok": 500}, MATH_FIRST),
    # three rows share one problem (two collapse) and one has an empty ground_truth
    "deepscaler/verl_train_sub.parquet": (
        "verl",
        "verl-deepscaler-verl_train_sub",
        1209,
        1207,
        2,
        {"ok": 1206, "empty_answer": 1},
        r"\frac{3}{7}",
    ),
    "aime24/test.jsonl": ("trl", "local-aime24-test", 30, 30, 0, {"ok": 30}, "204"),
}


@pytest.mark.parametrize("name", list(FILES))
def test_every_shared_file_loads_with_counts_answers_and_stable_ids(shared, name):
    adapter, dataset, rows, kept, duplicates, statuses, first = FILES[name]
    raw = datasets.read_local(shared / name)
    assert datasets.detect_adapter(raw.column_names) == adapter
    a = datasets.load(data_file=shared / name)
    b = datasets.load(adapter, data_file=shared / name)  # selectable by name: the same
    t = a.problems
    assert (a.rows_read, t.num_rows, a.duplicates, a.status_counts) == (rows, kept, duplicates, statuses)
    assert set(t.column("dataset").to_pylist()) == {dataset}
    assert t.column("answer")[0].as_py() == first
    ids = t.column("prompt_id").to_pylist()
    assert ids == b.problems.column("prompt_id").to_pylist()  # the same on every load
    assert len(set(ids)) == len(ids)
    assert ids == [datasets.prompt_id(dataset, p) for p in t.column("problem").to_pylist()]
    # a limited load is the start of the full one, ids included
    assert datasets.load(data_file=shared / name, limit=7).problems.column("prompt_id").to_pylist() == ids[:7]
    # every row keeps its source row: the first is the file's first row, field for field
    originals = [datasets.original_row(o) for o in t.column("original").to_pylist()]
    assert all(o is not None for o in originals)
    if name.endswith(".jsonl"):
        first_line = (shared / name).read_text(encoding="utf-8").splitlines()[0].strip()
        assert t.column("original")[0].as_py() == first_line  # the line as written
    assert originals[0] == raw.slice(0, 1).to_pylist()[0]


def test_the_two_math500_files_agree_and_answers_come_from_boxes(shared, tmp_path):
    plain = datasets.load(data_file=shared / "math500/test.jsonl").problems
    verl = datasets.load(data_file=shared / "math500/verl_test.parquet").problems
    for column in ("answer", "difficulty", "topic"):
        assert plain.column(column).to_pylist() == verl.column(column).to_pylist(), column
    assert set(plain.column("difficulty").to_pylist()) == {1.0, 2.0, 3.0, 4.0, 5.0}
    # without its answer column MATH's gold is the last box of the solution: the same 500 answers
    rows = [json.loads(line) for line in (shared / "math500/test.jsonl").read_text().splitlines()]
    bare = tmp_path / "math.jsonl"
    bare.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "answer"}) + "\n" for r in rows))
    boxed = datasets.load("math", data_file=bare).problems
    assert boxed.column("answer").to_pylist() == plain.column("answer").to_pylist()
    gsm = datasets.load("gsm8k", data_file=shared / "gsm8k/test.jsonl").problems
    gold = [json.loads(line)["answer"] for line in (shared / "gsm8k/test.jsonl").read_text().splitlines()]
    assert gsm.column("answer").to_pylist() == [datasets.gsm8k_gold(g) for g in gold]


def test_detection_rules():
    detect = datasets.detect_adapter
    assert detect(["data_source", "prompt", "ability", "reward_model", "extra_info"]) == "verl"
    assert detect(["problem", "solution", "answer", "subject", "level", "unique_id"]) == "math"
    assert detect(["problem", "solution", "level", "type"]) == "math"  # the original MATH, no answer column
    assert detect(["problem", "solution", "answer"]) == "trl"  # open-r1
    assert detect(["problem", "solution"]) == "trl"  # NuminaMath-TIR
    assert detect(["id", "problem", "solution", "answer", "url", "question"]) == "trl"  # AIME: problem wins
    assert detect(["question", "answer"]) == "gsm8k"
    assert detect(["problem", "answer", "llama8b_solve_rate"]) == "bigmath"
    assert detect(["question", "final_answer", "difficulty"]) == "deepmath"
    assert detect(["text"]) == "local"


def test_a_solution_s_last_box_is_the_gold_answer():
    """MATH's gold from its solution is read by the grader's one box reader (grade.extract.last_box)."""
    table = pa.table(
        {"problem": ["p", "q", "r"], "solution": [r"so $\boxed{\frac{1}{2}}$.", r"thus \boxed 5$.", "none"]}
    )
    assert datasets.ADAPTERS["math"].convert(table)["answer"] == [r"\frac{1}{2}", "5", None]


def test_a_verl_prompt_is_sent_as_its_own_messages(shared, tmp_path):
    result = datasets.load(data_file=shared / "deepscaler/verl_train_sub.parquet", limit=3)
    problems = result.problems
    dataset = problems.column("dataset")[0].as_py()
    assert template_for(dataset) == CHAT_MESSAGES
    source = pq.read_table(shared / "deepscaler/verl_train_sub.parquet").slice(0, 3).to_pylist()
    items = prepare_prompts(problems, template_for(dataset))
    for item, row, text in zip(items, source, problems.column("problem").to_pylist(), strict=True):
        assert isinstance(item.prompt, ChatPrompt)
        assert str(item.prompt) == text == row["prompt"][-1]["content"]  # instruction included
        assert "output the final answer within \\boxed{}" in text
        assert chat_messages(item.prompt, None) == row["prompt"]
        assert chat_messages(item.prompt, "Be brief.") == [{"role": "system", "content": "Be brief."}, *row["prompt"]]
        again = pickle.loads(pickle.dumps(item.prompt))  # to vLLM workers and Ray actors
        assert isinstance(again, ChatPrompt) and chat_messages(again, None) == row["prompt"]
    # a template of the user's replaces the messages: every other format keeps today's templates
    tpl = tmp_path / "t.txt"
    tpl.write_text("Q: {problem}\nA:")
    mine = prepare_prompts(problems, template_for(dataset, tpl))
    assert not isinstance(mine[0].prompt, ChatPrompt) and mine[0].prompt.startswith("Q: Find the probability")
    assert template_for("local-math500-test") != CHAT_MESSAGES
    # a problem without its verl row cannot be sent as messages: named, never a silent template
    with pytest.raises(ConfigError, match="has\\s+none"):
        prepare_prompts(problems.drop_columns(["original"]), CHAT_MESSAGES)


def test_vllm_sends_a_verl_row_as_its_own_messages(shared, monkeypatch):
    """Through a backend, with the stand-in vLLM module (the one mock, at the GPU boundary)."""
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "fake_vllm"))
    vllm = importlib.import_module("vllm")
    vllm.CALLS.clear()
    try:
        problems = datasets.load(data_file=shared / "math500/verl_test.parquet", limit=2).problems
        template = template_for(problems.column("dataset")[0].as_py())
        make_sampler("vllm", "org/tiny", device="cuda").sample(
            problems, SamplingParams(n=2, max_tokens=8), template=template
        )
        chats = [c for c in vllm.CALLS if c["call"] == "chat"]
        source = pq.read_table(shared / "math500/verl_test.parquet").slice(0, 2).column("prompt").to_pylist()
        assert chats[0]["messages"] == source
    finally:
        for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
            sys.modules.pop(name, None)


# --- bad input ----------------------------------------------------------------------------------


def _verl_rows(**reward) -> list[dict]:
    return [
        {
            "data_source": "toy",
            "prompt": [{"role": "system", "content": "Think."}, {"role": "user", "content": f"What is {i} + {i}?"}],
            "ability": "math",
            "reward_model": {"style": "rule", **reward},
            "extra_info": {"index": i, "level": str(i % 3 + 1)},
        }
        for i in range(3)
    ]


def test_verl_reward_model_without_ground_truth_is_named(tmp_path):
    path = tmp_path / "nogt.parquet"
    pq.write_table(pa.Table.from_pylist(_verl_rows()), path)
    with pytest.raises(DatasetError) as info:
        datasets.load(data_file=path)
    message = str(info.value)
    assert "nogt.parquet" in message and "'ground_truth'" in message and "['style']" in message
    out = runner.invoke(app, ["load", "--data-file", str(path), "--data-dir", str(tmp_path / "d")])
    assert out.exit_code == 1 and "ground_truth" in out.stderr


def test_verl_row_without_ground_truth_is_a_status_and_counted(tmp_path):
    rows = _verl_rows(ground_truth="2")
    rows[1]["reward_model"] = {"style": "rule", "ground_truth": None}
    rows[2]["reward_model"] = None
    path = tmp_path / "some.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    result = datasets.load(data_file=path)
    assert result.rows_read == 3 and result.problems.num_rows == 3
    assert result.status_counts == {"ok": 1, "empty_answer": 2}
    got = result.problems.select(["problem", "answer", "source", "domain", "difficulty"]).to_pylist()
    assert got[0] == {"problem": "What is 0 + 0?", "answer": "2", "source": "toy", "domain": "math", "difficulty": 1.0}
    out = runner.invoke(app, ["load", "--data-file", str(path), "--data-dir", str(tmp_path / "d")])
    assert out.exit_code == 0, out.output
    assert "loaded 3 problems into dataset verl-some (3 rows read, 0 duplicates collapsed; empty_answer: 2, ok: 1)" in (
        out.stdout
    )


def test_verl_prompt_that_is_not_messages_is_named(tmp_path):
    rows = _verl_rows(ground_truth="2")
    table = pa.Table.from_pylist(rows).set_column(1, "prompt", pa.array([[1], [2], [3]]))
    path = tmp_path / "bad.parquet"
    pq.write_table(table, path)
    with pytest.raises(DatasetError, match=r"bad\.parquet'.*column 'prompt' row 0"):
        datasets.load(data_file=path)


def test_math_row_with_no_answer_and_no_box_is_a_status_and_counted(tmp_path):
    path = tmp_path / "math.jsonl"
    rows = [
        {"problem": "1+1?", "solution": "It is $\\boxed{2}$.", "answer": "", "level": "Level 1", "type": "Algebra"},
        {"problem": "2+2?", "solution": "It is four.", "level": "Level 2", "type": "Algebra"},
        {"problem": "3+3?", "solution": "It is 6.", "answer": "6", "level": "Level ?", "type": "Algebra"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = datasets.load(data_file=path)
    assert result.rows_read == 3 and result.status_counts == {"ok": 2, "empty_answer": 1}
    got = result.problems.select(["answer", "difficulty", "topic", "status"]).to_pylist()
    assert got == [
        {"answer": "2", "difficulty": 1.0, "topic": "Algebra", "status": "ok"},
        {"answer": None, "difficulty": 2.0, "topic": "Algebra", "status": "empty_answer"},
        {"answer": "6", "difficulty": None, "topic": "Algebra", "status": "ok"},
    ]
    assert datasets.original_row(result.problems.column("original")[1].as_py()) == rows[1]  # kept whole
    out = runner.invoke(app, ["load", "--data-file", str(path), "--data-dir", str(tmp_path / "d")])
    assert out.exit_code == 0 and "(3 rows read, 0 duplicates collapsed; empty_answer: 1, ok: 2)" in out.stdout
    nothing = tmp_path / "none.jsonl"
    nothing.write_text(json.dumps({"problem": "x", "level": 1, "subject": "y"}) + "\n")
    with pytest.raises(DatasetError, match="needs column 'answer' or 'solution'"):
        datasets.load("math", data_file=nothing)


def test_a_named_adapter_that_does_not_fit_names_the_missing_columns(shared):
    with pytest.raises(DatasetError, match=r"adapter 'verl' needs column\(s\) \['prompt', 'reward_model'\]"):
        datasets.load("verl", data_file=shared / "math500/test.jsonl")


def test_original_rows_keep_types_json_lacks():
    row = {
        "problem": "x",
        "blob": b"\x00\xffpng",
        "when": datetime.datetime(2024, 5, 1, 12, 30, tzinfo=datetime.UTC),
        "day": datetime.date(2024, 5, 1),
        "price": Decimal("1.10"),
        "nested": {"list": [1, 2.5, None, "a"], "flag": True},
        "nan": float("nan"),
    }
    back = datasets.original_row(datasets.original_json(row))
    nan = back.pop("nan")
    assert nan != nan and back == {k: v for k, v in row.items() if k != "nan"}
    assert datasets.original_row(None) is None
