"""``pipeline.integrations.trl``: the GRPO reward-function recorder.

Unit tests drive the wrapper the way ``GRPOTrainer._calculate_rewards`` (TRL 1.16.0) calls a reward
function: keyword lists with one entry per completion, ``trainer_state`` with ``global_step``. The
counts read back are checked against the rewards given, counted again here by brute force. The slow
test trains a real ``GRPOTrainer`` for 2 CPU steps on the bundled model and 4 real GSM8K problems.
``trl`` is in the dev extra, which ``make test`` installs: a missing one fails, never skips.
"""

from __future__ import annotations

import math
import threading
import time
from collections import defaultdict
from types import SimpleNamespace

import pytest
import trl_fixtures as tf

from pipeline.errors import ConfigError, StoreError
from pipeline.integrations import trl as rec
from pipeline.observe import record
from pipeline.store import Store

SOURCE = "trl:unit"
DATASET = "local-unit"
G = 4


@pytest.fixture
def store(data_dir) -> Store:
    """The test's data directory with the problems of ``DATASET`` (``record_rewards`` checks the dataset is stored)."""
    store = Store.open(data_dir)
    tf.store_prompts(store, DATASET, tf.UNIT_IDS)
    return store


def _calls(steps: dict[int, dict[str, list]]):
    """(step, prompt ids, rewards) per call, one call per step, each prompt G times in a row."""
    for step, per_prompt in steps.items():
        ids, rewards = [], []
        for pid, rs in per_prompt.items():
            ids += [pid] * len(rs)
            rewards += rs
        yield step, ids, rewards


def _trainer_call(fn, step, ids, rewards_out=None, **extra):
    """A call shaped like TRL's: prompts, completions, completion_ids, dataset columns, trainer_state."""
    k = len(ids)
    return fn(
        prompts=[f"p-{i}" for i in ids],
        completions=[f"c{j}" for j in range(k)],
        completion_ids=[[j] for j in range(k)],
        prompt_id=list(ids),
        answer=["1"] * k,
        trainer_state=None if step is None else SimpleNamespace(global_step=step),
        log_extra=lambda *a, **kw: None,
        log_metric=lambda *a, **kw: None,
        **extra,
    )


def _given(rewards_by_call):
    """A reward function returning the next prepared list (the very object, for identity checks)."""
    it = iter(rewards_by_call)

    def reward(prompts, completions, **kwargs):
        return next(it)

    return reward


def _expected(steps, threshold=1.0):
    out = {}
    for step, per_prompt in steps.items():
        for pid, rs in per_prompt.items():
            ok = [r for r in rs if r is not None and not math.isnan(r)]
            if ok:
                out[(step, pid)] = (len(ok), sum(r >= threshold for r in ok))
    return out


def _table(store, source=SOURCE):
    """Per (step, prompt) the counts summed over its groups, and the rows."""
    rows = record.read_observations(store, source).to_pylist()
    out: dict[tuple[int, str], tuple[int, int]] = {}
    for r in rows:
        n, c = out.get((r["step"], r["prompt_id"]), (0, 0))
        out[(r["step"], r["prompt_id"])] = (n + r["n"], c + r["c"])
    return out, rows


def _run(store, steps, **kw):
    returned = [rs for _, _, rs in _calls(steps)]
    recorder = rec.record_rewards(_given(returned), data_dir=store, source=SOURCE, dataset=DATASET, **kw)
    for (step, ids, _), sent in zip(_calls(steps), returned, strict=True):
        got = _trainer_call(recorder, step, ids)
        assert got is sent  # passed through: the same list, same order
    recorder.close()
    return recorder


STEPS = {
    0: {"a": [1.0, 0.0, 1.0, 1.0], "b": [0.0, 0.0, 0.0, 0.0], "c": [1, 1, 1, 1]},
    1: {"a": [0.0, 1.0, 0.0, 0.0], "d": [True, False, True, False]},
    2: {"b": [1.0, 1.0, 0.0, 1.0]},
}


