"""observe/match and observe/sources: verl rollout dumps, generic tables and dataset labels, read
from real files (DeepScaleR's verl file, GSM8K, MATH-500) and the committed verl dump fixture
(``tests/fixtures/make_verl_dump.py``, verl 0.9.1's own writer)."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from pipeline import datasets
from pipeline.errors import ConfigError, DatasetError
from pipeline.observe import match, record, sources

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "verl_dump"


@pytest.fixture(scope="module")
def deepscaler(shared) -> pa.Table:
    return datasets.load(data_file=shared / "deepscaler" / "verl_train_sub.parquet").problems


@pytest.fixture(scope="module")
def matcher(deepscaler) -> match.Matcher:
    return match.Matcher.from_problems(deepscaler)


@pytest.fixture
def dump(tmp_path) -> Path:
    folder = tmp_path / "rollouts"
    shutil.copytree(FIXTURE, folder)
    return folder


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _expected(path: Path, problems: pa.Table, field: str = "acc") -> dict[str, tuple[int, int]]:
    """Per prompt (n, c) of a dump file, found by brute force: the problem whose text is in the input."""
    texts = {
        datasets.normalize_problem(t): pid
        for t, pid in zip(problems["problem"].to_pylist(), problems["prompt_id"].to_pylist(), strict=True)
    }
    out: dict[str, list[int]] = {}
    for row in _lines(path):
        norm = datasets.normalize_problem(row["input"])
        (pid,) = [p for t, p in texts.items() if t in norm]
        tot = out.setdefault(pid, [0, 0])
        tot[0] += 1
        tot[1] += int(row[field])
    return {k: tuple(v) for k, v in out.items()}


def _counts(obs: pa.Table) -> dict[str, tuple[int, int]]:
    return {
        p: (n, c)
        for p, n, c in zip(obs["prompt_id"].to_pylist(), obs["n"].to_pylist(), obs["c"].to_pylist(), strict=True)
    }


# --- verl dumps ----------------------------------------------------------------------------------


def test_verl_fixture_lands_counts_of_the_source_rows(dump, deepscaler, matcher):
    steps = sources.verl_steps(dump)
    assert [s for s, _ in steps] == [1, 2, 3]
    seen = set()
    for step, path in steps:
        obs, unmatched = sources.read_verl_step(path, step, matcher, source="verl:run-1", model="qwen")
        assert unmatched.num_rows == 0
        assert _counts(obs) == _expected(path, deepscaler)
        assert obs.num_rows == 8 and sum(obs["n"].to_pylist()) == 32
        assert set(obs["step"].to_pylist()) == {step} and set(obs["kind"].to_pylist()) == {"training"}
        assert set(obs["dataset"].to_pylist()) == {"verl-deepscaler-verl_train_sub"}
        seen |= set(obs["c"].to_pylist())
    assert seen > {0, 4}  # the fixture has silent and mixed prompts


def test_rerun_adds_nothing_twice(dump, matcher, store):
    def run() -> int:
        done, written = record.recorded_steps(store, "verl:run-1"), 0
        for step, path in sources.verl_steps(dump):
            if step not in done:
                written += record.write_step(
                    store,
                    "verl:run-1",
                    step,
                    *sources.read_verl_step(path, step, matcher, source="verl:run-1", model="q"),
                )
        return written

    assert run() == 24
    assert run() == 0
    assert record.read_observations(store, "verl:run-1").num_rows == 24
    shutil.copy(dump / "3.jsonl", dump / "4.jsonl")
    text = (dump / "4.jsonl").read_text().replace('"step": 3', '"step": 4')
    (dump / "4.jsonl").write_text(text)
    assert run() == 8
    assert record.recorded_steps(store, "verl:run-1") == {1, 2, 3, 4}


def _two_group_step(dump: Path, uid: bool, blank: bool = False) -> tuple[Path, str]:
    """Step 3 of the fixture (8 prompts, a group of 4 each) with one prompt given a second group of 4,
    all right, after its first (mixed) one; with ``uid``, each group's lines carry verl's uid, and the
    lines are shuffled as verl's batch balancing leaves them."""
    lines = _lines(dump / "3.jsonl")
    first = next(r["input"] for r in lines if 0 < sum(o["acc"] for o in lines if o["input"] == r["input"]) < 4)
    mine = [r for r in lines if r["input"] == first]
    assert len(mine) == 4  # a mixed group
    extra = [{**r, "acc": True, "score": 1.0} for r in mine]
    if uid:
        inputs = list(dict.fromkeys(r["input"] for r in lines))
        for r in lines:
            r["uid"] = f"u{inputs.index(r['input'])}"
        for r in extra:
            r["uid"] = "u-second"
    rows = lines + extra
    if uid:
        rows = rows[1::2] + rows[::2]  # order no longer tells the groups
    path = dump / "3.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" + ("\n" if blank and i == 3 else "") for i, r in enumerate(rows)))
    return path, first


