"""What a run means for training, in a few lines, each ending with the command that acts on it.

The end of ``difficulty profile``, ``analyze`` and ``current --save`` prints it, and the report shows
it first. Every number comes from the run's own tables (its analysis, default allocation and sample
counts); nothing is computed here that a section of the report computes another way:

- the silent share at the trainer's G (groups of G answers all wrong or all right: no GRPO signal),
  split into all wrong and all right, and labelled an estimate where some prompt has fewer than G
  answers (the Beta posterior's value there, not a count);
- what ``difficulty export --keep informative`` keeps (export's own bands at G, ``export.bands``: the
  informative prompts and the ones cut off by the token limit, which it does not drop as hard);
- the G that halves the silence (the same zero-signal rates, ``stats.silent_rates``, over larger G),
  over the prompts the token limit did not cut off: their silence is the budget's, not a rate;
- whether reallocating rollouts pays (the default allocation against the uniform one), saying so
  when it does not;
- what adaptive sampling saved against the fixed n expected to classify as well
  (``frontier.equivalent_fixed_n``; the report's rounds section shows the same numbers);
- warnings: answers cut at the token limit (when most silent prompts were cut off, that the token
  budget decides, and what doubling it costs), a model that never or always answers right, values at
  G > n that are estimates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline import adaptive, allocate, export, frontier, identify, schema, stats, suggest
from pipeline.checks import check_int
from pipeline.prior import Prior, choose_prior, grid_posterior

if TYPE_CHECKING:
    from pipeline.store import RunRecord

__all__ = [
    "REALLOCATION_PAYS",
    "TRUNCATION_WARNING",
    "Line",
    "Savings",
    "Silence",
    "Verdict",
    "adaptive_savings",
    "halving_group_size",
    "silent_curves",
    "informative_kept",
    "reallocation_gain",
    "run_savings",
    "silence_at",
    "verdict",
]

# A share of answers cut at the token limit above which the verdict warns: past it, "hard" may mean
# "did not finish" rather than "could not solve".
TRUNCATION_WARNING = 0.10
# The default allocation's signal over the uniform one's below which reallocating is not worth the
# bookkeeping (GRPO signal, the same budget).
REALLOCATION_PAYS = 1.05
# Prompts drawn from a run's fitted prior to simulate its settings against the frontier (about 2 s, once
# per run and process): the misclassification's Monte Carlo error is about 3% of itself, which moves the
# share of the frontier's saving by up to about 0.05 where the fixed-n curve is flat.
FRONTIER_PROMPTS = 4000
# An adaptive run's expected misclassification below which it and a fixed n both classify every
# prompt: no saving is claimed against the fixed n that would match it.
NOTHING_TO_CLASSIFY = 0.0005
# The backend whose pass rates are made up: its verdict says so first.
SIMULATED = "simulate"


@dataclass(frozen=True)
class Line:
    """One line of a verdict: what it says, the command to act on it (``pipeline.suggest``; None
    where there is none to run, as for a run with no model to profile again), and whether it is a
    warning."""

    text: str
    command: str | None
    kind: Literal["finding", "warning"] = "finding"

    def __str__(self) -> str:
        mark = "warning: " if self.kind == "warning" else ""
        return f"{mark}{self.text}" + (f" -> {self.command}" if self.command else "")


@dataclass(frozen=True)
class Silence:
    """The silent share of groups of G answers, split, and whether it is a posterior estimate."""

    G: int
    silent: float
    all_wrong: float
    all_right: float
    estimated: bool  # some prompt has fewer than G answers: its rate is the posterior's, not a count
    # where estimated, the range every population that fits the counts allows (``identify``, 90%)
    lo: float | None = None
    hi: float | None = None

    @property
    def allowed(self) -> str:
        """``; the counts allow 3.3% to 8.8%`` where the summary holds the range, else empty."""
        if self.lo is None or self.hi is None:
            return ""
        return f"; the counts allow {_pct(self.lo)} to {_pct(self.hi)} at {identify.LEVEL:.0%}"


@dataclass(frozen=True)
class Savings:
    """An adaptive run's rollouts against the fixed n expected to classify as well (``where``:
    ``inside``, ``below`` or ``above``, as ``frontier.log_n_crossing``)."""

    per_prompt: float
    fixed_n: float | None
    where: str
    misclassification: float
    decided: float
    n_top: int
    curve: list[tuple[int, float, float]]
    # Against the frontier (band target; None otherwise), every number an expectation under the
    # fitted prior: the run's settings simulated on pass rates drawn from it (``frontier.rule_under_prior``:
    # rollouts per prompt and misclassification), the fixed n with that misclassification, and the best
    # stopping rule's rollouts for it (``frontier.frontier``); at the settings' rollouts, the
    # frontier's and the fixed n's misclassification.
    rule_cost: float | None = None
    rule_mis: float | None = None
    rule_fixed_n: float | None = None
    frontier_cost: float | None = None
    frontier_mis: float | None = None
    fixed_mis: float | None = None
    # ``realised`` at the simulated misclassification's ends (plus or minus two standard errors of
    # its Monte Carlo mean over ``FRONTIER_PROMPTS`` prompts): the share's simulation error
    realised_range: tuple[float, float] | None = None
    # Tokens (None where the run stored no answer lengths): what the run's answers spent, and what the
    # fixed n above would spend at each prompt's expected answer length (``prompt_stats.tokens_expected``)
    tokens_spent: float | None = None
    tokens_per_rollout: float | None = None  # the prompts' expected lengths summed: a fixed n of 1

    @property
    def fixed_tokens(self) -> float | None:
        """The tokens of the fixed n the run is compared with (``n_top`` where none up to it matches)."""
        if self.tokens_per_rollout is None:
            return None
        n = self.fixed_n if self.where == "inside" else self.n_top if self.where == "above" else None
        return None if n is None else n * self.tokens_per_rollout

    @property
    def tokens_saved(self) -> float | None:
        """The share of tokens saved against that fixed n (a lower bound, as ``saved``, when ``above``)."""
        fixed = self.fixed_tokens
        if fixed is None or self.tokens_spent is None or fixed <= 0:
            return None
        return 1.0 - self.tokens_spent / fixed

    @property
    def saved(self) -> float | None:
        """The share of rollouts saved, or a lower bound where no fixed n up to ``n_top`` matches."""
        if self.where == "inside":
            return 1.0 - self.per_prompt / self.fixed_n
        if self.where == "above":
            return 1.0 - self.per_prompt / self.n_top
        return None

    @property
    def frontier_saved(self) -> float | None:
        """The share the best stopping rule saves against the fixed n of the settings' misclassification."""
        if self.rule_fixed_n is None or self.frontier_cost is None:
            return None
        return 1.0 - self.frontier_cost / self.rule_fixed_n

    @property
    def realised(self) -> float | None:
        """The share of the frontier's saving the run's settings realise on a dataset like this one
        (None where either saving is undefined or the frontier saves nothing)."""
        best = self.frontier_saved
        if best is None or best <= 0:
            return None
        return (1.0 - self.rule_cost / self.rule_fixed_n) / best


