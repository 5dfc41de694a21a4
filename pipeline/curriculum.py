"""Curriculum policies: which prompts to train on next, from per-prompt Beta posteriors (docs/curriculum.md).

A group of ``G`` rollouts of a prompt with pass rate ``p`` teaches nothing when it is silent (all right
or all wrong, docs/estimators.md §3). A policy keeps each prompt's posterior on discounted counts
(forgetting ``lambda ** (T - s)`` by training step, as ``observe/current``), from the dataset's own
prior (a grid prior fitted on the counts so far, ``prior.fit_grid_prior``) or Jeffreys', and picks the
next batch where the signal is:

- ``uniform``: ``k`` prompts at random without replacement each step (seeded);
- ``signal`` (the default): the highest scores, with as many picks as a coverage target takes going
  to the best prompts not picked in the last ``period`` steps (or a fixed ``floor`` share); the score
  is the probability that a group is not silent, ``1 - p^G - (1-p)^G``, or with ``objective=mass``
  the estimator's update mass ``w(p, G) p (1-p)`` (docs/estimators.md §1), as its posterior mean
  (``explore=mean``, the default), at a posterior draw (``explore=thompson``) or as posterior mean
  plus ``kappa`` posterior standard deviations (``explore=optimism``);
- baselines, the rules a user would write: ``greedy``, ``bonus``, ``dapo``, ``greso``
  (docs/curriculum.md §5);
- peers, other projects' published rules: ``prime-rl`` (its difficulty-pool sampler), ``trinity``
  (Trinity-RFT's ``diff_based`` selector), ``mopps`` (MoPPS: Thompson sampling on Beta posteriors) and
  ``cures`` (CurES's sampler) (docs/curriculum.md §5);
- ``oracle`` (replay only): sees the step's outcomes and picks non-silent groups first, an upper bound.

Multiplicity (``signal:max_groups=M``): ``choose_groups(k)`` hands out ``k`` groups, a prompt getting
``0..M`` of them (docs/curriculum.md §9); the TRL trainer and the verl dataset lay a prompt's ``m``
groups out so that the trainer forms ``m`` groups of it.

``replay`` runs a policy over a training log in observations format; ``forecast`` predicts the yield
of uniform and of the default policy from a profile alone.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline import estimators, specs
from pipeline.checks import check_choice, check_int, check_number
from pipeline.errors import ConfigError, DatasetError
from pipeline.observe.current import FORGETTING
from pipeline.prior import Prior, fit_grid_prior, posterior_nodes
from pipeline.schema import DEFAULT_G
from pipeline.stats import beta_moment, unique_pairs

__all__ = [
    "ALL_POLICIES",
    "BASELINES",
    "DEFAULT_POLICY",
    "LOG_COLUMNS",
    "PEERS",
    "Policy",
    "SignalConfig",
    "SignalPolicy",
    "UniformPolicy",
    "check_log",
    "distinct_pairs",
    "expected_mass",
    "first_by",
    "forecast",
    "make_policy",
    "nonsilent",
    "nonsilent_moments",
    "replay",
]

LOG_COLUMNS = ("step", "prompt_id", "n", "c")
#: The policy used when none is named; its constants are ``SignalConfig``'s defaults (chosen on
#: ``bench/curriculum.py``, docs/curriculum.md §6).
DEFAULT_POLICY = "signal"
#: The simplest rules a user would write, replayed beside the policies (docs/curriculum.md §6).
BASELINES = ("greedy", "bonus", "dapo", "greso")
#: Other projects' published rules, at their defaults, replayed beside the baselines (docs/curriculum.md §5).
PEERS = ("prime-rl", "trinity", "mopps", "cures")
#: What ``replay`` and ``difficulty replay`` run when no policy is named.
ALL_POLICIES = (
    "uniform",
    "signal",
    "signal:explore=thompson",
    "signal:explore=optimism",
    "signal:prior=jeffreys",
    *BASELINES,
    *PEERS,
    "oracle",
)
#: Coverage is measured over the log's last this many steps.
COVERAGE_WINDOW = 10
#: The largest G a curriculum policy takes (past about 1000 the mass objective's sums overflow) and the
#: most groups of one prompt in a step: a spec past them (``max_groups=1000000000``) is a named error
#: when parsed, not a step's arrays past memory.
MAX_POLICY_G = 512
MAX_GROUPS = 1024
#: ``prior=population``: choices between refits of the prior, and the uniform share mixed into a grid prior.
POPULATION_REFIT = 5
POPULATION_FLOOR = 1e-3
#: Thompson draws on a population prior: prompts whose posterior rows are gathered at once (bounds the memory).
THOMPSON_CHUNK = 8192


# --- posterior expectations -------------------------------------------------------------------


def nonsilent(p: np.ndarray | float, G: int) -> np.ndarray:
    """Probability that a group of ``G`` at pass rate ``p`` is not silent: ``1 - p^G - (1-p)^G``."""
    p = np.asarray(p, dtype=float)
    return 1.0 - p**G - (1.0 - p) ** G


def nonsilent_moments(a: np.ndarray, b: np.ndarray, G: int) -> tuple[np.ndarray, np.ndarray]:
    """Posterior mean and standard deviation of ``s(p) = 1 - p^G - q^G`` under ``Beta(a, b)``, closed form.

    ``E[s] = 1 - E[p^G] - E[q^G]``; ``E[s^2] = 1 - 2E[p^G] - 2E[q^G] + E[p^2G] + E[q^2G] + 2E[p^G q^G]``.
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    pg, qg = beta_moment(a, b, G, 0), beta_moment(a, b, 0, G)
    mean = 1.0 - pg - qg
    tails = beta_moment(a, b, 2 * G, 0) + beta_moment(a, b, 0, 2 * G) + 2 * beta_moment(a, b, G, G)
    second = 1.0 - 2 * pg - 2 * qg + tails
    return mean, np.sqrt(np.maximum(second - mean**2, 0.0))


def _mass_coefficients(estimator: estimators.Estimator, G: int) -> np.ndarray:
    """``m(p) = sum_s coef_s p^(s+1) q^(G-s)``: the leave-one-out weight (docs/estimators.md §1) times ``p q``."""
    a_plus, a_minus = estimator.advantage_table(G)
    s = np.arange(G)
    return np.array([math.comb(G - 1, int(t)) for t in s], dtype=float) * (a_plus[s + 1] - a_minus[s])


def _has_polynomial_mass(estimator: estimators.Estimator) -> bool:
    # Every estimator whose weight is the leave-one-out polynomial; DAPO's resampling factor is not one.
    return type(estimator).weight is estimators.Estimator.weight


