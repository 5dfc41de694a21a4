"""Every table's columns: the contract between stages.

Every stage imports its table's schema from here, so a column is named and typed in one place.
Each table is declared once, as plain ``Column`` tuples (``TABLES``); its pyarrow schema
(``schema.SAMPLES``, ``schema.SCHEMAS["samples"]``) is built from that declaration on first use,
and so are the DuckDB types of an empty table's view (``duckdb_type``): the quick commands
(``difficulty sql``) read the declaration without importing pyarrow.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, get_args

from pipeline.errors import ConfigError

if TYPE_CHECKING:
    import pyarrow as pa

# Problem statuses: why a row cannot be graded (kept, never dropped).
ProblemStatus = Literal["ok", "empty_problem", "empty_answer"]
PROBLEM_OK: ProblemStatus = "ok"
PROBLEM_EMPTY_PROBLEM: ProblemStatus = "empty_problem"
PROBLEM_EMPTY_ANSWER: ProblemStatus = "empty_answer"


def problem_status(problem: str | None, answer: str | None, *, needs_problem: bool = True) -> ProblemStatus:
    """The one precedence rule: an empty problem first, then an empty answer.

    ``needs_problem=False`` (rollouts imported without problem text) checks the answer only.
    """
    if needs_problem and not (problem or "").strip():
        return PROBLEM_EMPTY_PROBLEM
    if not (answer or "").strip():
        return PROBLEM_EMPTY_ANSWER
    return PROBLEM_OK


# Grade statuses of one sample.
GradeStatus = Literal["correct", "incorrect", "unparsed", "timeout", "error"]
GRADE_STATUSES: tuple[GradeStatus, ...] = get_args(GradeStatus)

# A run's life: registered, sampling shards, analysed and reported, or stopped by an error.
RunStatus = Literal["created", "sampling", "done", "failed"]
RUN_STATUSES: tuple[RunStatus, ...] = get_args(RunStatus)
# Never stored: what a `sampling` run whose process is gone (no one holds its lock) is shown as.
RUN_INTERRUPTED = "interrupted"


# Difficulty bands: the one vocabulary of every table, command, report and export. A prompt is
# ``hard`` (it (nearly) never answers right: a group of its answers is all wrong), ``informative`` (its
# groups mix right and wrong: GRPO-style training learns from it) or ``easy`` (its groups are all
# right). Where a band is finer, its name starts with one of these (``informative_mid``).
BandName = Literal["hard", "informative", "easy"]
BANDS: tuple[BandName, ...] = get_args(BandName)
# The bands' default edges: a pass rate up to the first is hard, from the second on easy (a group of
# G = 8 answers is then all wrong, or all right, at least 43% of the time); which side an edge itself
# falls on is each band rule's own. The adaptive target decides these bands, the gradient share and
# the pass-rate spread split at them, and ``current --moved`` compares them.
BAND_EDGES: tuple[float, float] = (0.1, 0.9)
# Where the informative band is split in three (its middle, where GRPO's weight peaks): the gradient
# share's finer bands, the pass-rate spread and the report's comparison of runs.
MID_EDGES: tuple[float, float] = (0.4, 0.6)
# The edges of what a run measured silent: no right answer, or no wrong one (``export``'s and the
# verdict's default: informative means at least one right and one wrong answer).
SILENT_EDGES: tuple[float, float] = (0.0, 1.0)


def edge_params() -> dict[str, float]:
    """The default band edges as a query's bound parameters (``$lo``, ``$mid_lo``, ``$mid_hi``,
    ``$hi``: ``sql/pass_rate_spread.sql``)."""
    return {"lo": BAND_EDGES[0], "mid_lo": MID_EDGES[0], "mid_hi": MID_EDGES[1], "hi": BAND_EDGES[1]}


# The trainer's group size G where none is given: the verdict, the exports, the curricula, the report,
# and the default allocation's rollouts per prompt (``profile --G``, ``allocate --G``).
DEFAULT_G = 8
# The largest G a profile reads its verdict at, and the largest the verdict searches for the G that
# halves the silence.
MAX_G = 4096
# The band of a prompt the run has no samples for.
UNMEASURED = "unmeasured"
# Names earlier versions printed, stored (``prompt_stats.decided_band``) or took, read as today's.
OLD_BAND_NAMES: dict[str, BandName] = {"silent_hard": "hard", "silent_easy": "easy", "medium": "informative"}


def band_of(p: float | None, lo: float, hi: float) -> str:
    """The band of a measured pass rate: ``hard`` (``p <= lo``), ``easy`` (``p >= hi``) or
    ``informative``; ``UNMEASURED`` without one (None or NaN)."""
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return UNMEASURED
    if p <= lo:
        return "hard"
    if p >= hi:
        return "easy"
    return "informative"


def band_name(name: str) -> BandName:
    """A band a user typed or an earlier version stored, in today's vocabulary (``silent_hard`` is
    ``hard``): the one reader of the old names."""
    key = name.strip().lower()
    key = OLD_BAND_NAMES.get(key, key)
    if key not in BANDS:
        raise ConfigError(f"band {name!r} is not one of {', '.join(BANDS)}")
    return key


class Column(NamedTuple):
    name: str
    type: str  # one of ARROW_TYPES, or list_of(one)
    nullable: bool = True


col = Column

# Column types, by the name pyarrow prints them with. Repeated strings of the long weights table
# are dictionary-encoded (a few MB instead of ~1 GB for Big-Math x 11 estimators x 5 group sizes);
# DuckDB reads them as VARCHAR.
STRING, INT32, INT64, FLOAT64, BOOL = "string", "int32", "int64", "double", "bool"
UTC_MICROS = "timestamp[us, tz=UTC]"
DICT_STRING = "dictionary<values=string, indices=int32, ordered=0>"
# Each type's pyarrow constructor and DuckDB name (the type DuckDB gives the pyarrow type).
ARROW_TYPES: dict[str, tuple[str, tuple, dict, str]] = {
    STRING: ("string", (), {}, "VARCHAR"),
    INT32: ("int32", (), {}, "INTEGER"),
    INT64: ("int64", (), {}, "BIGINT"),
    FLOAT64: ("float64", (), {}, "DOUBLE"),
    BOOL: ("bool_", (), {}, "BOOLEAN"),
    UTC_MICROS: ("timestamp", ("us",), {"tz": "UTC"}, "TIMESTAMP WITH TIME ZONE"),
    DICT_STRING: ("dictionary", (INT32, STRING), {}, "VARCHAR"),
}
_LIST = ("list<item: ", ">")


def list_of(item: str) -> str:
    return f"{_LIST[0]}{item}{_LIST[1]}"


def _item(type_: str) -> str | None:
    """The item type of a list type, None for another type."""
    return type_[len(_LIST[0]) : -len(_LIST[1])] if type_.startswith(_LIST[0]) else None


def arrow_type(type_: str) -> pa.DataType:
    """The pyarrow type of a declared column type."""
    import pyarrow as pa

    item = _item(type_)
    if item is not None:
        return pa.list_(arrow_type(item))
    factory, args, kwargs, _ = ARROW_TYPES[type_]
    return getattr(pa, factory)(*(arrow_type(a) if a in ARROW_TYPES else a for a in args), **kwargs)


def duckdb_type(type_: str) -> str:
    """The DuckDB type of a declared column type."""
    item = _item(type_)
    return f"{duckdb_type(item)}[]" if item is not None else ARROW_TYPES[type_][3]


_PROBLEMS = (
    col("dataset", STRING, False),
    col("split", STRING),
    col("prompt_id", STRING, False),
    col("problem", STRING),
    col("answer", STRING),
    col("source", STRING),
    col("domain", STRING),
    col("topic", STRING),
    col("difficulty", FLOAT64),
    col("prior_n", INT32),
    col("prior_c", INT32),
    col("status", STRING, False),
    # The source row as loaded from a local file, as JSON text (datasets.original_row reads it):
    # what `difficulty export` writes back. Null for hub and bundled rows.
    col("original", STRING),
)

_RUNS = (
    col("run_id", STRING, False),
    col("dataset", STRING),
    col("model", STRING),
    col("backend", STRING),
    col("params", STRING),  # JSON: n, temperature, top_p, max_tokens, limit, ...
    col("seed", INT64),
    col("prompt_template", STRING),
    col("grader", STRING),
    col("versions", STRING),  # JSON: package -> version
    col("n_prompts", INT64),
    col("created_at", UTC_MICROS),
    col("updated_at", UTC_MICROS),
    col("status", STRING),  # created, sampling, done, failed
    # Adaptive runs only (null otherwise; docs/adaptive.md §8): the settings as JSON (target,
    # n_min, n_max, round rule, prior choice), the prior the posteriors use, and the rounds as
    # JSON (per round: prompts sampled, rollouts, shards, prompts still open after it).
    col("adaptive", STRING),
    col("prior_a", FLOAT64),
    col("prior_b", FLOAT64),
    col("prior", STRING),  # JSON: how the prior was obtained (fit or jeffreys, start, loglik)
    col("rounds", STRING),
)

_SAMPLES = (
    col("run_id", STRING, False),
    col("prompt_id", STRING, False),
    col("sample_idx", INT32, False),
    col("completion", STRING),
    col("finish_reason", STRING),
    col("n_tokens", INT32),
    col("extracted_answer", STRING),
    col("grade_status", STRING),
    col("grade_reason", STRING),
    col("correct", BOOL),
    col("grader", STRING),
)

# The plan of a run: which sample indices of which prompts each shard holds, stored once when the
# run starts (partition run_id=). A shard file counts as finished only when the digest in its
# footer is its plan's digest, so a shard is known by its content, not by its number.
_PLANS = (
    col("run_id", STRING, False),
    col("shard", INT32, False),
    col("prompt_id", STRING, False),
    col("first_idx", INT32, False),  # sample indices first_idx ..
    col("count", INT32, False),  # .. first_idx + count - 1
    col("digest", STRING, False),  # of the whole shard (same on its rows)
    col("round", INT32),  # adaptive runs: the round the shard belongs to (null otherwise)
)

# Per shard, its (prompt, extracted answer) counts: written with each shard (Store.write_shard,
# given analyze.answer_counts of the samples already in memory), so the analysis reads 1 row per
# distinct answer instead of 1 per sample. A shard's counts file carries the shard file's write id
# in its footer: counts of an older copy of the shard are never used.
_ANSWER_COUNTS = (
    col("run_id", STRING, False),
    col("shard", INT32, False),
    col("prompt_id", STRING, False),
    col("extracted_answer", STRING),  # null: samples without an extracted answer
    col("cnt", INT64, False),  # samples with this answer
    col("cc", INT64, False),  # of which graded correct
)

TABLES: dict[str, tuple[Column, ...]] = {
    "problems": _PROBLEMS,
    "runs": _RUNS,
    "samples": _SAMPLES,
    "plans": _PLANS,
    "answer_counts": _ANSWER_COUNTS,
}

# Analysis tables (prompt_stats, weights, summary, allocation) are defined below.

_PROMPT_STATS = (
    col("run_id", STRING, False),
    col("prompt_id", STRING, False),
    col("n", INT32, False),
    col("c", INT32, False),
    col("pass_rate", FLOAT64),  # c / n; null when n = 0
    col("interval_level", FLOAT64),
    col("wilson_lo", FLOAT64),
    col("wilson_hi", FLOAT64),
    col("jeffreys_lo", FLOAT64),
    col("jeffreys_hi", FLOAT64),
    col("pass_at_k", list_of(FLOAT64)),  # unbiased pass@k for k = 1..n
    # Per group size G (aligned lists): unbiased hypergeometric rate for n >= G, Beta
    # posterior mean for n < G; the plug-in (biased upward) only under its own name.
    col("group_sizes", list_of(INT32)),
    col("zero_signal", list_of(FLOAT64)),
    col("silent_all_correct", list_of(FLOAT64)),
    col("silent_all_wrong", list_of(FLOAT64)),
    col("zero_signal_plugin", list_of(FLOAT64)),
    # Answer concentration (null when the counts carry no extracted answers).
    col("n_answered", INT32),
    col("n_distinct_answers", INT32),
    col("n_distinct_correct", INT32),
    col("modal_share", FLOAT64),
    col("answer_entropy", FLOAT64),  # nats
    col("modal_correct_share_grpo", FLOAT64),
    col("modal_correct_share_reco", FLOAT64),
    # Answers cut by the token limit (samples.finish_reason = 'length'): their share of the n, and
    # ``truncated``, the prompt's flag: more than half of its wrong answers were cut off, so its
    # wrong answers say more about the token limit than about the problem (never "hard" in an
    # export). Null for a run without stored answers (saved from observations).
    col("truncated_share", FLOAT64),
    col("truncated", BOOL),
    # Answer lengths in tokens (samples.n_tokens; docs/tokens.md), null for a run without stored
    # answers: the answers whose length is known, their total and mean (and sample sd), the mean by
    # outcome (right; wrong and finished; cut off by the token limit and not right), and the
    # prompt's price, its expected answer length under the run's population of lengths.
    col("tokens_counted", INT32),
    col("tokens_spent", INT64),
    col("tokens_per_answer", FLOAT64),
    col("tokens_sd", FLOAT64),
    col("tokens_right", FLOAT64),
    col("tokens_wrong", FLOAT64),
    col("tokens_cut", FLOAT64),
    col("tokens_expected", FLOAT64),
    # Adaptive runs only (null otherwise; docs/adaptive.md §8). The posterior is
    # Beta(prior_a + c, prior_b + n - c) with the run's prior (runs.prior_a, runs.prior_b).
    col("stop_round", INT32),  # the round of the prompt's last samples
    col("decided_band", STRING),  # BANDS: hard, informative, easy (band target; read with band_name)
    col("band_prob", FLOAT64),  # posterior probability of decided_band
    col("post_mean", FLOAT64),  # posterior mean of p
    col("post_lo", FLOAT64),  # central 1 - delta credible interval of p
    col("post_hi", FLOAT64),
    col("undecided", BOOL),  # stopped without a decision (at n_max, or where more samples were not worth their cost)
)

_WEIGHTS = (
    col("run_id", DICT_STRING, False),
    col("prompt_id", DICT_STRING, False),
    col("estimator", DICT_STRING, False),  # canonical spec, e.g. softmax_grpo:tau=1.0
    col("G", INT32, False),
    col("p", FLOAT64),  # point estimate c / n (null when n = 0)
    col("weight", FLOAT64),  # w(p, G) at p
    col("mass", FLOAT64),  # w(p, G) p q
    # Monte Carlo standard error of weight (reco_answers rows too wide for the exact method);
    # null where exact. The mass's is weight_se * mass / weight.
    col("weight_se", FLOAT64),
    col("zero_signal", FLOAT64),  # unbiased (n >= G) or posterior (n < G)
)

# Long format: one row per (section, metric, estimator?, G?, band?, k?).
_SUMMARY = (
    col("run_id", STRING, False),
    col("section", STRING, False),  # dataset, zero_signal, dapo, gradient_share, pass_at_k
    col("metric", STRING, False),
    col("estimator", STRING),
    col("G", INT32),
    col("band", STRING),
    col("k", INT32),
    col("value", FLOAT64),
    col("n_prompts", INT64),
)

_ALLOCATION = (
    col("run_id", STRING, False),
    col("objective", STRING, False),  # signal, knapsack, variance
    col("estimator", STRING),  # for the signal objective
    col("method", STRING),  # fast, greedy, dp (exact) or lagrangian (see gap)
    col("posterior", BOOL),
    col("budget", INT64),
    col("prompt_id", STRING, False),
    col("p", FLOAT64),  # point estimate or posterior mean used
    col("n_rollouts", INT32, False),
    col("expected_value", FLOAT64),  # objective term at n_rollouts
    col("uniform_n", INT32),
    col("uniform_value", FLOAT64),  # objective term under the uniform allocation
    # certified distance of the allocation's total from the optimum (0: exact; lagrangian: the
    # dual bound minus the total); the same on every row of one allocation, null before it existed
    col("gap", FLOAT64),
    # what one unit of the budget is: rollouts, or tokens (a rollout costs its prompt's expected
    # answer length, docs/tokens.md); null in rows made before the column was there (rollouts)
    col("price_unit", STRING),
)

TABLES.update({"prompt_stats": _PROMPT_STATS, "weights": _WEIGHTS, "summary": _SUMMARY, "allocation": _ALLOCATION})

# Checkpoint history (flows/checkpoints.py): one row per checkpoint and prompt, appended once per
# checkpoint (partition checkpoint_id=); the drift views in sql/ compare consecutive checkpoints.
_HISTORY = (
    col("checkpoint_id", STRING, False),  # hash of path, size, mtime
    col("checkpoint", STRING, False),  # display name (file stem, folder)
    col("checkpoint_path", STRING),
    col("step", INT64),  # last integer of the name; orders checkpoints
    col("run_id", STRING, False),
    col("dataset", STRING),
    col("model", STRING),
    col("prompt_id", STRING, False),
    col("n", INT32, False),
    col("c", INT32, False),
    col("pass_rate", FLOAT64),
    col("silent", BOOL),  # all n samples agree (c = 0 or c = n)
    col("group_sizes", list_of(INT32)),
    col("zero_signal", list_of(FLOAT64)),  # aligned with group_sizes
    col("silent_all_correct", list_of(FLOAT64)),
    col("silent_all_wrong", list_of(FLOAT64)),
    col("profiled_at", UTC_MICROS),
)

TABLES["history"] = _HISTORY

# Observations (pipeline/observe/): per (source, step, prompt) the outcomes some model drew for a
# prompt, from any source a user already has: a profile run (step 0), a trainer's rollouts (verl
# dumps, the TRL recorder, a generic table), or pass rates shipped with a dataset (labels). One
# file per (source, step): partition source=<source>, part ``step-<step>``, so importing a step
# again replaces it and a rerun adds nothing twice.
ObservationKind = Literal["profile", "training", "label"]
OBSERVATION_KINDS: tuple[str, ...] = get_args(ObservationKind)
_OBSERVATIONS = (
    col("source", STRING, False),  # e.g. verl:grpo-run-3, trl:run-1, profile:<run id>
    col("kind", STRING, False),  # OBSERVATION_KINDS
    col("step", INT64, False),  # training step (0 for a profile or a label)
    col("dataset", STRING, False),
    col("prompt_id", STRING, False),
    col("model", STRING),  # the model or training run that drew the outcomes
    col("n", INT32, False),  # outcomes observed
    col("c", INT32, False),  # of them correct
    col("observed_at", UTC_MICROS),  # when the source drew them (else imported)
    # The row's group among the prompt's groups of the step (0, 1, ...): a prompt given m groups in a
    # step is m rows. Null: the row holds all of the prompt's outcomes of the step, not split into
    # groups (labels, profiles, tables, files stored before groups were kept); read as one group.
    col("group_index", INT32),
)
# Rows of a source that matched no prompt of the dataset: kept, with why, never dropped silently.
_UNMATCHED = (
    col("source", STRING, False),
    col("step", INT64, False),
    col("row", INT64, False),  # row (or line) number in the source file, from 0
    col("reason", STRING, False),
    col("text", STRING),  # the row's prompt, problem or id as read (cut to 500 characters)
)

TABLES.update({"observations": _OBSERVATIONS, "unmatched": _UNMATCHED})

_BUILT: dict[str, Any] = {}


def __getattr__(name: str) -> Any:
    """``SCHEMAS`` (table -> pyarrow schema) and each table's schema by its upper-case name
    (``SAMPLES``), built from ``TABLES`` on first use: importing pyarrow is the cost the quick
    commands avoid."""
    if name not in _BUILT:
        if name != "SCHEMAS" and name.lower() not in TABLES:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        import pyarrow as pa

        schemas = {
            table: pa.schema([pa.field(c.name, arrow_type(c.type), nullable=c.nullable) for c in columns])
            for table, columns in TABLES.items()
        }
        _BUILT.update({"SCHEMAS": schemas, **{table.upper(): s for table, s in schemas.items()}})
    return _BUILT[name]