@dataclass(frozen=True)
class Verdict:
    """A run's verdict: its findings and warnings (each with its command) and the numbers behind them."""

    run_id: str
    G: int
    silence: Silence
    kept: int
    prompts: int
    lines: tuple[Line, ...]
    # An adaptive run's rollouts against the fixed n and the frontier: the simulation behind its line,
    # computed once and shown again by the report's rounds section (None for a fixed-n run).
    savings: Savings | None = None

    @property
    def warnings(self) -> tuple[Line, ...]:
        return tuple(line for line in self.lines if line.kind == "warning")

    def text(self) -> str:
        return "\n".join(str(line) for line in self.lines)

    def in_report(self) -> tuple[Line, ...]:
        """The lines as the report shows them: a command that writes the report the reader is
        reading (this run at this G) is left out."""
        here = {suggest.report(self.run_id, self.G), suggest.report(self.run_id)}
        return tuple(Line(line.text, None, line.kind) if line.command in here else line for line in self.lines)


# --- the parts ----------------------------------------------------------------------------------


def _metric(summary: pa.Table, section: str, metric: str, G: int) -> float | None:
    mask = pc.and_(
        pc.and_(pc.equal(summary.column("section"), section), pc.equal(summary.column("metric"), metric)),
        pc.equal(summary.column("G"), G),
    )
    values = summary.filter(pc.fill_null(mask, False)).column("value").to_pylist()
    return values[0] if values and values[0] is not None else None


