"""Table-level analysis: counts -> prompt_stats, weights and summary (pyarrow tables).

Input is a counts table: ``prompt_id``, ``n`` (samples), ``c`` (correct) and optionally the
answers, either raw (``answers``: list of extracted answers, ``answers_correct``: list of bools)
or as histograms (``answer_values``, ``answer_counts``, ``answer_correct_counts``), which is what
``finish.counts_from_samples`` returns. Every per-prompt quantity depends only on ``(n, c)``, so it is
computed once per unique pair (65 of them for 64 samples per prompt) and broadcast by index;
that keeps the analysis of Big-Math near the cost of reading its counts.

Definitions (``docs/estimators.md``): weights and update masses are at the point estimate
``p = c/n``; zero-signal rates are unbiased (hypergeometric) for ``n >= G`` and the Beta posterior
mean for ``n < G``; plug-in values appear only in columns and metrics named ``*_plugin``.

An adaptive run (``docs/adaptive.md`` §7) stops each prompt when its samples decided it, so
its ``n`` depends on the data: ``c/n``, the hypergeometric zero-signal rate and the unbiased
pass@k are biased there, while posterior expectations stay valid. ``AnalyzeConfig(posterior=True)``
with the run's prior gives them: ``E[p^G + q^G]`` from the Beta moments (§3), ``E[w(p, G)]`` and
``E[w p q]`` by quadrature over the posterior (exact for the leave-one-out weights of §1), pass@k
as ``1 - E[q^k]``, and the posterior mean as ``p`` (summary, bands, the ``weights`` table's ``p``).
The ``pass_rate`` column stays the observed share ``c/n``; ``post_mean`` holds the posterior mean.
The adaptive decision columns of ``prompt_stats`` (``stop_round``, ``decided_band``, ...) come in
with the counts table (``with_decisions``) and are copied through. ``posterior_inputs`` is the one
place an adaptive run's counts and settings are made so, for the run's finish and for
``finish.analyze_run`` alike: a run's analysis is the same whoever computes it.

Nothing here reads or writes the store: a run's counts are read, and its analysis written, by
``pipeline.finish`` (the analysis is the pure step; the finish loads and saves around it).
"""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline import adaptive, identify, schema, stats, tokens
from pipeline import estimators as est
from pipeline.checks import check_int
from pipeline.errors import ConfigError
from pipeline.labelprior import LabelPriors
from pipeline.prior import Prior, cell_share, estimation_prior, posterior_nodes, state_prior
from pipeline.prior import grid_points as prior_grid_points

log = logging.getLogger(__name__)

__all__ = [
    "ADAPTIVE_COLUMNS",
    "DEFAULT_BANDS",
    "Analysis",
    "AnalyzeConfig",
    "Band",
    "analyze",
    "answer_counts",
    "counts_from_histogram",
    "counts_from_priors",
    "posterior_config",
    "posterior_inputs",
    "prompt_stats",
    "run_prior",
    "summary",
    "validate_counts",
    "weights",
    "with_decisions",
    "with_tokens",
]


@dataclass(frozen=True)
class Band:
    """A difficulty band: a union of intervals of p, each ``(lo, hi, lo_closed, hi_closed)``."""

    name: str
    intervals: tuple[tuple[float, float, bool, bool], ...]

    def share(self, points: np.ndarray) -> np.ndarray:
        """The share of each grid point's cell inside the band (``prior.cell_share``): a grid prior's
        band sums."""
        return sum((cell_share(points, *iv) for iv in self.intervals), np.zeros(len(points)))

    def contains(self, p: np.ndarray) -> np.ndarray:
        p = np.asarray(p, float)
        out = np.zeros(p.shape, bool)
        for lo, hi, lo_closed, hi_closed in self.intervals:
            left = p >= lo if lo_closed else p > lo
            right = p <= hi if hi_closed else p < hi
            out |= left & right
        return out


# The gradient share's bands: five that cover [0, 1] without overlap, so their shares sum to 1. Named
# in the one vocabulary (``schema.BANDS``): the informative band split where GRPO's weight peaks.
_LO, _HI = schema.BAND_EDGES
_MID_LO, _MID_HI = schema.MID_EDGES
DEFAULT_BANDS: tuple[Band, ...] = (
    Band("hard", ((0.0, _LO, True, False),)),
    Band("informative_hard", ((_LO, _MID_LO, True, False),)),
    Band("informative_mid", ((_MID_LO, _MID_HI, True, True),)),
    Band("informative_easy", ((_MID_HI, _HI, False, True),)),
    Band("easy", ((_HI, 1.0, False, True),)),
)


@dataclass(frozen=True)
class AnalyzeConfig:
    """Settings of the analysis stage.

    Attributes:
        group_sizes: the G values to evaluate (each >= 1).
        estimators: estimator specs (``name[:param=value,...]``).
        level: interval coverage in (0, 1).
        prior_a: Beta prior ``a`` for zero-signal rates when n < G (every estimate with ``posterior``).
        prior_b: Beta prior ``b``.
        bands: difficulty bands of the gradient-share summary.
        pass_at_k: compute per-prompt pass@k lists and the mean curve.
        posterior: every per-prompt estimate is its expectation under the posterior
            ``Beta(prior_a + c, prior_b + n - c)`` (an adaptive run; see the module docstring),
            or under ``prior`` when that is a grid prior; band shares are posterior expectations.
        prior: the run's prior when it is a grid prior (``pipeline/prior.py``): with ``posterior``
            every expectation is a sum over its grid. A Beta prior is given by ``prior_a, prior_b``.
        reco_answers: group sizes (each among ``group_sizes``) at which to add the answer-aware
            ReCo weight to ``weights``, as estimator ``RECO_ANSWERS`` (docs/estimators.md §6): from
            each prompt's answer histogram, at the observed answer shares, exact. Off by default:
            it depends on the whole histogram, not on (n, c), so it is computed per distinct
            histogram, which costs far more than the per-pair weights.
    """

    group_sizes: tuple[int, ...] = (4, 8, 16, 32, 64)
    estimators: tuple[str, ...] = est.DEFAULT_ESTIMATORS
    level: float = 0.95
    prior_a: float = 0.5
    prior_b: float = 0.5
    bands: tuple[Band, ...] = DEFAULT_BANDS
    pass_at_k: bool = True
    posterior: bool = False
    prior: Prior | None = None
    reco_answers: tuple[int, ...] = ()
    _stats: stats.StatsConfig = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "group_sizes", tuple(self.group_sizes))
        object.__setattr__(self, "estimators", tuple(self.estimators))
        if not self.group_sizes:
            raise ConfigError("group_sizes is empty; give at least one G >= 1")
        for G in self.group_sizes:
            check_int("group size G", G, 1)
        for spec in self.estimators:
            est.get(spec)  # unknown names raise, listing the registry
        object.__setattr__(self, "reco_answers", tuple(int(G) for G in self.reco_answers))
        outside = sorted(set(self.reco_answers) - set(self.group_sizes))
        if outside:
            raise ConfigError(f"reco_answers G={outside} must be among the group sizes {list(self.group_sizes)}")
        names = [b.name for b in self.bands]
        if len(set(names)) != len(names):
            raise ConfigError(f"band names {names} must be distinct")
        object.__setattr__(self, "_stats", stats.StatsConfig(self.level, self.prior_a, self.prior_b))


