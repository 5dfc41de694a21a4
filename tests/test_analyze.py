"""Table-level analysis: counts from Parquet via DuckDB, the three tables, bad input."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest

from pipeline import analyze as an
from pipeline import estimators as est
from pipeline import finish, schema, stats
from pipeline.errors import StoreError
from pipeline.store import Store


def _samples(run_id: str, rows: list[tuple[str, str | None, bool | None]]) -> pa.Table:
    """Samples table from (prompt_id, extracted_answer, correct) rows."""
    idx = Counter()
    out = []
    for pid, answer, correct in rows:
        out.append(
            {
                "run_id": run_id,
                "prompt_id": pid,
                "sample_idx": idx[pid],
                "extracted_answer": answer,
                "correct": correct,
                "grade_status": "correct" if correct else "incorrect",
            }
        )
        idx[pid] += 1
    return pa.Table.from_pylist(out, schema=schema.SAMPLES)


def _random_rows(seed: int, prompts: int = 30):
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(prompts):
        p = rng.beta(0.5, 0.5)
        for _ in range(int(rng.integers(1, 20))):
            ok = bool(rng.random() < p)
            answer = "7" if ok else rng.choice(["1", "2", None])
            rows.append((f"q{i:03d}", answer, ok))
    return rows


def _write_shard(store: Store, run_id: str, shard: int, samples: pa.Table) -> None:
    """A shard written as a run writes it: with its answer counts (``an.answer_counts``)."""
    store.write_shard(run_id, shard, samples, answer_counts=an.answer_counts(run_id, shard, samples))


def test_counts_from_samples_matches_python(data_dir):
    rows = _random_rows(0)
    samples = _samples("r1", rows)
    _write_shard(Store(data_dir), "r1", 0, samples.slice(0, 100))
    _write_shard(Store(data_dir), "r1", 1, samples.slice(100))
    _write_shard(Store(data_dir), "r2", 0, _samples("r2", [("q000", "9", True)]))
    expect_n = Counter(pid for pid, _, _ in rows)
    expect_c = Counter(pid for pid, _, ok in rows if ok)
    via_dir = finish.counts_from_samples(Store(data_dir), "r1")
    plain = finish.counts_from_samples(Store(data_dir), "r1", answers=False)
    for table in (via_dir, plain):
        got = {r["prompt_id"]: (r["n"], r["c"]) for r in table.to_pylist()}
        assert got == {pid: (expect_n[pid], expect_c[pid]) for pid in expect_n}
    for r in via_dir.to_pylist():
        hist = Counter(a for pid, a, _ in rows if pid == r["prompt_id"] and a is not None)
        assert dict(zip(r["answer_values"], r["answer_counts"], strict=False)) == dict(hist)
        right = Counter(a for pid, a, ok in rows if pid == r["prompt_id"] and ok)
        got_right = {a: cc for a, cc in zip(r["answer_values"], r["answer_correct_counts"], strict=False) if cc}
        assert got_right == dict(right)
    with pytest.raises(StoreError, match="no samples"):
        finish.counts_from_samples(Store(data_dir), "missing")


def test_analysis_is_pure():
    """``analyze`` computes from tables alone: it imports nothing of the store (``finish`` reads a run's
    counts and writes its analysis), and the shard's answer counts come out the same from its samples
    as given and as the store conforms them."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(an))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {
        f"{node.module}.{alias.name}" if node.module == "pipeline" else str(node.module)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert {"pipeline.adaptive", "pipeline.prior"} <= imported  # the walk sees the module's imports
    assert not [name for name in imported if name == "pipeline.store" or name.startswith("pipeline.store.")]
    assert not {"Store", "store"} & set(vars(an)), "analyze holds a store name"
    rows = _samples("r", [("b", "7", True), ("a", None, None), ("a", "7", False), ("b", "7", True)])
    bare = rows.drop_columns(["extracted_answer"])
    from pipeline.store import conform

    for table in (rows, bare):
        assert an.answer_counts("r", 3, table).equals(an.answer_counts("r", 3, conform(table, "samples")))
    got = {
        (r["prompt_id"], r["extracted_answer"]): (r["cnt"], r["cc"]) for r in an.answer_counts("r", 3, rows).to_pylist()
    }
    assert got == {("b", "7"): (2, 2), ("a", None): (1, 0), ("a", "7"): (1, 0)}