def test_counts_per_prompt_per_step(store):
    recorder = _run(store, STEPS)
    got, rows = _table(store)
    assert got == _expected(STEPS)
    assert record.recorded_steps(store, SOURCE) == {0, 1, 2}
    assert recorder.steps_written == 3
    assert {r["kind"] for r in rows} == {"training"} and {r["dataset"] for r in rows} == {DATASET}


def test_nan_and_none_are_no_outcome(store):
    steps = {5: {"a": [1.0, math.nan, None, 0.0], "b": [math.nan] * G, "c": [None, 1.0, 1.0, math.nan]}}
    returned = [rs for _, _, rs in _calls(steps)]
    recorder = rec.record_rewards(_given(returned), data_dir=store, source=SOURCE, dataset=DATASET)
    got = _trainer_call(recorder, 5, [pid for pid, rs in steps[5].items() for _ in rs])
    assert got is returned[0] and math.isnan(got[1]) and got[2] is None  # NaN and None kept
    recorder.close()
    table, _ = _table(store)
    assert table == {(5, "a"): (2, 1), (5, "c"): (2, 2)}  # b: no outcome, no row


def test_threshold_counts_shaped_rewards(store):
    steps = {0: {"a": [0.2, 0.5, 0.9, -1.0], "b": [2.5, 0.49, 0.51, 0.0]}}
    _run(store, steps, threshold=0.5)
    assert _table(store)[0] == _expected(steps, threshold=0.5) == {(0, "a"): (4, 2), (0, "b"): (4, 2)}


def test_shaped_reward_without_threshold_is_an_error(store):
    recorder = rec.record_rewards(_given([[1.0, 0.5]]), data_dir=store, source=SOURCE, dataset=DATASET)
    with pytest.raises(ConfigError, match=r"neither 0 nor 1: a shaped reward is not correctness.*threshold="):
        _trainer_call(recorder, 0, ["a", "a"])
    recorder.close()
    assert recorder.steps_written == 0 and not record.recorded_steps(store, SOURCE)


def test_missing_prompt_id_names_the_column(store):
    called = []
    recorder = rec.record_rewards(lambda **kw: called.append(1), data_dir=store, source=SOURCE, dataset=DATASET)
    with pytest.raises(ConfigError, match=r"no 'prompt_id' column.*difficulty export"):
        recorder(prompts=["x"], completions=["y"], completion_ids=[[1]], answer=["1"])
    assert not called
    recorder.close()


def test_bad_arguments(store):
    with pytest.raises(ConfigError, match="source name"):
        rec.record_rewards(_given([]), data_dir=store, source="bad source", dataset=DATASET)
    with pytest.raises(ConfigError, match="async"):

        async def shaped(**kw):
            return []

        rec.record_rewards(shaped, data_dir=store, source=SOURCE, dataset=DATASET)
    recorder = rec.record_rewards(_given([[1.0]]), data_dir=store, source=SOURCE, dataset=DATASET)
    with pytest.raises(ConfigError, match="returned 1 rewards for 2 completions"):
        _trainer_call(recorder, 0, ["a", "b"])
    recorder.close()


def test_name_is_the_reward_functions(store):
    def exact_match(**kw):
        return []

    recorder = rec.record_rewards(exact_match, data_dir=store, source=SOURCE, dataset=DATASET)
    assert recorder.__name__ == "exact_match"  # TRL logs rewards/exact_match/mean, as without the wrapper
    recorder.close()


def test_flush_and_rerun_write_each_step_once(store):
    recorder = _run(store, STEPS)
    listed = sorted(map(str, store.files("observations", {"source": SOURCE})))
    assert len(listed) == 3
    for _ in range(2):
        recorder.flush()  # nothing new: nothing written
    assert recorder.steps_written == 3
    # A rerun (a resumed training writes steps 0 and 1 again) replaces those files, adds none.
    again = {0: {"a": [0.0] * G}, 1: {"a": [1.0] * G}}
    _run(store, again)
    assert sorted(map(str, store.files("observations", {"source": SOURCE}))) == listed
    got, _ = _table(store)
    assert got == {**_expected({2: STEPS[2]}), **_expected(again)}


