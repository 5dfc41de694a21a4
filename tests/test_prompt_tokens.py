"""Answer lengths in tokens in a run's tables (docs/tokens.md): ``prompt_stats``' ``tokens_*``
columns and the summary's ``tokens`` section, exactly on a hand-made samples table and against a
plain Python count on random samples; a simulate profile end to end on real MATH-500 problems (the
CLI's line, the report, export); nulls for a run saved from observations."""

from __future__ import annotations

import json
import math
import statistics
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest
from typer.testing import CliRunner

from pipeline import analyze as an
from pipeline import finish, schema, tokens
from pipeline.cli import app
from pipeline.errors import ConfigError
from pipeline.store import Store

runner = CliRunner()
TOKEN_STATS = ("tokens_counted", "tokens_spent", "tokens_per_answer", "tokens_sd", "tokens_right", "tokens_wrong")
TOKEN_STATS += ("tokens_cut", "tokens_expected")


def _samples(rows: list[tuple[str, bool | None, str | None, int | None]]) -> pa.Table:
    """Samples from (prompt_id, correct, finish_reason, n_tokens) rows."""
    idx = Counter()
    out = []
    for pid, ok, reason, length in rows:
        out.append(
            {"run_id": "r", "prompt_id": pid, "sample_idx": idx[pid], "correct": ok, "finish_reason": reason}
            | {"n_tokens": length, "extracted_answer": "7" if ok else "1"}
        )
        idx[pid] += 1
    return pa.Table.from_pylist(out, schema=schema.SAMPLES)


def _write(store: Store, shard: int, samples: pa.Table) -> None:
    store.write_shard("r", shard, samples, answer_counts=an.answer_counts("r", shard, samples))


# a: right 100, 120; wrong 200; cut 256.  b: right 50, right though cut 256, wrong of unknown length.
# c: two ungradable answers of unknown length.  d: one wrong 80.  e: right 40, 60.
HAND = [
    ("a", True, "stop", 100), ("a", True, "stop", 120), ("a", False, "stop", 200), ("a", False, "length", 256),
    ("b", True, "stop", 50), ("b", True, "length", 256), ("b", False, "stop", None),
    ("c", None, None, None), ("c", None, None, None),
    ("d", False, "stop", 80),
    ("e", True, "stop", 40), ("e", True, None, 60),
]  # fmt: skip


