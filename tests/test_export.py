"""``difficulty export``: a run's dataset back in its own format, original fields intact, with the
run's measurements; loaded again, the same prompt ids. Real files from ``../shared/data``: 20
MATH-500 problems and 20 DeepScaleR problems in verl's format with the simulate backend, 5 GSM8K
problems with the bundled model.

verl's reader (volcengine/verl ``verl/utils/dataset/rl_dataset.py``, ``RLHFDataset``): reads each
file with ``datasets.load_dataset("parquet", data_files=...)["train"]``, takes ``prompt`` (its
``prompt_key``) as the chat messages of ``tokenizer.apply_chat_template``, and reads
``row_dict.get("extra_info", {}).get("index", 0)`` (also ``tools_kwargs``, ``interaction_kwargs``);
its reward manager (``verl/workers/reward_manager/naive.py``) reads
``non_tensor_batch["reward_model"]["ground_truth"]``, ``non_tensor_batch["data_source"]`` and
passes ``extra_info`` to the score function. ``check_verl_row`` asserts exactly these.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import datasets as hf
import pyarrow.parquet as pq
import pytest
import trl_fixtures as tf
from typer.testing import CliRunner

from pipeline import analyze, datasets, finish
from pipeline.cli import app
from pipeline.errors import ConfigError
from pipeline.export import FIELD, MEASUREMENT, ExportConfig, export_run, read_metadata
from pipeline.schema import band_of
from pipeline.store import Store

runner = CliRunner()


def _cli(*args: str):
    out = runner.invoke(app, list(args))
    assert out.exit_code == 0, out.output + (out.stderr or "")
    return out


def _profile(store: Store, data_file: Path, *extra: str) -> str:
    """Profile with the simulate backend and return the run id."""
    args = ["profile", "--backend", "simulate", "--no-prefect", "--data-file", str(data_file)]
    _cli(*args, "--grade-workers", "1", "--no-report", "--data-dir", str(store.root), *extra)
    runs = store.list_runs().to_pylist()
    assert runs[0]["status"] == "done"
    return runs[0]["run_id"]


@pytest.fixture(scope="module")
def math_run(shared, tmp_path_factory) -> tuple[Store, str]:
    store = Store.open(tmp_path_factory.mktemp("math") / "data")
    return store, _profile(store, shared / "math500/test.jsonl", "--limit", "20", "--n", "8")


@pytest.fixture(scope="module")
def verl_run(shared, tmp_path_factory) -> tuple[Store, str]:
    store = Store.open(tmp_path_factory.mktemp("verl") / "data")
    return store, _profile(store, shared / "deepscaler/verl_train_sub.parquet", "--limit", "20", "--n", "8")


def _stats(store: Store, run_id: str) -> dict[str, dict]:
    table = finish.analysis_of_run(store, run_id)[0].prompt_stats
    return {r["prompt_id"]: r for r in table.to_pylist()}


def _flat_silence(n: int, c: int, G: int) -> tuple[float, float]:
    """A group of G all right, all wrong, under the flat prior's posterior Beta(1 + c, 1 + n - c):
    E[p^G] = prod_{j<G} (1 + c + j) / (2 + n + j), written out here."""
    right = math.prod((1 + c + j) / (2 + n + j) for j in range(G))
    wrong = math.prod((1 + n - c + j) / (2 + n + j) for j in range(G))
    return right, wrong


def _check_measure(m: dict, stats: dict, G: int, simulated: bool = True) -> None:
    assert set(m) == set(MEASUREMENT.names)
    s = stats[m["prompt_id"]]
    assert m["run_id"] == s["run_id"]
    assert (m["answers_drawn"], m["answers_correct"], m["status"], m["G"]) == (s["n"], s["c"], "ok", G)
    assert m["pass_rate"] == pytest.approx(s["c"] / s["n"])
    assert m["interval_lo"] <= m["pass_rate"] <= m["interval_hi"] and m["interval_level"] == 0.95
    right, wrong = _flat_silence(s["n"], s["c"], G)
    assert m["zero_signal"] == pytest.approx(right + wrong) and m["zero_signal"] > 0
    hard = "truncated" if s["truncated"] else "hard"  # a would-be hard prompt cut off by the token limit
    # no right answer is hard and no wrong one easy, whatever a group of G would likely hold
    c, n = s["c"], s["n"]
    assert m["band"] == (hard if c == 0 or wrong >= 0.5 else "easy" if c == n or right >= 0.5 else "informative")
    assert m["truncated_share"] == s["truncated_share"]
    if simulated:
        assert s["truncated_share"] == 0.0  # the simulated answers fit the token limit
    assert m["undecided"] is None  # a fixed-n run decides nothing
    assert m["allocated_rollouts"] >= 2  # the profile's default allocation


def check_verl_row(row: dict, key: str) -> dict:
    """What verl's RLHFDataset and reward manager read from a row (see the module docstring)."""
    messages = row["prompt"]
    assert isinstance(messages, list) and messages
    assert all(set(m) >= {"role", "content"} and isinstance(m["content"], str) for m in messages)
    assert isinstance(row["reward_model"]["ground_truth"], str) and row["reward_model"]["ground_truth"]
    assert isinstance(row["data_source"], str)
    extra = row["extra_info"]
    assert isinstance(extra, dict) and isinstance(extra.get("index", 0), int)
    assert extra.get("tools_kwargs", {}) in ({}, None)
    assert row["prompt_id"] == extra[key]["prompt_id"]  # top level too: what the recorder and curricula key on
    return extra[key]


