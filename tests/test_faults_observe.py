"""Faults a user hit importing training logs and reading the current difficulty, each reproduced.

A verl step is stored only when complete, by a rule that does not depend on where a write ended
(a full step's rollouts with a newer step beside it or the file settled, or ``--final``); a stored
step whose content changed (grown, or written again at the same size) is read again; a step cut,
short or being rewritten is pending, never stored short nor refused for good; steps and
counts are range-checked; ``current`` counts each source's steps on its own clock; the trainer
adapters refuse what matches nothing; names print as text.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from pipeline import datasets
from pipeline.cli import app
from pipeline.errors import ConfigError, DatasetError, StoreError
from pipeline.observe import record
from pipeline.store import Store

pytestmark = pytest.mark.faults

runner = CliRunner()
PROMPTS, G = 40, 4  # a verl step: 40 prompts, 4 rollouts each
LONG = 9000  # characters of each rollout's output: every line over 8 KB, as a real reasoning trace


@pytest.fixture(scope="module")
def deepscaler(shared) -> tuple[Path, pa.Table]:
    path = shared / "deepscaler" / "verl_train_sub.parquet"
    return path, datasets.load(data_file=path).problems.slice(0, PROMPTS)


def _lines(problems: pa.Table, step: int) -> list[str]:
    """One step's rollouts as verl dumps them (``RayPPOTrainer._write_generations``), one JSON line each."""
    out = []
    for i, (text, gold) in enumerate(zip(problems["problem"].to_pylist(), problems["answer"].to_pylist(), strict=True)):
        for r in range(G):
            ok = (i + r + step) % 3 == 0
            row = {"input": f"user\n{text}\nassistant\n", "output": "x" * LONG, "gts": gold, "score": float(ok)}
            out.append(json.dumps({**row, "step": step, "acc": ok}) + "\n")
    return out


def _settled(path: Path, age_s: float = 600) -> None:
    """The file as verl left it a while ago."""
    then = time.time() - age_s
    os.utime(path, (then, then))


def _dump(folder: Path, problems: pa.Table, steps) -> None:
    folder.mkdir(exist_ok=True)
    for step in steps:
        (folder / f"{step}.jsonl").write_text("".join(_lines(problems, step)))
        _settled(folder / f"{step}.jsonl")


def _track(*args: str, code: int = 0) -> dict:
    out = runner.invoke(app, ["track", *args, "--format", "json"])
    assert out.exit_code == code, out.output
    return json.loads(out.stdout)[0] if code == 0 else {}


def _stored(data_dir: Path, source: str) -> dict[int, int]:
    """Rollouts stored per step of ``source``."""
    obs = record.read_observations(Store(data_dir), source).to_pylist()
    out: dict[int, int] = {}
    for row in obs:
        out[row["step"]] = out.get(row["step"], 0) + row["n"]
    return out


WRITER = r"""
import sys
lines, path, pause = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = open(lines).read().splitlines(keepends=True)
with open(path, "w") as out:  # verl's mode "w", one JSON line per rollout
    for k, line in enumerate(rows):
        if k == pause:
            out.flush()
            print("paused", flush=True)
            sys.stdin.readline()
        out.write(line)
print("done", flush=True)
"""


@pytest.fixture
def writer(tmp_path, deepscaler):
    """verl writing step 3 of a dump (steps 1 and 2 written long ago), paused after 88 of its 160
    lines, on a line boundary: yields (folder, resume), ``resume()`` lets it finish the step."""
    _, problems = deepscaler
    folder = tmp_path / "grpo"
    _dump(folder, problems, [1, 2])
    lines = tmp_path / "step3.txt"
    lines.write_text("".join(_lines(problems, 3)))
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(lines), str(folder / "3.jsonl"), "88"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )

    def resume() -> None:
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "done"
        assert proc.wait(timeout=60) == 0

    try:
        assert proc.stdout.readline().strip() == "paused"
        assert sum(1 for _ in (folder / "3.jsonl").open()) == 88
        yield folder, resume
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_step_being_written_is_not_stored_in_part(writer, deepscaler, data_dir):
    folder, resume = writer
    data = str(deepscaler[0])
    midway = _track(str(folder), "--data-file", data, "--source", "verl:race")
    assert (midway["steps_written"], midway["steps_pending"]) == (2, 1)
    assert _stored(data_dir, "verl:race") == {1: PROMPTS * G, 2: PROMPTS * G}  # no step 3 of 88 rollouts
    resume()
    fresh = _track(str(folder), "--data-file", data, "--source", "verl:race")
    assert (fresh["steps_written"], fresh["steps_pending"]) == (0, 1)  # just written: not settled yet
    settled = _track(str(folder), "--data-file", data, "--source", "verl:race", "--settle", "0")
    assert (settled["steps_written"], settled["first_step"], settled["rollouts"]) == (1, 3, PROMPTS * G)
    assert _stored(data_dir, "verl:race") == {1: PROMPTS * G, 2: PROMPTS * G, 3: PROMPTS * G}