def test_token_columns_and_summary_by_hand(data_dir):
    store = Store(data_dir)
    _write(store, 0, _samples(HAND[:6]))
    _write(store, 1, _samples(HAND[6:]))
    analysis = finish.analyze_run(store, "r")
    got = {r["prompt_id"]: r for r in analysis.prompt_stats.to_pylist()}
    want = {  # counted, spent, per answer, sd, right, wrong, cut
        "a": (4, 676, 169.0, statistics.stdev([100, 120, 200, 256]), 110.0, 200.0, 256.0),
        "b": (2, 306, 153.0, statistics.stdev([50, 256]), 153.0, None, None),
        "c": (0, None, None, None, None, None, None),
        "d": (1, 80, 80.0, None, None, 80.0, None),
        "e": (2, 100, 50.0, statistics.stdev([40, 60]), 50.0, None, None),
    }
    for pid, values in want.items():
        row = tuple(got[pid][name] for name in TOKEN_STATS[:-1])
        assert row == pytest.approx(values, rel=1e-12), pid
    assert [got[p]["truncated_share"] for p in "ab"] == [0.25, pytest.approx(1 / 3)]
    # the price: the prior fitted to the four measured prompts, the unmeasured one at its mean
    k = np.array([4, 2, 0, 1, 2])
    x = np.array([169.0, 153.0, 0.0, 80.0, 50.0])
    sd = np.array([got[p]["tokens_sd"] or 0.0 for p in "abcde"])
    prior = tokens.fit_length_prior(k, x, sd)
    assert prior.m == pytest.approx(1162 / 9)
    assert got["c"]["tokens_expected"] == pytest.approx(1162 / 9)
    expected = tokens.expected_tokens(k, x, sd)
    assert [got[p]["tokens_expected"] for p in "abcde"] == pytest.approx(expected.tolist())

    rows = [r for r in analysis.summary.to_pylist() if r["section"] == "tokens"]
    summary = {(r["metric"], r["band"]): (r["value"], r["n_prompts"]) for r in rows}
    right, wrong = (100 + 120 + 50 + 256 + 40 + 60) / 6, (200 + 80) / 2
    informative, easy = (676 + 306) / 6, 100 / 2  # a (2 of 4) and b (2 of 3); e (2 of 2)
    assert summary == {
        ("tokens_spent", None): (1162, 4),
        ("tokens_counted", None): (9, 4),
        ("tokens_per_answer", None): (pytest.approx(1162 / 9), 4),
        ("tokens_right", None): (pytest.approx(right), 3),
        ("tokens_wrong", None): (pytest.approx(wrong), 2),
        ("tokens_cut", None): (256, 1),
        ("wrong_to_right", None): (pytest.approx(wrong / right), 4),
        ("tokens_per_answer", "hard"): (80, 1),  # d; c has no length
        ("spent_share", "hard"): (pytest.approx(80 / 1162), 1),
        ("tokens_per_answer", "informative"): (pytest.approx(informative), 2),
        ("spent_share", "informative"): (pytest.approx(982 / 1162), 2),
        ("tokens_per_answer", "easy"): (50, 1),
        ("spent_share", "easy"): (pytest.approx(100 / 1162), 1),
        ("informative_to_easy", None): (pytest.approx(informative / easy), 3),
    }
    # a negative length is bad input, named
    bad = an.with_tokens(finish.counts_from_samples(store, "r"), finish.token_counts(store, "r"))
    spent = bad.column("tokens_spent").to_pylist()
    at = bad.column("prompt_id").to_pylist().index("a")  # the counts' row order is the store's
    spent[at] = -1
    bad = bad.set_column(bad.column_names.index("tokens_spent"), "tokens_spent", pa.array(spent))
    with pytest.raises(ConfigError, match=r"prompt 'a': tokens_spent=-1 is negative"):
        an.analyze(bad, "r")


def test_token_columns_match_a_plain_count_on_random_samples(data_dir):
    """Random samples in three shards: lengths known or not, answers right, wrong, ungradable, cut
    or not; every column against a per-prompt Python computation."""
    rng = np.random.default_rng(7)
    rows = []
    for i in range(60):
        p, cut, unknown = rng.beta(0.5, 0.5), rng.beta(0.5, 2), rng.choice([0.0, 0.3])
        for _ in range(int(rng.integers(1, 25))):
            ok = bool(rng.random() < p)
            reason = "length" if rng.random() < cut else str(rng.choice(["stop", "eos"]))
            length = None if rng.random() < unknown else int(rng.gamma(4, 100))
            rows.append((f"q{i:02d}", None if not ok and rng.random() < 0.2 else ok, reason, length))
    order = rng.permutation(len(rows))
    samples = _samples([rows[i] for i in order])
    store = Store(data_dir)
    third = len(rows) // 3
    for shard, (lo, hi) in enumerate([(0, third), (third, 2 * third), (2 * third, len(rows))]):
        _write(store, shard, samples.slice(lo, hi - lo))
    got = {r["prompt_id"]: r for r in finish.analyze_run(store, "r").prompt_stats.to_pylist()}

    def mean(values):
        return sum(values) / len(values) if values else None

    assert len(got) == 60
    for pid, r in got.items():
        known = [(ok, reason, n) for p, ok, reason, n in rows if p == pid and n is not None]
        lengths = [n for _, _, n in known]
        assert r["tokens_counted"] == len(lengths)
        assert r["tokens_spent"] == (sum(lengths) if lengths else None)
        assert r["tokens_per_answer"] == pytest.approx(mean(lengths))
        assert r["tokens_sd"] == (pytest.approx(statistics.stdev(lengths), rel=1e-9) if len(lengths) > 1 else None)
        assert r["tokens_right"] == pytest.approx(mean([n for ok, _, n in known if ok]))
        assert r["tokens_wrong"] == pytest.approx(mean([n for ok, reason, n in known if not ok and reason != "length"]))
        assert r["tokens_cut"] == pytest.approx(mean([n for ok, reason, n in known if not ok and reason == "length"]))


