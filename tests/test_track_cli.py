"""``difficulty track`` and ``difficulty current`` end to end, on the committed verl dump (verl
0.9.1's own writer, DeepScaleR prompts), a table and a profile run: counts land once, a rerun adds
nothing, the newest step waits while verl writes it, unmatched rows are kept and counted."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.store import Store

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "verl_dump"
runner = CliRunner()


@pytest.fixture
def dump(tmp_path) -> Path:
    folder = tmp_path / "grpo-run"
    shutil.copytree(FIXTURE, folder)
    return folder


def _track(*args: str) -> dict:
    out = runner.invoke(app, ["track", *args, "--format", "json"])
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)[0]


def _rollouts(folder: Path) -> int:
    return sum(len(p.read_text().splitlines()) for p in folder.glob("*.jsonl"))


def test_track_a_verl_dump_once_then_only_new_steps(dump, shared, data_dir):
    data = str(shared / "deepscaler" / "verl_train_sub.parquet")
    first = _track(str(dump), "--data-file", data, "--model", "qwen-grpo")
    assert first["source"] == "verl:grpo-run" and first["steps_written"] == 3
    assert first["rollouts"] == _rollouts(dump) and first["unmatched_rows"] == 0
    again = _track(str(dump), "--data-file", data)
    assert again["steps_written"] == 0 and again["steps_already_recorded"] == 3
    # verl writes step 4 in mode "w" from a thread: a file cut mid-line waits for the next import
    step4 = (dump / "3.jsonl").read_text().replace('"step": 3', '"step": 4')
    (dump / "4.jsonl").write_text(step4[: len(step4) // 2])
    cut = _track(str(dump), "--data-file", data)
    assert cut["steps_written"] == 0 and cut["steps_pending"] == 1
    (dump / "4.jsonl").write_text(step4)
    # the newest step is complete once unchanged for the settle time with a full step's rollouts
    settled = time.time() - 120
    os.utime(dump / "4.jsonl", (settled, settled))
    done = _track(str(dump), "--data-file", data)
    assert (done["steps_written"], done["first_step"]) == (1, 4)
    store = Store(data_dir)
    rows = store.query("select step, sum(n) n, count(*) prompts from observations group by step order by step")
    assert rows.column("step").to_pylist() == [1, 2, 3, 4]
    assert sum(rows.column("n").to_pylist()) == _rollouts(dump)
    steps = store.query("select step, silent_all_wrong, silent_all_right, silent from observation_steps order by step")
    for r in steps.to_pylist():
        assert r["silent"] == pytest.approx(r["silent_all_wrong"] + r["silent_all_right"])


def test_a_dump_of_another_dataset_is_kept_as_unmatched(dump, shared, data_dir):
    info = _track(str(dump), "--data-file", str(shared / "math500" / "test.jsonl"), "--source", "verl:wrong-data")
    assert info["observations"] == 0 and info["unmatched_rows"] == _rollouts(dump)
    store = Store(data_dir)
    kept = store.query("select count(*) n from unmatched where source = 'verl:wrong-data'").to_pylist()
    assert kept == [{"n": _rollouts(dump)}]
    out = runner.invoke(app, ["track", str(dump), "--data-file", str(shared / "math500" / "test.jsonl")])
    assert out.exit_code == 0 and "matched no prompt" in out.stdout and "unmatched" in out.stdout


def test_a_generic_table_and_current_difficulty(tmp_path, data_dir):
    assert runner.invoke(app, ["load", "arithmetic", "--limit", "4"]).exit_code == 0
    ids = Store(data_dir).read_table("problems").column("prompt_id").to_pylist()
    table = tmp_path / "counts.parquet"
    pq.write_table(
        pa.table(
            {"step": [1, 1, 2, 2], "prompt_id": [ids[0], ids[1], ids[0], ids[1]], "n": [8] * 4, "c": [0, 4, 8, 4]}
        ),
        table,
    )
    info = _track(str(table), "--dataset", "arithmetic")
    assert (info["source"], info["steps_written"], info["rollouts"]) == ("table:counts", 2, 32)
    out = runner.invoke(app, ["current", "--forgetting", "0.5", "--format", "json"])
    assert out.exit_code == 0, out.output
    got = {r["prompt_id"]: r for r in json.loads(out.stdout)}
    # prompt 0: step 1 (0 of 8) counts 0.5, step 2 (8 of 8) counts 1: Beta(0.5 + 8, 0.5 + 4)
    assert got[ids[0]]["post_mean"] == pytest.approx(8.5 / 13)
    out = runner.invoke(app, ["current", "--forgetting", "0.01", "--moved", "--format", "json"])
    assert [(r["prompt_id"], r["before"], r["now"]) for r in json.loads(out.stdout)] == [(ids[0], "hard", "easy")]


def test_bad_sources_are_named(tmp_path, data_dir, dump):
    out = runner.invoke(app, ["track", str(dump)])
    assert out.exit_code == 1 and "--dataset NAME or --data-file PATH" in out.stderr
    out = runner.invoke(app, ["track", str(dump), "--dataset", "nowhere"])
    assert out.exit_code == 1 and "no problems of dataset 'nowhere'" in out.stderr
    out = runner.invoke(app, ["current"])
    assert out.exit_code == 1 and "no observations yet" in out.stderr


def test_the_input_format_has_its_own_option(dump, shared, data_dir):
    """`--input-format verl` names the input; `--format` stays the output's, and its old use for the
    input (`--format verl`) still works; --help lists each option once."""
    data = str(shared / "deepscaler" / "verl_train_sub.parquet")
    out = runner.invoke(app, ["track", str(dump), "--data-file", data, "--format", "verl", "--source", "verl:old"])
    assert out.exit_code == 0, out.output
    assert "source verl:old: 3 steps written" in out.stdout
    info = _track(str(dump), "--input-format", "verl", "--data-file", data, "--source", "verl:new")
    assert info["steps_written"] == 3 and info["rollouts"] == _rollouts(dump)
    # a file read as a verl dump is an error naming the option
    bad = runner.invoke(app, ["track", data, "--input-format", "verl", "--data-file", data])
    assert bad.exit_code == 1
    bad = runner.invoke(app, ["track", str(dump), "--input-format", "csv", "--data-file", data])
    assert bad.exit_code == 1 and "--input-format 'csv' is unknown" in bad.stderr
    bad = runner.invoke(app, ["track", str(dump), "--format", "verl", "--input-format", "table"])
    assert bad.exit_code == 1 and "disagree" in bad.stderr
    help_text = runner.invoke(app, ["track", "--help"], env={"COLUMNS": "200"}).stdout
    assert help_text.count("--format ") == 1 and help_text.count("--input-format ") == 1


def _two_models(tmp_path, ids) -> None:
    """Outcomes of prompt 0 by two models: a small model's profile-like table (all wrong) and a
    training run's (all right), as two sources."""
    for name, model, c in (("small", "smollm2-135m", 0), ("big", "qwen-1.5b", 8)):
        table = tmp_path / f"{name}.csv"
        table.write_text(f"step,prompt_id,n,c\n1,{ids[0]},8,{c}\n1,{ids[1]},8,4\n")
        _track(str(table), "--dataset", "arithmetic", "--model", model, "--source", f"table:{name}")


