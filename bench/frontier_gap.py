"""How much of the frontier's saving the adaptive pipeline realises, per truth (docs/adaptive.md §10).

For each truth of ``bench/truths.py``:

1. **The frontier**, exactly, with the truth held as the prior (``frontier.frontier``:
   ``frontier.one_sample_rule`` at each price, the Bayes-optimal priced rule, one sample per round,
   at prices from 0.016 down to 0.00006, and every prompt stopped at n_min): expected rollouts and
   misclassification per price, and the fixed-n curve ``M(n)`` (expected misclassification of a
   fixed n under the truth, each prompt in its most probable band).
2. **The pipeline**: per truth, ``--datasets`` datasets (2), each's rates drawn once, and per seed
   fresh samples of them (``--fresh-rates``: fresh rates every seed too, against the truth's own
   frontier, the design before), the rounds of the adaptive run in process
   (``frontier.simulate``: the prior fit and round rule of ``run.plan_next_round``), its rollouts per
   prompt, rounds, and misclassification (the expected one given each prompt's final counts under
   the truth, which averages out the coin flips of which prompts near an edge land on which side;
   the realised one against the drawn rates beside it).
   Each run is compared with the frontier and the fixed-n curve of its dataset's own rates (held on the
   grid, as ``real``'s are): a paired comparison, since the draw that puts more prompts near an edge
   moves a run and its frontier together; and the spread is what a user sees rerunning one dataset.
3. **The comparison**, per seed, then mean and spread over the seeds:
   - *share at equal misclassification*: the pipeline's saving ``1 - cost / n*`` (``n*`` the fixed n
     with its misclassification, log-n interpolation) over the frontier's saving at that
     misclassification (``1 - C_f / n*``, ``C_f`` the frontier's cost there);
   - *misclassification at equal cost*: the pipeline's, the frontier's and the fixed n's at the
     pipeline's cost, and the share of the fixed n's excess the pipeline removes,
     ``(M(cost) - mis) / (M(cost) - M_f(cost))`` (this one does not swing where ``M`` is flat).
   The cost spread is ``(max - min) / mean`` of the rollouts per prompt over one dataset's seeds (the
   widest of the datasets'); the loss
   spread the same of what the priced rule minimises, rollouts plus misclassification over the
   price (``loss``): where a stop sits near the rule's indifference, a seed's prior moves the
   rollouts and the misclassification in opposite directions, and the loss less.

    python bench/frontier_gap.py                          # every truth, 2 datasets x 5 seeds x 4,000 prompts
    python bench/frontier_gap.py --fresh-rates            # fresh rates every seed, against the truth's frontier
    python bench/frontier_gap.py --truths hard,edge-hard --seeds 6 --prompts 8000
    python bench/frontier_gap.py --round-rule double --target band:cost=0.001   # another rule
    python bench/frontier_gap.py --truth-as-prior        # every round under the truth: what the fit costs

4. **The verdict** against the bars of a share of at least ``SHARE_BAR`` and rollouts at most
   ``SPREAD_BAR`` apart, per truth; beside each share, the same seeds' share with every round decided
   under the truth, or the dataset's own rates (``--truth-as-prior``'s runs), so a share that misses
   says whether the fitted prior lost it or the run under the truth misses too (where the frontier
   saves little, the share is a ratio of small numbers and a few seeds cannot resolve it).
   ``--no-verdict`` skips those runs.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

# isort: split
import pipeline  # noqa: E402, F401  (first: it keeps OpenBLAS to one thread before numpy loads)

# isort: split
import numpy as np  # noqa: E402
import truths  # noqa: E402

from pipeline import adaptive, labelprior  # noqa: E402
from pipeline import frontier as fr  # noqa: E402
from pipeline import prior as priors  # noqa: E402

N_MIN, N_MAX = 4, 64
N_FIXED = 256  # the fixed-n curve goes past n_max: a run may misclassify less than a fixed n = 64
PRICES = fr.FRONTIER_PRICES
SHARE_BAR, SPREAD_BAR = 0.85, 0.10  # issue 32's bars: share of the frontier's saving, rollouts' spread
DATASET_SEED = 7_000  # a dataset's rates come from their own stream, apart from every seed's samples
LENGTH_SEED = 9_000  # and its prompts' answer lengths (``truths.LENGTHS``) from another


def frontier(prior: adaptive.Prior, target: adaptive.Target) -> tuple[list, np.ndarray, np.ndarray]:
    """The fixed-n curve ``(n, M(n), decided)`` for n = 1..N_FIXED, and the frontier's (cost,
    misclassification) points by price, sorted by cost (``frontier.frontier``)."""
    curve = [(n, *fr.fixed_n_expected(n, prior, target)) for n in range(1, N_FIXED + 1)]
    cost, err = fr.frontier(prior, target, N_MIN, N_MAX, PRICES)
    return curve, cost, err


def fixed_n_at(curve: list, mis: float) -> float | None:
    n, where = fr.log_n_crossing([n for n, _, _ in curve], [m for _, m, _ in curve], mis)
    return n if where == "inside" else None


def frontier_cost_at(fc: np.ndarray, fe: np.ndarray, mis: float) -> float:
    """``frontier.frontier_cost_at``, held at the frontier's end points outside its range (a seed that
    misclassifies less than the dearest price buys is compared with that price)."""
    cost, where = fr.frontier_cost_at(fc, fe, mis)
    return cost if cost is not None else float(fc[-1] if where == "below" else fc[0])


def frontier_mis_at(fc: np.ndarray, fe: np.ndarray, cost: float) -> float:
    """``frontier.frontier_mis_at``, held at the end points outside the frontier's range."""
    mis = fr.frontier_mis_at(fc, fe, cost)
    return mis if mis is not None else float(fe[-1] if cost > fc[-1] else fe[0])


