"""Explicit pyarrow schemas for every table: the contract between stages.

Every stage imports its table's schema from here, so a column is named and typed in one place.
"""

from __future__ import annotations

from typing import Literal, get_args

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

PROBLEMS = pa.schema(
    [
        pa.field("dataset", pa.string(), nullable=False),
        pa.field("split", pa.string()),
        pa.field("prompt_id", pa.string(), nullable=False),
        pa.field("problem", pa.string()),
        pa.field("answer", pa.string()),
        pa.field("source", pa.string()),
        pa.field("domain", pa.string()),
        pa.field("topic", pa.string()),
        pa.field("difficulty", pa.float64()),
        pa.field("prior_n", pa.int32()),
        pa.field("prior_c", pa.int32()),
        pa.field("status", pa.string(), nullable=False),
        # The source row as loaded from a local file, as JSON text (datasets.original_row reads it):
        # what `difficulty export` writes back. Null for hub and bundled rows.
        pa.field("original", pa.string()),
    ]
)

RUNS = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("dataset", pa.string()),
        pa.field("model", pa.string()),
        pa.field("backend", pa.string()),
        pa.field("params", pa.string()),  # JSON: n, temperature, top_p, max_tokens, limit, ...
        pa.field("seed", pa.int64()),
        pa.field("prompt_template", pa.string()),
        pa.field("grader", pa.string()),
        pa.field("versions", pa.string()),  # JSON: package -> version
        pa.field("n_prompts", pa.int64()),
        pa.field("created_at", pa.timestamp("us", tz="UTC")),
        pa.field("updated_at", pa.timestamp("us", tz="UTC")),
        pa.field("status", pa.string()),  # created, sampling, done, failed
        # Adaptive runs only (null otherwise; docs/adaptive.md §8): the settings as JSON (target,
        # n_min, n_max, round rule, prior choice), the prior the posteriors use, and the rounds as
        # JSON (per round: prompts sampled, rollouts, shards, prompts still open after it).
        pa.field("adaptive", pa.string()),
        pa.field("prior_a", pa.float64()),
        pa.field("prior_b", pa.float64()),
        pa.field("prior", pa.string()),  # JSON: how the prior was obtained (fit or jeffreys, start, loglik)
        pa.field("rounds", pa.string()),
    ]
)

SAMPLES = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("prompt_id", pa.string(), nullable=False),
        pa.field("sample_idx", pa.int32(), nullable=False),
        pa.field("completion", pa.string()),
        pa.field("finish_reason", pa.string()),
        pa.field("n_tokens", pa.int32()),
        pa.field("extracted_answer", pa.string()),
        pa.field("grade_status", pa.string()),
        pa.field("grade_reason", pa.string()),
        pa.field("correct", pa.bool_()),
        pa.field("grader", pa.string()),
    ]
)

# The plan of a run: which sample indices of which prompts each shard holds, stored once when the
# run starts (partition run_id=). A shard file counts as finished only when the digest in its
# footer is its plan's digest, so a shard is known by its content, not by its number.
PLANS = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("shard", pa.int32(), nullable=False),
        pa.field("prompt_id", pa.string(), nullable=False),
        pa.field("first_idx", pa.int32(), nullable=False),  # sample indices first_idx ..
        pa.field("count", pa.int32(), nullable=False),  # .. first_idx + count - 1
        pa.field("digest", pa.string(), nullable=False),  # of the whole shard (same on its rows)
        pa.field("round", pa.int32()),  # adaptive runs: the round the shard belongs to (null otherwise)
    ]
)

# Per shard, its (prompt, extracted answer) counts: written with each shard (Store.write_shard,
# given analyze.answer_counts of the samples already in memory), so the analysis reads 1 row per
# distinct answer instead of 1 per sample. A shard's counts file carries the shard file's write id
# in its footer: counts of an older copy of the shard are never used.
ANSWER_COUNTS = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("shard", pa.int32(), nullable=False),
        pa.field("prompt_id", pa.string(), nullable=False),
        pa.field("extracted_answer", pa.string()),  # null: samples without an extracted answer
        pa.field("cnt", pa.int64(), nullable=False),  # samples with this answer
        pa.field("cc", pa.int64(), nullable=False),  # of which graded correct
    ]
)

SCHEMAS: dict[str, pa.Schema] = {
    "problems": PROBLEMS,
    "runs": RUNS,
    "samples": SAMPLES,
    "plans": PLANS,
    "answer_counts": ANSWER_COUNTS,
}