# --- MATH-500 (JSON Lines) ----------------------------------------------------------------------


def test_math500_jsonl_export_round_trips(math_run, shared, tmp_path):
    store, run_id = math_run
    key = FIELD
    stats = _stats(store, run_id)
    # the source's folder and file name: loaded again, the same dataset name (a generic stem such as
    # ``test`` is named with its folder, datasets.local_name)
    out = tmp_path / "out" / "math500" / "test.jsonl"
    cli = _cli("export", "--run", run_id, "--output", str(out), "--data-dir", str(store.root))
    assert "dataset local-math500-test has 20 rows" in cli.stdout and "wrote 20 rows" in cli.stdout
    assert "left out 0 rows" in cli.stdout
    source = (shared / "math500/test.jsonl").read_text(encoding="utf-8").splitlines()[:20]
    lines = out.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 20
    for line, original in zip(lines, source, strict=True):
        # byte for byte: the original line, then the measurements as the last field
        assert line.startswith(original.strip()[:-1]) and line.endswith("}}")
        row = json.loads(line)
        assert list(row)[-2:] == ["prompt_id", "difficulty"]
        measure = row.pop(key)
        _check_measure(measure, stats, 8)
        assert row.pop("prompt_id") == measure["prompt_id"]
        assert row == json.loads(original)
    assert read_metadata(out)["run_id"] == run_id and read_metadata(out)["model"] == "simulate"
    # loaded again with the same command: the same prompt ids, in the same order
    again = tmp_path / "again"
    _cli("load", "--data-file", str(out), "--data-dir", str(again))
    ids = Store(again).read_table("problems").column("prompt_id").to_pylist()
    assert ids == store.read_table("problems", {"dataset": "local-math500-test"}).column("prompt_id").to_pylist()
    assert set(ids) == set(stats)
    hf_rows = hf.load_dataset("json", data_files=str(out), cache_dir=str(tmp_path / "hf"))["train"]
    assert hf_rows.num_rows == 20 and {key, "prompt_id"} <= set(hf_rows.column_names)