def one_seed(
    truth: truths.Truth,
    N: int,
    seed: int,
    acfg: adaptive.AdaptiveConfig,
    truth_prior,
    held: bool = False,
    rates: np.ndarray | None = None,
    labels: np.ndarray | None = None,
    mode: str = "default",
    peers: bool = False,
) -> dict:
    """One run: fresh rates drawn from ``truth`` and their samples, or, given ``rates`` (one dataset),
    only fresh samples. ``mode`` ``labels``: the run decides with the label prior (``labelprior``) of
    the dataset's ``labels``. A labelled truth's misclassification is expected under each label's own
    rates (the dataset's prompts of that label, held on the grid), for every rule alike. ``peers``: the
    two published profiling rules at the default run's tokens (``peers_at_tokens``)."""
    rng = np.random.default_rng(seed)
    p = truth.draw(N, rng) if rates is None else rates
    outcomes = rng.random((N, acfg.n_max)) < p[:, None]
    if truth.labels is not None and labels is None:
        labels = truth.labels.draw(p, np.random.default_rng([seed, 3]))
    t = acfg.target
    cond = label_truth(p, labels, truth_prior) if labels is not None else None
    rounds = [0]

    def count(*a, **k):  # the rounds, by wrapping the round rule
        rounds[0] += 1
        return _next_round(*a, **k)

    _next_round = adaptive.next_round
    adaptive.next_round = count
    try:
        if mode == "labels":
            n, c, lp = labelprior.simulate(outcomes, labelprior.label_bins(labels), acfg)
            reported, method = labelprior.decide(n, c, lp, t), "labels"
            rounds[0] = rounds[0] // max(1, len(lp.priors))  # one call per bin and round
        else:
            n, c, prior = fr.simulate(outcomes, acfg, truth_prior if held else None)
            reported, method = adaptive.decide(n, c, prior, t).band, prior.method
    finally:
        adaptive.next_round = _next_round
    true_band = np.where(p <= t.lo, 0, np.where(p >= t.hi, 2, 1))
    out = {
        "cost": float(n.mean()),
        "rounds": rounds[0],  # round 0 and every later round (the last call finds nothing to do)
        "mis": mis_of(n, c, reported, truth_prior, cond, t),
        "realised": float((reported != true_band).mean()),
        "prior": method,
    }
    if peers:
        out.update(peers_at_tokens(p, outcomes, n, seed, acfg, truth_prior, cond))
    return out


def label_truth(p: np.ndarray, labels: np.ndarray, pooled) -> labelprior.LabelPriors:
    """The truth given each label: per label bin, the rates of the prompts that carry it, held on the
    grid (what the label prior can at best learn)."""
    bins = labelprior.label_bins(labels)
    parts = tuple(
        truths.Truth("bin", "bin", rates=tuple(p[bins == b].tolist())).as_prior() for b in range(bins.max() + 1)
    )
    return labelprior.LabelPriors(bins, parts, pooled)


