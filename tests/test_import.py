import json

import pyarrow as pa
import pyarrow.parquet as pq
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.store import Store

runner = CliRunner()

GSM8K_ROWS = [
    {"question": "Tom has 3 apples and buys 4. How many?", "answer": "3+4=7\n#### 7", "completion": "3+4 = \\boxed{7}"},
    {"question": "Tom has 3 apples and buys 4. How many?", "answer": "3+4=7\n#### 7", "completion": "The answer is 8"},
    {"question": "What is half of 1,000?", "answer": "1000/2\n#### 500", "completion": "Half is 500."},
    {"question": "What is half of 1,000?", "answer": "1000/2\n#### 500", "completion": ""},
    {"question": "What is half of 1,000?", "answer": "1000/2\n#### 500", "completion": "#### 500"},
]


def test_grade_gsm8k_jsonl_becomes_a_run(data_dir, tmp_path):
    path = tmp_path / "rollouts.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in GSM8K_ROWS))
    out = runner.invoke(app, ["grade", "--input", str(path), "--no-report"])
    assert out.exit_code == 0, out.output
    assert "graded 5 rollouts of 2 prompts" in out.output
    runs = Store(data_dir).list_runs().to_pylist()
    assert len(runs) == 1 and runs[0]["backend"] == "import" and runs[0]["status"] == "done"
    run_id = runs[0]["run_id"]
    got = (
        Store(data_dir)
        .query(
            "select p.problem, s.sample_idx, s.grade_status from samples s join problems p using (prompt_id) "
            "where s.run_id = $r order by p.problem, s.sample_idx",
            {"r": run_id},
        )
        .to_pylist()
    )
    assert [(g["sample_idx"], g["grade_status"]) for g in got] == [
        (0, "correct"),
        (1, "incorrect"),
        (0, "correct"),
        (1, "unparsed"),
        (2, "correct"),
    ]
    stats = Store(data_dir).query("select n, c from prompt_stats where run_id = $r order by n", {"r": run_id})
    assert stats.to_pylist() == [{"n": 2, "c": 1}, {"n": 3, "c": 2}]
    # Rerunning the same import is idempotent: same run, same rows.
    assert runner.invoke(app, ["grade", "--input", str(path), "--no-report"]).exit_code == 0
    assert Store(data_dir).query("select count(*) n from samples").to_pylist() == [{"n": 5}]


def test_grade_parquet_with_ids_and_mapped_columns(data_dir, tmp_path):
    path = tmp_path / "log.parquet"
    pq.write_table(
        pa.table(
            {
                "uid": ["a", "a", "b"],
                "gt": ["\\frac{1}{2}", "\\frac{1}{2}", "3"],
                "response": ["\\boxed{0.5}", "\\boxed{1/3}", "3"],
            }
        ),
        path,
    )
    out = runner.invoke(
        app,
        [
            "grade",
            "--input",
            str(path),
            "--problem-col",
            "",
            "--prompt-id-col",
            "uid",
            "--answer-col",
            "gt",
            "--completion-col",
            "response",
            "--no-report",
        ],
    )
    assert out.exit_code == 0, out.output
    got = Store(data_dir).query("select prompt_id, sample_idx, correct from samples order by 1, 2").to_pylist()
    assert [(g["prompt_id"], g["sample_idx"], g["correct"]) for g in got] == [
        ("a", 0, True),
        ("a", 1, False),
        ("b", 0, True),
    ]


def test_grade_missing_column_names_it(data_dir, tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"problem": "x", "answer": "1"}) + "\n")
    out = runner.invoke(app, ["grade", "--input", str(path)])
    assert out.exit_code == 1
    assert "'completion'" in out.output and "columns found" in out.output
    assert Store(data_dir).list_runs().num_rows == 0


def test_problem_status_precedence_is_the_loaders(tmp_path):
    """A row with neither problem nor answer is `empty_problem` whether loaded or imported."""
    from pipeline import datasets, schema
    from pipeline.ingest import ImportConfig, import_rollouts

    rows = [
        {"problem": "", "answer": "", "completion": "7"},
        {"problem": "1 + 1", "answer": "", "completion": "2"},
        {"problem": "2 + 2", "answer": "4", "completion": "4"},
    ]
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    loaded = datasets.load(None, data_file=str(path)).problems.column("status").to_pylist()
    store = Store.open(tmp_path / "data")
    import_rollouts(ImportConfig(input=str(path), report=False, grade_workers=1), store)
    imported = store.query("select problem, status from problems order by problem").to_pylist()
    assert sorted(loaded) == sorted(r["status"] for r in imported)
    assert {r["problem"]: r["status"] for r in imported} == {
        "": schema.PROBLEM_EMPTY_PROBLEM,
        "1 + 1": schema.PROBLEM_EMPTY_ANSWER,
        "2 + 2": schema.PROBLEM_OK,
    }
