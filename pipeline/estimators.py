"""GRPO-family estimators: advantages, exact implied weight ``w(p, G)`` and update mass.

Binary rewards; a group of ``G`` iid responses has ``k ~ Binomial(G, p)`` correct. The per-prompt
update is ``g = (1/G) sum_i A_i s_i``; the implied weight is defined by ``E[g] = w(p, G) grad p``
(``docs/estimators.md`` §1). For an advantage that depends only on the response's own
reward and on ``k`` (``A_plus(k)`` for a correct response, ``A_minus(k)`` for a wrong one), the
leave-one-out form

    w(p, G) = sum_{s=0}^{G-1} Binom(s; G-1, p) * [A_plus(s+1) - A_minus(s)]

is exact, a polynomial in ``p`` that is finite at ``p = 0`` and ``p = 1``. Every estimator here
computes ``weight`` with it from its own advantage table, and also exposes the closed form of the
spec's table (``weight_closed_form``) so the two can be checked against each other.

The registry is a plain dict, ``REGISTRY``, from name to estimator class. Specs are strings
``name`` or ``name:param=value[,param=value]`` (e.g. ``softmax_grpo:tau=0.3``) read by ``get``;
``ALIASES`` maps retired names to current ones.

ReCo's weight depends on the answers, not only on the rewards: ``reco_binary`` is its binary proxy
(every wrong answer pooled into one), and ``reco_answer_weight`` / ``reco_answer_weight_from_counts``
compute the answer-aware weight per prompt from answer distributions or histograms
(docs/estimators.md §6).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, fields
from typing import ClassVar, NamedTuple

import numpy as np

from pipeline import specs
from pipeline.checks import check_bool, check_choice, check_int, check_number
from pipeline.errors import ConfigError
from pipeline.stats import binom_pmf  # re-exported: the one binomial pmf lives in stats

__all__ = [
    "ALIASES",
    "DEFAULT_ESTIMATORS",
    "EXACT_COST_LIMIT",
    "REGISTRY",
    "AnswerAwareWeight",
    "Estimator",
    "answer_matrix",
    "binom_pmf",
    "expect_k",
    "get",
    "loo_weight",
    "parse_spec",
    "reco_answer_weight",
    "reco_answer_weight_from_counts",
]


def expect_k(phi: np.ndarray, G: int, p: np.ndarray | float) -> np.ndarray:
    """``E_{k ~ Bin(G, p)}[phi(k)]`` for a table ``phi`` of length ``G + 1``, vectorised over p."""
    return binom_pmf(G, p) @ np.asarray(phi, dtype=float)


def loo_weight(a_plus: np.ndarray, a_minus: np.ndarray, G: int, p: np.ndarray | float) -> np.ndarray:
    """Leave-one-out form of the implied weight (docs/estimators.md §1).

    Args:
        a_plus: ``A_plus(k)`` for k = 0..G (entry 0 unused).
        a_minus: ``A_minus(k)`` for k = 0..G (entry G unused).
        G: group size.
        p: pass rates.
    """
    d = np.asarray(a_plus, float)[1 : G + 1] - np.asarray(a_minus, float)[0:G]
    return binom_pmf(G - 1, p) @ d


def _pq(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(p, dtype=float)
    return p, 1.0 - p


def _check_G(G: int) -> int:
    if int(G) != G or G < 1:
        raise ConfigError(f"group size G={G!r} must be an integer >= 1")
    return int(G)


@dataclass(frozen=True)
class Estimator:
    """Base class: an advantage rule for binary rewards and what follows from it.

    Subclasses define ``advantage_table(G) -> (A_plus, A_minus)`` (arrays over k = 0..G).
    """

    name: ClassVar[str] = "base"
    zero_sum: ClassVar[bool] = True  # advantages sum to zero within every group

    # --- advantages -------------------------------------------------------------------------
    def advantage_table(self, G: int) -> tuple[np.ndarray, np.ndarray]:
        """``(A_plus, A_minus)`` over k = 0..G: the advantage of a correct / wrong response."""
        raise NotImplementedError

    def advantages(self, rewards: np.ndarray, answers: np.ndarray | None = None) -> np.ndarray:
        """Advantages of one group of binary rewards (shape ``(G,)``) or of a batch ``(B, G)``."""
        r = np.asarray(rewards)
        if r.ndim not in (1, 2):
            raise ConfigError(f"rewards must have shape (G,) or (B, G), got {r.shape}")
        if not np.isin(r, (0, 1)).all():
            raise ConfigError("rewards must be binary (0 or 1)")
        G = _check_G(r.shape[-1])
        a_plus, a_minus = self.advantage_table(G)
        k = r.sum(axis=-1, keepdims=True).astype(int)
        return np.where(r == 1, a_plus[k], a_minus[k])

    # --- weights ----------------------------------------------------------------------------
    def weight(self, p: np.ndarray | float, G: int) -> np.ndarray:
        """Exact implied weight ``w(p, G)`` (leave-one-out form; finite at p = 0 and 1)."""
        G = _check_G(G)
        a_plus, a_minus = self.advantage_table(G)
        return loo_weight(a_plus, a_minus, G, p)

    def weight_closed_form(self, p: np.ndarray | float, G: int) -> np.ndarray:
        """The spec's closed form for ``w(p, G)``, for 0 < p < 1 (used to cross-check)."""
        raise NotImplementedError

    def mass(self, p: np.ndarray | float, G: int) -> np.ndarray:
        """Update mass ``m(p, G) = w(p, G) p q`` (docs/estimators.md §1)."""
        p, q = _pq(p)
        return self.weight(p, G) * p * q

    def limit(self, p: np.ndarray | float) -> np.ndarray | None:
        """Large-G limit of ``w(p, G)``, or None when there is none."""
        return None

    @property
    def spec(self) -> str:
        """Canonical ``name[:param=value,...]`` string of this estimator."""
        params = [f"{f.name}={getattr(self, f.name)}" for f in fields(self)]
        return self.name + (":" + ",".join(params) if params else "")


