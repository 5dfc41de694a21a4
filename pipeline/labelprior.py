"""The label prior: per-prompt priors from pass-rate labels a dataset already carries (docs/adaptive.md §2,
"The label prior").

A dataset may carry another model's pass rates (Big-Math's ``llama8b_solve_rate``, read as
``prior_c / prior_n``) or a difficulty rating. A label says where a prompt's own pass rate is likely
to be, before any of its samples: on a third of real prompts between 0.01 and 0.15, four samples a
prompt cannot tell the hard band from the informative one, and a prior that knows the label can.

The prompts are put in label bins as ``calibrate`` groups them (one bin per value up to
``LABEL_BINS`` values, else that many quantile bins), and each bin gets a grid prior: the population
prior (``prior.choose_prior``, on every prompt's counts, held on the grid) conditioned on the bin, by
EM on the bin's counts with a Dirichlet pull of ``LABEL_PULL`` prompts' worth towards the population
masses. The fixed point maximises

    sum_i log sum_k w_k p_k^c_i q_k^(n_i - c_i)  +  pull * sum_k w0_k log w_k

(``w0`` the population masses): a bin of few prompts keeps the population's shape, a bin of many
takes its own. No calibration of the label's scale is assumed: a bin's prior is whatever its counts
say, so a label may run either way (a solve rate, a level) and need not be on the pass rate's scale.
A prompt without a label gets the population prior.

Every round rule applies per bin (``next_round``): a prompt's posterior is its bin's, and the rules
are per prompt (the plan's cells split their prompts in the order given, within the bin).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pipeline import adaptive
from pipeline import prior as priors
from pipeline.errors import ConfigError
from pipeline.prior import Prior

__all__ = [
    "LABEL_BINS",
    "LABEL_PULL",
    "LabelPriors",
    "band_posteriors",
    "decide",
    "fit_bin_prior",
    "fit_label_priors",
    "label_bins",
    "next_round",
    "simulate",
]

# Bins of a label with more distinct values than this are its quantiles (calibrate's max_groups).
LABEL_BINS = 12
# The Dirichlet pull of a bin's masses towards the population's, in prompts: a bin of 20 prompts is
# half its own counts, half the population.
LABEL_PULL = 20.0


@dataclass(frozen=True)
class LabelPriors:
    """A run's per-prompt priors: ``bins[i]`` the label bin of prompt ``i`` (-1: no label),
    ``priors[b]`` bin ``b``'s grid prior, ``population`` the prior of the prompts without a label
    (and every bin's pull)."""

    bins: np.ndarray
    priors: tuple[Prior, ...]
    population: Prior

    def prior_of(self, b: int) -> Prior:
        return self.population if b < 0 else self.priors[b]

    def groups(self):
        """``(prior, prompt indices)`` for every bin that has prompts, and the unlabelled."""
        for b in np.unique(self.bins).tolist():
            yield self.prior_of(int(b)), np.flatnonzero(self.bins == b)


def label_bins(labels, bins: int = LABEL_BINS) -> np.ndarray:
    """Each prompt's label bin (-1 where the label is missing or not finite): one bin per distinct
    value when there are at most ``bins``, else ``bins`` quantile bins (fewer where quantiles tie), as
    ``calibrate`` groups a label.

    Raises:
        ConfigError: no prompt has a label.
    """
    x = np.array([math.nan if v is None else float(v) for v in labels], float)
    ok = np.isfinite(x)
    if not ok.any():
        raise ConfigError("the label prior needs a label: no prompt has one (prior_c / prior_n, or difficulty)")
    out = np.full(len(x), -1, np.int64)
    values = np.unique(x[ok])
    if len(values) <= bins:
        out[ok] = np.searchsorted(values, x[ok])
    else:
        edges = np.unique(np.quantile(x[ok], np.linspace(0, 1, bins + 1)))
        out[ok] = np.clip(np.searchsorted(edges, x[ok], side="right") - 1, 0, len(edges) - 2)
        out[ok] = np.unique(out[ok], return_inverse=True)[1]  # no empty bin between two full ones
    return out


def _on_grid(prior: Prior) -> tuple[np.ndarray, np.ndarray]:
    if prior.is_grid:
        return prior.grid()
    from scipy.special import betainc

    points = priors.grid_points()  # a Beta population prior, each grid point its cell's mass
    held = np.diff(betainc(prior.a, prior.b, priors.grid_cells(points)))
    return points, held / held.sum()


def fit_bin_prior(
    n, c, points: np.ndarray, w0: np.ndarray, pull: float = LABEL_PULL, max_sweeps: int = priors.EM_MAX_ITER
) -> np.ndarray:
    """The masses on ``points`` that maximise the bin's log-likelihood plus ``pull * sum w0 log w``: EM
    from ``w0``, ``w_k <- (sum_i W[i, k] + pull w0_k) / (N + pull)`` (each sweep raises the
    objective), until a sweep gains less than ``EM_TOL`` per prompt or after ``max_sweeps``."""
    n_u, c_u, mult = priors._counted_pairs(n, c)
    logL = priors.grid_likelihood(points, n_u, c_u)
    L = np.exp(logL - logL.max(axis=1, keepdims=True))
    N = float(mult.sum())
    w0 = np.asarray(w0, float)
    w = w0.copy()

    def objective(w):
        with np.errstate(divide="ignore"):
            return float(np.sum(mult * np.log(np.einsum("uk,k->u", L, w)))) + pull * float(
                np.sum(np.where(w0 > 0, w0 * np.log(np.maximum(w, 1e-300)), 0.0))
            )

    obj = objective(w)
    for _ in range(max_sweeps):
        f = np.einsum("uk,k->u", L, w)
        w = (w * np.einsum("uk,u->k", L, mult / f) + pull * w0) / (N + pull)
        w /= w.sum()
        new = objective(w)
        gain, obj = new - obj, new
        if gain < priors.EM_TOL * N:
            break
    return w


def fit_label_priors(n, c, bins, population: Prior | None = None, pull: float = LABEL_PULL) -> LabelPriors:
    """Every bin's prior from the counts so far (``population``: the population prior; default the
    ``auto`` prior of every prompt's counts). Deterministic for given counts and bins."""
    n, c, bins = (np.asarray(v, np.int64) for v in (n, c, bins))
    population = priors.choose_prior(n, c) if population is None else population
    points, w0 = _on_grid(population)
    out = []
    for b in range(int(bins.max()) + 1 if (bins >= 0).any() else 0):
        sel = (bins == b) & (n > 0)
        w = fit_bin_prior(n[sel], c[sel], points, w0, pull) if sel.any() else w0
        mean = float(w @ points)
        out.append(
            Prior(
                population.a,
                population.b,
                method="labels",
                n_prompts=int(sel.sum()),
                points=tuple(points.tolist()),
                weights=tuple(w.tolist()),
                selection=f"label bin {b}: {int(sel.sum())} prompts, mean {mean:.3f}",
            )
        )
    return LabelPriors(bins, tuple(out), population)


def next_round(
    n, c, lp: LabelPriors, config: adaptive.AdaptiveConfig, round_index: int | None = None, price=None
) -> np.ndarray:
    """``adaptive.next_round`` with each prompt under its bin's prior (prompts in the order given;
    ``price``, each prompt's relative price of a rollout when the run pays tokens)."""
    n, c = np.asarray(n, np.int64), np.asarray(c, np.int64)
    extra = np.zeros(len(n), np.int64)
    for prior, idx in lp.groups():
        p = None if price is None else np.asarray(price)[idx]
        extra[idx] = adaptive.next_round(n[idx], c[idx], prior, config, round_index=round_index, price=p)
    return extra


def band_posteriors(n, c, lp: LabelPriors, target: adaptive.Target) -> np.ndarray:
    """``adaptive.band_posteriors`` under each prompt's own prior: ``(3, prompts)``."""
    n, c = np.asarray(n, np.int64), np.asarray(c, np.int64)
    out = np.zeros((3, len(n)))
    for prior, idx in lp.groups():
        out[:, idx] = adaptive.band_posteriors(n[idx], c[idx], prior, target)
    return out


def decide(n, c, lp: LabelPriors, target: adaptive.Target) -> np.ndarray:
    """Each prompt's most probable band (an index into ``schema.BANDS``) under its own prior."""
    return np.argmax(band_posteriors(n, c, lp, target), axis=0)


def simulate(outcomes: np.ndarray, bins: np.ndarray, config: adaptive.AdaptiveConfig) -> tuple:
    """``frontier.simulate`` with the label prior: every round refits the population prior and the
    bins' (``fit_label_priors``) and applies the round rule per bin. Returns ``(n, c, LabelPriors)``."""
    if config.target.kind != "band":
        raise ConfigError("the label prior is measured on the band target")
    outcomes = np.asarray(outcomes, bool)
    csum = np.concatenate([np.zeros((len(outcomes), 1), np.int64), np.cumsum(outcomes, axis=1)], axis=1)
    rows = np.arange(len(outcomes))
    n = np.full(len(outcomes), config.n_min, np.int64)
    round_index = 1
    while True:
        c = csum[rows, n]
        lp = fit_label_priors(n, c, bins)
        extra = next_round(n, c, lp, config, round_index=round_index)
        if not extra.any():
            return n, c, lp
        n = n + extra
        round_index += 1
