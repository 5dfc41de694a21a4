"""One import of a source into ``observations``: what ``difficulty track`` and its flow run.

Each function reads what is new in its source (a training log's steps not yet recorded; a label
or a profile run once), matches its rows to the dataset's prompts and writes one file per step
(``record.write_step``), so a rerun adds nothing twice and a killed import resumes at its first
unwritten step. The result says what was read, matched and left unmatched (and why).
"""

from __future__ import annotations

import functools
import logging
import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from pipeline import datasets
from pipeline.checks import check_bool, check_number
from pipeline.errors import ConfigError, DatasetError
from pipeline.finish import FinishedRun
from pipeline.observe import record, sources, trainers
from pipeline.observe.match import Matcher
from pipeline.store import Store

log = logging.getLogger(__name__)


@dataclass
class TrackResult:
    """What one import did."""

    source: str
    steps: list[int] = field(default_factory=list)  # steps written now
    already: int = 0  # steps recorded by an earlier import, not read again
    pending: list[int] = field(default_factory=list)  # steps still being written by the trainer
    observations: int = 0  # (step, prompt) rows written
    rollouts: int = 0  # outcomes they hold
    unmatched: int = 0  # source rows that matched no prompt
    reasons: Counter = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)  # what the user should know (a shaped score read with a threshold)

    def add(self, step: int, rows: pa.Table, unmatched: pa.Table | None) -> None:
        self.steps.append(step)
        self.observations += rows.num_rows
        self.rollouts += int(pc.sum(rows.column("n")).as_py() or 0)
        if unmatched is not None and unmatched.num_rows:
            self.unmatched += unmatched.num_rows
            self.reasons.update(unmatched.column("reason").to_pylist())

    def to_dict(self) -> dict:
        return {
            "source": self.source,
            "steps_written": len(self.steps),
            "first_step": min(self.steps) if self.steps else None,
            "last_step": max(self.steps) if self.steps else None,
            "steps_already_recorded": self.already,
            "steps_pending": len(self.pending),
            "observations": self.observations,
            "rollouts": self.rollouts,
            "unmatched_rows": self.unmatched,
            "unmatched_reasons": dict(self.reasons.most_common()),
        }


def dataset_problems(store: Store, dataset: str | None = None, data_file: str | Path | None = None) -> pa.Table:
    """The problems a source is matched to: a file loaded now (and stored, as ``load`` does) or a
    dataset already in the store (``DatasetError`` names what to do when there is none)."""
    if data_file is not None:
        problems = datasets.load(dataset, data_file=data_file).problems
        if problems.num_rows:
            store.add_problems(problems, problems.column("dataset")[0].as_py())
        return problems
    if dataset is None:
        raise ConfigError("name the dataset the source's prompts belong to: --dataset NAME or --data-file PATH")
    problems = store.read_table("problems", {"dataset": dataset})
    if problems.num_rows == 0:
        stored = store.query("select distinct dataset from problems order by 1").column("dataset").to_pylist()
        raise DatasetError(
            f"no problems of dataset {dataset!r} under {store.root} (stored: {stored or 'none'}); "
            "load it first (`difficulty load ...`) or give --data-file"
        )
    return problems


def track_run(store: Store, run_id: str, finished: FinishedRun | None = None) -> TrackResult:
    """A finished profile run as the source ``profile:<run id>`` (step 0): each prompt's samples.
    ``finished``: what the run's finish computed, when the caller holds it (its record and
    prompt_stats are not read back)."""
    if finished is not None:
        run, stats = finished.run, finished.analysis.prompt_stats
    else:
        run, stats = store.get_run(run_id), store.read_table("prompt_stats", {"run_id": run_id})
    if stats.num_rows == 0:
        raise DatasetError(f"run {run_id} has no analysis yet (status {run.status!r}): finish it first")
    source = record.check_source(f"profile:{run_id}")
    result = TrackResult(source)
    rows = record.observation_rows(
        source,
        "profile",
        0,
        run.dataset,
        stats.column("prompt_id").to_pylist(),
        stats.column("n").to_pylist(),
        stats.column("c").to_pylist(),
        run.model,
        observed_at=run.updated_at,
    )
    record.write_step(store, source, 0, rows)
    result.add(0, rows, None)
    return result


