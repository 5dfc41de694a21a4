"""``pipeline.integrations.verl_curriculum``: verl's custom dataset class drawing batches by a policy.

The unit tests run the mapping (fetch counter, batches, row matching, counts read from a real data
directory) in this environment. The real test runs verl 0.9.1's own config composition, dataset
loading (``create_rl_dataset``), sampler and ``StatefulDataLoader`` in the second environment that
``make venv-verl`` builds (verl cannot share this one: it pins an older transformers), through
``tests/verl_driver.py``, with the bundled model's tokenizer, a verl-format file written here, a
profile in the data directory, and one rollout dump imported by ``difficulty track`` mid-run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline import datasets
from pipeline.curriculum import make_policy
from pipeline.errors import ConfigError
from pipeline.integrations import verl_curriculum as vc
from pipeline.observe import record
from pipeline.observe.current import CurrentConfig, current_difficulty
from pipeline.observe.match import Matcher

ROOT = Path(__file__).resolve().parents[1]
VERL_PYTHON = ROOT / ".venv-verl" / "bin" / "python"
DRIVER = ROOT / "tests" / "verl_driver.py"
MARK = "CURRICULUM-JSON "  # verl_driver.MARK
# The LRU floor, whose guarantee (every prompt within ceil(N / slots) batches) these tests check.
FLOOR_POLICY = "signal:explore=thompson,prior=jeffreys,floor=0.3,cover=lru,coverage=0"

# 40 prompts: 10 the model always solves, 10 it never does, 20 in between (a profile of 16 rollouts).
EASY, HARD, MID = range(0, 10), range(10, 20), range(20, 40)
BATCH = 8


def _problems(count: int = 40) -> list[str]:
    return [f"What is {i} plus {3 * i + 7}? Give the number only." for i in range(count)]


def _verl_rows(texts: list[str]) -> list[dict]:
    return [
        {
            "data_source": "unit-sums",
            "prompt": [{"role": "user", "content": t}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(i + 3 * i + 7)},
            "extra_info": {"index": i, "split": "train"},
        }
        for i, t in enumerate(texts)
    ]


def _profile_counts() -> tuple[np.ndarray, np.ndarray]:
    n = np.full(40, 16.0)
    c = np.array([16.0 if i in EASY else 0.0 if i in HARD else 8.0 for i in range(40)])
    return n, c


# --- the mapping, without verl ------------------------------------------------------------------


def test_fetches_follow_the_policys_batches_in_order():
    """Fetch ``j`` is slot ``j mod B`` of batch ``j // B``; the batches are a same-seed policy's choices."""
    ids = [f"p{i}" for i in range(12)]
    schedule = vc.CurriculumSchedule(ids, 4, policy="uniform", seed=3)
    rows = [schedule.next_row() for _ in range(4 * 5)]
    twin = make_policy("uniform", ids, seed=3)
    expected = [twin.choose(4) for _ in range(5)]
    assert schedule.chosen == expected
    assert [ids[r] for r in rows] == [p for batch in expected for p in batch]
    assert all(len(set(rows[i : i + 4])) == 4 for i in range(0, 20, 4))


def test_a_prompt_on_several_rows_is_drawn_as_its_first_row():
    schedule = vc.CurriculumSchedule(["a", "b", "a", "c"], 3, policy="uniform")
    assert schedule.ids == ["a", "b", "c"]
    assert sorted(schedule.next_row() for _ in range(3)) == [0, 1, 3]


def test_batch_larger_than_the_prompts_is_an_error():
    with pytest.raises(ConfigError, match="between 1 and the 3 distinct prompts"):
        vc.CurriculumSchedule(["a", "b", "c"], 4)


def test_new_counts_change_the_choices_and_silent_prompts_are_drawn_less():
    """The signal policy on a profile draws the silent prompts far less, every prompt within 20 batches
    (the 30% floor: 2 of 8 slots to the least recently drawn of 40), and a new step moves it."""
    ids = [f"p{i}" for i in range(40)]
    n, c = _profile_counts()
    pending = [(n, c)]
    schedule = vc.CurriculumSchedule(
        ids,
        BATCH,
        policy=FLOOR_POLICY,
        seed=0,
        group_size=8,
        counts=lambda: pending.pop() if pending else None,
    )
    for _ in range(10 * BATCH):
        schedule.next_row()
    first = Counter(p for batch in schedule.chosen for p in batch)
    silent = sum(first[f"p{i}"] for i in [*EASY, *HARD]) / (10 * BATCH)
    assert silent < 0.3  # uniform: 0.5
    # The model moved: the easy prompts are now half right, the middle ones all right (lambda 0.9 a step).
    n2, c2 = 0.9 * n, 0.9 * c
    n2[list(EASY)] += 32
    c2[list(EASY)] += 16
    n2[list(MID)] += 32
    c2[list(MID)] += 32
    pending.append((n2, c2))
    for _ in range(10 * BATCH):
        schedule.next_row()
    second = Counter(p for batch in schedule.chosen[10:] for p in batch)
    easy_before = sum(first[f"p{i}"] for i in EASY) / (10 * BATCH)
    easy_after = sum(second[f"p{i}"] for i in EASY) / (10 * BATCH)
    assert easy_after > 3 * easy_before
    assert set(first) | set(second) == set(ids)