def test_current_pools_only_the_sources_and_models_asked_for(tmp_path, data_dir):
    assert runner.invoke(app, ["load", "arithmetic", "--limit", "3"]).exit_code == 0
    ids = Store(data_dir).read_table("problems").column("prompt_id").to_pylist()
    _two_models(tmp_path, ids)

    def current(*args):
        out = runner.invoke(app, ["current", "--dataset", "arithmetic", *args, "--format", "json"])
        assert out.exit_code == 0, out.output
        return {r["prompt_id"]: r for r in json.loads(out.stdout)}, out.stderr

    both, said = current()
    assert both[ids[0]]["n_obs"] == 16 and both[ids[0]]["c_obs"] == 8 and both[ids[0]]["sources"] == 2
    assert "pooled 2 sources" in said and "2 models: qwen-1.5b, smollm2-135m" in said
    assert "warning: 2 models pooled as one policy" in said
    small, said = current("--model", "smollm2-135m")
    assert (small[ids[0]]["n_obs"], small[ids[0]]["c_obs"], small[ids[0]]["sources"]) == (8, 0, 1)
    assert "pooled 1 source" in said and "table:small (training, smollm2-135m; step 1): 2 prompts, 16 rollouts" in said
    assert "left out: table:big (training)" in said and "warning" not in said
    big, _ = current("--source", "table:big")
    assert (big[ids[0]]["n_obs"], big[ids[0]]["c_obs"]) == (8, 8)
    assert current("--source", "table:big", "--model", "smollm2-135m")[0] == {}  # nothing is both
    for args, message in (
        (["--source", "table:nope"], "source 'table:nope' has no observations; the sources there are: table:big"),
        (["--model", "llama"], "model 'llama' has no observations; the models there are: qwen-1.5b, smollm2-135m"),
    ):
        out = runner.invoke(app, ["current", "--dataset", "arithmetic", *args])
        assert out.exit_code == 1 and message in out.stderr


