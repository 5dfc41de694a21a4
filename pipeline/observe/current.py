"""Each prompt's current difficulty from all its observations (``docs/observations.md``).

Training moves the policy, so an outcome drawn many steps ago says less about the prompt now than
one drawn at the last step. With a forgetting factor ``lambda`` in (0, 1], an observation of step
``s`` counts with weight ``w = lambda ** (T - s)``, ``T`` the latest step of the observation's own
source (``latest_steps``: one source's step numbers never discount another's; a profile or label,
measured before training, ages on the training clock), and the prompt's pass rate has the posterior

    Beta(a + sum w c, b + sum w (n - c)),

the conjugate update on discounted counts (``lambda = 1``: every outcome counts fully, the plain
pooled posterior). Everything reported is a posterior expectation: the mean, the central interval,
and the probability that a group of ``G`` rollouts is silent, ``E[p^G] + E[(1-p)^G]``.

Only the current policy's own outcomes are pooled by default (kinds ``profile`` and ``training``);
labels measured by other models stay apart unless asked for, and ``sources``/``models`` keep only
the named ones (a 135M model's profile and a 1.5B model's training rollouts are not one policy).
``FORGETTING`` is the one default of lambda: ``difficulty current``, the curricula and the report use it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline import prior, schema, stats
from pipeline.errors import ConfigError

# The forgetting factor every reader of observations defaults to: about ten steps of memory, which
# follows a policy that moves (docs/observations.md §2). Declared once; the others import it.
FORGETTING = 0.9

CURRENT = pa.schema(
    [
        pa.field("dataset", pa.string()),
        pa.field("prompt_id", pa.string()),
        pa.field("n_obs", pa.int64()),  # outcomes observed, undiscounted
        pa.field("c_obs", pa.int64()),
        pa.field("n_eff", pa.float64()),  # discounted: sum w n
        pa.field("c_eff", pa.float64()),
        pa.field("last_step", pa.int64()),
        pa.field("sources", pa.int32()),
        pa.field("post_mean", pa.float64()),
        pa.field("post_lo", pa.float64()),
        pa.field("post_hi", pa.float64()),
        pa.field("silent", pa.float64()),  # P(a group of group_size is all right or all wrong)
        pa.field("groups", pa.int64()),  # training groups observed (a row is a group), undiscounted
        pa.field("silent_groups", pa.int64()),  # of them all right or all wrong
    ]
)


@dataclass(frozen=True)
class CurrentConfig:
    """How the current difficulty is computed.

    Attributes:
        forgetting: lambda in (0, 1]; an observation ``k`` steps older than the latest counts
            ``lambda ** k`` (1: no forgetting).
        prior_a, prior_b: the Beta prior (Jeffreys' by default).
        group_size: G of the silent probability.
        level: the central credible interval's level.
        kinds: which kinds of observations are pooled (labels of other models are not, by default).
        sources, models: only these sources / models are pooled (empty: every one).
        simulated: the sources whose pass rates were made up (profile runs of the ``simulate``
            backend, ``record.simulated_sources``): pooled only where ``sources`` names them, so
            simulated rates never mix with a model's real outcomes unless asked.
    """

    forgetting: float = FORGETTING
    prior_a: float = 0.5
    prior_b: float = 0.5
    group_size: int = schema.DEFAULT_G
    level: float = 0.95
    kinds: tuple[str, ...] = ("profile", "training")
    sources: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    simulated: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not (isinstance(self.forgetting, int | float) and 0.0 < self.forgetting <= 1.0):
            raise ConfigError(f"forgetting={self.forgetting!r} is out of range: allowed (0, 1]")
        if not (self.prior_a > 0 and self.prior_b > 0):
            raise ConfigError(f"prior ({self.prior_a}, {self.prior_b}) must have both parameters > 0")
        if int(self.group_size) != self.group_size or self.group_size < 1:
            raise ConfigError(f"group_size={self.group_size!r} must be an integer >= 1")
        if not 0.0 < self.level < 1.0:
            raise ConfigError(f"level={self.level!r} is out of range: allowed (0, 1)")
        bad = [k for k in self.kinds if k not in schema.OBSERVATION_KINDS]
        if bad or not self.kinds:
            raise ConfigError(f"kinds {list(self.kinds)}: allowed a non-empty subset of {schema.OBSERVATION_KINDS}")
        for name in ("sources", "models", "simulated"):
            values = getattr(self, name)
            if isinstance(values, str) or not all(isinstance(v, str) and v for v in values):
                raise ConfigError(f"{name}={values!r} must be a tuple of names")


def pooled_observations(observations: pa.Table, config: CurrentConfig) -> pa.Table:
    """The rows ``config`` pools: its kinds, and its sources and models when it names any."""
    keep = pc.is_in(observations.column("kind"), pa.array(list(config.kinds)))
    made_up = [s for s in config.simulated if s not in config.sources]
    if made_up:
        keep = pc.and_(keep, pc.invert(pc.is_in(observations.column("source"), pa.array(made_up))))
    for column, wanted in (("source", config.sources), ("model", config.models)):
        if wanted:
            keep = pc.and_(keep, pc.fill_null(pc.is_in(observations.column(column), pa.array(list(wanted))), False))
    return observations.filter(keep)


def check_selection(observations: pa.Table, config: CurrentConfig) -> None:
    """``ConfigError`` naming a source or model of ``config`` that has no observation, or one whose
    kind is not pooled (a label without ``kinds`` holding ``label``), with the names there are."""
    for column, wanted in (("source", config.sources), ("model", config.models)):
        known = set(observations.column(column).drop_null().to_pylist())
        for value in wanted:
            if value not in known:
                shown = ", ".join(sorted(known)[:12]) or "none"
                raise ConfigError(f"{column} {value!r} has no observations; the {column}s there are: {shown}")
    if config.sources:
        chosen = observations.filter(pc.is_in(observations.column("source"), pa.array(list(config.sources))))
        kinds = dict(zip(chosen.column("source").to_pylist(), chosen.column("kind").to_pylist(), strict=True))
        for source, kind in sorted(kinds.items()):
            if kind not in config.kinds:
                raise ConfigError(
                    f"source {source!r} holds {kind} observations, which are pooled only with --with-labels"
                )


def _per_source(rows: pa.Table, pooled: bool) -> list[dict]:
    out = []
    for source in sorted(set(rows.column("source").to_pylist())):
        these = rows.filter(pc.equal(rows.column("source"), source))
        steps = these.column("step")
        out.append(
            {
                "source": source,
                "kind": these.column("kind")[0].as_py(),
                "models": sorted(set(these.column("model").drop_null().to_pylist())),
                "datasets": sorted(set(these.column("dataset").to_pylist())),
                "prompts": len(set(these.column("prompt_id").to_pylist())),
                "rollouts": int(pc.sum(these.column("n")).as_py() or 0),
                "steps": (pc.min(steps).as_py(), pc.max(steps).as_py()),
                "pooled": pooled,
            }
        )
    return out


def pooled_summary(observations: pa.Table, config: CurrentConfig) -> list[dict]:
    """What ``config`` pools, per source (its pooled rows): kind, models, datasets, prompts, rollouts
    and steps; then each source it leaves out whole, with ``pooled`` False."""
    pooled = pooled_observations(observations, config)
    used = set(pooled.column("source").to_pylist())
    left = observations.filter(pc.invert(pc.is_in(observations.column("source"), pa.array(sorted(used), pa.string()))))
    return _per_source(pooled, True) + _per_source(left, False)


def _weights(step: np.ndarray, latest: np.ndarray, forgetting: float) -> np.ndarray:
    if forgetting == 1.0:
        return np.ones(step.shape)
    return np.exp((latest - step) * math.log(forgetting))


SNAPSHOT_KINDS = ("profile", "label")  # step 0: measured before training, aged on the training clock


def _codes(values: pa.ChunkedArray | pa.Array) -> np.ndarray:
    return pc.dictionary_encode(values).combine_chunks().indices.to_numpy(zero_copy_only=False)


def latest_steps(obs: pa.Table) -> np.ndarray:
    """Each row's ``T``, the step its age is counted from (``docs/observations.md`` §2): the latest
    step of its own source in its dataset, so a source with other step numbers (or one wild step)
    never discounts another's outcomes. A profile or a label (step 0) was measured before training:
    it ages on the training clock, the latest step of the dataset's ``training`` sources (0 when
    there are none)."""
    step = obs.column("step").to_numpy().astype(float)
    pair = _codes(pc.binary_join_element_wise(obs.column("dataset"), obs.column("source"), "\x1f"))
    latest = np.full(int(pair.max()) + 1 if len(pair) else 0, -np.inf)
    np.maximum.at(latest, pair, step)
    out = latest[pair]
    dataset = _codes(obs.column("dataset"))
    kind = obs.column("kind")
    training = pc.equal(kind, "training").to_numpy(zero_copy_only=False)
    clock = np.zeros(int(dataset.max()) + 1 if len(dataset) else 0)
    np.maximum.at(clock, dataset[training], step[training])
    snapshot = pc.is_in(kind, pa.array(SNAPSHOT_KINDS)).to_numpy(zero_copy_only=False)
    out[snapshot] = np.maximum(out[snapshot], clock[dataset[snapshot]])
    return out


def current_difficulty(observations: pa.Table, config: CurrentConfig | None = None) -> pa.Table:
    """Per (dataset, prompt) the discounted counts and the posterior summaries (``CURRENT``)."""
    config = config or CurrentConfig()
    obs = pooled_observations(observations, config)
    if obs.num_rows == 0:
        return CURRENT.empty_table()
    step = obs.column("step").to_numpy().astype(float)
    w = _weights(step, latest_steps(obs), config.forgetting)
    n = obs.column("n").to_numpy().astype(float)
    c = obs.column("c").to_numpy().astype(float)
    # A training row is one group (observations §1); a profile's or a label's counts are not groups.
    training = pc.equal(obs.column("kind"), "training").to_numpy(zero_copy_only=False).astype(np.int64)
    grouped = (
        pa.table(
            {
                "dataset": obs.column("dataset"),
                "prompt_id": obs.column("prompt_id"),
                "source": obs.column("source"),
                "n": n.astype(np.int64),
                "c": c.astype(np.int64),
                "wn": w * n,
                "wc": w * c,
                "step": obs.column("step"),
                "group": training,
                "silent_group": training * ((c == 0) | (c == n)),
            }
        )
        .group_by(["dataset", "prompt_id"])
        .aggregate(
            [
                ("n", "sum"),
                ("c", "sum"),
                ("wn", "sum"),
                ("wc", "sum"),
                ("step", "max"),
                ("source", "count_distinct"),
                ("group", "sum"),
                ("silent_group", "sum"),
            ]
        )
        .sort_by([("dataset", "ascending"), ("prompt_id", "ascending")])
    )
    n_eff = grouped.column("wn_sum").to_numpy()
    c_eff = grouped.column("wc_sum").to_numpy()
    a = config.prior_a + c_eff
    b = config.prior_b + n_eff - c_eff
    lo, hi = stats.beta_interval(a, b, config.level)
    plus, minus = stats.silent_rates(n_eff, c_eff, config.group_size, config.prior_a, config.prior_b, posterior=True)
    return pa.Table.from_arrays(
        [
            grouped.column("dataset"),
            grouped.column("prompt_id"),
            grouped.column("n_sum"),
            grouped.column("c_sum"),
            pa.array(n_eff),
            pa.array(c_eff),
            grouped.column("step_max"),
            grouped.column("source_count_distinct").cast(pa.int32()),
            pa.array(a / (a + b)),
            pa.array(lo),
            pa.array(hi),
            pa.array(plus + minus),
            grouped.column("group_sum"),
            grouped.column("silent_group_sum"),
        ],
        schema=CURRENT,
    )


def _band(p: np.ndarray, lo: float, hi: float) -> np.ndarray:
    return np.where(p < lo, "hard", np.where(p > hi, "easy", "informative"))


def moved_prompts(
    observations: pa.Table,
    config: CurrentConfig | None = None,
    lo: float = schema.BAND_EDGES[0],
    hi: float = schema.BAND_EDGES[1],
) -> pa.Table:
    """Prompts whose band (hard below ``lo``, easy above ``hi``, informative between; by posterior
    mean) at their first observed step differs from their current band, among prompts observed
    again since: what became easy or hard."""
    config = config or CurrentConfig()
    observations = pooled_observations(observations, config)
    now = current_difficulty(observations, config)
    if now.num_rows == 0:
        return pa.table({"dataset": [], "prompt_id": [], "before": [], "now": [], "mean_before": [], "mean_now": []})
    # Each prompt's own first step: its band when it was first seen.
    ids = list(
        zip(observations.column("dataset").to_pylist(), observations.column("prompt_id").to_pylist(), strict=True)
    )
    steps = observations.column("step").to_pylist()
    first_of: dict[tuple[str, str], int] = {}
    for key, s in zip(ids, steps, strict=True):
        first_of[key] = min(first_of.get(key, s), s)
    earliest = pa.array([first_of[key] == s for key, s in zip(ids, steps, strict=True)])
    first = current_difficulty(observations.filter(earliest), replace(config, forgetting=1.0))
    before = {
        (d, p): m
        for d, p, m in zip(*(first.column(k).to_pylist() for k in ("dataset", "prompt_id", "post_mean")), strict=True)
    }
    keys = list(zip(now.column("dataset").to_pylist(), now.column("prompt_id").to_pylist(), strict=True))
    m_now = now.column("post_mean").to_numpy()
    m_before = np.array([before.get(k, np.nan) for k in keys])
    band_now, band_before = _band(m_now, lo, hi), _band(m_before, lo, hi)
    # Only prompts seen again after their first step: a prompt never seen since keeps its band
    # (its posterior only widens with forgetting; that is not a move).
    seen_later = np.array(
        [last > first_of[k] for k, last in zip(keys, now.column("last_step").to_pylist(), strict=True)]
    )
    keep = ~np.isnan(m_before) & (band_now != band_before) & seen_later
    idx = np.flatnonzero(keep)
    return pa.table(
        {
            "dataset": [keys[i][0] for i in idx],
            "prompt_id": [keys[i][1] for i in idx],
            "before": band_before[idx].tolist(),
            "now": band_now[idx].tolist(),
            "mean_before": m_before[idx],
            "mean_now": m_now[idx],
        }
    )


# The fitted prior's uncertainty in ``profile_vs_training``: the priors whose profile log-likelihood
# is this far below the maximum (``prior.plausible_priors``), the hedged plan's range (chi-square(1)'s
# 95% point over 2). A bin's largest move under them counts as one standard deviation: the range is
# along the one direction the counts identify worst, and stands in for the fit's other directions
# (at 0.5, a one-sd range, a profile of n = 16 still left a bin 2.96 sd out).
PRIOR_DROP = 1.92


def plausible_fits(fitted: prior.Prior, n: np.ndarray, c: np.ndarray) -> list[prior.Prior]:
    """Priors the profile's counts cannot tell from ``fitted`` (an ``auto`` mixture): each family the
    mixture gives at least ``prior.HEDGE_MIN_WEIGHT`` fitted alone (at a profile's n = 4 the weights of
    the Beta and the inflated Beta swing from one to the other between replicates of one dataset),
    and the inflated Beta's concentration at the ends of its range (``prior.plausible_priors`` at
    ``PRIOR_DROP``), in the mixture and alone."""
    out = list(prior.plausible_priors(fitted, n, c, PRIOR_DROP))
    fits = {"beta": prior.fit_prior, "inflated": prior.fit_inflated_prior, "grid": prior.fit_grid_prior}
    for family, fit in fits.items():
        if prior.HEDGE_MIN_WEIGHT <= fitted.family_weight(family) < 1.0:
            alone = fit(n, c)
            out.append(alone)
            out += prior.plausible_priors(alone, n, c, PRIOR_DROP)
    return out


def _bin_moments(W: np.ndarray, points: np.ndarray, prompt: np.ndarray, n: np.ndarray) -> dict[str, np.ndarray]:
    """Per prompt with groups (``prompt`` its index in ``W`` for each group, ``n`` the group's size) the
    predictive mean and variance of its correct answers and of its silent groups, given the posterior
    ``W`` over ``points``: a prompt's groups share one pass rate, so their noise adds within a prompt
    (``E[Var | p] + Var(E | p)``), not as independent groups."""
    k = W.shape[0]
    M = np.bincount(prompt, weights=n, minlength=k)  # rollouts per prompt
    Q = np.zeros((k, len(points)))  # expected silent groups per prompt at each node
    Qv = np.zeros((k, len(points)))  # their Bernoulli variance at each node
    for size in np.unique(n).tolist():
        q = points**size + (1.0 - points) ** size
        m = np.bincount(prompt[n == size], minlength=k).astype(float)
        Q += m[:, None] * q[None, :]
        Qv += m[:, None] * (q * (1.0 - q))[None, :]
    mean_p = W @ points
    var_p = W @ points**2 - mean_p**2
    silent = np.einsum("ij,ij->i", W, Q)
    return {
        "rollouts": M,
        "correct": M * mean_p,
        "correct_var": M * (W @ (points * (1.0 - points))) + M**2 * var_p,
        "silent": silent,
        "silent_var": np.einsum("ij,ij->i", W, Qv) + np.einsum("ij,ij->i", W, Q**2) - silent**2,
    }


def profile_vs_training(
    observations: pa.Table, profile: str, training: str, bins: int = 5, config: CurrentConfig | None = None
) -> pa.Table:
    """The offline profile's prediction against what training then drew: prompts grouped into
    ``bins`` equal-width bins of the profile's posterior mean (under the population prior fitted on
    the profile's counts as adaptive profiling fits it, ``prior.choose_prior``; not ``config``'s
    Beta prior); per bin the training groups (each training row is one group of its own size ``n``:
    a prompt given ``m`` groups in a step is ``m`` rows), the predicted and the observed pass rate,
    and the predicted and observed share of silent groups, each prediction with its standard
    deviation (``pass_rate_sd``, ``silent_sd``): the binomial noise of the groups drawn, the groups of
    one prompt sharing its pass rate, plus the fitted prior's own uncertainty, the bin's largest move
    under the priors the counts cannot tell from the fit (``plausible_fits``; at a profile's n = 4
    neither the family nor the inflated Beta's concentration is identified, and a bin's prediction
    moves with them). A calibrated profile has each bin within a few standard deviations."""
    config = config or CurrentConfig()
    src = observations.column("source")
    prof = observations.filter(pc.equal(src, profile))
    train = observations.filter(pc.equal(src, training))
    if prof.num_rows == 0 or train.num_rows == 0:
        raise ConfigError(
            f"need observations of both sources: {profile!r} has {prof.num_rows}, {training!r} {train.num_rows}"
        )
    # The profile's counts per prompt (its rows summed); the training groups of the prompts it has.
    prof_counts = prof.group_by("prompt_id").aggregate([("n", "sum"), ("c", "sum")])
    all_n = prof_counts.column("n_sum").to_numpy().astype(float)
    all_c = prof_counts.column("c_sum").to_numpy().astype(float)
    at = {pid: i for i, pid in enumerate(prof_counts.column("prompt_id").to_pylist())}
    rows_at = np.array([at.get(pid, -1) for pid in train.column("prompt_id").to_pylist()], dtype=np.int64)
    known = rows_at >= 0
    used, prompt = np.unique(rows_at[known], return_inverse=True)  # the profiled prompts training drew
    prompt = prompt.reshape(-1)
    n = train.column("n").to_numpy()[known].astype(np.int64)
    c = train.column("c").to_numpy()[known].astype(np.int64)
    # The population prior fitted on the profile's counts, not Jeffreys' per prompt: a posterior mean
    # binned and compared is calibrated only under the prior the pass rates were drawn from.
    fitted = prior.choose_prior(all_n, all_c)
    degree = 2 * int(n.max(initial=1))

    def moments(under: prior.Prior) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        points, W = prior.posterior_nodes(under, all_n[used], all_c[used], degree=degree)
        return W @ points, _bin_moments(W, points, prompt, n)

    mean, got = moments(fitted)
    others = [moments(p)[1] for p in plausible_fits(fitted, all_n, all_c)]
    bin_of = np.minimum((mean * bins).astype(int), bins - 1)  # per prompt
    silent = ((c == 0) | (c == n)).astype(float)
    out: dict[str, list] = {k: [] for k in ("bin_lo", "bin_hi", "prompts", "groups")}
    for name in ("predicted_pass_rate", "observed_pass_rate", "pass_rate_sd"):
        out[name] = []
    for name in ("predicted_silent", "observed_silent", "silent_sd"):
        out[name] = []
    group_bin = bin_of[prompt]
    for k in np.unique(bin_of).tolist():
        m, g = bin_of == k, group_bin == k
        groups, rollouts = int(g.sum()), float(got["rollouts"][m].sum())
        pred = {key: float(got[key][m].sum()) for key in ("correct", "silent")}
        spread = {
            key: max((float(o[key][m].sum()) - pred[key]) ** 2 for o in others) if others else 0.0
            for key in ("correct", "silent")
        }
        out["bin_lo"].append(k / bins)
        out["bin_hi"].append((k + 1) / bins)
        out["prompts"].append(int(m.sum()))
        out["groups"].append(groups)
        out["predicted_pass_rate"].append(pred["correct"] / rollouts)
        out["observed_pass_rate"].append(float(c[g].sum()) / rollouts)
        out["pass_rate_sd"].append(math.sqrt(float(got["correct_var"][m].sum()) + spread["correct"]) / rollouts)
        out["predicted_silent"].append(pred["silent"] / groups)
        out["observed_silent"].append(float(silent[g].sum()) / groups)
        out["silent_sd"].append(math.sqrt(float(got["silent_var"][m].sum()) + spread["silent"]) / groups)
    return pa.table(out)


def largest_deviation(table: pa.Table) -> float:
    """The largest ``|observed - predicted| / sd`` of a ``profile_vs_training`` table, over its bins'
    pass rates and silent shares: beyond about 3 the profile did not predict what training drew."""
    out = 0.0
    for name in ("pass_rate", "silent"):
        diff = pc.subtract(table.column(f"observed_{name}"), table.column(f"predicted_{name}")).to_numpy()
        out = max(out, float(np.max(np.abs(diff) / table.column(f"{name}_sd").to_numpy(), initial=0.0)))
    return out


def label_agreement(observations: pa.Table, first: str, second: str, level: float = 0.95) -> dict[str, float]:
    """How often two sources' pass rates (two models' labels, say) agree within binomial noise:
    per prompt in both, a two-proportion test at ``level`` (pooled rate; identical rates agree).
    Two sources measuring the same pass rates agree on about ``level`` of the prompts."""
    from statistics import NormalDist

    def rates(source: str) -> dict[str, tuple[int, int]]:
        t = observations.filter(pc.equal(observations.column("source"), source))
        out: dict[str, tuple[int, int]] = {}
        for pid, n, c in zip(*(t.column(k).to_pylist() for k in ("prompt_id", "n", "c")), strict=True):
            n0, c0 = out.get(pid, (0, 0))
            out[pid] = (n0 + n, c0 + c)
        return out

    x, y = rates(first), rates(second)
    both = sorted(x.keys() & y.keys())
    if not both:
        raise ConfigError(f"sources {first!r} and {second!r} share no prompt")
    z = NormalDist().inv_cdf(0.5 + level / 2)
    agree = 0
    for pid in both:
        (n1, c1), (n2, c2) = x[pid], y[pid]
        pooled = (c1 + c2) / (n1 + n2)
        diff = abs(c1 / n1 - c2 / n2)
        agree += diff <= z * math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2)) + 1e-12
    return {"prompts": len(both), "agree": agree, "share": agree / len(both), "level": level}