def test_rows_match_by_problem_text_then_by_index(tmp_path):
    texts = _problems(4)
    path = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist(_verl_rows(texts)), path)
    problems = datasets.load(data_file=path).problems
    matcher = Matcher.from_problems(problems)
    by_text = dict(zip(problems.column("problem").to_pylist(), problems.column("prompt_id").to_pylist(), strict=True))
    prompts = [
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": texts[0]}],  # the text
        [{"role": "user", "content": "reworded, but index 2"}],  # the index
        [{"role": "user", "content": "unknown"}],  # neither
    ]
    ids = vc.row_prompt_ids(prompts, [{"index": 9}, {"index": 2}, None], matcher)
    assert ids == [by_text[texts[0]], by_text[texts[2]], "row-2"]
    # an export's top-level prompt_id comes first (a rendered template matches no problem text); an id
    # that is no prompt of the dataset falls back to the text and the index
    own = [by_text[texts[3]], "not-a-prompt", None]
    ids = vc.row_prompt_ids(prompts, [{"index": 9}, {"index": 2}, None], matcher, own)
    assert ids == [by_text[texts[3]], by_text[texts[2]], "row-2"]


def test_observed_counts_are_the_current_difficulty_reread_on_new_files(store):
    """``ObservedCounts`` gives ``observe.current``'s discounted counts per prompt, None while no file changed."""
    ids = ["a", "b", "c"]
    counts = vc.ObservedCounts(store, "unit", ids, forgetting=0.9)
    assert counts()[0].tolist() == [0, 0, 0]
    assert counts() is None
    for source, kind, step, dataset, pids, n, c in [
        ("profile:r", "profile", 0, "unit", ["a", "b"], [16, 16], [16, 4]),
        ("verl:x", "training", 3, "unit", ["b"], [8], [8]),
        ("verl:y", "training", 5, "other", ["c"], [8], [1]),
    ]:
        record.write_step(store, source, step, record.observation_rows(source, kind, step, dataset, pids, n, c, None))
    n, c = counts()
    assert counts.latest_step == 3
    obs = record.read_observations(store)
    current = current_difficulty(
        obs.filter(pa.compute.equal(obs.column("dataset"), "unit")), CurrentConfig(forgetting=0.9)
    )
    want = {r["prompt_id"]: (r["n_eff"], r["c_eff"]) for r in current.to_pylist()}
    assert n[:2] == pytest.approx([want["a"][0], want["b"][0]])
    assert c[:2] == pytest.approx([want["a"][1], want["b"][1]])
    assert n[0] == pytest.approx(16 * 0.9**3)  # three steps older than the latest
    assert (n[2], c[2]) == (0, 0)  # another dataset's prompt "c" does not count
    assert counts() is None


def test_settings_come_from_the_data_config():
    data = {"train_batch_size": 16, "gen_batch_size": None, "curriculum": {"policy": "uniform", "seed": 4}}
    assert vc.curriculum_config(data) == vc.VerlCurriculumConfig(policy="uniform", seed=4)
    assert vc.curriculum_config({}) == vc.VerlCurriculumConfig()
    assert vc.batch_size(data) == 16
    assert vc.batch_size({**data, "gen_batch_size": 24}) == 24
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['polcy'\]"):
        vc.curriculum_config({"curriculum": {"polcy": "signal"}})
    with pytest.raises(ConfigError, match="group_size=0"):
        vc.curriculum_config({"curriculum": {"group_size": 0}})
    with pytest.raises(ConfigError, match="dataloader_num_workers=8"):
        vc.check_loader({"dataloader_num_workers": 8})


def test_only_the_train_files_get_the_curriculum():
    data = {"train_files": ["t.parquet"], "val_files": "v.parquet"}
    assert vc.is_train_dataset(["t.parquet"], data)
    assert not vc.is_train_dataset(["v.parquet"], data)
    with pytest.raises(ConfigError, match="same"):
        vc.is_train_dataset("t.parquet", {"train_files": "t.parquet", "val_files": ["t.parquet"]})


