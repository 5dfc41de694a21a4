"""``pipeline.integrations.trl_curriculum``: a policy choosing GRPO prompts inside TRL's trainer.

The sampler's layout is checked against TRL's own ``RepeatSampler`` (TRL 1.16.0) for a policy that
picks in dataset order; the reward wrapper is driven the way ``GRPOTrainer._calculate_rewards`` calls a
reward function; the slow test trains a real ``GRPOTrainer`` for 2 CPU steps on the bundled model and 6
real GSM8K problems, 2 per step. ``FewestPicks`` is a real (deterministic) policy, not a mock.
"""

from __future__ import annotations

import math
from collections import defaultdict
from types import SimpleNamespace

import pytest
import trl_fixtures as tf

from pipeline.errors import ConfigError
from pipeline.integrations import trl as rec
from pipeline.integrations import trl_curriculum as cur
from pipeline.observe import record
from pipeline.store import Store

SOURCE = "trl:curriculum"
DATASET = "local-unit"


@pytest.fixture
def store(data_dir) -> Store:
    """The test's data directory with the problems of ``DATASET`` (``record_rewards`` checks the dataset is stored)."""
    store = Store.open(data_dir)
    tf.store_prompts(store, DATASET, tf.UNIT_IDS)
    return store


class FewestPicks:
    """Picks the k prompts picked least so far, ties by dataset order; keeps every choice and update."""

    def __init__(self, ids: list[str], events: list | None = None) -> None:
        self.ids = list(ids)
        self.picks = dict.fromkeys(self.ids, 0)
        self.choices: list[list[str]] = []
        self.updates: list[dict[str, tuple[int, int]]] = []
        self.events = [] if events is None else events

    def choose(self, k: int) -> list[str]:
        order = sorted(self.ids, key=lambda p: (self.picks[p], self.ids.index(p)))[:k]
        for p in order:
            self.picks[p] += 1
        self.choices.append(order)
        self.events.append(("choose", len(self.choices) - 1))
        return order

    def update(self, prompt_ids: list[str], n: list[int], c: list[int]) -> None:
        self.updates.append({p: (a, b) for p, a, b in zip(prompt_ids, n, c, strict=True)})
        self.events.append(("update", len(self.updates) - 1))


def _trainer_call(fn, step, ids):
    k = len(ids)
    return fn(
        prompts=[f"p-{i}" for i in ids],
        completions=[f"c{j}" for j in range(k)],
        completion_ids=[[j] for j in range(k)],
        prompt_id=list(ids),
        trainer_state=SimpleNamespace(global_step=step),
        log_extra=lambda *a, **kw: None,
        log_metric=lambda *a, **kw: None,
    )


def _given(rewards_by_call):
    it = iter(rewards_by_call)
    return lambda prompts, completions, **kw: next(it)


def _table(store, source=SOURCE):
    """Per (step, prompt) the counts summed over its groups."""
    out: dict[tuple[int, str], tuple[int, int]] = {}
    for r in record.read_observations(store, source).to_pylist():
        n, c = out.get((r["step"], r["prompt_id"]), (0, 0))
        out[(r["step"], r["prompt_id"])] = (n + r["n"], c + r["c"])
    return out


# --- the sampler ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("n_rows", "k", "G", "repeat"), [(7, 3, 2, 4), (6, 2, 4, 1), (5, 1, 3, 2)])
def test_sampler_layout_is_trls_repeat_sampler(n_rows, k, G, repeat):
    """A policy picking in dataset order gives exactly TRL's unshuffled ``RepeatSampler`` sequence."""
    from trl.trainer.utils import RepeatSampler

    ids = [f"q{i}" for i in range(n_rows)]
    policy = FewestPicks(ids)
    sampler = cur.CurriculumSampler(policy, ids, k=k, G=G, repeat=repeat)
    trl_order = list(RepeatSampler(ids, mini_repeat_count=G, batch_size=k, repeat_count=repeat, shuffle=False))
    got = list(sampler)
    assert got == trl_order
    assert len(sampler) == len(RepeatSampler(ids, mini_repeat_count=G, batch_size=k, repeat_count=repeat)) == len(got)
    assert sampler.chosen == policy.choices and len(policy.choices) == n_rows // k


def test_sampler_yields_the_policys_choices_in_order():
    ids = ["a", "b", "c", "d", "e"]

    class Fixed:
        def __init__(self):
            self.plan = iter([["e", "b"], ["a", "e"]])

        def choose(self, k):
            return next(self.plan)

        def update(self, prompt_ids, n, c):
            pass

    sampler = cur.CurriculumSampler(Fixed(), ids, k=2, G=2, repeat=2)
    assert list(sampler) == [4, 4, 1, 1] * 2 + [0, 0, 4, 4] * 2
    assert sampler.chosen == [["e", "b"], ["a", "e"]]