def _source(given: str | None, prefix: str, name: str) -> str:
    """The source's name: as given, else ``<prefix>:<name>`` made safe."""
    if given is not None:
        return record.check_source(given)
    slug = re.sub(r"[^A-Za-z0-9._+-]+", "-", name).strip("-") or "source"
    return record.check_source(f"{prefix}:{slug}"[:128])


DEFAULT_SETTLE_S = 60.0  # the newest verl step, unchanged this long with a full step's rollouts, is complete


def track_verl(
    store: Store,
    folder: Path,
    problems: pa.Table,
    *,
    source: str | None = None,
    model: str | None = None,
    correct_field: str | None = None,
    score_threshold: float | None = None,
    final: bool = False,
    settle_s: float = DEFAULT_SETTLE_S,
) -> TrackResult:
    """verl's rollout dumps: each step not yet recorded, or whose file has changed since, once it is complete.

    verl writes a step's file line by line while the step is dumped, and a step may be written again
    (a re-dump, or a writer that truncates and rewrites an older step while newer ones exist), so a
    file whose last line parses may still be short. A step is stored when its content is whole,
    whatever newer files exist:

    - a file that is empty, cut mid-line, or changed while read is pending, never refused: the next
      import reads it again (a note says so once it has stayed that way ``settle_s``);
    - ``final`` (the trainer is done): a whole file is complete;
    - otherwise a step holds a full step's rollouts (as many as the last complete step) and has a
      newer step beside it or has been unchanged for ``settle_s`` seconds. The first step, with no
      complete step to compare with, needs a newer step holding no more rollouts than it, or the
      settle time.

    A pending step never blocks the steps after it. Each stored step keeps the size, rollouts,
    content digest and modification time of the file it was read from (``record.stored_steps``): a
    step whose content has changed since (grown, or written again at the same size) is read again
    and replaced when complete, never kept short; until then the stored step stays as it was.
    """
    return track_trainer(
        store, "verl", folder, problems, source=source, model=model, correct_field=correct_field,
        score_threshold=score_threshold, final=final, settle_s=settle_s,
    )  # fmt: skip


_THRESHOLD_NOTE = (
    "correctness read as score >= {}: a shaped score (format bonus, length penalty) is not correctness; prefer a "
    "binary field (--correct-field)"
)


def track_trainer(
    store: Store,
    fmt: str,
    folder: Path,
    problems: pa.Table,
    *,
    source: str | None = None,
    model: str | None = None,
    correct_field: str | None = None,
    score_threshold: float | None = None,
    final: bool = False,
    settle_s: float = DEFAULT_SETTLE_S,
) -> TrackResult:
    """A verl, prime-rl or NeMo-RL rollout folder (``sources``, ``trainers``), by the rule of
    ``track_verl``; a prime-rl step is also complete once its batch shipped (``trainers.prime_shipped``)."""
    source = _source(source, fmt, Path(folder).resolve().name)
    files = _expect(folder, fmt, trainers.steps_of(fmt, folder))
    # verl's dumps have their own reader (score, acc, uid); the others' go through ``trainers``
    reader = functools.partial(trainers.read_file, fmt) if fmt != "verl" else sources.read_verl_file

    def read(path: Path, step: int, matcher: Matcher) -> sources.VerlFile | None:
        return reader(
            path, step, matcher, source=source, model=model, correct_field=correct_field,
            score_threshold=score_threshold,
        )  # fmt: skip

    shipped = trainers.prime_shipped if fmt == "prime-rl" else None
    result = _track_steps(
        store, source, files, read, problems, final=final, settle_s=settle_s, trainer=fmt, shipped=shipped
    )
    if score_threshold is not None:
        note = _THRESHOLD_NOTE.format(score_threshold)
        result.notes.append(note if fmt == "verl" else note.replace("score", "reward", 1))
    return result


def _expect(folder: Path, fmt: str, files: list[tuple[int, Path]]) -> list[tuple[int, Path]]:
    """The step files found, or an error when the folder holds files but none of this format's (an
    empty folder is a run that has not written its first step yet)."""
    if files or not any(Path(folder).iterdir()):
        return files
    found = trainers.detect(folder)  # names the files and the formats read when it holds none
    raise DatasetError(
        f"{str(folder)!r} holds {found} rollouts, not {fmt}'s ({trainers.FORMATS[fmt]}): use --input-format {found}"
    )