def test_importing_the_hook_imports_no_verl():
    code = (
        "import sys, pipeline.integrations.verl_curriculum as m; "
        "print(sorted(x for x in ('verl', 'torch', 'transformers') if x in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --- verl's own dataset loading, in the verl environment ------------------------------------------


def _report(lines) -> tuple[dict | None, list[str]]:
    """The driver's next report (a line after its mark) and the lines before it (verl's own prints)."""
    seen = []
    for line in lines:
        if line.startswith(MARK):
            return json.loads(line[len(MARK) :]), seen
        seen.append(line)
    return None, seen


def _dump_line(text: str, answer: str, correct: bool, step: int) -> str:
    # What RayPPOTrainer._write_generations writes per rollout (the chat prompt decoded, special tokens skipped).
    return json.dumps(
        {
            "input": f"user\n{text}\nassistant\n",
            "output": "...",
            "gts": answer,
            "score": float(correct),
            "acc": correct,
            "step": step,
        }
    )


def _files_and_profile(store, tmp_path, counts=None):
    """The verl train and validation files of ``_problems()``, stored as ``difficulty load --data-file``
    stores them, with the profile ``counts`` (``_profile_counts()``) at step 0: ``(texts, rows, train, val,
    ids, dataset)``."""
    from pipeline.observe import track

    texts = _problems()
    rows = _verl_rows(texts)
    train, val = tmp_path / "sums.parquet", tmp_path / "sums-val.parquet"
    pq.write_table(pa.Table.from_pylist(rows), train)
    pq.write_table(pa.Table.from_pylist(rows[:4]), val)
    problems = track.dataset_problems(store, data_file=train)
    pid = dict(zip(problems.column("problem").to_pylist(), problems.column("prompt_id").to_pylist(), strict=True))
    ids = [pid[t] for t in texts]
    dataset = problems.column("dataset")[0].as_py()
    n, c = _profile_counts() if counts is None else counts
    source = "profile:unit"
    record.write_step(
        store,
        source,
        0,
        record.observation_rows(
            source, "profile", 0, dataset, ids, n.astype(int).tolist(), c.astype(int).tolist(), None
        ),
    )
    return texts, rows, train, val, ids, dataset


def _run_driver(spec: dict, cwd: Path) -> dict:
    """One report of the verl driver that exits after it (no stdin exchange)."""
    proc = subprocess.run(
        [str(VERL_PYTHON), str(DRIVER), json.dumps(spec)], capture_output=True, text=True, cwd=cwd, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    report, _ = _report(proc.stdout.splitlines())
    assert report is not None, proc.stdout[-4000:]
    return report


@pytest.mark.slow
def test_verl_forms_two_groups_of_a_prompt_given_two_slots(store, data_dir, tmp_path):
    """Multiplicity in verl: the signal policy with ``max_groups=2`` on a profile where 4 of the 20 middle
    prompts are at 8 of 16 and the others at 7 or 9 (equal scores would take one group each) fills a
    batch of 8 slots with those 4, twice each and in a row; verl's own loading yields those rows, its
    trainer's uid-then-repeat makes two groups of ``rollout.n`` of each, and its GRPO advantage
    normalises each on its own (a silent group beside a mixed one keeps advantage 0). No NaN."""
    if not VERL_PYTHON.is_file():
        pytest.fail(f"{VERL_PYTHON} is missing: run `make venv-verl` (make test builds it)")
    from pipeline.sample import models

    n, c = _profile_counts()
    best = list(MID)[::5]  # 4 of the 20 at 8 of 16, the rest one off
    c[[i for i in MID if i not in best]] += np.resize([-1.0, 1.0], 16)
    _, _, train, val, ids, dataset = _files_and_profile(store, tmp_path, (n, c))
    policy = "signal:objective=mass,coverage=0,max_groups=2"
    rollout_n = 4
    spec = {
        "train": str(train),
        "val": str(val),
        "tokenizer": str(models.prepare().path),
        "batch": BATCH,
        "rollout_n": rollout_n,
        "overrides": [
            f"+data.curriculum.data_dir={data_dir}",
            "+data.curriculum.group_size=8",
            "+data.curriculum.seed=0",
            f"+data.curriculum.policy='{policy}'",
        ],
    }
    got = _run_driver(spec, tmp_path)
    indices, uids, rewards, adv = got["indices"], got["uids"], got["rewards"], got["advantages"]
    assert len(indices) == BATCH * rollout_n
    slots = indices[::rollout_n]  # the batch's rows, before verl repeats them
    assert all(indices[j * rollout_n : (j + 1) * rollout_n] == [slots[j]] * rollout_n for j in range(BATCH))
    assert Counter(slots) == Counter({i: 2 for i in best})
    assert all(slots[2 * j] == slots[2 * j + 1] for j in range(BATCH // 2))  # a prompt's groups in a row
    # The same policy on the same counts chooses the same slots.
    now = vc.ObservedCounts(store, dataset, ids, forgetting=0.9)()
    twin = vc.CurriculumSchedule(ids, BATCH, policy=policy, seed=0, group_size=8, counts=lambda: now)
    twin.next_row()
    assert slots == [ids.index(p) for p in twin.chosen[0]]
    # verl's groups: one uid per slot, so each prompt given two slots is two groups of rollout.n.
    groups = {}
    for i, u in zip(indices, uids, strict=True):
        groups.setdefault(u, []).append(i)
    assert len(groups) == BATCH and all(len(g) == rollout_n for g in groups.values())
    per_prompt = Counter(g[0] for g in groups.values())
    assert all(per_prompt[i] == 2 for i in set(slots))
    assert all(np.isfinite(rewards)) and all(np.isfinite(adv))
    for j in range(BATCH):
        group = adv[j * rollout_n : (j + 1) * rollout_n]
        assert sum(group) == pytest.approx(0.0, abs=1e-4)
    assert adv[:rollout_n] == [0.0] * rollout_n and max(adv[rollout_n : 2 * rollout_n]) > 0


@pytest.mark.slow
def test_verl_dataloader_draws_by_the_policy_and_follows_new_steps(store, data_dir, tmp_path):
    if not VERL_PYTHON.is_file():
        pytest.fail(f"{VERL_PYTHON} is missing: run `make venv-verl` (make test builds it)")
    from pipeline.observe import track
    from pipeline.sample import models

    texts, rows, train, val, ids, dataset = _files_and_profile(store, tmp_path)
    n, c = _profile_counts()
    spec = {
        "train": str(train),
        "val": str(val),
        "tokenizer": str(models.prepare().path),
        "batch": BATCH,
        "batches": 10,
        "overrides": [
            f"+data.curriculum.data_dir={data_dir}",
            "+data.curriculum.group_size=8",
            "+data.curriculum.seed=0",
            f"+data.curriculum.policy='{FLOOR_POLICY}'",
        ],
    }
    proc = subprocess.Popen(
        [str(VERL_PYTHON), str(DRIVER), json.dumps(spec)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    try:
        first, _ = _report(iter(proc.stdout.readline, ""))
        if first is None:
            pytest.fail(f"the verl driver stopped before its first batches:\n{proc.stderr.read()[-4000:]}")
        # The training run's step 1, dumped by verl and imported by `difficulty track`: the easy prompts are now
        # half right, the middle ones all right.
        dumps = tmp_path / "rollouts"
        dumps.mkdir()
        lines = []
        for i in [*EASY, *MID]:
            for r in range(32):
                lines.append(_dump_line(texts[i], rows[i]["reward_model"]["ground_truth"], i in MID or r % 2 == 0, 1))
        (dumps / "1.jsonl").write_text("\n".join(lines) + "\n")
        # The step is whole (written at once, and the training run is over): final, imported now.
        got = track.run_track(store, track.TrackConfig(path=str(dumps), data_file=str(train), final=True))
        assert got.to_dict()["observations"] == 30
        second_out, err = proc.communicate("go\n", timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-4000:]
    second, _ = _report(second_out.splitlines())
    assert second is not None, second_out[-4000:]

    assert first["train_class"] == "CurriculumRLHFDataset" and first["val_class"] == "CurriculumRLHFDataset"
    assert sorted(first["val_indices"]) == [0, 1, 2, 3] and not first["val_curriculum"]  # verl's own
    assert first["batches_per_epoch"] == 40 // BATCH
    before, after = first["indices"], second["indices"]
    assert len(before) == len(after) == 10 and all(len(b) == len(set(b)) == BATCH for b in before + after)
    # The draws are the policy's: the same schedule run here, fed the same counts, chooses the same batches.
    now = vc.ObservedCounts(store, dataset, ids, forgetting=0.9)()  # profile and step 1, as the dataset read them
    twin = vc.CurriculumSchedule(ids, BATCH, policy=FLOOR_POLICY, seed=0, group_size=8, counts=lambda: (n, c))
    for _ in range(10 * BATCH):
        twin.next_row()
    twin.counts = lambda: now
    for _ in range(10 * BATCH):
        twin.next_row()
    assert [[int(i) for i in b] for b in before + after] == [[ids.index(p) for p in b] for b in twin.chosen]
    drawn_a = Counter(i for b in before for i in b)
    drawn_b = Counter(i for b in after for i in b)
    silent = sum(drawn_a[i] for i in [*EASY, *HARD]) / (10 * BATCH)
    assert silent < 0.3  # uniform draws the 20 silent prompts of 40 half the time
    easy_before = sum(drawn_a[i] for i in EASY) / (10 * BATCH)
    easy_after = sum(drawn_b[i] for i in EASY) / (10 * BATCH)
    assert easy_after > 3 * easy_before
    assert set(drawn_a) | set(drawn_b) == set(range(40))  # the floor: every prompt within 20 batches
    assert first["latest_step"] == 0 and second["latest_step"] == 1


# --- verl V1's per-prompt rollout count ------------------------------------------------------------


def verl_v1_groups(batch: list[dict], config_n: int) -> dict[str, list[str]]:
    """The groups verl's V1 agent loop forms of a batch, mirrored from ``AgentLoopWorkerTQ._run_prompt``
    (verl-project/verl ``verl/trainer/ppo/v1/agent_loop_tq.py``, commit 02dd715, Apache-2.0; verl 0.9.1,
    the version ``make venv-verl`` installs, predates it): per row ``n = prompt.pop("__rollout_n__",
    config.n)`` sessions, each output keyed ``f"{uid}_{session_id}_{i}"`` under the row's uid."""
    groups: dict[str, list[str]] = {}
    for row in batch:
        prompt = dict(row)
        uid = prompt["uid"]
        n = prompt.pop("__rollout_n__", config_n)
        for session_id in range(n):
            groups.setdefault(uid, []).append(f"{uid}_{session_id}_0")
    return groups


def test_verl_v1_forms_a_group_of_16_beside_groups_at_the_configured_n():
    """``rollout_n``: the signal policy with ``max_groups=4`` gives the prompts at 8 of 16 four groups each;
    each becomes one batch row with ``__rollout_n__`` = 4 x 4 = 16, the freed rows go to the next prompts at
    the configured n = 4, and verl's V1 loop forms one group of 16 per such row beside groups of 4."""
    ids = [f"p{i}" for i in range(40)]
    n, c = _profile_counts()
    best = [20, 30]
    c[[i for i in MID if i not in best]] += np.resize([-1.0, 1.0], 18)
    policy, G = "signal:objective=mass,coverage=0,max_groups=4", 4
    schedule = vc.CurriculumSchedule(ids, BATCH, policy=policy, group_size=G, counts=lambda: (n, c), rollout_n=True)

    class Base:  # verl's RLHFDataset, as far as the hook uses it: a row as a dict
        def __init__(self, data_files, tokenizer, config, processor=None, max_samples=-1):
            self.rows = [{"raw_prompt": p, "index": i} for i, p in enumerate(ids)]

        def __getitem__(self, item):
            return dict(self.rows[item])

    dataset = vc.dataset_class(Base)(data_files=["train.parquet"], tokenizer=None, config={})
    dataset.schedule = schedule
    batch = [{**dataset[j], "uid": f"uid-{j}"} for j in range(BATCH)]  # the trainer's uid per row
    twin = make_policy(policy, ids, seed=0, G=G)
    twin.set_counts(n, c, None)
    given = Counter(twin.choose_groups(BATCH))
    assert max(given.values()) == 4 and len(given) < BATCH
    assert {row["raw_prompt"]: row["__rollout_n__"] for row in batch if row["__rollout_n__"] > G} == {
        p: m * G for p, m in given.items() if m > 1
    }
    assert len({row["raw_prompt"] for row in batch}) == BATCH  # one row per prompt
    sizes = sorted(len(g) for g in verl_v1_groups(batch, G).values())
    assert 16 in sizes and G in sizes and len(sizes) == BATCH
    assert sum(sizes) == sum(m * G for m in given.values()) + (BATCH - len(given)) * G
    # without the key, every row draws the configured n (the multiplicity route: m rows of n)
    plain = vc.CurriculumSchedule(ids, BATCH, policy=policy, group_size=G, counts=lambda: (n, c))
    rows = [{"uid": f"u{j}", "row": plain.next_row()} for j in range(BATCH)]
    assert sorted(len(g) for g in verl_v1_groups(rows, G).values()) == [G] * BATCH
    with pytest.raises(ConfigError, match="group_size"):
        vc.VerlCurriculumConfig(rollout_n=True)
