"""observe/audit and ``difficulty audit``: a trainer's logged silent-group counters, computed here the
way each trainer computes them (NeMo-RL's ``calculate_baseline_and_std_per_prompt`` and its
``baseline_reward/pct_*``, TRL's ``frac_reward_zero_std``, OpenRLHF's dynamic filter), against the
outcomes of rollout folders written as the trainers write them (``fixtures/trainer_rollouts.py``)."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.errors import DatasetError
from pipeline.observe import audit

sys.path.insert(0, str(Path(__file__).resolve().parent / "fixtures"))
import trainer_rollouts as fixture  # noqa: E402

runner = CliRunner()
PAIRS = [(f"What is {a} + {a}?", str(2 * a)) for a in range(1, 9)]


def nemo_baselines(rewards: np.ndarray, group_size: int, leave_one_out: bool) -> np.ndarray:
    """NeMo-RL's ``calculate_baseline_and_std_per_prompt`` (valid_mask all ones), in numpy."""
    out = np.empty_like(rewards)
    for start in range(0, len(rewards), group_size):
        r = rewards[start : start + group_size]
        mask = 1 - np.eye(len(r)) if leave_one_out else np.ones((len(r), len(r)))
        out[start : start + group_size] = mask @ r / (len(r) - int(leave_one_out))
    return out


def nemo_metrics(truth: dict[int, list[list[int]]], leave_one_out: bool) -> list[dict]:
    rows = []
    for step, groups in truth.items():
        base = nemo_baselines(np.array([float(o) for g in groups for o in g]), len(groups[0]), leave_one_out)
        pct0, pct1 = 100 * float(np.mean(base == 0)), 100 * float(np.mean(base == 1))
        rows.append({"step": step, "train/baseline_reward/pct_0": pct0, "train/baseline_reward/pct_1": pct1,
                     "train/baseline_reward/pct_mixed": 100 - pct0 - pct1})  # fmt: skip
    return rows


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_clean_nemo_rl_log_agrees(tmp_path):
    truth = fixture.write_nemo_rl(tmp_path / "exp", PAIRS, steps=4, group_size=4, seed=1)
    metrics = _write(tmp_path / "metrics.jsonl", nemo_metrics(truth, leave_one_out=False))
    rows = audit.audit_folder(tmp_path / "exp", metrics)
    assert len(rows) == 4 * 3 and all(r["agree"] and r["cause"] is None for r in rows)


def test_a_leave_one_out_log_is_flagged_where_a_lone_answer_differs(tmp_path):
    truth = fixture.write_nemo_rl(tmp_path / "exp", PAIRS, steps=6, group_size=4, seed=2)
    metrics = _write(tmp_path / "metrics.jsonl", nemo_metrics(truth, leave_one_out=True))
    rows = [r for r in audit.audit_folder(tmp_path / "exp", metrics) if r["metric"] == "baseline_reward/pct_0"]
    # a step disagrees exactly when a group holds one right answer among wrong ones ([1,0,0,0]): its
    # leave-one-out baseline is 0 though the group is not all wrong
    lone = {s for s, gs in truth.items() if any(sum(g) == 1 for g in gs)}
    assert lone and {r["step"] for r in rows if not r["agree"]} == lone
    assert {r["cause"] for r in rows if not r["agree"]} == {"a leave-one-out baseline"}
    for r in rows:  # the share the outcomes give: rollouts of all-wrong groups
        groups = truth[r["step"]]
        assert r["from_outcomes"] == pytest.approx(100 * sum(4 for g in groups if sum(g) == 0) / (4 * len(groups)))


def test_a_shaped_reward_log_is_flagged(tmp_path):
    rng = random.Random(7)

    def shaped(outcomes):  # correctness minus a length penalty on some answers
        return [o - (0.05 * rng.randint(0, 2)) for o in outcomes]

    truth = fixture.write_nemo_rl(tmp_path / "exp", PAIRS, steps=5, group_size=4, seed=3, rewards_of=shaped)
    rewards = {}
    for step in truth:
        lines = (tmp_path / "exp" / f"train_data_step{step}.jsonl").read_text().splitlines()
        rewards[step] = np.array([json.loads(x)["rewards"][0] for x in lines]).reshape(-1, 4)
    # TRL: std over each group's summed rewards, isclose to 0, mean over rollouts
    trl = [{"step": s, "frac_reward_zero_std": float(np.isclose(r.std(axis=1, ddof=1), 0).mean())} for s, r in
           rewards.items()]  # fmt: skip
    # OpenRLHF: a group passes when its mean reward is strictly inside (0, 1); a percentage
    orlhf = [
        {"step": s, "dynamic_filtering_pass_rate": 100 * float(((r.mean(1) > 1e-6) & (r.mean(1) < 1 - 1e-6)).mean())}
        for s, r in rewards.items()
    ]
    rows = audit.audit_folder(
        tmp_path / "exp", _write(tmp_path / "m.jsonl", trl + orlhf), score_threshold=0.5, fmt="nemo-rl"
    )
    zero = [r for r in rows if r["metric"] == "frac_reward_zero_std"]
    silent = {s: sum(sum(g) in (0, 4) for g in gs) / len(gs) for s, gs in truth.items()}
    assert [r["from_outcomes"] for r in zero] == pytest.approx([silent[s] for s in sorted(truth)])
    flagged = [r for r in zero if not r["agree"]]
    assert flagged and {r["cause"] for r in flagged} == {"shaped rewards"}
    assert all(r["agree"] for r in zero if r["logged"] == pytest.approx(silent[r["step"]]))
    passed = [r for r in rows if r["metric"] == "dynamic_filtering_pass_rate" and not r["agree"]]
    assert passed and {r["cause"] for r in passed} <= {
        "shaped rewards",
        "a mean instead of a spread (on shaped rewards)",
    }


def test_the_audit_command_and_bad_logs(tmp_path):
    truth = fixture.write_nemo_rl(tmp_path / "exp", PAIRS, steps=2, group_size=4, seed=2)
    metrics = _write(tmp_path / "metrics.jsonl", nemo_metrics(truth, leave_one_out=True))
    out = runner.invoke(app, ["audit", str(tmp_path / "exp"), "--metrics", str(metrics), "--format", "json"])
    assert out.exit_code == 0, out.output
    rows = json.loads(out.stdout)
    assert {r["metric"] for r in rows} == {
        "baseline_reward/pct_0",
        "baseline_reward/pct_1",
        "baseline_reward/pct_mixed",
    }
    assert rows == audit.audit_folder(tmp_path / "exp", metrics)
    assert "disagree with the outcomes" in out.stderr and "leave-one-out" in out.stderr
    with pytest.raises(DatasetError, match="logs none of the metrics"):
        audit.read_metrics(_write(tmp_path / "other.jsonl", [{"step": 1, "loss": 0.3}]))
    with pytest.raises(DatasetError, match="no step of"):
        audit.audit_folder(
            tmp_path / "exp", _write(tmp_path / "late.jsonl", [{"step": 99, "frac_reward_zero_std": 0.5}])
        )