@dataclass(frozen=True)
class GRPO(Estimator):
    """GRPO with the population std: ``A = (r - k/G) / sigma_k``, ``sigma_k = sqrt(k(G-k))/G``.

    ``w(p, G) = E_k[sigma_k] / (p q)``, ``-> 1/sqrt(pq)`` as G grows, ``sqrt(G-1)`` at p -> 0 or 1.
    Source: Bay and Yearick, arXiv 2607.00152 (docs/estimators.md §1).
    """

    name: ClassVar[str] = "grpo"

    def advantage_table(self, G: int) -> tuple[np.ndarray, np.ndarray]:
        k = np.arange(G + 1, dtype=float)
        sigma = np.sqrt(k * (G - k)) / G
        mixed = (k > 0) & (k < G)
        safe = np.where(mixed, sigma, 1.0)
        a_plus = np.where(mixed, (1 - k / G) / safe, 0.0)
        a_minus = np.where(mixed, -(k / G) / safe, 0.0)
        return a_plus, a_minus

    def weight_closed_form(self, p, G):
        p, q = _pq(p)
        k = np.arange(G + 1)
        return expect_k(np.sqrt(k * (G - k)) / G, G, p) / (p * q)

    def limit(self, p):
        p, q = _pq(p)
        with np.errstate(divide="ignore"):
            return 1.0 / np.sqrt(p * q)


@dataclass(frozen=True)
class GRPOBessel(Estimator):
    """GRPO with the Bessel std, as TRL and verl compute it: ``A = (r - k/G) / (sigma~_k + eps)``.

    ``sigma~_k = sigma_k sqrt(G/(G-1))`` (torch's ``.std()``, unbiased by default), so for G >= 2
    ``w = E_k[sigma_k^2 / (sigma~_k + eps)] / (p q)`` in both trainers; they differ in ``eps`` and in
    what a group of one does, hence the ``trainer`` parameter (docs/estimators.md §1):

    - ``trainer="trl"`` (default ``eps = 1e-4``): TRL's ``GRPOConfig.__post_init__`` raises
      ``ValueError`` for ``num_generations < 2``, so training never sees G = 1; its advantage code
      guards the one place it can occur (evaluation with ``num_generations_eval = 1``) by setting the
      std to 0, and there ``A = (r - r)/(0 + 1e-4) = 0``. Without that guard torch's Bessel std of one
      reward is NaN. Here G = 1 gives ``A = 0`` and ``w = 0``. Checked against huggingface/trl
      ``trl/trainer/grpo_config.py`` (commit 006d32c9) and a ``GRPOTrainer._generate_and_score_completions``
      of the same era (the ``num_generations > 1`` guard); older TRL (2025, before that guard) also
      refused ``num_generations < 2`` in the trainer. Confidence: high for the ValueError, medium for
      which release first added the eval guard.
    - ``trainer="verl"`` (default ``eps = 1e-6``): ``compute_grpo_outcome_advantage`` in
      ``verl/trainer/ppo/core_algos.py`` gives a group of one ``mean = 0`` and ``std = 1``, so
      ``A = r/(1 + eps)``: REINFORCE with ``w = 1/(1 + eps)`` (not zero-sum). The vectorised variant
      (``grpo_vectorized``, ``verl.utils.group_mean_std``) documents the same singleton fallback.
      Checked against volcengine/verl ``core_algos.py`` (commit 012be9d9). Confidence: high.

    Source: docs/estimators.md §1; arXiv 2607.00152.
    """

    name: ClassVar[str] = "grpo_bessel"
    eps: float | None = None  # None: the trainer's own default (TRL 1e-4, verl 1e-6)
    trainer: str = "trl"

    TRAINERS: ClassVar[dict[str, float]] = {"trl": 1e-4, "verl": 1e-6}

    def __post_init__(self) -> None:
        check_choice("grpo_bessel trainer", self.trainer, self.TRAINERS)
        if self.eps is None:
            object.__setattr__(self, "eps", self.TRAINERS[self.trainer])
        check_number("grpo_bessel eps", self.eps, 0)

    @property
    def spec(self) -> str:
        """``grpo_bessel:eps=<eps>`` for TRL (the label analyses stored before ``trainer`` existed),
        ``grpo_bessel:eps=<eps>,trainer=verl`` for verl."""
        base = f"{self.name}:eps={self.eps}"
        return base if self.trainer == "trl" else f"{base},trainer={self.trainer}"

    def _sigma_t(self, G: int) -> np.ndarray:
        k = np.arange(G + 1, dtype=float)
        if G == 1:
            return np.zeros(2)
        return np.sqrt(k * (G - k)) / G * math.sqrt(G / (G - 1))

    def advantage_table(self, G: int) -> tuple[np.ndarray, np.ndarray]:
        if G == 1 and self.trainer == "verl":
            return np.array([0.0, 1.0 / (1.0 + self.eps)]), np.zeros(2)  # mean 0, std 1
        k = np.arange(G + 1, dtype=float)
        mixed = (k > 0) & (k < G)
        den = np.where(mixed, self._sigma_t(G) + self.eps, 1.0)
        return np.where(mixed, (1 - k / G) / den, 0.0), np.where(mixed, -(k / G) / den, 0.0)

    def weight_closed_form(self, p, G):
        p, q = _pq(p)
        if G == 1:
            return np.full(p.shape, 1.0 / (1.0 + self.eps) if self.trainer == "verl" else 0.0)
        k = np.arange(G + 1)
        sig2 = k * (G - k) / G**2
        st = self._sigma_t(G)
        phi = np.where(sig2 > 0, sig2 / np.where(sig2 > 0, st + self.eps, 1.0), 0.0)
        return expect_k(phi, G, p) / (p * q)

    def limit(self, p):
        p, q = _pq(p)
        with np.errstate(divide="ignore"):
            return 1.0 / (np.sqrt(p * q) + self.eps)


@dataclass(frozen=True)
class DrGRPO(Estimator):
    """Dr. GRPO: ``A = r - k/G``; ``w = (G-1)/G``, flat in p (limit 1).

    Source: docs/estimators.md §1; arXiv 2607.00152.
    """

    name: ClassVar[str] = "dr_grpo"

    def advantage_table(self, G):
        k = np.arange(G + 1, dtype=float)
        return 1 - k / G, -k / G

    def weight_closed_form(self, p, G):
        return np.full(np.shape(p), (G - 1) / G)

    def limit(self, p):
        return np.ones(np.shape(p))