def test_filters_partition_the_rows_and_list_what_they_leave_out(math_run, tmp_path):
    store, run_id = math_run
    key = FIELD
    bands = {pid: band_of(s["pass_rate"], 0.0, 1.0) for pid, s in _stats(store, run_id).items()}
    written: dict[str, set] = {}
    for keep in ("informative", "easy", "hard"):
        want = {pid for pid, b in bands.items() if b == keep}
        out, excl = tmp_path / f"{keep}.parquet", tmp_path / f"{keep}.txt"
        if not want:  # a filter that keeps nothing is an error, and no file is written
            args = ["export", "--run", run_id, "--output", str(out), "--keep", keep, "--data-dir", str(store.root)]
            bad = runner.invoke(app, args)
            assert bad.exit_code == 1 and "keeps none of the 20 rows" in bad.stderr and not out.exists()
            written[keep] = set()
            continue
        args = ["--keep", keep, "--exclude-list", str(excl), "--data-dir", str(store.root)]
        cli = _cli("export", "--run", run_id, "--output", str(out), *args)
        assert f"wrote {len(want)} rows" in cli.stdout and f"left out {20 - len(want)} rows" in cli.stdout
        table = pq.read_table(out)
        got = {m["prompt_id"] for m in table.column(key).to_pylist()}
        assert table.column("prompt_id").to_pylist() == [m["prompt_id"] for m in table.column(key).to_pylist()]
        assert got == want and {m["band"] for m in table.column(key).to_pylist()} == {keep}
        assert set(excl.read_text().split()) == set(bands) - want
        written[keep] = got
    assert set().union(*written.values()) == set(bands)  # every row in exactly one band
    # --band alone keeps the informative band between its edges
    out = tmp_path / "band.parquet"
    _cli("export", "--run", run_id, "--output", str(out), "--band", "0.2,0.8", "--data-dir", str(store.root))
    rates = [m["pass_rate"] for m in pq.read_table(out).column(key).to_pylist()]
    assert rates and all(0.2 < p < 0.8 for p in rates)
    assert len(rates) == sum(0.2 < s["pass_rate"] < 0.8 for s in _stats(store, run_id).values())
    # no pass rate c/8 lies strictly between 0.5 and 0.52: nothing kept, counts named
    bad = runner.invoke(
        app,
        ["export", "--run", run_id, "--output", str(tmp_path / "x.jsonl"), "--band", "0.5,0.52"]
        + ["--data-dir", str(store.root)],
    )
    assert bad.exit_code == 1 and not (tmp_path / "x.jsonl").exists()
    assert "keeps none of the 20 rows of dataset local-math500-test (" in bad.stderr and "nothing written" in bad.stderr


def test_math_run_exported_in_verl_format(math_run, tmp_path):
    store, run_id = math_run
    key = FIELD
    out = tmp_path / "math500_verl.parquet"
    _cli("export", "--run", run_id, "--format", "verl", "--output", str(out), "--data-dir", str(store.root))
    rows = hf.load_dataset("parquet", data_files=str(out), cache_dir=str(tmp_path / "hf"))["train"]
    assert rows.num_rows == 20
    template = store.get_run(run_id).prompt_template
    problems = store.read_table("problems", {"dataset": "local-math500-test"}).to_pylist()
    for row, problem in zip(rows, problems, strict=True):
        measure = check_verl_row(row, key)
        assert measure["prompt_id"] == problem["prompt_id"]
        assert row["prompt"][0]["content"] == template.replace("{problem}", problem["problem"].strip()).rstrip()
        assert row["reward_model"]["ground_truth"] == problem["answer"]
        original = datasets.original_row(problem["original"])
        assert {k: row["extra_info"][k] for k in original} == original  # every original field, under extra_info
    # loaded again, a verl file: its problem is the rendered prompt, so these are new ids (docs/guide/formats.md)
    assert datasets.detect_adapter(pq.read_schema(out).names) == "verl"


# --- TRL's format and the stable field -------------------------------------------------------------