@dataclass(frozen=True)
class Analysis:
    """The three analysis tables of one run."""

    prompt_stats: pa.Table
    weights: pa.Table
    summary: pa.Table


# --- input --------------------------------------------------------------------------------------


def _as_numbers(table: pa.Table, name: str, ids: pa.Array) -> np.ndarray:
    if name not in table.column_names:
        raise ConfigError(f"counts table needs a {name!r} column; has {table.column_names}")
    col = table.column(name).combine_chunks()
    if col.null_count:
        i = int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])
        raise ConfigError(f"prompt {ids[i].as_py()!r}: {name} is missing")
    values = col.to_numpy(zero_copy_only=False)
    if not pa.types.is_integer(col.type):
        values = values.astype(float)
    if values.dtype.kind == "f":
        bad = ~np.isfinite(values) | (values != np.round(values))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ConfigError(f"prompt {ids[i].as_py()!r}: {name}={values[i]!r} is not a whole number")
    return values.astype(np.int64)


def validate_counts(counts: pa.Table, check_distinct: bool = True) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """Check a counts table and return ``(prompt_id, n, c)`` (``check_distinct=False`` leaves the
    duplicate check, a hash of every id, to the caller: ``analyze`` runs it on its second thread).

    Raises:
        ValueError: naming the prompt, for a missing, NaN or non-integer count, ``n < 0``,
            ``c < 0``, ``c > n``, or a duplicated prompt_id.
    """
    if "prompt_id" not in counts.column_names:
        raise ConfigError(f"counts table needs a 'prompt_id' column; has {counts.column_names}")
    ids = counts.column("prompt_id").combine_chunks()
    if ids.null_count:
        raise ConfigError("counts table has a null prompt_id")
    ids = ids.cast(pa.string())
    n = _as_numbers(counts, "n", ids)
    c = _as_numbers(counts, "c", ids)
    for mask, what in ((n < 0, "n < 0"), (c < 0, "c < 0"), (c > n, "c > n")):
        if mask.any():
            i = int(np.flatnonzero(mask)[0])
            raise ConfigError(f"prompt {ids[i].as_py()!r}: {what} (n={n[i]}, c={c[i]})")
    if check_distinct:
        _check_distinct(ids)
    return ids, n, c


def _check_distinct(ids: pa.Array) -> None:
    """Raise naming a prompt_id that appears twice. Ids in strictly ascending order (counts
    without answers) are distinct: one pass of comparisons instead of a hash of every id."""
    if not _strictly_ascending(ids) and len(pc.unique(ids)) != len(ids):
        counts_ = pc.value_counts(ids)
        dup = counts_.filter(pc.greater(counts_.field("counts"), 1))[0]["values"].as_py()
        raise ConfigError(f"prompt {dup!r} appears more than once in the counts table")


def _strictly_ascending(values: pa.Array) -> bool:
    if len(values) < 2:
        return True
    return bool(pc.all(pc.less(values.slice(0, len(values) - 1), values.slice(1))).as_py())


def counts_from_histogram(flat: pa.Table) -> pa.Table:
    """Per-prompt counts and answer-histogram lists from (prompt, answer) rows in any order.

    One hash of the rows' prompt ids (dictionary codes), then integers only: a stable argsort by
    (code, order within the prompt) groups each prompt's rows (cheap: the query returns them in
    runs of ascending codes, which the sort merges), n and c are bincounts over the codes, and the
    lists are the sorted columns cut at the prompt boundaries. No second pass over the samples
    (``sql/answer_histogram.sql``) and no comparison sort of strings.

    Prompts come in the order the query first returned them (not sorted: sorting the ids and
    moving every row to its prompt's place would cost a third of the floor query at Big-Math
    scale, and ``allocate_prompts`` puts prompts in prompt_id order itself). A prompt's lists list
    its correct answers first, then the wrong ones, each by count descending (answers with the
    same correct count and count in no particular order; nothing computed from the lists depends
    on it), so ``answer_counts / n`` is the answer-probability vector of the ReCo weights with the
    correct answer(s) in front (``docs/estimators.md`` §6).
    """
    encoded = pc.dictionary_encode(flat.column("prompt_id").combine_chunks())
    codes = encoded.indices.to_numpy().astype(np.int64)
    P = len(encoded.dictionary)
    cnt = np.asarray(flat.column("cnt").to_numpy(), np.int64)
    cc = np.asarray(flat.column("cc").to_numpy(), np.int64)
    n = np.bincount(codes, weights=cnt, minlength=P).astype(np.int64)
    c = np.bincount(codes, weights=cc, minlength=P).astype(np.int64)
    answer = flat.column("a").combine_chunks()
    if answer.null_count:  # null answers count in n, not in the lists
        keep = np.flatnonzero(answer.is_valid().to_numpy(zero_copy_only=False))
        answer, codes, cnt, cc = answer.take(pa.array(keep)), codes[keep], cnt[keep], cc[keep]
    # One key per row: the prompt, then correct count and count, both descending.
    c_max, n_max = (int(cc.max()), int(cnt.max())) if len(cnt) else (0, 0)
    if P * (c_max + 1) * (n_max + 1) < 2**63:
        key = codes * ((c_max + 1) * (n_max + 1)) + (c_max - cc) * (n_max + 1) + (n_max - cnt)
        order = np.argsort(key, kind="stable")
    else:  # the packed key would overflow
        order = np.lexsort((n_max - cnt, c_max - cc, codes))
    offsets = _offsets(np.bincount(codes, minlength=P))
    return pa.table(
        {
            "prompt_id": encoded.dictionary,
            "n": n,
            "c": c,
            "answer_values": _list_column(answer.take(pa.array(order)), offsets, pa.list_(pa.string())),
            "answer_counts": _list_column(cnt[order], offsets, pa.list_(pa.int64())),
            "answer_correct_counts": _list_column(cc[order], offsets, pa.list_(pa.int64())),
        }
    )


def _shard_column(samples: pa.Table, name: str, type_: pa.DataType) -> pa.Array | pa.ChunkedArray:
    """A column of a shard's samples as its table declares it; a missing one is all null."""
    if name not in samples.column_names:
        return pa.nulls(samples.num_rows, type_)
    return samples.column(name).cast(type_)


def with_tokens(counts: pa.Table, per_prompt: pa.Table) -> pa.Table:
    """``counts`` with the ``TRUNCATION_COLUMNS`` and ``TOKEN_COLUMNS`` of ``per_prompt``
    (``finish.token_counts``) by prompt: 0 answers for a prompt it does not list."""
    ids = counts.column("prompt_id").combine_chunks().cast(pa.string())
    where = pc.index_in(ids, value_set=per_prompt.column("prompt_id").combine_chunks().cast(pa.string()))
    for name in TRUNCATION_COLUMNS + TOKEN_COLUMNS:  # a total over no known length is 0
        values = pc.fill_null(pc.take(per_prompt.column(name).cast(pa.int64()), where), 0)
        counts = counts.append_column(name, values)
    return counts