@dataclass(frozen=True)
class DAPO(Estimator):
    """DAPO: the GRPO advantage with unanimous groups (k in {0, G}) dropped.

    Per prompt its weight is GRPO's. ``mode="fill"``: new prompts fill the batch, a global
    rescale by ``1/(1 - D)`` (``dataset_scale``) with ``G/(1 - z)`` expected rollouts per kept
    group. ``mode="resample"``: the same prompt is resampled up to ``T`` times,
    ``w = w_GRPO (1 - z^T)/(1 - z)`` with ``G (1 - z^T)/(1 - z)`` expected rollouts, where
    ``z = p^G + q^G``. Source: docs/estimators.md §3; arXiv 2607.00152.
    """

    name: ClassVar[str] = "dapo"
    mode: str = "fill"
    T: int = 4

    def __post_init__(self) -> None:
        check_choice("dapo mode", self.mode, ("fill", "resample"))
        object.__setattr__(self, "T", check_int("dapo T", self.T, 1))

    def advantage_table(self, G):
        return GRPO().advantage_table(G)

    def resample_factor(self, p, G: int) -> np.ndarray:
        """``(1 - z^T)/(1 - z) = sum_{t<T} z^t``: expected tries of a prompt (1 for fill)."""
        p, q = _pq(p)
        if self.mode == "fill":
            return np.ones(p.shape)
        z = p**G + q**G
        return sum(z**t for t in range(self.T))

    def weight(self, p, G):
        return GRPO().weight(p, G) * self.resample_factor(p, G)

    def weight_closed_form(self, p, G):
        return GRPO().weight_closed_form(p, G) * self.resample_factor(p, G)

    def expected_rollouts(self, p, G: int) -> np.ndarray:
        """Expected rollouts spent on a prompt: ``G/(1 - z)`` per kept group (fill), or
        ``G (1 - z^T)/(1 - z)`` (resample)."""
        p, q = _pq(p)
        z = p**G + q**G
        if self.mode == "fill":
            with np.errstate(divide="ignore"):
                return G / (1 - z)
        return G * self.resample_factor(p, G)

    @property
    def spec(self) -> str:
        """``dapo`` (batch fill; T plays no part) or ``dapo:mode=resample,T=<T>``."""
        return "dapo" if self.mode == "fill" else f"dapo:mode=resample,T={self.T}"

    @staticmethod
    def dataset_scale(D: float) -> float:
        """Batch-fill rescale ``1/(1 - D)`` for a dataset zero-signal rate ``D``."""
        return math.inf if D >= 1 else 1.0 / (1.0 - D)

    def limit(self, p):
        return GRPO().limit(p)  # z -> 0 as G grows


@dataclass(frozen=True)
class RLOO(Estimator):
    """RLOO: ``A_i = r_i - mean of the other G-1 rewards``; ``w = 1`` (unbiased).

    With G = 1 the baseline is empty (0), so ``A = r`` (REINFORCE), still ``w = 1``.
    Source: docs/estimators.md §1.
    """

    name: ClassVar[str] = "rloo"

    def advantage_table(self, G):
        k = np.arange(G + 1, dtype=float)
        if G == 1:
            return np.ones(2), np.zeros(2)
        return 1 - (k - 1) / (G - 1), -k / (G - 1)

    def weight_closed_form(self, p, G):
        return np.ones(np.shape(p))

    def limit(self, p):
        return np.ones(np.shape(p))


@dataclass(frozen=True)
class Sign(Estimator):
    """Fixed-reference sign advantage ``A = 2r - 1``; ``w = 2``.

    It does not sum to zero: all-wrong groups still move (``q^(G-1)`` of the 2 comes from them,
    "pass@G failure descent"). Source: "Gradient Starvation in Binary-Reward GRPO",
    arXiv 2605.07689; docs/estimators.md §1.
    """

    name: ClassVar[str] = "sign"
    zero_sum: ClassVar[bool] = False

    def advantage_table(self, G):
        return np.ones(G + 1), -np.ones(G + 1)

    def weight_closed_form(self, p, G):
        return np.full(np.shape(p), 2.0)

    def limit(self, p):
        return np.full(np.shape(p), 2.0)


@dataclass(frozen=True)
class MaxRL(Estimator):
    """MaxRL paper estimator ``g = (1/k) sum_{correct} s_i`` (0 when k = 0), i.e. ``A_plus = G/k``.

    ``w = (1 - q^G)/p -> 1/p`` (the gradient of log p). Not zero-sum.
    Source: Tajwar et al., arXiv 2602.02710; docs/estimators.md §1.
    """

    name: ClassVar[str] = "maxrl"
    zero_sum: ClassVar[bool] = False

    def advantage_table(self, G):
        k = np.arange(G + 1, dtype=float)
        return np.where(k > 0, G / np.maximum(k, 1), 0.0), np.zeros(G + 1)

    def weight_closed_form(self, p, G):
        p, q = _pq(p)
        return (1 - q**G) / p

    def limit(self, p):
        p, _ = _pq(p)
        with np.errstate(divide="ignore"):
            return 1.0 / p


@dataclass(frozen=True)
class MaxRLImpl(Estimator):
    """MaxRL as implemented: ``A = (r - k/G)/(k/G)``, 0 when k = 0; ``w = (1 - q^(G-1))/p``.

    Source: Tajwar et al., arXiv 2602.02710; docs/estimators.md §1.
    """

    name: ClassVar[str] = "maxrl_impl"

    def advantage_table(self, G):
        k = np.arange(G + 1, dtype=float)
        pos = k > 0
        return np.where(pos, G / np.maximum(k, 1) - 1, 0.0), np.where(pos, -1.0, 0.0)

    def weight_closed_form(self, p, G):
        p, q = _pq(p)
        return (1 - q ** (G - 1)) / p

    def limit(self, p):
        return MaxRL().limit(p)


@dataclass(frozen=True)
class SoftmaxGRPO(Estimator):
    """SoftmaxGRPO: ``A_i = G softmax(r/tau)_i - 1``.

    With ``c = e^(1/tau)``: ``w = E_k[k (G c/(k c + G - k) - 1)] / (G p q)``; tau -> 0 gives
    MaxRL-as-implemented (``(1 - q^(G-1))/p``), tau -> inf gives Dr. GRPO / tau, and the large-G
    limit is ``(c - 1)/(1 - p + p c)``. Computed with ``delta = 1 - e^(-1/tau)`` so that no
    exponential overflows (tau = 1e-3 is fine) and large tau keeps full precision:
    ``A_plus(k) = (G-k) delta / (G - (G-k) delta)``, ``A_minus(k) = -k delta / (G - (G-k) delta)``.
    Source: "SoftmaxGRPO", arXiv 2608.09271; docs/estimators.md §1.
    """

    name: ClassVar[str] = "softmax_grpo"
    tau: float = 1.0

    def __post_init__(self) -> None:
        check_number("softmax_grpo tau", self.tau, 0, lo_open=True)

    @property
    def delta(self) -> float:
        return -math.expm1(-1.0 / self.tau)

    def advantage_table(self, G):
        k = np.arange(G + 1, dtype=float)
        d = self.delta
        den = G - (G - k) * d
        ok = k > 0  # k = 0: every response wrong, softmax uniform, A = 0
        den = np.where(ok, den, 1.0)
        return np.where(ok, (G - k) * d / den, 0.0), np.where(ok, -k * d / den, 0.0)

    def weight_closed_form(self, p, G):
        p, q = _pq(p)
        k = np.arange(G + 1, dtype=float)
        # k (G c/(k c + G - k) - 1) with c = e^(1/tau), written without c
        d = self.delta
        phi = np.where(k > 0, k * (G - k) * d / np.where(k > 0, G - (G - k) * d, 1.0), 0.0)
        return expect_k(phi, G, p) / (G * p * q)

    def limit(self, p):
        p, _ = _pq(p)
        # (c - 1)/(1 - p + p c) = delta / ((1 - delta)(1 - p) + p), divided through by c
        d = self.delta
        return d / ((1 - d) * (1 - p) + p)