def test_calls_at_one_step_add_up_and_an_open_step_is_rewritten_whole(store):
    rewards = [[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]]
    recorder = rec.record_rewards(_given(rewards), data_dir=store, source=SOURCE, dataset=DATASET)
    _trainer_call(recorder, 7, ["a", "b"])
    recorder.flush()  # step 7 still open: written with what it has
    assert _table(store)[0] == {(7, "a"): (1, 1), (7, "b"): (1, 0)}
    _trainer_call(recorder, 7, ["a", "b"])  # e.g. an evaluation at step 7, or steps_per_generation
    _trainer_call(recorder, 7, ["a", "c"])
    recorder.close()
    assert _table(store)[0] == {(7, "a"): (3, 2), (7, "b"): (2, 1), (7, "c"): (1, 1)}
    assert recorder.steps_written == 2 and len(store.files("observations", {"source": SOURCE})) == 1


def test_call_counter_without_trainer_state(store):
    recorder = rec.record_rewards(_given([[1.0], [0.0], [1.0]]), data_dir=store, source=SOURCE, dataset=DATASET)
    for _ in range(3):
        _trainer_call(recorder, None, ["a"])
    recorder.close()
    assert _table(store)[0] == {(0, "a"): (1, 1), (1, "a"): (1, 0), (2, "a"): (1, 1)}


def test_write_failure_surfaces_at_next_call_and_at_close(store, data_dir):
    (data_dir / "observations").write_text("not a folder")  # every step write fails, for real
    recorder = rec.record_rewards(_given([[1.0]] * 4), data_dir=store, source=SOURCE, dataset=DATASET)
    _trainer_call(recorder, 0, ["a"])
    _trainer_call(recorder, 1, ["a"])  # hands step 0 to the writer, which fails
    recorder._queue.join()
    with pytest.raises(StoreError, match=r"recording step 0 of source trl:unit .* failed"):
        _trainer_call(recorder, 2, ["a"])
    with pytest.raises(StoreError, match=r"recording step 1 of source trl:unit"):
        recorder.close()
    recorder.close()  # closed: nothing more to say


def test_writes_happen_off_the_trainers_thread(store, monkeypatch):
    threads = []
    real = record.write_step

    def spy(*a, **kw):
        threads.append(threading.current_thread())
        return real(*a, **kw)

    monkeypatch.setattr(record, "write_step", spy)
    _run(store, STEPS)
    assert len(threads) == 3 and threading.current_thread() not in threads


def test_overhead_is_small_against_one_step_write(store):
    """200 calls of 64 completions (16 prompts x 4), each call a new step (the worst case: every call
    hands a step to the writer): the added time per call is compared with one synchronous write of
    such a step, measured here, which is what a recorder without the thread would add."""
    ids = [f"p{i // 4}" for i in range(64)]
    rewards = [float(i % 2) for i in range(64)]

    def bare(prompts, completions, **kw):
        return rewards

    def timed(fn, calls=200):
        t0 = time.perf_counter()
        for step in range(calls):
            _trainer_call(fn, step, ids)
        return (time.perf_counter() - t0) / calls

    recorder = rec.record_rewards(bare, data_dir=store, source=SOURCE, dataset=DATASET)
    wrapped_s = min(timed(recorder) for _ in range(3))
    recorder.close()
    bare_s = min(timed(bare) for _ in range(3))
    counts = defaultdict(lambda: [0, 0])
    for pid, r in zip(ids, rewards, strict=True):
        counts[pid][0] += 1
        counts[pid][1] += int(r >= 1)
    t0 = time.perf_counter()
    for step in range(10, 15):
        rows = record.observation_rows(
            "trl:sync",
            "training",
            step,
            DATASET,
            list(counts),
            [v[0] for v in counts.values()],
            [v[1] for v in counts.values()],
            None,
        )
        record.write_step(store, "trl:sync", step, rows)
    write_s = (time.perf_counter() - t0) / 5
    assert wrapped_s - bare_s < write_s / 5, (wrapped_s, bare_s, write_s)


