"""Checkpoint profiling: discovery, the history table, the drift views, the Prefect flow."""

from __future__ import annotations

import os
import shutil
import time

import pyarrow.compute as pc
import pytest
from test_flows import FakeSampler, llama, prefect_api  # noqa: F401 - the shared harness fixture

from pipeline import store
from pipeline.flows import checkpoints as ckpt
from pipeline.flows import profile as stages

TINY = {"limit": 4, "n": 2, "max_tokens": 12, "shard_size": 2, "grade_workers": 1, "report": False}


def touch(path, content=b"x", age_s=0.0):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    if age_s:
        t = time.time() - age_s
        os.utime(path, (t, t))
    return path


def test_discovery_orders_by_step_and_skips_fresh_files(tmp_path):
    folder = tmp_path / "run"
    touch(folder / "step-1000.gguf", age_s=600)
    touch(folder / "step-200.gguf", age_s=600)
    touch(folder / "sub" / "final.gguf", age_s=600)
    touch(folder / "notes.txt", age_s=600)
    touch(folder / "step-3000.gguf")  # still being written
    cfg = ckpt.CheckpointConfig(folder=str(folder), min_age_s=60)
    found = ckpt.discover_checkpoints(cfg)
    assert [c.name for c in found] == ["step-200", "step-1000", "final"]
    assert [c.step for c in found] == [200, 1000, None]
    cfg0 = ckpt.CheckpointConfig(folder=str(folder), min_age_s=0)
    assert "step-3000" in [c.name for c in ckpt.discover_checkpoints(cfg0)]


def test_identity_changes_when_a_checkpoint_is_rewritten(tmp_path):
    path = touch(tmp_path / "latest.gguf", b"one", age_s=100)
    cfg = ckpt.CheckpointConfig(paths=(str(path),), min_age_s=0)
    [first] = ckpt.discover_checkpoints(cfg)
    touch(path, b"two!", age_s=50)
    [second] = ckpt.discover_checkpoints(cfg)
    assert first.checkpoint_id != second.checkpoint_id
    copy = shutil.copy2(path, tmp_path / "copy.gguf")
    cfg2 = ckpt.CheckpointConfig(paths=(str(path), str(copy), str(path)), min_age_s=0)
    assert len(ckpt.discover_checkpoints(cfg2)) == 2  # listed twice, found once


def test_vllm_checkpoints_are_model_folders(tmp_path):
    touch(tmp_path / "checkpoint-50" / "config.json", b"{}", age_s=100)
    touch(tmp_path / "checkpoint-50" / "model.safetensors", age_s=100)
    touch(tmp_path / "checkpoint-100" / "config.json", b"{}", age_s=100)
    touch(tmp_path / "logs" / "events.txt", age_s=100)
    cfg = ckpt.CheckpointConfig(
        folder=str(tmp_path), min_age_s=0, profile=stages.ProfileConfig(backend="vllm", model="x")
    )
    assert [c.name for c in ckpt.discover_checkpoints(cfg)] == ["checkpoint-50", "checkpoint-100"]


def test_config_checks(tmp_path):
    with pytest.raises(ValueError, match="checkpoint folder or at least one"):
        ckpt.CheckpointConfig()
    with pytest.raises(ValueError, match="min_age_s=-1"):
        ckpt.CheckpointConfig(paths=("a",), min_age_s=-1)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        ckpt.discover_checkpoints(ckpt.CheckpointConfig(folder=str(tmp_path / "missing")))
    cfg = ckpt.CheckpointConfig(folder=str(tmp_path), profile=stages.ProfileConfig(n=3))
    assert ckpt.CheckpointConfig.from_dict(cfg.to_dict()) == cfg


def _two_checkpoints(tmp_path, source):
    folder = tmp_path / "ckpts"
    folder.mkdir()
    for name in ("step-100.gguf", "step-200.gguf"):
        target = folder / name
        try:
            os.link(source, target)  # same bytes, another path: another checkpoint
        except OSError:
            shutil.copyfile(source, target)
    return folder


def check_history(data_dir, prompts: int) -> None:
    hist = store.read_table(data_dir, "history")
    assert hist.num_rows == 2 * prompts
    assert sorted(pc.unique(hist.column("checkpoint")).to_pylist()) == ["step-100", "step-200"]
    drift = store.query(data_dir, "SELECT * FROM history_drift ORDER BY step, prompt_id")
    later = drift.filter(pc.equal(drift.column("checkpoint"), "step-200"))
    assert later.num_rows == prompts
    assert set(later.column("prev_checkpoint").to_pylist()) == {"step-100"}
    rows = later.to_pylist()
    for row in rows:
        assert row["pass_rate_change"] == pytest.approx(row["pass_rate"] - row["prev_pass_rate"])
        assert row["became_silent"] == (row["silent"] and not row["prev_silent"])
    per_ckpt = store.query(data_dir, store.load_sql("history_checkpoints"))
    assert per_ckpt.column("n_prompts").to_pylist() == [prompts, prompts]
    zs = store.query(data_dir, store.load_sql("history_zero_signal"))
    assert zs.num_rows == 2 * prompts * len(hist.column("group_sizes")[0].as_py())


def test_checkpoint_pass_without_model_and_drift_views(tmp_path, data_dir, monkeypatch):
    """Direct path with a stand-in sampler: history rows, idempotent second pass, views."""
    monkeypatch.setattr(stages, "make_sampler", lambda backend, model=None, **o: FakeSampler(model))
    stages.close_samplers()
    src = touch(tmp_path / "model.gguf", b"weights", age_s=100)
    folder = _two_checkpoints(tmp_path, src)
    cfg = ckpt.CheckpointConfig(
        folder=str(folder),
        min_age_s=0,
        profile=stages.ProfileConfig(limit=5, n=3, shard_size=2, report=False, grade_workers=1),
    )
    done = ckpt.profile_checkpoints_direct(cfg, data_dir)
    assert [d["checkpoint"] for d in done] == ["step-100", "step-200"]
    assert len({d["run_id"] for d in done}) == 2
    check_history(data_dir, 5)
    assert ckpt.profile_checkpoints_direct(cfg, data_dir) == []
    assert store.read_table(data_dir, "history").num_rows == 10
    # The drift command reads the same views.
    from typer.testing import CliRunner

    from pipeline.cli import app

    out = CliRunner().invoke(app, ["drift", "--limit", "3"])
    assert out.exit_code == 0, out.output
    assert "history by checkpoint" in out.output and "step-200" in out.output


@pytest.mark.slow
@llama
def test_checkpoint_flow_profiles_each_checkpoint_once(prefect_api, tmp_path, data_dir):  # noqa: F811
    from pipeline.sample import bundled_model_path

    folder = _two_checkpoints(tmp_path, bundled_model_path())
    cfg = ckpt.CheckpointConfig(folder=str(folder), min_age_s=0, profile=stages.ProfileConfig(**TINY))
    done = ckpt.profile_checkpoints_flow(cfg, data_dir)
    stages.close_samplers()
    assert [d["checkpoint"] for d in done] == ["step-100", "step-200"]
    for d in done:
        run = store.get_run(data_dir, d["run_id"])
        assert run["status"] == "done"
        assert run["model"].endswith(d["checkpoint"] + ".gguf")
    check_history(data_dir, 4)
    # The next scheduled pass finds nothing new and profiles nothing.
    runs_before = store.list_runs(data_dir).num_rows
    assert ckpt.profile_checkpoints_flow(cfg, data_dir) == []
    assert store.list_runs(data_dir).num_rows == runs_before
    assert store.read_table(data_dir, "history").num_rows == 8