@pytest.mark.parametrize(("uid", "blank"), [(False, False), (True, False), (True, True)])
def test_a_prompt_with_two_groups_in_a_step_keeps_two_groups(dump, matcher, store, uid, blank):
    """By the counts, by uid, and by uid read line by line (a blank line sends the file to Python's reader)."""
    path, first = _two_group_step(dump, uid, blank)
    obs, _ = sources.read_verl_step(path, 3, matcher, source="verl:run-1", model="q")
    pid = matcher.by_chat(first)[0]
    mine = obs.filter(pc.equal(obs["prompt_id"], pid))
    kept = sorted(zip(mine["group_index"].to_pylist(), mine["n"].to_pylist(), mine["c"].to_pylist(), strict=True))
    assert [(g, n) for g, n, _ in kept] == [(0, 4), (1, 4)]
    assert kept[1][2] == 4 and 0 < kept[0][2] < 4  # the all-right group is not merged into the mixed one
    assert obs.num_rows == 9 and set(obs["n"].to_pylist()) == {4}
    # The step's silent share, rebuilt from the stored groups, is the groups' own.
    record.write_step(store, "verl:run-1", 3, obs)
    lines = _lines(path)
    key = "uid" if uid else None
    groups: dict[tuple, list[int]] = {}
    for i, r in enumerate(lines):
        g = groups.setdefault((r["input"], r[key] if key else i // 4 if i >= 32 else -1), [])
        g.append(int(r["acc"]))
    truth = sum(sum(g) in (0, len(g)) for g in groups.values()) / len(groups)
    (row,) = store.query("select groups, prompts, silent from observation_steps").to_pylist()
    assert (row["groups"], row["prompts"]) == (9, 8)
    assert row["silent"] == pytest.approx(truth)


def test_group_numbers_by_counts():
    codes = np.array([0, 1, 0, 1, 1, 0, 1, 1, 1, 1, 1, 0, 2, 2, 2, 2])  # prompt 1: 8 rollouts, others 4
    assert record.group_numbers(codes).tolist() == [0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 0]
    assert record.group_numbers(np.array([0, 0, 0, 1, 1, 1, 1])).tolist() == [0] * 7  # 3 and 4: not one G
    assert record.group_numbers(np.array([0, 0, 1, 1])).tolist() == [0] * 4
    keys = np.array([5, 3, 2, 5, 3, 2])
    assert record.group_codes(np.array([1, 0, 1, 1, 0, 1]), keys).tolist() == [0, 0, 1, 0, 0, 1]


def test_observations_stored_before_groups_still_read(store):
    """A step file written before ``group_index`` existed reads with it null: one group per row."""
    rows = record.observation_rows("verl:old", "training", 2, "d", ["a", "b"], [8, 8], [6, 8], None)
    old = rows.drop_columns(["group_index"])
    store.write_table(record.TABLE, old, {"source": "verl:old"}, record.step_part(2))
    got = record.read_observations(store, "verl:old")
    assert got["group_index"].to_pylist() == [None, None] and got["n"].to_pylist() == [8, 8]
    (row,) = store.query("select groups, silent from observation_steps").to_pylist()
    assert row == {"groups": 2, "silent": 0.5}


def test_dump_of_another_dataset_is_unmatched_with_reasons(dump, shared):
    math500 = match.Matcher.from_problems(datasets.load(data_file=shared / "math500" / "verl_test.parquet").problems)
    obs, unmatched = sources.read_verl_step(dump / "1.jsonl", 1, math500, source="verl:x", model=None)
    assert obs.num_rows == 0
    assert unmatched.num_rows == 32
    assert unmatched["row"].to_pylist() == list(range(32))
    (reason,) = set(unmatched["reason"].to_pylist())
    assert reason == "no problem of verl-math500-verl_test is contained in the chat prompt"
    assert unmatched["text"][0].as_py().startswith("system\n")


def test_gold_answer_mismatch_is_unmatched(dump, matcher):
    rows = _lines(dump / "2.jsonl")
    wrong = rows[0]["input"]
    for row in rows:
        if row["input"] == wrong:
            row["gts"] = "not the gold"
    (dump / "2.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    obs, unmatched = sources.read_verl_step(dump / "2.jsonl", 2, matcher, source="verl:x", model=None)
    assert obs.num_rows == 7 and unmatched.num_rows == 4
    assert all(r.startswith("gold answer 'not the gold' differs from") for r in unmatched["reason"].to_pylist())


def test_last_file_cut_mid_line_is_skipped(dump, matcher, caplog):
    data = (dump / "3.jsonl").read_bytes()
    (dump / "3.jsonl").write_bytes(data[: len(data) // 2])
    with caplog.at_level(logging.WARNING):
        assert sources.read_verl_step(dump / "3.jsonl", 3, matcher, source="verl:x", model=None) is None
    assert "still writing step 3" in caplog.text
    (dump / "3.jsonl").write_bytes(b"")
    assert sources.read_verl_step(dump / "3.jsonl", 3, matcher, source="verl:x", model=None) is None
    assert sources.read_verl_step(dump / "2.jsonl", 2, matcher, source="verl:x", model=None)[0].num_rows == 8


def test_bad_middle_line_is_named(dump, matcher):
    lines = (dump / "2.jsonl").read_text().splitlines(keepends=True)
    lines[4] = lines[4][:50] + "\n"
    (dump / "2.jsonl").write_text("".join(lines))
    with pytest.raises(DatasetError, match=r"2\.jsonl'?: line 5 is not valid JSON"):
        sources.read_verl_step(dump / "2.jsonl", 2, matcher, source="verl:x", model=None)


def _rewrite(path: Path, change) -> None:
    rows = _lines(path)
    for row in rows:
        change(row)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_shaped_score_needs_a_threshold(dump, matcher, deepscaler):
    expected = _expected(dump / "1.jsonl", deepscaler)

    def dapo(row):
        row["score"] = 1.0 if row.pop("acc") else -1.0

    _rewrite(dump / "1.jsonl", dapo)
    with pytest.raises(ConfigError, match=r"shaped score is not correctness.*--score-threshold"):
        sources.read_verl_step(dump / "1.jsonl", 1, matcher, source="verl:x", model=None)
    obs, _ = sources.read_verl_step(dump / "1.jsonl", 1, matcher, source="verl:x", model=None, score_threshold=1.0)
    assert _counts(obs) == expected
    # a named binary field, and 0/1 scores without one
    _rewrite(dump / "2.jsonl", lambda row: row.update(ok=int(row.pop("acc"))))
    obs, _ = sources.read_verl_step(dump / "2.jsonl", 2, matcher, source="verl:x", model=None, correct_field="ok")
    assert _counts(obs) == _expected(dump / "2.jsonl", deepscaler, "ok")
    obs, _ = sources.read_verl_step(dump / "2.jsonl", 2, matcher, source="verl:x", model=None)
    assert _counts(obs) == _expected(dump / "2.jsonl", deepscaler, "score")
    with pytest.raises(ConfigError, match="correct_field='nope' is not a field"):
        sources.read_verl_step(dump / "2.jsonl", 2, matcher, source="verl:x", model=None, correct_field="nope")


def test_duplicate_steps_are_named(dump, matcher):
    shutil.copy(dump / "1.jsonl", dump / "01.jsonl")
    with pytest.raises(DatasetError, match=r"duplicate step 1 in .*01\.jsonl and 1\.jsonl"):
        sources.verl_steps(dump)
    (dump / "01.jsonl").rename(dump / "5.jsonl")
    assert [s for s, _ in sources.verl_steps(dump)] == [1, 2, 3, 5]
    with pytest.raises(DatasetError, match=r"duplicate step: .*5\.jsonl' is step 5 but line 1 is a row of step 1"):
        sources.read_verl_step(dump / "5.jsonl", 5, matcher, source="verl:x", model=None)


# --- generic tables ------------------------------------------------------------------------------


def _write(table: pa.Table, path: Path) -> Path:
    if path.suffix == ".csv":
        pacsv.write_csv(table, path)
    elif path.suffix == ".parquet":
        pq.write_table(table, path)
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in table.to_pylist()))
    return path


@pytest.fixture(scope="module")
def truth(deepscaler) -> list[tuple[int, str, int, str, list[int]]]:
    """(step, prompt_id, dataset index, problem, rewards) of 5 real prompts over 2 steps."""
    rows = deepscaler.slice(0, 5).to_pylist()
    out = []
    for step in (1, 2):
        for k, row in enumerate(rows):
            index = json.loads(row["original"])["extra_info"]["index"]
            out.append(
                (step, row["prompt_id"], index, row["problem"], [int((k + j + step) % 3 == 0) for j in range(4)])
            )
    return out


@pytest.mark.parametrize("suffix", [".csv", ".parquet", ".jsonl"])
@pytest.mark.parametrize("layout", ["counts-prompt_id", "rollouts-index", "rollouts-problem", "polaris"])
def test_generic_table_formats_and_layouts(tmp_path, matcher, truth, suffix, layout):
    if layout == "polaris" and suffix == ".csv":
        return  # CSV holds no lists: the POLARIS layout is Parquet or JSON Lines
    if layout == "counts-prompt_id":
        table = pa.table(
            {
                "step": [t[0] for t in truth],
                "prompt_id": [t[1] for t in truth],
                "n": [4] * len(truth),
                "c": [sum(t[4]) for t in truth],
            }
        )
    elif layout.startswith("rollouts"):
        key = layout.split("-")[1]
        at = 2 if key == "index" else 3
        rows = [{"step": t[0], key: t[at], "reward": r} for t in truth for r in t[4]]
        rows.append({"step": 2, key: 999999 if key == "index" else "What is 1+1?", "reward": 1})
        table = pa.Table.from_pylist(rows)
    else:
        table = pa.table(
            {
                "step": [1, 2],
                "index": [[t[2] for t in truth if t[0] == s for _ in t[4]] for s in (1, 2)],
                "score": [[r for t in truth if t[0] == s for r in t[4]] for s in (1, 2)],
            }
        )
    got = sources.read_table(_write(table, tmp_path / f"obs{suffix}"), matcher, source="table:t", model="m")
    assert sorted(got) == [1, 2]
    for step, (obs, unmatched) in got.items():
        assert _counts(obs) == {t[1]: (4, sum(t[4])) for t in truth if t[0] == step}
        if layout.startswith("rollouts") and step == 2:
            assert unmatched.num_rows == 1 and unmatched["row"].to_pylist() == [40]
            assert (
                "is not a row of" in unmatched["reason"][0].as_py()
                or "not a problem of" in unmatched["reason"][0].as_py()
            )
        else:
            assert unmatched.num_rows == 0


def test_generic_table_bad_layout_and_shaped_reward(tmp_path, matcher):
    path = _write(pa.table({"step": [1], "question": ["x"], "reward": [1]}), tmp_path / "bad.csv")
    with pytest.raises(DatasetError, match=r"columns \['step', 'question', 'reward'\] fit no layout; accepted: counts"):
        sources.read_table(path, matcher, source="table:t", model=None)
    path = _write(pa.table({"step": [1], "index": [0], "reward": [0.5]}), tmp_path / "shaped.csv")
    with pytest.raises(ConfigError, match="--score-threshold"):
        sources.read_table(path, matcher, source="table:t", model=None)
    (obs, _) = sources.read_table(path, matcher, source="table:t", model=None, score_threshold=0.5)[1]
    assert obs["c"].to_pylist() == [1]


# --- labels --------------------------------------------------------------------------------------


def test_bigmath_solve_rate_labels(tmp_path, shared):
    gsm = [json.loads(x) for x in (shared / "gsm8k" / "test.jsonl").read_text().splitlines()[:10]]
    rates = [k / 64 for k in (0, 1, 7, 32, 63, 64, 5, 9, 40)] + [None]
    rows = [
        {
            "problem": g["question"],
            "answer": datasets.gsm8k_gold(g["answer"]),
            "source": "gsm8k",
            "domain": ["math"],
            "llama8b_solve_rate": r,
        }
        for g, r in zip(gsm, rates, strict=True)
    ]
    path = tmp_path / "bigmath.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    problems = datasets.load(data_file=path).problems
    obs, unmatched = sources.read_labels(problems, "llama8b_solve_rate", source="label:bigmath")
    assert obs["n"].to_pylist() == [64] * 9
    assert obs["c"].to_pylist() == [0, 1, 7, 32, 63, 64, 5, 9, 40]
    assert obs["prompt_id"].to_pylist() == problems["prompt_id"].to_pylist()[:9]
    assert set(obs["model"].to_pylist()) == {"Llama-3.1-8B-Instruct"} and set(obs["kind"].to_pylist()) == {"label"}
    assert unmatched["reason"].to_pylist() == ["llama8b_solve_rate is null"] and unmatched["row"].to_pylist() == [9]
    rows[3]["llama8b_solve_rate"] = 0.3
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DatasetError, match=r"row 3 \(prompt \w+\): llama8b_solve_rate=0.3 is not a pass rate of n=64"):
        sources.read_labels(datasets.load(data_file=path).problems, "llama8b_solve_rate", source="label:bigmath")


def test_skywork_model_difficulty_labels(tmp_path, shared):
    rows = pq.read_table(shared / "deepscaler" / "verl_train_sub.parquet").slice(0, 6).to_pylist()
    for k, row in enumerate(rows):
        row["extra_info"]["model_difficulty"] = {
            "DeepSeek-R1-Distill-Qwen-7B": k,
            "DeepSeek-R1-Distill-Qwen-32B": 16 - k,
        }
    path = tmp_path / "skywork.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    problems = datasets.load(data_file=path).problems
    model = "DeepSeek-R1-Distill-Qwen-7B"
    obs, unmatched = sources.read_labels(
        problems, "model_difficulty", source="label:sky", model=model, counts="correct"
    )
    assert obs["c"].to_pylist() == list(range(6)) and obs["n"].to_pylist() == [16] * 6
    assert set(obs["model"].to_pylist()) == {model} and unmatched.num_rows == 0
    obs, _ = sources.read_labels(problems, "model_difficulty", source="label:sky", model=model, counts="wrong")
    assert obs["c"].to_pylist() == [16 - k for k in range(6)]
    with pytest.raises(ConfigError, match="counts='correct'.*counts='wrong'.*no default"):
        sources.read_labels(problems, "model_difficulty", source="label:sky", model=model)
    with pytest.raises(ConfigError, match="pick one with model="):
        sources.read_labels(problems, "model_difficulty", source="label:sky", counts="correct")


def test_named_label_with_n_and_polaris_strings(tmp_path):
    # verl-shaped rows (the project's local adapters read a top-level 'difficulty' as a number)
    rows = [
        {"prompt": [{"role": "user", "content": p}], "reward_model": {"ground_truth": a}, "difficulty": d, "guess": g}
        for p, a, d, g in [("What is 2+3?", "5", "7/8", 0.25), ("What is 4*4?", "16", "0.125", 0.5)]
    ]
    path = tmp_path / "polaris.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    problems = datasets.load(data_file=path).problems
    obs, _ = sources.read_labels(problems, "difficulty", source="label:polaris", model="R1-Distill-7B")
    assert obs["c"].to_pylist() == [7, 1] and obs["n"].to_pylist() == [8, 8]
    obs, _ = sources.read_labels(problems, "guess", source="label:g", n=4)
    assert obs["c"].to_pylist() == [1, 2] and obs["model"].to_pylist() == [None, None]
    with pytest.raises(ConfigError, match="n=None for label 'guess'"):
        sources.read_labels(problems, "guess", source="label:g")
    with pytest.raises(ConfigError, match="name the model"):
        sources.read_labels(problems, "difficulty", source="label:polaris")


# --- the matcher ---------------------------------------------------------------------------------


def test_matcher_exact_values(tmp_path, deepscaler, matcher):
    first = deepscaler.slice(0, 1).to_pylist()[0]
    pid = first["prompt_id"]
    assert matcher.by_id(pid) == (pid, None)
    assert matcher.by_id("0000") == (None, "prompt_id '0000' is not a prompt of verl-deepscaler-verl_train_sub")
    assert matcher.by_index(0) == (pid, None)
    assert matcher.by_index("0") == (pid, None)
    assert matcher.by_index(123456) == (None, "index 123456 is not a row of verl-deepscaler-verl_train_sub")
    assert matcher.by_index("x") == (None, "index 'x' is not an integer")
    assert matcher.by_problem("  " + first["problem"].replace(" ", "\n  ") + " ") == (pid, None)
    assert matcher.by_problem("") == (None, "empty problem text")
    chat = f"system\nYou are a helpful assistant.\nuser\n{first['problem']}\nassistant\n"
    assert matcher.by_chat(chat) == (pid, None)
    assert matcher.by_chat(chat) == (pid, None)  # cached
    assert matcher.check_answer(pid, first["answer"]) is None
    assert matcher.check_answer(pid, None) is None
    # nested problems: the longest contained wins; a problem shorter than the prefix still matches
    short, long = "What is 2+2?", "What is 2+2? Then add 10 to the result and divide by 7."
    path = tmp_path / "tiny.jsonl"
    path.write_text("".join(json.dumps({"problem": p, "answer": a}) + "\n" for p, a in [(short, "4"), (long, "2")]))
    tiny = datasets.load(data_file=path).problems
    ids = dict(zip(tiny["problem"].to_pylist(), tiny["prompt_id"].to_pylist(), strict=True))
    m = match.Matcher.from_problems(tiny)
    assert m.by_chat(f"user\n{long}  Box it.\nassistant\n") == (ids[long], None)
    assert m.by_chat(f"user\n{short} Box it.\nassistant\n") == (ids[short], None)
    assert m.by_chat(None) == (None, "empty chat prompt")
    assert m.by_index(0) == (None, f"{m.dataset} has no row index (extra_info.index) to match by")
    assert m.check_answer(ids[short], 4) is None
    assert m.check_answer(ids[short], "5") == f"gold answer '5' differs from {m.dataset}'s '4' for prompt {ids[short]}"


def test_an_index_of_a_collapsed_duplicate_counts_for_its_problem(tmp_path, shared, deepscaler, matcher):
    """DeepScaleR's verl file: 1,209 rows, 2 problems repeated (1,207 prompts). A log keyed by
    ``extra_info.index`` over every row matches every row, a collapsed row's index to its problem."""
    raw = pq.read_table(shared / "deepscaler" / "verl_train_sub.parquet")
    indices = [e["index"] for e in raw.column("extra_info").to_pylist()]
    assert (raw.num_rows, deepscaler.num_rows, len(set(indices))) == (1209, 1207, 1209)
    collapsed = datasets.collapsed_rows(deepscaler)
    assert len(collapsed) == 2
    for row, pid, _ in collapsed:  # the dropped row's index names the problem it became
        assert matcher.by_index(indices[row]) == (pid, None)
        assert pid in set(deepscaler.column("prompt_id").to_pylist())
    log = pa.table(
        {
            "step": [s for s in (0, 1) for _ in indices],
            "index": indices * 2,
            "n": [8] * (2 * len(indices)),
            "c": [(i * 7 + s) % 9 for s in (0, 1) for i in range(len(indices))],
        }
    )
    got = sources.read_table(_write(log, tmp_path / "log.parquet"), matcher, source="table:dsr", model=None)
    obs = pa.concat_tables([rows for rows, _ in got.values()])
    assert sum(len(miss or []) for _, miss in got.values()) == 0
    assert sum(obs.column("n").to_pylist()) == sum(log.column("n").to_pylist())
    assert sum(obs.column("c").to_pylist()) == sum(log.column("c").to_pylist())
    # a merged problem gets every one of its rows' counts: 8 per row a step
    merged = {pid: 1 + sum(p == pid for _, p, _ in collapsed) for _, pid, _ in collapsed}
    per = {(r["step"], r["prompt_id"]): r["n"] for r in obs.to_pylist()}
    assert all(per[(s, pid)] == 8 * rows for s in (0, 1) for pid, rows in merged.items())
    assert obs.num_rows == 2 * 1207


def test_a_dump_with_uid_missing_on_a_row_is_named(dump, matcher):
    path, _ = _two_group_step(dump, uid=True)
    rows = _lines(path)
    del rows[5]["uid"]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DatasetError, match="uid is missing on row 5"):
        sources.read_verl_step(path, 3, matcher, source="verl:run-1", model="q")