def mis_of(n, c, reported, truth_prior, cond, target) -> float:
    """Expected misclassification given the final counts: under the truth, or given each prompt's label."""
    if cond is None:
        return fr.expected_misclassification(n, c, reported, truth_prior, target)
    probs = labelprior.band_posteriors(n, c, cond, target)
    return float(1.0 - probs[np.asarray(reported), np.arange(len(n))].mean())


# --- the peers at equal tokens ------------------------------------------------------------------------


def _fill(cum: np.ndarray, n: np.ndarray, order: np.ndarray, left: float) -> np.ndarray:
    """One more sample to each prompt of ``order`` in turn while the tokens ``left`` pay for it (a
    prefix of ``order``)."""
    order = order[n[order] < cum.shape[1] - 1]
    step = cum[order, n[order] + 1] - cum[order, n[order]]
    n = n.copy()
    n[order[np.cumsum(step) <= left]] += 1
    return n


def sgpo_at_tokens(cum: np.ndarray, budget: float, order: np.ndarray) -> np.ndarray:
    """sGPO's offline pass as a profiler: every prompt the same n, the largest whose tokens fit the
    budget, and one more for the prompts of ``order`` (a random order) while tokens are left."""
    per_n = cum.sum(axis=0)
    n0 = int(np.searchsorted(per_n, budget, side="right") - 1)
    n = np.full(len(cum), n0, np.int64)
    return _fill(cum, n, order, budget - per_n[n0])


def pilot_commit_at_tokens(cum: np.ndarray, c_pilot: np.ndarray, pilot: int, budget: float) -> np.ndarray:
    """Pilot-Commit as a profiler (``peers.pilot_commit``'s reading): a pilot of ``pilot`` samples
    each, then the tokens left committed to the prompts whose pilot was not silent, in equal numbers of
    samples (the most whose tokens fit), and one more for the highest pilot variance first."""
    N, top = cum.shape[0], cum.shape[1] - 1
    n = np.full(N, pilot, np.int64)
    live = (c_pilot > 0) & (c_pilot < pilot)
    if not live.any():
        live = np.ones(N, bool)
    left = budget - cum[np.arange(N), n].sum()
    idx = np.flatnonzero(live)
    spend = cum[idx][:, pilot:].sum(axis=0) - cum[idx, pilot].sum()  # equal shares m = 0, 1, ...
    m = int(np.searchsorted(spend, left, side="right") - 1)
    n[idx] += m
    left -= spend[m]
    ph = c_pilot / pilot
    order = idx[np.lexsort((idx, -(ph[idx] * (1 - ph[idx]))))]
    return _fill(cum, np.minimum(n, top), order, left)


def peers_at_tokens(p, outcomes, n_default, seed, acfg, truth_prior, cond) -> dict:
    """sGPO's single pass and Pilot-Commit on the same prompts and the same answers (the default's
    outcomes, extended to ``N_FIXED`` samples), at the tokens the default run spent: answer lengths
    from ``truths.LENGTHS`` (each prompt's right-answer mean from a stream of its own rates, so one
    dataset keeps them across seeds; each answer's length from the seed's). Each peer reports every
    prompt in its most probable band under the ``auto`` prior fitted to its own counts."""
    N = len(p)
    more = np.random.default_rng([seed, 1]).random((N, N_FIXED - outcomes.shape[1])) < p[:, None]
    full = np.concatenate([outcomes, more], axis=1)
    right_means = truths.LENGTHS.right_means(p, np.random.default_rng(LENGTH_SEED))
    tokens = truths.LENGTHS.draw(right_means, full, np.random.default_rng([seed, 2]))
    cum = np.concatenate([np.zeros((N, 1)), np.cumsum(tokens, axis=1)], axis=1)
    csum = np.concatenate([np.zeros((N, 1), np.int64), np.cumsum(full, axis=1)], axis=1)
    rows = np.arange(N)
    budget = float(cum[rows, n_default].sum())
    out = {"tokens": budget / N}
    order = np.random.default_rng([seed, 4]).permutation(N)
    t = acfg.target
    for name, n in (
        ("sgpo", sgpo_at_tokens(cum, budget, order)),
        ("pilot", pilot_commit_at_tokens(cum, csum[:, acfg.n_min], acfg.n_min, budget)),
    ):
        c = csum[rows, n]
        reported = adaptive.decide(n, c, priors.choose_prior(n, c), t).band
        out[f"{name}_cost"] = float(n.mean())
        out[f"{name}_tokens"] = float(cum[rows, n].sum()) / N
        out[f"{name}_mis"] = mis_of(n, c, reported, truth_prior, cond, t)
    return out