def _mean_sd(a: np.ndarray, b: np.ndarray, f, degree: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Posterior mean and sd of ``f(p)`` under each ``Beta(a_i, b_i)``, by the one posterior rule
    (``prior.posterior_nodes``, accurate for ``f`` smooth or a polynomial of degree ``degree``).

    The fallback for scores with no closed form (DAPO's mass). Each row is ``Beta(a0, b0)`` (the
    smallest parameters) after ``a_i - a0`` successes and ``b_i - b0`` failures: the singular ends
    the rows share are in the rule's weight, where a plain grid in ``p`` loses accuracy."""
    a0, b0 = float(a.min()), float(b.min())
    nodes, W = posterior_nodes(Prior(a0, b0), (a - a0) + (b - b0), a - a0, degree=degree)
    fp = np.asarray(f(nodes), dtype=float)
    mean = W @ fp
    second = W @ fp**2
    return mean, np.sqrt(np.maximum(second - mean**2, 0.0))


def expected_mass(
    a: np.ndarray, b: np.ndarray, G: int, estimator: str | estimators.Estimator = "grpo"
) -> tuple[np.ndarray, np.ndarray]:
    """Posterior mean and sd of the update mass ``w(p, G) p q`` (docs/estimators.md §1) under ``Beta(a, b)``.

    Closed form through the Beta moments for every estimator whose weight is the leave-one-out
    polynomial (``E[m] = sum_s coef_s B(a + s + 1, b + G - s) / B(a, b)``, the square by convolving the
    coefficients); the Beta-weighted quadrature otherwise (DAPO).
    """
    est = estimators.get(estimator)
    a, b = np.atleast_1d(np.asarray(a, dtype=float)), np.atleast_1d(np.asarray(b, dtype=float))
    if not _has_polynomial_mass(est):
        return _mean_sd(a, b, lambda p: est.mass(p, G), degree=2 * G + 4)
    coef = _mass_coefficients(est, G)
    mean = sum(coef[s] * beta_moment(a, b, s + 1, G - s) for s in range(G))
    square = np.convolve(coef, coef)  # index u = s + t: p^(u+2) q^(2G-u)
    second = sum(square[u] * beta_moment(a, b, u + 2, 2 * G - u) for u in range(2 * G - 1))
    return mean, np.sqrt(np.maximum(second - mean**2, 0.0))


def distinct_pairs(n: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct ``(n, c)`` pairs of counts that may be fractional (discounted) and each prompt's pair:
    ``stats.unique_pairs`` for whole counts, a sort of the pairs otherwise."""
    n, c = np.asarray(n, dtype=float), np.asarray(c, dtype=float)
    if len(n) and n.min() >= 0 and c.min() >= 0 and np.array_equal(n, np.rint(n)) and np.array_equal(c, np.rint(c)):
        n_u, c_u, inv = unique_pairs(n.astype(np.int64), c.astype(np.int64))
        return n_u.astype(float), c_u.astype(float), inv
    pairs, inv = np.unique(np.stack([n, c], axis=1), axis=0, return_inverse=True)
    return pairs[:, 0].copy(), pairs[:, 1].copy(), inv.reshape(-1)


def first_by(key: np.ndarray, group: np.ndarray, m: int) -> np.ndarray:
    """``np.lexsort((key, group))[:m]``: the ``m`` positions first by ``group`` (False first), then ``key``,
    then position, without sorting them all (the forecast's draws sort a million prompts for 256 picks)."""
    key, group = np.asarray(key, dtype=float), np.asarray(group, dtype=bool)
    if m >= len(key) or np.isnan(key).any():
        return np.lexsort((key, group))[:m]
    out = []
    for part in (np.flatnonzero(~group), np.flatnonzero(group)):
        want = m - sum(len(o) for o in out)
        if want <= 0:
            break
        if want < len(part):  # those at most the want-th smallest key, in position order: ties kept whole
            bound = np.partition(key[part], want - 1)[want - 1]
            part = part[key[part] <= bound]
        out.append(part[np.argsort(key[part], kind="stable")][:want])
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


# --- policies ---------------------------------------------------------------------------------


class Policy(Protocol):
    """A curriculum: ``choose`` the next batch, then ``update`` with the outcomes of what it chose."""

    name: str

    def choose(self, k: int, among: Sequence[str] | None = None) -> list[str]: ...

    def update(
        self, prompt_ids: Sequence[str], n: Sequence[float], c: Sequence[float], step: int | None = None
    ) -> None: ...


@dataclass(frozen=True)
class SignalConfig:
    """Settings of the ``signal`` policy (defaults chosen on ``bench/curriculum.py``, docs/curriculum.md §6).

    Attributes:
        G: group size of the score.
        objective: ``nonsilent`` (P(the group is not silent)) or ``mass`` (expected update mass of
            ``estimator``).
        estimator: the estimator spec of ``objective=mass``.
        explore: ``thompson`` (score a draw from each posterior), ``optimism`` (mean + kappa sd) or
            ``mean`` (posterior mean, no exploration).
        kappa: the optimism bonus in posterior standard deviations of the score.
        forgetting: lambda in (0, 1]; counts observed ``t`` steps ago weigh ``lambda ** t``.
        floor: share of each batch given to coverage, in [0, 1]: to the least recently picked prompts
            (``cover=lru``) or to the best scores among the prompts not picked in the last ``period``
            steps (``cover=score``: a prompt silent for long is left out, the rest come round).
        coverage: a coverage target in [0, 1] (0: none): each step gives as many picks as it takes, to
            the best scores among the prompts not picked in the last ``period`` steps, for this share of
            all prompts to have been picked within ``period`` steps (at step ``t < period``, for the share
            ``(t + 1) / period`` of it: the first window is paced).
        prior: ``population`` (each prompt's posterior starts from the dataset's prior, the grid prior
            fitted on every prompt's discounted counts so far, ``prior.fit_grid_prior``, refitted every
            ``POPULATION_REFIT`` choices; Jeffreys' until two prompts have an outcome) or
            ``jeffreys`` (from ``Beta(prior_a, prior_b)``).
        prior_a, prior_b: the Beta prior of ``prior=jeffreys`` (Jeffreys').
        max_groups: multiplicity, the most groups of ``G`` one prompt gets in a step (1: selection
            only). ``choose_groups(k)`` then hands out ``k`` groups: one to each prompt the coverage
            target or floor takes, the rest to the best scores, a prompt taking up to ``max_groups``
            of them (docs/curriculum.md §9).
    """

    G: int = DEFAULT_G
    objective: str = "nonsilent"
    estimator: str = "grpo"
    explore: str = "mean"
    kappa: float = 1.0
    forgetting: float = FORGETTING
    floor: float = 0.0
    cover: str = "score"
    coverage: float = 0.75
    period: int = COVERAGE_WINDOW
    prior: str = "population"
    prior_a: float = 0.5
    prior_b: float = 0.5
    max_groups: int = 1

    def __post_init__(self) -> None:
        check_int("G", self.G, 1, MAX_POLICY_G)
        check_int("max_groups", self.max_groups, 1, MAX_GROUPS)
        check_choice("objective", self.objective, ("nonsilent", "mass"))
        check_choice("explore", self.explore, ("thompson", "optimism", "mean"))
        check_number("kappa", self.kappa, 0)
        check_number("forgetting", self.forgetting, 0, 1, lo_open=True)
        check_number("floor", self.floor, 0, 1)
        for name in ("prior_a", "prior_b"):
            check_number(name, getattr(self, name), 0, lo_open=True)
        check_number("coverage", self.coverage, 0, 1)
        check_choice("cover", self.cover, ("lru", "score"))
        check_int("period", self.period, 1)
        check_choice("prior", self.prior, ("jeffreys", "population"))
        if self.objective == "mass":
            estimators.get(self.estimator)  # an unknown estimator fails here


class _Base:
    """Shared state: prompt index, discounted counts, last pick, a seeded generator."""

    name = "base"

    def __init__(self, prompt_ids: Sequence[str], n=None, c=None, *, seed: int = 0, forgetting: float = 1.0):
        self.ids = [str(p) for p in prompt_ids]
        self.index = {p: i for i, p in enumerate(self.ids)}
        if len(self.index) != len(self.ids):
            raise ConfigError("prompt ids must be distinct")
        size = len(self.ids)
        self.n = np.zeros(size) if n is None else np.asarray(n, dtype=float).copy()
        self.c = np.zeros(size) if c is None else np.asarray(c, dtype=float).copy()
        if self.n.shape != (size,) or self.c.shape != (size,):
            raise ConfigError(f"prior counts must have one (n, c) per prompt ({size})")
        if (self.c < 0).any() or (self.c > self.n).any():
            raise ConfigError("prior counts must have 0 <= c <= n")
        self.last = np.full(size, -1, dtype=np.int64)  # step of the last pick; -1: never
        self.t = 0  # choices made so far
        self.now: int | None = None  # the training step the counts are discounted to
        self.forgetting = forgetting
        self.rng = np.random.default_rng(seed)

    def _mask(self, among: Sequence[str] | None) -> np.ndarray:
        if among is None:
            return np.arange(len(self.ids))
        return np.array([self.index[p] for p in among], dtype=np.int64)

    def choose(self, k: int, among: Sequence[str] | None = None) -> list[str]:
        picked = self.choose_index(k, self._mask(among))
        return [self.ids[i] for i in picked]

    def choose_index(self, k: int, cand: np.ndarray) -> np.ndarray:
        picked = self._pick(min(int(k), len(cand)), cand)
        self.last[picked] = self.t
        self.t += 1
        return picked

    def _pick(self, k: int, cand: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    #: The most groups one prompt gets in a step (``choose_groups``); 1: selection only.
    max_groups = 1

    def choose_groups(self, k: int, among: Sequence[str] | None = None) -> list[str]:
        """The ``k`` groups of the next step, one prompt id per group: a prompt given ``m`` groups appears
        ``m`` times, in a row (``m <= max_groups``; without multiplicity, ``choose(k)``)."""
        return [self.ids[i] for i in self.choose_groups_index(k, self._mask(among))]

    def choose_groups_index(self, k: int, cand: np.ndarray) -> np.ndarray:
        if self.max_groups == 1:
            return self.choose_index(k, cand)
        picked = self._pick_groups(min(int(k), len(cand) * self.max_groups), cand)
        self.last[picked] = self.t
        self.t += 1
        return picked

    def _pick_groups(self, k: int, cand: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def update(
        self, prompt_ids: Sequence[str], n: Sequence[float], c: Sequence[float], step: int | None = None
    ) -> None:
        self.update_index(self._mask(prompt_ids), np.asarray(n, dtype=float), np.asarray(c, dtype=float), step)

    def set_counts(self, n, c, step: int | None) -> None:
        """Replace every prompt's discounted counts with ones read elsewhere, discounted to ``step``
        (the verl hook's ``observe/current`` read); what was picked when is kept."""
        self.n = np.asarray(n, dtype=float).copy()
        self.c = np.asarray(c, dtype=float).copy()
        self.now = step

    def update_index(self, idx: np.ndarray, n: np.ndarray, c: np.ndarray, step: int | None = None) -> None:
        """Outcomes observed at training ``step`` (None: the step after the last update's).

        Counts are kept as of the newest step seen, ``now``: an outcome of step ``s`` weighs
        ``lambda ** (now - s)``, the weighting of ``observe/current`` (docs/curriculum.md §1). A newer
        step first ages every count by ``lambda ** (step - now)``; an older one (a late outcome) adds
        already discounted. The counts given at construction (a profile) are as of the first step.
        """
        step = (0 if self.now is None else self.now + 1) if step is None else int(step)
        if self.now is None:
            self.now = step
        weight = 1.0
        if self.forgetting != 1.0:
            if step > self.now:
                decay = self.forgetting ** (step - self.now)
                self.n *= decay
                self.c *= decay
                self.now = step
            else:
                weight = self.forgetting ** (self.now - step)
        np.add.at(self.n, idx, weight * n)
        np.add.at(self.c, idx, weight * c)
        self.now = max(self.now, step)


class UniformPolicy(_Base):
    """``k`` prompts uniformly at random without replacement, each step."""

    name = "uniform"

    def _pick(self, k: int, cand: np.ndarray) -> np.ndarray:
        return self.rng.choice(cand, size=k, replace=False)


class SignalPolicy(_Base):
    """Coverage floor first (least recently picked), then the best scores (docs/curriculum.md §2-§5)."""

    name = "signal"

    def __init__(self, prompt_ids, n=None, c=None, *, seed: int = 0, config: SignalConfig | None = None):
        self.config = config or SignalConfig()
        super().__init__(prompt_ids, n, c, seed=seed, forgetting=self.config.forgetting)
        self.estimator = estimators.get(self.config.estimator) if self.config.objective == "mass" else None
        self._prior: Prior | None = None
        self._fitted_at: int | None = None

    def set_counts(self, n, c, step: int | None) -> None:
        super().set_counts(n, c, step)
        self._fitted_at = None  # new counts: refit the population prior at the next choice

    def _unused_copy(self, seed: int, config: SignalConfig) -> SignalPolicy:
        """What ``SignalPolicy(ids, n, c, seed=seed, config=config)`` builds, from this policy before its first
        choice or update: the ids and the fitted population prior shared (a fit depends on the counts alone), so
        ``forecast``'s draws neither rebuild the id index nor refit the prior."""
        assert self.t == 0 and self.now is None, "only a policy that has chosen nothing and seen no outcome"
        if self.config.prior == "population" and config.prior == "population":
            self._population()
        other = copy.copy(self)
        other.config = config
        other.forgetting = config.forgetting
        other.estimator = estimators.get(config.estimator) if config.objective == "mass" else None
        other.n, other.c, other.last = self.n.copy(), self.c.copy(), self.last.copy()
        other.rng = np.random.default_rng(seed)
        return other

    def scores(self, cand: np.ndarray) -> np.ndarray:
        """The exploration score of each candidate (random for Thompson: one posterior draw each)."""
        cfg = self.config
        fitted = self._population() if cfg.prior == "population" else None
        if fitted is None:
            return self._jeffreys_scores(cand)
        out = self._population_scores(cand, fitted)
        bad = ~np.isfinite(out)  # counts the fitted prior gives no room (a degenerate fit): Jeffreys'
        if bad.any():
            out[bad] = self._jeffreys_scores(cand[bad])
        return out

    def _jeffreys_scores(self, cand: np.ndarray) -> np.ndarray:
        cfg = self.config
        a = cfg.prior_a + self.c[cand]
        b = cfg.prior_b + self.n[cand] - self.c[cand]
        if cfg.explore == "thompson":
            p = self.rng.beta(a, b)
            return nonsilent(p, cfg.G) if self.estimator is None else self.estimator.mass(p, cfg.G)
        if self.estimator is None:
            mean, sd = nonsilent_moments(a, b, cfg.G)
        else:
            mean, sd = expected_mass(a, b, cfg.G, self.estimator)
        return mean if cfg.explore == "mean" else mean + cfg.kappa * sd

    def _population(self) -> Prior | None:
        """The dataset's grid prior (``prior.fit_grid_prior``, adaptive profiling's), fitted on every
        prompt's rounded discounted counts, refitted every ``POPULATION_REFIT`` choices. The grid, not
        ``prior.choose_prior``: counts of many sizes (fresh, forgotten) can make a two-parameter Beta
        fit so concentrated that it outweighs a prompt's own outcomes."""
        if self._fitted_at is None or self.t - self._fitted_at >= POPULATION_REFIT:
            n, c = np.rint(self.n), np.rint(self.c)
            if (n > 0).sum() < 2:  # no population to fit yet
                return None
            fitted = fit_grid_prior(n, np.minimum(c, n))
            # A little mass everywhere: an outcome the fit left no room for still has a posterior.
            points, weights = fitted.grid()
            weights = (1 - POPULATION_FLOOR) * weights + POPULATION_FLOOR / len(weights)
            fitted = replace(fitted, weights=tuple(weights.tolist()))
            self._prior, self._fitted_at = fitted, self.t
        return self._prior

    def _population_scores(self, cand: np.ndarray, fitted: Prior) -> np.ndarray:
        # Per distinct (n, c) pair, broadcast to the prompts: a profile of 60,000 prompts at n = 8 has 45 pairs.
        cfg = self.config
        n_u, c_u, inv = distinct_pairs(self.n[cand], self.c[cand])
        with np.errstate(all="ignore"):
            nodes, W = posterior_nodes(fitted, n_u, c_u, degree=2 * cfg.G)
        f = nonsilent(nodes, cfg.G) if self.estimator is None else self.estimator.mass(nodes, cfg.G)
        if cfg.explore == "thompson":  # one node drawn from each posterior, by the same uniform draw per prompt
            u = self.rng.random(len(cand))
            cum = np.cumsum(W, axis=1)
            at = np.empty(len(cand), dtype=np.int64)
            for lo in range(0, len(cand), THOMPSON_CHUNK):  # the prompts' rows of cum, a chunk at a time
                part = slice(lo, lo + THOMPSON_CHUNK)
                at[part] = (cum[inv[part]] < u[part, None]).sum(axis=1)
            return f[np.minimum(at, len(nodes) - 1)]
        mean = W @ f
        if cfg.explore == "mean":
            return mean[inv]
        return (mean + cfg.kappa * np.sqrt(np.maximum(W @ f**2 - mean**2, 0.0)))[inv]

    def _coverage_quota(self, k: int) -> int:
        """Picks owed to coverage this step: enough due prompts (none of the last ``period - 1`` steps
        picked them) that, with this step, ``coverage`` of all prompts were picked within ``period`` steps;
        in the first ``period`` steps, the share of that target the steps so far make up (``t + 1`` of
        ``period``).

        The first window is paced because coverage recurs: a prompt picked at step ``s`` falls due at
        ``s + period``, so the steps that bought the first window's coverage owe it again every ``period``
        steps. Bought at once (the whole target due at step 0), it fills the first batches with due
        prompts while those that can teach wait, and comes back as such a burst every ``period`` steps
        (docs/curriculum.md §4)."""
        cfg = self.config
        if not cfg.coverage:
            return 0
        recent = int(((self.last >= 0) & (self.t - self.last < cfg.period)).sum())
        want = math.ceil(cfg.coverage * len(self.ids) * min(1.0, (self.t + 1) / cfg.period) - 1e-9)
        return max(0, min(k, want - recent))

    @property
    def max_groups(self) -> int:  # type: ignore[override]
        return self.config.max_groups

    def _cover(self, k: int, cand: np.ndarray) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray] | None]:
        """The positions in ``cand`` the coverage target or floor takes this step (one group each), and
        when they were needed to choose them, the scores and the random tie-breakers drawn with them."""
        m = max(min(k, int(round(self.config.floor * k))), self._coverage_quota(k))
        if m and (self.config.cover == "score" or self.config.coverage):
            # The best scores among the prompts due (not picked in the last ``period`` steps) first,
            # then the best of the others.
            s, tie = self.scores(cand), self.rng.random(len(cand))
            due = (self.last[cand] < 0) | (self.t - self.last[cand] >= self.config.period)
            return first_by(-(s + 1e-12 * tie), ~due, m), (s, tie)
        if m:
            # Least recently picked first; ties (never picked, same step) broken at random.
            return np.lexsort((self.rng.random(len(cand)), self.last[cand]))[:m], None
        return np.zeros(0, dtype=np.int64), None

    def _pick(self, k: int, cand: np.ndarray) -> np.ndarray:
        floor_idx, scored = self._cover(k, cand)
        s = None if scored is None else scored[0] + 1e-12 * scored[1]
        m = len(floor_idx)
        rest = np.ones(len(cand), dtype=bool)
        rest[floor_idx] = False
        pool = np.flatnonzero(rest)
        need = k - m
        if need <= 0 or len(pool) == 0:
            return cand[floor_idx]
        if s is None:
            s = np.empty(len(cand))
            s[pool] = self.scores(cand[pool]) + 1e-12 * self.rng.random(len(pool))  # random order among ties
        s = s[pool]
        best = pool[np.argpartition(-s, need - 1)[:need]] if need < len(pool) else pool
        return cand[np.concatenate([floor_idx, best])]

    def _pick_groups(self, k: int, cand: np.ndarray) -> np.ndarray:
        """``k`` groups (``k <= len(cand) * max_groups``): one to each prompt coverage takes, then each
        further group to the best score among the prompts with fewer than ``max_groups``; among equal
        scores, to the prompt with the fewest groups so far.

        A prompt's groups in one step are independent draws at one pass rate, so under the posterior
        each of them is worth the same (the score: a group's non-silent probability or expected update
        mass), and the ``k`` groups of a step are the budget of ``k G`` rollouts handed out by the
        allocator's greedy rule (``allocate.allocate_greedy``) for a value linear in the groups, capped
        at ``max_groups``: the best prompts first, each up to the cap. Equal scores (equal counts: at
        the first step every prompt, later those never picked) are equal values, and the greedy rule may
        break the tie either way; a group of a prompt with fewer groups learns more for the next steps
        (its outcome is the first of the step on that prompt), so those go first: at the first step
        ``k`` prompts are tried once rather than ``k / max_groups`` of them ``max_groups`` times
        (docs/curriculum.md §9). Each prompt's groups are in a row, the best first.
        """
        floor_idx, scored = self._cover(k, cand)
        groups = np.zeros(len(cand), dtype=np.int64)
        groups[floor_idx] = 1
        need = k - len(floor_idx)
        if need > 0 and scored is None:
            scored = self.scores(cand), self.rng.random(len(cand))  # random order among ties
        if need > 0:
            s, tie = scored
            room = np.minimum(self.max_groups - groups, need)  # no prompt takes more than the step's groups
            unit = np.repeat(np.arange(len(cand)), room)  # the prompt of each group it could still take
            nth = groups[unit] + np.arange(len(unit)) - np.repeat(np.cumsum(room) - room, room)  # its groups before
            take = unit[np.lexsort((tie[unit], nth, -s[unit]))[:need]]
            groups += np.bincount(take, minlength=len(cand))
        order = np.flatnonzero(groups)
        if scored is not None:  # the best first, so a truncated read keeps the best
            order = order[np.lexsort((scored[1][order], -scored[0][order]))]
        return np.repeat(cand[order], groups[order])


class BonusPolicy(_Base):
    """Baseline, the rule a user writes in ten lines: the discounted posterior mean of the non-silent
    probability (Jeffreys' prior) plus ``beta / sqrt(1 + n)``, an optimism bonus that shrinks with the
    prompt's discounted count ``n``; the ``k`` best, no floor."""

    name = "bonus"

    def __init__(self, prompt_ids, n=None, c=None, *, seed: int = 0, G: int = DEFAULT_G, beta: float = 1.0,
                 forgetting: float = FORGETTING):  # fmt: skip
        check_int("G", G, 1, MAX_POLICY_G)
        check_number("beta", beta, 0)
        check_number("forgetting", forgetting, 0, 1, lo_open=True)
        super().__init__(prompt_ids, n, c, seed=seed, forgetting=forgetting)
        self.G, self.beta = int(G), float(beta)

    def _pick(self, k: int, cand: np.ndarray) -> np.ndarray:
        n, c = self.n[cand], self.c[cand]
        mean, _ = nonsilent_moments(0.5 + c, 0.5 + n - c, self.G)
        s = mean + self.beta / np.sqrt(1.0 + n) + 1e-12 * self.rng.random(len(cand))
        return cand[np.argpartition(-s, k - 1)[:k]] if k < len(cand) else cand


class GresoPolicy(_Base):
    """Baseline after GRESO: a prompt whose last ``k`` groups were all silent is skipped, except with
    probability ``explore`` each step; the batch is drawn uniformly from the others (then, if they are
    too few, from the skipped)."""

    name = "greso"

    def __init__(self, prompt_ids, n=None, c=None, *, seed: int = 0, k: int = 2, explore: float = 0.25):
        check_int("k", k, 1)
        check_number("explore", explore, 0, 1)
        super().__init__(prompt_ids, n, c, seed=seed)
        self.k, self.explore = int(k), float(explore)
        self.silent_run = np.zeros(len(self.ids), dtype=np.int64)  # consecutive silent groups, newest last

    def update_index(self, idx: np.ndarray, n: np.ndarray, c: np.ndarray, step: int | None = None) -> None:
        super().update_index(idx, n, c, step)
        live = (c > 0) & (c < n)
        self.silent_run[idx] = np.where(live, 0, self.silent_run[idx] + 1)

    def _pick(self, k: int, cand: np.ndarray) -> np.ndarray:
        keep = (self.silent_run[cand] < self.k) | (self.rng.random(len(cand)) < self.explore)
        key = np.where(keep, 0.0, 1.0) + self.rng.random(len(cand))
        return cand[np.argsort(key)[:k]]


class DapoPolicy(UniformPolicy):
    """Baseline: DAPO's oversample-and-filter at equal rollouts. Its prompts are drawn uniformly and its
    filter drops the silent groups after they were generated, so per rollout it trains on what uniform
    draws would; its row says so on every truth."""

    name = "dapo"


def weighted_sample(rng: np.random.Generator, w: np.ndarray, k: int) -> np.ndarray:
    """``k`` positions drawn without replacement, each next draw with probability proportional to ``w``
    among those left (successive sampling, by Efraimidis and Spirakis' keys ``log(u) / w``); positions
    of weight 0 come only after every positive one, in random order."""
    w = np.asarray(w, dtype=float)
    u = rng.random(len(w))
    with np.errstate(divide="ignore"):
        keys = np.where(w > 0, np.log(u) / np.where(w > 0, w, 1.0), -np.inf)
    return np.lexsort((rng.random(len(w)), -keys))[:k]


class PoolPolicy(_Base):
    """Peer: prime-rl's difficulty-pool sampler. Each prompt sits in a pool by its latest group mean,
    ``hard`` (at most ``low``), ``normal`` (at most ``high``) or ``easy``, and is drawn with that pool's
    weight (``hard`` 0.2, normal 1, ``easy`` 0.2: prime-rl's defaults); a prompt never seen weighs 1.
    prime-rl draws each task with replacement; a log holds one group per prompt and step, so here a
    batch is drawn without replacement with the same weights (successive sampling)."""

    name = "prime-rl"

    def __init__(self, prompt_ids, n=None, c=None, *, seed: int = 0, hard: float = 0.2, easy: float = 0.2,
                 low: float = 0.25, high: float = 0.75):  # fmt: skip
        for name, x in (("hard", hard), ("easy", easy)):
            check_number(name, x, 0)
        check_number("low", low, 0, 1)
        check_number("high", high, 0, 1)
        if high <= low:
            raise ConfigError(f"high={high!r} must be above low={low!r}")
        super().__init__(prompt_ids, n, c, seed=seed)
        self.hard, self.easy, self.low, self.high = float(hard), float(easy), float(low), float(high)
        # the latest group mean; NaN: never seen (a profile's counts count as a first group)
        self.mean = np.where(self.n > 0, self.c / np.maximum(self.n, 1), np.nan)

    def update_index(self, idx: np.ndarray, n: np.ndarray, c: np.ndarray, step: int | None = None) -> None:
        super().update_index(idx, n, c, step)
        self.mean[idx] = c / n

    def set_counts(self, n, c, step: int | None) -> None:
        """Counts read elsewhere (the verl hook): their mean stands for the latest group's."""
        super().set_counts(n, c, step)
        self.mean = np.where(self.n > 0, self.c / np.maximum(self.n, 1), np.nan)

    def weights(self, cand: np.ndarray) -> np.ndarray:
        m = self.mean[cand]
        pooled = np.where(m <= self.low, self.hard, np.where(m <= self.high, 1.0, self.easy))
        return np.where(np.isnan(m), 1.0, pooled)

    def _pick(self, k: int, cand: np.ndarray) -> np.ndarray:
        return cand[weighted_sample(self.rng, self.weights(cand), k)]


class DiffBasedPolicy(_Base):
    """Peer: Trinity-RFT's ``diff_based`` selector. Each prompt has ``Beta(alpha, beta)`` from
    ``Beta(1, 1)``; after every step every prompt's parameters are discounted towards 1,
    ``alpha <- (1 - lamb) alpha + lamb``, and the picked ones add their successes (``beta`` their
    failures). The score is ``-|target - p|``, ``p`` the posterior mean (or a draw, ``sample``); the
    batch is the ``k`` best (``tau = 0``) or drawn from ``softmax(score / tau)`` without replacement.
    Its anchor term (``rho``: a pass rate interpolated from two reference models' rates) needs
    per-prompt features a training log does not carry, so it is off (``rho = 0``)."""

    name = "trinity"

    def __init__(self, prompt_ids, n=None, c=None, *, seed: int = 0, lamb: float = 0.2, target: float = 0.5,
                 tau: float = 0.0, sample: bool = False):  # fmt: skip
        check_number("lamb", lamb, 0, 1)
        check_number("target", target, 0, 1)
        check_number("tau", tau, 0)
        super().__init__(prompt_ids, n, c, seed=seed)
        self.lamb, self.target, self.tau, self.sample = float(lamb), float(target), float(tau), bool(sample)
        self.alpha, self.beta = 1.0 + self.c, 1.0 + self.n - self.c

    def update_index(self, idx: np.ndarray, n: np.ndarray, c: np.ndarray, step: int | None = None) -> None:
        super().update_index(idx, n, c, step)
        self.alpha = (1 - self.lamb) * self.alpha + self.lamb
        self.beta = (1 - self.lamb) * self.beta + self.lamb
        np.add.at(self.alpha, idx, c)
        np.add.at(self.beta, idx, n - c)

    def set_counts(self, n, c, step: int | None) -> None:
        """Counts read elsewhere (the verl hook, already discounted): the posterior is ``Beta(1 + c, 1 + n - c)``."""
        super().set_counts(n, c, step)
        self.alpha, self.beta = 1.0 + self.c, 1.0 + self.n - self.c

    def scores(self, cand: np.ndarray) -> np.ndarray:
        a, b = self.alpha[cand], self.beta[cand]
        p = self.rng.beta(a, b) if self.sample else a / (a + b)
        return -np.abs(self.target - p)

    def _pick(self, k: int, cand: np.ndarray) -> np.ndarray:
        s = self.scores(cand)
        if self.tau == 0:
            return cand[np.lexsort((self.rng.random(len(cand)), -s))[:k]]
        return cand[weighted_sample(self.rng, np.exp((s - s.max()) / self.tau), k)]


class MoppsPolicy(_Base):
    """Peer: MoPPS (model predictive prompt selection). Each prompt has ``Beta(alpha, beta)`` from
    ``Beta(a0, b0) = Beta(1, 1)``; a picked prompt's parameters are discounted towards the prior,
    ``alpha <- decay alpha + (1 - decay) a0 + successes`` (``beta`` likewise, failures; ``decay`` 1 as
    in its code). Each step it is handed a uniform draw of ``k / ratio`` candidates (its trainer's data
    loader; ``ratio`` = 0.6, its ``top_k_ratio``), draws one ``p`` from each candidate's posterior and
    keeps the ``k`` draws nearest ``target`` = 0.5."""

    name = "mopps"

    def __init__(self, prompt_ids, n=None, c=None, *, seed: int = 0, decay: float = 1.0, target: float = 0.5,
                 ratio: float = 0.6):  # fmt: skip
        check_number("decay", decay, 0, 1)
        check_number("target", target, 0, 1)
        check_number("ratio", ratio, 0, 1, lo_open=True)
        super().__init__(prompt_ids, n, c, seed=seed)
        self.decay, self.target, self.ratio = float(decay), float(target), float(ratio)
        self.alpha, self.beta = 1.0 + self.c, 1.0 + self.n - self.c

    def update_index(self, idx: np.ndarray, n: np.ndarray, c: np.ndarray, step: int | None = None) -> None:
        super().update_index(idx, n, c, step)
        self.alpha[idx] = self.decay * self.alpha[idx] + (1 - self.decay) + c
        self.beta[idx] = self.decay * self.beta[idx] + (1 - self.decay) + n - c

    def set_counts(self, n, c, step: int | None) -> None:
        """Counts read elsewhere (the verl hook, already discounted): the posterior is ``Beta(1 + c, 1 + n - c)``."""
        super().set_counts(n, c, step)
        self.alpha, self.beta = 1.0 + self.c, 1.0 + self.n - self.c

    def _pick(self, k: int, cand: np.ndarray) -> np.ndarray:
        m = min(len(cand), math.ceil(k / self.ratio - 1e-9))
        pool = cand[self.rng.choice(len(cand), size=m, replace=False)] if m < len(cand) else cand
        gap = (self.rng.beta(self.alpha[pool], self.beta[pool]) - self.target) ** 2
        return pool[np.argsort(gap, kind="stable")[:k]]


class CuresPolicy(_Base):
    """Peer: CurES's sampler. A prompt's accuracy is its ``Beta(c + 1, n - c + 1)`` posterior mean
    ``p`` on every outcome so far; it is drawn, without replacement, with probability proportional to
    ``exp(sqrt(p (1 - p)) / t)``, ``t = (c + 1) / scale`` (``scale`` = 0.01 in its code, where the
    weights differ from uniform's by under 0.5%)."""

    name = "cures"

    def __init__(self, prompt_ids, n=None, c=None, *, seed: int = 0, scale: float = 0.01):
        check_number("scale", scale, 0, lo_open=True)
        super().__init__(prompt_ids, n, c, seed=seed)
        self.scale = float(scale)

    def weights(self, cand: np.ndarray) -> np.ndarray:
        n, c = self.n[cand], self.c[cand]
        p = (c + 1) / (n + 2)
        z = np.sqrt(p * (1 - p)) * self.scale / (c + 1)
        return np.exp(z - z.max())

    def _pick(self, k: int, cand: np.ndarray) -> np.ndarray:
        return cand[weighted_sample(self.rng, self.weights(cand), k)]


_PEER_CLASSES = {"prime-rl": PoolPolicy, "trinity": DiffBasedPolicy, "mopps": MoppsPolicy, "cures": CuresPolicy}
_SIGNAL_PARAMS = {f.name: f.type for f in fields(SignalConfig)}
_BASELINE_PARAMS = {
    "bonus": {"G": int, "beta": float, "forgetting": float},
    "greso": {"k": int, "explore": float},
    "prime-rl": {"hard": float, "easy": float, "low": float, "high": float},
    "trinity": {"lamb": float, "target": float, "tau": float, "sample": bool},
    "mopps": {"decay": float, "target": float, "ratio": float},
    "cures": {"scale": float},
}


def make_policy(spec: str, prompt_ids: Sequence[str], n=None, c=None, *, seed: int = 0, G: int | None = None) -> _Base:
    """A policy from a spec (``uniform``, ``signal``, ``signal:explore=optimism,floor=0.2``, ...).

    ``G``, when given, is the signal policy's group size unless the spec sets one.
    """
    base = specs.spec_name(spec)
    allowed = _SIGNAL_PARAMS if base in ("signal", "greedy") else _BASELINE_PARAMS.get(base)
    name, params = specs.parse_spec(spec, "policy", allowed)
    if name in ("uniform", "dapo"):
        if params:
            raise ConfigError(f"policy {spec!r}: {name} takes no parameters")
        return (UniformPolicy if name == "uniform" else DapoPolicy)(prompt_ids, n, c, seed=seed)
    if name == "bonus":
        if G is not None:
            params.setdefault("G", int(G))
        return BonusPolicy(prompt_ids, n, c, seed=seed, **params)
    if name == "greso":
        return GresoPolicy(prompt_ids, n, c, seed=seed, **params)
    if name in _PEER_CLASSES:
        return _PEER_CLASSES[name](prompt_ids, n, c, seed=seed, **params)
    if name == "greedy":  # baseline: the discounted Jeffreys posterior mean alone, coverage only by a floor
        params = {"explore": "mean", "prior": "jeffreys", "floor": 0.0, "cover": "lru", "coverage": 0.0, **params}
        name = "signal"
    if name == "signal":
        if G is not None:
            params.setdefault("G", int(G))
        return SignalPolicy(prompt_ids, n, c, seed=seed, config=SignalConfig(**params))
    raise ConfigError(
        f"unknown policy {name!r}; known: uniform, signal, {', '.join((*BASELINES, *PEERS))}, oracle (replay only)"
    )


# --- replay -----------------------------------------------------------------------------------


GROUP_COLUMN = "group_index"  # optional in a log: a prompt's groups of one step (the observations table's)


def check_log(log: pa.Table, where: str = "log") -> pa.Table:
    """The log's ``step, prompt_id, n, c`` with one row per (step, prompt) (rows of one step summed),
    and per (step, prompt) its ``groups`` and ``signal_groups`` (those neither all right nor all
    wrong). A log with a ``group_index`` column (the ``observations`` table's: a prompt given ``m``
    groups in a step is ``m`` rows) keeps its groups apart; rows without one (or with it empty) are
    one group per step and prompt, summed as before.

    Raises:
        DatasetError: a missing column, a null, ``n < 1`` or ``c`` outside ``[0, n]`` (the first row named).
    """
    missing = [col for col in LOG_COLUMNS if col not in log.column_names]
    if missing:
        raise DatasetError(
            f"{where}: missing column(s) {', '.join(missing)}; a training log needs {', '.join(LOG_COLUMNS)} "
            f"(has {', '.join(log.column_names)})"
        )
    for col in LOG_COLUMNS:
        if log.column(col).null_count:
            raise DatasetError(f"{where}: column {col} has {log.column(col).null_count} empty value(s)")
    try:
        table = pa.table(
            {
                "step": log.column("step").cast(pa.int64()),
                "prompt_id": log.column("prompt_id").cast(pa.string()),
                "n": log.column("n").cast(pa.int64()),
                "c": log.column("c").cast(pa.int64()),
                "group": pc.fill_null(log.column(GROUP_COLUMN).cast(pa.int64()), -1)
                if GROUP_COLUMN in log.column_names
                else pa.array(np.full(log.num_rows, -1, np.int64)),
            }
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise DatasetError(f"{where}: step, n, c and {GROUP_COLUMN} must be whole numbers ({exc})") from exc
    n, c = table.column("n").to_numpy(), table.column("c").to_numpy()
    bad = np.flatnonzero((c < 0) | (c > n) | (n < 1))
    if len(bad):
        i = int(bad[0])
        step, prompt = table.column("step")[i].as_py(), table.column("prompt_id")[i].as_py()
        raise DatasetError(
            f"{where}: row {i} (step {step}, prompt {prompt!r})"
            f" has n={n[i]}, c={c[i]}; need n >= 1 and 0 <= c <= n ({len(bad)} such rows)"
        )
    groups = (
        table.group_by(["step", "prompt_id", "group"])
        .aggregate([("n", "sum"), ("c", "sum")])
        .rename_columns(["step", "prompt_id", "group", "n", "c"])
    )
    n, c = groups.column("n").to_numpy(), groups.column("c").to_numpy()
    groups = groups.append_column("signal", pa.array(((c > 0) & (c < n)).astype(np.int64)))
    return (
        groups.group_by(["step", "prompt_id"])
        .aggregate([("n", "sum"), ("c", "sum"), ("group", "count"), ("signal", "sum")])
        .rename_columns(["step", "prompt_id", "n", "c", "groups", "signal_groups"])
    )


def replay(
    log: pa.Table,
    policy_name: str,
    batch_size: int,
    *,
    seed: int = 0,
    G: int | None = None,
    prior_n=None,
    prior_c=None,
) -> dict:
    """Replay ``policy_name`` over a training log (docs/curriculum.md §7).

    At each step the policy picks ``batch_size`` prompts among those with an outcome at that step,
    knowing only the outcomes of what it picked before, and sees the logged outcome of each pick.
    ``signal_yield`` is the share of picked groups with ``0 < c < n`` (a picked prompt brings every
    group the log kept of it at that step, ``check_log``); ``coverage`` the share of the
    log's prompts picked at least once in its last ``COVERAGE_WINDOW`` steps. ``oracle`` sees each
    step's outcomes and takes its non-silent groups first (random among them): the scale's top.
    ``prior_n``, ``prior_c``: a profile's counts per prompt, aligned with the log's sorted prompt ids.
    """
    check_int("batch_size", batch_size, 1)
    table = check_log(log)
    if table.num_rows == 0:
        raise DatasetError("log: no rows")
    ids_sorted = sorted(set(table.column("prompt_id").to_pylist()))
    index = {p: i for i, p in enumerate(ids_sorted)}
    pid = np.array([index[p] for p in table.column("prompt_id").to_pylist()], dtype=np.int64)
    step = table.column("step").to_numpy()
    n_all = table.column("n").to_numpy().astype(float)
    c_all = table.column("c").to_numpy().astype(float)
    g_all = table.column("groups").to_numpy()
    live_all = table.column("signal_groups").to_numpy()
    order = np.lexsort((pid, step))
    pid, step, n_all, c_all = pid[order], step[order], n_all[order], c_all[order]
    g_all, live_all = g_all[order], live_all[order]
    steps, starts = np.unique(step, return_index=True)
    bounds = list(starts) + [len(step)]
    oracle = specs.spec_name(policy_name) == "oracle"
    policy = None if oracle else make_policy(policy_name, ids_sorted, prior_n, prior_c, seed=seed, G=G)
    if policy is not None and policy.max_groups > 1:
        raise ConfigError(
            f"policy {policy_name!r}: a log holds the groups each prompt had per step, so a replay cannot give a "
            "prompt more; multiplicity (max_groups) is measured on simulated truths (bench/multiplicity.py)"
        )
    rng = np.random.default_rng(seed)
    window_from = len(steps) - COVERAGE_WINDOW
    seen = np.zeros(len(ids_sorted), dtype=bool)
    picked_total = signal_total = 0
    for s in range(len(steps)):
        rows = np.arange(bounds[s], bounds[s + 1])
        cand = pid[rows]
        k = min(int(batch_size), len(cand))
        if oracle:
            live = live_all[rows] > 0
            key = np.where(live, 0.0, 1.0) + rng.random(len(rows))
            local = np.argsort(key)[:k]
        else:
            chosen = policy.choose_index(k, cand)
            local = np.searchsorted(cand, chosen)  # cand is sorted within the step
            policy.update_index(chosen, n_all[rows[local]], c_all[rows[local]], int(steps[s]))
        r = rows[local]  # a picked prompt brings every group it had at the step
        picked_total += int(g_all[r].sum())
        signal_total += int(live_all[r].sum())
        if s >= window_from:
            seen[pid[r]] = True
    return {
        "policy": policy_name,
        "default": policy_name == DEFAULT_POLICY,
        "signal_yield": signal_total / picked_total,
        "coverage": float(seen.mean()),
        "steps": len(steps),
        "batch_size": int(batch_size),
    }


# --- forecast ---------------------------------------------------------------------------------


def forecast(
    n: Sequence[float],
    c: Sequence[float],
    batch_size: int,
    *,
    G: int = DEFAULT_G,
    config: SignalConfig | None = None,
    draws: int = 32,
    seed: int = 0,
) -> dict:
    """Expected signal yield of a batch under uniform and under the default policy, from a profile alone.

    Uniform: the mean over prompts of the posterior non-silent probability ``1 - E[p^G] - E[q^G]``
    (under the policy's prior: the population's fitted on these counts, or Jeffreys').
    Default: its first batch averaged over ``draws`` seeds (nothing is picked yet, so every prompt is
    due and the coverage quota and the rest of the batch alike go by score), each picked prompt counted by its
    posterior non-silent probability. The
    default's later batches learn from their own outcomes, so this is what the profile alone promises,
    not what a replay measures.
    """
    config = config or SignalConfig(G=G)
    n, c = np.asarray(n, dtype=float), np.asarray(c, dtype=float)
    if n.shape != c.shape or n.ndim != 1 or len(n) == 0:
        raise ConfigError("forecast needs one (n, c) per prompt, at least one prompt")
    k = min(int(batch_size), len(n))
    ids = [str(i) for i in range(len(n))]
    # Each prompt's posterior non-silent probability under the policy's prior (population or Jeffreys').
    judge = SignalPolicy(ids, n, c, config=replace(config, explore="mean", objective="nonsilent"))
    ns = judge.scores(np.arange(len(n)))
    total = 0.0
    for r in range(draws):
        policy = judge._unused_copy(seed + r, config)  # as if built afresh with this seed: the same draws
        total += float(ns[policy.choose_index(k, np.arange(len(n)))].mean())
    uniform = float(ns.mean())
    default = total / draws
    return {
        "uniform": uniform,
        "default": default,
        "ratio": default / uniform if uniform > 0 else math.nan,
        "batch_size": k,
        "G": int(config.G),
        "prompts": len(n),
    }
