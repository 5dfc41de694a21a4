"""CLI of the analysis stage through the real ``difficulty`` app (typer's CliRunner)."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from pipeline import allocate as alloc
from pipeline import estimators as est
from pipeline import schema, store
from pipeline.cli import app

runner = CliRunner()


def invoke(*args: str):
    result = runner.invoke(app, list(args))
    return result


def _csv(text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(text)))


def test_weights_calculator_csv():
    res = invoke(
        "weights",
        "--G",
        "8",
        "--p",
        "0.1,0.5",
        "--estimators",
        "grpo,dapo:mode=resample,T=2,softmax_grpo:tau=0.3",
        "--format",
        "csv",
    )
    assert res.exit_code == 0, res.output
    assert res.output.splitlines()[0].replace('"', "") == "estimator,G,p,weight,mass"
    rows = _csv(res.output)
    assert [r["estimator"] for r in rows] == ["grpo"] * 2 + ["dapo:mode=resample,T=2"] * 2 + [
        "softmax_grpo:tau=0.3"
    ] * 2
    for r in rows:
        e = est.get(r["estimator"])
        p = float(r["p"])
        assert float(r["weight"]) == pytest.approx(float(e.weight(p, 8)))
        assert float(r["mass"]) == pytest.approx(float(e.weight(p, 8)) * p * (1 - p))
    bad = invoke("weights", "--estimators", "grpo,ppo")
    assert bad.exit_code == 1 and "known: grpo" in bad.output


def test_groupsize_and_tries_calculators():
    res = invoke("groupsize", "--p", "0.5,0.1", "--fidelity", "0.9,0.99", "--format", "csv")
    assert res.exit_code == 0, res.output
    assert res.output.splitlines()[0].replace('"', "") == "p,fidelity,G"
    for r in _csv(res.output):
        assert int(r["G"]) == alloc.group_size_for_fidelity(float(r["p"]), float(r["fidelity"]))
    res = invoke("tries", "--p", "0.5,0.3,0.2,0.1,0.05", "--delta", "0.05", "--format", "json")
    assert res.exit_code == 0, res.output
    assert [r["n"] for r in json.loads(res.output)] == [6, 9, 14, 29, 59]
    res = invoke("tries", "--p", "0.5,0.3", "--delta", "0.05", "--format", "csv")
    assert res.output.splitlines()[0].replace('"', "") == "p,delta,n"
    table = invoke("tries", "--p", "0.5")
    assert table.exit_code == 0 and "6" in table.output
    assert invoke("tries", "--p", "0", "--delta", "0.05").exit_code == 1


def _problems(n_prompts: int = 40) -> pa.Table:
    rng = np.random.default_rng(0)
    p = rng.beta(0.4, 0.4, n_prompts)
    c = rng.binomial(64, p)
    rows = [
        {
            "dataset": "mini",
            "prompt_id": f"m{i:03d}",
            "problem": f"{i}+1",
            "answer": str(i + 1),
            "prior_n": 64,
            "prior_c": int(c[i]),
            "status": "ok",
        }
        for i in range(n_prompts)
    ]
    rows[0]["prior_n"] = rows[0]["prior_c"] = None  # one problem without a prior measurement
    return pa.Table.from_pylist(rows, schema=schema.PROBLEMS)


def test_analyze_and_allocate_on_dataset_priors(data_dir, tmp_path):
    store.write_table(data_dir, "problems", _problems(), {"dataset": "mini"})
    res = invoke("analyze", "--dataset", "mini", "--data-dir", str(data_dir))
    assert res.exit_code == 0, res.output
    assert "zero-signal rate by G" in " ".join(res.output.split()) and "observed" in res.output
    for name in ("prompt_stats", "weights", "summary"):
        t = store.read_table(data_dir, name, {"run_id": "prior-mini"})
        assert t.num_rows > 0
    assert store.read_table(data_dir, "prompt_stats", {"run_id": "prior-mini"}).num_rows == 40

    out = tmp_path / "alloc.jsonl"
    res = invoke(
        "allocate",
        "--dataset",
        "mini",
        "--budget",
        "2560",
        "--objective",
        "signal",
        "--posterior",
        "--output",
        str(out),
        "--data-dir",
        str(data_dir),
    )
    assert res.exit_code == 0, res.output
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(lines) == 40 and sum(r["n_rollouts"] for r in lines) == 2560
    assert set(lines[0]) == {"prompt_id", "n_rollouts"}
    table = store.read_table(data_dir, "allocation", {"run_id": "prior-mini"})
    assert table.num_rows == 40 and set(table.column("objective").to_pylist()) == {"signal"}
    v = np.array(table.column("expected_value"))
    u = np.array(table.column("uniform_value"))
    assert v.sum() >= u.sum()
    assert "uniform" in res.output

    pq_out = tmp_path / "alloc.parquet"
    res = invoke(
        "allocate",
        "--dataset",
        "mini",
        "--budget",
        "2560",
        "--objective",
        "knapsack",
        "--posterior",
        "--output",
        str(pq_out),
        "--data-dir",
        str(data_dir),
    )
    assert res.exit_code == 0, res.output
    export = pq.read_table(pq_out)
    assert export.column_names == ["prompt_id", "n_rollouts"]
    assert sum(export.column("n_rollouts").to_pylist()) == 2560

    # point estimates refuse the prompt without samples; an impossible budget names the minimum
    res = invoke("allocate", "--dataset", "mini", "--budget", "2560", "--data-dir", str(data_dir))
    assert res.exit_code == 1 and "no samples" in res.output
    res = invoke("allocate", "--dataset", "mini", "--budget", "50", "--posterior", "--data-dir", str(data_dir))
    assert res.exit_code == 1 and "at least 80" in res.output


def test_analyze_on_a_run(data_dir):
    rows = []
    rng = np.random.default_rng(2)
    for i in range(10):
        for j in range(8):
            ok = bool(rng.random() < 0.5)
            rows.append(
                {
                    "run_id": "run-a",
                    "prompt_id": f"p{i}",
                    "sample_idx": j,
                    "extracted_answer": "1" if ok else str(j % 3 + 2),
                    "correct": ok,
                    "grade_status": "correct" if ok else "incorrect",
                }
            )
    store.write_shard(data_dir, "run-a", 0, pa.Table.from_pylist(rows, schema=schema.SAMPLES))
    res = invoke("analyze", "--run", "run-a", "--G", "4,8", "--estimators", "grpo,reco", "--data-dir", str(data_dir))
    assert res.exit_code == 0, res.output
    ps = store.read_table(data_dir, "prompt_stats", {"run_id": "run-a"})
    assert ps.num_rows == 10
    assert all(x is not None for x in ps.column("n_distinct_answers").to_pylist())
    w = store.read_table(data_dir, "weights", {"run_id": "run-a"})
    assert w.num_rows == 10 * 2 * 2
    res = invoke("analyze", "--data-dir", str(data_dir))
    assert res.exit_code == 1 and "--run" in res.output
    res = invoke("analyze", "--run", "nope", "--data-dir", str(data_dir))
    assert res.exit_code == 1 and "no samples" in res.output