def compare(r: dict, curve: list, fc, fe) -> dict:
    cost, mis = r["cost"], r["mis"]
    n_star = fixed_n_at(curve, mis)
    out = dict(r)
    if n_star is not None:
        saving = 1 - cost / n_star
        front = 1 - frontier_cost_at(fc, fe, mis) / n_star
        out.update(n_star=n_star, saving=saving, frontier_saving=front, share=saving / front if front > 0 else math.nan)
    else:
        out.update(n_star=math.nan, saving=math.nan, frontier_saving=math.nan, share=math.nan)
    m_fixed, m_front = fr.fixed_n_mis_at(curve, cost), frontier_mis_at(fc, fe, cost)
    out.update(
        fixed_mis=m_fixed,
        frontier_mis=m_front,
        gain_share=(m_fixed - mis) / (m_fixed - m_front) if m_fixed > m_front else math.nan,
    )
    return out


def _spread(v: np.ndarray) -> float:
    """``(max - min) / mean`` over the seeds."""
    return float((v.max() - v.min()) / v.mean())


def _ms(v) -> str:
    v = np.asarray(v, float)
    return f"{np.nanmean(v):.2f} +- {np.nanstd(v, ddof=1):.2f}" if len(v) > 1 else f"{v[0]:.2f}"


def run_seeds(
    name: str,
    truth,
    prompts: int,
    seeds: int,
    acfg,
    tp,
    held: bool,
    curve,
    fc,
    fe,
    rates=None,
    labels=None,
    mode: str = "default",
    peers: bool = False,
) -> dict[str, np.ndarray]:
    """Seeds 1 to ``seeds`` of one truth (of one dataset of it, given its ``rates``), each compared with
    the frontier, column by column (the label prior's run of a seed sees the same samples as the
    default's)."""
    base = name.removesuffix("-labelled")  # a labelled truth's default runs are its unlabelled truth's
    runs = []
    for s in range(1, seeds + 1):
        r = one_seed(truth, prompts, 1000 * s + sum(map(ord, base)), acfg, tp, held, rates, labels, mode, peers)
        r = compare(r, curve, fc, fe)
        if peers:
            r["frontier_mis_at_peers"] = frontier_mis_at(fc, fe, r["cost"])
        runs.append(r)
    return {k: np.array([r[k] for r in runs], float) for k in runs[0] if k != "prior"}


def dataset(truth: truths.Truth, prompts: int, index: int) -> tuple[np.ndarray, np.ndarray | None, truths.Truth]:
    """Dataset ``index`` of a truth: its rates, drawn once, its labels (a labelled truth's, else
    None), and those rates as a truth of their own (held on the grid, as ``real``'s are), whose
    frontier is this dataset's."""
    rates = truth.draw(prompts, np.random.default_rng(DATASET_SEED + index))
    labels = (
        None if truth.labels is None else truth.labels.draw(rates, np.random.default_rng(DATASET_SEED + 100 + index))
    )
    return rates, labels, truths.Truth(truth.name, f"dataset {index} of {truth.text}", rates=tuple(rates.tolist()))


def loss_of(col: dict, target: adaptive.Target) -> np.ndarray:
    """What the priced rule minimises, per run: rollouts plus misclassification over the price."""
    return col["cost"] + col["mis"] / target.cost if target.cost > 0 else col["cost"]


