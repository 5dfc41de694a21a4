"""Rollout folders of trainers other than verl, read as they are written: prime-rl and NeMo-RL.

- **prime-rl** (its orchestrator's file monitor, ``prime_rl/monitors/file.py``): one folder per step,
  ``rollouts/step_<N>/{train,eval}/{all,effective}/traces.jsonl``, one verifiers episode per line
  (``Episode.to_record()``, ``verifiers/v1/episode.py``): ``group.id`` (the rollout group),
  ``run.work.step`` and ``run.work.policy`` (the policy versions that generated it), ``task.data``
  (``prompt``, ``answer``, ``idx``) and ``traces``, each with ``ok`` and ``rewards`` (``{name: {score,
  weight}}``; the trace's reward is the sum of ``score * weight``). ``train/all`` gets every episode
  the moment it arrives (errored and curriculum-rejected ones too); ``train/effective`` only what was
  trained on, written once when the step's batch ships. ``all`` is read (``effective`` drops the
  groups a curriculum rejected, a biased sample); a step is whole once its ``effective`` file exists.
- **NeMo-RL** (``nemo_rl/algorithms/grpo.py``, ``Logger.log_batched_dict_as_jsonl``):
  ``train_data_step<N>.jsonl`` in the log directory, written in mode "w" after step N, one line per
  rollout: ``content`` (``[[message, ...]]``, the conversation's message texts), ``rewards``
  (``[reward]``, after NeMo-RL's reward scaling and shaping), ``idx`` and token-level fields. The
  rollouts of one prompt are consecutive (``repeat_interleave``). With dynamic sampling the file holds
  only the groups it kept (``filtered_rewards``): not a sample of the prompts' outcomes.

Correctness is binary, as for verl (``sources._binary``): a named reward or metric, or the total
reward when it is 0/1, or ``>= score_threshold``.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from pipeline.errors import ConfigError, DatasetError, MissingFileError
from pipeline.observe import record, sources
from pipeline.observe.match import Matcher

log = logging.getLogger(__name__)

FORMATS = {
    "verl": "verl: <global_step>.jsonl (trainer.rollout_data_dir)",
    "prime-rl": "prime-rl: rollouts/step_<N>/train/all/traces.jsonl (the orchestrator's output dir)",
    "nemo-rl": "NeMo-RL: train_data_step<N>.jsonl (the logger's log dir)",
}
_PRIME_STEP = re.compile(r"^step_(\d+)$")
_NEMO_STEP = re.compile(r"^train_data_step(\d+)\.jsonl$")
_VERL_STEP = re.compile(r"^(\d+)\.jsonl$")


@dataclass(frozen=True)
class Rollouts:
    """One step's rollouts as the trainer wrote them, before matching: per rollout its prompt text,
    gold answer (None: the format has none), group, the trainer's reward, whether it is correct, and
    its line in the file; ``skipped``: rollouts that are no outcome (an errored trace), with why."""

    prompts: list[str | None]
    golds: list[str | None]
    groups: list[str]
    rewards: np.ndarray
    correct: np.ndarray
    lines: np.ndarray
    skipped: list[tuple[int, str, Any]]
    size: int
    rows: int
    modified: float
    read: record.FileRead | None = None  # the file's stamp, kept with the stored step (None: not kept)


# --- the folder's format -------------------------------------------------------------------------


def _prime_root(folder: Path) -> Path:
    """prime-rl's ``rollouts`` folder: the folder given, or its ``rollouts`` (the output dir given)."""
    inner = folder / "rollouts"
    return inner if inner.is_dir() else folder


def detect(folder: str | Path) -> str:
    """The format of a trainer's rollout folder (``FORMATS``); a folder holding none of them is a
    ``DatasetError`` that names what it holds and the formats read."""
    folder = Path(folder)
    if not folder.is_dir():
        raise MissingFileError(f"rollout folder {str(folder)!r} does not exist")
    names = sorted(p.name for p in folder.iterdir())
    if any(_PRIME_STEP.match(p.name) and p.is_dir() for p in _prime_root(folder).iterdir()):
        return "prime-rl"
    if any(_NEMO_STEP.match(n) for n in names):
        return "nemo-rl"
    if any(_VERL_STEP.match(n) for n in names):
        return "verl"
    shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "") if names else "nothing"
    raise DatasetError(
        f"{str(folder)!r} holds no trainer's rollouts (it holds {shown}); formats read: {'; '.join(FORMATS.values())}"
    )


def _check_step(step: int, path: Path) -> int:
    if step > record.MAX_STEP:
        raise DatasetError(f"{str(path)!r}: step {step} is out of range (0 to {record.MAX_STEP}); move it out")
    return step


