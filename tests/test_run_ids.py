"""Run ids are a run's identity across versions: a rerun resumes only if its id is the same.

Pinned for the bundled default (``make profile``) and simulate profiles, fixed-n and adaptive,
as the code computed them before the run stages were reorganised; a change that moves one of
them is a change of every stored run's identity and must be deliberate.
"""

from __future__ import annotations

import pytest

from pipeline import run
from pipeline.sample.llamacpp import BUNDLED_NAME

PINNED = [
    # The bundled default's engine became xllamacpp (llama.cpp prebuilt): the id hashes the backend's
    # name, so it moved from e5fde10c1124, which the same settings with backend llamacpp keep.
    ({}, BUNDLED_NAME, "b6ac78fe8779"),
    ({"backend": "llamacpp"}, BUNDLED_NAME, "e5fde10c1124"),
    ({"backend": "simulate", "n": 16, "limit": 200}, "simulate", "2e385155a9c1"),
    # The default round rule became double (fewer rounds): a different sampling procedure, so new
    # ids for the runs that do not name a rule. A run that names the greedy rule keeps the id it always
    # had: greedy with auto (the default before double), greedy with fit (the default before auto).
    ({"backend": "simulate", "adaptive": "band", "limit": 200}, "simulate", "039a81cdb788"),
    ({"backend": "simulate", "adaptive": "band", "round_rule": "greedy", "limit": 200}, "simulate", "c7ccdbb77e19"),
    ({"backend": "simulate", "adaptive": "band", "adaptive_prior": "grid", "limit": 200}, "simulate", "b57198f9682f"),
    ({"backend": "simulate", "adaptive": "band", "adaptive_prior": "fit", "limit": 200}, "simulate", "302fefbec045"),
    (
        {"backend": "simulate", "adaptive": "band", "round_rule": "greedy", "adaptive_prior": "fit", "limit": 200},
        "simulate",
        "884c350d8c90",
    ),
    # one jump per prompt and round, an option of the greedy rule (its spec names it)
    (
        {"backend": "simulate", "adaptive": "band", "round_rule": "greedy:jumps=1", "limit": 200},
        "simulate",
        "cf26fff8d594",
    ),
]


@pytest.mark.parametrize(("settings", "model", "run_id"), PINNED)
def test_run_ids_are_pinned(settings, model, run_id, store):
    plan = run.prepare_run(run.ProfileConfig.build(**settings), store, model)
    assert plan.run_id == run_id
    assert store.get_run(run_id)["status"] == "sampling"


def test_a_gsm8k_file_keeps_its_run_id(shared, store):
    cfg = run.ProfileConfig.build(backend="simulate", data_file=str(shared / "gsm8k" / "test.jsonl"), limit=50)
    assert run.prepare_run(cfg, store, "simulate").run_id == "fb5a04d2c92d"
