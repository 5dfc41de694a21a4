"""Checkpoint history: find a training run's checkpoints, profile the new ones, append ``history``.

On every (scheduled) pass, ``profile_new_checkpoints`` finds the checkpoints in a folder (GGUF
files for llama.cpp, Hugging Face model folders with a ``config.json`` for vLLM) or in a given
list, skips those already in the ``history`` table, profiles the rest one by one (oldest step
first) and appends one history partition per checkpoint. The drift views in ``sql/`` compare
consecutive checkpoints per prompt.

A checkpoint is identified by its path, size and modification time: a file rewritten in place
(``latest.gguf``) counts as a new checkpoint, a copy under a new name too. Files modified less than
``min_age_s`` ago are left for the next pass, so a checkpoint still being written is never loaded.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pipeline import schema
from pipeline.checks import check_number
from pipeline.errors import ConfigError, MissingFileError
from pipeline.result import ProfileResult
from pipeline.run import ProfileConfig
from pipeline.sample import GGUF_BACKENDS
from pipeline.store import Store

log = logging.getLogger(__name__)

_STEP = re.compile(r"(\d+)(?!.*\d)")  # the last integer in a name: checkpoint-1200, step_300.gguf


@dataclass(frozen=True)
class CheckpointConfig:
    """Where the checkpoints are and how to profile each.

    Attributes:
        folder: folder to scan (GGUF files for xllamacpp, model folders with config.json for vllm).
        paths: explicit checkpoints (files or folders; for the openai backend, served model ids).
        min_age_s: skip files modified less than this many seconds ago (still being written).
        profile: the profile settings; ``model`` is replaced by each checkpoint.
    """

    folder: str | None = None
    paths: tuple[str, ...] = ()
    min_age_s: float = 60.0
    profile: ProfileConfig = field(default_factory=ProfileConfig)

    def __post_init__(self) -> None:
        object.__setattr__(self, "paths", tuple(str(p) for p in self.paths))
        if self.folder is None and not self.paths:
            raise ConfigError("give a checkpoint folder or at least one checkpoint path")
        check_number("min_age_s", self.min_age_s, 0, unit="seconds")

    def to_dict(self) -> dict[str, Any]:
        """Plain, JSON-able parameters (for a Prefect deployment)."""
        return {
            "folder": self.folder,
            "paths": list(self.paths),
            "min_age_s": self.min_age_s,
            "profile": self.profile.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any] | CheckpointConfig) -> CheckpointConfig:
        """The config of ``to_dict``'s values (a config passes through)."""
        if isinstance(data, CheckpointConfig):
            return data
        data = dict(data)
        profile = data.pop("profile", None) or {}
        return cls(profile=ProfileConfig.from_dict(profile), **data)


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint found: display name, path (or model id), step and identity."""

    name: str
    path: str
    step: int | None
    checkpoint_id: str


def _identity(path: Path) -> str:
    """Hash of the resolved path, size and mtime (for a folder: of its config.json)."""
    probe = path / "config.json" if path.is_dir() else path
    try:
        st = probe.stat()
        sig = f"{path.resolve()}\x1f{st.st_size}\x1f{st.st_mtime_ns}"
    except OSError:  # a served model id, not a path
        sig = str(path)
    return hashlib.sha256(sig.encode()).hexdigest()[:16]


def _step(name: str) -> int | None:
    match = _STEP.search(name)
    return int(match.group(1)) if match else None


def _old_enough(path: Path, min_age_s: float, now: float) -> bool:
    if min_age_s <= 0 or not path.exists():
        return True
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    newest = max((p.stat().st_mtime for p in files), default=0.0)
    return now - newest >= min_age_s


def discover_checkpoints(config: CheckpointConfig) -> list[Checkpoint]:
    """The checkpoints of the folder and the list, ordered by step (then name), settled ones only."""
    now = time.time()
    found: list[Path] = []
    if config.folder is not None:
        folder = Path(config.folder).expanduser()
        if not folder.is_dir():
            raise MissingFileError(f"checkpoint folder {str(folder)!r} does not exist")
        if config.profile.engine.backend in GGUF_BACKENDS:
            found += sorted(p for p in folder.rglob("*.gguf") if p.is_file())
        else:
            found += sorted(p.parent for p in folder.rglob("config.json"))
    found += [Path(p).expanduser() for p in config.paths]
    out: dict[str, Checkpoint] = {}
    for path in found:
        if not _old_enough(path, config.min_age_s, now):
            log.info("checkpoint %s is still being written; next pass", path)
            continue
        name = path.stem if path.suffix == ".gguf" else path.name
        ckpt = Checkpoint(name, str(path), _step(name), _identity(path))
        out.setdefault(ckpt.checkpoint_id, ckpt)
    return sorted(out.values(), key=lambda c: (c.step is None, c.step or 0, c.name))


def profiled_ids(store: Store) -> set[str]:
    """Checkpoint ids already in the history table."""
    hist = store.read_table("history")
    return set(pc.unique(hist.column("checkpoint_id")).to_pylist()) if hist.num_rows else set()


def history_rows(store: Store, checkpoint: Checkpoint, run_id: str) -> pa.Table:
    """One history row per prompt of a finished run, from its ``prompt_stats``."""
    stats = store.read_table("prompt_stats", {"run_id": run_id})
    run = store.get_run(run_id)
    rows = stats.num_rows
    n = stats.column("n")
    c = stats.column("c")
    silent = pc.or_(pc.equal(c, 0), pc.equal(c, n))
    const = {
        "checkpoint_id": checkpoint.checkpoint_id,
        "checkpoint": checkpoint.name,
        "checkpoint_path": checkpoint.path,
        "step": checkpoint.step,
        "run_id": run_id,
        "dataset": run.dataset,
        "model": run.model,
    }
    data = {k: pa.array([v] * rows, schema.HISTORY.field(k).type) for k, v in const.items()}
    for name in (
        "prompt_id",
        "n",
        "c",
        "pass_rate",
        "group_sizes",
        "zero_signal",
        "silent_all_correct",
        "silent_all_wrong",
    ):
        data[name] = stats.column(name)
    data["silent"] = silent
    data["profiled_at"] = pa.array([datetime.now(UTC)] * rows, pa.timestamp("us", tz="UTC"))
    return pa.table(data)


def record_history(store: Store, checkpoint: Checkpoint, run_id: str) -> int:
    """Append a profiled checkpoint to ``history`` (one atomic partition); returns its rows."""
    rows = history_rows(store, checkpoint, run_id)
    store.write_table("history", rows, {"checkpoint_id": checkpoint.checkpoint_id})
    return rows.num_rows


def profile_new_checkpoints(
    config: CheckpointConfig,
    store: Store,
    profile_one: Callable[[ProfileConfig], ProfileResult],
    record: Callable[[Store, Checkpoint, str], int] = record_history,
) -> list[dict[str, Any]]:
    """Profile every checkpoint not yet in history, oldest step first.

    Args:
        config: where the checkpoints are and the profile settings.
        store: the data directory.
        profile_one: runs one profile (directly or as the Prefect ``profile`` flow).
        record: appends a checkpoint's rows to history (a Prefect task in the flow).

    Returns:
        One dict per checkpoint profiled in this pass: checkpoint, path, step, run_id, rows.
    """
    done = profiled_ids(store)
    todo = [c for c in discover_checkpoints(config) if c.checkpoint_id not in done]
    log.info("%d new checkpoints (%d already profiled)", len(todo), len(done))
    out = []
    for ckpt in todo:
        # One model in memory at a time: each profile frees its engines when it ends.
        run = profile_one(replace(config.profile, engine=replace(config.profile.engine, model=ckpt.path)))
        rows = record(store, ckpt, run.run_id)
        out.append({"checkpoint": ckpt.name, "path": ckpt.path, "step": ckpt.step, "run_id": run.run_id, "rows": rows})
    return out