def prime_steps(folder: str | Path) -> list[tuple[int, Path]]:
    """prime-rl's train steps, by step: ``[(step, .../step_<N>/train/all/traces.jsonl), ...]``."""
    root = _prime_root(Path(folder))
    if not root.is_dir():
        raise MissingFileError(f"prime-rl rollout folder {str(root)!r} does not exist")
    steps: dict[int, Path] = {}
    for path in sorted(root.iterdir()):
        match = _PRIME_STEP.match(path.name)
        file = path / "train" / "all" / "traces.jsonl"
        if not match or not file.is_file():
            log.info("%s: no train/all/traces.jsonl, left alone", path)
            continue
        step = _check_step(int(match.group(1)), path)
        if step in steps:
            raise DatasetError(f"duplicate step {step} in {str(root)!r}: {steps[step].parents[2].name} and {path.name}")
        steps[step] = file
    return sorted(steps.items())


def prime_shipped(path: Path) -> bool:
    """Whether prime-rl shipped this step's batch (its ``train/effective`` file exists): its ``all``
    file is whole, since every later episode goes to a later step."""
    return (path.parents[1] / "effective" / "traces.jsonl").is_file()


def nemo_steps(folder: str | Path) -> list[tuple[int, Path]]:
    """NeMo-RL's ``train_data_step<N>.jsonl`` files, by step."""
    folder = Path(folder)
    if not folder.is_dir():
        raise MissingFileError(f"NeMo-RL log folder {str(folder)!r} does not exist")
    steps: dict[int, Path] = {}
    for path in sorted(folder.iterdir()):
        match = _NEMO_STEP.match(path.name)
        if not match or not path.is_file():
            continue
        step = _check_step(int(match.group(1)), path)
        if step in steps:
            raise DatasetError(f"duplicate step {step} in {str(folder)!r}: {steps[step].name} and {path.name}")
        steps[step] = path
    return sorted(steps.items())


# --- reading one step ----------------------------------------------------------------------------


def _objects(path: Path) -> tuple[list[dict], list[int], int, float, record.FileRead] | None:
    """The file's JSON objects and their lines, its size, modification time and stamp (what a stored
    step keeps, ``record.FileRead``); None when its last line is cut or it changed while read (the
    trainer is still writing it), as ``sources.read_verl_file`` reads a verl step."""
    try:
        before = path.stat()
        data = path.read_bytes()
        after = path.stat()
    except FileNotFoundError as exc:
        raise MissingFileError(f"rollout file {str(path)!r} does not exist") from exc
    if (before.st_size, before.st_mtime_ns) != (after.st_size, after.st_mtime_ns) or len(data) != after.st_size:
        log.warning("%s: changed while read (still being written); step skipped this time", path)
        return None
    mtime = after.st_mtime
    body = sources._complete_body(path, data)
    if body is None:
        log.warning("%s: last line is cut (still being written); step skipped this time", path)
        return None
    objects, lines = [], []
    for at, raw in enumerate(body.split(b"\n")[:-1]):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise DatasetError(f"{str(path)!r}: line {at + 1} is not valid JSON: {raw[:200]!r}") from exc
        if not isinstance(obj, dict):
            raise DatasetError(f"{str(path)!r}: line {at + 1} holds a JSON {type(obj).__name__}, not an object")
        objects.append(obj)
        lines.append(at)
    return (
        objects,
        lines,
        len(data),
        mtime,
        record.FileRead(len(data), len(lines), record.digest(data), after.st_mtime_ns),
    )


def _prompt_text(prompt: Any) -> str | None:
    """verifiers' ``TaskData.prompt_text``: a string, or the message contents joined by blank lines."""
    if prompt is None or isinstance(prompt, str):
        return prompt
    texts = []
    for message in prompt if isinstance(prompt, list) else []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):  # content parts: the text ones
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        if content:
            texts.append(content)
    return "\n\n".join(texts)


def _trace_value(trace: dict, field: str | None) -> float | None:
    """A trace's reward (the sum of ``score * weight``), or the named reward's score or metric."""
    rewards = trace.get("rewards") or {}
    if field is None:
        if any(r is None for r in rewards.values()):
            return None
        return float(sum(r["score"] * r.get("weight", 1.0) for r in rewards.values()))
    if isinstance(rewards.get(field), dict):
        return float(rewards[field]["score"])
    value = (trace.get("metrics") or {}).get(field)
    return None if value is None else float(value)


