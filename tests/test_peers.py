"""The peers' rules: sGPO, VIP, Knapsack-RL, Pilot-Commit (``pipeline/peers.py``) and prime-rl, Trinity-RFT,
MoPPS, CurES (``pipeline/curriculum.py``), each on a case worked by hand, and the rows the CLI prints."""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest
from typer.testing import CliRunner

from pipeline import allocate as alloc
from pipeline import curriculum, peers, schema
from pipeline.cli import app
from pipeline.errors import ConfigError
from pipeline.store import Store

N8 = np.full(5, 8)
C8 = np.array([8, 0, 4, 2, 1])  # always solved, never solved, p = 1/2, 1/4, 1/8


# --- allocation peers ----------------------------------------------------------------------------


def test_sgpo_sizes_groups_by_one_over_p_and_drops_the_trivial():
    # 1/p = 2, 4, 8 for the solved ones; the never-solved one sized as p = 1/9: weight 9.
    # Kept: 40 * (9, 2, 4, 8) / 23 = 15.65, 3.48, 6.96, 13.91 -> floors 15, 3, 6, 13 (37) and the
    # three rollouts left to the largest remainders .96, .91, .65.
    assert peers.sgpo(N8, C8, 40, n_max=64, keep_unsolved=1.0).tolist() == [0, 16, 3, 7, 14]
    # none of the never-solved kept: 40 * (2, 4, 8) / 14 = 5.71, 11.43, 22.86 -> 5, 11, 22 + .86, .71
    assert peers.sgpo(N8, C8, 40, n_max=64, keep_unsolved=0.0).tolist() == [0, 0, 6, 11, 23]
    # a cap: at most n_max each, and a budget above what the kept prompts take is left unspent
    assert peers.sgpo(N8, C8, 400, n_max=10, keep_unsolved=0.0).tolist() == [0, 0, 10, 10, 10]
    # the share of never-solved prompts kept: the first ceil(0.1 * 20) = 2 in prompt order
    n = peers.sgpo(np.full(20, 4), np.zeros(20, int), 40, n_max=64)
    assert n.tolist() == [20, 20] + [0] * 18
    with pytest.raises(ConfigError, match="keep_unsolved"):
        peers.sgpo(N8, C8, 40, keep_unsolved=1.5)


def test_vip_is_neyman_allocation():
    # minimise 0.25/n1 + 0.09/n2 at n1 + n2 = 16: n proportional to sqrt(pq) = 0.5 : 0.3 -> 10, 6
    n = peers.vip(np.array([10, 10]), np.array([5, 1]), 16, n_min=1, n_max=64)
    assert n.tolist() == [10, 6]
    f = [0.25 / a + 0.09 / (16 - a) for a in range(1, 16)]
    assert int(np.argmin(f)) + 1 == 10


def test_knapsack_gives_the_silent_prompt_its_floor():
    # (1 - p^n - q^n) p q^2 is 0 at p = 0 for every n, and rises with n at p = 1/2
    assert peers.knapsack(np.array([8, 8]), np.array([4, 0]), 10, n_min=1, n_max=64).tolist() == [9, 1]


def test_pilot_commit_skips_silent_pilots():
    # informative: p = 1/2, 1/4, 1/8; 40 = 3 x 13 + 1, the extra one to the largest pilot variance (1/2)
    assert peers.pilot_commit(N8, C8, 40, n_max=64).tolist() == [0, 0, 14, 13, 13]
    assert peers.pilot_commit(N8, C8, 400, n_max=20).tolist() == [0, 0, 20, 20, 20]
    # every pilot silent: the budget over every prompt
    assert peers.pilot_commit(np.array([4, 4]), np.array([0, 4]), 6).tolist() == [3, 3]


def _grpo_signal(p: float, n: int) -> float:
    """E_k[sigma_k], k ~ Binomial(n, p), sigma the group's reward standard deviation: by brute force."""
    return sum(math.comb(n, k) * p**k * (1 - p) ** (n - k) * math.sqrt(k / n * (1 - k / n)) for k in range(n + 1))


