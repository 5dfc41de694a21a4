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
``name`` or ``name:param=value[,param=value]`` (e.g. ``softmax_grpo:tau=0.3``) read by ``get``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import ClassVar

import numpy as np

from pipeline.errors import ConfigError

__all__ = [
    "DEFAULT_ESTIMATORS",
    "REGISTRY",
    "Estimator",
    "binom_pmf",
    "expect_k",
    "get",
    "loo_weight",
    "parse_spec",
]


def binom_pmf(G: int, p: np.ndarray | float, size: int | None = None) -> np.ndarray:
    """Binomial(G, p) probabilities of k = 0..G, shape ``p.shape + (G + 1,)``.

    Exact at p = 0 and p = 1 (scipy returns the point masses there).
    """
    from scipy.stats import binom  # scipy costs seconds to import: only when used

    p = np.asarray(p, dtype=float)
    k = np.arange(G + 1 if size is None else size)
    return binom.pmf(k, G, p[..., None])


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
    """GRPO as TRL and verl compute it: ``A = (r - k/G) / (sigma~_k + eps)``, Bessel std.

    ``sigma~_k = sigma_k sqrt(G/(G-1))``; ``w = E_k[sigma_k^2 / (sigma~_k + eps)] / (p q)``.
    TRL uses eps = 1e-4, verl 1e-6. G = 1 has no std; its groups are silent (w = 0).
    Source: docs/estimators.md §1; arXiv 2607.00152.
    """

    name: ClassVar[str] = "grpo_bessel"
    eps: float = 1e-4

    def __post_init__(self) -> None:
        if not (self.eps >= 0 and math.isfinite(self.eps)):
            raise ConfigError(f"grpo_bessel eps={self.eps!r} must be a finite number >= 0")

    def _sigma_t(self, G: int) -> np.ndarray:
        k = np.arange(G + 1, dtype=float)
        if G == 1:
            return np.zeros(2)
        return np.sqrt(k * (G - k)) / G * math.sqrt(G / (G - 1))

    def advantage_table(self, G: int) -> tuple[np.ndarray, np.ndarray]:
        k = np.arange(G + 1, dtype=float)
        mixed = (k > 0) & (k < G)
        den = np.where(mixed, self._sigma_t(G) + self.eps, 1.0)
        return np.where(mixed, (1 - k / G) / den, 0.0), np.where(mixed, -(k / G) / den, 0.0)

    def weight_closed_form(self, p, G):
        p, q = _pq(p)
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
        if self.mode not in ("fill", "resample"):
            raise ConfigError(f"dapo mode={self.mode!r} must be 'fill' or 'resample'")
        if int(self.T) != self.T or self.T < 1:
            raise ConfigError(f"dapo T={self.T!r} must be an integer >= 1")
        object.__setattr__(self, "T", int(self.T))

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
        if not (self.tau > 0 and math.isfinite(self.tau)):
            raise ConfigError(f"softmax_grpo tau={self.tau!r} must be a finite number > 0")

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
class ReCo(Estimator):
    """Occurrence-normalised advantage (ReCo's response-level reweighting, docs/estimators.md §6).

    Each response is reweighted by the inverse of its answer's occurrence in the group, so every
    distinct answer gets the same total weight: ``u_i = G / (D n_{a_i})`` (mean 1), with ``D``
    distinct answers and ``n_a`` responses giving answer ``a``; the advantage is centred on the
    reweighted mean, ``A_i = u_i (r_i - rbar_u)``, ``rbar_u = (1/G) sum_j u_j r_j``, so it sums to
    zero. This is this project's reading of the ReCo abstract (the token-level variance ratio
    needs log-probs and is out of scope).

    With binary rewards only and no answers, the reward classes are the answers (a math problem
    has one correct answer; wrong ones are pooled). For ``0 < k < G`` that gives ``D = 2``,
    ``rbar_u = 1/2``, ``A_plus(k) = G/(4k)``, ``A_minus(k) = -G/(4(G-k))``, i.e.
    ``g = (1/4) (mean score of correct - mean score of wrong)``: the group-std identity with
    ``sigma^0`` where GRPO has ``sigma`` and Dr. GRPO ``sigma^2``. Hence
    ``w(p, G) = (1 - p^G - q^G) / (4 p q)``, update mass ``m = (1 - z_G(p))/4``, large-G limit
    ``1/(4 p q)``.
    """

    name: ClassVar[str] = "reco"

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
            raise ConfigError("reco with answers takes one group: rewards and answers of shape (G,)")
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
    cls.name: cls for cls in (GRPO, GRPOBessel, DrGRPO, DAPO, RLOO, Sign, MaxRL, MaxRLImpl, SoftmaxGRPO, ReCo)
}

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
    "reco",
)


def _convert(value: str, target: type) -> object:
    if target is int or target == "int":
        f = float(value)
        if not f.is_integer():
            raise ConfigError(f"{value!r} is not an integer")
        return int(f)
    if target is float or target == "float":
        return float(value)
    return value


def parse_spec(spec: str) -> tuple[str, dict[str, object]]:
    """Split ``name:param=value[,param=value]`` into the name and typed parameters.

    Raises:
        ValueError: unknown name (the message lists the registry), unknown parameter or a value
            of the wrong type.
    """
    text = spec.strip()
    name, _, rest = text.partition(":")
    name = name.strip()
    if name not in REGISTRY:
        raise ConfigError(f"unknown estimator {name!r}; known: {', '.join(REGISTRY)}")
    cls = REGISTRY[name]
    allowed = {f.name: f.type for f in fields(cls)}
    params: dict[str, object] = {}
    for item in filter(None, (s.strip() for s in rest.split(","))):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or key not in allowed:
            raise ConfigError(
                f"estimator {name!r}: bad parameter {item!r}; parameters: "
                f"{', '.join(allowed) or 'none'} (as {name}:param=value)"
            )
        try:
            params[key] = _convert(value.strip(), allowed[key])
        except ValueError as exc:
            raise ConfigError(f"estimator {name!r}: parameter {key}={value!r}: {exc}") from exc
    return name, params


def get(spec: str | Estimator) -> Estimator:
    """An estimator from a spec string such as ``"softmax_grpo:tau=0.3"`` (or pass one through)."""
    if isinstance(spec, Estimator):
        return spec
    name, params = parse_spec(spec)
    return REGISTRY[name](**params)
