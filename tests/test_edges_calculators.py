"""Edge cases of the planning calculators and of ``allocate`` through the CLI (issue 16)."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pyarrow as pa
import pytest
from typer.testing import CliRunner

from pipeline import allocate as alloc
from pipeline import analyze, schema
from pipeline.cli import app
from pipeline.store import Store

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args))


def _csv(text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(text)))


def test_groupsize_at_high_fidelity():
    res = invoke("groupsize", "--p", "0.5", "--fidelity", "0.999999", "--format", "csv")
    assert res.exit_code == 0, res.output
    assert [int(r["G"]) for r in _csv(res.output)] == [500_001]


def test_tries_near_zero_and_one():
    res = invoke("tries", "--p", "1e-8,1e-10,1e-17,0.99999999", "--delta", "0.05", "--format", "json")
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)
    assert rows[0]["n"] == 299_573_226
    assert [r["n"] for r in rows] == [int(x) for x in alloc.min_tries([1e-8, 1e-10, 1e-17, 0.99999999], 0.05)]
    assert rows[3]["n"] == rows[0]["n"] or abs(rows[3]["n"] - rows[0]["n"]) < 10  # 1 - 1e-8 rounds in binary


@pytest.mark.parametrize(
    "args,flag,value",
    [
        (["weights", "--p", "0.5,nan"], "--p", "nan"),
        (["weights", "--p", "inf"], "--p", "inf"),
        (["groupsize", "--p", "nan"], "--p", "nan"),
        (["groupsize", "--p", "0.5", "--fidelity", "nan"], "--fidelity", "nan"),
        (["tries", "--p", "nan"], "--p", "nan"),
        (["tries", "--p", "0"], "--p", "0.0"),
        (["tries", "--p", "0.5", "--delta", "nan"], "--delta", "nan"),
    ],
)
def test_calculators_refuse_bad_values_by_name(args, flag, value):
    res = invoke(*args)
    assert res.exit_code == 1, res.output
    assert res.output.startswith("error:") and flag in res.output and value in res.output, res.output
    assert "np." not in res.output and "Traceback" not in res.output


def _problems(n_prompts: int = 30) -> pa.Table:
    rng = np.random.default_rng(1)
    c = rng.binomial(32, rng.beta(0.5, 0.5, n_prompts))
    rows = [
        {
            "dataset": "mini",
            "prompt_id": f"m{i:03d}",
            "problem": f"{i}+1",
            "answer": str(i + 1),
            "prior_n": 32,
            "prior_c": int(c[i]),
            "status": "ok",
        }
        for i in reversed(range(n_prompts))  # stored out of prompt-id order
    ]
    rows[7]["prior_n"] = rows[7]["prior_c"] = None  # m022: no prior measurement, n = c = 0
    return pa.Table.from_pylist(rows, schema=schema.PROBLEMS)


def test_cli_and_profile_allocations_agree_on_prompts_without_samples(data_dir):
    """The profile run (``default_allocation``) and ``difficulty allocate`` follow one rule for a
    prompt with n = 0: included under the posterior, refused by name under point estimates."""
    store = Store(data_dir)
    problems = _problems()
    store.write_table("problems", problems, {"dataset": "mini"})
    counts = analyze.counts_from_priors(problems)
    profile_table, policy = alloc.default_allocation("prior-mini", counts)
    res = invoke("allocate", "--dataset", "mini")
    assert res.exit_code == 0, res.output
    cli_table = store.read_table("allocation", {"run_id": "prior-mini"}).sort_by("prompt_id")
    assert cli_table.num_rows == profile_table.num_rows == 30
    assert cli_table.column("prompt_id").to_pylist() == profile_table.column("prompt_id").to_pylist()
    assert cli_table.column("n_rollouts").to_pylist() == profile_table.column("n_rollouts").to_pylist()
    assert sum(cli_table.column("n_rollouts").to_pylist()) == policy.budget

    point = alloc.AllocationConfig(budget=16 * 30, n_max=64)
    n, c = counts.column("n").to_numpy(), counts.column("c").to_numpy()
    with pytest.raises(alloc.ConfigError, match="m022"):
        alloc.allocate_prompts("prior-mini", counts.column("prompt_id"), n, c, point)
    res = invoke("allocate", "--dataset", "mini", "--point", "--budget", "480", "--n-max", "64")
    assert res.exit_code == 1 and "m022" in res.output and "--posterior" in res.output, res.output


def test_cli_refuses_an_estimator_the_objective_does_not_use(data_dir):
    Store(data_dir).write_table("problems", _problems(), {"dataset": "mini"})
    for objective in ("knapsack", "variance"):
        res = invoke("allocate", "--dataset", "mini", "--objective", objective, "--estimator", "rloo", "--posterior")
        assert res.exit_code == 1 and "--estimator" in res.output and objective in res.output, res.output
        assert invoke("allocate", "--dataset", "mini", "--objective", objective, "--posterior").exit_code == 0
    res = invoke("allocate", "--dataset", "mini", "--estimator", "rloo", "--posterior")
    assert res.exit_code == 0, res.output


def test_cli_dapo_resample_is_exact_and_says_so(data_dir):
    Store(data_dir).write_table("problems", _problems(8), {"dataset": "mini"})
    res = invoke(
        "allocate", "--dataset", "mini", "--posterior", "--estimator", "dapo:mode=resample,T=4",
        "--budget", "60", "--n-max", "12",
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "dp" in text and "expected" in text and "greedy" not in text