def test_a_stored_step_that_grew_is_read_again(writer, deepscaler, data_dir):
    """``--final`` given too early stores the step short; once verl has written the rest, the next
    import reads it again and replaces it."""
    folder, resume = writer
    data = str(deepscaler[0])
    early = _track(str(folder), "--data-file", data, "--source", "verl:early", "--final")
    assert early["steps_written"] == 3 and _stored(data_dir, "verl:early")[3] == 88
    resume()
    _settled(folder / "3.jsonl")
    again = _track(str(folder), "--data-file", data, "--source", "verl:early")
    assert (again["steps_written"], again["first_step"], again["steps_already_recorded"]) == (1, 3, 2)
    assert _stored(data_dir, "verl:early") == {1: PROMPTS * G, 2: PROMPTS * G, 3: PROMPTS * G}
    assert _track(str(folder), "--data-file", data, "--source", "verl:early")["steps_written"] == 0


def test_the_newest_step_waits_until_it_has_a_full_steps_rollouts(tmp_path, deepscaler, data_dir):
    """Settled but short (a writer stopped on a line boundary): still pending; a newer step, or
    ``--final``, completes it."""
    path, problems = deepscaler
    folder = tmp_path / "grpo"
    _dump(folder, problems, [1, 2])
    (folder / "3.jsonl").write_text("".join(_lines(problems, 3)[:88]))
    _settled(folder / "3.jsonl")
    got = _track(str(folder), "--data-file", str(path), "--source", "verl:short")
    assert (got["steps_written"], got["steps_pending"]) == (2, 1)
    (folder / "3.jsonl").write_text("".join(_lines(problems, 3)))
    (folder / "4.jsonl").write_text("".join(_lines(problems, 4)[:10]))  # verl has moved on to step 4
    got = _track(str(folder), "--data-file", str(path), "--source", "verl:short")
    assert (got["steps_written"], got["first_step"], got["steps_pending"]) == (1, 3, 1)
    got = _track(str(folder), "--data-file", str(path), "--source", "verl:short", "--final")
    assert (got["steps_written"], got["first_step"], got["rollouts"]) == (1, 4, 10)