def test_trl_export_is_what_grpo_trainer_reads(math_run, tmp_path):
    """``--format trl``: ``prompt`` (the messages the run sent), ``answer`` (the gold answer graded
    against), ``prompt_id`` and ``difficulty`` first, then every original field."""
    store, run_id = math_run
    stats = _stats(store, run_id)
    out = tmp_path / "math500_trl.parquet"
    cli = _cli("export", "--run", run_id, "--format", "trl", "--output", str(out), "--data-dir", str(store.root))
    assert "(trl; prompt_id at the top level, measurements in field 'difficulty')" in cli.stdout
    rows = hf.load_dataset("parquet", data_files=str(out), cache_dir=str(tmp_path / "hf"))["train"]
    assert rows.column_names[:4] == ["prompt", "answer", "prompt_id", "difficulty"]
    template = store.get_run(run_id).prompt_template
    problems = store.read_table("problems", {"dataset": "local-math500-test"}).to_pylist()
    for row, problem in zip(rows, problems, strict=True):
        assert row["prompt"] == [
            {"role": "user", "content": template.replace("{problem}", problem["problem"].strip()).rstrip()}
        ]
        assert row["answer"] == problem["answer"] and row["prompt_id"] == problem["prompt_id"]
        _check_measure(row["difficulty"], stats, 8)
        original = datasets.original_row(problem["original"])
        kept = {k: row[k] for k in original if k != "answer"}
        assert kept == {k: v for k, v in original.items() if k != "answer"}
        # MATH-500's own answer is the gold answer, or kept under another name where it is not
        assert original["answer"].strip() == row["answer"] or row["original_answer"] == original["answer"]
    assert read_metadata(out)["format"] == "trl" and read_metadata(out)["field"] == "difficulty"


def test_the_field_name_never_depends_on_the_run(shared, tmp_path):
    """Two runs of one dataset export under the same names (the run id is inside the field); a
    dataset with a ``difficulty`` field of its own is an error naming ``--field``, which renames it."""
    store = Store.open(tmp_path / "data")
    source = tmp_path / "rated.jsonl"
    lines = (shared / "math500/test.jsonl").read_text(encoding="utf-8").splitlines()[:6]
    source.write_text("".join(json.dumps({**json.loads(x), "difficulty": i % 3}) + "\n" for i, x in enumerate(lines)))
    runs = [_profile(store, source, "--n", str(n)) for n in (4, 8)]
    assert runs[0] != runs[1]
    bad = runner.invoke(
        app, ["export", "--run", runs[0], "--output", str(tmp_path / "x.parquet")] + ["--data-dir", str(store.root)]
    )
    assert bad.exit_code == 1 and "its rows have a field 'difficulty' of their own" in bad.stderr
    assert "--field NAME" in bad.stderr and not (tmp_path / "x.parquet").exists()
    tables = []
    for run_id in runs:
        out = tmp_path / f"{run_id}.parquet"
        _cli("export", "--run", run_id, "--field", "pass_stats", "--output", str(out), "--data-dir", str(store.root))
        tables.append(pq.read_table(out))
    assert tables[0].column_names == tables[1].column_names
    assert tables[0].column_names[-2:] == ["prompt_id", "pass_stats"]
    assert tables[0].column("difficulty").to_pylist() == [i % 3 for i in range(6)]  # the dataset's own, untouched
    for table, run_id, n in zip(tables, runs, (4, 8), strict=True):
        assert {(m["run_id"], m["answers_drawn"]) for m in table.column("pass_stats").to_pylist()} == {(run_id, n)}
    with pytest.raises(ConfigError, match="field='prompt_id'"):
        ExportConfig(field="prompt_id")