def test_current_save_prints_the_run_and_the_next_command(tmp_path, data_dir):
    assert runner.invoke(app, ["load", "arithmetic", "--limit", "3"]).exit_code == 0
    ids = Store(data_dir).read_table("problems").column("prompt_id").to_pylist()
    _two_models(tmp_path, ids)
    out = runner.invoke(app, ["current", "--dataset", "arithmetic", "--model", "qwen-1.5b", "--save"])
    assert out.exit_code == 0, out.output
    run_id = out.stdout.split()[1].rstrip(":")
    assert Store(data_dir).get_run(run_id).model == "qwen-1.5b"
    assert "table:big (training, qwen-1.5b; step 1): 2 prompts, 16 rollouts" in out.stdout
    line = next(x for x in out.stdout.splitlines() if x.startswith("next: "))
    command = line.removeprefix("next: difficulty ").split()
    assert command[:3] == ["export", "--run", run_id]
    done = runner.invoke(app, [*command[:-1], str(tmp_path / command[-1])])  # the next command, run as printed
    assert done.exit_code == 0, done.output
    rows = pq.read_table(tmp_path / command[-1]).to_pylist()
    assert {r["difficulty"]["run_id"] for r in rows} == {run_id}
    assert {r["prompt_id"]: (r["difficulty"]["answers_drawn"], r["difficulty"]["answers_correct"]) for r in rows} == {
        ids[0]: (8, 8),
        ids[1]: (8, 4),
    }


def test_one_forgetting_default_everywhere():
    """`current` without --forgetting, the current-difficulty config, the curricula and the help all
    use observe.current.FORGETTING."""
    from pipeline import curriculum
    from pipeline.cli.commands.current import FORGETTING_HELP
    from pipeline.observe.current import FORGETTING, CurrentConfig

    assert 0 < FORGETTING < 1 and CurrentConfig().forgetting == FORGETTING
    assert curriculum.SignalConfig().forgetting == FORGETTING
    assert curriculum.BonusPolicy(["a"]).forgetting == FORGETTING
    assert f"default {FORGETTING:g}," in FORGETTING_HELP


def test_current_without_forgetting_uses_the_default(tmp_path, data_dir):
    from pipeline.observe.current import FORGETTING

    assert runner.invoke(app, ["load", "arithmetic", "--limit", "3"]).exit_code == 0
    ids = Store(data_dir).read_table("problems").column("prompt_id").to_pylist()
    table = tmp_path / "steps.csv"
    table.write_text(f"step,prompt_id,n,c\n1,{ids[0]},8,0\n3,{ids[0]},8,8\n")
    _track(str(table), "--dataset", "arithmetic")
    out = runner.invoke(app, ["current", "--format", "json"])
    assert out.exit_code == 0 and f"(forgetting {FORGETTING:g})" in out.stderr
    row = json.loads(out.stdout)[0]
    assert row["n_eff"] == pytest.approx(8 * FORGETTING**2 + 8) and row["c_eff"] == pytest.approx(8)