def answer_counts(run_id: str, shard: int, samples: pa.Table) -> pa.Table:
    """A shard's ``answer_counts`` rows (``Store.write_shard(..., answer_counts=...)`` writes them
    beside the shard): per (prompt, extracted answer, null included) its samples and how many were
    graded correct (a null grade counts as not correct, as in the SQL). A shard without extracted
    answers counts them as null. ``samples`` is the shard as the store conforms it; the caller writes it."""
    ok = pc.cast(pc.fill_null(_shard_column(samples, "correct", pa.bool_()), False), pa.int64())
    answers = _shard_column(samples, "extracted_answer", pa.string())
    keyed = pa.table({"prompt_id": _shard_column(samples, "prompt_id", pa.string()), "extracted_answer": answers})
    grouped = keyed.append_column("ok", ok).group_by(["prompt_id", "extracted_answer"], use_threads=False)
    table = grouped.aggregate([([], "count_all"), ("ok", "sum")])
    rows = table.num_rows
    return pa.table(
        {
            "run_id": pa.array([run_id] * rows, pa.string()),
            "shard": pa.array(np.full(rows, shard, np.int32)),
            "prompt_id": table.column("prompt_id"),
            "extracted_answer": table.column("extracted_answer"),
            "cnt": table.column("count_all"),
            "cc": pc.fill_null(table.column("ok_sum"), 0),
        }
    )


def counts_from_priors(problems: pa.Table) -> pa.Table:
    """Counts from a problems table's prior measurements (``prior_n``, ``prior_c``).

    A problem without a prior measurement gets ``n = c = 0`` (kept, not dropped): its pass rate
    is undefined and its zero-signal rates come from the Beta prior alone.
    """
    for name in ("prompt_id", "prior_n", "prior_c"):
        if name not in problems.column_names:
            raise ConfigError(f"problems table needs a {name!r} column")
    n = pc.fill_null(problems.column("prior_n").cast(pa.int64()), 0)
    c = pc.fill_null(problems.column("prior_c").cast(pa.int64()), 0)
    missing = problems.column("prior_n").null_count
    if missing:
        log.warning("%d problems have no prior counts; they get n = c = 0", missing)
    return pa.table({"prompt_id": problems.column("prompt_id"), "n": n, "c": c})


def _answer_histogram(counts: pa.Table):
    """``(parent, counts, correct_counts)`` sorted by prompt, or None when there are no answers."""
    names = counts.column_names
    if "answer_values" in names and "answer_counts" in names:
        vals = counts.column("answer_counts").combine_chunks()
        parent = pc.list_parent_indices(vals).to_numpy()
        cnt = pc.list_flatten(vals).to_numpy(zero_copy_only=False).astype(float)
        cc = None
        if "answer_correct_counts" in names:
            cc = pc.list_flatten(counts.column("answer_correct_counts").combine_chunks())
            cc = cc.to_numpy(zero_copy_only=False).astype(float)
        return parent, cnt, cc
    if "answers" not in names:
        return None
    raw = counts.column("answers").combine_chunks()
    flat = pc.list_flatten(raw)
    parent = pc.list_parent_indices(raw)
    cols = {"parent": parent, "a": flat}
    has_correct = "answers_correct" in names
    if has_correct:
        corr = counts.column("answers_correct").combine_chunks()
        if not pc.all(pc.equal(pc.list_value_length(corr), pc.list_value_length(raw))).as_py():
            raise ConfigError("answers and answers_correct lists differ in length")
        cols["ok"] = pc.cast(pc.fill_null(pc.list_flatten(corr), False), pa.int64())
    else:
        cols["ok"] = pa.array(np.zeros(len(flat), np.int64))
    t = pa.table(cols).filter(pc.is_valid(pa.table(cols).column("a")))
    g = t.group_by(["parent", "a"]).aggregate([("ok", "count"), ("ok", "sum")])
    g = g.sort_by([("parent", "ascending")])
    return (
        g.column("parent").to_numpy(),
        g.column("ok_count").to_numpy().astype(float),
        g.column("ok_sum").to_numpy().astype(float) if has_correct else None,
    )


# A counts table's answers cut by the token limit, per prompt, and of them the ones not graded
# correct (``with_tokens``): ``prompt_stats``' ``truncated_share`` and ``truncated`` come from them.
TRUNCATION_COLUMNS = ("n_truncated", "n_truncated_wrong")
# A counts table's answer lengths in tokens, per prompt (``with_tokens``, ``sql/prompt_tokens.sql``):
# the answers whose length is known, their total and total of squares, and count and total of the
# right ones and of the cut ones (cut by the token limit and not right); the wrong and finished ones
# are the rest. ``prompt_stats``' ``tokens_*`` columns and the summary's ``tokens`` section come from them.
TOKEN_COLUMNS = (
    "tokens_counted",
    "tokens_spent",
    "tokens_sumsq",
    "right_counted",
    "right_spent",
    "cut_counted",
    "cut_spent",
)
OUTCOMES = ("right", "wrong", "cut")


def _token_arrays(counts: pa.Table, ids: pa.Array) -> dict[str, np.ndarray] | None:
    """The ``TOKEN_COLUMNS`` of ``counts`` as integer arrays with the wrong and finished answers'
    (``wrong_counted``, ``wrong_spent``: what is neither right nor cut) and the sample sd
    (``tokens_sd``, ddof 1, NaN below 2 answers), or None when it has none (counts without
    samples: an observation-only run).

    Raises:
        ConfigError: naming the prompt, for a negative length or an outcome's answers that add up
            to more than the prompt's.
    """
    if TOKEN_COLUMNS[0] not in counts.column_names:
        return None
    out = {name: _as_numbers(counts, name, ids) for name in TOKEN_COLUMNS}
    out["wrong_counted"] = out["tokens_counted"] - out["right_counted"] - out["cut_counted"]
    out["wrong_spent"] = out["tokens_spent"] - out["right_spent"] - out["cut_spent"]
    for name, values in out.items():
        if (values < 0).any():
            i = int(np.flatnonzero(values < 0)[0])
            raise ConfigError(f"prompt {ids[i].as_py()!r}: {name}={values[i]} is negative (lengths in tokens are >= 0)")
    k = out["tokens_counted"].astype(float)
    s = out["tokens_spent"].astype(float)
    # the sum of squared deviations, from exact integer totals: one rounding, not a cancellation of two
    with np.errstate(invalid="ignore", divide="ignore"):
        squares = np.maximum(out["tokens_sumsq"] - s * (s / np.maximum(k, 1)), 0.0)
        out["tokens_sd"] = np.where(k > 1, np.sqrt(squares / np.maximum(k - 1, 1)), np.nan)
    return out