def read_prime(
    path: str | Path, step: int, *, correct_field: str | None = None, score_threshold: float | None = None
) -> Rollouts | None:
    """One prime-rl ``train/all/traces.jsonl``: each trace of each episode one rollout, its group the
    episode's ``group.id``. A trace that errored (``ok`` false), scored nothing, or belongs to an agent
    that does not train is skipped with its reason; None while the last line is cut."""
    path = Path(path)
    got = _objects(path)
    if got is None:
        return None
    objects, lines, size, mtime, stamp = got
    prompts, golds, groups, values, at, skipped = [], [], [], [], [], []
    for obj, line in zip(objects, lines, strict=True):
        if "traces" not in obj or "task" not in obj:
            raise DatasetError(
                f"{str(path)!r}: line {line + 1} is no verifiers episode (fields {sorted(obj)[:8]}); not prime-rl"
            )
        data = (obj.get("task") or {}).get("data") or {}
        text, gold = _prompt_text(data.get("prompt")), data.get("answer")
        group = (obj.get("group") or {}).get("id") or obj.get("id") or f"line-{line}"
        if not obj["traces"]:
            skipped.append((line, f"episode has no trace ({_error(obj)})", text))
        for trace in obj["traces"]:
            if not trace.get("ok", False):
                skipped.append((line, f"trace errored ({_error(trace)})", text))
                continue
            if not (trace.get("agent") or {}).get("trainable", True):
                skipped.append((line, "agent does not train", text))
                continue
            value = _trace_value(trace, correct_field)
            if value is None:
                where = f"no {correct_field!r} reward or metric" if correct_field else "a reward did not run"
                skipped.append((line, where, text))
                continue
            prompts.append(text)
            golds.append(None if gold is None else str(gold))
            groups.append(str(group))
            values.append(value)
            at.append(line)
    rewards = np.asarray(values, dtype=np.float64)
    field = correct_field or "reward"
    correct = sources._binary(pa.array(rewards, pa.float64()), field, str(path), score_threshold)
    at_lines = np.asarray(at, np.int64)
    return Rollouts(prompts, golds, groups, rewards, correct, at_lines, skipped, size, len(lines), mtime, stamp)


def _error(obj: dict) -> str:
    errors = obj.get("errors") or []
    last = errors[-1] if errors and isinstance(errors[-1], dict) else {}
    return last.get("type", "no error recorded")


def _one(value: Any, name: str, path: Path, line: int) -> Any:
    """A NeMo-RL cell: every field of a line is a batch of one (``make_microbatch_iterator(1)``)."""
    if not isinstance(value, list) or len(value) != 1:
        raise DatasetError(f"{str(path)!r}: line {line + 1}: {name} is {str(value)[:80]}, not a batch of one")
    return value[0]


def read_nemo(path: str | Path, step: int, *, score_threshold: float | None = None) -> Rollouts | None:
    """One NeMo-RL ``train_data_step<N>.jsonl``: per line the conversation's messages but the last (the
    prompt) and the reward; a group is a run of consecutive lines of one prompt. A file of dynamic
    sampling (``filtered_rewards``) is a ``DatasetError``: it holds only the groups it kept."""
    path = Path(path)
    got = _objects(path)
    if got is None:
        return None
    objects, lines, size, mtime, stamp = got
    prompts, values = [], []
    for obj, line in zip(objects, lines, strict=True):
        if "filtered_rewards" in obj:
            raise DatasetError(
                f"{str(path)!r} was written under dynamic sampling (filtered_rewards): it holds only the groups with "
                "a spread, the all-right and all-wrong ones dropped, so its pass rates are biased; track a run "
                "without grpo.use_dynamic_sampling"
            )
        if "content" not in obj or "rewards" not in obj:
            raise DatasetError(f"{str(path)!r}: line {line + 1} has no content or rewards (fields {sorted(obj)[:8]})")
        messages = _one(obj["content"], "content", path, line)
        messages = messages if isinstance(messages, list) else [messages]
        texts = [m for m in messages[:-1] if isinstance(m, str)] or [m for m in messages if isinstance(m, str)]
        prompts.append("\n\n".join(texts) or None)
        values.append(_one(obj["rewards"], "rewards", path, line))
    groups = _runs(prompts)  # a prompt's rollouts are consecutive (repeat_interleave)
    bad = next((i for i, v in enumerate(values) if isinstance(v, bool) or not isinstance(v, int | float)), None)
    if bad is not None:
        raise DatasetError(f"{str(path)!r}: line {lines[bad] + 1}: reward {values[bad]!r} is not a number")
    rewards = np.asarray(values, dtype=np.float64)
    correct = sources._binary(pa.array(rewards, pa.float64()), "rewards", str(path), score_threshold)
    n = len(prompts)
    lines_at = np.asarray(lines, np.int64)
    return Rollouts(prompts, [None] * n, groups, rewards, correct, lines_at, [], size, n, mtime, stamp)