def _track_steps(
    store: Store,
    source: str,
    files: list[tuple[int, Path]],
    read: Callable[[Path, int, Matcher], sources.VerlFile | None],
    problems: pa.Table,
    *,
    final: bool,
    settle_s: float,
    trainer: str,
    shipped: Callable[[Path], bool] | None = None,
) -> TrackResult:
    """The steps of a trainer's folder not yet recorded, in order, each once it is complete (``track_verl``)."""
    settle_s = check_number("settle_s", settle_s, 0, unit="seconds")
    result = TrackResult(source)
    stored = record.stored_steps(store, source)
    matcher = Matcher.from_problems(problems)
    full = _full_rows(stored)  # a full step's rollouts: the last complete step's
    for at, (step, path) in enumerate(files):
        newer = at + 1 < len(files) or (shipped is not None and shipped(path))
        known = stored.get(step, False)
        if known is None or (known and _unchanged(path, known)):
            result.already += 1  # a table's step, or one stored before stamps were kept: as it was
            if known:
                full = known.rows
            continue
        got = read(path, step, matcher)
        if full is None and newer and got is not None and not final and at + 1 < len(files):
            # the first step, with no complete one to compare with: never fewer rollouts than the next
            ahead = sources.count_rows(files[at + 1][1])
            complete = got.rows >= ahead and step_complete(
                got.rows, got.modified, None, newer=newer, final=final, settle_s=settle_s
            )
        else:
            complete = got is not None and step_complete(
                got.rows, got.modified, full, newer=newer, final=final, settle_s=settle_s
            )
        if not complete:
            log.info("%s: step %d is not complete yet (%s may still be writing it); waiting", path, step, trainer)
            result.pending.append(step)
            if newer and _age(path) >= max(settle_s, 1.0):
                state = "cut" if got is None else f"short ({got.rows} of {full} rollouts)"
                result.notes.append(
                    f"{path}: step {step} has been {state} "
                    f"for over {settle_s:g} s with newer steps beside it; it is read again on every import: restore "
                    "the file, or move it out of the rollout folder"
                )
            continue
        record.write_step(store, source, step, got.observations, got.unmatched, read=got.read)
        result.add(step, got.observations, got.unmatched)
        full = got.rows
    return result


def _full_rows(stored: dict[int, record.FileRead | None]) -> int | None:
    """The rollouts of the newest stored step read from a file (None: none yet)."""
    reads = [read for _, read in sorted(stored.items()) if read]
    return reads[-1].rows if reads else None


def _unchanged(path: Path, known: record.FileRead) -> bool:
    """Whether the step file is the one the stored step was read from: the same size and modification
    time, else the same content digest (a rewrite at the same size differs; a touch does not)."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return False
    if stat.st_size != known.size:
        return False
    if known.digest is None or stat.st_mtime_ns == known.mtime_ns:
        return True  # a step stored before digests were kept compares by size, as it was stored
    try:
        return record.digest(path.read_bytes()) == known.digest
    except FileNotFoundError:
        return False


def _age(path: Path) -> float:
    try:
        return time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return 0.0


def step_complete(rows: int, modified: float, full: int | None, *, newer: bool, final: bool, settle_s: float) -> bool:
    """Whether a whole step file of ``rows`` rollouts, last modified at ``modified`` (seconds since the
    epoch), is complete: ``track_verl``'s rule, the same for every trainer that writes a file per step."""
    if final:
        return True
    if not newer and time.time() - modified < settle_s:
        return False
    return full is None or rows == full


def track_table(
    store: Store, path: Path, problems: pa.Table, *, source: str | None = None, model: str | None = None
) -> TrackResult:
    """A table of counts or rewards per step: its steps not yet recorded."""
    source = _source(source, "table", Path(path).stem)
    result = TrackResult(source)
    done = record.recorded_steps(store, source)
    for step, (rows, unmatched) in sorted(
        sources.read_table(path, Matcher.from_problems(problems), source=source, model=model).items()
    ):
        if step in done:
            result.already += 1
            continue
        record.write_step(store, source, step, rows, unmatched)
        result.add(step, rows, unmatched)
    return result