def _per_answer(spent: np.ndarray, counted: np.ndarray) -> np.ndarray:
    """Mean tokens per answer, NaN where no answer's length is known."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counted > 0, spent / np.maximum(counted, 1), np.nan)


def truncated_flag(n: np.ndarray, c: np.ndarray, cut_wrong: np.ndarray) -> np.ndarray:
    """A prompt's ``truncated`` flag: more than half of its wrong answers (``n - c``) were cut by the
    token limit. Such a prompt's wrong answers measure the token budget, not the problem: one cut off
    mid-solution is neither right nor a failure to solve, and cut answers are not a random subset
    (wrong answers run longer), so its pass rate is a lower bound, not a difficulty."""
    wrong = np.asarray(n, np.int64) - np.asarray(c, np.int64)
    return (wrong > 0) & (2 * np.asarray(cut_wrong, np.int64) > wrong)


# Columns of ``prompt_stats`` an adaptive run's counts table carries (copied through as they are).
ADAPTIVE_COLUMNS = ("stop_round", "decided_band", "band_prob", "post_lo", "post_hi", "undecided")


# --- per-pair computations ----------------------------------------------------------------------


class _Pairs:
    """Everything that depends on a prompt only through (n, c), on the unique pairs."""

    def __init__(self, n: np.ndarray, c: np.ndarray, config: AnalyzeConfig) -> None:
        self.config = config
        self.n_u, self.c_u, self.inv = stats.unique_pairs(n, c)
        self.mult = np.bincount(self.inv, minlength=len(self.n_u))
        self.observed = stats.pass_rate(self.n_u, self.c_u)  # c / n
        a, b = config.prior_a, config.prior_b
        posterior = config.posterior
        # the p of the summary, the bands and the weights table: c / n, or the posterior mean
        self.p_u = np.where(self.n_u > 0, (a + self.c_u) / (a + b + self.n_u), np.nan) if posterior else self.observed
        Gs = config.group_sizes
        self.plus = np.empty((len(self.n_u), len(Gs)))
        self.minus = np.empty_like(self.plus)
        self.plugin = np.empty_like(self.plus)
        for j, G in enumerate(Gs):
            self.plus[:, j], self.minus[:, j] = stats.silent_rates(self.n_u, self.c_u, G, a, b, posterior=posterior)
            self.plugin[:, j] = stats.zero_signal_plugin(self.n_u, self.c_u, G)
        self.zero = self.plus + self.minus
        self.estimators = [est.get(s) for s in config.estimators]
        self.labels = [e.spec for e in self.estimators]
        if len(set(self.labels)) != len(self.labels):
            raise ConfigError(f"estimator list has duplicates: {self.labels}")
        known = self.n_u > 0
        # weight[e, u, j] and mass (at the point estimate, or their posterior means); NaN where n = 0
        self.weight = np.full((len(self.estimators), len(self.n_u), len(Gs)), np.nan)
        self.grid = posterior and config.prior is not None and config.prior.is_grid
        if self.grid:
            nodes, W = posterior_nodes(config.prior, self.n_u, self.c_u)
            self.p_u = np.where(known, W @ nodes, np.nan)
            for j, G in enumerate(Gs):
                self.plus[:, j], self.minus[:, j] = W @ nodes**G, W @ (1 - nodes) ** G
            self.zero = self.plus + self.minus
        if posterior:
            self.mass = np.full_like(self.weight, np.nan)
            if not self.grid:
                nodes, W = posterior_nodes(Prior(a, b), self.n_u, self.c_u, degree=max(Gs) + 1)
            pq = nodes * (1 - nodes)
            for i, e in enumerate(self.estimators):
                for j, G in enumerate(Gs):
                    w = e.weight(nodes, G)
                    self.weight[i, :, j] = np.where(known, W @ w, np.nan)
                    self.mass[i, :, j] = np.where(known, W @ (w * pq), np.nan)
        else:
            pk = np.where(known, self.p_u, 0.5)
            for i, e in enumerate(self.estimators):
                for j, G in enumerate(Gs):
                    self.weight[i, :, j] = np.where(known, e.weight(pk, G), np.nan)
            self.mass = self.weight * (self.p_u * (1 - self.p_u))[None, :, None]
        self._curves = None

    @property
    def curves(self) -> list[np.ndarray]:
        if self._curves is None:
            cfg = self.config
            if self.grid:  # 1 - E[q^k] as grid sums, k = 1..n of each pair
                nodes, W = posterior_nodes(cfg.prior, self.n_u, self.c_u)
                k = np.arange(1, int(self.n_u.max(initial=0)) + 1)
                all_k = 1.0 - W @ (1.0 - nodes)[:, None] ** k[None, :]
                self._curves = [all_k[u, :n] for u, n in enumerate(self.n_u.tolist())]
            elif cfg.posterior:
                self._curves = stats.posterior_pass_at_k_curves(self.n_u, self.c_u, cfg.prior_a, cfg.prior_b)
            else:
                self._curves = stats.pass_at_k_curves(self.n_u, self.c_u)
        return self._curves

    def band_masses(self) -> tuple[np.ndarray, np.ndarray]:
        """Posterior run (docs/adaptive.md §7): per pair, the expected update mass inside each band
        ``E[1{p in band} w(p, G) p q]`` (estimator, pair, G, band) and each band's probability
        (pair, band), by sums over the posterior's nodes: the grid prior's, or for a Beta prior a
        Gauss-Jacobi rule cut at the band edges (so the indicator is integrated exactly)."""
        cfg = self.config
        if self.grid:
            prior = cfg.prior
        else:
            prior = Prior(cfg.prior_a, cfg.prior_b)
        edges = sorted({x for band in cfg.bands for iv in band.intervals for x in iv[:2]})
        nodes, W = posterior_nodes(prior, self.n_u, self.c_u, edges=edges, degree=max(cfg.group_sizes) + 1)
        # (nodes, bands): a Beta's nodes never straddle an edge (the rule is cut there); grid points' cells may
        inside = np.stack([band.share(nodes) if self.grid else band.contains(nodes) for band in cfg.bands], axis=1)
        inside = inside.astype(float)
        pq = nodes * (1 - nodes)
        out = np.empty((len(self.estimators), len(self.n_u), len(cfg.group_sizes), len(cfg.bands)))
        for i, e in enumerate(self.estimators):
            for j, G in enumerate(cfg.group_sizes):
                out[i, :, j, :] = W @ (inside * (e.weight(nodes, G) * pq)[:, None])
        return out, W @ inside


def _offsets(lengths: np.ndarray) -> pa.Array:
    """List offsets (int32, or int64 past 2**31 values) of consecutive lists of these lengths."""
    lengths = np.asarray(lengths)
    total = int(lengths.sum())
    offsets = np.zeros(len(lengths) + 1, dtype=np.int32 if total < 2**31 else np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return pa.array(offsets)


def _list_column(values, offsets: pa.Array, type_: pa.DataType, nan_to_null: bool = True) -> pa.Array:
    """A list column from flat values and offsets (``_offsets``); NaN becomes null unless the
    caller knows there is none (``nan_to_null=False`` skips a pass over the values)."""
    cls = pa.ListArray if offsets.type == pa.int32() else pa.LargeListArray
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        flat = values.cast(type_.value_type)
        if isinstance(flat, pa.ChunkedArray):
            flat = flat.combine_chunks()
    else:
        nan = nan_to_null and values.dtype.kind == "f" and bool(np.isnan(values).any())
        flat = pa.array(values, type=type_.value_type, from_pandas=nan)  # NaN -> null
    arr = cls.from_arrays(offsets, flat)
    return arr.cast(type_) if arr.type != type_ else arr


def _per_g_lists(matrix_u: np.ndarray, inv: np.ndarray, offsets: pa.Array) -> pa.Array:
    """One list per prompt of a per-pair (U, len(G)) matrix; NaN checked on the pairs, not the rows."""
    nan = bool(np.isnan(matrix_u).any())
    return _list_column(matrix_u[inv].ravel(), offsets, pa.list_(pa.float64()), nan_to_null=nan)


def _float_col(x: np.ndarray) -> pa.Array:
    x = np.asarray(x, float)
    nan = np.isnan(x)
    return pa.array(x, mask=nan) if nan.any() else pa.array(x)


def _int_col(x: np.ndarray, known: bool) -> pa.Array:
    if not known:
        return pa.nulls(len(x), pa.int32())
    x = np.asarray(x, dtype=float)
    missing = np.isnan(x)  # e.g. no correct answer among a prompt's samples
    return pa.array(np.where(missing, 0, x).astype(np.int32), type=pa.int32(), mask=missing)


def _pass_at_k_values(pairs: _Pairs, n: np.ndarray) -> np.ndarray:
    """Flat pass@k values of every prompt in order (k = 1..n each), gathered from the pairs."""
    inv = pairs.inv
    out = np.empty(int(n.sum()))
    ends = np.cumsum(n)
    for size in np.unique(pairs.n_u):
        if size == 0:
            continue
        rows_u = np.flatnonzero(pairs.n_u == size)
        curves = np.stack([pairs.curves[u] for u in rows_u])  # (pairs with this n, size)
        local = np.full(len(pairs.n_u), -1)
        local[rows_u] = np.arange(len(rows_u))
        prompts = np.flatnonzero(n == size)
        block = curves[local[inv[prompts]]]  # (prompts with this n, size)
        if len(prompts) == len(n):
            return block.ravel()  # every prompt has the same n: the gather is the answer
        else:
            pos = (ends[prompts] - size)[:, None] + np.arange(size)
            out[pos.ravel()] = block.ravel()
    return out


def _pass_at_k_column(pairs: _Pairs, n: np.ndarray) -> pa.Array:
    """The ``pass_at_k`` lists (k = 1..n of each prompt; nulls when ``pass_at_k`` is off)."""
    if not pairs.config.pass_at_k:
        return pa.nulls(len(n), pa.list_(pa.float64()))
    values = _pass_at_k_values(pairs, n)
    nan = any(np.isnan(curve).any() for curve in pairs.curves)  # on the pairs, not the 16M values
    return _list_column(values, _offsets(n), pa.list_(pa.float64()), nan_to_null=nan)


def _prompt_stats(
    ids, n, c, pairs: _Pairs, counts: pa.Table, run_id: str, pass_at_k: Future[pa.Array] | None = None
) -> pa.Table:
    """``PROMPT_STATS``; ``pass_at_k``, when given, is the pass@k column being built elsewhere
    (``analyze``), waited for last."""
    cfg = pairs.config
    inv = pairs.inv
    N = len(ids)
    wl, wh = stats.wilson_interval(pairs.n_u, pairs.c_u, cfg.level)
    jl, jh = stats.jeffreys_interval(pairs.n_u, pairs.c_u, cfg.level)
    cols: dict[str, pa.Array] = {
        "run_id": pa.repeat(pa.scalar(run_id, pa.string()), N),
        "prompt_id": ids,
        "n": pa.array(n.astype(np.int32)),
        "c": pa.array(c.astype(np.int32)),
        "pass_rate": _float_col(pairs.observed[inv]),
        "interval_level": pa.array(np.full(N, cfg.level)),
        "wilson_lo": pa.array(wl[inv]),
        "wilson_hi": pa.array(wh[inv]),
        "jeffreys_lo": pa.array(jl[inv]),
        "jeffreys_hi": pa.array(jh[inv]),
    }
    Gs = np.asarray(cfg.group_sizes, np.int32)
    per_g = _offsets(np.full(N, len(Gs)))  # shared by the five per-G list columns
    cols["group_sizes"] = _list_column(np.tile(Gs, N), per_g, pa.list_(pa.int32()))
    cols["zero_signal"] = _per_g_lists(pairs.zero, inv, per_g)
    cols["silent_all_correct"] = _per_g_lists(pairs.plus, inv, per_g)
    cols["silent_all_wrong"] = _per_g_lists(pairs.minus, inv, per_g)
    cols["zero_signal_plugin"] = _per_g_lists(pairs.plugin, inv, per_g)
    hist = _answer_histogram(counts)
    if hist is not None:
        parent, cnt, cc = hist
        a = stats.answer_stats_from_histogram(N, parent, cnt, cc)
        cols["n_answered"] = _int_col(a["n_answered"], True)
        cols["n_distinct_answers"] = _int_col(a["n_distinct_answers"], True)
        cols["n_distinct_correct"] = _int_col(a["n_distinct_correct"], cc is not None)
        for name in ("modal_share", "answer_entropy", "modal_correct_share_grpo", "modal_correct_share_reco"):
            cols[name] = _float_col(a[name])
    if cfg.posterior:
        cols["post_mean"] = _float_col(pairs.p_u[inv])
    if TRUNCATION_COLUMNS[0] in counts.column_names:
        cut, cut_wrong = (_as_numbers(counts, name, ids) for name in TRUNCATION_COLUMNS)
        with np.errstate(invalid="ignore", divide="ignore"):
            cols["truncated_share"] = _float_col(np.where(n > 0, cut / np.maximum(n, 1), np.nan))
        cols["truncated"] = pa.array(truncated_flag(n, c, cut_wrong))
    lengths = _token_arrays(counts, ids)
    if lengths is not None:
        cols.update(_token_stats(lengths))
    for name in ADAPTIVE_COLUMNS:  # an adaptive run's decisions, computed by the run
        if name in counts.column_names:
            cols[name] = counts.column(name).combine_chunks().cast(schema.PROMPT_STATS.field(name).type)
    cols["pass_at_k"] = _pass_at_k_column(pairs, n) if pass_at_k is None else pass_at_k.result()
    for name in schema.PROMPT_STATS.names:
        if name not in cols:
            cols[name] = pa.nulls(N, schema.PROMPT_STATS.field(name).type)
    return pa.Table.from_arrays([cols[name] for name in schema.PROMPT_STATS.names], schema=schema.PROMPT_STATS)


def _token_stats(lengths: dict[str, np.ndarray]) -> dict[str, pa.Array]:
    """``prompt_stats``' ``tokens_*`` columns from ``_token_arrays``: a mean is null where no answer
    (of that outcome) has a known length, and so is the total; ``tokens_expected`` is each prompt's
    expected answer length under the population of the run's prompts (``tokens.expected_tokens``)."""
    k = lengths["tokens_counted"]
    mean = _per_answer(lengths["tokens_spent"], k)
    known = k > 0
    expected = tokens.expected_tokens(k, np.where(known, mean, 0.0), lengths["tokens_sd"])
    cols = {
        "tokens_counted": pa.array(k.astype(np.int32)),
        "tokens_spent": pa.array(lengths["tokens_spent"], pa.int64(), mask=~known),
        "tokens_per_answer": _float_col(mean),
        "tokens_sd": _float_col(lengths["tokens_sd"]),
        "tokens_expected": _float_col(expected),
    }
    for outcome in OUTCOMES:
        cols[f"tokens_{outcome}"] = _float_col(_per_answer(lengths[f"{outcome}_spent"], lengths[f"{outcome}_counted"]))
    return cols


