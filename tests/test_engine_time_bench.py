"""``bench/engine_time.py``'s accounting, without an engine: tokens from a samples table, the call
records, the per-step time fit, the barrier, the per-round and per-run aggregation and the paired
ratios. Exact values by hand, and the fit against calls made from a known cost model."""

from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from pipeline.errors import ConfigError


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "bench"))
    return importlib.import_module("engine_time")


def test_tokens_and_calls_from_samples(bench) -> None:
    samples = pa.table({"prompt_id": ["a", "a", "b", "b"], "n_tokens": [10, 30, 5, 15]})
    assert bench.tokens_spent(samples["n_tokens"].to_pylist()) == 60
    call = bench.call_of("adaptive", 1, 2, samples["n_tokens"].to_pylist(), 3.5)
    assert (call.answers, call.tokens, call.steps, call.wall_s) == (4, 60, 30, 3.5)
    with pytest.raises(ValueError, match="1 of 2 samples have no n_tokens"):
        bench.tokens_spent([3, None])
    with pytest.raises(ValueError, match=r"fixed seed 0 round 0: answers \[1\]"):
        bench.call_of("fixed", 0, 0, [3, None], 1.0)


def test_barrier_is_the_steps_past_the_mean_answer(bench) -> None:
    call = bench.call_of("fixed", 0, 0, [10, 30, 5, 15], 2.0)  # mean 15, longest 30
    assert bench.barrier_s(call, 0.1) == pytest.approx(1.5)
    same = bench.call_of("fixed", 0, 0, [20, 20], 1.0)
    assert bench.barrier_s(same, 0.1) == 0.0


def test_fit_recovers_a_known_step_and_token_cost(bench) -> None:
    rng = np.random.default_rng(0)
    calls = []
    for i in range(12):
        lengths = rng.integers(1, 200, size=int(rng.integers(2, 64))).tolist()
        exact = bench.call_of("x", 0, i, lengths, 0.0)
        wall = 0.02 * exact.steps + 0.003 * exact.tokens
        calls.append(bench.call_of("x", 0, i, lengths, wall * (1 + rng.normal(0, 0.01))))
    per_step, per_token = bench.fit_step_cost(calls)
    assert per_step == pytest.approx(0.02, rel=0.05)
    assert per_token == pytest.approx(0.003, rel=0.05)
    # Never negative: where the time shrinks as the longest answer grows at equal tokens, plain least
    # squares would price a step below zero; the fit puts it at 0.
    shrinking = [bench.call_of("x", 0, i, lengths, wall) for i, (lengths, wall) in
                 enumerate((([10, 10], 0.30), ([5, 15], 0.25), ([2, 18], 0.20), ([20, 20], 0.55)))]  # fmt: skip
    step, token = bench.fit_step_cost(shrinking)
    assert step == 0.0 and token > 0


def test_rounds_runs_and_ratios(bench) -> None:
    calls = [
        bench.call_of("fixed", 0, 0, [10, 30, 20, 20], 4.0),
        bench.call_of("adaptive", 0, 0, [10, 30], 2.0),
        bench.call_of("adaptive", 0, 1, [5, 15], 1.0),
        bench.call_of("adaptive", 0, 1, [8], 0.5),  # a second call of the same round
    ]
    rounds = bench.round_table(calls, per_step_s=0.1)
    assert [(r["config"], r["round"], r["calls"]) for r in rounds] == [
        ("fixed", 0, 1),
        ("adaptive", 0, 1),
        ("adaptive", 1, 2),
    ]
    r1 = rounds[2]
    assert (r1["answers"], r1["tokens"], r1["steps"], r1["steps_one_call"], r1["wall_s"]) == (3, 28, 23, 15, 1.5)
    assert r1["occupancy"] == pytest.approx(28 / (2 * 15 + 1 * 8))
    assert r1["barrier_s"] == pytest.approx(0.1 * (15 - 10) + 0.1 * (8 - 8))
    fixed = bench.run_summary(rounds[:1], prompts=2, tokens=80)
    adaptive = bench.run_summary(rounds[1:], prompts=2, tokens=68)
    assert (adaptive["rollouts"], adaptive["rounds"], adaptive["engine_s"]) == (5, 2, 3.5)
    assert (adaptive["steps"], adaptive["steps_one_call"]) == (30 + 23, 30 + 15)
    assert adaptive["tokens_per_s"] == pytest.approx(68 / 3.5)
    with pytest.raises(ValueError, match="returned 80 tokens but the run's samples hold 79"):
        bench.run_summary(rounds[:1], prompts=2, tokens=79)
    with pytest.raises(ValueError, match="one run"):
        bench.run_summary(rounds, prompts=2, tokens=148)
    second = [dict(fixed, seed=1, engine_s=5.0), dict(adaptive, seed=1, engine_s=4.0)]
    got = bench.ratios([fixed, adaptive, *second])
    assert got["rollouts"]["per_seed"] == [5 / 4, 5 / 4]
    assert got["tokens"]["mean"] == pytest.approx(68 / 80)
    assert got["engine_s"]["per_seed"] == pytest.approx([3.5 / 4.0, 4.0 / 5.0])
    assert (got["engine_s"]["min"], got["engine_s"]["max"]) == pytest.approx((0.8, 0.875))
    with pytest.raises(ValueError, match=r"\('adaptive', 1\)"):
        bench.ratios([fixed, adaptive, second[0]])


def test_price_unit_passes_into_the_target(bench) -> None:
    assert bench.target_spec("band", "rollouts") == "band"
    assert bench.target_spec("band", "tokens") == "band:price_unit=tokens"
    assert bench.target_spec("band:cost=0.001", "tokens") == "band:cost=0.001,price_unit=tokens"
    with pytest.raises(ConfigError, match="--price-unit 'joules'"):
        bench.target_spec("band", "joules")


def test_price_unit_tokens_reaches_the_adaptive_config_or_stops_naming_the_option(bench) -> None:
    """Before any engine starts: the adaptive run's target carries ``price_unit=tokens`` where the band
    rule takes it, else the bench stops with an error naming ``--price-unit`` (the fixed run is the same
    either way)."""
    import argparse

    args = argparse.Namespace(
        backend="simulate", model=None, data_file=None, prompts=4, max_tokens=16, n=8, target="band",
        n_min=4, n_max=16, price_unit="tokens",
    )  # fmt: skip
    try:
        configs = bench.build_configs(args, seed=0)
    except ConfigError as exc:
        assert "--price-unit tokens: this checkout's adaptive rule does not take a price unit" in str(exc)
    else:
        assert "price_unit=tokens" in configs["adaptive"].adaptive.to_dict()["target"]
    plain = bench.build_configs(argparse.Namespace(**{**vars(args), "price_unit": "rollouts"}), seed=0)
    assert plain["fixed"].sampling.n == 8 and plain["fixed"].adaptive is None
    assert (plain["adaptive"].adaptive.n_min, plain["adaptive"].adaptive.n_max) == (4, 16)
    assert "price_unit" not in plain["adaptive"].adaptive.to_dict()["target"]