def measure(
    name: str, truth, prompts: int, seeds: int, datasets: int, acfg, held: bool, verdict_runs: bool, peers: bool = True
):
    """The seeds' columns (every dataset's, end to end), the rollouts' and the loss's spread, with
    ``verdict_runs`` the same seeds' columns under the truth held (else None), and for a labelled
    truth the same seeds' columns with the label prior (else None).

    ``datasets`` 0: fresh rates every seed, each run against the truth's frontier. Otherwise each
    dataset's rates are drawn once and its seeds draw only the samples (what a user sees rerunning one
    dataset), each run against the frontier of that dataset's own rates (a paired comparison: which
    prompts a draw put near an edge moves the run and its frontier together); the spreads are the widest
    of any dataset's."""
    parts, spreads = [], []
    for rates, labels, tp_truth in (
        [(None, None, truth)] if datasets == 0 else [dataset(truth, prompts, d) for d in range(1, datasets + 1)]
    ):
        tp = tp_truth.as_prior()
        curve, fc, fe = frontier(tp, acfg.target)
        args = (name, truth, prompts, seeds, acfg, tp)
        col = run_seeds(*args, held, curve, fc, fe, rates, labels, peers=peers)
        ref = run_seeds(*args, True, curve, fc, fe, rates, labels) if verdict_runs else None
        lab = run_seeds(*args, False, curve, fc, fe, rates, labels, mode="labels") if truth.labels else None
        parts.append((col, ref, lab))
        spreads.append((_spread(col["cost"]), _spread(loss_of(col, acfg.target))))

    def joined(i):
        return {k: np.concatenate([p[i][k] for p in parts]) for k in parts[0][i]} if parts[0][i] is not None else None

    return joined(0), max(s for s, _ in spreads), max(s for _, s in spreads), joined(1), joined(2)


def peer_verdict(name: str, col: dict) -> str:
    """Where the default misclassifies more than a peer at equal tokens (paired over the seeds)."""
    said = []
    for peer, title in (("sgpo", "sGPO's single pass"), ("pilot", "Pilot-Commit")):
        d = col[f"{peer}_mis"] - col["mis"]  # > 0: the peer misclassifies more
        m, sd = float(np.mean(d)), float(np.std(d, ddof=1)) if len(d) > 1 else 0.0
        where = "BELOW" if m < 0 else "ahead of"
        said.append(f"{where} {title} (the peer's misclassification {100 * m:+.2f} +- {100 * sd:.2f} points)")
    return f"{name:20s} the default is " + "; ".join(said)