@dataclass(frozen=True)
class GRPOPassK(Estimator):
    """verl's pass@k advantage (``grpo_passk``): only a group's best response gets credit.

    ``compute_grpo_passk_outcome_advantage`` (``verl/trainer/ppo/core_algos.py``, checked at
    volcengine/verl commit 012be9d9) takes the top two rewards of each group with ``torch.topk``,
    gives the top response ``r_max - r_second_max`` (divided by ``torch.std(rewards) + eps``, the
    Bessel std, when ``norm_adv_by_std_in_grpo``, read from the algorithm config, default True) and
    every other response 0; a group of fewer than 2 raises ``ValueError``. It cites Walder and
    Karkhanis, "Pass@K Policy Optimization", arXiv 2503.19595.

    With binary rewards the difference is non-zero only when exactly one response is correct
    (``k = 1``); then the Bessel std is ``1/sqrt(G)``, so ``A_plus(1) = a = 1/(1/sqrt(G) + eps)``
    (``a = 1`` with ``norm=False``) and ``A_plus(k) = 0`` for ``k >= 2``, ``A_minus = 0``. Ties at the top
    (``k >= 2`` or ``k = 0``) give a zero difference, so which index ``topk`` picks does not matter.
    The leave-one-out form gives ``w(p, G) = a q^(G-1)``, update mass ``a p q^G``; since
    ``d pass@G / dp = G q^(G-1)``, the expected update is ``(a/G) grad pass@G``: the gradient of
    pass@G, scaled. Not zero-sum. Large-G limit: 0 for p > 0 (the ``q^(G-1)`` decay beats the
    ``sqrt(G)`` of the std). G = 1 raises ``ConfigError`` as verl does.
    Source: docs/estimators.md §1.
    """

    name: ClassVar[str] = "grpo_passk"
    zero_sum: ClassVar[bool] = False
    eps: float = 1e-6
    norm: bool = True

    def __post_init__(self) -> None:
        check_number("grpo_passk eps", self.eps, 0)
        check_bool("grpo_passk norm", self.norm)

    def top_advantage(self, G: int) -> float:
        """``a = A_plus(1)``: ``1/(1/sqrt(G) + eps)`` with the std, 1 without."""
        return 1.0 / (1.0 / math.sqrt(G) + self.eps) if self.norm else 1.0

    def advantage_table(self, G):
        if G < 2:
            raise ConfigError(f"grpo_passk needs a group size G >= 2, got G={G} (verl raises for a group of one)")
        a_plus = np.zeros(G + 1)
        a_plus[1] = self.top_advantage(G)
        return a_plus, np.zeros(G + 1)

    def weight_closed_form(self, p, G):
        p, q = _pq(p)
        return self.top_advantage(G) * q ** (G - 1)

    def limit(self, p):
        p, _ = _pq(p)
        at_zero = (math.inf if self.eps == 0 else 1.0 / self.eps) if self.norm else 1.0
        return np.where(p > 0, 0.0, at_zero)


@dataclass(frozen=True)
class ReCoBinary(Estimator):
    """Binary-reward proxy of ReCo's occurrence normalisation (``reco_binary``; docs/estimators.md §6).

    ReCo reweights each response by the inverse of its answer's occurrence in the group, so every
    distinct answer gets the same total weight: ``u_i = G / (D n_{a_i})`` (mean 1), with ``D``
    distinct answers and ``n_a`` responses giving answer ``a``; the advantage is centred on the
    reweighted mean, ``A_i = u_i (r_i - rbar_u)``, ``rbar_u = (1/G) sum_j u_j r_j``, so it sums to
    zero. That is this project's reading of the ReCo abstract (the token-level variance ratio needs
    log-probs and is out of scope); ``advantages(rewards, answers)`` computes it for one group.

    The registry estimator is a **proxy**: with rewards only, the reward classes stand in for the
    answers (one correct answer, every wrong answer pooled into one). For ``0 < k < G`` that gives
    ``D = 2``, ``rbar_u = 1/2``, ``A_plus(k) = G/(4k)``, ``A_minus(k) = -G/(4(G-k))``, i.e.
    ``g = (1/4) (mean score of correct - mean score of wrong)``: the group-std identity with
    ``sigma^0`` where GRPO has ``sigma`` and Dr. GRPO ``sigma^2``. Hence
    ``w(p, G) = (1 - p^G - q^G) / (4 p q)``, update mass ``m = (1 - z_G(p))/4``, large-G limit
    ``1/(4 p q)``. The proxy never understates ReCo: with the answers a mixed group contributes
    ``x (1 - x) <= 1/4`` with ``x = D_C/D`` (the proxy always has ``x = 1/2``), so several distinct
    wrong answers make the weight smaller. The answer-aware weight is ``reco_answer_weight``
    (14% below this proxy at p = 0.3, G = 4 with seven equally likely wrong answers). It was
    registered as ``reco`` before; that spec still parses, with a ``DeprecationWarning``, to this
    estimator, whose label is ``reco_binary``.
    """

    name: ClassVar[str] = "reco_binary"

    def advantage_table(self, G):
        k = np.arange(G + 1, dtype=float)
        mixed = (k > 0) & (k < G)
        return (
            np.where(mixed, G / (4 * np.maximum(k, 1)), 0.0),
            np.where(mixed, -G / (4 * np.maximum(G - k, 1)), 0.0),
        )

    def advantages(self, rewards, answers=None):
        if answers is None:
            return super().advantages(rewards)
        r = np.asarray(rewards, dtype=float)
        a = np.asarray(answers)
        if r.ndim != 1 or a.shape != r.shape:
            raise ConfigError("reco_binary with answers takes one group: rewards and answers of shape (G,)")
        G = r.shape[0]
        _, inverse, counts = np.unique(a, return_inverse=True, return_counts=True)
        u = G / (len(counts) * counts[inverse])
        return u * (r - (u * r).mean())

    def weight_closed_form(self, p, G):
        p, q = _pq(p)
        return (1 - p**G - q**G) / (4 * p * q)

    def limit(self, p):
        p, q = _pq(p)
        with np.errstate(divide="ignore"):
            return 1.0 / (4 * p * q)