@pytest.mark.parametrize(
    ("picked", "message"),
    [(["a"], "must return 2 distinct"), (["a", "a"], "must return 2 distinct"), (["a", "z"], r"not in .*\['z'\]")],
)
def test_bad_choices_are_errors(picked, message):
    class Bad:
        def choose(self, k):
            return picked

        def update(self, prompt_ids, n, c):
            pass

    sampler = cur.CurriculumSampler(Bad(), ["a", "b", "c"], k=2, G=2, repeat=1)
    with pytest.raises(ConfigError, match=message):
        list(sampler)


class Plan:
    """A policy with ``choose_groups``: replays a fixed plan of groups (one id per group)."""

    def __init__(self, plan):
        self.plan = iter(plan)

    def choose(self, k):
        raise AssertionError("a policy with choose_groups is asked for groups")

    def choose_groups(self, k):
        return next(self.plan)

    def update(self, prompt_ids, n, c):
        pass


def test_sampler_lays_out_a_prompts_groups_in_a_row():
    """A prompt given m groups fills m runs of G in a row: TRL's ``view(-1, G)`` makes m groups of it."""
    ids = ["a", "b", "c", "d", "e", "f"]
    sampler = cur.CurriculumSampler(Plan([["b", "b", "a"], ["c", "a", "a"]]), ids, k=3, G=2, repeat=2)
    assert list(sampler) == [1, 1, 1, 1, 0, 0] * 2 + [2, 2, 0, 0, 0, 0] * 2
    assert sampler.chosen == [["b", "b", "a"], ["c", "a", "a"]]


@pytest.mark.parametrize(
    ("plan", "repeats", "message"),
    [
        (["a", "b"], True, "must return 3 prompt ids, one per group"),
        (["a", "b", "a"], True, "in a row"),
        (["a", "a", "b"], False, "rollouts="),
        (["a", "a", "z"], True, r"not in .*\['z'\]"),
    ],
)
def test_bad_groups_are_errors(plan, repeats, message):
    sampler = cur.CurriculumSampler(Plan([plan]), ["a", "b", "c"], k=3, G=2, repeat=1, repeats=repeats)
    with pytest.raises(ConfigError, match=message):
        list(sampler)


def test_duplicate_dataset_ids_are_an_error():
    with pytest.raises(ConfigError, match=r"'b' is on rows 1 and 2"):
        cur.CurriculumSampler(FewestPicks(["a", "b"]), ["a", "b", "b"], k=1, G=2, repeat=1)


# --- the reward side -----------------------------------------------------------------------------


def test_updates_receive_each_calls_recorded_counts(store):
    rewards = [[1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0], [0.0, 1.0, 1.0, 1.0, None, 1.0, math.nan, 0.0]]
    ids = [["a"] * 4 + ["b"] * 4, ["c"] * 4 + ["a"] * 4]
    recorder = rec.record_rewards(_given(rewards), data_dir=store, source=SOURCE, dataset=DATASET)
    policy = FewestPicks(["a", "b", "c"])
    reward = cur.CurriculumReward(policy, recorder)
    assert reward.__name__ == "<lambda>"
    for step, (pids, sent) in enumerate(zip(ids, rewards, strict=True)):
        assert _trainer_call(reward, step, pids) is sent
    recorder.close()
    assert policy.updates == [{"a": (4, 3), "b": (4, 0)}, {"c": (4, 3), "a": (2, 1)}]
    assert _table(store) == {(0, "a"): (4, 3), (0, "b"): (4, 0), (1, "c"): (4, 3), (1, "a"): (2, 1)}


def test_evaluation_calls_are_recorded_but_not_learned(store):
    recorder = rec.record_rewards(_given([[1.0, 1.0]] * 2), data_dir=store, source=SOURCE, dataset=DATASET)
    policy = FewestPicks(["a"])
    reward = cur.CurriculumReward(policy, recorder)
    reward.trainer = SimpleNamespace(model=SimpleNamespace(training=False))
    _trainer_call(reward, 0, ["a", "a"])
    reward.trainer.model.training = True
    _trainer_call(reward, 0, ["a", "a"])
    recorder.close()
    assert policy.updates == [{"a": (2, 2)}]
    assert _table(store) == {(0, "a"): (4, 4)}