def test_s3_data_directory(s3_data):
    tf.store_prompts(Store.open(s3_data), DATASET, tf.UNIT_IDS)
    recorder = _run(Store.open(s3_data), STEPS)
    assert recorder.steps_written == 3
    assert _table(Store.open(s3_data))[0] == _expected(STEPS)


def test_several_processes_need_a_rank_in_the_source(store, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(ConfigError, match=r"WORLD_SIZE=2.*\{rank\}"):
        rec.record_rewards(_given([]), data_dir=store, source=SOURCE, dataset=DATASET)
    recorder = rec.record_rewards(_given([]), data_dir=store, source="trl:run:rank{rank}", dataset=DATASET)
    assert recorder.source == "trl:run:rank1"
    recorder.close()


def test_importing_the_integration_imports_no_trl():
    assert tf.imports_no_trainer("pipeline.integrations.trl") == []


# --- a real GRPOTrainer --------------------------------------------------------------------------


@pytest.mark.slow
def test_real_grpo_trainer_records_each_step(shared, store, tmp_path):
    """2 CPU steps of TRL's GRPOTrainer on the bundled model (converted once into the model cache),
    4 real GSM8K problems, 2 per step, 2 completions each, an exact-match reward."""
    g = 2
    tf.require_trl()
    from trl import GRPOTrainer

    problems, train = tf.gsm8k_train(shared, limit=4, store=store)
    seen = defaultdict(list)  # (step, prompt_id) -> the bare function's rewards

    def log(step, ids, rewards):
        for pid, r in zip(ids, rewards, strict=True):
            seen[(step, pid)].append(r)

    exact_match = tf.exact_match(log)
    recorder = rec.record_rewards(exact_match, data_dir=store, source="trl:test-run", dataset="gsm8k")
    args = tf.grpo_args(tmp_path, g, 2 * g)
    trainer = GRPOTrainer(model=tf.bundled_model_folder(), reward_funcs=recorder, args=args, train_dataset=train)
    with tf.one_torch_thread():
        trainer.train()
    recorder.flush()
    written = recorder.steps_written
    steps = {step for step, _ in seen}
    assert steps == {0, 1}
    assert record.recorded_steps(store, "trl:test-run") == steps
    assert len(store.files("observations", {"source": "trl:test-run"})) == len(steps)
    got, rows = _table(store, "trl:test-run")
    assert got == {key: (g, sum(r == 1.0 for r in rs)) for key, rs in seen.items()}
    assert {r["prompt_id"] for r in rows} <= {p["prompt_id"] for p in problems}
    recorder.flush()
    recorder.close()
    assert recorder.steps_written == written


def test_a_prompt_given_two_groups_in_a_step_keeps_two_groups(store):
    """The sampler repeated prompt a (two groups of G in one call, in a row, as a curriculum's
    multiplicity lays them out): one group all right, one mixed; b one silent group. Stored as three
    groups, so the step's silent share is 2 of 3, not 1 of 2 with a merged into n = 2G."""
    a1, a2, b = [1.0] * G, [1.0, 0.0, 1.0, 1.0], [0.0] * G
    recorder = rec.record_rewards(_given([a1 + a2 + b]), data_dir=store, source=SOURCE, dataset=DATASET)
    _trainer_call(recorder, 5, ["a"] * 2 * G + ["b"] * G)
    recorder.close()
    _, rows = _table(store)
    got = sorted((r["prompt_id"], r["group_index"], r["n"], r["c"]) for r in rows)
    assert got == [("a", 0, G, G), ("a", 1, G, 3), ("b", 0, G, 0)]
    (row,) = store.query("select groups, silent from observation_steps").to_pylist()
    assert row["groups"] == 3 and row["silent"] == pytest.approx(2 / 3)
    assert recorder.last_counts == {"a": [2 * G, 7], "b": [G, 0]}