REGISTRY: dict[str, type[Estimator]] = {
    cls.name: cls
    for cls in (GRPO, GRPOBessel, DrGRPO, DAPO, RLOO, Sign, MaxRL, MaxRLImpl, SoftmaxGRPO, ReCoBinary, GRPOPassK)
}

#: Old names that still parse (with a ``DeprecationWarning``) so analyses stored under them load;
#: the estimator they give carries its new name in ``spec``, so nothing new is labelled the old way.
ALIASES: dict[str, str] = {"reco": "reco_binary"}

#: What ``analyze`` computes when no estimator list is given.
DEFAULT_ESTIMATORS: tuple[str, ...] = (
    "grpo",
    "grpo_bessel",
    "dr_grpo",
    "dapo",
    "dapo:mode=resample,T=4",
    "rloo",
    "sign",
    "maxrl",
    "maxrl_impl",
    "softmax_grpo:tau=1.0",
    "reco_binary",
)


def parse_spec(spec: str) -> tuple[str, dict[str, object]]:
    """Split ``name:param=value[,param=value]`` into the name and typed parameters (the
    grammar and its messages are :func:`pipeline.specs.parse_spec`'s).

    Raises:
        ConfigError: unknown name (the message lists the registry), unknown parameter or a value
            of the wrong type.
    """
    name = specs.spec_name(spec)
    if name in ALIASES:
        warnings.warn(
            f"estimator {name!r} is now {ALIASES[name]!r} (docs/estimators.md §6)", DeprecationWarning, stacklevel=3
        )
        name = ALIASES[name]
    if name not in REGISTRY:
        raise ConfigError(f"unknown estimator {name!r}; known: {', '.join(REGISTRY)}")
    _, params = specs.parse_spec(spec, "estimator", {f.name: f.type for f in fields(REGISTRY[name])})
    return name, params


def get(spec: str | Estimator) -> Estimator:
    """An estimator from a spec string such as ``"softmax_grpo:tau=0.3"`` (or pass one through)."""
    if isinstance(spec, Estimator):
        return spec
    name, params = parse_spec(spec)
    return REGISTRY[name](**params)


# --- answer-aware ReCo weight (docs/estimators.md §6) -------------------------------------------

#: ``method="auto"`` is exact for a prompt while its ``_exact_cost`` (array operations of the occupancy
#: recursion, about ``A (min(G, A) + 8) (G + 1)^2`` for A answers in a class) is at most this, and
#: Monte Carlo above it; each prompt is judged alone, so one wide prompt moves only itself. Measured
#: on a 2-core CPU: the exact path takes 0.2 ms a prompt at G = 16 with 16 answers, 5 ms at G = 64
#: with 64, 0.35 s at G = 256 with 64 (cost 3e8, where 20,000 Monte Carlo replicates take about as
#: long); G = 64 stays exact up to about 1,000 distinct answers, G = 256 up to about 60.
EXACT_COST_LIMIT: float = 3e8


class AnswerAwareWeight(NamedTuple):
    """Answer-aware ReCo weight per prompt (docs/estimators.md §6): arrays of shape ``(P,)``, or
    floats when one prompt was given as a 1-D row.

    ``method`` says how each prompt was computed, "exact" or "mc" (a string array, or a string for
    one prompt); ``se_weight`` and ``se_mass`` are the Monte Carlo standard errors (0 where exact).
    NaN rows: a prompt without answers, or (from counts) fewer samples than G for the unbiased
    estimate.
    """

    weight: np.ndarray
    mass: np.ndarray
    se_weight: np.ndarray
    se_mass: np.ndarray
    method: np.ndarray


def _f_table(dc: int, dw: int) -> np.ndarray:
    """``f(c, d) = c d / (c + d)^2``: a group's ``(1/G) sum_i r_i A_i`` with c distinct correct and
    d distinct wrong answers (0 when either is 0)."""
    c = np.arange(dc + 1, dtype=float)[:, None]
    d = np.arange(dw + 1, dtype=float)[None, :]
    tot = np.maximum(c + d, 1.0)
    return c * d / tot**2


def _log_comb(n: np.ndarray, j: np.ndarray) -> np.ndarray:
    """``log C(n, j)``, ``-inf`` outside ``0 <= j <= n``."""
    from scipy.special import gammaln

    n, j = np.broadcast_arrays(np.asarray(n, float), np.asarray(j, float))
    ok = (j >= 0) & (j <= n)
    out = np.full(n.shape, -np.inf)
    out[ok] = gammaln(n[ok] + 1) - gammaln(j[ok] + 1) - gammaln(n[ok] - j[ok] + 1)
    return out