def test_rollouts_mask_completions_past_each_prompts_count(store):
    """Per group, the first m completions keep their reward; the rest are NaN and are not counted."""
    G = 4
    rewards = [1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0]
    ids = ["a"] * G + ["b"] * G + ["c"] * G + ["d"] * G
    rollouts = {"a": 2, "b": 0, "c": 9}  # d: absent, all kept; c: more than G, all kept
    recorder = rec.record_rewards(
        _given([list(rewards)]), data_dir=store, source=SOURCE, dataset=DATASET, rollouts=rollouts
    )
    policy = FewestPicks(list("abcd"))
    got = _trainer_call(cur.CurriculumReward(policy, recorder), 3, ids)
    recorder.close()
    keep = [0, 1] + [] + list(range(8, 16))
    for i, (r, g) in enumerate(zip(rewards, got, strict=True)):
        assert (g == r) if i in keep else math.isnan(g), (i, g)
    expected = {
        pid: (len(kept), int(sum(kept))) for pid in "abcd" if (kept := [rewards[i] for i in keep if ids[i] == pid])
    }
    assert policy.updates == [expected] and "b" not in expected
    assert _table(store) == {(3, pid): v for pid, v in expected.items()}


def test_bad_rollouts_are_errors(store, monkeypatch):
    for bad in ({"a": -1}, {"a": 1.5}, {"a": True}):
        with pytest.raises(ConfigError, match=r"rollouts\['a'\]=.* must be an integer >= 0"):
            rec.record_rewards(_given([]), data_dir=store, source=SOURCE, dataset=DATASET, rollouts=bad)
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ConfigError, match="WORLD_SIZE=2"):
        rec.record_rewards(_given([]), data_dir=store, source="trl:r{rank}", dataset=DATASET, rollouts={"a": 1})


def test_trainer_checks_policy_recorder_and_reward_funcs(store):
    class Base:  # stands in for GRPOTrainer only to reach the checks made before TRL's __init__
        def __init__(self, *a, **kw):
            raise AssertionError("not reached")

    recorder = rec.record_rewards(_given([]), data_dir=store, source=SOURCE, dataset=DATASET, rollouts={"a": 1})
    with pytest.raises(ConfigError, match="choose"):
        cur.curriculum_trainer(object(), recorder, base=Base)
    with pytest.raises(ConfigError, match="RewardRecorder"):
        cur.curriculum_trainer(FewestPicks(["a"]), _given([]), base=Base)
    trainer = cur.curriculum_trainer(FewestPicks(["a"]), recorder, base=Base)
    with pytest.raises(ConfigError, match="exactly once"):
        trainer(model="m", reward_funcs=[_given([])])
    with pytest.raises(ConfigError, match="only reward function"):
        trainer(model="m", reward_funcs=[recorder, _given([])])
    recorder.close()


def test_importing_the_curriculum_imports_no_trl():
    assert tf.imports_no_trainer("pipeline.integrations.trl_curriculum") == []


# --- a real GRPOTrainer --------------------------------------------------------------------------


@pytest.mark.slow
def test_real_grpo_trainer_trains_the_policys_choices(shared, store, tmp_path):
    """2 CPU steps of TRL's GRPOTrainer on the bundled model, 6 GSM8K problems, k = 2 per step, G = 3,
    the first prompt capped at 2 rollouts: each step trains exactly the policy's choice, the policy
    learns each step's counts, and the observations table holds the same steps and counts."""
    tf.require_trl()
    G = 3
    problems, train = tf.gsm8k_train(shared, limit=6, store=store)
    ids = [p["prompt_id"] for p in problems]
    seen = defaultdict(list)  # step -> the prompt ids of the bare function's call, in order
    raw = defaultdict(list)  # (step, prompt_id) -> the bare function's rewards

    def log(step, call_ids, rewards):
        seen[step].extend(call_ids)
        for pid, r in zip(call_ids, rewards, strict=True):
            raw[(step, pid)].append(r)

    exact_match = tf.exact_match(log)
    cap = {ids[0]: 2}
    recorder = rec.record_rewards(exact_match, data_dir=store, source=SOURCE, dataset="gsm8k", rollouts=cap)
    events: list = []
    policy = FewestPicks(ids, events)
    args = tf.grpo_args(tmp_path, G, 2 * G)
    trainer = cur.curriculum_trainer(policy, recorder)(model=tf.bundled_model_folder(), args=args, train_dataset=train)
    with tf.one_torch_thread():
        trainer.train()
    recorder.close()
    steps = sorted(seen)
    assert steps == [0, 1]
    for step in steps:  # each step trained the policy's choice of that step, G completions each
        assert seen[step] == [p for p in policy.choices[step] for _ in range(G)]
    assert trainer.curriculum_sampler.chosen == policy.choices
    assert policy.choices[:2] == [ids[0:2], ids[2:4]]  # fewest picks, ties by dataset order

    def kept(step, pid):
        rs = raw[(step, pid)][: cap.get(pid, G)]
        return (len(rs), int(sum(rs))) if rs else None

    expected = [{p: kept(step, p) for p in policy.choices[step]} for step in steps]
    assert policy.updates == expected
    assert expected[0][ids[0]][0] == 2  # the cap reached the counts
    assert _table(store) == {(step, p): v for step in steps for p, v in expected[step].items()}
    assert record.recorded_steps(store, SOURCE) == set(steps)
    # the dataloader fetches one batch ahead: generation t+1 is chosen before generation t is learned
    assert events.index(("choose", 1)) < events.index(("update", 0))