def test_the_report_shows_training_since_the_profile(tmp_path, data_dir):
    """A simulate profile (recorded as profile:<run id>), then training counts drawn from the same
    pass rates: the report's training section charts the steps and sets the profile's prediction
    against them."""
    import numpy as np
    from pipeline.flows import executors

    from pipeline import reports, run

    store = Store(data_dir)
    cfg = run.ProfileConfig.build(backend="simulate", limit=40, n=16, grade_workers=1, report=False)
    run_id = executors.profile_direct(cfg, store).run_id
    stats = store.read_table("prompt_stats", {"run_id": run_id})
    rng = np.random.default_rng(0)
    rates = np.array(stats.column("pass_rate").to_pylist())
    ids = stats.column("prompt_id").to_pylist()
    steps = [(s, pid, 8, int(rng.binomial(8, p))) for s in range(1, 6) for pid, p in zip(ids, rates, strict=True)]
    table = tmp_path / "train.jsonl"
    table.write_text("".join(json.dumps({"step": s, "prompt_id": p, "n": n, "c": c}) + "\n" for s, p, n, c in steps))
    assert _track(str(table), "--dataset", "arithmetic")["steps_written"] == 5
    html = reports.render_report(store, run_id, tmp_path / "r.html").read_text()
    assert "Training since the profile" in html and "Signal yield forecast at G = 8" in html
    assert "Silent groups and pass rate per step: table:train" in html
    assert "The profile&#39;s prediction against table:train" in html or "The profile's prediction" in html


def test_current_difficulty_saved_as_a_run_feeds_export_and_allocate(tmp_path, data_dir):
    """`current --save` stores the discounted counts (rounded) as a run; `allocate --run` and
    `export --run` read it like a profile run."""
    assert runner.invoke(app, ["load", "arithmetic", "--limit", "3"]).exit_code == 0
    ids = Store(data_dir).read_table("problems").column("prompt_id").to_pylist()
    table = tmp_path / "rewards.csv"
    rows = ["step,prompt_id,reward"]
    rows += [f"1,{ids[0]},{r}" for r in (1, 1, 0, 0)] + [f"2,{ids[0]},{r}" for r in (1, 1, 1, 1)]
    rows += [f"2,{ids[1]},{r}" for r in (0, 0, 0, 0)]
    table.write_text("\n".join(rows) + "\n")
    assert _track(str(table), "--dataset", "arithmetic")["rollouts"] == 12
    out = runner.invoke(app, ["current", "--dataset", "arithmetic", "--forgetting", "0.5", "--save"])
    assert out.exit_code == 0, out.output
    run_id = out.stdout.split()[1].rstrip(":")
    stats = {
        r["prompt_id"]: (r["n"], r["c"])
        for r in Store(data_dir).read_table("prompt_stats", {"run_id": run_id}).to_pylist()
    }
    assert stats == {ids[0]: (6, 5), ids[1]: (4, 0)}  # step 1 counts 0.5: 4*0.5 + 4 rollouts, 2*0.5 + 4 right
    out = runner.invoke(app, ["allocate", "--run", run_id, "--budget", "20"])
    assert out.exit_code == 0 and "allocated 20 rollouts over 2 prompts" in out.stdout, out.output
    out = runner.invoke(app, ["export", "--run", run_id, "--output", str(tmp_path / "out.jsonl")])
    assert out.exit_code == 0, out.output
    exported = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    measured = [r["difficulty"] for r in exported if r["difficulty"]["answers_drawn"]]
    assert {m["run_id"] for m in measured} == {run_id}
    assert sorted((m["answers_drawn"], m["answers_correct"]) for m in measured) == [(4, 0), (6, 5)]


