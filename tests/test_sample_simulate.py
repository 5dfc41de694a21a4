"""The model-free `simulate` backend, checked with the real grader (no mocks)."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from pipeline import datasets, grade
from pipeline.errors import ConfigError, SamplingError
from pipeline.sample import BACKENDS, SAMPLE_ROWS, Sampler, SamplingParams, make_sampler
from pipeline.sample.simulate import default_pass_rate

SYMBOLIC = [r"\frac{1}{2}", r"\sqrt{2}", "x^2+1", "(1,2)", r"[0,1)", r"\infty", r"-\infty", r"\{1,2\}", "x=2"]
SYMBOLIC += [r"2\sqrt{3}", r"\frac{\pi}{4}", r"\text{(C)}", "A", r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}", "$x+1$"]
GSM8K = ["18", "1,234", "$5", "50%", "0.5", "-7", "3/4", "1000000", "2.25", r"\$1.50", "0"]


@pytest.fixture(scope="module")
def pool() -> Iterator[grade.GradingPool]:
    with grade.GradingPool(grade.GradeConfig(workers=2)) as p:
        yield p


def _problems(golds: list[str], prefix: str = "q") -> pa.Table:
    return pa.Table.from_pylist(
        [{"prompt_id": f"{prefix}{i}", "problem": f"Problem {i}: find it.", "answer": g} for i, g in enumerate(golds)]
    )


def _graded(samples: pa.Table, problems: pa.Table, pool: grade.GradingPool) -> pa.Table:
    gold = dict(zip(problems.column("prompt_id").to_pylist(), problems.column("answer").to_pylist(), strict=True))
    items = samples.append_column("gold", pa.array([gold[p] for p in samples.column("prompt_id").to_pylist()]))
    return grade.grade_table(items, pool=pool)


def _rates_file(path: Path, rows: list[dict]) -> Path:
    if path.suffix == ".parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    elif path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        cols = list(rows[0])
        path.write_text(",".join(cols) + "\n" + "".join(",".join(str(r[c]) for c in cols) + "\n" for r in rows))
    return path


def _arithmetic(n: int = 45) -> pa.Table:
    return datasets.load("arithmetic", limit=n, seed=0).problems


def test_registered_and_shaped() -> None:
    assert "simulate" in BACKENDS
    with make_sampler("simulate") as s:
        assert isinstance(s, Sampler)
        assert s.backend == "simulate" and s.model_name == "simulate"
        out = s.sample(_arithmetic(9), SamplingParams(n=3, seed=0))
    assert out.schema == SAMPLE_ROWS
    assert out.num_rows == 27
    assert out.column("sample_idx").to_pylist() == [0, 1, 2] * 9
    assert set(out.column("finish_reason").to_pylist()) == {"stop"}
    for text, n_tokens in zip(out.column("completion").to_pylist(), out.column("n_tokens").to_pylist(), strict=True):
        assert n_tokens == len(text.split()) > 0
        assert text.startswith("The answer is \\boxed{")


def test_progress_counts_every_sample() -> None:
    calls: list[int] = []
    make_sampler("simulate").sample(_arithmetic(10), SamplingParams(n=4), calls.append)
    assert sum(calls) == 40 and all(c > 0 for c in calls)


def test_deterministic_from_the_seed() -> None:
    problems = _arithmetic(45)
    s = make_sampler("simulate")
    a = s.sample(problems, SamplingParams(n=8, seed=3))
    assert a.equals(s.sample(problems, SamplingParams(n=8, seed=3)))
    assert a.equals(make_sampler("simulate").sample(problems, SamplingParams(n=8, seed=3)))
    b = s.sample(problems, SamplingParams(n=8, seed=4))
    assert a.column("completion").to_pylist() != b.column("completion").to_pylist()
    gold = dict(zip(problems.column("prompt_id").to_pylist(), problems.column("answer").to_pylist(), strict=True))

    def right(t: pa.Table) -> list[bool]:
        ids, texts = t.column("prompt_id").to_pylist(), t.column("completion").to_pylist()
        return [c == f"The answer is \\boxed{{{gold[p]}}}." for p, c in zip(ids, texts, strict=True)]

    assert right(a) != right(b)  # different outcomes, not only different wrong answers


def test_shard_and_order_independent() -> None:
    problems = _arithmetic(45)
    s = make_sampler("simulate")
    params = SamplingParams(n=6, seed=11)
    whole = s.sample(problems, params)
    parts = pa.concat_tables([s.sample(problems.slice(0, 17), params), s.sample(problems.slice(17), params)])
    assert parts.equals(whole)
    # Reversed order and plain dicts: the same samples per (prompt_id, sample_idx).
    reverse = s.sample(list(reversed(problems.to_pylist())), params)

    def keyed(t: pa.Table) -> dict:
        return {(r["prompt_id"], r["sample_idx"]): r for r in t.to_pylist()}

    assert keyed(reverse) == keyed(whole)


def test_pass_rate_matches_monte_carlo(tmp_path: Path, pool: grade.GradingPool) -> None:
    p, n_prompts, n = 0.3, 10, 400
    problems = _problems([str(17 * i + 3) for i in range(n_prompts)])
    path = _rates_file(tmp_path / "rates.parquet", [{"prompt_id": f"q{i}", "pass_rate": p} for i in range(n_prompts)])
    s = make_sampler("simulate", pass_rates=str(path))
    assert s.true_pass_rates(problems) == {f"q{i}": p for i in range(n_prompts)}
    graded = _graded(s.sample(problems, SamplingParams(n=n, seed=0)), problems, pool)
    assert set(graded.column("grade_status").to_pylist()) == {"correct", "incorrect"}
    total = n_prompts * n
    rate = sum(graded.column("correct").to_pylist()) / total
    se = math.sqrt(p * (1 - p) / total)
    assert abs(rate - p) < 4 * se, (rate, p, se)


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".jsonl"])
def test_zero_and_one_after_real_grading(tmp_path: Path, pool: grade.GradingPool, suffix: str) -> None:
    rows = _arithmetic(45).select(["prompt_id", "problem", "answer", "difficulty"]).to_pylist()
    rows += _problems(GSM8K, "gsm").to_pylist() + _problems(SYMBOLIC, "sym").to_pylist()
    problems = pa.Table.from_pylist(rows)
    ids = problems.column("prompt_id").to_pylist()
    for p, status in ((0.0, "incorrect"), (1.0, "correct")):
        path = _rates_file(tmp_path / f"rates-{p}{suffix}", [{"prompt_id": i, "pass_rate": p} for i in ids])
        samples = make_sampler("simulate", str(path)).sample(problems, SamplingParams(n=4, seed=1))
        graded = _graded(samples, problems, pool)
        bad = [r for r in graded.to_pylist() if r["grade_status"] != status]
        assert not bad, bad[:5]
        if p == 0.0:  # wrong answers vary with the sample, like a model's
            first = graded.filter(pc.equal(graded.column("prompt_id"), "gsm0"))
            assert len(set(first.column("extracted_answer").to_pylist())) > 1


def test_keyed_by_problem_text(tmp_path: Path, pool: grade.GradingPool) -> None:
    problems = _problems(["4", r"\sqrt{2}"])
    texts = problems.column("problem").to_pylist()
    path = _rates_file(
        tmp_path / "by-text.jsonl", [{"problem": texts[0], "pass_rate": 1}, {"problem": texts[1], "pass_rate": 0}]
    )
    s = make_sampler("simulate", pass_rates=path)
    graded = _graded(s.sample(problems, SamplingParams(n=5)), problems, pool)
    assert graded.column("correct").to_pylist() == [True] * 5 + [False] * 5
    with pytest.raises(SamplingError, match=r"prompt q9 .*Problem 9: find it"):
        s.sample(_problems(["1"] * 10).slice(9), SamplingParams(n=1))


def test_csv_keeps_ids_as_text(tmp_path: Path) -> None:
    path = tmp_path / "rates.csv"
    path.write_text("prompt_id,pass_rate\n0123,1\n4560,0.0\n")
    problems = pa.Table.from_pylist(
        [{"prompt_id": "0123", "problem": "a", "answer": "1"}, {"prompt_id": "4560", "problem": "b", "answer": "2"}]
    )
    assert make_sampler("simulate", path).true_pass_rates(problems) == {"0123": 1.0, "4560": 0.0}


def test_missing_prompt_names_it(tmp_path: Path) -> None:
    path = _rates_file(tmp_path / "rates.parquet", [{"prompt_id": "q0", "pass_rate": 0.5}])
    s = make_sampler("simulate", str(path))
    calls: list[int] = []
    with pytest.raises(SamplingError, match=r"prompt q1 is not in the pass-rate file"):
        s.sample(_problems(["1", "2"]), SamplingParams(n=2), calls.append)
    assert calls == []  # checked before any sample


@pytest.mark.parametrize(
    ("rows", "match"),
    [
        (
            [{"prompt_id": "q0", "pass_rate": 0.5}, {"prompt_id": "q1", "pass_rate": 1.5}],
            r"row 1 \(prompt_id='q1'\): pass_rate=1.5",
        ),
        ([{"prompt_id": "q0", "pass_rate": -0.1}], r"row 0 \(prompt_id='q0'\): pass_rate=-0.1"),
        (
            [{"prompt_id": "q0", "pass_rate": 0.2}, {"prompt_id": "q1", "pass_rate": float("nan")}],
            r"row 1 .*pass_rate=nan",
        ),
        ([{"prompt_id": "q0", "pass_rate": None}], r"row 0 .*pass_rate=None"),
        (
            [{"prompt_id": "q0", "pass_rate": 0.2}, {"prompt_id": "q0", "pass_rate": 0.2}],
            r"row 1: prompt_id='q0' repeats row 0",
        ),
        ([{"prompt_id": "q0", "rate": 0.2}], r"lacks column\(s\) pass_rate"),
        ([{"id": "q0", "pass_rate": 0.2}], r"lacks column\(s\) prompt_id or problem"),
    ],
)
def test_bad_files_name_row_and_value(tmp_path: Path, rows: list[dict], match: str) -> None:
    path = _rates_file(tmp_path / "bad.parquet", rows)
    with pytest.raises(SamplingError, match=match):
        make_sampler("simulate", pass_rates=str(path))


def test_csv_nan_and_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "rates.csv"
    path.write_text("prompt_id,pass_rate\nq0,0.1\nq1,nan\n")
    with pytest.raises(SamplingError, match=r"row 1 \(prompt_id='q1'\): pass_rate=nan"):
        make_sampler("simulate", path)
    path.write_text("prompt_id,pass_rate\nq0,0.1\nq1,NA\n")
    with pytest.raises(SamplingError, match=r"row 1 \(prompt_id='q1'\): pass_rate='NA'"):
        make_sampler("simulate", path)
    with pytest.raises(FileNotFoundError, match="nope.parquet"):
        make_sampler("simulate", pass_rates=str(tmp_path / "nope.parquet"))


def test_model_name_hashes_the_file(tmp_path: Path) -> None:
    a = _rates_file(tmp_path / "a.parquet", [{"prompt_id": "q0", "pass_rate": 0.25}])
    b = _rates_file(tmp_path / "b.parquet", [{"prompt_id": "q0", "pass_rate": 0.75}])
    same = tmp_path / "other"
    same.mkdir()
    a2 = _rates_file(same / "a.parquet", [{"prompt_id": "q0", "pass_rate": 0.25}])
    name_a = make_sampler("simulate", str(a)).model_name
    assert name_a.startswith("simulate:a-") and len(name_a) > len("simulate:a-")
    assert make_sampler("simulate", pass_rates=str(b)).model_name.startswith("simulate:b-")
    assert name_a != make_sampler("simulate", str(b)).model_name
    assert name_a == make_sampler("simulate", str(a2)).model_name  # contents, not location
    b.write_bytes(a.read_bytes())
    assert make_sampler("simulate", str(b)).model_name.split("-")[-1] == name_a.split("-")[-1]
    # model and pass_rates together: fine when they name the same file, an error otherwise.
    assert make_sampler("simulate", str(a), pass_rates=a).model_name == name_a
    with pytest.raises(ConfigError, match="different pass-rate files"):
        make_sampler("simulate", str(a), pass_rates=str(a2))
    with pytest.raises(ConfigError, match="pass_rates"):
        make_sampler("simulate", None, temperature_bias=1)


def test_default_rule_is_u_shaped_and_follows_difficulty() -> None:
    rates = [default_pass_rate(f"p{i}") for i in range(4000)]
    assert all(0.0 < r < 1.0 for r in rates)
    assert abs(sum(rates) / len(rates) - 0.5) < 0.03
    edges = sum(r < 0.1 or r > 0.9 for r in rates) / len(rates)
    middle = sum(0.45 < r < 0.55 for r in rates) / len(rates)
    assert edges > 0.35 and middle < 0.08  # arcsine: 0.41 in the outer tenths, 0.064 in the middle
    means = [sum(default_pass_rate(f"p{i}", d) for i in range(2000)) / 2000 for d in (1.0, 3.0, 5.0, 9.0)]
    assert means == sorted(means, reverse=True)
    assert default_pass_rate("x", None) == default_pass_rate("x", float("nan")) == default_pass_rate("x", 3.0)
    # A prompt's rate depends on its own row only.
    problems = _arithmetic(45)
    s = make_sampler("simulate")
    assert s.true_pass_rates(problems.slice(40)) == {
        k: v for k, v in s.true_pass_rates(problems).items() if k in problems.slice(40).column("prompt_id").to_pylist()
    }


def test_max_tokens_cuts_like_a_model(pool: grade.GradingPool) -> None:
    problems = _problems(["12"])
    out = make_sampler("simulate").sample(problems, SamplingParams(n=3, max_tokens=2))
    assert set(out.column("finish_reason").to_pylist()) == {"length"}
    assert set(out.column("n_tokens").to_pylist()) == {2}
    assert set(_graded(out, problems, pool).column("grade_status").to_pylist()) == {"unparsed"}


def test_needs_the_gold_answer() -> None:
    with pytest.raises(SamplingError, match="prompt a: .*gold answer"):
        make_sampler("simulate").sample([{"prompt_id": "a", "problem": "1 + 1"}], SamplingParams(n=1))


def test_fast() -> None:
    problems = _arithmetic(200)
    s = make_sampler("simulate")
    started = time.perf_counter()
    out = s.sample(problems, SamplingParams(n=8))
    elapsed = time.perf_counter() - started
    assert out.num_rows == 1600
    assert elapsed < 1.0, elapsed


def test_fail_once_fails_the_first_attempt_only():
    from pipeline import datasets
    from pipeline.sample import SamplingParams, make_sampler

    problems = datasets.load("arithmetic", limit=3).problems
    bad = problems.column("prompt_id")[1].as_py()
    sampler = make_sampler("simulate", fail_once=[bad])
    params = SamplingParams(n=2, temperature=1.0, top_p=1.0, max_tokens=16, seed=0)
    with pytest.raises(SamplingError, match=f"simulated failure on prompt {bad}"):
        sampler.sample(problems, params)
    again = sampler.sample(problems, params)
    assert again.num_rows == 6
    assert again.equals(make_sampler("simulate").sample(problems, params))


def test_wrong_answers_read_the_gold_as_the_grader_does():
    """A plain-number gold is read by the grader's one reader (grade.extract.parse_number): a
    percentage is its hundredth, a signed fraction a number, and a gold the fast path leaves to
    math-verify (``023``) gets ``<gold>+k``."""
    from fractions import Fraction

    from pipeline.grade.extract import parse_number
    from pipeline.sample.simulate import wrong_answer

    for gold in ("42", "-7", "1,000", "3/4", "\\frac{-15647}{390625}", "10\\%", "$0.5$"):
        golden = parse_number(gold.strip("$"))
        offsets = {parse_number(wrong_answer(gold, seed)) - golden for seed in range(18)}
        assert offsets == {Fraction(k) for k in range(-9, 10) if k}, gold
    assert wrong_answer("10\\%", 9) == "1.1" and wrong_answer("023", 2) == "023+3"