@pytest.mark.slow
def test_real_grpo_trainer_trains_a_prompt_with_two_groups_as_two_groups(shared, store, tmp_path):
    """2 CPU steps of TRL's GRPOTrainer on the bundled model, 6 GSM8K problems, 3 groups of G = 3 a step,
    and the signal policy with multiplicity (``max_groups=2``) on a profile where one prompt is clearly
    the best: it gets two groups, and TRL forms two groups of it, each normalised on its own (a silent
    group beside a mixed one keeps advantage 0, which one group of 8 would not); no reward is NaN,
    and the policy and the observations table get the prompt's 2 G completions as one count."""
    import numpy as np
    from trl import GRPOTrainer

    from pipeline.curriculum import make_policy

    tf.require_trl()
    G, k = 3, 3
    problems, train = tf.gsm8k_train(shared, limit=6, store=store)
    ids = [p["prompt_id"] for p in problems]
    calls = defaultdict(list)  # step -> [(prompt ids, rewards)] of the reward function's calls

    def reward(prompts, completions, prompt_id, trainer_state, **kw):
        # By position: the j-th group of a call has j correct of G, so the groups differ in their means.
        out = [1.0 if i % G < (i // G) % G else 0.0 for i in range(len(completions))]
        calls[trainer_state.global_step].append((list(prompt_id), out))
        return out

    formed = []  # (prompt ids, advantages) of every generation batch the trainer scored

    class Watched(GRPOTrainer):
        def _generate_and_score_completions(self, inputs):
            out = super()._generate_and_score_completions(inputs)
            formed.append(([x["prompt_id"] for x in inputs], out["advantages"].tolist()))
            return out

    recorder = rec.record_rewards(reward, data_dir=store, source=SOURCE, dataset="gsm8k")
    # A profile: ids[0] half right, ids[1] a third, the rest silent.
    n = np.full(6, 24.0)
    c = np.array([12.0, 8.0, 0.0, 0.0, 24.0, 24.0])
    policy = make_policy("signal:objective=mass,coverage=0,max_groups=2", ids, n, c, seed=0, G=G)
    trainer = cur.curriculum_trainer(policy, recorder, base=Watched)(
        model=tf.bundled_model_folder(), args=tf.grpo_args(tmp_path, G, k * G), train_dataset=train
    )
    with tf.one_torch_thread():
        trainer.train()
    recorder.close()
    chosen = trainer.curriculum_sampler.chosen
    assert chosen[0] == [ids[0], ids[0], ids[1]]  # m = 2 for the best prompt, 1 for the next, 0 for the rest
    assert len(formed) == 2 and sorted(calls) == [0, 1]
    for step, (pids, adv) in enumerate(formed):
        assert pids == [p for p in chosen[step] for _ in range(G)]  # the trainer's batch is the policy's groups
        ((got_ids, rewards),) = calls[step]
        assert got_ids == pids
        assert all(math.isfinite(r) for r in rewards) and all(math.isfinite(a) for a in adv)
        for j in range(k):  # each run of G is its own group: its advantages are centred on its own mean
            group = adv[j * G : (j + 1) * G]
            assert sum(group) == pytest.approx(0.0, abs=1e-5)
            assert (max(group) > 0) == (0 < sum(rewards[j * G : (j + 1) * G]) < G)
    # Step 0's prompt in two groups: the first silent (advantage 0), the second not; as one group of
    # 2 G its silent half would have been pushed down.
    assert formed[0][1][:G] == [0.0] * G and max(formed[0][1][G : 2 * G]) > 0
    table = _table(store)
    assert table[(0, ids[0])] == (2 * G, 1) and table[(0, ids[1])] == (G, 2)
    assert record.recorded_steps(store, SOURCE) == {0, 1}
