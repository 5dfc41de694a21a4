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
from pipeline import schema
from pipeline.cli import app
from pipeline.store import Store

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
    store = Store(data_dir)
    store.write_table("problems", _problems(), {"dataset": "mini"})
    res = invoke("analyze", "--dataset", "mini", "--data-dir", str(data_dir))
    assert res.exit_code == 0, res.output
    assert "zero-signal (silent group) rate by group size G" in " ".join(res.output.split())
    assert "all_wrong" in res.output and "verdict for training at G = 8" in res.output
    for name in ("prompt_stats", "weights", "summary"):
        t = store.read_table(name, {"run_id": "prior-mini"})
        assert t.num_rows > 0
    assert store.read_table("prompt_stats", {"run_id": "prior-mini"}).num_rows == 40

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
    table = store.read_table("allocation", {"run_id": "prior-mini"})
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
    store = Store(data_dir)
    store.write_shard("run-a", 0, pa.Table.from_pylist(rows, schema=schema.SAMPLES))
    res = invoke(
        "analyze", "--run", "run-a", "--G", "4,8", "--estimators", "grpo,reco_binary", "--data-dir", str(data_dir)
    )
    assert res.exit_code == 0, res.output
    ps = store.read_table("prompt_stats", {"run_id": "run-a"})
    assert ps.num_rows == 10
    assert all(x is not None for x in ps.column("n_distinct_answers").to_pylist())
    w = store.read_table("weights", {"run_id": "run-a"})
    assert w.num_rows == 10 * 2 * 2
    # the answer-aware ReCo weight at G = 4: three wrong answers weigh less than one pooled wrong one
    res = invoke("analyze", "--run", "run-a", "--G", "4,8", "--reco-answers", "4", "--data-dir", str(data_dir))
    assert res.exit_code == 0, res.output
    w = store.read_table("weights", {"run_id": "run-a"}).to_pylist()
    aware = {r["prompt_id"]: r["weight"] for r in w if r["estimator"] == "reco_answers" and r["G"] == 4}
    proxy = {r["prompt_id"]: r["weight"] for r in w if r["estimator"] == "reco_binary" and r["G"] == 4}
    assert len(aware) == 10 and all(aware[p] <= proxy[p] + 1e-12 for p in aware)
    assert any(aware[p] < proxy[p] - 1e-3 for p in aware)
    res = invoke("analyze", "--run", "run-a", "--G", "4", "--reco-answers", "8", "--data-dir", str(data_dir))
    assert res.exit_code == 1 and "must be among the group sizes" in res.output
    res = invoke("analyze", "--data-dir", str(data_dir))
    assert res.exit_code == 1 and "--run" in res.output
    res = invoke("analyze", "--run", "nope", "--data-dir", str(data_dir))
    assert res.exit_code == 1 and "no samples" in res.output


def _allocation_files(data_dir, run_id: str) -> list[str]:
    return sorted(p.stem for p in Store(data_dir).files("allocation", {"run_id": run_id}))


def test_allocate_without_budget_is_the_default_policy_and_keys_never_merge(data_dir):
    store = Store(data_dir)
    store.write_table("problems", _problems(), {"dataset": "mini"})
    policy = alloc.default_config(40)
    res = invoke("allocate", "--dataset", "mini")
    assert res.exit_code == 0, res.output
    assert f"allocated {policy.budget} rollouts over 40 prompts" in res.output and "default policy" in res.output
    assert _allocation_files(data_dir, "prior-mini") == [alloc.allocation_key(policy)]
    table = store.read_table("allocation", {"run_id": "prior-mini"})
    assert table.num_rows == 40 and sum(table.column("n_rollouts").to_pylist()) == policy.budget
    assert set(table.column("posterior").to_pylist()) == {True}
    assert max(table.column("n_rollouts").to_pylist()) <= policy.n_max

    # The same allocation again replaces itself; another objective or budget is stored beside it.
    assert invoke("allocate", "--dataset", "mini").exit_code == 0
    res = invoke("allocate", "--dataset", "mini", "--objective", "knapsack", "--posterior")
    assert res.exit_code == 0, res.output
    assert f"allocated {policy.budget} rollouts" in res.output and "default policy" not in res.output
    res = invoke("allocate", "--dataset", "mini", "--budget", "1000", "--posterior")
    assert res.exit_code == 0, res.output
    files = _allocation_files(data_dir, "prior-mini")
    assert len(files) == 3 and alloc.allocation_key(policy) in files
    table = store.read_table("allocation", {"run_id": "prior-mini"})
    assert table.num_rows == 3 * 40
    by_key = table.group_by(["objective", "budget"]).aggregate([("n_rollouts", "sum")]).to_pylist()
    assert sorted((r["objective"], r["budget"], r["n_rollouts_sum"]) for r in by_key) == [
        ("knapsack", policy.budget, policy.budget),
        ("signal", policy.budget, policy.budget),
        ("signal", 1000, 1000),
    ]

    bad = invoke("allocate", "--dataset", "mini", "--output", "alloc.csv")
    assert bad.exit_code == 1 and ".parquet or .jsonl" in bad.output
    bad = invoke("allocate", "--dataset", "mini", "--run", "x")
    assert bad.exit_code == 1 and "exactly one of --run" in bad.output
    bad = invoke("allocate", "--dataset", "nope")
    assert bad.exit_code == 1 and "no problems stored for dataset 'nope'" in bad.output
    # a dataset's prior counts have no answers, so no answer lengths: no price in tokens
    bad = invoke("allocate", "--dataset", "mini", "--price-unit", "tokens")
    assert bad.exit_code == 1 and "--price-unit tokens needs a run's answer lengths" in bad.output
    assert "--price-unit rollouts" in bad.output and len(_allocation_files(data_dir, "prior-mini")) == 3