def test_prompt_stats_count_the_answers_cut_by_the_token_limit(data_dir):
    """``truncated_share`` is the share of a prompt's answers with finish_reason 'length' (in any
    shard); ``truncated`` flags a prompt whose wrong answers were mostly cut, checked by hand on
    random samples, where a cut answer may still be right or ungradable (correct None)."""
    rng = np.random.default_rng(5)
    rows = []
    for i in range(40):
        p, cut = rng.beta(0.5, 0.5), rng.beta(0.5, 0.5)
        for j in range(int(rng.integers(1, 17))):
            ok = bool(rng.random() < p)
            reason = "length" if rng.random() < cut else rng.choice(["stop", None])
            rows.append(
                {"run_id": "r", "prompt_id": f"q{i:02d}", "sample_idx": j, "finish_reason": reason}
                | {"correct": None if not ok and rng.random() < 0.2 else ok}
            )
    samples = pa.Table.from_pylist(rows, schema=schema.SAMPLES)
    store = Store(data_dir)
    _write_shard(store, "r", 0, samples.slice(0, len(rows) // 2))
    _write_shard(store, "r", 1, samples.slice(len(rows) // 2))
    got = {r["prompt_id"]: r for r in finish.analyze_run(store, "r").prompt_stats.to_pylist()}
    assert len(got) == 40
    for pid, r in got.items():
        mine = [x for x in rows if x["prompt_id"] == pid]
        cut = [x for x in mine if x["finish_reason"] == "length"]
        wrong = [x for x in mine if not x["correct"]]
        cut_wrong = [x for x in cut if not x["correct"]]
        assert r["truncated_share"] == pytest.approx(len(cut) / len(mine))
        assert r["truncated"] == (len(wrong) > 0 and 2 * len(cut_wrong) > len(wrong))
    assert any(r["truncated"] for r in got.values()) and not all(r["truncated"] for r in got.values())
    # counts without the cut answers (a table of counts, no samples): unknown, not 0
    plain = an.analyze(finish.counts_from_samples(store, "r"), "r").prompt_stats
    assert plain.column("truncated_share").null_count == plain.column("truncated").null_count == 40


def _rows_with_answers(seed: int, prompts: int = 48):
    """Random samples: two answers graded correct ("7", "7.0"), wrong ones ("1", "2", "3") and
    null answers, some ungradable samples (correct None: a sample, not correct), and every fourth
    prompt with no extracted answer at all; rows shuffled, prompt ids not in creation order."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(prompts):
        pid = f"q{int(rng.integers(0, 10**6)):06d}-{i}"
        p = rng.beta(0.5, 0.5)
        for _ in range(int(rng.integers(1, 25))):
            if i % 4 == 0:
                rows.append((pid, None, False))
            elif rng.random() < p:
                ok = None if rng.random() < 0.1 else True
                rows.append((pid, str(rng.choice(["7", "7.0"])), ok))
            else:
                rows.append((pid, rng.choice(["1", "2", "3", None]), False))
    return [rows[i] for i in rng.permutation(len(rows))]


def _reference_counts(rows):
    """counts_from_samples by hand: prompts in id order, each prompt's answers correct count
    first, then count (both descending), then answer."""
    out = []
    for pid in sorted({r[0] for r in rows}):
        mine = [(a, ok) for q, a, ok in rows if q == pid]
        hist = Counter(a for a, _ in mine if a is not None)
        right = Counter(a for a, ok in mine if a is not None and ok)
        order = sorted(hist, key=lambda a: (-right[a], -hist[a], a))
        out.append(
            {
                "prompt_id": pid,
                "n": len(mine),
                "c": sum(1 for _, ok in mine if ok),
                "answer_values": order,
                "answer_counts": [hist[a] for a in order],
                "answer_correct_counts": [right[a] for a in order],
            }
        )
    return out


def _ties_by_answer(row):
    """A counts row with its histogram in the reference order (ties broken by answer)."""
    hist = sorted(
        zip(row["answer_values"], row["answer_counts"], row["answer_correct_counts"], strict=True),
        key=lambda t: (-t[2], -t[1], t[0]),
    )
    values, counts, right = (list(x) for x in zip(*hist, strict=True)) if hist else ([], [], [])
    return {**row, "answer_values": values, "answer_counts": counts, "answer_correct_counts": right}


def _reference_answer_stats(r):
    """docs/estimators.md §6, one prompt at a time from its histogram."""
    counts, right = r["answer_counts"], r["answer_correct_counts"]
    total, c_total = sum(counts), sum(right)
    distinct_correct = sum(1 for x in right if x > 0)
    return {
        "n_answered": total,
        "n_distinct_answers": len(counts),
        "n_distinct_correct": distinct_correct,
        "modal_share": max(counts) / total if total else None,
        "answer_entropy": -sum(k / total * math.log(k / total) for k in counts) if total else None,
        "modal_correct_share_grpo": max(right) / c_total if c_total else None,
        "modal_correct_share_reco": 1 / distinct_correct if distinct_correct else None,
    }


def test_counts_from_samples_with_answers_match_a_reference(data_dir):
    rows = _rows_with_answers(11)
    samples = _samples("r", rows)
    third = samples.num_rows // 3
    for shard, (start, stop) in enumerate([(0, third), (third, 2 * third), (2 * third, samples.num_rows)]):
        _write_shard(Store(data_dir), "r", shard, samples.slice(start, stop - start))
    expected = _reference_counts(rows)
    assert any(not r["answer_values"] for r in expected)  # prompts without any answer
    assert any(len(set(r["answer_counts"])) < len(r["answer_counts"]) for r in expected)  # ties
    counts = finish.counts_from_samples(Store(data_dir), "r")
    got = sorted(counts.to_pylist(), key=lambda g: g["prompt_id"])  # prompts come in the query's order
    # the order within a prompt is fixed up to answers with the same (correct count, count)
    for g, r in zip(got, expected, strict=True):
        assert list(zip(g["answer_correct_counts"], g["answer_counts"], strict=True)) == list(
            zip(r["answer_correct_counts"], r["answer_counts"], strict=True)
        )
    assert [_ties_by_answer(g) for g in got] == expected
    # the same rows in another order give the same table
    flat = Store(data_dir).sample_counts("r", answers=True)
    shuffled = an.counts_from_histogram(flat.take(np.random.default_rng(0).permutation(flat.num_rows)))
    assert sorted((_ties_by_answer(g) for g in shuffled.to_pylist()), key=lambda g: g["prompt_id"]) == expected
    # without answers: the same prompts, n and c (in prompt_id order there)
    plain = finish.counts_from_samples(Store(data_dir), "r", answers=False).to_pylist()
    assert plain == [{k: r[k] for k in ("prompt_id", "n", "c")} for r in expected]
    cfg = an.AnalyzeConfig(group_sizes=(2, 8), estimators=("grpo", "rloo"))
    res = an.analyze(counts, "r", cfg)
    stats_rows = res.prompt_stats.to_pylist()
    assert [s["prompt_id"] for s in stats_rows] == counts.column("prompt_id").to_pylist()
    by_prompt = {s["prompt_id"]: s for s in stats_rows}
    for r in expected:
        for name, value in _reference_answer_stats(r).items():
            want = pytest.approx(value) if value is not None else None
            assert by_prompt[r["prompt_id"]][name] == want, (r["prompt_id"], name)
    # raw answer lists per prompt give the same answer columns
    raw = pa.table(
        {
            "prompt_id": [r["prompt_id"] for r in expected],
            "n": [r["n"] for r in expected],
            "c": [r["c"] for r in expected],
            "answers": [[a for q, a, _ in rows if q == r["prompt_id"]] for r in expected],
            "answers_correct": [[bool(ok) for q, _, ok in rows if q == r["prompt_id"]] for r in expected],
        }
    )
    for x in an.prompt_stats(raw, "r", cfg).to_pylist():
        # the entropy's terms are summed in another order there: equal to the last bit or two
        assert {k: pytest.approx(v) if isinstance(v, float) else v for k, v in x.items()} == by_prompt[x["prompt_id"]]


def test_histogram_rows_with_huge_counts_take_the_unpacked_sort():
    # counts near 2**40 overflow the packed (prompt, correct count, count) key
    big = 2**40
    flat = pa.table(
        {
            "prompt_id": ["b", "a", "b", "a", "b"],
            "a": ["x", "y", None, "z", "w"],
            "cnt": [3, big, 5, big + 1, big],
            "cc": [3, 0, 0, 0, big],
        }
    )
    got = {r["prompt_id"]: r for r in an.counts_from_histogram(flat).to_pylist()}
    assert got["a"] == {
        "prompt_id": "a",
        "n": 2 * big + 1,
        "c": 0,
        "answer_values": ["z", "y"],
        "answer_counts": [big + 1, big],
        "answer_correct_counts": [0, 0],
    }
    assert got["b"]["answer_values"] == ["w", "x"] and (got["b"]["n"], got["b"]["c"]) == (big + 8, big + 3)


def _counts():
    return pa.table(
        {
            "prompt_id": ["a", "b", "c", "d", "e", "f"],
            "n": [8, 8, 3, 64, 64, 0],
            "c": [0, 4, 3, 5, 63, 0],
        }
    )


def test_analyze_tables_match_the_per_prompt_math():
    cfg = an.AnalyzeConfig(group_sizes=(2, 4, 8), estimators=("grpo", "maxrl", "reco_binary", "dapo:mode=resample,T=3"))
    res = an.analyze(_counts(), "run-x", cfg)
    assert res.prompt_stats.schema == schema.PROMPT_STATS
    assert res.weights.schema == schema.WEIGHTS
    assert res.summary.schema == schema.SUMMARY
    ps = {r["prompt_id"]: r for r in res.prompt_stats.to_pylist()}
    for pid, n, c in zip(*(_counts().column(k).to_pylist() for k in ("prompt_id", "n", "c")), strict=False):
        r = ps[pid]
        assert (r["n"], r["c"]) == (n, c)
        assert r["group_sizes"] == [2, 4, 8]
        for j, G in enumerate((2, 4, 8)):
            plus, minus = stats.silent_rates(n, c, G)
            assert r["silent_all_correct"][j] == pytest.approx(float(plus))
            assert r["zero_signal"][j] == pytest.approx(float(plus + minus))
        if n:
            assert r["pass_rate"] == pytest.approx(c / n)
            assert r["pass_at_k"] == pytest.approx([float(stats.pass_at_k(n, c, k)) for k in range(1, n + 1)])
            lo, hi = stats.wilson_interval(n, c)
            assert (r["wilson_lo"], r["wilson_hi"]) == pytest.approx((float(lo), float(hi)))
        else:
            assert r["pass_rate"] is None and r["pass_at_k"] == []
            assert r["zero_signal_plugin"] == [None, None, None]
        assert r["n_distinct_answers"] is None  # no answers in these counts
    assert res.weights.num_rows == 6 * 4 * 3
    for r in res.weights.to_pylist():
        n, c = dict(zip("abcdef", zip([8, 8, 3, 64, 64, 0], [0, 4, 3, 5, 63, 0], strict=False), strict=False))[
            r["prompt_id"]
        ]
        if n == 0:
            assert r["weight"] is None and r["mass"] is None
            continue
        e = est.get(r["estimator"])
        p = c / n
        assert r["p"] == pytest.approx(p)
        assert r["weight"] == pytest.approx(float(e.weight(p, r["G"])))
        assert r["mass"] == pytest.approx(float(e.weight(p, r["G"])) * p * (1 - p))
        assert r["zero_signal"] == pytest.approx(float(stats.zero_signal(n, c, r["G"])))


def test_summary_definitions():
    counts = _counts()
    bands = (an.Band("hard", ((0.0, 0.2, True, False),)), an.Band("rest", ((0.2, 1.0, True, True),)))
    cfg = an.AnalyzeConfig(group_sizes=(4, 8), estimators=("grpo", "sign"), bands=bands)
    s = an.summary(counts, "r", cfg).to_pylist()

    def get(section, metric, **kw):
        hits = [
            r for r in s if r["section"] == section and r["metric"] == metric and all(r[k] == v for k, v in kw.items())
        ]
        assert len(hits) == 1, (section, metric, kw)
        return hits[0]["value"]

    n = np.array([8, 8, 3, 64, 64])  # prompt f has no samples and is left out
    c = np.array([0, 4, 3, 5, 63])
    p = c / n
    pbar = p.mean()
    assert get("dataset", "mean_pass_rate") == pytest.approx(pbar)
    assert get("dataset", "n_prompts") == 6 and get("dataset", "n_prompts_measured") == 5
    for G in (4, 8):
        obs = np.mean([float(stats.zero_signal(a, b, G)) for a, b in zip(n, c, strict=False)])
        iid = pbar**G + (1 - pbar) ** G
        assert get("zero_signal", "observed", G=G) == pytest.approx(obs)
        assert get("zero_signal", "iid", G=G) == pytest.approx(iid)
        assert get("zero_signal", "jensen_gap", G=G) == pytest.approx(obs - iid)
        plug = np.mean(p**G + (1 - p) ** G)
        assert get("zero_signal", "predicted_plugin", G=G) == pytest.approx(plug)
        assert get("zero_signal", "jensen_gap_plugin", G=G) >= 0  # Jensen, on the plug-in
        assert get("dapo", "oversampling_fill", G=G) == pytest.approx(1 / (1 - obs))
        for spec in ("grpo", "sign"):
            m = est.get(spec).mass(p, G)
            hard = m[p < 0.2].sum() / m.sum()
            assert get("gradient_share", "share", estimator=spec, G=G, band="hard") == pytest.approx(hard)
            assert get("gradient_share", "share", estimator=spec, G=G, band="rest") == pytest.approx(1 - hard)
    # mean pass@k over prompts with n >= k
    for k in (1, 3, 5, 64):
        have = n >= k
        expect = np.mean([float(stats.pass_at_k(a, b, k)) for a, b in zip(n[have], c[have], strict=False)])
        assert get("pass_at_k", "mean_pass_at_k", k=k) == pytest.approx(expect)


def test_default_bands_and_jensen_gap_positive_on_u_shaped_data():
    rng = np.random.default_rng(4)
    p = rng.beta(0.3, 0.3, 2000)
    counts = pa.table({"prompt_id": [f"p{i}" for i in range(2000)], "n": np.full(2000, 64), "c": rng.binomial(64, p)})
    s = an.summary(counts, "r").to_pylist()
    gaps = [r["value"] for r in s if r["metric"] == "jensen_gap"]
    assert len(gaps) == 5 and all(g > 0 for g in gaps)
    bands = {b.name: b for b in an.DEFAULT_BANDS}
    np.testing.assert_array_equal(
        bands["hard"].contains(np.array([0.0, 0.1, 0.5, 0.9, 0.95, 1.0])), [True, False, False, False, False, False]
    )
    np.testing.assert_array_equal(
        bands["easy"].contains(np.array([0.0, 0.1, 0.5, 0.9, 0.95, 1.0])), [False, False, False, False, True, True]
    )
    mid = bands["informative_mid"]
    np.testing.assert_array_equal(mid.contains(np.array([0.39, 0.4, 0.6, 0.61])), [False, True, True, False])
    # the five bands cover [0, 1] once each, so every estimator's shares sum to 1 at every G
    grid = np.linspace(0, 1, 1001)
    np.testing.assert_array_equal(sum(b.contains(grid).astype(int) for b in an.DEFAULT_BANDS), np.ones(1001))
    assert all(b.name.split("_")[0] in schema.BANDS for b in an.DEFAULT_BANDS)
    sums: dict = {}
    for r in s:
        if r["section"] == "gradient_share" and r["band"] != "all":
            sums[(r["estimator"], r["G"])] = sums.get((r["estimator"], r["G"]), 0.0) + r["value"]
    assert len(sums) > 10 and all(v == pytest.approx(1.0) for v in sums.values())


def test_raw_answer_lists_equal_histograms():
    rows = _random_rows(3, prompts=12)
    by = {}
    for pid, a, ok in rows:
        by.setdefault(pid, []).append((a, ok))
    raw = pa.table(
        {
            "prompt_id": list(by),
            "n": [len(v) for v in by.values()],
            "c": [sum(ok for _, ok in v) for v in by.values()],
            "answers": [[a for a, _ in v] for v in by.values()],
            "answers_correct": [[ok for _, ok in v] for v in by.values()],
        }
    )
    hist_rows = []
    for v in by.values():
        h = Counter(a for a, _ in v if a is not None)
        hist_rows.append((list(h), list(h.values()), [sum(1 for a2, ok in v if a2 == a and ok) for a in h]))
    hist = pa.table(
        {
            "prompt_id": list(by),
            "n": raw.column("n"),
            "c": raw.column("c"),
            "answer_values": [h[0] for h in hist_rows],
            "answer_counts": [h[1] for h in hist_rows],
            "answer_correct_counts": [h[2] for h in hist_rows],
        }
    )
    a = an.prompt_stats(raw, "r").drop_columns(["pass_at_k"]).to_pylist()
    b = an.prompt_stats(hist, "r").drop_columns(["pass_at_k"]).to_pylist()
    assert a == b
    assert all(r["n_distinct_answers"] is not None for r in a)


@pytest.mark.parametrize(
    "table,match",
    [
        (pa.table({"prompt_id": ["x", "bad"], "n": [3, 2], "c": [1, 3]}), "'bad': c > n"),
        (pa.table({"prompt_id": ["neg"], "n": [-1], "c": [0]}), "'neg': n < 0"),
        (pa.table({"prompt_id": ["x", "nan"], "n": [3.0, float("nan")], "c": [1.0, 1.0]}), "'nan'"),
        (pa.table({"prompt_id": ["frac"], "n": [3.5], "c": [1.0]}), "'frac'"),
        (pa.table({"prompt_id": ["miss"], "n": pa.array([None], pa.int64()), "c": [0]}), "'miss'"),
        (pa.table({"prompt_id": ["dup", "dup"], "n": [3, 3], "c": [1, 1]}), "'dup'"),
        (pa.table({"prompt_id": ["x"], "n": [3]}), "'c'"),
    ],
)
def test_bad_counts_name_the_prompt(table, match):
    with pytest.raises(ValueError, match=match):
        an.analyze(table, "r")


def test_config_validation():
    with pytest.raises(ValueError, match="known: grpo"):
        an.AnalyzeConfig(estimators=("grpo", "nope"))
    with pytest.raises(ValueError, match="G=0"):
        an.AnalyzeConfig(group_sizes=(0,))
    with pytest.raises(ValueError, match="level"):
        an.AnalyzeConfig(level=0)


def test_counts_from_priors_and_store_round_trip(data_dir):
    problems = pa.table(
        {
            "prompt_id": ["p1", "p2", "p3"],
            "prior_n": pa.array([64, None, 64], pa.int32()),
            "prior_c": pa.array([10, None, 64], pa.int32()),
        }
    )
    counts = an.counts_from_priors(problems)
    assert counts.column("n").to_pylist() == [64, 0, 64]
    res = an.analyze(counts, "prior-demo")
    for name in ("prompt_stats", "weights", "summary"):
        Store(data_dir).write_table(name, getattr(res, name), {"run_id": "prior-demo"})
        back = Store(data_dir).read_table(name, {"run_id": "prior-demo"})
        assert back.num_rows == getattr(res, name).num_rows
    got = Store(data_dir).query(
        "SELECT estimator, count(*) AS k FROM weights WHERE G = 8 GROUP BY estimator ORDER BY estimator"
    )
    assert dict(zip(*got.to_pydict().values(), strict=False)) == {est.get(s).spec: 3 for s in est.DEFAULT_ESTIMATORS}


def _reco_brute_force(hist: list[tuple[str, int, int]], G: int) -> tuple[float, float]:
    """(weight, mass) of ReCo at the observed answer shares, by enumerating every group of G:
    ``(1/G) sum_i r_i A_i`` under ``ReCoBinary.advantages(rewards, answers)``, probability-weighted."""
    import itertools

    # each (answer, graded right or wrong) is one category; unanswered samples are one wrong answer
    cats = [(a, True, k) for a, n, k in hist if k] + [(a, False, n - k) for a, n, k in hist if n - k]
    total = sum(w for *_, w in cats)
    reco = est.ReCoBinary()
    mass = 0.0
    for group in itertools.product(range(len(cats)), repeat=G):
        prob = math.prod(cats[i][2] / total for i in group)
        rewards = np.array([1.0 if cats[i][1] else 0.0 for i in group])
        answers = np.array([f"{cats[i][0]}|{cats[i][1]}" for i in group])
        if 0 < rewards.sum() < G:
            mass += prob * float((rewards * reco.advantages(rewards, answers)).mean())
    p = sum(w for _, ok, w in cats if ok) / total
    return mass / (p * (1 - p)), mass


def test_answer_aware_reco_rows_match_brute_force():
    """``reco_answers`` adds, per prompt and G, the exact expected ReCo update at the observed
    answer shares; with a single wrong answer it is the binary proxy's weight."""
    hists = {
        "one-wrong": [("42", 6, 3), ("7", 2, 0)],  # "42" graded right 3 times and wrong 3 times
        "many-wrong": [("42", 3, 3), ("1", 2, 0), ("2", 2, 0), ("3", 1, 0)],
        "two-right-forms": [("1/2", 2, 2), ("0.5", 1, 1), ("3", 4, 0), ("4", 1, 0)],
        "binary": [("5", 5, 5), ("6", 3, 0)],
    }
    rows = []
    for pid, hist in hists.items():
        rows.append(
            {
                "prompt_id": pid,
                "n": sum(n for _, n, _ in hist),
                "c": sum(k for *_, k in hist),
                "answer_values": [a for a, *_ in hist],
                "answer_counts": [n for _, n, _ in hist],
                "answer_correct_counts": [k for *_, k in hist],
            }
        )
    counts = pa.Table.from_pylist(rows)
    cfg = an.AnalyzeConfig(group_sizes=(2, 3, 4), estimators=("grpo", "reco_binary"), reco_answers=(3, 4))
    weights = an.analyze(counts, "r", cfg).weights.to_pylist()
    got = {(r["prompt_id"], r["G"]): r for r in weights if r["estimator"] == an.RECO_ANSWERS}
    assert sorted(got) == sorted((pid, G) for pid in hists for G in (3, 4))
    binary = {(r["prompt_id"], r["G"]): r for r in weights if r["estimator"] == "reco_binary"}
    for (pid, G), row in got.items():
        weight, mass = _reco_brute_force(hists[pid], G)
        assert row["weight"] == pytest.approx(weight, rel=1e-10), (pid, G)
        assert row["mass"] == pytest.approx(mass, rel=1e-10), (pid, G)
        assert row["zero_signal"] == binary[pid, G]["zero_signal"] and row["p"] == binary[pid, G]["p"]
    assert got["binary", 4]["weight"] == pytest.approx(binary["binary", 4]["weight"], rel=1e-12)
    assert got["many-wrong", 4]["weight"] < binary["many-wrong", 4]["weight"]


def test_answer_aware_reco_rows_store_the_monte_carlo_error_where_it_was_used():
    """At G = 64 a histogram with 1,100 distinct wrong answers is past the exact method's cost limit:
    its row alone is Monte Carlo, with ``weight_se`` > 0 and within 5 of it of the exact value; the
    other prompts' rows stay exact, with ``weight_se`` null, as on every other estimator's rows."""
    wide = [("0", 300, 300)] + [(f"w{i}", 1, 0) for i in range(1100)]
    hists = {"wide": wide, "narrow": [("42", 5, 5), ("1", 2, 0), ("2", 1, 0)], "binary": [("5", 5, 5), ("6", 3, 0)]}
    counts = pa.Table.from_pylist(
        [
            {
                "prompt_id": pid,
                "n": sum(n for _, n, _ in hist),
                "c": sum(k for *_, k in hist),
                "answer_values": [a for a, *_ in hist],
                "answer_counts": [n for _, n, _ in hist],
                "answer_correct_counts": [k for *_, k in hist],
            }
            for pid, hist in hists.items()
        ]
    )
    cfg = an.AnalyzeConfig(group_sizes=(8, 64), estimators=("grpo",), reco_answers=(8, 64))
    weights = an.analyze(counts, "r", cfg).weights
    assert weights.schema == schema.WEIGHTS
    rows = weights.to_pylist()
    assert all(r["weight_se"] is None for r in rows if r["estimator"] != an.RECO_ANSWERS)
    got = {(r["prompt_id"], r["G"]): r for r in rows if r["estimator"] == an.RECO_ANSWERS}
    assert sorted(got) == sorted((pid, G) for pid in hists for G in (8, 64))
    for (pid, G), row in got.items():
        x = np.array([[n for _, n, _ in hists[pid]]], float)
        exact = est.reco_answer_weight_from_counts(x, G, n_correct=1, method="exact")
        if (pid, G) == ("wide", 64):
            assert row["weight_se"] > 0
            assert abs(row["weight"] - exact.weight[0]) <= 5 * row["weight_se"]
        else:
            assert row["weight_se"] is None, (pid, G)
            assert row["weight"] == pytest.approx(exact.weight[0], rel=1e-12), (pid, G)


def test_answer_aware_reco_needs_histograms_and_listed_group_sizes():
    with pytest.raises(ValueError, match=r"reco_answers G=\[16\] must be among the group sizes"):
        an.AnalyzeConfig(group_sizes=(4, 8), reco_answers=(16,))
    plain = pa.table({"prompt_id": ["a"], "n": [4], "c": [2]})
    with pytest.raises(ValueError, match="reco_answers needs each prompt's answer histogram"):
        an.analyze(plain, "r", an.AnalyzeConfig(group_sizes=(4,), reco_answers=(4,)))


def test_stored_answer_counts_equal_the_samples_and_stale_ones_are_never_used(data_dir, monkeypatch):
    """Each shard's answer counts, written with it, give the analysis the same histograms as the
    samples; counts from another write of a shard (a kill between the two files) are ignored."""
    import shutil

    rows = _rows_with_answers(7)
    samples = _samples("r", rows)
    half = samples.num_rows // 2  # a prompt may straddle the two shards, as in adaptive rounds
    store = Store(data_dir)
    for shard, part in enumerate([samples.slice(0, half), samples.slice(half)]):
        _write_shard(store, "r", shard, part)
    used = []
    query = Store.files_query
    monkeypatch.setattr(
        Store, "files_query", lambda self, name, *a, **k: used.append(name) or query(self, name, *a, **k)
    )

    def histograms() -> list[dict]:
        return sorted(
            (_ties_by_answer(g) for g in finish.counts_from_samples(store, "r").to_pylist()),
            key=lambda g: g["prompt_id"],
        )

    expected = _reference_counts(rows)
    assert histograms() == expected and used[-1] == "answer_histogram_stored"
    folder = data_dir / "answer_counts" / "run_id=r"
    shutil.copy(folder / "shard-00000.parquet", folder / "shard-00001.parquet")  # another write's counts
    assert histograms() == expected and used[-1] == "answer_histogram"
    (folder / "shard-00001.parquet").unlink()
    assert histograms() == expected and used[-1] == "answer_histogram"
    _write_shard(store, "r", 1, samples.slice(half))  # written again: its counts with it
    assert histograms() == expected and used[-1] == "answer_histogram_stored"
    store.write_shard("r", 1, samples.slice(half))  # without counts: the earlier ones are another write's
    assert histograms() == expected and used[-1] == "answer_histogram"