def test_a_rebuilt_row_keeps_its_label_apart(data_dir, tmp_path):
    """The bundled arithmetic set has no stored original row: its tier label is written as
    ``difficulty_label``, beside the measurements' ``difficulty``; exported again, replaced, not an error."""
    store = Store.open(data_dir)
    _cli("profile", "--backend", "simulate", "--no-prefect", "--limit", "9", "--n", "4", "--no-report")
    run_id = store.list_runs().column("run_id")[0].as_py()
    out = tmp_path / "arith.jsonl"
    _cli("export", "--run", run_id, "--output", str(out))
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    tiers = store.read_table("problems", {"dataset": "arithmetic"}).column("difficulty").to_pylist()
    assert [r["difficulty_label"] for r in rows] == tiers
    assert all(r["difficulty"]["run_id"] == run_id and r["prompt_id"] == r["difficulty"]["prompt_id"] for r in rows)
    again = tmp_path / "again"
    _cli("load", "--data-file", str(out), "--data-dir", str(again))
    reloaded = Store(again).read_table("problems").column("dataset")[0].as_py()
    # the export of the export: its earlier measurements replaced, not an error
    run2 = _profile(Store(again), out, "--n", "4")
    assert Store(again).get_run(run2).dataset == reloaded
    twice = tmp_path / "twice.jsonl"
    _cli("export", "--run", run2, "--output", str(twice), "--data-dir", str(again))
    rows2 = [json.loads(line) for line in twice.read_text().splitlines()]
    assert {r["difficulty"]["run_id"] for r in rows2} == {run2}
    assert [list(r)[-2:] for r in rows2] == [["prompt_id", "difficulty"]] * len(rows)


# --- DeepScaleR in verl's format ------------------------------------------------------------------


def test_verl_export_is_what_verl_reads_and_keeps_every_field(verl_run, shared, tmp_path):
    store, run_id = verl_run
    run = store.get_run(run_id)
    assert run.dataset == "verl-deepscaler-verl_train_sub" and run.prompt_template == "{messages}"
    key = FIELD
    stats = _stats(store, run_id)
    out = tmp_path / "out" / "deepscaler" / "verl_train_sub.parquet"
    cli = _cli("export", "--run", run_id, "--output", str(out), "--G", "4", "--data-dir", str(store.root))
    assert f"(verl; prompt_id at the top level, measurements in extra_info['{key}'])" in cli.stdout
    source = pq.read_table(shared / "deepscaler/verl_train_sub.parquet").slice(0, 20).to_pylist()
    # pyarrow and datasets (verl's own reader) read the same rows
    table = pq.read_table(out)
    rows = hf.load_dataset("parquet", data_files=str(out), cache_dir=str(tmp_path / "hf"))["train"]
    assert table.num_rows == rows.num_rows == 20
    assert table.to_pylist() == list(rows)
    for row, original in zip(rows, source, strict=True):
        measure = check_verl_row(row, key)
        _check_measure(measure, stats, 4)
        extra = dict(row["extra_info"])
        extra.pop(key)
        assert extra == original["extra_info"]
        assert {k: v for k, v in row.items() if k not in ("extra_info", "prompt_id")} == {
            k: v for k, v in original.items() if k != "extra_info"
        }
    meta = read_metadata(out)
    assert (meta["run_id"], meta["model"], meta["G"], meta["format"]) == (run_id, "simulate", 4, "verl")
    assert meta["allocation"]["default"] is True and meta["rows"]["written"] == 20
    # loaded again with the same command: the same ids, the measurements kept in extra_info
    again = tmp_path / "again"
    _cli("load", "--data-file", str(out), "--data-dir", str(again))
    reloaded = Store(again).read_table("problems", {"dataset": "verl-deepscaler-verl_train_sub"})
    ids = store.read_table("problems", {"dataset": "verl-deepscaler-verl_train_sub"}).column("prompt_id").to_pylist()
    assert reloaded.column("prompt_id").to_pylist() == ids and set(ids) == set(stats)
    first = datasets.original_row(reloaded.column("original")[0].as_py())
    assert first["extra_info"][key]["prompt_id"] == reloaded.column("prompt_id")[0].as_py()


def test_verl_filters_and_the_exclude_list(verl_run, tmp_path):
    store, run_id = verl_run
    key = FIELD
    stats = _stats(store, run_id)
    informative = {p for p, s in stats.items() if 0 < s["c"] < s["n"]}
    out, excl = tmp_path / "informative.parquet", tmp_path / "left.txt"
    args = ["--keep", "informative", "--exclude-list", str(excl), "--data-dir", str(store.root)]
    cli = _cli("export", "--run", run_id, "--output", str(out), *args)
    kept = [r["extra_info"][key]["prompt_id"] for r in pq.read_table(out).to_pylist()]
    assert set(kept) == informative and 0 < len(kept) < 20
    assert set(excl.read_text().split()) == set(stats) - informative
    assert f"exclude list: {excl} ({20 - len(kept)} prompt ids)" in cli.stdout