def _xlogy(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``x log y`` with ``0 log 0 = 0`` (and ``x log 0 = -inf`` for ``x > 0``)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(x == 0, 0.0, x * np.log(y))


def _compact(x: np.ndarray) -> np.ndarray:
    """Columns sorted in decreasing order per row, all-zero trailing columns dropped."""
    x = -np.sort(-x, axis=1)
    keep = np.flatnonzero(x.any(axis=0))
    return x[:, : keep[-1] + 1] if len(keep) else x[:, :0]


def _occupancy(weights: np.ndarray, G: int, *, finite: bool) -> np.ndarray:
    """``T[p, d, t]``: probability that ``t`` draws from one answer class show ``d`` distinct answers.

    ``weights`` (P, A) are the class's answer probabilities (any scale) or, with ``finite``, its
    answer counts; the draws are iid from the normalised weights, or (``finite``) a uniformly random
    ``t``-subset of the counted samples, without replacement. Answers are added one at a time; with
    ``S`` the weight seen so far and ``w`` the new answer's, of ``t`` draws from the enlarged class
    ``j ~ Binomial(t, w/(S+w))`` (or ``Hypergeometric(S+w, w, t)``) go to the new answer, so

        T'[d, t] = K[t, t] T[d, t] + sum_{s < t} K[t, s] T[d-1, s],   K[t, s] = P(j = t - s).

    Every term is a probability, so nothing overflows. Cost: ``A (D+1) (G+1)^2`` per prompt with
    ``D = min(G, A)``. A row with no weight at all is given one answer (``d = min(t, 1)``), the only
    thing callers use from an empty class (one draw is one distinct answer).
    """
    P, A = weights.shape
    D = max(min(G, A), 1)
    t = np.arange(G + 1, dtype=float)
    j = t[:, None] - t[None, :]  # draws that go to the new answer, for (t, s)
    T = np.zeros((P, D + 1, G + 1))
    T[:, 0, 0] = 1.0
    seen = np.zeros(P)
    diag = np.arange(G + 1)
    log_c = _log_comb(t[:, None], j)[None]
    for a in range(A):
        w = weights[:, a]
        new = seen + w
        if finite:
            # C(w, j) C(S, t - j) / C(S + w, t); rows with t > S + w are impossible (-inf - -inf: masked)
            with np.errstate(invalid="ignore"):
                logk = (
                    _log_comb(w[:, None, None], j[None])
                    + _log_comb(seen[:, None, None], t[None, None, :])
                    - _log_comb(new[:, None, None], t[None, :, None])
                )
        else:
            rho = np.where(new > 0, w / np.where(new > 0, new, 1.0), 0.0)[:, None, None]
            with np.errstate(invalid="ignore"):  # -inf + inf where j < 0 and rho = 0: masked below
                logk = log_c + _xlogy(j[None], rho) + _xlogy(t[None, None, :], 1 - rho)
        K = np.exp(np.where(np.isnan(logk), -np.inf, logk))
        stay = K[:, diag, diag]  # j = 0: the new answer is not drawn
        K[:, diag, diag] = 0.0
        T_new = T * stay[:, None, :]
        T_new[:, 1:, :] += np.matmul(T[:, :-1, :], K.transpose(0, 2, 1))
        T = T_new
        seen = new
    empty = seen <= 0
    if empty.any():
        T[empty] = 0.0
        T[empty, 0, 0] = 1.0
        T[empty, 1, 1:] = 1.0
    return T


def _exact_cost(a_correct, a_wrong, G: int):
    """Array operations of the exact method for one prompt with these answer counts per class (ints
    or arrays of them, one per prompt)."""
    a = np.asarray([a_correct, a_wrong], dtype=float)
    cost = (a * (np.minimum(G, a) + 8) * (G + 1) ** 2).sum(axis=0)
    return float(cost) if cost.ndim == 0 else cost


def _poly_weights(G: int, p: np.ndarray) -> np.ndarray:
    """``omega[p, k] = C(G, k) p^(k-1) q^(G-k-1)`` for ``1 <= k <= G-1`` (0 otherwise), so that
    ``w = sum_k omega_k Phi(k)`` is finite at p = 0 and 1 (``omega p q`` is ``Binom(k; G, p)``)."""
    k = np.arange(G + 1, dtype=float)
    p = np.asarray(p, float)[:, None]
    log = _log_comb(float(G), k)[None] + _xlogy(k - 1, p) + _xlogy(G - k - 1, 1 - p)
    inner = (k >= 1) & (k <= G - 1)
    return np.where(inner[None], np.exp(np.where(inner[None], log, -np.inf)), 0.0)


def _phi_exact(correct: np.ndarray, wrong: np.ndarray, G: int, *, finite: bool) -> np.ndarray:
    """``Phi[p, k] = E[f(D_C, D_W)]`` given k correct and G - k wrong responses, k = 0..G."""
    P = correct.shape[0]
    width = max(min(G, correct.shape[1]), min(G, wrong.shape[1]), 1) + 6  # arrays of (G+1)^2 per row
    rows = max(1, int(4e6 // ((G + 1) ** 2 * width)))  # about 32 MB of float64 per chunk
    phi = np.empty((P, G + 1))
    for lo in range(0, P, rows):
        sl = slice(lo, min(P, lo + rows))
        Tc = _occupancy(correct[sl], G, finite=finite)
        Tw = _occupancy(wrong[sl], G, finite=finite)
        F = _f_table(Tc.shape[1] - 1, Tw.shape[1] - 1)
        phi[sl] = np.einsum("pck,cd,pdk->pk", Tc, F, Tw[:, :, ::-1], optimize=True)
    return phi


def _prefix_distinct(x: np.ndarray) -> np.ndarray:
    """Distinct values among the first t entries of each row, t = 0..G: shape ``x.shape[:-1] + (G+1,)``."""
    shape = x.shape
    x = x.reshape(-1, shape[-1])
    order = np.argsort(x, axis=1, kind="stable")
    xs = np.take_along_axis(x, order, axis=1)
    new_sorted = np.ones(xs.shape, dtype=bool)
    new_sorted[:, 1:] = xs[:, 1:] != xs[:, :-1]  # stable sort: a run starts at its earliest position
    first = np.empty_like(new_sorted)
    np.put_along_axis(first, order, new_sorted, axis=1)
    out = np.zeros((x.shape[0], shape[-1] + 1))
    out[:, 1:] = np.cumsum(first, axis=1)
    return out.reshape(*shape[:-1], shape[-1] + 1)


def _draw(probs: np.ndarray, size: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    """Answer indices drawn iid from each row of ``probs`` (any scale). A row without weight, or a
    class without columns, always gives answer 0: ``_occupancy``'s convention that draws from an
    empty class show one distinct answer (a class is empty only at p = 0 or 1, where just its first
    draw carries weight: k = 1, resp. G - k = 1)."""
    R, A = probs.shape
    if A == 0:
        return np.zeros((R, *size), dtype=np.intp)
    cum = np.cumsum(probs, axis=1)
    total = cum[:, -1:]
    cdf = np.where(total > 0, cum / np.where(total > 0, total, 1.0), 1.0)  # exactly 1 from the last answer on
    # the last column with weight: rounding in the shared searchsorted below never lands past it
    last = np.where(total[:, 0] > 0, A - 1 - np.argmax(probs[:, ::-1] > 0, axis=1), 0)
    offset = np.arange(R, dtype=float)[:, None]
    flat = (cdf + offset).ravel()  # increasing across rows, so one searchsorted serves every row
    u = rng.random((R, *size)) + offset[:, :, None]
    idx = np.searchsorted(flat, u.reshape(R, -1), side="right").reshape(R, *size)
    return np.minimum(idx - (np.arange(R) * A)[:, None, None], last[:, None, None])


def _weight_mc(
    correct: np.ndarray, wrong: np.ndarray, p: np.ndarray, G: int, n_mc: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Monte Carlo ``w`` and its standard error: each replicate draws G correct and G wrong answers
    iid from the two classes and scores ``sum_k omega_k f(D_C(first k), D_W(first G - k))``, an
    unbiased estimate of ``w`` (``E f(D_C(k), D_W(G - k)) = Phi(k)`` for every k at once)."""
    P = len(p)
    omega = _poly_weights(G, p)
    w = np.empty(P)
    se = np.empty(P)
    rows = max(1, int(4e6 // (n_mc * (G + 1))))
    for lo in range(0, P, rows):
        sl = slice(lo, min(P, lo + rows))
        dc = _prefix_distinct(_draw(correct[sl], (n_mc, G), rng))  # (R, B, G+1)
        dw = _prefix_distinct(_draw(wrong[sl], (n_mc, G), rng))[..., ::-1]  # column k: G - k draws
        tot = np.maximum(dc + dw, 1.0)
        vals = (omega[sl, None, :] * dc * dw / tot**2).sum(axis=-1)
        w[sl] = vals.mean(axis=1)
        se[sl] = vals.std(axis=1, ddof=1) / math.sqrt(n_mc)
    return w, se


def _split(x: np.ndarray, n_correct: np.ndarray | int) -> tuple[np.ndarray, np.ndarray]:
    """(correct columns, wrong columns) of each row, compacted; the first ``n_correct`` are correct."""
    A = x.shape[1]
    nc = np.asarray(n_correct)
    if nc.ndim > 1 or (nc.ndim == 1 and len(nc) != x.shape[0]):
        raise ConfigError(f"n_correct must be one integer or one per prompt ({x.shape[0]}), got shape {nc.shape}")
    nc = np.broadcast_to(nc, (x.shape[0],))
    if not np.all((nc == np.round(nc)) & (nc >= 0) & (nc <= A)):
        raise ConfigError(f"n_correct must be integers in 0..{A} (the number of leading correct columns)")
    is_correct = np.arange(A)[None, :] < nc[:, None]
    return _compact(np.where(is_correct, x, 0.0)), _compact(np.where(is_correct, 0.0, x))


def _rows(x: np.ndarray | list, what: str) -> tuple[np.ndarray, bool]:
    x = np.asarray(x, dtype=float)
    one = x.ndim == 1
    x = np.atleast_2d(x)
    if x.ndim != 2 or not np.isfinite(x).all() or (x < 0).any():
        raise ConfigError(f"{what} must be a finite, non-negative array of shape (A,) or (P, A)")
    return x, one


def _finish(weight, se, p, exact: np.ndarray, one: bool) -> AnswerAwareWeight:
    pq = p * (1 - p)
    out = AnswerAwareWeight(weight, weight * pq, se, se * pq, np.where(exact, "exact", "mc"))
    return _single(out) if one else out


def _single(out: AnswerAwareWeight) -> AnswerAwareWeight:
    """The one prompt of a one-row result, as floats and a string."""
    return AnswerAwareWeight(*(float(v[0]) for v in out[:4]), str(out.method[0]))


def _widths(x: np.ndarray) -> np.ndarray:
    return np.count_nonzero(x, axis=1)


def _choose(method: str, correct: np.ndarray, wrong: np.ndarray, G: int) -> np.ndarray:
    """Per prompt: True where the exact method is used."""
    if method not in ("auto", "exact", "mc"):
        raise ConfigError(f"method={method!r} must be 'auto', 'exact' or 'mc'")
    if method != "auto":
        return np.full(correct.shape[0], method == "exact")
    return np.asarray(_exact_cost(_widths(correct), _widths(wrong), G) <= EXACT_COST_LIMIT)


def _batches(correct: np.ndarray, wrong: np.ndarray, exact: np.ndarray) -> list[tuple[np.ndarray, bool]]:
    """Row indices computed together, and whether exactly: the Monte Carlo rows in one batch, the exact
    rows by the power of two at or above each class's answer count, since an exact batch costs as its
    widest row (a zero column is a step that changes nothing)."""
    out = [(np.flatnonzero(~exact), False)] if (~exact).any() else []
    if exact.any():
        rows = np.flatnonzero(exact)
        level = [np.ceil(np.log2(np.maximum(_widths(x[rows]), 1))).astype(np.int64) for x in (correct, wrong)]
        key = level[0] * 64 + level[1]
        out += [(rows[key == k], True) for k in np.unique(key)]
    return out


def reco_answer_weight(
    probs: np.ndarray | list,
    G: int,
    *,
    n_correct: int | np.ndarray = 1,
    method: str = "auto",
    n_mc: int = 20_000,
    seed: int | None = 0,
) -> AnswerAwareWeight:
    """Expected implied weight and update mass of ReCo's occurrence normalisation, given the answers.

    Args:
        probs: answer distribution of each prompt, shape ``(P, A)`` (or ``(A,)`` for one prompt, which
            returns floats): the probability of each distinct answer, the ``n_correct`` correct
            answers first, rows zero-padded to a common width; each row sums to 1 (an all-zero row,
            a prompt without answers, gives NaN). ``p`` is the sum of the correct columns.
        G: group size (>= 1).
        n_correct: how many leading columns of each row are correct answers (an int, or one per
            prompt). A correct answer with several forms ("1/2", "0.5") is several columns.
        method: "exact" (the occupancy recursion of ``_occupancy``), "mc" (Monte Carlo with
            ``n_mc`` replicates, seeded by ``seed``, standard error returned), or "auto": per prompt,
            exact while its ``_exact_cost`` is within ``EXACT_COST_LIMIT``, Monte Carlo otherwise.

    Definition (docs/estimators.md §6): a group of G iid responses with ``D_C`` distinct correct and
    ``D_W`` distinct wrong answers has ``(1/G) sum_i r_i A_i = D_C D_W / (D_C + D_W)^2`` under
    ``ReCoBinary.advantages(rewards, answers)``. Because those advantages sum to zero, the update's
    component along the move that raises every correct answer's probability in proportion (and lowers
    every wrong one in proportion) is ``w grad p`` with

        m = E[D_C D_W / (D_C + D_W)^2],   w = m / (p q)
          = sum_{k=1}^{G-1} C(G, k) p^(k-1) q^(G-k-1) Phi(k),   Phi(k) = E[f(D_C, D_W) | k correct],

    the same convention as every binary weight (a Bernoulli logit). With one correct and one wrong
    answer this is exactly ``reco_binary``'s ``(1 - p^G - q^G)/(4 p q)``; more wrong answers give
    less (at p = 0.3, G = 4 with seven equally likely wrong answers, 0.77 against 0.895). The weight
    is finite at p = 0 and p = 1.
    """
    G = _check_G(G)
    x, one = _rows(probs, "probs")
    total = x.sum(axis=1)
    known = total > 0
    if not np.all(np.abs(total[known] - 1.0) <= 1e-6):
        raise ConfigError("each row of probs must sum to 1 (or be all zero for a prompt without answers)")
    correct, wrong = _split(x, n_correct)
    p = np.clip(correct.sum(axis=1), 0.0, 1.0)
    exact = _choose(method, correct, wrong, G)
    if method != "exact" and (int(n_mc) != n_mc or n_mc < 2):
        raise ConfigError(f"n_mc={n_mc!r} must be an integer >= 2")
    weight, se = np.empty(len(p)), np.zeros(len(p))
    for rows, is_exact in _batches(correct, wrong, exact):
        c, w = _compact(correct[rows]), _compact(wrong[rows])
        if is_exact:
            weight[rows] = np.einsum("pk,pk->p", _poly_weights(G, p[rows]), _phi_exact(c, w, G, finite=False))
        else:
            weight[rows], se[rows] = _weight_mc(c, w, p[rows], G, int(n_mc), np.random.default_rng(seed))
    weight = np.where(known, weight, np.nan)
    se = np.where(known, se, np.nan)
    return _finish(weight, se, np.where(known, p, np.nan), exact, one)


def reco_answer_weight_from_counts(
    counts: np.ndarray | list,
    G: int,
    *,
    n_correct: int | np.ndarray = 1,
    estimate: str = "plugin",
    method: str = "auto",
    n_mc: int = 20_000,
    seed: int | None = 0,
) -> AnswerAwareWeight:
    """``reco_answer_weight`` estimated from a run's answer histograms (counts per distinct answer).

    ``counts`` is laid out as ``probs`` is (``answer_matrix`` builds it from ``prompt_stats``'
    histograms). ``estimate="plugin"`` evaluates the weight at the observed shares, as ``analyze``
    evaluates every binary weight at ``p_hat = c/n``. ``estimate="unbiased"`` (exact only) returns the
    U-statistic of the mass: ``f(D_C, D_W)`` averaged over every G-subset of the n samples, unbiased
    for ``m`` when ``n >= G`` (NaN otherwise), computed by ``_occupancy`` with hypergeometric steps;
    its weight is that mass over ``p_hat q_hat`` (NaN at ``p_hat`` in {0, 1}), a ratio, not unbiased.
    Both are docs/estimators.md §6.
    """
    G = _check_G(G)
    x, one = _rows(counts, "counts")
    n = x.sum(axis=1)
    if estimate == "plugin":
        with np.errstate(invalid="ignore", divide="ignore"):
            probs = np.where(n[:, None] > 0, x / np.where(n > 0, n, 1.0)[:, None], 0.0)
        out = reco_answer_weight(probs, G, n_correct=n_correct, method=method, n_mc=n_mc, seed=seed)
        return _single(out) if one else out
    if estimate != "unbiased":
        raise ConfigError(f"estimate={estimate!r} must be 'plugin' or 'unbiased'")
    if method == "mc":
        raise ConfigError("estimate='unbiased' is exact only; use method='exact' or 'auto'")
    if not np.all(x == np.round(x)):
        raise ConfigError("estimate='unbiased' needs integer counts")
    correct, wrong = _split(x, n_correct)
    n_c = correct.sum(axis=1)
    phi = np.empty((len(n), G + 1))
    for rows, _ in _batches(correct, wrong, np.ones(len(n), dtype=bool)):
        phi[rows] = _phi_exact(_compact(correct[rows]), _compact(wrong[rows]), G, finite=True)
    k = np.arange(G + 1, dtype=float)[None, :]
    enough = n >= G  # the U-statistic needs G of the n samples
    with np.errstate(invalid="ignore"):
        log_h = _log_comb(n_c[:, None], k) + _log_comb((n - n_c)[:, None], G - k) - _log_comb(n[:, None], float(G))
    h = np.where(enough[:, None], np.exp(np.where(enough[:, None], log_h, -np.inf)), 0.0)  # Hypergeom(k; n, n_C, G)
    mass = np.where(enough, np.einsum("pk,pk->p", h, phi), np.nan)
    p = np.where(n > 0, n_c / np.where(n > 0, n, 1.0), np.nan)
    pq = p * (1 - p)
    with np.errstate(invalid="ignore", divide="ignore"):
        weight = np.where(pq > 0, mass / np.where(pq > 0, pq, 1.0), np.nan)
    zeros = np.where(np.isnan(mass), np.nan, 0.0)
    out = AnswerAwareWeight(weight, mass, zeros, zeros, np.full(len(mass), "exact"))
    return _single(out) if one else out


def answer_matrix(
    n_prompts: int,
    parent: np.ndarray,
    counts: np.ndarray,
    correct_counts: np.ndarray,
    n_unanswered: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-prompt answer counts laid out for ``reco_answer_weight_from_counts``.

    Takes the histogram rows ``stats.answer_stats_from_histogram`` takes (``parent`` prompt index of
    each (prompt, distinct answer) row, its ``counts`` and ``correct_counts``) and returns
    ``(matrix, n_correct)``: shape ``(n_prompts, A)``, each prompt's correct answers first, then its
    wrong ones, zero-padded. An answer graded correct for some samples and wrong for others becomes
    two columns (ReCo, counting answer strings, would see one). ``n_unanswered`` (samples with no
    extracted answer, all wrong) becomes one more wrong column, as one shared "no answer" answer.
    """
    parent = np.asarray(parent, dtype=np.int64)
    counts = np.asarray(counts, dtype=float)
    cc = np.asarray(correct_counts, dtype=float)
    if parent.shape != counts.shape or cc.shape != counts.shape or np.any((cc < 0) | (cc > counts)):
        raise ConfigError("parent, counts and correct_counts must align, with 0 <= correct_counts <= counts")
    wc = counts - cc
    nu = np.zeros(n_prompts) if n_unanswered is None else np.asarray(n_unanswered, dtype=float)
    par = np.concatenate([parent[cc > 0], parent[wc > 0], np.flatnonzero(nu > 0)])
    val = np.concatenate([cc[cc > 0], wc[wc > 0], nu[nu > 0]])
    wrong = np.concatenate([np.zeros((cc > 0).sum()), np.ones((wc > 0).sum() + (nu > 0).sum())])
    order = np.lexsort((wrong, par))  # by prompt, correct first; stable within
    par, val, wrong = par[order], val[order], wrong[order]
    pos = np.arange(len(par)) - np.searchsorted(par, par, side="left")
    out = np.zeros((n_prompts, int(pos.max()) + 1 if len(pos) else 0))
    out[par, pos] = val
    n_correct = np.bincount(par[wrong == 0], minlength=n_prompts)
    return out, n_correct