def _weights(ids, pairs: _Pairs, run_id: str) -> pa.Table:
    cfg = pairs.config
    N, E, nG = len(ids), len(pairs.estimators), len(cfg.group_sizes)
    K = E * nG
    # Row order: prompt, then estimator, then G. Each column is one gather of a per-pair
    # (U, K) matrix by the prompt -> pair index: a row copy per prompt, no per-row work. Where
    # a value is missing (NaN, e.g. n = 0) is known on the pairs, so the 13.75M-row columns of
    # Big-Math are never scanned for NaN; the index columns are built in range (no validation).
    U = len(pairs.n_u)
    inv = pairs.inv

    def per_pair(x: np.ndarray) -> np.ndarray:  # (E, U, nG) -> (U, E * nG)
        return np.ascontiguousarray(x.transpose(1, 0, 2)).reshape(U, K)

    def column(matrix_u: np.ndarray) -> pa.Array:  # (U, K) -> N * K rows
        nan = np.isnan(matrix_u)
        values = matrix_u[inv].ravel()
        return pa.array(values, mask=nan[inv].ravel()) if nan.any() else pa.array(values)

    def dictionary(indices: np.ndarray, values: pa.Array) -> pa.Array:
        return pa.DictionaryArray.from_arrays(indices, values.cast(pa.string()), safe=False)

    pattern = np.arange(K, dtype=np.int32)
    cols = [
        dictionary(np.zeros(N * K, np.int32), pa.array([run_id])),
        dictionary(np.repeat(np.arange(N, dtype=np.int32), K), ids),
        dictionary(np.tile(pattern // nG, N), pa.array(pairs.labels)),
        pa.array(np.tile(np.tile(np.asarray(cfg.group_sizes, np.int32), E), N)),
        column(np.repeat(pairs.p_u[:, None], K, axis=1)),
        column(per_pair(pairs.weight)),
        column(per_pair(pairs.mass)),
        _nulls(N * K),  # weight_se: these weights are closed forms
        pa.array(np.tile(pairs.zero, (1, E))[inv].ravel()),
    ]
    return pa.Table.from_arrays(cols, schema=schema.WEIGHTS)


def _nulls(n: int, chunk: int = 1 << 16) -> pa.ChunkedArray:
    """``n`` null float64 values as one small chunk repeated: no memory at Big-Math scale (13.75M rows)."""
    block = pa.nulls(min(n, chunk), pa.float64())
    return pa.chunked_array([block] * (n // chunk) + [block.slice(0, n % chunk)], pa.float64())


RECO_ANSWERS = "reco_answers"  # the weights table's label of the answer-aware ReCo weight


def _reco_answer_rows(ids, n: np.ndarray, c: np.ndarray, pairs: _Pairs, counts: pa.Table, run_id: str) -> pa.Table:
    """``weights`` rows of the answer-aware ReCo weight (``est.reco_answer_weight_from_counts``,
    plug-in, ``method="auto"``) at each G of ``reco_answers``; computed once per distinct histogram.
    A prompt without samples gets nulls; samples with no extracted answer count as one shared wrong
    answer. ``weight_se`` is the Monte Carlo standard error where a histogram was too wide for the
    exact method, null where exact."""
    cfg = pairs.config
    N = len(ids)
    hist = _answer_histogram(counts)
    if hist is None or hist[2] is None:
        raise ConfigError(
            "reco_answers needs each prompt's answer histogram with correct counts (a run's samples: "
            "finish.counts_from_samples(store, run_id, answers=True))"
        )
    parent, cnt, cc = hist
    answered = np.bincount(parent, weights=cnt, minlength=N)
    matrix, n_correct = est.answer_matrix(N, parent, cnt, cc, n_unanswered=np.maximum(n - answered, 0))
    keyed = np.concatenate([n_correct[:, None].astype(float), matrix], axis=1)
    unique, inverse = np.unique(keyed, axis=0, return_inverse=True)
    inverse = inverse.ravel()
    p = pairs.p_u[pairs.inv]
    rows = []
    for G in cfg.reco_answers:
        got = est.reco_answer_weight_from_counts(unique[:, 1:], G, n_correct=unique[:, 0].astype(int))
        se = np.where(got.method == "mc", got.se_weight, np.nan)[inverse]
        g = cfg.group_sizes.index(G)
        rows.append(
            pa.table(
                {
                    "run_id": pa.array([run_id] * N),
                    "prompt_id": ids,
                    "estimator": pa.array([RECO_ANSWERS] * N),
                    "G": pa.array(np.full(N, G, np.int32)),
                    "p": pa.array(p, mask=np.isnan(p)),
                    "weight": pa.array(got.weight[inverse], mask=np.isnan(got.weight[inverse])),
                    "mass": pa.array(got.mass[inverse], mask=np.isnan(got.mass[inverse])),
                    "weight_se": pa.array(se, mask=np.isnan(se)),
                    "zero_signal": pa.array(pairs.zero[:, g][pairs.inv]),
                }
            )
        )
    return pa.concat_tables(rows).cast(schema.WEIGHTS)


def _extrapolation_bounds(pairs: _Pairs, m: np.ndarray) -> dict[int, dict]:
    """A posterior run's likelihood intervals (``identify.likelihood_bounds``) of D(G) and of each
    estimator's mean update mass, at every G some measured prompt has fewer samples than: there
    the summary's values rest on the fitted prior's shape, which the counts may not identify
    (docs/adaptive.md §7)."""
    Gs = [G for G in pairs.config.group_sizes if bool(((pairs.n_u < G) & (m > 0)).any())]
    if not Gs:
        return {}
    p = prior_grid_points()
    q = 1.0 - p
    columns = []
    for G in Gs:
        columns.append(p**G + q**G)
        columns += [e.weight(p, G) * p * q for e in pairs.estimators]
    lo, hi = identify.likelihood_bounds(pairs.n_u, pairs.c_u, np.stack(columns, axis=1), weights=m)
    per = 1 + len(pairs.estimators)
    out = {}
    for g, G in enumerate(Gs):
        k = g * per
        out[G] = {"zero": (lo[k], hi[k]), "mass": [(lo[k + 1 + i], hi[k + 1 + i]) for i in range(per - 1)]}
    return out


def _summary(pairs: _Pairs, run_id: str, lengths: dict[str, np.ndarray] | None = None) -> pa.Table:
    cfg = pairs.config
    rows: list[dict] = []

    def add(section, metric, value, n_prompts, estimator=None, G=None, band=None, k=None):
        value = float(value)
        rows.append(
            {
                "run_id": run_id,
                "section": section,
                "metric": metric,
                "estimator": estimator,
                "G": G,
                "band": band,
                "k": k,
                "value": None if np.isnan(value) else value,
                "n_prompts": int(n_prompts),
            }
        )

    known = pairs.n_u > 0
    m = pairs.mult * known  # prompts with no samples carry no measurement
    total = int(m.sum())

    def mean(x):
        return float((x * m).sum() / total) if total else np.nan

    p_safe = np.where(known, pairs.p_u, 0.0)
    pbar = mean(p_safe)
    extrapolated = _extrapolation_bounds(pairs, m) if cfg.posterior and total else {}
    add("dataset", "n_prompts", int(pairs.mult.sum()), pairs.mult.sum())
    add("dataset", "n_prompts_measured", total, total)
    add("dataset", "n_samples", (pairs.n_u * pairs.mult).sum(), total)
    add("dataset", "mean_pass_rate", pbar, total)
    add("dataset", "share_all_correct", mean(known & (pairs.c_u == pairs.n_u)), total)
    add("dataset", "share_all_wrong", mean(known & (pairs.c_u == 0)), total)
    for j, G in enumerate(cfg.group_sizes):
        obs = mean(pairs.zero[:, j])
        pred = mean(np.nan_to_num(pairs.plugin[:, j]))
        iid = pbar**G + (1 - pbar) ** G if total else np.nan
        add("zero_signal", "observed", obs, total, G=G)
        add("zero_signal", "observed_all_correct", mean(pairs.plus[:, j]), total, G=G)
        add("zero_signal", "observed_all_wrong", mean(pairs.minus[:, j]), total, G=G)
        add("zero_signal", "predicted_plugin", pred, total, G=G)
        add("zero_signal", "iid", iid, total, G=G)
        add("zero_signal", "jensen_gap", obs - iid, total, G=G)
        add("zero_signal", "jensen_gap_plugin", pred - iid, total, G=G)
        add("zero_signal", "share_posterior", mean(pairs.n_u < G), total, G=G)
        if G in extrapolated:
            lo, hi = extrapolated[G]["zero"]
            add("zero_signal", "observed_lo", lo, total, G=G)
            add("zero_signal", "observed_hi", hi, total, G=G)
        add("dapo", "oversampling_fill", est.DAPO.dataset_scale(obs) if total else np.nan, total, estimator="dapo", G=G)
        for e, label in zip(pairs.estimators, pairs.labels, strict=False):
            if isinstance(e, est.DAPO) and e.mode == "resample":
                z = pairs.zero[:, j]
                factor = sum(z**t for t in range(e.T))
                add("dapo", "rollouts_factor_resample", mean(factor), total, estimator=label, G=G)
    # A posterior run's band share is sum_i E[1{p_i in band} m(p_i)] / sum_i E[m(p_i)]: putting each
    # prompt in the band of its posterior mean would pile the shrunken ones into the middle bands.
    in_band, band_prob = pairs.band_masses() if cfg.posterior else (None, None)
    for i, label in enumerate(pairs.labels):
        for j, G in enumerate(cfg.group_sizes):
            mass = np.nan_to_num(pairs.mass[i, :, j]) * m
            tot = mass.sum()
            add(
                "gradient_share", "mean_mass", tot / total if total else np.nan, total, estimator=label, G=G, band="all"
            )
            if G in extrapolated:
                lo, hi = extrapolated[G]["mass"][i]
                add("gradient_share", "mean_mass_lo", lo, total, estimator=label, G=G, band="all")
                add("gradient_share", "mean_mass_hi", hi, total, estimator=label, G=G, band="all")
            for b, band in enumerate(cfg.bands):
                if in_band is not None:
                    part = float(in_band[i, :, j, b] @ m)
                    share = part / tot if tot > 0 else np.nan
                    count = int(round(float(band_prob[:, b] @ m)))
                else:
                    inside = band.contains(p_safe) & known
                    share = mass[inside].sum() / tot if tot > 0 else np.nan
                    count = int(m[inside].sum())
                add("gradient_share", "share", share, count, estimator=label, G=G, band=band.name)
    if cfg.pass_at_k and total:
        kmax = int(pairs.n_u.max())
        sums = np.zeros(kmax)
        cnts = np.zeros(kmax)
        for u, curve in enumerate(pairs.curves):
            if len(curve):
                sums[: len(curve)] += pairs.mult[u] * curve
                cnts[: len(curve)] += pairs.mult[u]
        for k in range(1, kmax + 1):
            add("pass_at_k", "mean_pass_at_k", sums[k - 1] / cnts[k - 1], cnts[k - 1], k=k)
    if lengths is not None:
        _tokens_summary(lengths, pairs.p_u[pairs.inv], add)
    return pa.Table.from_pylist(rows, schema=schema.SUMMARY)


def _tokens_summary(lengths: dict[str, np.ndarray], p: np.ndarray, add) -> None:
    """The summary's ``tokens`` section (docs/tokens.md): where the tokens go. Over the answers whose
    length is known: ``tokens_spent`` and ``tokens_counted`` (totals), ``tokens_per_answer`` overall
    and by outcome (``tokens_right``, ``tokens_wrong``, ``tokens_cut``) and ``wrong_to_right``; per
    band of the summary's pass rate (``schema.BAND_EDGES``) the tokens per answer and the band's
    ``spent_share``, and ``informative_to_easy``, the informative band's tokens per answer over the
    easy band's. Nothing when no answer's length is known, and no row for a mean over no answer (no
    wrong answer, an empty band): the summary holds numbers, never nulls."""
    summary_add = add

    def add(section, metric, value, *args, **kw):
        if np.isfinite(value):
            summary_add(section, metric, value, *args, **kw)

    k, spent = lengths["tokens_counted"], lengths["tokens_spent"]
    measured = k > 0
    if not measured.any():
        return
    prompts = int(measured.sum())
    total, answers = float(spent.sum()), float(k.sum())
    add("tokens", "tokens_spent", total, prompts)
    add("tokens", "tokens_counted", answers, prompts)
    add("tokens", "tokens_per_answer", total / answers, prompts)
    per = {}
    for outcome in OUTCOMES:
        counted = lengths[f"{outcome}_counted"]
        per[outcome] = _per_answer(np.asarray(lengths[f"{outcome}_spent"].sum()), np.asarray(counted.sum()))
        add("tokens", f"tokens_{outcome}", per[outcome], int((counted > 0).sum()))
    add("tokens", "wrong_to_right", per["wrong"] / per["right"] if per["right"] > 0 else np.nan, prompts)
    lo, hi = schema.BAND_EDGES
    known = measured & np.isfinite(p)
    in_band = {"hard": known & (p <= lo), "informative": known & (p > lo) & (p < hi), "easy": known & (p >= hi)}
    band_mean = {}
    for band, inside in in_band.items():
        band_mean[band] = _per_answer(np.asarray(spent[inside].sum()), np.asarray(k[inside].sum()))
        add("tokens", "tokens_per_answer", band_mean[band], int(inside.sum()), band=band)
        add(
            "tokens",
            "spent_share",
            float(spent[inside].sum()) / total if total > 0 else np.nan,
            int(inside.sum()),
            band=band,
        )
    ratio = band_mean["informative"] / band_mean["easy"] if band_mean["easy"] > 0 else np.nan
    add("tokens", "informative_to_easy", ratio, int((in_band["informative"] | in_band["easy"]).sum()))


# --- public table functions ---------------------------------------------------------------------


def prompt_stats(counts: pa.Table, run_id: str, config: AnalyzeConfig | None = None) -> pa.Table:
    """Per-prompt statistics (schema ``PROMPT_STATS``) of a counts table."""
    config = config or AnalyzeConfig()
    ids, n, c = validate_counts(counts)
    return _prompt_stats(ids, n, c, _Pairs(n, c, config), counts, run_id)


def weights(counts: pa.Table, run_id: str, config: AnalyzeConfig | None = None) -> pa.Table:
    """Prompt x estimator x G: implied weight, update mass, zero-signal rate (``WEIGHTS``)."""
    config = config or AnalyzeConfig()
    ids, n, c = validate_counts(counts)
    return _weights(ids, _Pairs(n, c, config), run_id)


def summary(counts: pa.Table, run_id: str, config: AnalyzeConfig | None = None) -> pa.Table:
    """Dataset-level summary (``SUMMARY``, long format).

    Sections: ``dataset``; ``zero_signal`` per G (``observed``: mean unbiased/posterior rate,
    ``predicted_plugin``: mean plug-in rate, ``iid``: ``pbar^G + (1-pbar)^G``, ``jensen_gap`` =
    observed - iid, ``jensen_gap_plugin``, all-correct / all-wrong split); ``dapo`` per G
    (``oversampling_fill`` = 1/(1 - D), and for resample variants the mean rollouts factor
    ``sum_{t<T} z^t``); ``gradient_share`` per estimator, G and band (share of total update mass,
    and ``mean_mass`` for band ``all``); ``pass_at_k`` (mean over prompts with n >= k); ``tokens``
    where the counts carry answer lengths (``with_tokens``; ``_tokens_summary``).
    """
    config = config or AnalyzeConfig()
    ids, n, c = validate_counts(counts)
    return _summary(_Pairs(n, c, config), run_id, _token_arrays(counts, ids))


def analyze(counts: pa.Table, run_id: str, config: AnalyzeConfig | None = None) -> Analysis:
    """All three tables at once, sharing the per-pair computations."""
    config = config or AnalyzeConfig()
    ids, n, c = validate_counts(counts, check_distinct=False)
    # The big columns are gathers from per-pair tables, bound by memory bandwidth (and by the
    # kernel zeroing fresh pages); NumPy and Arrow release the GIL there. So a second thread
    # checks the ids are distinct, then builds the pass@k lists (N x n values) and the weights
    # table (N x estimators x G rows: 13.75M at Big-Math scale), while this one computes the
    # pairs, the summary and the rest of prompt_stats (the answer statistics). The pairs are
    # only read there; the pass@k curves are computed before the second thread uses them.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="analyze") as pool:
        distinct = pool.submit(_check_distinct, ids)
        pairs = _Pairs(n, c, config)
        if config.pass_at_k:
            _ = pairs.curves
        pass_at_k = pool.submit(_pass_at_k_column, pairs, n)
        weights_table = pool.submit(_weights, ids, pairs, run_id)
        summary_table = _summary(pairs, run_id, _token_arrays(counts, ids))
        stats_table = _prompt_stats(ids, n, c, pairs, counts, run_id, pass_at_k=pass_at_k)
        distinct.result()  # a duplicated prompt_id raises here, naming it
        weights = weights_table.result()
        if config.reco_answers:
            weights = pa.concat_tables([weights, _reco_answer_rows(ids, n, c, pairs, counts, run_id)])
        return Analysis(prompt_stats=stats_table, weights=weights, summary=summary_table)


# --- adaptive runs: decisions and posterior estimates (docs/adaptive.md §7, §8) ---------------------


def with_decisions(
    counts: pa.Table, prior: Prior, target: adaptive.Target, plans: pa.Table, labels: LabelPriors | None = None
) -> pa.Table:
    """The counts with the adaptive columns of ``prompt_stats`` (``ADAPTIVE_COLUMNS``): the round
    each prompt stopped in (its last shard's round in ``plans``, the run's ``plans`` rows; null for
    a plan without rounds, a regrade's), its reported band and that band's posterior probability,
    its central ``1 - delta`` credible interval, and whether it stopped undecided under ``prior``
    (under its label bin's prior for a ``labels`` run: ``labels``, as its rounds decided)."""
    ids, n, c = validate_counts(counts, check_distinct=False)
    d = adaptive.decide(n, c, prior, target) if labels is None else _decide_by_bin(n, c, labels, target)
    rounds = plans.filter(pc.is_valid(plans.column("round")))
    last = rounds.group_by("prompt_id", use_threads=False).aggregate([("round", "max")])
    stop = dict(zip(last.column("prompt_id").to_pylist(), last.column("round_max").to_pylist(), strict=True))
    band = (
        pa.array([schema.BANDS[b] for b in d.band.tolist()], pa.string())
        if target.kind == "band"
        else pa.nulls(len(ids), pa.string())
    )
    extra = {
        "stop_round": pa.array([stop.get(pid) for pid in ids.to_pylist()], pa.int32()),
        "decided_band": band,
        "band_prob": pa.array(d.prob, pa.float64(), from_pandas=True),
        "post_lo": pa.array(d.lo, pa.float64()),
        "post_hi": pa.array(d.hi, pa.float64()),
        "undecided": pa.array(~d.decided, pa.bool_()),
    }
    for name, column in extra.items():
        counts = counts.append_column(name, column)
    return counts


def _decide_by_bin(n: np.ndarray, c: np.ndarray, labels: LabelPriors, target: adaptive.Target) -> adaptive.Decision:
    """``adaptive.decide`` with each prompt under its own label bin's prior."""
    parts = {k: np.zeros(len(n), t) for k, t in (("decided", bool), ("band", np.int64))}
    parts.update({k: np.full(len(n), np.nan) for k in ("prob", "lo", "hi")})
    for prior, idx in labels.groups():
        d = adaptive.decide(n[idx], c[idx], prior, target)
        for name, values in parts.items():
            values[idx] = getattr(d, name)
    return adaptive.Decision(**parts)


def posterior_config(settings: AnalyzeConfig, prior: Prior) -> AnalyzeConfig:
    """An adaptive run's analysis settings: every estimate a posterior expectation under its prior
    (a grid prior's sums, or the Beta's moments and quadrature)."""
    return replace(settings, prior_a=prior.a, prior_b=prior.b, posterior=True, prior=prior if prior.is_grid else None)


def posterior_inputs(
    counts: pa.Table,
    settings: AnalyzeConfig | None,
    acfg: adaptive.AdaptiveConfig,
    prior: Prior,
    plans: pa.Table,
    labels: LabelPriors | None = None,
) -> tuple[pa.Table, AnalyzeConfig]:
    """What ``analyze`` takes for an adaptive run: its counts with each prompt's decision
    (``with_decisions``, under ``prior``) and ``settings`` (default: ``AnalyzeConfig()``) made
    posterior ones, under ``prior.estimation_prior``: the same fit, its grid part run to the maximum."""
    n, c = (counts.column(name).to_numpy().astype(np.int64) for name in ("n", "c"))
    decided = with_decisions(counts, prior, acfg.target, plans, labels)
    return decided, estimation_config(settings or AnalyzeConfig(), prior, n, c)


def estimation_config(settings: AnalyzeConfig, prior: Prior, n, c) -> AnalyzeConfig:
    """``posterior_config`` under the prior an adaptive run's estimates are made with: ``prior``, fitted
    to ``(n, c)``, with its grid part run to the maximum (``prior.estimation_prior``)."""
    return posterior_config(settings, estimation_prior(prior, n, c))


def run_prior(acfg: adaptive.AdaptiveConfig, counts: pa.Table) -> Prior:
    """The prior an adaptive run decides with, from ``finish.adaptive_counts`` (``prior.state_prior``):
    a function of the samples alone, so each round, the finish and a later analysis fit the same."""
    n, c, n0, c0 = (counts.column(name).to_numpy().astype(np.int64) for name in ("n", "c", "n0", "c0"))
    return state_prior(acfg.prior, n, c, n0, c0)