def test_bad_export_requests_are_named(verl_run, tmp_path):
    store, run_id = verl_run
    with pytest.raises(ConfigError, match="verl reads Parquet"):
        export_run(store, run_id, tmp_path / "x.jsonl", ExportConfig(format="verl"))
    with pytest.raises(ConfigError, match="keep='some'"):
        ExportConfig(keep="some")
    with pytest.raises(ConfigError, match="band"):
        ExportConfig(band=(0.9, 0.1))
    args = ["export", "--run", "nope", "--output", str(tmp_path / "y.parquet"), "--data-dir", str(store.root)]
    out = runner.invoke(app, args)
    assert out.exit_code == 1 and "unknown run 'nope'" in out.stderr


# --- GSM8K with the bundled model -----------------------------------------------------------------


@pytest.mark.slow
def test_gsm8k_with_the_bundled_model_round_trips(shared, tmp_path, close_engines):
    store = Store.open(tmp_path / "data")
    args = ["profile", "--dataset", "gsm8k", "--data-file", str(shared / "gsm8k/test.jsonl"), "--limit", "5"]
    args += ["--n", "2", "--max-tokens", "16", "--grade-workers", "1", "--no-report", "--no-prefect"]
    _cli(*args, "--data-dir", str(store.root))
    run_id = store.list_runs().column("run_id")[0].as_py()
    out = tmp_path / "gsm8k.jsonl"
    _cli("export", "--run", run_id, "--format", "jsonl", "--output", str(out), "--data-dir", str(store.root))
    key = FIELD
    stats = _stats(store, run_id)
    source = (shared / "gsm8k/test.jsonl").read_text(encoding="utf-8").splitlines()[:5]
    lines = out.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 5
    for line, original in zip(lines, source, strict=True):
        assert line.startswith(original.strip()[:-1])
        row = json.loads(line)
        measure = row.pop(key)
        _check_measure(measure, stats, 8, simulated=False)
        assert row.pop("prompt_id") == measure["prompt_id"]
        assert row == json.loads(original)
    again = tmp_path / "again"
    _cli("load", "gsm8k", "--data-file", str(out), "--data-dir", str(again))
    ids = store.read_table("problems", {"dataset": "gsm8k"}).column("prompt_id").to_pylist()
    assert Store(again).read_table("problems").column("prompt_id").to_pylist() == ids and set(ids) == set(stats)


# --- TRL's GRPOTrainer on the export, as written ---------------------------------------------------


