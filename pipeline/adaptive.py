"""Adaptive profiling: the posterior decisions, the stopping rule and the round rules.

The math is ``docs/adaptive.md`` (§1-§5). A prompt's pass rate has a posterior under the run's
prior, fitted to the counts of the whole dataset (``prior.state_prior``: a Beta, the
zero-one-inflated Beta, the grid prior, or Jeffreys' ``Beta(1/2, 1/2)``). A prompt is *decided* when

- ``band``: one of the bands ``p <= lo`` (hard), ``lo < p < hi`` (informative), ``p >= hi`` (easy)
  (``schema.BANDS``) has posterior probability ``>= 1 - delta``;
- ``width``: the central ``1 - delta`` credible interval is at most ``2 h`` wide.

When a prompt *stops* (``stop_grid``): for ``band`` with a price ``cost > 0`` per rollout (the
default), where the Bayes-optimal stopping rule stops, the one that minimises the expected
misclassification plus ``cost`` times the rollouts (backward induction over ``(n, c)`` up to
``n_max``): a prompt goes on while one more sample is expected to be worth its price, decided or
not, and one that no affordable amount of samples would settle stops undecided. With ``cost=0``,
and for ``width``, as soon as it is decided. Either way at ``n_max``, decided or not. Round 0
gives every prompt ``n_min`` samples; after each round every open prompt may get more, by one of
four rules, all deterministic functions of the counts (so a rerun re-derives the same rounds); the
default (``default_rule``) is ``plan`` for the priced band target and ``double`` otherwise:

- ``plan:cost=C,rounds=R,hedge=H``: each open prompt's next jump planned over the rounds left by
  backward induction under the run's prior, hedged over the priors the counts allow (``hedge`` nats
  along the inflated Beta's concentration, ``prior.plausible_priors``);
- ``double:k=K``: the greedy rule below with one jump per prompt and round, no
  budget, and only jumps that at least double a prompt's samples (or reach ``n_max``): a prompt
  gets samples in at most ``log2(n_max / n_min)`` rounds;
- ``step:k=K``: every open prompt gets ``K`` more (fewer at ``n_max``);
- ``greedy:k=K,budget=B``: a round spends at most ``ceil(B x open prompts)`` rollouts, in batches
  of ``K``, where they most raise the expected number of prompts stopped at the end of the round
  (the beta-binomial predictive of each prompt, greedily by gain per rollout on each prompt's
  upper concave hull, so a prompt that needs 12 more samples to have any chance gets 12 at once),
  at most ``jumps`` such jumps per prompt and round (default 0: spend the whole budget).

Everything here is a pure numpy/scipy function of counts; the rounds loop lives in ``run/rounds.py``,
and what the rules save against a fixed n and the frontier in ``frontier.py``.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from pipeline import prior as priors
from pipeline import stats, tokens
from pipeline.checks import check_choice, check_int, check_number
from pipeline.errors import ConfigError
from pipeline.prior import DEFAULT_PRIOR, PRIORS, Prior
from pipeline.schema import BAND_EDGES
from pipeline.specs import parse_spec, spec_name

__all__ = [
    "ROUND_RULES",
    "TARGETS",
    "AdaptiveConfig",
    "Decision",
    "Prior",
    "RoundRule",
    "Target",
    "band_probabilities",
    "credible_interval",
    "decide",
    "decided_grid",
    "band_posteriors",
    "next_round",
    "open_after",
    "posterior_mean",
    "price_levels",
    "priced_at",
    "token_price",
    "predictive_stopped",
    "round_stop_grid",
    "rounds_left",
    "stop_grid",
    "stopped",
]

TARGETS = ("band", "width")
# The band target's default price of one rollout, in misclassified prompts: a prompt gets another
# sample while that is expected to remove at least a thousandth of a misclassification
# (docs/adaptive.md §4 measures the frontier this sits on).
DEFAULT_COST = 0.001
# What the band target's price is paid in (``--price-unit``): ``rollouts``, every rollout at ``cost``;
# ``tokens``, prompt i's rollout at ``cost`` times its relative price (its expected answer length over
# the population's mean, ``tokens.relative_price``), so a long prompt stops sooner (docs/tokens.md).
PRICE_UNITS = ("rollouts", "tokens")
# Token prices are quantised to a geometric ladder of PRICE_LEVELS_PER_DOUBLING steps per doubling
# (``price_levels``): the stop and plan grids are computed once per level, not once per prompt.
# At 2^(1/8) a price is off by at most 4.4% (2^(1/16)); what that costs in loss is not yet measured (docs/tokens.md).
PRICE_LEVELS_PER_DOUBLING = 8
ROUND_RULES = ("plan", "double", "greedy", "step")
# The default round rule depends on the target (``default_rule``): ``plan`` for the priced band
# target, ``double`` for ``cost=0`` and ``width`` (the rule those runs were made with: their ids stay).
DEFAULT_ROUND_RULE = "auto"
# The plan rule's defaults: a run has PLAN_ROUNDS rounds, round 0 included (the priced band plans them;
# unpriced, a prompt's samples grow fast enough to reach n_max in them), and a round costs each prompt
# in it PLAN_ROUND_COST rollouts more. 0: the rounds are a budget, not a price. Every run took all 8
# rounds at a price of 2 as well, so the price saved no round; it only charged each prompt for riding in
# one, which a GPU round (its wait set by its slowest sample) does not: at 0 the loss the rule minimises
# fell on all eight truths of docs/adaptive.md §10, and the hard truth's share of the frontier's saving
# rose from 0.78 to 0.91.
PLAN_ROUND_COST = 0.0
PLAN_ROUNDS = 8
# The plan's hedge (docs/adaptive.md §5, "Hedged"): a prompt goes on when the plan under any prior the
# counts cannot reject along the inflated Beta's concentration sends it on (prior.plausible_priors: its
# profile log-likelihood within PLAN_HEDGE of the maximum, chi-square(1)'s 95% point over 2). Four
# samples a prompt place a + b only to within a factor of two or more, and on a truth whose stop
# boundary lies inside that range the fitted run stopped a fifth of the prompts in some seeds and sent
# them on in others: rollouts 15% apart across seeds. Hedged, 7%; 0 turns it off.
PLAN_HEDGE = 1.92
# ... and no jump takes a prompt past PLAN_MOST_GROWTH times its samples: a round's plan rests on the
# prior fitted so far, which 4 samples a prompt identify poorly (the Beta and the inflated Beta trade
# places from one draw of a dataset to the next); a prompt looked at again after tripling is planned
# under a better-fitted prior (costs moved 11% across seeds without the cap, 6% with it).
PLAN_MOST_GROWTH = 3.0
# Jumps whose expected losses differ by little share a cell's prompts, in proportion to
# exp(-(Q_j - min Q) / PLAN_JUMP_TEMPERATURE) (Q in rollouts; shares under PLAN_LEAST_SHARE dropped):
# a fitted prior's noise moves such differences by a tenth of a rollout or more from one draw of a
# dataset to the next, and an argmin would send a whole cell (90% of the prompts of a hard dataset
# at 0/4) one sample further or shorter with it (docs/adaptive.md §5). The price, per split decision
# of K jumps: at most (K - 1) PLAN_JUMP_TEMPERATURE / e rollouts over the best jump's loss.
PLAN_JUMP_TEMPERATURE = 0.1
PLAN_LEAST_SHARE = 0.01


@dataclass(frozen=True)
class Target:
    """What a profile must decide per prompt (spec: "The question a profile answers").

    Attributes:
        kind: ``band`` (which of the three bands) or ``width`` (a pass rate to +-h).
        lo, hi: the band edges, ``0 < lo < hi < 1`` (band only).
        delta: a band is decided at posterior probability ``>= 1 - delta``; the width target's
            interval is the central ``1 - delta`` one. In (0, 1).
        h: half the widest interval that counts as decided, in (0, 0.5] (width only).
        cost: the price of one rollout in misclassified prompts, in [0, 1) (band only): a prompt
            stops where more samples are not expected to be worth it (``stop_grid``); 0: as soon
            as it is decided.
        price_unit: ``rollouts`` (every rollout costs ``cost``) or ``tokens`` (a prompt's rollout
            costs ``cost`` times its relative price, ``next_round``'s ``price``); band with a price only.
    """

    kind: str = "band"
    lo: float = BAND_EDGES[0]
    hi: float = BAND_EDGES[1]
    delta: float = 0.05
    h: float = 0.1
    cost: float = DEFAULT_COST
    price_unit: str = PRICE_UNITS[0]

    def __post_init__(self) -> None:
        check_choice("adaptive target", self.kind, TARGETS)
        check_choice("adaptive price_unit", self.price_unit, PRICE_UNITS)
        for name in ("lo", "hi"):
            object.__setattr__(
                self, name, check_number(f"adaptive band {name}", getattr(self, name), 0, 1, lo_open=True, hi_open=True)
            )
        if self.lo >= self.hi:
            raise ConfigError(f"adaptive band lo={self.lo!r} must be below hi={self.hi!r}")
        object.__setattr__(self, "delta", check_number("adaptive delta", self.delta, 0, 1, lo_open=True, hi_open=True))
        object.__setattr__(self, "h", check_number("adaptive width h", self.h, 0, 0.5, lo_open=True))
        # 0: stop as soon as a prompt is decided
        object.__setattr__(self, "cost", check_number("adaptive cost", self.cost, 0, 1, hi_open=True))
        if self.price_unit == "tokens" and (self.kind != "band" or not self.cost):
            raise ConfigError(
                f"price_unit=tokens prices a rollout of the band target (cost > 0), not {self.kind} "
                f"with cost={self.cost:g}: there is no price to scale"
            )

    @classmethod
    def parse(cls, spec: str) -> Target:
        """``band[:lo=0.1,hi=0.9,delta=0.05,cost=0.001,price_unit=rollouts]`` or ``width[:h=0.1,delta=0.05]``."""
        kind = spec_name(spec)
        if kind not in TARGETS:
            raise ConfigError(f"adaptive target {kind!r} is unknown: allowed {', '.join(TARGETS)} (from {spec!r})")
        allowed = (
            {"lo": float, "hi": float, "delta": float, "cost": float, "price_unit": str}
            if kind == "band"
            else {"h": float, "delta": float}
        )
        _, params = parse_spec(spec, "adaptive target", allowed)
        return cls(kind=kind, **params)

    @classmethod
    def registered(cls, spec: str) -> Target:
        """A canonical spec read back from a run's registry: a ``band`` spec without ``cost`` is
        ``cost=0`` (the canonical spec leaves it out there, as runs made before the price existed
        did), where a spec from the command line without it takes the default."""
        target = cls.parse(spec)
        if target.kind == "band" and "cost=" not in spec:
            target = replace(target, cost=0.0)
        return target

    @property
    def spec(self) -> str:
        """The canonical spec string (every parameter spelled out, but ``cost=0`` and
        ``price_unit=rollouts``: those runs keep the ids they had before the price, and its unit, existed)."""
        if self.kind == "band":
            price = f",cost={self.cost:g}" if self.cost else ""
            price += f",price_unit={self.price_unit}" if self.price_unit != PRICE_UNITS[0] else ""
            return f"band:lo={self.lo:g},hi={self.hi:g},delta={self.delta:g}{price}"
        return f"width:h={self.h:g},delta={self.delta:g}"


@dataclass(frozen=True)
class RoundRule:
    """How many more samples each open prompt gets after a round (see the module docstring).

    Attributes:
        kind: ``double`` (the default rule), ``greedy`` or ``step``.
        k: samples per batch (>= 1): the step, or the greedy rule's unit.
        budget: greedy only: the round's rollouts per open prompt (> 0), a cap.
        jumps: greedy only: the most jumps a prompt gets in one round (>= 0; 0: no limit, the round
            spends its whole budget). Samples past a prompt's first jump are drawn before its
            outcomes are seen and are wasted when those decide it; more jumps, fewer rounds.

    ``double`` is the greedy rule with one jump per prompt and round, no budget, and each jump at
    least doubling the prompt's samples (or reaching ``n_max``): a prompt gets samples in at most
    ``log2(n_max / n_min)`` rounds after round 0.

    ``plan`` (``plan_grid``): each open prompt's jump is the one with the least expected
    misclassification plus price per rollout plus ``cost`` rollouts per round to come, every later
    jump planned the same way, the jumps growing a prompt's samples fast enough to reach ``n_max``
    within ``rounds`` rounds, and no run taking more than ``rounds`` rounds, round 0 included
    (``next_round``'s ``round_index``). With ``hedge`` above 0 a prompt the plan stops goes on where
    the plan under a prior the counts allow as well (``prior.plausible_priors``: the inflated Beta's
    concentration where its profile log-likelihood is ``hedge`` below the maximum) sends it on.
    ``auto`` stands for the target's default (``default_rule``) until an ``AdaptiveConfig`` resolves it.
    """

    kind: str = DEFAULT_ROUND_RULE
    k: int = 1
    budget: float = 8.0
    jumps: int = 0
    cost: float = PLAN_ROUND_COST
    rounds: int = PLAN_ROUNDS
    hedge: float = PLAN_HEDGE

    def __post_init__(self) -> None:
        check_choice("round rule", self.kind, (*ROUND_RULES, DEFAULT_ROUND_RULE))
        check_int("round rule k", self.k, 1)
        object.__setattr__(self, "budget", check_number("round rule budget", self.budget, 0, lo_open=True))
        check_int("round rule jumps", self.jumps, 0)  # 0: no limit
        object.__setattr__(self, "cost", check_number("round rule cost", self.cost, 0))
        check_int("round rule rounds", self.rounds, 2)
        object.__setattr__(self, "hedge", check_number("round rule hedge", self.hedge, 0))

    @classmethod
    def parse(cls, spec: str) -> RoundRule:
        """``plan[:cost=0,rounds=8,hedge=1.92]``, ``double[:k=1]``, ``greedy[:k=1,budget=8,jumps=0]``,
        ``step[:k=4]``, or ``auto`` (the target's default, ``default_rule``)."""
        kind = spec_name(spec)
        if kind not in (*ROUND_RULES, DEFAULT_ROUND_RULE):
            known = ", ".join((*ROUND_RULES, DEFAULT_ROUND_RULE))
            raise ConfigError(f"round rule {kind!r} is unknown: allowed {known} (from {spec!r})")
        allowed: dict[str, type] = {} if kind in ("plan", DEFAULT_ROUND_RULE) else {"k": int}
        if kind == "greedy":
            allowed.update(budget=float, jumps=int)
        if kind == "plan":
            allowed.update(cost=float, rounds=int, hedge=float)
        _, params = parse_spec(spec, "round rule", allowed)
        if kind == "step":
            params.setdefault("k", 4)
        return cls(kind=kind, **params)

    @property
    def spec(self) -> str:
        if self.kind == DEFAULT_ROUND_RULE:
            return DEFAULT_ROUND_RULE
        if self.kind == "plan":  # unhedged, the spec (and the run ids) from before the hedge
            return f"plan:cost={self.cost:g},rounds={self.rounds}" + (f",hedge={self.hedge:g}" if self.hedge else "")
        if self.kind in ("step", "double"):
            return f"{self.kind}:k={self.k}"
        # jumps=0 (no limit) was the only greedy rule once: its spec, and so its runs' ids, unchanged
        return f"greedy:k={self.k},budget={self.budget:g}" + (f",jumps={self.jumps}" if self.jumps else "")


def default_rule(target: Target) -> RoundRule:
    """The round rule a target gets by default: ``plan`` for the priced band target (its jumps are
    planned against the same price, docs/adaptive.md §5); ``double`` for ``cost=0`` and ``width``,
    the rule such runs were made with before ``plan`` existed (their run ids hash it)."""
    if target.kind == "band" and target.cost > 0:
        return RoundRule(kind="plan")
    return RoundRule(kind="double")


@dataclass(frozen=True)
class AdaptiveConfig:
    """Everything that defines an adaptive profile's sampling (part of its run id).

    Attributes:
        target: what is decided per prompt.
        n_min: samples of round 0, for every prompt (>= 1).
        n_max: most samples of a prompt (>= n_min); a prompt there stops undecided.
        rule: the round rule.
        prior: ``fit`` (empirical Bayes on round 0) or ``jeffreys``.
    """

    target: Target = field(default_factory=Target)
    n_min: int = 4
    n_max: int = 64
    rule: RoundRule = field(default_factory=RoundRule)
    prior: str = DEFAULT_PRIOR

    def __post_init__(self) -> None:
        if self.rule.kind == DEFAULT_ROUND_RULE:
            object.__setattr__(self, "rule", default_rule(self.target))
        check_int("n_min", self.n_min, 1)
        check_int("n_max", self.n_max, 1)
        if self.n_min > self.n_max:
            raise ConfigError(f"n_min={self.n_min!r} must be at most n_max={self.n_max!r}")
        check_int("n_max", self.n_max, 1, 100_000)
        check_choice("adaptive prior", self.prior, PRIORS)
        if self.prior != "jeffreys" and self.n_min < 2:
            # One sample per prompt tells the mean pass rate and nothing of its spread: the
            # beta-binomial likelihood is flat along a + b, and the grid fit puts all its mass at 0 and 1.
            raise ConfigError(
                f"n_min={self.n_min} cannot fit a prior (its spread needs at least 2 samples per prompt): "
                "use n_min >= 2, or the jeffreys prior"
            )

    @classmethod
    def from_specs(
        cls,
        target: str,
        n_min: int = 4,
        n_max: int = 64,
        rule: str = DEFAULT_ROUND_RULE,
        prior: str = DEFAULT_PRIOR,
        price_unit: str | None = None,
    ) -> AdaptiveConfig:
        """From the command line's strings: a target spec, bounds, a round-rule spec and a prior;
        ``price_unit`` (``--price-unit``; None: the spec's own) sets the target's unless the spec
        names another."""
        parsed = Target.parse(target)
        if price_unit is not None and price_unit != parsed.price_unit:
            if "price_unit=" in target.replace(" ", ""):
                raise ConfigError(
                    f"--price-unit {price_unit} contradicts the target's "
                    f"price_unit={parsed.price_unit} (from {target!r})"
                )
            parsed = replace(parsed, price_unit=price_unit)
        return cls(target=parsed, n_min=n_min, n_max=n_max, rule=RoundRule.parse(rule), prior=prior)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AdaptiveConfig:
        """The inverse of ``to_dict``: canonical specs, as a run's registry or a stored profile config
        holds them (``Target.registered``: a band spec without ``cost`` is ``cost=0``)."""
        acfg = cls.from_specs(**data)
        return replace(acfg, target=Target.registered(data["target"]))

    @staticmethod
    def defaults() -> dict[str, Any]:
        """The settings' defaults as a profile's flat settings take them: the round rule ``auto``
        (``default_rule``, resolved once the target is known)."""
        return {**AdaptiveConfig().to_dict(), "rule": DEFAULT_ROUND_RULE}

    def to_dict(self) -> dict[str, Any]:
        """The settings as plain values (run id, run registry); ``from_dict`` reads them back."""
        return {
            "target": self.target.spec,
            "n_min": self.n_min,
            "n_max": self.n_max,
            "rule": self.rule.spec,
            "prior": self.prior,
        }


# --- the posterior ------------------------------------------------------------------------------


def band_probabilities(alpha, beta, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``P(p <= lo)``, ``P(lo < p < hi)``, ``P(p >= hi)`` under ``Beta(alpha, beta)`` (CDF differences;
    the upper tail as ``I_{1-hi}(beta, alpha)``, exact where ``1 - I_hi`` would cancel)."""
    from scipy.special import betainc

    alpha = np.asarray(alpha, float)
    beta = np.asarray(beta, float)
    hard = betainc(alpha, beta, lo)
    easy = betainc(beta, alpha, 1.0 - hi)
    mid = np.clip(1.0 - hard - easy, 0.0, 1.0)
    return hard, mid, easy


def credible_interval(alpha, beta, level: float) -> tuple[np.ndarray, np.ndarray]:
    """The central (equal-tailed) ``level`` interval of ``Beta(alpha, beta)`` (quantiles;
    ``stats.beta_interval``, the one Beta-quantile kernel)."""
    return stats.beta_interval(alpha, beta, level)


@dataclass(frozen=True)
class Decision:
    """Per prompt: decided or not, the reported band (index into ``schema.BANDS``; -1 for the width
    target), that band's posterior probability (NaN for width), and the central ``1 - delta``
    credible interval."""

    decided: np.ndarray
    band: np.ndarray
    prob: np.ndarray
    lo: np.ndarray
    hi: np.ndarray


def decide(n, c, prior: Prior, target: Target) -> Decision:
    """The posterior decision of every prompt (spec: "The question a profile answers").

    ``band``: the most probable band, decided when its probability is ``>= 1 - delta``;
    ``width``: decided when the interval is at most ``2 h`` wide. A prompt with no samples is
    never decided.
    """
    n = np.asarray(n, float)
    c = np.asarray(c, float)
    if prior.is_grid:
        lo, hi, probs = _grid_decision_parts(n, c, prior, target)
    else:
        alpha, beta = prior.a + c, prior.b + n - c
        lo, hi = credible_interval(alpha, beta, 1.0 - target.delta)
        probs = np.stack(band_probabilities(alpha, beta, target.lo, target.hi)) if target.kind == "band" else None
    if probs is not None:
        band = np.argmax(probs, axis=0)
        prob = np.take_along_axis(probs, band[None], axis=0)[0]
        decided = prob >= 1.0 - target.delta
    else:
        band = np.full(n.shape, -1)
        prob = np.full(n.shape, np.nan)
        decided = (hi - lo) <= 2.0 * target.h
    return Decision(decided & (n > 0), band, prob, lo, hi)


def _grid_decision_parts(n: np.ndarray, c: np.ndarray, prior: Prior, target: Target):
    """Under a grid prior: the central ``1 - delta`` interval (the posterior's quantiles, grid points)
    and the three band probabilities (sums of posterior masses), per distinct pair, broadcast."""
    shape = n.shape
    n_u, c_u, inv = stats.unique_pairs(n, c)
    p, w = prior.grid()
    W = priors.grid_posterior(p, w, n_u, c_u)
    cdf = np.cumsum(W, axis=1)
    tail = target.delta / 2.0
    # the smallest point with P(p <= point) >= tail (and >= 1 - tail); a little slack for rounding
    lo = p[np.argmax(cdf >= tail - 1e-12, axis=1)][inv].reshape(shape)
    hi = p[np.argmax(cdf >= 1.0 - tail - 1e-12, axis=1)][inv].reshape(shape)
    if target.kind != "band":
        return lo, hi, None
    hard = W @ priors.cell_share(p, 0.0, target.lo)
    easy = W @ priors.cell_share(p, target.hi, 1.0)
    mid = np.clip(1.0 - hard - easy, 0.0, 1.0)
    probs = np.stack([x[inv].reshape(shape) for x in (hard, mid, easy)])
    return lo, hi, probs


def band_posteriors(n, c, prior: Prior, target: Target) -> np.ndarray:
    """``(3, prompts)``: each band's posterior probability given the counts under ``prior``."""
    n, c = np.asarray(n, float), np.asarray(c, float)
    if prior.is_grid:
        return _grid_decision_parts(n, c, prior, target)[2]
    return np.stack(band_probabilities(prior.a + c, prior.b + n - c, target.lo, target.hi))


def decided_grid(prior: Prior, target: Target, n_max: int) -> np.ndarray:
    """``D[n, c]``: whether a prompt with ``c`` of ``n`` correct is decided, for ``0 <= c <= n <= n_max``
    (False above the diagonal)."""
    n = np.repeat(np.arange(n_max + 1), n_max + 1).reshape(n_max + 1, n_max + 1)
    c = np.tile(np.arange(n_max + 1), (n_max + 1, 1))
    valid = c <= n
    d = decide(np.where(valid, n, 1), np.where(valid, c, 0), prior, target).decided
    return d & valid


def stop_grid(prior: Prior, target: Target, n_max: int) -> np.ndarray:
    """``S[n, c]``: whether a prompt with ``c`` of ``n`` correct stops (False above the diagonal).

    ``band`` with ``cost > 0``: the Bayes-optimal stopping rule for the risk "misclassified or not,
    plus ``cost`` per rollout" (docs/adaptive.md §4), by backward induction from ``n_max``: with
    ``e(n, c) = 1 - max band probability`` (the chance the reported band is wrong) and
    ``m = E[p | n, c]`` (the chance the next sample is right),

        V(n_max, c) = e(n_max, c),
        V(n, c) = min(e(n, c), cost + m V(n+1, c+1) + (1 - m) V(n+1, c)),

    and the prompt stops where the minimum is ``e`` (ties stop). Otherwise (``cost=0``, ``width``):
    where it is decided. Always at ``n_max``.
    """
    n_tri, c_tri = np.tril_indices(n_max + 1)
    d = _triangle_decision(prior, target, n_max)  # once: the decided grid and the errors of the price
    stop = np.zeros((n_max + 1, n_max + 1), bool)
    stop[n_tri, c_tri] = d.decided
    stop[n_max, : n_max + 1] = True
    if target.kind != "band" or not target.cost:
        return stop
    # A pair the prior makes impossible (2 of 4 under masses at 0 and 1 only) has no posterior
    # (NaN); it is reached with probability 0, and any finite value keeps 0 x value at 0.
    err = np.zeros((n_max + 1, n_max + 1))
    err[n_tri, c_tri] = np.nan_to_num(1.0 - d.prob, nan=1.0)
    mean = _memo(("mean", n_max), prior, lambda: _triangle_mean(prior, n_max))
    value = err[n_max].copy()
    for n in range(n_max - 1, -1, -1):
        e, m = err[n, : n + 1], mean[n, : n + 1]
        go_on = target.cost + m * value[1 : n + 2] + (1.0 - m) * value[: n + 1]
        here = e <= go_on
        stop[n, : n + 1] = here
        value = np.where(here, e, go_on)
    return stop


# Tables that depend on the prior and not on the price (the decisions over every (n, c), the posterior
# means, the plan's predictives), kept while the same prior object is asked again: a round priced in
# tokens asks for the grids of a dozen price levels under one prior.
_MEMO: dict[tuple, tuple[Prior, Any]] = {}
_MEMO_SIZE = 32


def _memo(key: tuple, prior: Prior, make) -> Any:
    """``make()``, computed once per ``key`` and ``prior`` (the very object: a prior refitted next round
    is another one, and its id may be reused, so the hit checks identity)."""
    hit = _MEMO.get((id(prior), *key))
    if hit is not None and hit[0] is prior:
        return hit[1]
    if len(_MEMO) >= _MEMO_SIZE:
        _MEMO.clear()
    value = make()
    _MEMO[(id(prior), *key)] = (prior, value)
    return value


def _triangle_decision(prior: Prior, target: Target, n_max: int) -> Decision:
    """``decide`` over every ``0 <= c <= n <= n_max`` (``np.tril_indices`` order); the price plays no part."""
    unpriced = replace(target, cost=0.0, price_unit=PRICE_UNITS[0])

    def make() -> Decision:
        n_tri, c_tri = np.tril_indices(n_max + 1)
        return decide(n_tri, c_tri, prior, unpriced)

    return _memo(("decide", unpriced, n_max), prior, make)


def _triangle_mean(prior: Prior, n_max: int) -> np.ndarray:
    """``M[n, c] = E[p | n, c]`` over the triangle (0 above it; 0.5 where the prior makes ``(n, c)`` impossible)."""
    n_tri, c_tri = np.tril_indices(n_max + 1)
    mean = np.zeros((n_max + 1, n_max + 1))
    with np.errstate(invalid="ignore"):
        mean[n_tri, c_tri] = np.nan_to_num(posterior_mean(n_tri, c_tri, prior), nan=0.5)
    return mean


def posterior_mean(n, c, prior: Prior) -> np.ndarray:
    """``E[p | n, c]`` under the prior: the chance the next sample of the prompt is right."""
    n = np.asarray(n, np.int64)
    c = np.asarray(c, np.int64)
    if not prior.is_grid:
        return (prior.a + c) / (prior.a + prior.b + n)
    n_u, c_u, inv = stats.unique_pairs(n, c)
    pts, w = prior.grid()
    return (priors.grid_posterior(pts, w, n_u, c_u) @ pts)[inv].reshape(n.shape)


def rounds_left(config: AdaptiveConfig, round_index: int | None) -> int:
    """The rounds a ``plan`` run has left when it plans round ``round_index`` (that one included;
    None: round 1's)."""
    return config.rule.rounds - (1 if round_index is None else round_index)


def round_stop_grid(prior: Prior, config: AdaptiveConfig, round_index: int | None = None) -> np.ndarray:
    """Where a run's prompt stops when round ``round_index`` is planned: ``stop_grid``, and under the
    ``plan`` rule also where the plan stops it (its jump 0: no jump the rounds left allow is worth
    its rollouts and its round)."""
    grid = stop_grid(prior, config.target, config.n_max)
    if config.rule.kind != "plan":
        return grid
    jumps = plan_grid(prior, config, grid, rounds_left(config, round_index))
    return grid | (np.tril(np.ones_like(grid)) & (jumps == 0))


def open_after(
    n, c, config: AdaptiveConfig, grid: np.ndarray, extra: np.ndarray, prior: Prior | None = None, price=None
) -> np.ndarray:
    """Which prompts are open once a round is planned (``grid``: ``stop_grid``; ``extra``:
    ``next_round``'s answer): under ``plan``, those given a jump (the plan gives every prompt it
    keeps open one; none once the rounds are spent); under the others, those ``grid`` leaves open
    below ``n_max`` (a greedy round may pass an open prompt over). Priced in tokens, each price
    level's own ``stop_grid`` under ``prior`` stands for ``grid``."""
    if config.rule.kind == "plan":
        return np.asarray(extra) > 0
    n, c = np.asarray(n, np.int64), np.asarray(c, np.int64)
    if config.target.price_unit != "tokens":
        return _grid_open(n, c, config, grid)
    if prior is None:
        raise ConfigError("open_after of a run priced in tokens needs its prior (each price level's grid)")
    out = np.zeros(len(n), bool)
    for idx, at in _by_level(config, n, price):
        out[idx] = _grid_open(n[idx], c[idx], at, stop_grid(prior, at.target, at.n_max))
    return out


def _grid_open(n: np.ndarray, c: np.ndarray, config: AdaptiveConfig, grid: np.ndarray) -> np.ndarray:
    """Prompts ``grid`` leaves open below ``n_max``."""
    return ~grid[np.minimum(n, config.n_max), c] & (n < config.n_max)


def stopped(n, c, prior: Prior, config: AdaptiveConfig, grid: np.ndarray | None = None) -> np.ndarray:
    """Whether each prompt has stopped (``round_stop_grid``; ``grid`` when it is already at hand)."""
    n = np.minimum(np.asarray(n, np.int64), config.n_max)
    c = np.asarray(c, np.int64)
    grid = round_stop_grid(prior, config) if grid is None else grid
    return grid[n, c]


def predictive_stopped(n, c, prior: Prior, grid: np.ndarray, extra: np.ndarray) -> np.ndarray:
    """``P(stopped after k more samples)`` for each prompt (rows) and each ``k`` in ``extra``
    (columns), under the predictive of the prompt's posterior (``prior.predictive_pmf``; under a Beta
    prior ``P(x of k) = C(k, x) B(a + x, b + k - x)/B(a, b)``). ``grid`` is ``stop_grid`` (or
    ``decided_grid``: the chance of being decided); ``n + k`` beyond it counts as not stopped."""
    n = np.asarray(n, np.int64)
    c = np.asarray(c, np.int64)
    extra = np.asarray(extra, np.int64)
    out = np.zeros((len(n), len(extra)))
    top = grid.shape[0] - 1
    for j, k in enumerate(extra):
        x = np.arange(k + 1)
        pred = priors.predictive_pmf(prior, k, x, n, c)
        rows = n + k
        ok = rows <= top
        dec = np.zeros((len(n), k + 1), bool)
        dec[ok] = grid[rows[ok][:, None], c[ok][:, None] + x]
        out[:, j] = (pred * dec).sum(axis=1)
    return out


# --- a price per token ---------------------------------------------------------------------------


def token_price(answers, total, squares) -> np.ndarray:
    """Each prompt's relative price of a rollout (``tokens.relative_price``: its expected answer
    length over the population's mean, under the length prior fitted to these prompts) from its
    answers of known length ``answers``, their total tokens ``total`` and sum of squares ``squares``
    (``finish.adaptive_counts``' ``k_tok``, ``tok``, ``tok2``). 1 for every prompt when no length is known."""
    k = np.asarray(answers, float)
    t = np.asarray(total, float)
    t2 = np.asarray(squares, float)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(k > 0, t / np.maximum(k, 1), 0.0)
        var = np.where(k > 1, (t2 - k * mean**2) / np.maximum(k - 1, 1), 0.0)
    return tokens.relative_price(k, mean, np.sqrt(np.clip(var, 0.0, None)))


def price_levels(price) -> np.ndarray:
    """Each prompt's price level ``L``: its relative price rounded to the ladder ``2^(L / 8)``
    (``PRICE_LEVELS_PER_DOUBLING``), the price ``priced_at`` charges it."""
    price = np.asarray(price, float)
    bad = ~(np.isfinite(price) & (price > 0))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ConfigError(f"prompt {i}: relative price {float(price[i])!r} is not a positive number")
    return np.rint(PRICE_LEVELS_PER_DOUBLING * np.log2(price)).astype(np.int64)


def priced_at(config: AdaptiveConfig, level: int) -> AdaptiveConfig:
    """``config`` priced in rollouts at ``cost x 2^(level / PRICE_LEVELS_PER_DOUBLING)``: what a
    prompt of that price level pays per rollout. A price of one misclassification or more stops
    every prompt at once (an error is below 1), as the cost just under 1 it is clipped to does."""
    cost = min(config.target.cost * 2.0 ** (level / PRICE_LEVELS_PER_DOUBLING), 1.0 - 1e-9)
    return replace(config, target=replace(config.target, cost=cost, price_unit=PRICE_UNITS[0]))


def _by_level(config: AdaptiveConfig, n: np.ndarray, price) -> list[tuple[np.ndarray, AdaptiveConfig]]:
    """The prompts of each price level (in the order given) and the config that prices them; price
    None: every prompt at 1."""
    levels = price_levels(np.ones(len(n)) if price is None else price)
    if len(levels) != len(n):
        raise ConfigError(f"{len(levels)} prices for {len(n)} prompts")
    return [(np.flatnonzero(levels == lv), priced_at(config, int(lv))) for lv in np.unique(levels)]


# --- round rules --------------------------------------------------------------------------------


def next_round(
    n,
    c,
    prior: Prior,
    config: AdaptiveConfig,
    grid: np.ndarray | None = None,
    round_index: int | None = None,
    price=None,
) -> np.ndarray:
    """How many more samples each prompt gets in the next round (0: it has stopped, or the
    greedy rule gave it nothing this time). All zeros when every prompt has stopped, and under the
    ``plan`` rule when ``round_index`` (the round being planned; round 0 is the ``n_min`` samples)
    is ``rounds`` or more: the run's rounds are spent, and a prompt still open keeps the band its
    counts give (docs/adaptive.md §5).

    Prompts are taken in the order given (ties of gain go to the earlier one), so the caller
    passes them in a stable order (prompt id). ``grid``: the round's ``stop_grid``, when the caller
    has it already.

    Priced in tokens (``Target.price_unit``), each prompt pays ``cost x price`` per rollout (``price``:
    its relative price, ``token_price``; None: 1 for all) on the ladder of ``price_levels``: the
    stop and plan grids depend on the price only through that scalar, so each level's prompts get
    the round their level's grids give (``grid`` is then not used; a greedy round's budget is
    shared level by level).
    """
    n = np.asarray(n, np.int64)
    c = np.asarray(c, np.int64)
    room = np.maximum(config.n_max - n, 0)
    extra = np.zeros(len(n), np.int64)
    left = rounds_left(config, round_index)
    if config.rule.kind == "plan" and left <= 0:
        return extra
    tokens_ = config.target.price_unit == "tokens"
    if config.rule.kind == "plan":
        # the hedge's priors are the whole dataset's (the counts of every prompt), whatever its prices
        others = priors.plausible_priors(prior, n, c, config.rule.hedge) if config.rule.hedge > 0 else []
        for idx, at in _by_level(config, n, price) if tokens_ else [(np.arange(len(n)), config)]:
            e = _planned(n[idx], c[idx], prior, at, None if tokens_ else grid, left)
            # a prompt the plan stops goes on if the plan under a prior the counts allow as well sends
            # it on, with that plan's jump (the more dispersed prior's first)
            for other in others:
                more = _planned(n[idx], c[idx], other, at, None, left)
                e = np.where((e == 0) & (more > 0), more, e)
            extra[idx] = e
        return np.minimum(extra, room)
    if tokens_:
        for idx, at in _by_level(config, n, price):
            extra[idx] = next_round(n[idx], c[idx], prior, at, None, round_index)
        return extra
    grid = stop_grid(prior, config.target, config.n_max) if grid is None else grid
    open_ = _grid_open(n, c, config, grid)
    if not open_.any():
        return extra
    if config.rule.kind == "step":
        extra[open_] = np.minimum(config.rule.k, room[open_])
        return extra
    if config.rule.kind == "double":
        return _greedy(n, c, prior, config, grid, open_, room, budget=None, jumps=1, grow=2.0)
    budget = max(config.rule.k, math.ceil(config.rule.budget * int(open_.sum())))
    return _greedy(n, c, prior, config, grid, open_, room, budget=budget, jumps=config.rule.jumps, grow=1.0)


def _planned(n: np.ndarray, c: np.ndarray, prior: Prior, config: AdaptiveConfig, grid, left: int) -> np.ndarray:
    """The ``plan`` rule's jump of each prompt under ``prior`` (``plan_shares``; ``grid``: its
    ``stop_grid``, or None)."""
    grid = stop_grid(prior, config.target, config.n_max) if grid is None else grid
    jumps, shares = plan_shares(prior, config, grid, left)
    extra = jumps[np.minimum(n, config.n_max), c]
    n_u, c_u, inv = stats.unique_pairs(n, c)
    for k, cell in enumerate(zip(n_u.tolist(), c_u.tolist(), strict=True)):
        if cell in shares:  # the cell's prompts, in the order given, split between its jumps by share
            js, w = shares[cell]
            idx = np.flatnonzero(inv == k)
            u = (np.arange(len(idx)) + 0.5) / len(idx)
            extra[idx] = js[np.minimum(np.searchsorted(np.cumsum(w), u), len(js) - 1)]
    return extra


Shares = dict[tuple[int, int], tuple[np.ndarray, np.ndarray]]


def plan_grid(
    prior: Prior, config: AdaptiveConfig, grid: np.ndarray | None = None, rounds_left: int | None = None
) -> np.ndarray:
    """``J[n, c]``: the jump of the ``plan`` round rule for a prompt at ``(n, c)`` (0 where it stops),
    with ``rounds_left`` rounds to come, this one included (default: ``rounds - 1``, round 1's).
    Where near-tied jumps share a cell's prompts (``plan_shares``), ``J`` is the best of them.

    A prompt stops where the stop grid says (``grid``: ``stop_grid``, the frontier's one-sample rule);
    the plan chooses how many samples an open prompt gets before it is looked at again. Measured in
    rollouts, a jump of ``j`` costs ``j`` plus the round's price ``cost`` (``RoundRule.cost``), and a
    prompt that stops at ``(n, c)`` costs its chance of a wrong band over the price of a rollout
    (``e(n, c) / lambda``, the priced rule's loss). For the priced band target, by backward induction
    over the rounds left ``r`` and from ``n_max``,

        V_0(n, c) = e(n, c) / lambda,
        V_r(n, c) = e(n, c) / lambda                                   where the grid stops,
        V_r(n, c) = min(e(n, c) / lambda,
                        min_j  cost + j + sum_x P(x | j) V_{r-1}(n + j, c + x))   elsewhere,

    with ``P(x | j)`` the predictive (``prior.predictive_pmf``), ``j`` from 1 to three times the prompt's
    samples (``PLAN_MOST_GROWTH``, or to ``n_max``), and ``J`` the minimising ``j`` at ``r =
    rounds_left`` (0 where stopping is the minimum). The rounds are a budget the plan spends: a prompt
    one sample from its stop gets one if a round is left and worth it, and is stopped if not; no run
    goes past ``rounds`` rounds (``next_round``). Where one sample would decide a prompt, one more
    sample is the best jump; where ten are needed, ten (docs/adaptive.md §5).

    Without a price (``cost=0``, ``width``: only rollouts and rounds count, and a prompt must go on
    until the grid stops it), one table: ``V(n, c) = min_j cost + j + sum_x P(x | j) V(n + j, c + x)``
    with jumps taking a prompt to at least ``g = (n_max / n_min)^(1 / (rounds - 1))`` times its
    samples, so that every prompt reaches ``n_max`` within ``rounds`` rounds.
    """
    return plan_shares(prior, config, grid, rounds_left)[0]


def plan_shares(
    prior: Prior, config: AdaptiveConfig, grid: np.ndarray | None = None, rounds_left: int | None = None
) -> tuple[np.ndarray, Shares]:
    """``plan_grid``'s jumps, and ``{(n, c): (jumps, shares)}`` for the priced cells whose prompts
    near-tied jumps share (``PLAN_JUMP_TEMPERATURE``; ``next_round`` splits them)."""
    target, rule, n_max = config.target, config.rule, config.n_max
    grid = stop_grid(prior, target, n_max) if grid is None else grid
    n_tri, c_tri = np.tril_indices(n_max + 1)
    terminal = np.zeros((n_max + 1, n_max + 1))
    priced = target.kind == "band" and target.cost > 0
    if priced:
        prob = _triangle_decision(prior, target, n_max).prob
        terminal[n_tri, c_tri] = np.nan_to_num(1.0 - prob, nan=1.0) / target.cost
    grow = None  # priced: every jump from 1
    if not priced:
        grow = (n_max / config.n_min) ** (1.0 / (rule.rounds - 1)) if n_max > config.n_min else 2.0
    rows = [
        (n, ~grid[n, : n + 1], js, pred, to_n, to_c)
        for n, js, pred, to_n, to_c in _memo(("plan rows", n_max, grow), prior, lambda: _plan_rows(prior, n_max, grow))
        if (~grid[n, : n + 1]).any()
    ]

    mixed: Shares = {}

    def layer(later: np.ndarray | None, last: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """One round's values and jumps, given the values ``later`` after it (None: unpriced, one
        table, where a jump lands on this very table's values, filled from n_max down)."""
        value = terminal.copy()
        jumps = np.zeros((n_max + 1, n_max + 1), np.int64)
        for n, open_, js, pred, to_n, to_c in rows:
            after = value if later is None else later
            q = rule.cost + js[:, None] + np.einsum("jcx,jcx->jc", pred, after[to_n, to_c])
            k = np.argmax(q <= q.min(axis=0) + 1e-12, axis=0)  # ties (to rounding): the smaller jump
            best = q[k, np.arange(n + 1)]
            go = open_ & (best < terminal[n, : n + 1]) if priced else open_
            value[n, : n + 1] = np.where(go, best, terminal[n, : n + 1])
            jumps[n, : n + 1] = np.where(go, js[k], 0)
            if last and PLAN_JUMP_TEMPERATURE > 0:
                w = np.exp(-(q - best) / PLAN_JUMP_TEMPERATURE)
                w[w < PLAN_LEAST_SHARE] = 0.0
                for cc in np.flatnonzero(go & ((w > 0).sum(axis=0) > 1)):
                    keep = w[:, cc] > 0
                    mixed[(n, int(cc))] = (js[keep], w[keep, cc] / w[keep, cc].sum())
        return value, jumps

    if not priced:
        return layer(None)[1], mixed
    rounds_left = rule.rounds - 1 if rounds_left is None else rounds_left
    value, jumps = terminal, np.zeros((n_max + 1, n_max + 1), np.int64)
    for r in range(max(0, rounds_left)):
        value, jumps = layer(value, last=r == rounds_left - 1)
    return jumps, mixed


def _plan_rows(prior: Prior, n_max: int, grow: float | None) -> list[tuple]:
    """Per row ``n < n_max`` (from the top), every allowed jump ``js`` of the plan (from 1, or the least
    that grows the samples ``grow`` times, to ``PLAN_MOST_GROWTH`` times them or ``n_max``), its
    predictive over its outcomes ``P[j, c, x]`` (0 for ``x > j``) and where each outcome lands."""
    from scipy.special import gammaln

    n_tri, c_tri = np.tril_indices(n_max + 1)
    lgf = gammaln(np.arange(n_max + 2) + 1.0)  # log k!
    # Z[n, c] = log E[p^c q^(n-c)] under the prior (the predictive of c of n from no samples, less
    # log C(n, c); -inf above the diagonal and where the prior makes a sequence impossible): the
    # predictive of j more samples from (n, c) is P(x | j) = C(j, x) exp(Z[n + j, c + x] - Z[n, c]),
    # for every cell at the price of one table.
    Z = np.full((n_max + 1, n_max + 1), -np.inf)
    with np.errstate(divide="ignore"):
        first = priors.predictive_pmf(prior, n_tri, c_tri, log=True)[0]
    Z[n_tri, c_tri] = first - (lgf[n_tri] - lgf[c_tri] - lgf[n_tri - c_tri])
    rows = []
    for n in range(n_max - 1, -1, -1):
        least = 1
        if grow is not None:
            least = max(1, min(n_max - n, math.ceil(grow * max(n, 1) - 1e-9) - n))
        most = max(least, min(n_max - n, int(PLAN_MOST_GROWTH * max(n, 1)) - n))
        js = np.arange(least, most + 1)
        jj, cc, xx = js[:, None, None], np.arange(n + 1)[None, :, None], np.arange(most + 1)[None, None, :]
        to_n, to_c = np.broadcast_arrays(n + jj, np.minimum(cc + xx, n_max))
        with np.errstate(invalid="ignore"):
            logp = lgf[jj] - lgf[np.minimum(xx, jj)] - lgf[np.maximum(jj - xx, 0)] + Z[to_n, to_c] - Z[n, cc]
        ok = (xx <= jj) & np.isfinite(logp)
        rows.append((n, js, np.where(ok, np.exp(np.where(ok, logp, 0.0)), 0.0), to_n, to_c))
    return rows


def _greedy(
    n,
    c,
    prior: Prior,
    config: AdaptiveConfig,
    grid: np.ndarray,
    open_: np.ndarray,
    room: np.ndarray,
    budget: int | None,
    jumps: int,
    grow: float,
) -> np.ndarray:
    """The greedy round (module docstring): per open prompt, the options ``k, 2k, ...`` up to its
    room, each with ``P(stopped)`` from the predictive (``grid``: ``stop_grid``); hand out the
    round's budget jump by jump, always to the jump with the largest gain per rollout (from the
    prompt's current allocation to any larger option: its upper concave hull, so a gain that only
    comes after several batches is seen), at most ``jumps`` jumps per prompt (0: no limit),
    ``budget`` rollouts at most (None: no cap). A jump larger than what is left of the budget is cut
    to the largest option that fits. Only options taking a prompt to at least ``grow`` times its
    samples (or to its room) are offered."""
    k = config.rule.k
    idx = np.flatnonzero(open_)
    # Every distinct (n, c) of the open prompts once.
    n_u, c_u, inv = stats.unique_pairs(n[idx], c[idx])
    max_room = int(room[idx].max())
    steps = np.unique(np.r_[np.arange(k, max_room + 1, k), room[idx]])
    table = predictive_stopped(n_u, c_u, prior, grid, steps)
    extra = np.zeros(len(n), np.int64)
    options: list[np.ndarray] = []
    gains: list[np.ndarray] = []
    heap: list[tuple[float, int, int]] = []
    for j, i in enumerate(idx):
        r = int(room[i])
        least = min(r, math.ceil(grow * n[i]) - n[i])
        sel = (steps <= r) & (steps >= least) & ((steps % k == 0) | (steps == r))
        opt = np.r_[0, steps[sel]]
        val = np.r_[0.0, table[inv[j], sel]]
        options.append(opt)
        gains.append(val)
        best = _best_jump(opt, val, 0)
        if best is not None:
            heapq.heappush(heap, (-best[1], j, best[0]))
    pos = [0] * len(idx)  # index into options[j] of prompt j's current allocation
    taken = [0] * len(idx)  # jumps prompt j got this round
    left = budget if budget is not None else int(room[idx].sum())
    while heap and left > 0:
        _, j, to = heapq.heappop(heap)
        opt = options[j]
        cur = pos[j]
        if opt[to] - opt[cur] > left:
            fits = np.flatnonzero(opt[cur + 1 :] - opt[cur] <= left)
            if not len(fits):
                continue
            to = cur + 1 + int(fits[-1])
        left -= int(opt[to] - opt[cur])
        pos[j] = to
        taken[j] += 1
        # Samples past a jump are drawn before its outcomes are seen, and those often decide the
        # prompt (a 0/4 prompt under masses at 0 and 1 needs 5 more; the whole budget gave it 13):
        # with a limit on jumps, the next round re-plans from them instead.
        if jumps and taken[j] >= jumps:
            continue
        nxt = _best_jump(opt, gains[j], to)
        if nxt is not None:
            heapq.heappush(heap, (-nxt[1], j, nxt[0]))
    for j, i in enumerate(idx):
        extra[i] = options[j][pos[j]]
    return extra


def _best_jump(opt: np.ndarray, val: np.ndarray, cur: int) -> tuple[int, float] | None:
    """From option ``cur``, the option with the largest gain per rollout (the last one on ties, so
    a flat stretch is crossed in one jump), or None at the end."""
    if cur + 1 >= len(opt):
        return None
    ratio = (val[cur + 1 :] - val[cur]) / (opt[cur + 1 :] - opt[cur])
    best = float(ratio.max())
    to = cur + 1 + int(np.flatnonzero(ratio >= best - 1e-15)[-1 if best <= 0 else 0])
    return to, best