# Analysis tables (prompt_stats, weights, summary, allocation) are defined below.

# Repeated strings of the long weights table are dictionary-encoded (a few MB instead of ~1 GB
# for Big-Math x 11 estimators x 5 group sizes); DuckDB reads them as VARCHAR.
_DICT_STR = pa.dictionary(pa.int32(), pa.string())

PROMPT_STATS = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("prompt_id", pa.string(), nullable=False),
        pa.field("n", pa.int32(), nullable=False),
        pa.field("c", pa.int32(), nullable=False),
        pa.field("pass_rate", pa.float64()),  # c / n; null when n = 0
        pa.field("interval_level", pa.float64()),
        pa.field("wilson_lo", pa.float64()),
        pa.field("wilson_hi", pa.float64()),
        pa.field("jeffreys_lo", pa.float64()),
        pa.field("jeffreys_hi", pa.float64()),
        pa.field("pass_at_k", pa.list_(pa.float64())),  # unbiased pass@k for k = 1..n
        # Per group size G (aligned lists): unbiased hypergeometric rate for n >= G, Beta
        # posterior mean for n < G; the plug-in (biased upward) only under its own name.
        pa.field("group_sizes", pa.list_(pa.int32())),
        pa.field("zero_signal", pa.list_(pa.float64())),
        pa.field("silent_all_correct", pa.list_(pa.float64())),
        pa.field("silent_all_wrong", pa.list_(pa.float64())),
        pa.field("zero_signal_plugin", pa.list_(pa.float64())),
        # Answer concentration (null when the counts carry no extracted answers).
        pa.field("n_answered", pa.int32()),
        pa.field("n_distinct_answers", pa.int32()),
        pa.field("n_distinct_correct", pa.int32()),
        pa.field("modal_share", pa.float64()),
        pa.field("answer_entropy", pa.float64()),  # nats
        pa.field("modal_correct_share_grpo", pa.float64()),
        pa.field("modal_correct_share_reco", pa.float64()),
        # Adaptive runs only (null otherwise; docs/adaptive.md §8). The posterior is
        # Beta(prior_a + c, prior_b + n - c) with the run's prior (runs.prior_a, runs.prior_b).
        pa.field("stop_round", pa.int32()),  # the round of the prompt's last samples
        pa.field("decided_band", pa.string()),  # silent_hard, informative, silent_easy (band target)
        pa.field("band_prob", pa.float64()),  # posterior probability of decided_band
        pa.field("post_mean", pa.float64()),  # posterior mean of p
        pa.field("post_lo", pa.float64()),  # central 1 - delta credible interval of p
        pa.field("post_hi", pa.float64()),
        pa.field("undecided", pa.bool_()),  # stopped at n_max without a decision
    ]
)

WEIGHTS = pa.schema(
    [
        pa.field("run_id", _DICT_STR, nullable=False),
        pa.field("prompt_id", _DICT_STR, nullable=False),
        pa.field("estimator", _DICT_STR, nullable=False),  # canonical spec, e.g. softmax_grpo:tau=1.0
        pa.field("G", pa.int32(), nullable=False),
        pa.field("p", pa.float64()),  # point estimate c / n (null when n = 0)
        pa.field("weight", pa.float64()),  # w(p, G) at p
        pa.field("mass", pa.float64()),  # w(p, G) p q
        # Monte Carlo standard error of weight (reco_answers rows too wide for the exact method);
        # null where exact. The mass's is weight_se * mass / weight.
        pa.field("weight_se", pa.float64()),
        pa.field("zero_signal", pa.float64()),  # unbiased (n >= G) or posterior (n < G)
    ]
)

# Long format: one row per (section, metric, estimator?, G?, band?, k?).
SUMMARY = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("section", pa.string(), nullable=False),  # dataset, zero_signal, dapo, gradient_share, pass_at_k
        pa.field("metric", pa.string(), nullable=False),
        pa.field("estimator", pa.string()),
        pa.field("G", pa.int32()),
        pa.field("band", pa.string()),
        pa.field("k", pa.int32()),
        pa.field("value", pa.float64()),
        pa.field("n_prompts", pa.int64()),
    ]
)