def test_value_scores_any_allocation_on_the_objective():
    cfg = alloc.AllocationConfig(budget=20, n_min=1, n_max=64)  # GRPO signal, point estimates
    n_alloc = np.array([0, 3, 5, 7, 5])
    want = sum(_grpo_signal(c / 8, k) for c, k in zip(C8, n_alloc, strict=True) if k > 0)
    assert peers.value(N8, C8, n_alloc, cfg) == pytest.approx(want, rel=1e-12)
    # the allocation's own total where n >= n_min
    res = alloc.allocate(N8, C8, cfg)
    assert peers.value(N8, C8, res.n, cfg) == pytest.approx(res.total, rel=1e-12)
    # at true rates instead of the counts
    p = np.array([0.9, 0.05, 0.5, 0.3, 0.2])
    assert peers.value(N8, C8, n_alloc, cfg, p_true=p) == pytest.approx(
        sum(_grpo_signal(q, k) for q, k in zip(p, n_alloc, strict=True) if k > 0), rel=1e-12
    )
    # the variance objective: infinite where a prompt gets nothing
    var = alloc.AllocationConfig(budget=20, objective="variance", n_min=1, n_max=64)
    assert peers.value(N8, C8, n_alloc, var) == math.inf
    assert peers.value(N8, C8, np.full(5, 4), var) == pytest.approx(sum(c / 8 * (1 - c / 8) / 4 for c in C8))


def test_value_agrees_with_simulated_groups():
    """Monte Carlo: the mean standard deviation of simulated GRPO groups at the allocation."""
    rng = np.random.default_rng(7)
    p, n_alloc = np.array([0.5, 0.2, 0.05]), np.array([4, 9, 16])
    cfg = alloc.AllocationConfig(budget=29, n_min=1, n_max=64)
    draws = 40_000
    sims = []
    for q, k in zip(p, n_alloc, strict=True):
        x = rng.binomial(k, q, draws) / k
        sims.append(np.sqrt(x * (1 - x)))
    total = np.sum([s.mean() for s in sims])
    se = math.sqrt(sum(s.var() / draws for s in sims))
    assert abs(peers.value(np.full(3, 8), np.zeros(3, int), n_alloc, cfg, p_true=p) - total) < 5 * se


def test_peer_allocation_names_and_refuses_others():
    cfg = alloc.AllocationConfig(budget=40, n_min=1, n_max=64)
    for name in peers.PEERS:
        n = peers.peer_allocation(name, N8, C8, cfg)
        assert n.sum() <= 40 and (n >= 0).all()
    with pytest.raises(ConfigError, match="peer='grpo'"):
        peers.peer_allocation("grpo", N8, C8, cfg)