@pytest.mark.slow
def test_grpo_trainer_trains_one_step_on_the_trl_export(shared, tmp_path):
    """1 CPU step of TRL's GRPOTrainer on the bundled model, on the `export --format trl` file as
    `datasets` loads it: no column renamed, added or dropped. The reward reads `answer`, the recorder
    `prompt_id`, and both see the `difficulty` of the run exported."""
    tf.require_trl()
    import torch
    from trl import GRPOTrainer

    from pipeline.integrations.trl import record_rewards
    from pipeline.observe import record

    store = Store.open(tmp_path / "data")
    run_id = _profile(store, shared / "gsm8k/test.jsonl", "--dataset", "gsm8k", "--limit", "2", "--n", "4")
    out = tmp_path / "train.parquet"
    _cli("export", "--run", run_id, "--format", "trl", "--output", str(out), "--data-dir", str(store.root))
    train = hf.load_dataset("parquet", data_files=str(out), cache_dir=str(tmp_path / "hf"))["train"]
    # GSM8K's own answer is its worked solution: TRL's `answer` is the gold number, the solution kept aside
    assert all(o.endswith(f"#### {a}") for o, a in zip(train["original_answer"], train["answer"], strict=True))
    calls = []

    def correct(completions, answer, prompt_id, difficulty, **kwargs):
        calls.append((list(prompt_id), {d["run_id"] for d in difficulty}))
        texts = [c[-1]["content"] for c in completions]  # conversational: the completion's messages
        return [
            1.0 if (found := re.findall(r"-?\d+", t)) and found[-1] == a else 0.0
            for t, a in zip(texts, answer, strict=True)
        ]

    recorder = record_rewards(correct, data_dir=store, source="trl:export", dataset="gsm8k")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # two cores shared: one thread is as quick on a 135M model, and leaves one free
    try:
        args = tf.grpo_args(tmp_path, G=2, batch=2, steps=1)
        trainer = GRPOTrainer(model=tf.bundled_model_folder(), reward_funcs=recorder, args=args, train_dataset=train)
        trainer.train()
    finally:
        torch.set_num_threads(threads)
        recorder.close()
    assert trainer.state.global_step == 1
    assert calls and all(runs == {run_id} for _, runs in calls)
    exported = set(train["prompt_id"])
    assert {pid for ids, _ in calls for pid in ids} <= exported
    rows = record.read_observations(store, "trl:export").to_pylist()
    assert rows and {r["prompt_id"] for r in rows} <= exported and {r["step"] for r in rows} == {0}
    assert sum(r["n"] for r in rows) == sum(len(ids) for ids, _ in calls)


# --- what the fields mean: cut-off prompts, zero_signal at G --------------------------------------


def _hand_run(store: Store, outcomes: list[list[tuple[bool, str]]]) -> str:
    """A finished run over the first arithmetic problems whose samples are given: per prompt, each
    answer's (correct, finish_reason). Finished as a profile is (counts with the answers cut off,
    analysis, default allocation)."""
    import pyarrow as pa

    from pipeline import finish
    from pipeline.store import RunRecord, conform

    problems = datasets.load("arithmetic", limit=len(outcomes)).problems
    store.write_table("problems", problems, {"dataset": "arithmetic"})
    params = {"n": 8, "max_tokens": 64}
    store.register_run(RunRecord("hand", dataset="arithmetic", model="m", backend="b", params=params, status="done"))
    rows = []
    for pid, gold, answers in zip(
        problems.column("prompt_id").to_pylist(), problems.column("answer").to_pylist(), outcomes, strict=True
    ):
        for j, (ok, reason) in enumerate(answers):
            answer = gold if ok else None if reason == "length" else f"{gold}1"
            rows.append(
                {
                    "run_id": "hand",
                    "prompt_id": pid,
                    "sample_idx": j,
                    "completion": f"... {answer}",
                    "finish_reason": reason,
                    "n_tokens": 64 if reason == "length" else 20,
                    "extracted_answer": answer,
                    "grade_status": "correct" if ok else "unparsed" if answer is None else "incorrect",
                    "correct": ok,
                }
            )
    store.write_shard("hand", 0, conform(pa.Table.from_pylist(rows), "samples"))
    finish.finish_from_counts(store, "hand", finish.run_counts(store, "hand"))
    return "hand"