def test_a_cut_step_that_is_not_the_newest_is_pending_and_blocks_nothing(tmp_path, deepscaler, data_dir):
    """A cut older step is never refused for good: the steps after it are stored, a note names it,
    and the import after it is restored stores it."""
    path, problems = deepscaler
    folder = tmp_path / "grpo"
    _dump(folder, problems, [1, 2, 3, 4, 5])
    data = (folder / "3.jsonl").read_bytes()
    (folder / "3.jsonl").write_bytes(data[: len(data) // 2 + 17])  # cut mid-line, verl long gone
    _settled(folder / "3.jsonl")
    out = runner.invoke(app, ["track", str(folder), "--data-file", str(path), "--source", "verl:cut"])
    assert out.exit_code == 0, out.output
    assert "4 steps written" in out.stdout and "1 still being written" in out.stdout
    assert "3.jsonl: step 3 has been cut" in out.stdout
    assert set(_stored(data_dir, "verl:cut")) == {1, 2, 4, 5}
    (folder / "3.jsonl").write_bytes(data)
    again = _track(str(folder), "--data-file", str(path), "--source", "verl:cut")
    assert (again["steps_written"], again["first_step"], again["steps_pending"]) == (1, 3, 0)
    assert _stored(data_dir, "verl:cut") == dict.fromkeys(range(1, 6), PROMPTS * G)


# --- a step written again, or out of order ----------------------------------------------------------


def _flipped(line: str) -> str:
    """A rollout with its reward flipped, padded to the same byte count (a re-dump after a reward fix)."""
    row = json.loads(line)
    row["acc"], row["score"] = not row["acc"], 1.0 - row["score"]
    out = json.dumps(row) + "\n"
    row["output"] = "x" * (len(row["output"]) + len(line) - len(out))
    out = json.dumps(row) + "\n"
    assert len(out) == len(line)
    return out


def _correct(data_dir: Path, source: str, step: int) -> int:
    obs = record.read_observations(Store(data_dir), source).to_pylist()
    return sum(r["c"] for r in obs if r["step"] == step)


def _right(lines: list[str]) -> int:
    return sum(json.loads(line)["acc"] for line in lines)


def test_a_stored_step_written_again_at_the_same_size_is_read_again(tmp_path, deepscaler, data_dir):
    path, problems = deepscaler
    folder = tmp_path / "grpo"
    _dump(folder, problems, [1, 2, 3, 4, 5])
    assert _track(str(folder), "--data-file", str(path), "--source", "verl:fix", "--final")["steps_written"] == 5
    old = (folder / "3.jsonl").stat().st_size
    flipped = [_flipped(line) for line in _lines(problems, 3)]
    (folder / "3.jsonl").write_text("".join(flipped))
    assert (folder / "3.jsonl").stat().st_size == old
    again = _track(str(folder), "--data-file", str(path), "--source", "verl:fix", "--final")
    assert (again["steps_written"], again["first_step"], again["steps_already_recorded"]) == (1, 3, 4)
    assert _correct(data_dir, "verl:fix", 3) == _right(flipped) != _right(_lines(problems, 3))
    os.utime(folder / "3.jsonl")  # touched, same content: not read again
    assert _track(str(folder), "--data-file", str(path), "--source", "verl:fix")["steps_written"] == 0


REWRITER = r"""
import sys
lines, path, pause, cut = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "cut"
rows = open(lines).read().splitlines(keepends=True)
with open(path, "w") as out:  # truncates, as a re-dump in mode "w" does
    out.writelines(rows[:pause])
    if cut:
        out.write(rows[pause][: len(rows[pause]) // 2])
    out.flush()
    print("paused", flush=True)
    sys.stdin.readline()
    if cut:
        out.write(rows[pause][len(rows[pause]) // 2 :])
        pause += 1
    out.writelines(rows[pause:])
print("done", flush=True)
"""


@pytest.fixture
def rewriter(tmp_path):
    """A writer process writing one step file, paused midway: ``start(lines, path, pause, cut)``
    returns ``resume()``, which lets it finish."""
    procs = []

    def start(lines: list[str], path: Path, pause: int, cut: bool = False):
        text = tmp_path / f"{path.stem}-{len(procs)}.txt"
        text.write_text("".join(lines))
        proc = subprocess.Popen(
            [sys.executable, "-c", REWRITER, str(text), str(path), str(pause), "cut" if cut else "whole"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        procs.append(proc)
        assert proc.stdout.readline().strip() == "paused"

        def resume() -> None:
            proc.stdin.write("go\n")
            proc.stdin.flush()
            assert proc.stdout.readline().strip() == "done"
            assert proc.wait(timeout=60) == 0

        return resume

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize(("pause", "cut"), [(128, False), (0, False), (100, True)], ids=["short", "empty", "cut"])
def test_an_older_step_caught_mid_rewrite_is_pending(rewriter, tmp_path, deepscaler, data_dir, pause, cut):
    """Steps 1-5 stored; a writer truncates and rewrites step 3: the import during the rewrite keeps
    the stored step 3 as it was, says it is pending and stores step 6; the next one stores the rewrite."""
    path, problems = deepscaler
    folder = tmp_path / "grpo"
    _dump(folder, problems, [1, 2, 3, 4, 5])
    data = ("--data-file", str(path), "--source", "verl:redo")
    assert _track(str(folder), *data)["steps_written"] == 5
    before = _correct(data_dir, "verl:redo", 3)
    flipped = [_flipped(line) for line in _lines(problems, 3)]
    resume = rewriter(flipped, folder / "3.jsonl", pause, cut)
    _dump(folder, problems, [6])
    midway = _track(str(folder), *data)
    assert (midway["steps_written"], midway["first_step"], midway["steps_pending"]) == (1, 6, 1)
    assert _stored(data_dir, "verl:redo") == dict.fromkeys(range(1, 7), PROMPTS * G)
    assert _correct(data_dir, "verl:redo", 3) == before
    resume()
    done = _track(str(folder), *data)
    assert (done["steps_written"], done["first_step"], done["steps_pending"]) == (1, 3, 0)
    assert _stored(data_dir, "verl:redo")[3] == PROMPTS * G
    assert _correct(data_dir, "verl:redo", 3) == _right(flipped) != before


def test_a_step_arriving_out_of_order_is_pending_until_whole(rewriter, tmp_path, deepscaler, data_dir):
    """Steps 1, 2 and 4 written, step 3 still being written: 3 is not stored short, 4 is not held back."""
    path, problems = deepscaler
    folder = tmp_path / "grpo"
    _dump(folder, problems, [1, 2, 4])
    resume = rewriter(_lines(problems, 3), folder / "3.jsonl", 144)
    data = ("--data-file", str(path), "--source", "verl:order", "--settle", "0")
    midway = _track(str(folder), *data)
    assert (midway["steps_written"], midway["steps_pending"]) == (3, 1)
    assert _stored(data_dir, "verl:order") == {1: PROMPTS * G, 2: PROMPTS * G, 4: PROMPTS * G}
    resume()
    done = _track(str(folder), *data)
    assert (done["steps_written"], done["first_step"], done["steps_pending"]) == (1, 3, 0)
    assert _stored(data_dir, "verl:order") == dict.fromkeys(range(1, 5), PROMPTS * G)


def test_a_first_step_written_after_the_next_ones_is_pending_until_whole(rewriter, tmp_path, deepscaler, data_dir):
    """Nothing stored yet and step 1 still being written beside whole steps 2 and 3: step 1 has no
    complete step before it to compare with, and the step after it says how many it needs."""
    path, problems = deepscaler
    folder = tmp_path / "grpo"
    _dump(folder, problems, [2, 3])
    resume = rewriter(_lines(problems, 1), folder / "1.jsonl", 100)
    data = ("--data-file", str(path), "--source", "verl:late", "--settle", "0")
    midway = _track(str(folder), *data)
    assert (midway["steps_written"], midway["first_step"], midway["steps_pending"]) == (2, 2, 1)
    resume()
    done = _track(str(folder), *data)
    assert (done["steps_written"], done["first_step"], done["steps_pending"]) == (1, 1, 0)
    assert _stored(data_dir, "verl:late") == dict.fromkeys(range(1, 4), PROMPTS * G)


# --- numbers out of range ------------------------------------------------------------------------


def _counts_table(tmp_path: Path, ids: list[str], **cols) -> Path:
    table = {"step": [1, 2], "prompt_id": ids[:2], "n": [8, 8], "c": [1, 2], **cols}
    path = tmp_path / "counts.parquet"
    pq.write_table(pa.table(table), path)
    return path


@pytest.mark.parametrize(
    ("cols", "named"),
    [
        ({"step": [1, 9223372036854775807]}, r"row 1: step=9223372036854775807 is out of range"),
        ({"step": [1.0, 1e20]}, r"row 1: step=1e\+20 is out of range"),
        ({"n": [8, 3000000000]}, r"row 1: n=3000000000 is out of range"),
        ({"step": [1, -4]}, r"row 1: step=-4 is out of range"),
    ],
)
def test_numbers_out_of_range_are_one_named_line(tmp_path, data_dir, cols, named):
    assert runner.invoke(app, ["load", "arithmetic", "--limit", "4"]).exit_code == 0
    ids = Store(data_dir).read_table("problems").column("prompt_id").to_pylist()
    out = runner.invoke(app, ["track", str(_counts_table(tmp_path, ids, **cols)), "--dataset", "arithmetic"])
    assert out.exit_code == 1, out.output
    assert out.stderr.startswith("error: ") and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert re.search(named, out.stderr), out.stderr
    assert not Store(data_dir).files("observations")


def test_a_step_file_numbered_out_of_range_is_named(tmp_path, deepscaler, data_dir):
    path, problems = deepscaler
    folder = tmp_path / "grpo"
    _dump(folder, problems, [1])
    (folder / "99999999999999999999.jsonl").write_text("".join(_lines(problems, 1)[:4]))
    out = runner.invoke(app, ["track", str(folder), "--data-file", str(path)])
    assert out.exit_code == 1, out.output
    assert "99999999999999999999.jsonl" in out.stderr and "out of range" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    (folder / "99999999999999999999.jsonl").unlink()
    rows = _lines(problems, 2)
    rows[5] = rows[5].replace('"step": 2', '"step": 1e20')
    (folder / "2.jsonl").write_text("".join(rows))  # a row of a wild step inside step 2's file
    _settled(folder / "2.jsonl")
    out = runner.invoke(app, ["track", str(folder), "--data-file", str(path)])
    assert out.exit_code == 1 and "line 6 is a row of step 1e+20" in out.stderr, out.output
    with pytest.raises(ConfigError, match="out of range"):
        record.observation_rows("s", "training", 2**40, "d", ["a"], [1], [1], None)


# --- current: each source on its own clock -------------------------------------------------------


def test_one_source_cannot_erase_another(tmp_path, data_dir):
    """A table with a huge (in range) step beside a verl run's steps 1 to 5: the verl source's
    outcomes keep their weights, counted from its own latest step."""
    store = Store.open(data_dir)
    for step in range(1, 6):
        rows = record.observation_rows("verl:run", "training", step, "d", ["a", "b"], [8, 8], [2, 6], None)
        record.write_step(store, "verl:run", step, rows)
    big = 2**31 - 1  # a step in range, far past the verl run's
    rows = record.observation_rows("table:t", "training", big, "d", ["b"], [4], [4], None)
    record.write_step(store, "table:t", big, rows)
    out = runner.invoke(app, ["current", "--forgetting", "0.9", "--format", "json"])
    assert out.exit_code == 0, out.output
    got = {r["prompt_id"]: r for r in json.loads(out.stdout)}
    weights = sum(0.9**k for k in range(5))
    assert got["a"]["n_eff"] == pytest.approx(8 * weights) and got["a"]["c_eff"] == pytest.approx(2 * weights)
    assert got["b"]["n_eff"] == pytest.approx(8 * weights + 4)
    assert got["a"]["post_mean"] == pytest.approx((0.5 + 2 * weights) / (1 + 8 * weights))


# --- trainer adapters that would never learn -----------------------------------------------------


def _frame(rows: list[dict]):
    from datasets import Dataset

    return Dataset.from_list(rows)


def _verl_rows(texts: list[str]) -> list[dict]:
    return [
        {"prompt": [{"role": "user", "content": t}], "extra_info": {"index": 1000 + i}} for i, t in enumerate(texts)
    ]


def test_the_verl_curriculum_refuses_a_dataset_none_of_its_rows_is_in(tmp_path, deepscaler, data_dir):
    from pipeline.integrations import verl_curriculum as vc

    path, problems = deepscaler
    assert runner.invoke(app, ["load", "arithmetic", "--limit", "40"]).exit_code == 0
    frame = _frame(_verl_rows(problems["problem"].to_pylist()))
    config = {"train_files": str(path), "train_batch_size": 8, "curriculum": {"data_dir": str(data_dir)}}
    with pytest.raises(DatasetError, match=r"none of the 40 rows of the train file .* dataset 'arithmetic'"):
        vc.build_schedule(frame, str(path), {**config, "curriculum": {**config["curriculum"], "dataset": "arithmetic"}})
    schedule = vc.build_schedule(frame, str(path), config)  # the train file itself: every row a prompt
    assert len(schedule.ids) == PROMPTS and not any(p.startswith("row-") for p in schedule.ids)


def test_the_verl_curriculum_refuses_a_missing_data_dir(tmp_path, deepscaler):
    from pipeline.integrations import verl_curriculum as vc

    path, problems = deepscaler
    typo = tmp_path / "difficuly-data"
    config = {"train_files": str(path), "train_batch_size": 8, "curriculum": {"data_dir": str(typo)}}
    with pytest.raises(StoreError, match=r"no data directory at .*difficuly-data"):
        vc.build_schedule(_frame(_verl_rows(problems["problem"].to_pylist())), str(path), config)
    assert not typo.exists()


def test_record_rewards_refuses_a_dataset_that_is_not_stored(data_dir):
    from pipeline.integrations import trl

    store = Store.open(data_dir)
    with pytest.raises(DatasetError, match=r"no problems of dataset 'nope'"):
        trl.record_rewards(lambda **kw: [1.0], data_dir=store, source="trl:x", dataset="nope")
    assert runner.invoke(app, ["load", "arithmetic", "--limit", "4"]).exit_code == 0
    recorder = trl.record_rewards(lambda **kw: [1.0, 0.0], data_dir=store, source="trl:x", dataset="arithmetic")
    try:
        with pytest.raises(ConfigError, match=r"none of the 2 prompt ids of this batch .* dataset 'arithmetic'"):
            recorder(prompts=["p", "q"], completions=["1", "2"], prompt_id=["x1", "x2"])
    finally:
        recorder.close()


# --- names as text -------------------------------------------------------------------------------


def test_a_source_named_zero_prints_as_text_and_one_step_is_singular(tmp_path, deepscaler, data_dir):
    path, problems = deepscaler
    folder = tmp_path / "zero"
    _dump(folder, problems, [1])
    out = runner.invoke(app, ["track", str(folder), "--data-file", str(path)])
    assert out.exit_code == 0, out.output
    assert out.stdout.startswith("source verl:zero: 1 step written (0 recorded before"), out.stdout
    assert "\u20e3" not in out.stdout and "\ufe0f" not in out.stdout  # the keycap emoji of :zero:
