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
    # The band target's stopping rule became the priced one (cost=0.001, docs/adaptive.md §4): its
    # spec names the price, so every run with the default target has a new id. cost=0, the rule of
    # stopping as soon as decided, keeps the spec, and so the id, that such a run always had:
    # 039a81cdb788 (double, auto), c7ccdbb77e19 (greedy, auto), cf26fff8d594 (greedy:jumps=1).
    # The priced band target's default round rule became plan (docs/adaptive.md §5): a new id for its
    # default runs (4b49d686ea9a, grid 358d49be33b5, fit 77dc77b83e50); those made before keep theirs
    # with --round-rule double (72bdd61288fd, 4707e0d4562d, 97954b70f4bc).
    ({"backend": "simulate", "adaptive": "band", "limit": 200}, "simulate", "4b49d686ea9a"),
    ({"backend": "simulate", "adaptive": "band", "round_rule": "double", "limit": 200}, "simulate", "72bdd61288fd"),
    ({"backend": "simulate", "adaptive": "band:cost=0", "limit": 200}, "simulate", "039a81cdb788"),
    ({"backend": "simulate", "adaptive": "band", "round_rule": "greedy", "limit": 200}, "simulate", "7c0f75c7e5f7"),
    (
        {"backend": "simulate", "adaptive": "band:cost=0", "round_rule": "greedy", "limit": 200},
        "simulate",
        "c7ccdbb77e19",
    ),
    ({"backend": "simulate", "adaptive": "band", "adaptive_prior": "grid", "limit": 200}, "simulate", "358d49be33b5"),
    ({"backend": "simulate", "adaptive": "band", "adaptive_prior": "fit", "limit": 200}, "simulate", "77dc77b83e50"),
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
