import json
import subprocess
import sys
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline import datasets, schema


def test_prompt_id_is_stable_and_whitespace_insensitive():
    a = datasets.prompt_id("gsm8k", "What is  2 + 2?\n")
    assert a == datasets.prompt_id("gsm8k", " What is 2 + 2?")
    assert a != datasets.prompt_id("bigmath", "What is 2 + 2?")
    # Stable across processes (no per-process hash seed).
    out = subprocess.run(
        [sys.executable, "-c", "from pipeline.datasets import prompt_id; print(prompt_id('gsm8k', 'What is 2 + 2?'))"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == a


def test_arithmetic_is_seeded_tiered_and_exact():
    first = datasets.load("arithmetic", limit=36)
    again = datasets.load("arithmetic", limit=36)
    assert first.problems.equals(again.problems)
    other = datasets.load("arithmetic", limit=36, seed=1)
    assert not first.problems.column("problem").equals(other.problems.column("problem"))
    rows = first.problems.to_pylist()
    assert {r["difficulty"] for r in rows} == set(range(1, 10))
    for r in rows:
        expr = r["problem"].removeprefix("Calculate ").removesuffix(".")
        assert str(eval(expr)) == r["answer"]  # noqa: S307 - our own generated arithmetic
        assert r["status"] == schema.PROBLEM_OK
    assert first.problems.schema.equals(schema.PROBLEMS)


def test_gsm8k_file_gold_after_hashes_commas_removed(tmp_path):
    path = tmp_path / "test.jsonl"
    rows = [
        {"question": "Tom has 1,000 apples and buys 234 more. How many?", "answer": "1000 + 234 = 1234\n#### 1,234"},
        {"question": "No gold here?", "answer": "just text"},
        {"question": "Tom has 1,000 apples and buys 234 more.  How many?", "answer": "dup\n#### 1,234"},
        {"question": "  ", "answer": "#### 3"},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    result = datasets.load("gsm8k", data_file=path)
    got = result.problems.to_pylist()
    assert result.duplicates == 1 and len(got) == 3
    assert got[0]["answer"] == "1234" and got[0]["dataset"] == "gsm8k"
    assert got[1]["status"] == schema.PROBLEM_EMPTY_ANSWER
    assert got[2]["status"] == schema.PROBLEM_EMPTY_PROBLEM
    assert result.status_counts == {"ok": 1, "empty_answer": 1, "empty_problem": 1}
    # Chosen by columns when no name is given, same ids as by name.
    auto = datasets.load(data_file=path)
    assert auto.problems.column("prompt_id").equals(result.problems.column("prompt_id"))


def test_bigmath_hub_layout_priors_and_nulls(tmp_path):
    folder = tmp_path / "Big-Math-RL-Verified" / "data"
    folder.mkdir(parents=True)
    table = pa.table(
        {
            "problem": ["p1", "p2", "p3"],
            "answer": ["1", "2", "3"],
            "source": ["amc", "olympiads", "gsm8k"],
            "domain": [["Algebra"], ["Geometry", "Trig"], []],
            "solve_rate": [0.1, 0.2, 0.3],
            "llama8b_solve_rate": [0.5, None, 0.109375],
        }
    )
    pq.write_table(table.slice(0, 2), folder / "train-00000-of-00002.parquet")
    pq.write_table(table.slice(2), folder / "train-00001-of-00002.parquet")
    result = datasets.load(data_file=folder.parent)
    rows = result.problems.to_pylist()
    assert [r["dataset"] for r in rows] == ["bigmath"] * 3
    assert [(r["prior_n"], r["prior_c"]) for r in rows] == [(64, 32), (None, None), (64, 7)]
    assert rows[1]["domain"] == "Geometry, Trig" and rows[0]["source"] == "amc"


def test_bigmath_rate_out_of_range_names_row(tmp_path):
    path = tmp_path / "bm.parquet"
    pq.write_table(pa.table({"problem": ["a", "b"], "answer": ["1", "2"], "llama8b_solve_rate": [0.5, 1.5]}), path)
    with pytest.raises(datasets.DatasetError, match="row 1"):
        datasets.load("bigmath", data_file=path)


def test_deepmath_csv_and_column_mapping(tmp_path):
    path = tmp_path / "deep.csv"
    path.write_text("question,final_answer,difficulty,topic,r1_solution_1\nFind x,\\frac{1}{2},6.5,Algebra,long\n")
    rows = datasets.load(data_file=path).problems.to_pylist()
    assert rows[0]["dataset"] == "deepmath" and rows[0]["difficulty"] == 6.5 and rows[0]["topic"] == "Algebra"
    other = tmp_path / "mine.jsonl"
    other.write_text(json.dumps({"q": "What is 1+1?", "gold": "2", "extra": 1}) + "\n")
    mapped = datasets.load(data_file=other, columns="problem=q,answer=gold").problems.to_pylist()
    assert mapped[0]["dataset"] == "local-mine" and mapped[0]["answer"] == "2"


def test_missing_column_names_column_and_found(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"question": "x"}) + "\n")
    with pytest.raises(datasets.DatasetError) as info:
        datasets.load("gsm8k", data_file=path)
    assert "'answer'" in str(info.value) and "columns found: ['question']" in str(info.value)


def test_hub_name_offline_fails_fast_with_hint(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.monotonic()
    with pytest.raises(datasets.DatasetError, match="--data-file"):
        datasets.load("gsm8k")
    assert time.monotonic() - start < 5


def test_hub_unreachable_fails_fast(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "https://10.255.255.1")  # blackhole address
    start = time.monotonic()
    with pytest.raises(datasets.DatasetError, match="cannot be reached"):
        datasets.load("deepmath")
    assert time.monotonic() - start < 5


def test_arithmetic_large_sizes_finish_and_stay_unique():
    big = datasets.arithmetic_problems(3000)
    assert big.num_rows == 3000
    assert len(set(big.column("problem").to_pylist())) == 3000
    # The small tiers ran out of distinct problems (8 for 'add one'); the others filled in.
    tiers = big.column("source").to_pylist()
    assert tiers.count("add one") <= 8 and tiers.count("3x2-digit mul") > 333


# --- dataset names of local files -----------------------------------------------------------------


def test_two_shared_files_named_test_are_two_datasets(shared):
    """MATH-500's and AIME 2024's ``test.jsonl`` were both ``local-test``: their problems shared a
    dataset. A generic stem now takes its folder."""
    math500 = datasets.load(data_file=shared / "math500/test.jsonl").problems
    aime24 = datasets.load(data_file=shared / "aime24/test.jsonl").problems
    assert set(math500.column("dataset").to_pylist()) == {"local-math500-test"}
    assert set(aime24.column("dataset").to_pylist()) == {"local-aime24-test"}
    assert not set(math500.column("prompt_id").to_pylist()) & set(aime24.column("prompt_id").to_pylist())


@pytest.mark.parametrize("name", ["math500/test.jsonl", "aime24/test.jsonl", "deepscaler/verl_train_sub.parquet"])
def test_a_file_keeps_its_name_and_ids_on_every_load(shared, name, tmp_path, monkeypatch):
    first = datasets.load(data_file=shared / name).problems
    again = datasets.load(data_file=shared / name).problems
    assert first.column("dataset").equals(again.column("dataset"))
    assert first.column("prompt_id").equals(again.column("prompt_id"))
    # from another working directory, by a relative path: the same name
    monkeypatch.chdir(shared / name.split("/")[0])
    relative = datasets.load(data_file=name.split("/")[1]).problems
    assert relative.column("dataset").equals(first.column("dataset"))
    assert relative.column("prompt_id").equals(first.column("prompt_id"))


def test_local_names_generic_stems_take_their_folder(tmp_path):
    name = datasets.local_name
    # a stem that names its content keeps today's name (and so its prompt ids and run ids)
    assert name("/data/x/mine.jsonl") == "local-mine"
    assert name("/data/x/gsm8k_hard.parquet") == "local-gsm8k_hard"
    assert name("/data/x/my data!.csv", "verl-") == "verl-my-data"
    # generic stems: the folder too, and the folders above while those are generic as well
    assert name("/data/math500/test.jsonl") == "local-math500-test"
    assert name("/data/aime24/test.jsonl") == "local-aime24-test"
    assert name("/data/math500/verl_test.parquet", "verl-") == "verl-math500-verl_test"
    assert name("/x/deepscaler/verl_train_sub.parquet", "verl-") == "verl-deepscaler-verl_train_sub"
    assert name("/x/gsm8k/data/train-00000-of-00001.parquet") == "local-gsm8k-data-train-00000-of-00001"
    assert name("/x/bench/data/test/validation.jsonl") == "local-bench-data-test-validation"
    assert name("/x/bench/data/test/dev/val.jsonl") == "local-data-test-dev-val"  # at most 3 folders
    assert name("/test.jsonl") == "local-test"  # nothing above
    assert name("/x/folder/.jsonl") == "local-folder-data"
    assert datasets.is_generic_stem("Validation_Set") is False
    assert datasets.is_generic_stem("verl_train_sub") and datasets.is_generic_stem("Test")


def test_a_text_difficulty_loads_as_a_number(tmp_path):
    """POLARIS stores its pass rate as text ("7/8"); a level may read "Level 5": both load as numbers
    (it was a bare ArrowInvalid)."""
    import json

    from pipeline import datasets

    path = tmp_path / "polaris.jsonl"
    rows = [
        {"problem": "1+1?", "answer": "2", "difficulty": "7/8"},
        {"problem": "2+2?", "answer": "4", "difficulty": "Level 5"},
        {"problem": "3+3?", "answer": "6", "difficulty": None},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    problems = datasets.load(data_file=path).problems
    assert problems.column("difficulty").to_pylist() == [0.875, 5.0, None]