def test_allocate_on_a_simulated_run_matches_its_stored_default(tmp_path):
    data_dir = tmp_path / "data"
    res = invoke(
        "profile", "--backend", "simulate", "--no-prefect", "--limit", "20", "--n", "8", "--grade-workers", "1",
        "--no-report", "--data-dir", str(data_dir),
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    store = Store(data_dir)
    run_id = store.list_runs().column("run_id")[0].as_py()
    stored = store.read_table("allocation", {"run_id": run_id})
    files = _allocation_files(data_dir, run_id)
    res = invoke("allocate", "--run", run_id, "--data-dir", str(data_dir))
    assert res.exit_code == 0, res.output
    assert _allocation_files(data_dir, run_id) == files  # the profile's own default, replaced by itself
    again = store.read_table("allocation", {"run_id": run_id})
    assert again.num_rows == stored.num_rows == 20
    assert (
        sum(again.column("n_rollouts").to_pylist())
        == sum(stored.column("n_rollouts").to_pylist())
        == alloc.default_config(20).budget
    )
    # Both are optimal: the same value (ties between prompts may be handed out in another order).
    assert sum(again.column("expected_value").to_pylist()) == pytest.approx(
        sum(stored.column("expected_value").to_pylist())
    )


def test_analyze_replaces_the_earlier_analysis_and_prints_formats(data_dir):
    Store(data_dir).write_table("problems", _problems(), {"dataset": "mini"})
    assert invoke("analyze", "--dataset", "mini", "--G", "4,8").exit_code == 0
    res = invoke("analyze", "--dataset", "mini", "--G", "8,16", "--format", "json")
    assert res.exit_code == 0, res.output
    shown = json.loads(res.stdout)
    assert [r["G"] for r in shown["zero_signal"]] == [8, 16]
    assert {r["estimator"] for r in shown["gradient_share"]} >= {"grpo"}
    assert "analysed 40 prompts" in res.stderr
    store = Store(data_dir)
    for name in ("prompt_stats", "weights", "summary"):
        assert len(store.files(name, {"run_id": "prior-mini"})) == 1
    summary = store.read_table("summary", {"run_id": "prior-mini"})
    assert set(summary.column("G").drop_null().to_pylist()) <= {8, 16}
    res = invoke("analyze", "--dataset", "mini", "--format", "csv")
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith("# zero_signal\nG,silent,all_wrong,all_right,estimated,")
    bad = invoke("analyze", "--dataset", "mini", "--G", "4,x")
    assert bad.exit_code == 1 and "--G must be a comma-separated list" in bad.output
    bad = invoke("analyze", "--dataset", "mini", "--level", "2")
    assert bad.exit_code == 1 and "level" in bad.output


def test_calculator_errors_exit_1():
    for args in (
        ["weights", "--p", "1.5"],
        ["weights", "--G", "0"],
        ["weights", "--p", "a,b"],
        ["groupsize", "--p", "0.5", "--fidelity", "1.5"],
        ["tries", "--delta", "2"],
    ):
        res = invoke(*args)
        assert res.exit_code == 1 and res.output.startswith("error:"), (args, res.output)


def test_allocate_prints_and_stores_the_certified_gap(data_dir):
    """The Lagrangian relaxation's allocation says how far from the optimum it may be: the CLI line,
    and the stored ``gap`` column (docs/estimators.md §5)."""
    store = Store(data_dir)
    store.write_table("problems", _problems(), {"dataset": "mini"})
    spec = "dapo:mode=resample,T=4"
    args = ("allocate", "--dataset", "mini", "--budget", "1200", "--posterior", "--estimator", spec, "--n-max", "64")
    res = invoke(*args, "--method", "lagrangian")
    assert res.exit_code == 0, res.output
    assert "lagrangian" in res.output and "certified gap" in res.output
    table = store.read_table("allocation", {"run_id": "prior-mini"})
    gap = set(table.column("gap").to_pylist())
    assert len(gap) == 1 and 0 <= gap.pop() < 1e-2 * sum(table.column("expected_value").to_pylist())
    # the exact method, where it fits, reports no gap; its value is the relaxation's within the gap
    exact = invoke(*args, "--method", "dp")
    assert exact.exit_code == 0, exact.output
    assert "certified gap" not in exact.output
    stored = store.read_table("allocation", {"run_id": "prior-mini"})
    assert stored.column("method").to_pylist()[0] == "dp" and set(stored.column("gap").to_pylist()) == {0.0}
