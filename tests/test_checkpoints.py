"""Checkpoint profiling: discovery, the history table, the drift views, the Prefect flow."""

from __future__ import annotations

import os
import shutil
import time

import pyarrow.compute as pc
import pytest
from pipeline.flows import executors, prefect_flows

from pipeline import datasets
from pipeline import history as ckpt
from pipeline import run as stages
from pipeline.errors import ConfigError, MissingFileError
from pipeline.store import Store, load_sql


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
    # vLLM runs model folders, not GGUF files: none of these.
    vllm_cfg = stages.ProfileConfig.build(backend="vllm")
    vllm = ckpt.CheckpointConfig(folder=str(folder), min_age_s=60, profile=vllm_cfg)
    assert ckpt.discover_checkpoints(vllm) == []


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
        folder=str(tmp_path), min_age_s=0, profile=stages.ProfileConfig.build(backend="vllm", model="x")
    )
    assert [c.name for c in ckpt.discover_checkpoints(cfg)] == ["checkpoint-50", "checkpoint-100"]


def test_config_checks(tmp_path):
    with pytest.raises(ConfigError, match="checkpoint folder or at least one"):
        ckpt.CheckpointConfig()
    with pytest.raises(ConfigError, match="min_age_s=-1"):
        ckpt.CheckpointConfig(paths=("a",), min_age_s=-1)
    with pytest.raises(MissingFileError, match="does not exist"):
        ckpt.discover_checkpoints(ckpt.CheckpointConfig(folder=str(tmp_path / "missing")))
    cfg = ckpt.CheckpointConfig(folder=str(tmp_path), profile=stages.ProfileConfig.build(n=3))
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


def check_history(data_dir, prompts: int, names=("step-100", "step-200")) -> None:
    hist = Store(data_dir).read_table("history")
    assert hist.num_rows == 2 * prompts
    assert sorted(pc.unique(hist.column("checkpoint")).to_pylist()) == list(names)
    drift = Store(data_dir).query("SELECT * FROM history_drift ORDER BY step, prompt_id")
    later = drift.filter(pc.equal(drift.column("checkpoint"), names[1]))
    assert later.num_rows == prompts
    assert set(later.column("prev_checkpoint").to_pylist()) == {names[0]}
    rows = later.to_pylist()
    for row in rows:
        assert row["pass_rate_change"] == pytest.approx(row["pass_rate"] - row["prev_pass_rate"])
        assert row["became_silent"] == (row["silent"] and not row["prev_silent"])
    per_ckpt = Store(data_dir).query(load_sql("history_checkpoints"))
    assert per_ckpt.column("n_prompts").to_pylist() == [prompts, prompts]
    zs = Store(data_dir).query(load_sql("history_zero_signal"))
    assert zs.num_rows == 2 * prompts * len(hist.column("group_sizes")[0].as_py())


def test_checkpoint_pass_without_model_and_drift_views(tmp_path, data_dir, close_engines):
    """Direct path with the simulate backend, one pass-rate file per checkpoint: history rows,
    an idempotent second pass, the drift views and the drift command."""
    problems = datasets.load("arithmetic", limit=5).problems
    ids = problems.column("prompt_id").to_pylist()
    paths = []
    for step, rates in ((100, [0.0, 0.5, 1.0, 0.2, 0.9]), (200, [0.0, 0.9, 1.0, 1.0, 0.5])):
        path = touch(tmp_path / "ckpts" / f"step-{step}.csv", age_s=100)
        path.write_text("prompt_id,pass_rate\n" + "".join(f"{p},{r}\n" for p, r in zip(ids, rates, strict=True)))
        paths.append(str(path))
    cfg = ckpt.CheckpointConfig(
        paths=tuple(paths),
        min_age_s=0,
        profile=stages.ProfileConfig.build(
            backend="simulate", limit=5, n=3, shard_size=2, report=False, grade_workers=1
        ),
    )
    store = Store.open(data_dir)
    done = executors.checkpoints_direct(cfg, store)
    names = ("step-100.csv", "step-200.csv")
    assert [d["checkpoint"] for d in done] == list(names)
    assert len({d["run_id"] for d in done}) == 2
    check_history(data_dir, 5, names)
    assert executors.checkpoints_direct(cfg, store) == []
    assert store.read_table("history").num_rows == 10
    # Always-right and always-wrong prompts stay silent; the one at 0.2 -> 1.0 cannot become less silent.
    stats = store.query("select prompt_id, checkpoint, c from history order by checkpoint, prompt_id").to_pylist()
    by = {(r["checkpoint"], r["prompt_id"]): r["c"] for r in stats}
    assert by[("step-100.csv", ids[0])] == 0 and by[("step-200.csv", ids[2])] == 3
    assert by[("step-200.csv", ids[3])] == 3
    # The drift command reads the same views.
    from typer.testing import CliRunner

    from pipeline.cli import app

    out = CliRunner().invoke(app, ["drift", "--limit", "3"])
    assert out.exit_code == 0, out.output
    assert "history by checkpoint" in out.output and "step-200" in out.output


@pytest.mark.slow
def test_checkpoint_flow_profiles_each_checkpoint_once(prefect_api, tmp_path, data_dir, tiny, close_engines):
    from pipeline.sample import bundled_model_path

    folder = _two_checkpoints(tmp_path, bundled_model_path())
    cfg = ckpt.CheckpointConfig(folder=str(folder), min_age_s=0, profile=stages.ProfileConfig.build(**tiny))
    done = prefect_flows.checkpoints_flow(cfg, Store.open(data_dir))
    assert [d["checkpoint"] for d in done] == ["step-100", "step-200"]
    for d in done:
        run = Store(data_dir).get_run(d["run_id"])
        assert run.status == "done"
        assert run.model.endswith(d["checkpoint"] + ".gguf")
    check_history(data_dir, 4)
    # The next scheduled pass finds nothing new and profiles nothing.
    runs_before = Store(data_dir).list_runs().num_rows
    assert prefect_flows.checkpoints_flow(cfg, Store(data_dir)) == []
    assert Store(data_dir).list_runs().num_rows == runs_before
    assert Store(data_dir).read_table("history").num_rows == 8