def _counts(prompt_stats: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """Each measured prompt's ``(n, c)`` (prompts without samples carry no measurement)."""
    n = np.asarray(prompt_stats.column("n").to_numpy(zero_copy_only=False), float)
    c = np.asarray(prompt_stats.column("c").to_numpy(zero_copy_only=False), float)
    known = n > 0
    return n[known], c[known]


def silence_at(prompt_stats: pa.Table, summary: pa.Table, G: int, prior: tuple[float, float] = (0.5, 0.5)) -> Silence:
    """The silent share at G: the analysis's own values when it analysed G, else the same
    rates (``stats.silent_rates``) from the counts."""
    check_int("G", G, 1)
    silent = _metric(summary, "zero_signal", "observed", G)
    n, c = _counts(prompt_stats)
    if silent is not None:
        wrong = _metric(summary, "zero_signal", "observed_all_wrong", G) or 0.0
        right = _metric(summary, "zero_signal", "observed_all_correct", G) or 0.0
        estimated = (_metric(summary, "zero_signal", "share_posterior", G) or 0.0) > 0
        lo, hi = _metric(summary, "zero_signal", "observed_lo", G), _metric(summary, "zero_signal", "observed_hi", G)
        return Silence(G, silent, wrong, right, estimated, lo, hi)
    if not len(n):
        return Silence(G, math.nan, math.nan, math.nan, False)
    plus, minus = stats.silent_rates(n, c, G, *prior)
    return Silence(G, float((plus + minus).mean()), float(minus.mean()), float(plus.mean()), bool((n < G).any()))


def informative_kept(prompt_stats: pa.Table, G: int = 8) -> tuple[int, int, int]:
    """``(kept, measured, truncated)``: the prompts ``difficulty export --keep informative --G G``
    writes, by export's own bands at G (``export.bands``): the informative ones and the ``truncated``
    ones (wrong answers mostly cut by the token limit), which it does not drop as hard; the last
    count is those."""
    bands = export.bands(prompt_stats, export.ExportConfig(keep="informative", G=G))
    cut = bands.count(export.TRUNCATED)
    return bands.count("informative") + cut, sum(b != export.UNMEASURED for b in bands), cut


def _cut_off(prompt_stats: pa.Table) -> np.ndarray:
    """Each row's ``truncated`` flag (False where the run does not say)."""
    return np.asarray(prompt_stats.column("truncated").fill_null(False).to_numpy(zero_copy_only=False), bool)


def silent_under(prior: Prior | tuple[float, float], n, c, G: int, posterior: bool) -> np.ndarray:
    """Each ``(n, c)`` pair's chance that a group of G is silent: the unbiased count where ``n >= G``
    (not ``posterior``), else the expectation under the pair's posterior from ``prior``: a Beta's
    closed form (``stats.silent_rates``), or on a grid prior's points, whose atoms at 0 and 1 stay
    silent at every G (a prompt that never solves it is not made to look solvable)."""
    if not (isinstance(prior, Prior) and prior.is_grid):
        a, b = (prior.a, prior.b) if isinstance(prior, Prior) else prior
        plus, minus = stats.silent_rates(n, c, G, a, b, posterior=posterior)
        return plus + minus
    points, weights = prior.grid()
    W = grid_posterior(points, weights, n, c)
    under = np.nan_to_num(W @ (points**G + (1.0 - points) ** G), nan=1.0)
    if posterior:
        return under
    plus, minus = stats.silent_rates(n, c, G, posterior=False)
    return np.where(np.asarray(n) >= G, plus + minus, under)


def silent_curves(prior: Prior | tuple[float, float], n, c, G_max: int, posterior: bool) -> np.ndarray:
    """``silent_under`` of each ``(n, c)`` pair at every G = 1 .. ``G_max`` at once: ``(pairs, G_max)``.
    The products over j < G that ``stats.silent_rates`` takes one G at a time are running products
    here, multiplied in the same order (the same numbers), so the whole range costs what one G did."""
    n, c = np.asarray(n, float), np.asarray(c, float)
    j = np.arange(G_max, dtype=float)[None, :]
    exact = (n[:, None] >= j + 1) & (not posterior)
    if isinstance(prior, Prior) and prior.is_grid:
        points, weights = prior.grid()
        W = grid_posterior(points, weights, n, c)
        G = np.arange(1, G_max + 1, dtype=float)
        under = np.nan_to_num(W @ (points[:, None] ** G + (1.0 - points[:, None]) ** G), nan=1.0)
    else:
        a, b = (prior.a, prior.b) if isinstance(prior, Prior) else prior
        aa, bb = a + c[:, None], b + (n - c)[:, None]
        den = aa + bb + j
        under = np.cumprod((aa + j) / den, axis=1) + np.cumprod((bb + j) / den, axis=1)
    if posterior:
        return under
    with np.errstate(divide="ignore", invalid="ignore"):  # (n - j) is 0 or less only where not exact
        plus = np.cumprod(np.where(exact, np.clip((c[:, None] - j) / (n[:, None] - j), 0.0, None), 1.0), axis=1)
        minus = np.cumprod(np.where(exact, np.clip((n - c)[:, None] - j, 0.0, None) / (n[:, None] - j), 1.0), axis=1)
    return np.where(exact, plus + minus, under)


def _brief(prior: Prior) -> str:
    """A prior in a few words for a verdict line: a Beta's parameters, or a grid prior's atoms."""
    if not prior.is_grid:
        return f"Beta({prior.a:.3g}, {prior.b:.3g})"
    points, weights = prior.grid()
    share = weights / weights.sum()
    return f"{_pct(float(share[points == 0.0].sum()))} at p = 0, {_pct(float(share[points == 1.0].sum()))} at p = 1"


def halving_group_size(
    prompt_stats: pa.Table,
    G: int,
    silent: float,
    prior: Prior | tuple[float, float] = (0.5, 0.5),
    posterior: bool = False,
) -> int | None:
    """The smallest G' > G whose silent share (``silent_under`` the prior) is at most half of
    ``silent``, or None when none up to ``schema.MAX_G`` does (as where atoms at 0 and 1 hold
    more than half of it)."""
    n, c = _counts(prompt_stats)
    if not len(n) or not silent > 0:
        return None
    # distinct (n, c) pairs: a few dozen, however many prompts
    n_u, c_u, inverse = stats.unique_pairs(n, c)
    mult = np.bincount(inverse, minlength=len(n_u))

    # every G up to MAX_G at once (a few dozen pairs x 4,096): the first past G at or under half
    share = (silent_curves(prior, n_u, c_u, schema.MAX_G, posterior) * mult[:, None]).sum(axis=0) / mult.sum()
    below = np.flatnonzero(share[G:] <= silent / 2)  # share[k] is G = k + 1
    return int(G + 1 + below[0]) if len(below) else None


def reallocation_gain(allocation: pa.Table | None) -> float | None:
    """The first stored allocation's objective over the uniform allocation of its budget (the
    allocation section's ratio); None without one."""
    if allocation is None or allocation.num_rows == 0:
        return None
    first = allocation.slice(0, 1).to_pylist()[0]
    same = pc.and_(
        pc.equal(allocation.column("objective"), first["objective"]),
        pc.fill_null(pc.equal(allocation.column("budget"), first["budget"]), True),
    )
    part = allocation.filter(same)
    total = float(pc.sum(part.column("expected_value")).as_py() or 0.0)
    uniform = float(pc.sum(part.column("uniform_value")).as_py() or 0.0)
    if first["objective"] == "variance":  # minimised: better is smaller
        return uniform / total if total else None
    return total / uniform if uniform else None


def gain_at_G(run_id: str, prompt_stats: pa.Table, allocation: pa.Table | None, G: int) -> float | None:
    """The default allocation's signal over the uniform one's at a budget of G rollouts per measured
    prompt: the stored default allocation's where it has that budget (a run finished at this G), else
    the same policy computed now (``allocate.default_config``), as ``difficulty allocate --G G`` does."""
    measured = prompt_stats.filter(pc.greater(prompt_stats.column("n"), 0))
    if measured.num_rows == 0:
        return None
    config = allocate.default_config(measured.num_rows, max(G, 2))
    if allocation is not None and allocation.num_rows:
        same = pc.and_(
            pc.equal(allocation.column("objective"), config.objective),
            pc.equal(allocation.column("budget"), config.budget),
        )
        if "posterior" in allocation.column_names:  # a table made before the column was there: any prior
            same = pc.and_(same, pc.equal(allocation.column("posterior"), config.posterior))
        if "price_unit" in allocation.column_names:  # a budget in tokens is another allocation (null: rollouts)
            unit = pc.fill_null(allocation.column("price_unit"), "rollouts")
            same = pc.and_(same, pc.equal(unit, config.price_unit))
        stored = allocation.filter(pc.fill_null(same, False))
        if stored.num_rows == measured.num_rows:
            return reallocation_gain(stored)
    n = measured.column("n").to_numpy(zero_copy_only=False)
    c = measured.column("c").to_numpy(zero_copy_only=False)
    _, result = allocate.allocate_prompts(run_id, measured.column("prompt_id"), n, c, config)
    return float(result.improvement)


def adaptive_savings(
    n: np.ndarray, band_prob: np.ndarray | None, undecided: np.ndarray, acfg: adaptive.AdaptiveConfig, prior: Prior
) -> Savings:
    """The rollouts an adaptive run used per prompt against the fixed n that the same prior expects
    to give the same band misclassification (width target: the same share decided). A band target's
    comparison with the frontier simulates ``FRONTIER_PROMPTS`` prompts: the verdict computes it once
    per run and carries it (``Verdict.savings``), for the report's rounds section too."""
    target = acfg.target
    decided = float((~np.asarray(undecided, bool)).mean())
    mis = float((1.0 - np.asarray(band_prob, float)).mean()) if target.kind == "band" else math.nan
    curve = tuple(frontier.fixed_n_curve(prior, target, _n_top(acfg)))  # once: the frontier's side reads it too
    fixed_n, where, _ = frontier.equivalent_fixed_n(prior, target, mis, decided, _n_top(acfg), curve)
    per_prompt = float(np.mean(n))
    if target.kind != "band":
        return Savings(per_prompt, fixed_n, where, mis, decided, _n_top(acfg), curve)
    against = _against_frontier(acfg, prior, curve)
    return Savings(per_prompt, fixed_n, where, mis, decided, _n_top(acfg), curve, *against)


def _n_top(acfg: adaptive.AdaptiveConfig) -> int:
    """The largest fixed n a run is compared with: past n_max, a run may misclassify less than n_max would."""
    return max(256, 4 * acfg.n_max)


def _against_frontier(acfg: adaptive.AdaptiveConfig, prior: Prior, curve: tuple) -> tuple:
    """``Savings``' frontier fields, given the fixed-n ``curve`` of the same prior."""
    target = acfg.target
    rule_cost, rule_mis = frontier.rule_under_prior(prior, acfg, FRONTIER_PROMPTS)
    rule_fixed_n, where, _ = frontier.equivalent_fixed_n(prior, target, rule_mis, math.nan, _n_top(acfg), curve)
    cost, err = frontier.frontier(prior, target, acfg.n_min, acfg.n_max)
    frontier_cost, _ = frontier.frontier_cost_at(cost, err, rule_mis)
    # where an end falls outside the frontier's range (a misclassification no rule within n_max reaches),
    # the share at the simulated value stands for it
    ends = []
    se = math.sqrt(max(rule_mis * (1.0 - rule_mis), 0.0) / FRONTIER_PROMPTS)
    for mis in (max(rule_mis - 2 * se, 1e-12), rule_mis + 2 * se):
        fixed, at, _ = frontier.equivalent_fixed_n(prior, target, mis, math.nan, _n_top(acfg), curve)
        best, _ = frontier.frontier_cost_at(cost, err, mis)
        if at == "inside" and best is not None and fixed and 1.0 - best / fixed > 0:
            ends.append((1.0 - rule_cost / fixed) / (1.0 - best / fixed))
    if where == "inside" and frontier_cost is not None and rule_fixed_n and 1.0 - frontier_cost / rule_fixed_n > 0:
        ends.append((1.0 - rule_cost / rule_fixed_n) / (1.0 - frontier_cost / rule_fixed_n))
    return (
        rule_cost,
        rule_mis,
        rule_fixed_n if where == "inside" else None,
        frontier_cost,
        frontier.frontier_mis_at(cost, err, rule_cost),
        frontier.fixed_n_mis_at(curve, rule_cost),
        (min(ends), max(ends)) if ends else None,
    )


# --- the verdict --------------------------------------------------------------------------------


def _pct(x: float) -> str:
    if abs(x) < 0.0005:  # never "-0.0%"
        x = 0.0
    if 0 < x < 0.001:
        return "<0.1%"
    return f"{100 * x:.0f}%" if x >= 0.01 or x == 0 else f"{100 * x:.1f}%"


def _budget_decides(
    prompt_stats: pa.Table,
    sample_info: dict | None,
    max_tokens: int | None,
    raise_to: str | None,
    run: RunRecord | None,
) -> Line | None:
    """The warning that the token budget, not the problems, decides the silence: when most prompts
    whose answers all agree (all wrong, in practice) are ``truncated``. Doubling the limit lets each
    cut answer run up to ``max_tokens`` more, so it costs at most ``1 + cut x max_tokens / tokens
    sampled`` times the tokens."""
    n = np.asarray(prompt_stats.column("n").to_numpy(zero_copy_only=False), np.int64)
    c = np.asarray(prompt_stats.column("c").to_numpy(zero_copy_only=False), np.int64)
    silent = (n > 0) & ((c == 0) | (c == n))
    cut = silent & _cut_off(prompt_stats)
    if not silent.any() or 2 * int(cut.sum()) <= int(silent.sum()):
        return None
    info = sample_info or {}
    samples, truncated = int(info.get("samples") or 0), int(info.get("truncated") or 0)
    limit = f"the token limit ({max_tokens:,} tokens)" if max_tokens else "the token limit"
    share = f"; {_pct(truncated / samples)} of all answers were cut" if samples else ""
    cost = ""
    mean_tokens = info.get("mean_tokens")
    if max_tokens and samples and truncated and mean_tokens:
        ratio = 1.0 + truncated * int(max_tokens) / (float(mean_tokens) * samples)
        cost = f"; doubling it costs at most {ratio:.1f}x the tokens this run sampled"
    return Line(
        f"{int(cut.sum()):,} of {int(silent.sum()):,} silent prompts had most of their wrong answers cut by {limit}"
        f"{share}: the token budget, not the problems, decides their silence{cost}",
        raise_to,
        "warning",
    )


def _warnings(
    run_id: str,
    n: np.ndarray,
    c: np.ndarray,
    silence: Silence,
    sample_info: dict | None,
    run: RunRecord | None,
    prompt_stats: pa.Table | None = None,
) -> list[Line]:
    lines = []
    samples = int((sample_info or {}).get("samples") or 0)
    truncated = int((sample_info or {}).get("truncated") or 0)
    max_tokens = (run.params or {}).get("max_tokens") if run is not None else None
    raise_to = suggest.profile_again(run, max_tokens=2 * int(max_tokens)) if max_tokens else None
    decides = (
        _budget_decides(prompt_stats, sample_info, max_tokens, raise_to, run) if prompt_stats is not None else None
    )
    if decides is not None:
        lines.append(decides)
    elif samples and truncated / samples > TRUNCATION_WARNING:
        lines.append(
            Line(
                f"{truncated:,} of {samples:,} answers ({_pct(truncated / samples)}) hit the token limit "
                f"(finish = length): some 'hard' prompts were not finished, not failed",
                raise_to,
                "warning",
            )
        )
    if len(n) and int(c.sum()) == 0:
        lines.append(
            Line(
                f"the model never answered right ({int(n.sum()):,} answers to {len(n):,} prompts): every prompt is "
                "hard for it and a GRPO group learns nothing; check the grading and the template, or use a "
                "stronger model",
                suggest.sql(f"select grade_status, count(*) from samples where run_id = '{run_id}' group by all"),
                "warning",
            )
        )
    elif len(n) and bool((c == n).all()):
        lines.append(
            Line(
                f"the model answered every one of {int(n.sum()):,} answers right: every prompt is easy for it and a "
                "GRPO group learns nothing; use harder prompts",
                suggest.command("datasets"),
                "warning",
            )
        )
    if silence.estimated and len(n):
        few = int(n.min())
        lines.append(
            Line(
                f"values at G > n (this run has {few} answer{'s' if few != 1 else ''} for some prompts) are posterior "
                "estimates from a Beta prior, not counts; sample at least G answers per prompt to measure them",
                suggest.profile_again(run, n=silence.G),
                "warning",
            )
        )
    return lines


def verdict(
    run_id: str,
    prompt_stats: pa.Table,
    summary: pa.Table,
    *,
    G: int = schema.DEFAULT_G,
    allocation: pa.Table | None = None,
    sample_info: dict | None = None,
    run: RunRecord | None = None,
) -> Verdict:
    """The verdict of one run at the trainer's group size ``G`` from its analysis tables, default
    allocation, sample counts (``sql/sample_info.sql``: ``samples``, ``truncated``) and registry row."""
    check_int("G", G, 1)
    posterior = run is not None and run.adaptive is not None
    prior = (run.prior.a, run.prior.b) if posterior and run.prior is not None and not run.prior.is_grid else (0.5, 0.5)
    # what G > n extrapolates from: the run's own prior (an adaptive run's), else one fitted to the counts
    population = run.prior if posterior and run is not None and run.prior is not None else None
    silence = silence_at(prompt_stats, summary, G, prior)
    n, c = _counts(prompt_stats)
    kept, measured, cut_kept = informative_kept(prompt_stats, G)
    lines: list[Line] = []
    if run is not None and run.backend == SIMULATED:
        # first: every number below is made up, however real the grading, storage and analysis are
        lines.append(
            Line(
                "these pass rates are simulated (--backend simulate: a made-up rate per prompt, not a model's "
                "answers); the pipeline after sampling is real, but filter or allocate a training set only by a "
                "model's run (`difficulty models` lists the models at hand); current and its snapshot leave "
                "simulate runs out",
                suggest.command("models"),
                "warning",
            )
        )
    if silence.allowed:
        est = f" (extrapolated past some prompts' answers{silence.allowed})"
    else:
        est = " (estimated)" if silence.estimated else ""
    if measured == 0:
        lines.append(Line("no prompt of this run has an answer yet", suggest.command("runs")))
        return Verdict(run_id, G, silence, kept, measured, tuple(lines))
    lines.append(
        Line(
            f"at G = {G}, {_pct(silence.silent)} of groups are silent{est} (no signal): {_pct(silence.all_wrong)} "
            f"all wrong, {_pct(silence.all_right)} all right",
            suggest.report(run_id, G),
        )
    )
    export_g = None if G == export.ExportConfig.G else G
    mixed = f"with a right and a wrong answer whose groups of {G} are more likely than not to mix them"
    which = (
        f"{kept - cut_kept:,} {mixed}, and {cut_kept:,} whose wrong answers were mostly cut by the token limit "
        "(band truncated; --drop-truncated leaves them out)"
        if cut_kept
        else f"those {mixed}"
    )
    lines.append(
        Line(
            f"export --keep informative keeps {kept:,} of {measured:,} prompts ({_pct(kept / measured)}): {which}",
            suggest.export(run_id, keep="informative", G=export_g),
        )
    )
    # The halving is extrapolated from the rates of the prompts the token limit did not cut off: a
    # cut-off prompt's silence is the budget's, and a larger G would not break it.
    cut = _cut_off(prompt_stats)
    basis = prompt_stats.filter(pa.array(~cut)) if cut.any() else prompt_stats
    nb, cb = _counts(basis)
    # A model that never (or always) answers right has no rate to extrapolate: the posterior's
    # "halving" would be the prior speaking, so the warning below says what to do instead.
    one_sided = not len(nb) or int(cb.sum()) == 0 or bool((cb == nb).all())
    if silence.silent > 0 and not one_sided:
        if population is None:
            population = choose_prior(nb, cb)
        base = silence.silent
        if cut.any():
            base = float(silent_under(population, nb, cb, G, posterior).mean())
        half = halving_group_size(basis, G, base, population, posterior) if base > 0 else None
        aside = f" (of the {len(nb):,} prompts the token limit did not cut off)" if cut.any() else ""
        under = f"under {'the run' if posterior else 'a prior fitted to the counts'}: {_brief(population)}"
        if half is None:
            lines.append(
                Line(
                    f"no G halves the silence{aside}: the prompts that never (or always) answer right stay silent at "
                    f"any G ({under}); filter them",
                    suggest.export(run_id, keep="informative", G=export_g),
                )
            )
        else:
            beyond = half > nb.min()
            guess = f" (an estimate past the answers sampled, {under})" if beyond else ""
            lines.append(
                Line(
                    f"G = {half} halves the silence{aside}{guess}",
                    # a fixed-n run measures it with n = G'; an adaptive run's n is its own choice
                    suggest.profile_again(run, n=half) if guess and not posterior else suggest.report(run_id, half),
                )
            )
    gain = gain_at_G(run_id, prompt_stats, allocation, G)
    if gain is not None and not math.isnan(gain):
        # the ratio ``difficulty allocate --G G`` prints: the default policy at G rollouts per prompt
        at = f"x{gain:.4g} the uniform allocation's signal at {G} rollouts per prompt"
        if gain >= REALLOCATION_PAYS:
            text = f"reallocating rollouts across prompts pays: {at}"
        else:
            text = f"reallocating rollouts across prompts does not pay ({at}): keep the same G for every prompt"
        lines.append(Line(text, suggest.allocate(run_id, G=None if G == schema.DEFAULT_G else G)))
    savings = None
    if posterior and "undecided" in prompt_stats.column_names and run.prior is not None:
        if pc.any(pc.greater(prompt_stats.column("n"), 0)).as_py():
            undecided = _undecided_line(run_id, prompt_stats, run)
            lines.extend([undecided] if undecided else [])
            savings = run_savings(prompt_stats, run)
            lines.append(_adaptive_line(run_id, savings))
    lines.extend(_warnings(run_id, n, c, silence, sample_info, run, prompt_stats))
    return Verdict(run_id, G, silence, kept, measured, tuple(lines), savings)


def run_savings(prompt_stats: pa.Table, run: RunRecord) -> Savings:
    """``adaptive_savings`` of an adaptive run (registered with its settings and prior) over its
    measured prompts (at least one)."""
    s = prompt_stats.filter(pc.greater(prompt_stats.column("n"), 0))
    band_prob = (
        s.column("band_prob").cast(pa.float64()).to_numpy(zero_copy_only=False)
        if run.adaptive.target.kind == "band"
        else None
    )
    undecided = np.asarray(s.column("undecided").fill_null(False).to_numpy(zero_copy_only=False), bool)
    sv = adaptive_savings(s.column("n").to_numpy(zero_copy_only=False), band_prob, undecided, run.adaptive, run.prior)
    return replace(sv, **_run_tokens(s))


def _run_tokens(measured: pa.Table) -> dict[str, float]:
    """The tokens a run's measured prompts spent and their expected answer lengths summed, or nothing
    where any prompt's lengths are unknown (a run saved from observations)."""
    if "tokens_spent" not in measured.column_names:
        return {}
    spent, expected = measured.column("tokens_spent"), measured.column("tokens_expected")
    if spent.null_count or expected.null_count:
        return {}
    return {"tokens_spent": float(pc.sum(spent).as_py()), "tokens_per_rollout": float(pc.sum(expected).as_py())}


def _undecided_line(run_id: str, prompt_stats: pa.Table, run: RunRecord) -> Line | None:
    """How many prompts an adaptive run stopped undecided (at its largest n): their band is the
    posterior's best guess, not a decision."""
    measured = prompt_stats.filter(pc.greater(prompt_stats.column("n"), 0))
    undecided = int(pc.sum(measured.column("undecided").fill_null(False).cast(pa.int64())).as_py() or 0)
    if not undecided:
        return None
    return Line(
        f"{undecided:,} of {measured.num_rows:,} prompts ({_pct(undecided / measured.num_rows)}) stopped undecided at "
        f"n = {run.adaptive.n_max}: their band is the posterior's best guess, not a decision",
        suggest.sql(f"select prompt_id, n, c from prompt_stats where run_id = '{run_id}' and undecided order by n, c"),
    )


def _adaptive_line(run_id: str, sv: Savings) -> Line:
    if sv.misclassification < NOTHING_TO_CLASSIFY:
        # both sides classify every prompt: a "saving" against the n that matches nothing is noise
        return Line(
            f"adaptive sampling used {sv.per_prompt:.1f} answers per prompt and is expected to misclassify "
            f"{_pct(sv.misclassification)} of the prompts, as a fixed n would: with nothing left to misclassify "
            "there is no saving to compare",
            suggest.report(run_id),
        )
    if sv.where == "inside":
        text = (
            f"adaptive sampling used {sv.per_prompt:.1f} answers per prompt where a fixed n of {sv.fixed_n:.1f} is "
            f"expected to classify as well: {_pct(sv.saved)} of the rollouts saved"
        )
    elif sv.where == "above":
        text = (
            f"adaptive sampling used {sv.per_prompt:.1f} answers per prompt; no fixed n up to {sv.n_top} classifies "
            f"as well: more than {_pct(sv.saved)} of the rollouts saved"
        )
    else:
        text = (
            f"adaptive sampling used {sv.per_prompt:.1f} answers per prompt, but even a fixed n of {sv.fixed_n:.0f} "
            "classifies as well: it saved nothing here"
        )
    return Line(text + _tokens_text(sv) + _frontier_text(sv), suggest.report(run_id))


def _tokens_text(sv: Savings) -> str:
    """The same saving in tokens: the run's answers against the fixed n at each prompt's expected
    answer length. Smaller than in rollouts where the rounds spend on the long prompts (the
    informative ones run longer)."""
    if sv.tokens_saved is None:
        return ""
    bound = "more than " if sv.where == "above" else ""
    return (
        f", and {bound}{_pct(sv.tokens_saved)} of the tokens ({_count(sv.tokens_spent)} spent where the fixed n "
        f"would spend {_count(sv.fixed_tokens)} at each prompt's expected answer length)"
    )


def _count(x: float) -> str:
    """``1.2M``, ``34.5k``, ``812``: a token count at a glance."""
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:.1f}{unit}"
    return f"{x:.0f}"


