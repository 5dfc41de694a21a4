"""A prompt's price in tokens: its expected answer length, learned from its own answers under a
population prior (docs/tokens.md).

Answers differ in length by prompt (hard prompts run long, wrong answers longer than right ones), so
a rollout of one prompt does not cost what a rollout of another does. A prompt's mean answer length
``mu_i`` is drawn from the population's, ``mu_i ~ (m, tau^2)``, and its answers' lengths scatter
around it with the within-prompt variance ``sigma^2``. Given ``k_i`` answers with mean ``x_i``, the
linear Bayes (and, for normal lengths, exact) posterior mean of ``mu_i`` is

    E[mu_i | x_i] = m + B_i (x_i - m),        B_i = k_i tau^2 / (k_i tau^2 + sigma^2),

with ``m``, ``tau^2`` and ``sigma^2`` estimated from all prompts (method of moments: ``sigma^2`` the
pooled within-prompt variance, ``tau^2`` the spread of the prompt means above what ``sigma^2 / k_i``
explains). A prompt with no answer yet costs the population mean; one with many costs its own.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.errors import ConfigError

__all__ = ["LengthPrior", "expected_tokens", "fit_length_prior", "relative_price"]


@dataclass(frozen=True)
class LengthPrior:
    """The population of prompt mean lengths: mean ``m`` (tokens), between-prompt variance ``tau2``
    and the within-prompt variance of one answer ``sigma2``."""

    m: float
    tau2: float
    sigma2: float

    def shrinkage(self, answers: np.ndarray) -> np.ndarray:
        """``B_i``: the weight a prompt's own mean gets (0 with no answer, toward 1 with many)."""
        k = np.asarray(answers, float)
        if self.tau2 <= 0:
            return np.zeros_like(k)
        if self.sigma2 <= 0:
            return (k > 0).astype(float)
        return k * self.tau2 / (k * self.tau2 + self.sigma2)


def _as_arrays(answers, mean, sd):
    k = np.asarray(answers, float)
    x = np.asarray(mean, float)
    s = np.zeros_like(x) if sd is None else np.asarray(sd, float)
    if k.shape != x.shape or s.shape != x.shape:
        raise ConfigError(f"answers, mean and sd differ in shape: {k.shape}, {x.shape}, {s.shape}")
    if np.any(k < 0):
        raise ConfigError(f"answers must be >= 0, got {k[k < 0][0]:g}")
    measured = k > 0
    if np.any(~np.isfinite(x[measured])) or np.any(x[measured] < 0):
        bad = np.flatnonzero(measured & ~(np.isfinite(x) & (x >= 0)))[0]
        raise ConfigError(f"prompt {bad}: mean length {float(x[bad]):g} is not a length in tokens")
    return k, np.where(measured, x, 0.0), np.where(measured & np.isfinite(s), s, 0.0)


def fit_length_prior(answers, mean, sd=None) -> LengthPrior:
    """``LengthPrior`` by the method of moments from per-prompt answer counts ``answers`` (``k_i``),
    mean lengths ``mean`` and sample standard deviations ``sd`` (ddof 1; ignored where ``k_i < 2``).

    ``m`` is the answer-weighted mean length (the population's tokens per answer); ``sigma2`` the
    pooled within-prompt variance ``sum (k_i - 1) s_i^2 / sum (k_i - 1)``; ``tau2`` the prompt means'
    variance around ``m`` less the mean of ``sigma2 / k_i``, floored at 0."""
    k, x, s = _as_arrays(answers, mean, sd)
    measured = k > 0
    if not measured.any():
        return LengthPrior(float("nan"), 0.0, 0.0)
    m = float((k * x).sum() / k.sum())
    dof = np.clip(k - 1, 0, None)
    sigma2 = float((dof * s**2).sum() / dof.sum()) if dof.sum() > 0 else 0.0
    km, xm = k[measured], x[measured]
    if len(xm) < 2:
        return LengthPrior(m, 0.0, sigma2)
    spread = float(((xm - xm.mean()) ** 2).sum() / (len(xm) - 1))
    tau2 = max(0.0, spread - float((sigma2 / km).mean()))
    return LengthPrior(m, tau2, sigma2)


def expected_tokens(answers, mean, sd=None, prior: LengthPrior | None = None) -> np.ndarray:
    """Each prompt's expected answer length in tokens, ``E[mu_i | its answers]`` under ``prior``
    (fitted to these prompts when not given). A prompt with no answer gets ``prior.m``."""
    k, x, _ = _as_arrays(answers, mean, sd)
    prior = fit_length_prior(answers, mean, sd) if prior is None else prior
    b = prior.shrinkage(k)
    return prior.m + b * (x - prior.m)


def relative_price(answers, mean, sd=None, prior: LengthPrior | None = None) -> np.ndarray:
    """Each prompt's price of one rollout relative to the population's average answer: its expected
    tokens over ``prior.m`` (1 for every prompt when nothing was measured)."""
    k, _, _ = _as_arrays(answers, mean, sd)
    prior = fit_length_prior(answers, mean, sd) if prior is None else prior
    if not np.isfinite(prior.m) or prior.m <= 0:
        return np.ones_like(k)
    return expected_tokens(answers, mean, sd, prior) / prior.m
