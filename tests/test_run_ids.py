"""Run ids are a run's identity across versions: a rerun resumes only if its id is the same.

Pinned for the bundled default (``make profile``) and simulate profiles, fixed-n and adaptive,
as the code computed them before the run stages were reorganised; a change that moves one of
them is a change of every stored run's identity and must be deliberate.
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from pipeline import run
from pipeline.cli import app
from pipeline.sample import template_for
from pipeline.sample.gguf import BUNDLED_NAME

PINNED = [
    # The bundled default's engine became xllamacpp (llama.cpp prebuilt): the id hashes the backend's
    # name, so it moved from e5fde10c1124, the retired llamacpp backend's (see the test below).
    ({}, BUNDLED_NAME, "b6ac78fe8779"),
    ({"backend": "simulate", "n": 16, "limit": 200}, "simulate", "2e385155a9c1"),
    # The band target's stopping rule became the priced one (cost=0.001, docs/adaptive.md §4): its
    # spec names the price, so every run with the default target has a new id. cost=0, the rule of
    # stopping as soon as decided, keeps the spec, and so the id, that such a run always had:
    # 039a81cdb788 (double, auto), c7ccdbb77e19 (greedy, auto), cf26fff8d594 (greedy:jumps=1).
    # The priced band target's default round rule became plan (docs/adaptive.md §5): a new id for its
    # default runs (4b49d686ea9a, grid 358d49be33b5, fit 77dc77b83e50); those made before keep theirs
    # with --round-rule double (72bdd61288fd, 4707e0d4562d, 97954b70f4bc).
    # The plan's default round price became 0 (docs/adaptive.md §5): a new id for the priced band
    # target's default runs (20398d60c9ed, grid c1c14bdebe34, fit 3589172b2bb0); those made with the
    # price of 2 keep theirs with --round-rule plan:cost=2,rounds=8,hedge=0 (pinned below).
    # The plan became hedged (hedge=1.92, docs/adaptive.md §5): a new id for the priced band target's
    # default runs (a9c199468b09, grid 1414ff691e36, fit b248c0dac382); those made before keep theirs
    # with --round-rule plan:cost=0,rounds=8,hedge=0 (pinned below).
    ({"backend": "simulate", "adaptive": "band", "limit": 200}, "simulate", "a9c199468b09"),
    (
        {"backend": "simulate", "adaptive": "band", "round_rule": "plan:cost=0,rounds=8,hedge=0", "limit": 200},
        "simulate",
        "20398d60c9ed",
    ),
    (
        {"backend": "simulate", "adaptive": "band", "round_rule": "plan:cost=2,rounds=8,hedge=0", "limit": 200},
        "simulate",
        "4b49d686ea9a",
    ),
    ({"backend": "simulate", "adaptive": "band", "round_rule": "double", "limit": 200}, "simulate", "72bdd61288fd"),
    ({"backend": "simulate", "adaptive": "band:cost=0", "limit": 200}, "simulate", "039a81cdb788"),
    ({"backend": "simulate", "adaptive": "band", "round_rule": "greedy", "limit": 200}, "simulate", "7c0f75c7e5f7"),
    (
        {"backend": "simulate", "adaptive": "band:cost=0", "round_rule": "greedy", "limit": 200},
        "simulate",
        "c7ccdbb77e19",
    ),
    ({"backend": "simulate", "adaptive": "band", "adaptive_prior": "grid", "limit": 200}, "simulate", "1414ff691e36"),
    ({"backend": "simulate", "adaptive": "band", "adaptive_prior": "fit", "limit": 200}, "simulate", "b248c0dac382"),
    (
        {
            "backend": "simulate",
            "adaptive": "band",
            "round_rule": "plan:cost=2,rounds=8,hedge=0",
            "adaptive_prior": "fit",
            "limit": 200,
        },
        "simulate",
        "77dc77b83e50",
    ),
    (
        {"backend": "simulate", "adaptive": "band", "round_rule": "double", "adaptive_prior": "grid", "limit": 200},
        "simulate",
        "4707e0d4562d",
    ),
    (
        {"backend": "simulate", "adaptive": "band", "round_rule": "double", "adaptive_prior": "fit", "limit": 200},
        "simulate",
        "97954b70f4bc",
    ),
    (
        {"backend": "simulate", "adaptive": "band", "round_rule": "greedy", "adaptive_prior": "fit", "limit": 200},
        "simulate",
        "9e6090c652c2",
    ),
    (
        {"backend": "simulate", "adaptive": "band:cost=0", "round_rule": "greedy:jumps=1", "limit": 200},
        "simulate",
        "cf26fff8d594",
    ),
]


@pytest.mark.parametrize(("settings", "model", "run_id"), PINNED)
def test_run_ids_are_pinned(settings, model, run_id, store):
    plan = run.prepare_run(run.ProfileConfig.build(**settings), store, model)
    assert plan.run_id == run_id
    assert store.get_run(run_id).status == "sampling"


def test_a_gsm8k_file_keeps_its_run_id(shared, store):
    cfg = run.ProfileConfig.build(backend="simulate", data_file=str(shared / "gsm8k" / "test.jsonl"), limit=50)
    assert run.prepare_run(cfg, store, "simulate").run_id == "fb5a04d2c92d"


def test_a_retired_backends_runs_keep_their_id_and_stay_readable(store, data_dir):
    """The llamacpp backend (llama-cpp-python) was retired: its stored runs keep their ids and every
    reader still reads them (nothing that reads a run makes a sampler)."""
    plan = run.prepare_run(run.ProfileConfig.build(), store, BUNDLED_NAME)
    dataset = store.get_run(plan.run_id).dataset
    prompt_ids = store.read_table("problems", {"dataset": dataset}).column("prompt_id").to_pylist()
    params, template = run.ProfileConfig().sampling.params().to_dict(), template_for(dataset)
    for backend, run_id in (("xllamacpp", plan.run_id), ("llamacpp", "e5fde10c1124")):
        assert run.compute_run_id(dataset, BUNDLED_NAME, backend, params, template, prompt_ids) == run_id
    # A finished run of the retired backend, as an earlier version stored it.
    cli = CliRunner()
    done = cli.invoke(app, ["profile", "--backend", "simulate", "--no-prefect", "--limit", "12", "--n", "4",
                            "--grade-workers", "1", "--no-report"])  # fmt: skip
    assert done.exit_code == 0, done.output
    [run_id] = [r for r in store.list_runs().column("run_id").to_pylist() if r != plan.run_id]
    store.update_run(run_id, backend="llamacpp")
    assert store.get_run(run_id).backend == "llamacpp"
    for args in (["runs"], ["analyze", "--run", run_id], ["report", "--run", run_id], ["export", "--run", run_id,
                 "--format", "verl", "--output", str(data_dir / "out.parquet")]):  # fmt: skip
        res = cli.invoke(app, args)
        assert res.exit_code == 0, (args, res.output)
    # Sampling again on it is refused by name, before anything runs.
    res = cli.invoke(app, ["profile", "--backend", "llamacpp", "--limit", "4"])
    assert res.exit_code != 0 and "was retired" in res.output and "--backend xllamacpp" in res.output