def _frontier_text(sv: Savings) -> str:
    """How far the run's settings are from the best stopping rule for its own fitted prior (band
    target): both sides expectations under that prior, so the share is at most 1 up to Monte Carlo
    error (the run's own measured misclassification, on a finite dataset, is not)."""
    if sv.realised is not None:
        return (
            f"; on pass rates like this dataset's (its fitted prior) these settings are expected to spend "
            f"{sv.rule_cost:.1f} per prompt for {100 * sv.rule_mis:.1f}% misclassified, a fixed n "
            f"{sv.rule_fixed_n:.1f} and the best stopping rule {sv.frontier_cost:.1f}: they realise about "
            f"{_pct(sv.realised)} of the best rule's saving"
            + (
                f" ({_pct(sv.realised_range[0])} to {_pct(sv.realised_range[1])} over the simulation's error)"
                if sv.realised_range is not None and _pct(sv.realised_range[0]) != _pct(sv.realised_range[1])
                else ""
            )
        )
    if sv.frontier_mis is not None and sv.rule_mis is not None:
        return (
            f"; on pass rates like this dataset's these settings are expected to misclassify {100 * sv.rule_mis:.1f}% "
            f"at {sv.rule_cost:.1f} per prompt, the best stopping rule {100 * sv.frontier_mis:.1f}% and a fixed n "
            f"{100 * sv.fixed_mis:.1f}%"
        )
    return ""