def test_the_track_flow_imports_what_is_new(prefect_api, dump, shared, data_dir):
    """The Prefect flow a schedule serves: the first run imports every step, the next only what
    verl wrote since (parameters as a served deployment passes them: plain JSON)."""
    from dataclasses import asdict

    from pipeline.flows import prefect_flows

    from pipeline.observe.track import TrackConfig

    store = Store(data_dir)
    config = asdict(TrackConfig(path=str(dump), data_file=str(shared / "deepscaler" / "verl_train_sub.parquet")))
    first = prefect_flows.track_source(config=json.loads(json.dumps(config)), store=asdict(store))
    assert first["steps_written"] == 3 and first["rollouts"] == _rollouts(dump)
    (dump / "4.jsonl").write_text((dump / "3.jsonl").read_text().replace('"step": 3', '"step": 4'))
    settled = time.time() - 120  # verl finished step 4 a while ago
    os.utime(dump / "4.jsonl", (settled, settled))
    second = prefect_flows.track_source(config=config, store=asdict(store))
    assert (second["steps_written"], second["steps_already_recorded"], second["first_step"]) == (1, 3, 4)


def test_current_compare_counts_groups_and_says_its_largest_deviation(data_dir):
    """`current --compare`: a prompt given two groups in a step counts as two groups; each bin carries
    its standard deviations, and the line under the table names the largest deviation in them."""
    import numpy as np

    from pipeline.observe import current, record

    store = Store.open(data_dir)
    rng = np.random.default_rng(0)
    ids = [f"p{i}" for i in range(300)]
    p = rng.beta(0.7, 0.7, len(ids))
    prof = record.observation_rows("profile:r", "profile", 0, "d", ids, [16] * 300, rng.binomial(16, p).tolist(), None)
    record.write_step(store, "profile:r", 0, prof)
    pids, groups = ids + ids[:100], [0] * 300 + [1] * 100
    c = rng.binomial(8, np.r_[p, p[:100]]).tolist()
    train = record.observation_rows("verl:run", "training", 1, "d", pids, [8] * 400, c, None, None, groups)
    record.write_step(store, "verl:run", 1, train)
    out = runner.invoke(app, ["current", "--compare", "profile:r", "verl:run", "--format", "json"])
    assert out.exit_code == 0, out.output
    rows = json.loads(out.stdout)
    assert sum(r["groups"] for r in rows) == 400 and sum(r["prompts"] for r in rows) == 300
    assert all(r["silent_sd"] > 0 and r["pass_rate_sd"] > 0 for r in rows)
    worst = current.largest_deviation(pa.Table.from_pylist(rows))
    assert f"largest deviation: {worst:.1f} standard deviations" in out.stderr


def test_simulated_pass_rates_are_labelled_and_left_out_of_current(tmp_path, data_dir):
    """A simulate run says first that its rates are made up, and ``current`` (and its snapshot) pools
    its observations only when asked (``--simulated``) or named (``--source``)."""
    out = runner.invoke(app, ["profile", "--backend", "simulate", "--no-prefect", "--no-report", "--limit", "6"])
    assert out.exit_code == 0, out.output
    verdict_at = out.stdout.index("verdict for training")
    assert "these pass rates are simulated" in out.stdout[verdict_at:].splitlines()[1]
    run_id = next(line.split()[1] for line in out.stdout.splitlines() if line.startswith("run ") and " done" in line)
    pooled = runner.invoke(app, ["current", "--dataset", "arithmetic", "--simulated", "--format", "json"])
    assert pooled.exit_code == 0, pooled.output
    assert "pooled 1 source" in pooled.output and f"profile:{run_id}" in pooled.output
    named = runner.invoke(app, ["current", "--dataset", "arithmetic", "--source", f"profile:{run_id}"])
    assert named.exit_code == 0 and "pooled 1 source" in named.output
    plain = runner.invoke(app, ["current", "--dataset", "arithmetic"])
    assert plain.exit_code == 0, plain.output
    assert "pooled 0 sources" in plain.output and "simulated pass rates: --simulated pools them" in plain.output