ALLOCATION = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("objective", pa.string(), nullable=False),  # signal, knapsack, variance
        pa.field("estimator", pa.string()),  # for the signal objective
        pa.field("method", pa.string()),  # fast, greedy, dp (exact) or lagrangian (see gap)
        pa.field("posterior", pa.bool_()),
        pa.field("budget", pa.int64()),
        pa.field("prompt_id", pa.string(), nullable=False),
        pa.field("p", pa.float64()),  # point estimate or posterior mean used
        pa.field("n_rollouts", pa.int32(), nullable=False),
        pa.field("expected_value", pa.float64()),  # objective term at n_rollouts
        pa.field("uniform_n", pa.int32()),
        pa.field("uniform_value", pa.float64()),  # objective term under the uniform allocation
        # certified distance of the allocation's total from the optimum (0: exact; lagrangian: the
        # dual bound minus the total); the same on every row of one allocation, null before it existed
        pa.field("gap", pa.float64()),
    ]
)

SCHEMAS.update({"prompt_stats": PROMPT_STATS, "weights": WEIGHTS, "summary": SUMMARY, "allocation": ALLOCATION})

# Checkpoint history (flows/checkpoints.py): one row per checkpoint and prompt, appended once per
# checkpoint (partition checkpoint_id=); the drift views in sql/ compare consecutive checkpoints.
HISTORY = pa.schema(
    [
        pa.field("checkpoint_id", pa.string(), nullable=False),  # hash of path, size, mtime
        pa.field("checkpoint", pa.string(), nullable=False),  # display name (file stem, folder)
        pa.field("checkpoint_path", pa.string()),
        pa.field("step", pa.int64()),  # last integer of the name; orders checkpoints
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("dataset", pa.string()),
        pa.field("model", pa.string()),
        pa.field("prompt_id", pa.string(), nullable=False),
        pa.field("n", pa.int32(), nullable=False),
        pa.field("c", pa.int32(), nullable=False),
        pa.field("pass_rate", pa.float64()),
        pa.field("silent", pa.bool_()),  # all n samples agree (c = 0 or c = n)
        pa.field("group_sizes", pa.list_(pa.int32())),
        pa.field("zero_signal", pa.list_(pa.float64())),  # aligned with group_sizes
        pa.field("silent_all_correct", pa.list_(pa.float64())),
        pa.field("silent_all_wrong", pa.list_(pa.float64())),
        pa.field("profiled_at", pa.timestamp("us", tz="UTC")),
    ]
)

SCHEMAS["history"] = HISTORY

# Observations (pipeline/observe/): per (source, step, prompt) the outcomes some model drew for a
# prompt, from any source a user already has: a profile run (step 0), a trainer's rollouts (verl
# dumps, the TRL recorder, a generic table), or pass rates shipped with a dataset (labels). One
# file per (source, step): partition source=<source>, part ``step-<step>``, so importing a step
# again replaces it and a rerun adds nothing twice.
ObservationKind = Literal["profile", "training", "label"]
OBSERVATION_KINDS: tuple[str, ...] = get_args(ObservationKind)
OBSERVATIONS = pa.schema(
    [
        pa.field("source", pa.string(), nullable=False),  # e.g. verl:grpo-run-3, trl:run-1, profile:<run id>
        pa.field("kind", pa.string(), nullable=False),  # OBSERVATION_KINDS
        pa.field("step", pa.int64(), nullable=False),  # training step (0 for a profile or a label)
        pa.field("dataset", pa.string(), nullable=False),
        pa.field("prompt_id", pa.string(), nullable=False),
        pa.field("model", pa.string()),  # the model or training run that drew the outcomes
        pa.field("n", pa.int32(), nullable=False),  # outcomes observed
        pa.field("c", pa.int32(), nullable=False),  # of them correct
        pa.field("observed_at", pa.timestamp("us", tz="UTC")),  # when the source drew them (else imported)
    ]
)
# Rows of a source that matched no prompt of the dataset: kept, with why, never dropped silently.
UNMATCHED = pa.schema(
    [
        pa.field("source", pa.string(), nullable=False),
        pa.field("step", pa.int64(), nullable=False),
        pa.field("row", pa.int64(), nullable=False),  # row (or line) number in the source file, from 0
        pa.field("reason", pa.string(), nullable=False),
        pa.field("text", pa.string()),  # the row's prompt, problem or id as read (cut to 500 characters)
    ]
)

SCHEMAS.update({"observations": OBSERVATIONS, "unmatched": UNMATCHED})
