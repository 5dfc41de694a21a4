"""A trainer's logged group statistics against the binary outcomes of its own rollouts.

Each trainer logs how many of a step's groups carried no signal, in its own words, and each has
shipped a way to get it wrong. Per step, ``audit`` recomputes the logged metric from the rollouts'
0/1 outcomes (the group's mean as baseline, its full spread) and, where the two disagree, names the
likely cause: the first of ``CAUSES`` whose recomputation gives the logged value.

Metrics read (``METRICS``), by the trainer's own definition:

- TRL ``frac_reward_zero_std``: the share of rollouts whose group's rewards have zero spread.
- OpenRLHF ``dynamic_filtering_pass_rate``: the percentage of groups its dynamic filter kept (mean
  reward strictly inside its range, (0, 1) by default).
- NeMo-RL ``baseline_reward/pct_0``, ``pct_1``, ``pct_mixed``: the percentage of rollouts whose
  baseline is 0, 1, or between (``calculate_baseline_and_std_per_prompt``; leave-one-out by default,
  so the one right answer of [1, 0, 0, 0] has baseline 0).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline import datasets
from pipeline.checks import check_number
from pipeline.errors import DatasetError
from pipeline.observe import trainers


@dataclass(frozen=True)
class Metric:
    trainer: str
    scale: float  # 1 for a share, 100 for a percentage
    kind: str  # "zero_spread" (rollouts), "kept" (groups), "baseline_0", "baseline_1", "baseline_mixed" (rollouts)


METRICS = {
    "frac_reward_zero_std": Metric("TRL", 1.0, "zero_spread"),
    "dynamic_filtering_pass_rate": Metric("OpenRLHF", 100.0, "kept"),
    "baseline_reward/pct_0": Metric("NeMo-RL", 100.0, "baseline_0"),
    "baseline_reward/pct_1": Metric("NeMo-RL", 100.0, "baseline_1"),
    "baseline_reward/pct_mixed": Metric("NeMo-RL", 100.0, "baseline_mixed"),
}

# (cause, which rewards, leave-one-out, a group judged by its mean rather than its spread), in the
# order they are tried; the first that gives the logged value is named.
CAUSES = (
    ("a leave-one-out baseline", "outcomes", True, False),
    ("shaped rewards", "rewards", False, False),
    ("a mean instead of a spread (on shaped rewards)", "rewards", False, True),
    ("shaped rewards and a leave-one-out baseline", "rewards", True, False),
)
DEFAULT_TOLERANCE = 1e-6  # on the share (a percentage is compared after dividing by 100)


def _baselines(group: np.ndarray, loo: bool) -> np.ndarray:
    """Each rollout's baseline: its group's mean, or the mean of the others (a group of one: its own
    reward, as NeMo-RL sets it)."""
    if not loo:
        return np.full(len(group), group.mean())
    if len(group) < 2:
        return group.astype(float)
    return (group.sum() - group) / (len(group) - 1)


def _silent(group: np.ndarray, loo: bool, on_mean: bool) -> np.ndarray:
    """Per rollout, whether its group (or, leave-one-out, the others of it) carries no signal: no
    spread, or (``on_mean``) a mean outside (0, 1)."""
    if on_mean:
        base = _baselines(group, loo)
        return (base <= 0) | (base >= 1)
    if not loo:
        return np.full(len(group), bool(np.all(group == group[0])))
    return np.array([len(group) < 3 or bool(np.all(np.delete(group, i) == np.delete(group, i)[0])) for i in
                     range(len(group))])  # fmt: skip


def value(kind: str, groups: list[np.ndarray], *, loo: bool = False, on_mean: bool = False) -> float:
    """A metric's share (0 to 1) over one step's groups."""
    if not groups:
        return float("nan")
    if kind == "kept":
        return float(np.mean([not _silent(g, False, on_mean)[0] for g in groups]))
    if kind == "zero_spread":
        return float(np.concatenate([_silent(g, loo, on_mean) for g in groups]).mean())
    base = np.concatenate([_baselines(g, loo) for g in groups])
    zero, one = float(np.mean(base == 0)), float(np.mean(base == 1))
    return {"baseline_0": zero, "baseline_1": one, "baseline_mixed": 1.0 - zero - one}[kind]


def _groups(got: trainers.Rollouts, which: str) -> list[np.ndarray]:
    values = got.correct.astype(float) if which == "outcomes" else got.rewards
    out: dict[str, list[float]] = {}
    for g, v in zip(got.groups, values.tolist(), strict=True):
        out.setdefault(g, []).append(v)
    return [np.asarray(v) for v in out.values()]


def read_metrics(path: str | Path) -> dict[int, dict[str, float]]:
    """A trainer's logged metrics per step: JSON Lines or CSV rows with a ``step`` (prime-rl's
    ``metrics.jsonl``, a W&B export), or TRL's ``trainer_state.json`` (its ``log_history``). A key
    counts for a metric when it is its name or ends in ``/<name>`` (``train/baseline_reward/pct_0``)."""
    path = Path(path)
    if path.suffix == ".json":
        try:
            rows = json.loads(path.read_text()).get("log_history")
        except (json.JSONDecodeError, AttributeError) as exc:
            raise DatasetError(f"{str(path)!r} is not a trainer_state.json with a log_history") from exc
        if not isinstance(rows, list):
            raise DatasetError(f"{str(path)!r} has no log_history list (TRL's trainer_state.json)")
    else:
        rows = datasets.read_local(path).to_pylist()
    out: dict[int, dict[str, float]] = {}
    for r, row in enumerate(rows):
        step = row.get("step") if isinstance(row, dict) else None
        if isinstance(step, bool) or not isinstance(step, int | float) or float(step) != int(step):
            raise DatasetError(f"{str(path)!r}: row {r} has no integer step (step={step!r})")
        for key, v in row.items():
            name = next((m for m in METRICS if key == m or key.endswith("/" + m)), None)
            if name is not None and isinstance(v, int | float) and not isinstance(v, bool) and np.isfinite(v):
                out.setdefault(int(step), {})[name] = float(v)
    if not out:
        raise DatasetError(f"{str(path)!r} logs none of the metrics audited: {', '.join(METRICS)}")
    return out


def audit(
    rollouts: dict[int, trainers.Rollouts], logged: dict[int, dict[str, float]], tolerance: float = DEFAULT_TOLERANCE
) -> list[dict]:
    """Per step and metric logged: the logged value, the one the outcomes give, whether they agree
    and, when not, the likely cause (None: none of ``CAUSES`` gives the logged value)."""
    tolerance = check_number("tolerance", tolerance, 0, unit="share")
    rows = []
    for step in sorted(set(rollouts) & set(logged)):
        got = rollouts[step]
        for name, seen in sorted(logged[step].items()):
            metric = METRICS[name]
            share = seen / metric.scale
            want = value(metric.kind, _groups(got, "outcomes"))
            agree = abs(share - want) <= tolerance
            cause = None
            if not agree:
                for label, which, loo, on_mean in CAUSES:
                    if abs(value(metric.kind, _groups(got, which), loo=loo, on_mean=on_mean) - share) <= tolerance:
                        cause = label
                        break
            rows.append({
                "step": step, "metric": name, "trainer": metric.trainer, "logged": seen,
                "from_outcomes": want * metric.scale, "agree": agree,
                "cause": None if agree else (cause or "unexplained"),
            })  # fmt: skip
    return rows


def audit_folder(
    folder: str | Path,
    metrics: str | Path,
    *,
    fmt: str | None = None,
    correct_field: str | None = None,
    score_threshold: float | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
) -> list[dict]:
    """``audit`` of a trainer's rollout folder (its format read from its files unless named) against
    its metrics log: the steps both hold, each step file whole (one still being written is left out)."""
    fmt = fmt or trainers.detect(folder)
    logged = read_metrics(metrics)
    rollouts = {}
    for step, path in trainers.steps_of(fmt, folder):
        if step in logged:
            got = trainers.read_step(fmt, path, step, correct_field=correct_field, score_threshold=score_threshold)
            if got is not None:
                rollouts[step] = got
    if not rollouts:
        raise DatasetError(
            f"no step of {str(folder)!r} ({fmt}) is in {str(metrics)!r} (logged steps {sorted(logged)[:5]}...): "
            "give the metrics of the run that wrote these rollouts"
        )
    return audit(rollouts, logged, tolerance)