def test_a_run_saved_from_observations_has_no_lengths(tmp_path, data_dir):
    """``current --save`` stores counts without answers: every token column null, no tokens section."""
    assert runner.invoke(app, ["load", "arithmetic", "--limit", "2"]).exit_code == 0
    ids = Store(data_dir).read_table("problems").column("prompt_id").to_pylist()
    table = tmp_path / "rewards.csv"
    table.write_text("step,prompt_id,reward\n" + "".join(f"1,{ids[i]},{r}\n" for i in (0, 1) for r in (1, 0, 0)))
    assert runner.invoke(app, ["track", str(table), "--dataset", "arithmetic"]).exit_code == 0
    out = runner.invoke(app, ["current", "--dataset", "arithmetic", "--save"])
    assert out.exit_code == 0, out.output
    run_id = out.stdout.split()[1].rstrip(":")
    store = Store(data_dir)
    for analysis in (finish.analysis_of_run(store, run_id)[0], finish.analyze_run(store, run_id)):
        stats = analysis.prompt_stats
        assert stats.num_rows == 2 and stats.column("n").to_pylist() == [3, 3]
        assert all(stats.column(name).null_count == 2 for name in TOKEN_STATS)
        assert "tokens" not in analysis.summary.column("section").to_pylist()


def test_a_simulate_profile_carries_tokens_end_to_end(shared, tmp_path, data_dir):
    """20 MATH-500 problems x 8 on simulate: each answer's length is its completion's word count, so
    the columns are checked against the samples themselves; the CLI prints the line, the report
    shows the table, export writes the two fields."""
    args = ["profile", "--backend", "simulate", "--no-prefect", "--grade-workers", "1"]
    out = runner.invoke(app, [*args, "--data-file", str(shared / "math500" / "test.jsonl"), "--limit", "20"])
    assert out.exit_code == 0, out.output
    store = Store(data_dir)
    run_id = store.list_runs().column("run_id")[0].as_py()
    samples = store.read_table("samples", {"run_id": run_id}).to_pylist()
    assert len(samples) == 20 * 8 and all(s["n_tokens"] == len(s["completion"].split()) for s in samples)
    stats = {r["prompt_id"]: r for r in store.read_table("prompt_stats", {"run_id": run_id}).to_pylist()}
    for pid, r in stats.items():
        mine = [s for s in samples if s["prompt_id"] == pid]
        right = [s["n_tokens"] for s in mine if s["correct"]]
        assert r["tokens_counted"] == 8 and r["tokens_spent"] == sum(s["n_tokens"] for s in mine)
        assert r["tokens_right"] == (pytest.approx(sum(right) / len(right)) if right else None)
        assert r["tokens_cut"] is None  # a one-line answer fits the token limit
    total = sum(s["n_tokens"] for s in samples)
    assert f"tokens: {total:,} spent, {total / 160:,.1f} per answer" in out.stdout
    report = (data_dir / "reports" / f"{run_id}.html").read_text()
    assert "Tokens by difficulty band" in report
    target = tmp_path / "out.jsonl"
    assert runner.invoke(app, ["export", "--run", run_id, "--output", str(target)]).exit_code == 0
    for line in target.read_text().splitlines():
        m = json.loads(line)["difficulty"]
        assert m["tokens_per_answer"] == pytest.approx(stats[m["prompt_id"]]["tokens_per_answer"])
        assert m["tokens_expected"] == pytest.approx(stats[m["prompt_id"]]["tokens_expected"])
        assert math.isfinite(m["tokens_expected"])