def track_labels(
    store: Store,
    problems: pa.Table,
    label: str,
    *,
    source: str | None = None,
    model: str | None = None,
    n: int | None = None,
    counts: str | None = None,
) -> TrackResult:
    """A pass-rate label the dataset ships (step 0; importing it again replaces it)."""
    source = _source(source, "label", label if model is None else f"{label}@{model}")
    result = TrackResult(source)
    rows, unmatched = sources.read_labels(problems, label, source=source, model=model, n=n, counts=counts)
    record.write_step(store, source, 0, rows, unmatched)
    result.add(0, rows, unmatched)
    return result


TRACK_KINDS = ("verl", "prime-rl", "nemo-rl", "table", "label", "run")


@dataclass(frozen=True)
class TrackConfig:
    """One source to import, as ``difficulty track`` takes it (JSON-able: a scheduled flow's parameter).

    Attributes:
        path: a trainer's rollout folder or a table file (none for a label or a run).
        kind: ``verl``, ``prime-rl``, ``nemo-rl``, ``table``, ``label`` or ``run`` (None: a folder's
            format is read from its files, ``trainers.detect``; a file is a table).
        source: the source's name in the table (None: from the kind and the path).
        dataset, data_file: the dataset its prompts belong to (stored, or a file loaded now).
        model: the model or training run the outcomes come from.
        correct_field, score_threshold: how a rollout's correctness is read.
        final, settle_s: when the newest step of a trainer's folder is complete (``track_verl``): the trainer is done,
            or its file unchanged this many seconds with as many rollouts as the step before.
        label, label_n, counts: a label column, the rollouts behind it, what it counts.
        run: a profile run to record.
    """

    path: str | None = None
    kind: str | None = None
    source: str | None = None
    dataset: str | None = None
    data_file: str | None = None
    model: str | None = None
    correct_field: str | None = None
    score_threshold: float | None = None
    final: bool = False
    settle_s: float = DEFAULT_SETTLE_S
    label: str | None = None
    label_n: int | None = None
    counts: str | None = None
    run: str | None = None

    def __post_init__(self) -> None:
        check_bool("final", self.final)
        check_number("settle_s", self.settle_s, 0, unit="seconds")

    def resolved_kind(self) -> str:
        if self.run is not None:
            return "run"
        if self.kind is not None:
            if self.kind not in TRACK_KINDS:
                raise ConfigError(f"--input-format {self.kind!r} is unknown: allowed {', '.join(TRACK_KINDS[:5])}")
            return self.kind
        if self.label is not None:
            return "label"
        if self.path is None:
            raise ConfigError("give the PATH of a trainer's rollout folder or a table, --label COLUMN or --run RUN")
        return trainers.detect(self.path) if Path(self.path).is_dir() else "table"


def run_track(store: Store, config: TrackConfig) -> TrackResult:
    """Import what is new in the configured source."""
    kind = config.resolved_kind()
    if kind == "run":
        return track_run(store, config.run)
    problems = dataset_problems(store, config.dataset, config.data_file)
    if kind == "label":
        if config.label is None:
            raise ConfigError("--input-format label needs --label COLUMN")
        return track_labels(
            store,
            problems,
            config.label,
            source=config.source,
            model=config.model,
            n=config.label_n,
            counts=config.counts,
        )
    if config.path is None:
        raise ConfigError(f"--input-format {kind} needs the PATH of the source")
    if kind == "verl":
        return track_verl(
            store,
            Path(config.path),
            problems,
            source=config.source,
            model=config.model,
            correct_field=config.correct_field,
            score_threshold=config.score_threshold,
            final=config.final,
            settle_s=config.settle_s,
        )
    if kind in trainers.FORMATS:
        return track_trainer(
            store,
            kind,
            Path(config.path),
            problems,
            source=config.source,
            model=config.model,
            correct_field=config.correct_field,
            score_threshold=config.score_threshold,
            final=config.final,
            settle_s=config.settle_s,
        )
    return track_table(store, Path(config.path), problems, source=config.source, model=config.model)