def _runs(prompts: list[str | None]) -> list[str]:
    """A group per run of consecutive rollouts of one prompt (the trainers repeat a prompt in place).
    Two groups of one prompt side by side are one run: where every run is a multiple of the shortest
    (every group has the configured size), a longer run is split into groups of that size."""
    runs, current = [], None
    for at, text in enumerate(prompts):
        if at == 0 or text != current:
            runs.append(0)
            current = text
        runs[-1] += 1
    size = min(runs, default=1)
    split = all(r % size == 0 for r in runs)
    groups: list[str] = []
    number = 0
    for r in runs:
        parts = r // size if split else 1
        for _ in range(parts):
            groups += [f"group-{number}"] * (r // parts)
            number += 1
    return groups


def read_verl(
    path: str | Path, step: int, *, correct_field: str | None = None, score_threshold: float | None = None
) -> Rollouts | None:
    """One verl step file (``sources``' reader) as rollouts: a group per run of one ``input``, the
    reward its ``score``, correctness as ``sources.read_verl_file`` counts it."""
    path = Path(path)
    data = path.read_bytes()
    body = sources._complete_body(path, data)
    if body is None:
        return None
    cols, lines = sources._read_verl_lines(path, body, correct_field)
    if "input" not in cols or "score" not in cols:
        raise DatasetError(f"{str(path)!r}: no input or score field (fields {sorted(cols)}); not a verl rollout dump")
    field = "score" if score_threshold is not None else correct_field or (
        sources.VERL_CORRECT_FIELD if sources.VERL_CORRECT_FIELD in cols else "score")  # fmt: skip
    if field not in cols:
        raise ConfigError(f"correct_field={correct_field!r} is not a field of {str(path)!r}: fields {sorted(cols)}")
    correct = sources._binary(cols[field], field, str(path), score_threshold)
    prompts = cols["input"].to_pylist()
    rewards = np.asarray(cols["score"].to_pylist(), dtype=np.float64)
    n = len(prompts)
    return Rollouts(
        prompts, [None] * n, _runs(prompts), rewards, correct, lines, [], len(data), n, path.stat().st_mtime
    )


def steps_of(fmt: str, folder: str | Path) -> list[tuple[int, Path]]:
    """The step files of a trainer's folder in its format, by step."""
    if fmt == "verl":
        return sources.verl_steps(folder)
    return prime_steps(folder) if fmt == "prime-rl" else nemo_steps(folder)


def read_step(
    fmt: str,
    path: str | Path,
    step: int,
    *,
    correct_field: str | None = None,
    score_threshold: float | None = None,
) -> Rollouts | None:
    """One step file of a trainer's folder, before matching."""
    if correct_field is not None and score_threshold is not None:
        raise ConfigError(
            f"correct_field={correct_field!r} and score_threshold={score_threshold!r}: name one way to count a "
            "rollout correct, a binary field or a threshold on the reward"
        )
    if fmt == "prime-rl":
        return read_prime(path, step, correct_field=correct_field, score_threshold=score_threshold)
    if fmt == "nemo-rl":
        if correct_field is not None:
            raise ConfigError(f"correct_field={correct_field!r}: NeMo-RL's step file has one reward, no named fields")
        return read_nemo(path, step, score_threshold=score_threshold)
    if fmt == "verl":
        return read_verl(path, step, correct_field=correct_field, score_threshold=score_threshold)
    raise ConfigError(f"rollout format {fmt!r} is unknown: allowed {', '.join(FORMATS)}")


def read_file(
    fmt: str,
    path: str | Path,
    step: int,
    matcher: Matcher,
    *,
    source: str,
    model: str | None,
    correct_field: str | None = None,
    score_threshold: float | None = None,
) -> sources.VerlFile | None:
    """One step file matched to the dataset's prompts, as ``sources.read_verl_file`` returns a verl
    step: per group of a prompt (the trainer's group id) its rollouts and correct ones; skipped and
    unmatched rollouts in ``unmatched``."""
    record.check_source(source)
    got = read_step(fmt, path, step, correct_field=correct_field, score_threshold=score_threshold)
    if got is None:
        return None
    gts = None if all(g is None for g in got.golds) else pa.array(got.golds, pa.string())
    uids = pa.array(got.groups, pa.string())
    obs, unmatched = sources._count_rows(
        matcher, pa.array(got.prompts, pa.string()), gts, got.correct, got.lines, source=source, step=step,
        model=model, observed_at=datetime.fromtimestamp(got.modified, UTC), uids=uids,
    )  # fmt: skip
    if got.skipped:
        skipped = sources._unmatched(source, step, *map(list, zip(*got.skipped, strict=True)))
        unmatched = pa.concat_tables([unmatched, skipped])
    return sources.VerlFile(obs, unmatched, got.size, got.rows, got.modified, got.read)