def test_a_prompt_with_every_answer_cut_off_is_not_exported_as_hard(data_dir, tmp_path):
    store = Store(data_dir)
    cut, stop = (False, "length"), (False, "stop")
    run_id = _hand_run(
        store,
        [
            [cut] * 8,  # every answer cut off by the token limit: not hard, truncated
            [stop] * 8,  # every answer finished and wrong: hard
            [(True, "stop")] * 6 + [stop] * 2,  # 6 of 8 right
            [(True, "stop")] * 2 + [cut] * 5 + [stop],  # mixed, its wrong answers mostly cut: still informative
        ],
    )
    ids = store.read_table("problems", {"dataset": "arithmetic"}).column("prompt_id").to_pylist()
    stats = _stats(store, run_id)
    assert [stats[p]["truncated_share"] for p in ids] == [1.0, 0.0, 0.0, 5 / 8]
    assert [stats[p]["truncated"] for p in ids] == [True, False, False, True]

    def exported(*args: str) -> dict[str, dict]:
        out = tmp_path / f"{len(list(tmp_path.iterdir()))}.parquet"
        cli = _cli("export", "--run", run_id, "--output", str(out), *args, "--data-dir", str(store.root))
        written = {m["prompt_id"]: m for m in pq.read_table(out).column(FIELD).to_pylist()}
        assert ("1 truncated prompts written" in cli.stdout) == (ids[0] in written)
        return written

    every = exported()
    assert [every[p]["band"] for p in ids] == ["truncated", "hard", "informative", "informative"]
    assert every[ids[0]]["truncated_share"] == 1.0 and every[ids[3]]["truncated_share"] == 5 / 8
    # --keep informative keeps the cut-off prompt (its silence is the token limit's) and drops the hard one
    assert set(exported("--keep", "informative")) == {ids[0], ids[2], ids[3]}
    assert set(exported("--keep", "informative", "--drop-truncated")) == {ids[2], ids[3]}
    assert set(exported("--keep", "hard")) == {ids[1]}
    assert set(exported("--keep", "truncated")) == {ids[0]}
    # zero_signal: the chance a group of 8 is silent under Beta(1 + c, 1 + n - c), never the counted 0
    z = every[ids[2]]["zero_signal"]
    assert 0.10 <= z <= 0.13 and z == pytest.approx(sum(_flat_silence(8, 6, 8)))
    assert stats[ids[2]]["zero_signal"][stats[ids[2]]["group_sizes"].index(8)] == 0.0  # what the count says
    assert (every[ids[2]]["answers_drawn"], every[ids[2]]["answers_correct"], every[ids[2]]["G"]) == (8, 6, 8)
    with pytest.raises(ConfigError, match="keeps nothing"):
        ExportConfig(keep="truncated", drop_truncated=True)


def test_an_adaptive_run_exports_its_posterior_and_flags_undecided_prompts(tmp_path):
    """An adaptive run's export: zero_signal and the bands at G from the run's own posterior (the
    analysis's values at an analysed G; computed again under the same prior at another G), and its
    undecided prompts flagged."""
    store = Store.open(tmp_path / "data")
    args = ["profile", "--backend", "simulate", "--no-prefect", "--limit", "40", "--adaptive", "band"]
    _cli(*args, "--grade-workers", "1", "--no-report", "--data-dir", str(store.root))
    run_id = store.list_runs().column("run_id")[0].as_py()
    stats = _stats(store, run_id)
    for G in (8, 12):
        out = tmp_path / f"g{G}.parquet"
        _cli("export", "--run", run_id, "--output", str(out), "--G", str(G), "--data-dir", str(store.root))
        rows = pq.read_table(out).column(FIELD).to_pylist()
        assert len(rows) == 40
        if G in next(iter(stats.values()))["group_sizes"]:
            posterior = stats
        else:  # not analysed: the same posterior analysis at G
            config = analyze.AnalyzeConfig(group_sizes=(G,), estimators=("grpo",), pass_at_k=False)
            table = finish.analyze_run(store, run_id, config).prompt_stats
            posterior = {r["prompt_id"]: r for r in table.to_pylist()}
        for m in rows:
            s, p = stats[m["prompt_id"]], posterior[m["prompt_id"]]
            j = p["group_sizes"].index(G)
            right, wrong = p["silent_all_correct"][j], p["silent_all_wrong"][j]
            assert m["zero_signal"] == pytest.approx(right + wrong) and 0 < m["zero_signal"] < 1
            assert m["undecided"] is s["undecided"] and isinstance(m["undecided"], bool)
            assert (m["answers_drawn"], m["answers_correct"], m["G"]) == (s["n"], s["c"], G)
            mixed = 0 < s["c"] < s["n"] and right < 0.5 and wrong < 0.5
            assert (m["band"] == "informative") == mixed