def verdict(name: str, col: dict, held: dict, spread: float) -> str:
    """One truth's line against the bars (``spread``: the rollouts', ``measure``'s widest)."""
    share = float(np.nanmean(col["share"]))
    ref = float(np.nanmean(held["share"]))
    said = f"{name:12s} share {_ms(col['share'])} (truth held {_ms(held['share'])}): "
    if share >= SHARE_BAR:
        said += "meets"
    elif ref < SHARE_BAR:
        said += "misses, and so does the same run under the truth itself: this scale cannot show the bar met"
    else:
        said += "misses; under the truth itself it meets: the fitted prior loses it"
    return said + f"; rollouts {spread:.1%} apart: {'meets' if spread <= SPREAD_BAR else 'misses'}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--truths", default=",".join([*truths.TRUTHS, *truths.LABELLED, "real"]))
    ap.add_argument("--prompts", type=int, default=4000)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--target", default="band")
    ap.add_argument("--round-rule", default=adaptive.DEFAULT_ROUND_RULE)
    ap.add_argument("--prior", default=priors.DEFAULT_PRIOR, choices=priors.PRIORS)
    ap.add_argument(
        "--truth-as-prior",
        action="store_true",
        help="decide every round under the truth itself, not the refitted prior: what fitting the prior costs",
    )
    ap.add_argument(
        "--datasets",
        type=int,
        default=2,
        help="datasets per truth, each drawn once and sampled by every seed (spreads: the widest of any dataset's)",
    )
    ap.add_argument(
        "--fresh-rates",
        action="store_true",
        help="draw fresh rates every seed and compare with the truth's own frontier (the design before --datasets)",
    )
    ap.add_argument("--no-verdict", action="store_true", help="skip the verdict and its runs under the truth")
    ap.add_argument("--no-peers", action="store_true", help="skip sGPO's single pass and Pilot-Commit at equal tokens")
    args = ap.parse_args()
    acfg = adaptive.AdaptiveConfig.from_specs(args.target, N_MIN, N_MAX, args.round_rule, prior=args.prior)
    start = time.perf_counter()
    design = (
        f"{args.seeds} seeds x {args.prompts:,} prompts, fresh rates every seed, against the truth's frontier"
        if args.fresh_rates
        else f"{args.datasets} datasets x {args.prompts:,} prompts per truth, {args.seeds} seeds of samples each, "
        "against each dataset's own frontier; spreads within a dataset, the widest"
    )
    print(
        f"{design}; adaptive {acfg.target.spec}, {acfg.rule.spec}, "
        f"prior {'the truth, held' if args.truth_as_prior else acfg.prior}; misclassification expected under "
        f"{'the truth' if args.fresh_rates else 'the dataset'} given the final counts"
    )
    head = (
        f"{'truth':20s} {'rollouts':>14s} {'spread':>7s} {'rounds':>6s} {'misclass %':>13s} {'realised %':>11s} "
        f"{'saved %':>13s} {'frontier %':>11s} {'share':>13s} {'fixed/front mis % at cost':>26s} {'gain share':>13s}"
        f" {'loss':>14s} {'spread':>7s}"
    )
    print(head)
    verdicts, rows, peer_rows, peer_verdicts = [], [], [], []

    def row(name, col, spread, loss_spread):
        loss = loss_of(col, acfg.target)
        print(
            f"{name:20s} {_ms(col['cost']):>14s} {spread:7.1%} {int(col['rounds'].max()):6d} "
            f"{_ms(100 * col['mis']):>13s} {np.mean(100 * col['realised']):11.2f} {_ms(100 * col['saving']):>13s} "
            f"{np.nanmean(100 * col['frontier_saving']):11.1f} {_ms(col['share']):>13s} "
            f"{np.mean(100 * col['fixed_mis']):12.2f} / {np.mean(100 * col['frontier_mis']):5.2f} "
            f"{_ms(col['gain_share']):>13s} {_ms(loss):>14s} {loss_spread:7.1%}",
            flush=True,
        )

    for name in args.truths.split(","):
        truth = truths.get(name)
        if truth is None:
            print(f"{name:12s} skipped: no stored profile at {truths.REAL_PROFILE.relative_to(ROOT)}")
            continue
        datasets = 0 if args.fresh_rates else args.datasets
        verdict_runs = not (args.truth_as_prior or args.no_verdict)
        col, spread, loss_spread, ref, lab = measure(
            name, truth, args.prompts, args.seeds, datasets, acfg, args.truth_as_prior, verdict_runs, not args.no_peers
        )
        if ref is not None:
            verdicts.append(verdict(name, col, ref, spread))
        row(name, col, spread, loss_spread)
        if lab is not None:
            row(f"{name[:13]} +labels", lab, _spread(lab["cost"]), _spread(loss_of(lab, acfg.target)))
            rows.append(
                f"{name:20s} share with the fitted prior {_ms(col['share'])}, with the label prior {_ms(lab['share'])} "
                f"(rollouts {_ms(col['cost'])} -> {_ms(lab['cost'])}, misclassification % {_ms(100 * col['mis'])} -> "
                f"{_ms(100 * lab['mis'])})"
            )
        if not args.no_peers:
            peer_rows.append(
                f"{name:20s} {_ms(col['tokens']):>16s} {_ms(col['cost']):>13s} {_ms(100 * col['mis']):>13s} "
                f"{np.mean(100 * col['frontier_mis_at_peers']):9.2f} {_ms(col['sgpo_cost']):>13s} "
                f"{_ms(100 * col['sgpo_mis']):>13s} {_ms(col['pilot_cost']):>13s} {_ms(100 * col['pilot_mis']):>13s}"
            )
            peer_verdicts.append(peer_verdict(name, col))
    if peer_rows:
        print(
            "\npeers at the default's tokens (answer lengths of truths.LENGTHS; each peer's bands the most probable "
            "under the auto prior of its own counts; misclassification % expected given the counts)"
        )
        print(
            f"{'truth':20s} {'tokens/prompt':>16s} {'default n':>13s} {'default %':>13s} {'front. %':>9s} "
            f"{'sGPO n':>13s} {'sGPO %':>13s} {'pilot n':>13s} {'pilot %':>13s}"
        )
        print("\n".join(peer_rows))
        print("\n".join(peer_verdicts))
    if rows:
        print("\nthe label prior (labelprior) on the labelled truths, the same seeds and samples:")
        print("\n".join(rows))
    if verdicts:
        bars = f"a share of at least {SHARE_BAR:g} of the frontier's saving, rollouts at most {SPREAD_BAR:.0%} apart"
        print(f"\nverdict: {bars}")
        print("\n".join(verdicts))
    print(f"total {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