def test_allocate_peers_prints_each_peer_beside_its_own(data_dir):
    rows = []
    correct = [8, 0, 4, 2, 1, 5, 6, 3]
    for i, c in enumerate(correct):
        for j in range(8):
            ok = j < c
            rows.append(
                {
                    "run_id": "run-p",
                    "prompt_id": f"p{i}",
                    "sample_idx": j,
                    "extracted_answer": "1" if ok else "2",
                    "correct": ok,
                    "grade_status": "correct" if ok else "incorrect",
                }
            )
    Store(data_dir).write_shard("run-p", 0, pa.Table.from_pylist(rows, schema=schema.SAMPLES))
    res = CliRunner().invoke(
        app, ["allocate", "--run", "run-p", "--budget", "64", "--point", "--n-min", "1", "--peers",
              "--data-dir", str(data_dir)],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    names = ("this allocation", "uniform", *peers.PEERS)
    pattern = re.compile(r"^(" + "|".join(names) + r")\s+(\S+)\s+(\d+)\s+(\d+)\s+(\S+)\s*$")
    printed = {m[1]: m for m in map(pattern.match, res.output.splitlines()) if m}
    assert set(printed) == set(names), res.output
    cfg = alloc.AllocationConfig(budget=64, n_min=1, posterior=False)
    n, c = np.full(8, 8), np.array(correct)
    for name in peers.PEERS:
        n_peer = peers.peer_allocation(name, n, c, cfg)
        assert float(printed[name][2]) == pytest.approx(peers.value(n, c, n_peer, cfg), rel=1e-5)
        assert int(printed[name][3]) == n_peer.sum() and int(printed[name][4]) == (n_peer == 0).sum()
    # sGPO drops the always-solved prompt and keeps the one never solved (ceil(0.1 x 1)); Pilot-Commit skips both
    assert (printed["sgpo"][4], printed["pilot-commit"][4], printed["this allocation"][4]) == ("1", "2", "0")
    assert float(printed["this allocation"][5]) == 1


def _token_run(store: Store, run_id: str, correct, lengths=None) -> None:
    """A run of 8 samples per prompt whose prompt_stats carry answer lengths (``lengths``: each
    prompt's mean tokens per answer, sd half of it), built here rather than by the analysis."""
    from pipeline import analyze, finish

    rows = [
        {"run_id": run_id, "prompt_id": f"p{i}", "sample_idx": j, "extracted_answer": "1" if j < c else "2",
         "correct": j < c, "grade_status": "correct" if j < c else "incorrect"}
        for i, c in enumerate(correct) for j in range(8)
    ]  # fmt: skip
    store.write_shard(run_id, 0, pa.Table.from_pylist(rows, schema=schema.SAMPLES))
    ps = analyze.analyze(finish.run_counts(store, run_id), run_id).prompt_stats
    if lengths is not None:
        order = [int(pid[1:]) for pid in ps.column("prompt_id").to_pylist()]
        mean = np.asarray(lengths, float)[order]
        for name, values in (("tokens_counted", np.full(len(order), 8)), ("tokens_per_answer", mean),
                             ("tokens_sd", mean / 2)):  # fmt: skip
            i = ps.schema.get_field_index(name)
            ps = ps.set_column(i, name, pa.array(values, ps.schema.field(name).type))
    store.replace_partition("prompt_stats", ps, {"run_id": run_id})


def test_allocate_prices_rollouts_in_tokens(data_dir):
    """``allocate --price-unit tokens``: each rollout costs its prompt's expected answer length (from
    prompt_stats, under the run's length prior), the default budget is what G rollouts per prompt
    cost, the output says both units, and the peers run at the same expected tokens."""
    from pipeline import tokens

    store = Store.open(data_dir)
    correct = [8, 0, 4, 2, 1, 5, 6, 3]
    lengths = [200.0, 900.0, 500.0, 600.0, 800.0, 450.0, 400.0, 550.0]
    _token_run(store, "run-t", correct, lengths)
    runner = CliRunner()
    args = ["allocate", "--run", "run-t", "--price-unit", "tokens", "--peers", "--data-dir", str(data_dir)]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    price = tokens.expected_tokens(np.full(8, 8), np.array(lengths), np.array(lengths) / 2)
    budget = math.ceil(schema.DEFAULT_G * price.sum())
    stored = store.read_table("allocation", {"run_id": "run-t"})
    assert set(stored.column("price_unit").to_pylist()) == {"tokens"}
    assert set(stored.column("budget").to_pylist()) == {budget}
    n_alloc = np.array(stored.column("n_rollouts").to_pylist())
    spent = float(n_alloc @ price)  # the stored rows are in prompt-id order, p0..p7
    assert spent <= budget and budget - spent < price.max()
    assert f"allocated {budget} tokens ({spent:.6g} expected tokens in {n_alloc.sum()} rollouts)" in res.output
    assert "per rollout" in res.output and "per 1k tokens" in res.output
    # the same allocation as the library's at these prices
    cfg = dataclasses.replace(alloc.default_config(8), budget=budget, price_unit="tokens")
    want = alloc.allocate(np.full(8, 8), np.array(correct), cfg, price=price)
    np.testing.assert_array_equal(n_alloc, want.n)
    # each peer at the largest rollout budget whose allocation fits the same tokens
    names = "|".join(["this allocation", "uniform", *peers.PEERS])
    pattern = re.compile(rf"^({names})\s+(\S+)\s+(\d+)\s+(\S+)\s+(\d+)\s+(\S+)\s*$")
    printed = {m[1]: m for m in map(pattern.match, res.output.splitlines()) if m}
    assert set(printed) == {"this allocation", "uniform", *peers.PEERS}, res.output
    n, c = np.full(8, 8), np.array(correct)
    rollouts = dataclasses.replace(cfg, price_unit="rollouts")
    for name in peers.PEERS:
        n_peer = peers.peer_allocation(name, n, c, cfg, price=price)
        assert float(printed[name][4]) == pytest.approx(float(n_peer @ price), rel=1e-5) and n_peer @ price <= budget
        more = peers.peer_allocation(name, n, c, dataclasses.replace(rollouts, budget=int(n_peer.sum()) + 1))
        assert more @ price > budget or more.sum() == n_peer.sum(), name  # one more rollout would not fit
        assert float(printed[name][2]) == pytest.approx(peers.value(n, c, n_peer, cfg), rel=1e-5)
    assert float(printed["uniform"][4]) == pytest.approx(schema.DEFAULT_G * price.sum())
    # the export names an allocation priced in tokens as such, and prefers one priced in rollouts
    from pipeline import export

    chosen, info = export._chosen_allocation(store, "run-t", 8)
    assert info["price_unit"] == "tokens" and info["budget"] == budget and sum(chosen.values()) == n_alloc.sum()
    # priced in rollouts, the output still says what the allocation costs in tokens
    res = runner.invoke(app, ["allocate", "--run", "run-t", "--data-dir", str(data_dir)])
    assert res.exit_code == 0, res.output
    base = alloc.allocate(n, c, alloc.default_config(8))
    assert f"allocated {8 * schema.DEFAULT_G} rollouts ({float(base.n @ price):.6g} expected tokens)" in res.output
    _, info = export._chosen_allocation(store, "run-t", 8)
    assert info["default"] and "price_unit" not in info
    keys = {p.stem for p in (data_dir / "allocation" / "run_id=run-t").glob("*.parquet")}
    assert {alloc.allocation_key(cfg), alloc.allocation_key(alloc.default_config(8))} <= keys


def test_allocate_in_tokens_without_lengths_says_so(data_dir):
    store = Store.open(data_dir)
    _token_run(store, "run-n", [8, 0, 4, 2])
    res = CliRunner().invoke(app, ["allocate", "--run", "run-n", "--price-unit", "tokens", "--data-dir", str(data_dir)])
    assert res.exit_code != 0
    assert "run 'run-n': its prompt_stats carry no answer lengths" in res.output
    assert "--price-unit rollouts" in res.output
    assert not store.read_table("allocation", {"run_id": "run-n"}).num_rows
    res = CliRunner().invoke(app, ["allocate", "--run", "run-n", "--price-unit", "coins", "--data-dir", str(data_dir)])
    assert res.exit_code != 0 and "--price-unit='coins'" in res.output


def test_at_tokens_is_the_largest_budget_that_fits():
    price = np.array([100.0, 250.0, 400.0, 900.0])
    for name in peers.PEERS:
        cfg = alloc.AllocationConfig(budget=9000, n_min=1, n_max=64, price_unit="tokens")
        n = peers.peer_allocation(name, N8[:4], C8[:4], cfg, price=price)
        assert n @ price <= 9000
        B = int(n.sum())
        nxt = [peers.peer_allocation(name, N8[:4], C8[:4], dataclasses.replace(cfg, budget=b, price_unit="rollouts"))
               for b in range(B + 1, B + 4)]  # fmt: skip
        assert all(m @ price > 9000 or m.sum() <= B for m in nxt), name


# --- curriculum peers ----------------------------------------------------------------------------


def test_weighted_sample_is_successive_sampling():
    rng = np.random.default_rng(3)
    draws = 30_000
    hits = sum(
        set(curriculum.weighted_sample(rng, np.array([1.0, 2.0, 3.0]), 2).tolist()) == {0, 1} for _ in range(draws)
    )
    want = 1 / 6 * 2 / 5 + 2 / 6 * 1 / 4  # first 0 then 1, or first 1 then 0
    assert abs(hits / draws - want) < 5 * math.sqrt(want * (1 - want) / draws)
    # weight 0 only after every positive weight
    assert sorted(curriculum.weighted_sample(rng, np.array([0.0, 1.0, 0.0, 5.0]), 2).tolist()) == [1, 3]


def test_prime_rl_pools_by_latest_group_mean():
    ids = [f"q{i}" for i in range(6)]
    n = np.array([0, 4, 4, 4, 4, 4])
    c = np.array([0, 0, 1, 2, 3, 4])  # unseen, 0, 0.25 (hard: inclusive), 0.5, 0.75 (normal), 1
    policy = curriculum.make_policy("prime-rl", ids, n, c)
    assert policy.weights(np.arange(6)).tolist() == [1.0, 0.2, 0.2, 1.0, 1.0, 0.2]
    policy.update(["q1"], [4], [2])  # the latest group mean replaces the old one: normal now
    assert policy.weights(np.arange(6))[1] == 1.0
    rng_hits = 0
    p2 = curriculum.make_policy("prime-rl:hard=0.5", ["a", "b"], np.array([4, 4]), np.array([2, 0]), seed=1)
    draws = 20_000
    for _ in range(draws):
        rng_hits += p2.choose(1) == ["a"]
    assert abs(rng_hits / draws - 1 / 1.5) < 5 * math.sqrt(2 / 9 / draws)
    with pytest.raises(ConfigError, match="high=0.2 must be above low=0.25"):
        curriculum.make_policy("prime-rl:high=0.2", ids)


def test_trinity_discounts_every_prompt_and_aims_at_the_target():
    ids = ["a", "b", "c"]
    policy = curriculum.make_policy("trinity", ids)  # lamb 0.2, target 0.5, top-k
    policy.update(["a"], [8], [6], step=0)
    assert (policy.alpha.tolist(), policy.beta.tolist()) == ([7.0, 1.0, 1.0], [3.0, 1.0, 1.0])
    policy.update(["b"], [8], [0], step=1)
    assert policy.alpha == pytest.approx([5.8, 1.0, 1.0]) and policy.beta == pytest.approx([2.6, 9.0, 1.0])
    # |0.5 - mean|: a 0.19, b 0.4, c 0: c first, then a
    assert policy.choose(1) == ["c"] and sorted(policy.choose(2)) == ["a", "c"]


def test_mopps_updates_picked_prompts_and_samples_near_the_target():
    policy = curriculum.make_policy(
        "mopps:decay=0.5,ratio=1", ["a", "b"], np.array([2000, 2000]), np.array([1000, 1800])
    )
    policy.update(["a"], [4], [3])
    assert policy.alpha[0] == pytest.approx(0.5 * 1001 + 0.5 + 3) and policy.beta[0] == pytest.approx(
        0.5 * 1001 + 0.5 + 1
    )
    assert policy.beta[1] == 201  # not picked: unchanged
    # ratio 0.5: two candidates for one pick, and the posterior at 0.5 wins every time
    near = curriculum.make_policy("mopps:ratio=0.5", ["a", "b"], np.array([2000, 2000]), np.array([1000, 1800]))
    assert all(near.choose(1) == ["a"] for _ in range(50))
    # ratio 1: the candidates are the picks, a uniform draw whatever the posteriors
    uni = curriculum.make_policy("mopps:ratio=1", ["a", "b"], np.array([2000, 2000]), np.array([1000, 1800]), seed=2)
    draws = 10_000
    hits = sum(uni.choose(1) == ["b"] for _ in range(draws))
    assert abs(hits / draws - 0.5) < 5 * math.sqrt(0.25 / draws)


def test_cures_weights():
    policy = curriculum.make_policy("cures:scale=2", ["a", "b", "c"], np.array([0, 2, 10]), np.array([0, 1, 0]))
    w = policy.weights(np.arange(3))
    # a: p = 1/2, t = 1/2 -> exp(1); b: p = 2/4, t = 2/2 -> exp(1/2); c: p = 1/12, t = 1/2 -> exp(2 sqrt(11)/12)
    want = np.exp([1.0, 0.5, 2 * math.sqrt(11) / 12])
    assert w / w[0] == pytest.approx(want / want[0], rel=1e-12)


def test_replay_prints_the_peers_rows(tmp_path):
    rng = np.random.default_rng(0)
    rows = [
        {"step": t, "prompt_id": f"p{i}", "n": 8, "c": int(rng.binomial(8, (i + 0.5) / 20))}
        for t in range(6)
        for i in range(20)
    ]
    path = tmp_path / "log.csv"
    pacsv.write_csv(pa.Table.from_pylist(rows), path)
    res = CliRunner().invoke(app, ["replay", str(path), "--batch-size", "5"])
    assert res.exit_code == 0, res.output
    for name in curriculum.PEERS:
        assert f"{name} (peer)" in res.output
    log = pa.Table.from_pylist(rows)
    for name in curriculum.PEERS:
        r = curriculum.replay(log, name, 5)
        assert 0 <= r["signal_yield"] <= 1 and f"{r['signal_yield']:.4g}"[:4] in res.output


def test_peers_take_counts_read_elsewhere():
    """The verl hook replaces a policy's counts before each batch: each peer's own state follows them."""
    n, c = np.array([8.0, 4.0, 0.0]), np.array([2.0, 4.0, 0.0])
    pool = curriculum.make_policy("prime-rl", ["a", "b", "c"])
    pool.set_counts(n, c, step=3)
    assert pool.weights(np.arange(3)).tolist() == [0.2, 0.2, 1.0]  # 0.25: hard; 1: easy; unseen
    for spec in ("trinity", "mopps"):
        policy = curriculum.make_policy(spec, ["a", "b", "c"])
        policy.set_counts(n, c, step=3)
        assert (policy.alpha.tolist(), policy.beta.tolist()) == ([3.0, 5.0, 1.0], [7.0, 1.0, 1.0])
