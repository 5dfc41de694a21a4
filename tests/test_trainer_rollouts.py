"""observe/trainers and ``difficulty track`` on prime-rl and NeMo-RL rollout folders, written field for
field as those trainers write them (``tests/fixtures/trainer_rollouts.py``, which cites their source),
with real DeepScaleR prompts: counts per prompt, groups kept, errored traces kept as unmatched, steps
imported once each when complete, and a folder of no known format named as such."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from pipeline import datasets
from pipeline.cli import app
from pipeline.errors import DatasetError
from pipeline.observe import match, trainers
from pipeline.store import Store

sys.path.insert(0, str(Path(__file__).resolve().parent / "fixtures"))
import trainer_rollouts as fixture  # noqa: E402

runner = CliRunner()
DEEPSCALER = "deepscaler/verl_train_sub.parquet"


@pytest.fixture(scope="module")
def problems(shared) -> pa.Table:
    return datasets.load(data_file=shared / DEEPSCALER).problems


@pytest.fixture(scope="module")
def pairs(problems) -> list[tuple[str, str]]:
    return list(zip(problems["problem"].to_pylist()[:6], problems["answer"].to_pylist()[:6], strict=True))


def _pid(problems: pa.Table, text: str) -> str:
    return problems["prompt_id"].to_pylist()[problems["problem"].to_pylist().index(text)]


def _track(*args: str, ok: bool = True) -> dict:
    out = runner.invoke(app, ["track", *args, "--format", "json"])
    assert (out.exit_code == 0) is ok, out.output
    return json.loads(out.stdout)[0] if ok else out.output


def test_prime_rl_counts_groups_and_errored_traces(tmp_path, problems, pairs):
    truth = fixture.write_prime_rl(tmp_path / "run", pairs, steps=2, group_size=4, seed=3)
    assert trainers.detect(tmp_path / "run") == "prime-rl"
    steps = trainers.prime_steps(tmp_path / "run")
    assert [s for s, _ in steps] == [0, 1]
    matcher = match.Matcher.from_problems(problems)
    for step, path in steps:
        raw = trainers.read_step("prime-rl", path, step)
        # each group's rollouts together, in the group the orchestrator gave them
        by_group: dict[str, list[int]] = {}
        for g, c in zip(raw.groups, raw.correct.tolist(), strict=True):
            by_group.setdefault(g, []).append(c)
        assert list(by_group.values()) == [[o for o in g if o is not None] for g in truth[step]]
        got = trainers.read_file("prime-rl", path, step, matcher, source="prime-rl:run", model="q")
        counts = dict(zip(got.observations["prompt_id"].to_pylist(), zip(got.observations["n"].to_pylist(),
                      got.observations["c"].to_pylist(), strict=True), strict=True))  # fmt: skip
        want = {
            _pid(problems, p): (sum(o is not None for o in g), sum(o or 0 for o in g))
            for (p, _), g in zip(pairs, truth[step], strict=True)
        }
        assert counts == want
        assert got.unmatched["reason"].to_pylist() == ["trace errored (SandboxError)"]


def test_prime_rl_reward_named_and_shaped(tmp_path, pairs):
    fixture.write_prime_rl(tmp_path / "run", pairs, steps=1, group_size=2)
    path = trainers.prime_steps(tmp_path / "run")[0][1]
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    for ep in lines:  # a format bonus beside correctness: the total reward is shaped
        for tr in ep["traces"]:
            if tr["ok"]:
                tr["rewards"]["format"] = {"score": 1.0, "weight": 0.1}
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    with pytest.raises(Exception, match="shaped score"):
        trainers.read_step("prime-rl", path, 0)
    named = trainers.read_step("prime-rl", path, 0, correct_field="correct")
    summed = trainers.read_step("prime-rl", path, 0, score_threshold=1.0)
    assert named.correct.tolist() == summed.correct.tolist()
    assert sorted(set(named.rewards.tolist())) == [0.0, 1.0]  # the named reward's score


def test_track_prime_rl_once_and_the_unshipped_step_waits(tmp_path, shared, pairs, data_dir):
    fixture.write_prime_rl(tmp_path / "run", pairs, steps=3, group_size=4, shipped=False)
    data = str(shared / DEEPSCALER)
    first = _track(str(tmp_path / "run"), "--data-file", data)
    assert first["source"] == "prime-rl:run"
    assert (first["steps_written"], first["steps_pending"], first["unmatched_rows"]) == (2, 1, 2)
    assert first["rollouts"] == 2 * (6 * 4 - 1)
    again = _track(str(tmp_path / "run"), "--data-file", data)
    assert (again["steps_written"], again["steps_already_recorded"], again["steps_pending"]) == (0, 2, 1)
    done = _track(str(tmp_path / "run"), "--data-file", data, "--final")
    assert (done["steps_written"], done["first_step"]) == (1, 2)
    rows = Store(data_dir).query("select step, sum(n) n from observations group by step order by step")
    assert rows.column("n").to_pylist() == [23, 23, 23]


def test_track_nemo_rl_and_its_dynamic_sampling_file(tmp_path, shared, pairs, problems, data_dir):
    truth = fixture.write_nemo_rl(tmp_path / "exp_001", pairs, steps=2, group_size=4, seed=5)
    data = str(shared / DEEPSCALER)
    info = _track(str(tmp_path / "exp_001"), "--data-file", data, "--final")
    assert (info["source"], info["steps_written"], info["rollouts"]) == ("nemo-rl:exp_001", 2, 48)
    again = _track(str(tmp_path / "exp_001"), "--data-file", data, "--final")
    assert (again["steps_written"], again["steps_already_recorded"]) == (0, 2)
    obs = Store(data_dir).query("select step, prompt_id, n, c from observations order by step, prompt_id").to_pylist()
    want = sorted(
        (s, _pid(problems, p), 4, sum(g)) for s, gs in truth.items() for (p, _), g in zip(pairs, gs, strict=True)
    )
    assert [(r["step"], r["prompt_id"], r["n"], r["c"]) for r in obs] == want
    raw = trainers.read_step("nemo-rl", tmp_path / "exp_001" / "train_data_step1.jsonl", 1)
    assert len(set(raw.groups)) == 6 and all(raw.groups.count(g) == 4 for g in set(raw.groups))
    # under dynamic sampling the file holds only the kept groups: refused, saying why
    path = tmp_path / "exp_001" / "train_data_step3.jsonl"
    line = json.loads((tmp_path / "exp_001" / "train_data_step2.jsonl").read_text().splitlines()[0])
    path.write_text(json.dumps({**line, "filtered_rewards": line["rewards"]}) + "\n")
    with pytest.raises(DatasetError, match="dynamic sampling"):
        trainers.read_step("nemo-rl", path, 3)


def test_a_folder_of_no_known_format_is_named(tmp_path, shared, data_dir):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "metrics.jsonl").write_text('{"step": 1}\n')
    out = _track(str(tmp_path / "logs"), "--data-file", str(shared / DEEPSCALER), ok=False)
    assert "metrics.jsonl" in out and "prime-rl" in out and "NeMo-RL" in out and "verl" in out
    fixture.write_nemo_rl(tmp_path / "nemo", [("1+1?", "2")], steps=1, group_size=2)
    out = _track(str(tmp_path / "nemo"), "--input-format", "verl", "--data-file", str(shared / DEEPSCALER), ok=False)
    assert "holds nemo-rl rollouts" in out and "--input-format nemo-rl" in out


def test_track_help_names_the_trainers():
    out = runner.invoke(app, ["track", "--help"], env={"COLUMNS": "200"})
    assert out.exit_code == 0
    assert "prime-rl" in out.output and "NeMo-RL" in out.output and "train_data_stepN.jsonl" in out.output


@pytest.mark.parametrize("trainer", ["prime-rl", "nemo-rl"])
def test_a_prompt_given_two_groups_in_a_step_keeps_two_groups(tmp_path, shared, pairs, problems, data_dir, trainer):
    """The same problem twice in a step (two groups of it): two observation rows, each group's own
    counts, so the step's silent groups can be counted again."""
    twice = [pairs[0], pairs[0], *pairs[1:3]]
    folder = tmp_path / "run"
    if trainer == "prime-rl":
        truth = fixture.write_prime_rl(folder, twice, steps=1, group_size=4, seed=11)
    else:
        truth = fixture.write_nemo_rl(folder, twice, steps=1, group_size=4, seed=11)
    _track(str(folder), "--data-file", str(shared / DEEPSCALER), "--final")
    step = min(truth)
    rows = (
        Store(data_dir)
        .query(
            "select group_index, n, c from observations where prompt_id = $p order by group_index",
            {"p": _pid(problems, pairs[0][0])},
        )
        .to_pylist()
    )
    want = [[o for o in g if o is not None] for g in truth[step][:2]]
    assert [(r["group_index"], r["n"], r["c"]) for r in rows] == [(i, len(g), sum(g)) for i, g in enumerate(want)]
