"""Benchmark: allocation where greedy is not optimal, DAPO with resampling (docs/estimators.md §5).

Prompts with U-shaped pass rates (``Beta(0.4, 0.4)``), 16 observed samples each, a budget of
``--per-prompt`` expected rollouts per prompt, n in [2, ``--n-max``], ``dapo:mode=resample,T=4``.

1. Large instances (``--sizes``, default 1k, 10k, 250k prompts), point estimates and the posterior:
   the time of ``allocate`` (``method="auto"``, which takes the Lagrangian relaxation there) and the
   gap it certifies, absolute and relative to the value; the time is also given as a ratio to the
   fast GRPO allocation of the same prompts and budget in the same process (a concave value, the
   threshold method), the allocation that needs no relaxation.
2. Small instances where the exact programme fits (``--exact-sizes`` prompts, n_max 64): the value
   of the relaxation's allocation over the exact optimum, and its certified gap.
3. The peers at equal budget (``pipeline/peers.py``, docs/allocation-peers.md), on every truth of
   ``bench/truths.py``: ``--peer-prompts`` prompts drawn from the truth, a profile of ``--profile-n``
   samples each, the default policy's budget (16 rollouts per prompt, n in [2, 64]); every rule reads
   the profile, and its allocation is scored by GRPO's expected signal at the true pass rates (per
   prompt; mean and sd over ``--seeds``), with the verdict: where the default is below a peer.

4. Priced in tokens (``--sections tokens``; docs/tokens.md), on every truth with the answer-length
   model of ``bench/truths.py`` (``LENGTHS``: long answers on hard prompts, wrong ones 1.32x right
   ones): the same profile now also measures each answer's length, each prompt's price is its
   expected tokens per rollout (``tokens.expected_tokens`` of its 8 lengths), and every rule spends
   the same expected tokens, what G = 8 rollouts per prompt cost: uniform, the default priced in
   rollouts (at the largest rollout budget that fits, ``peers.at_tokens``), the default priced in
   tokens, and the peers (each at the largest rollout budget that fits). Per rule: GRPO's expected
   signal per prompt at the true rates, the true tokens spent over the budget (the answer lengths'
   true means), the signal per 1M true tokens over the rollout-priced default's, and, for the
   token-priced default, the tokens it needs to reach the rollout-priced default's signal and the
   uniform's (the token saving at equal value; bisection on its budget, 0.1% steps).

    PYTHONPATH=$PWD python bench/allocation.py [--sizes 1000,10000,250000] [--exact-sizes 20,50,100]
        [--sections timing,exact,peers,tokens] [--peer-prompts 2000] [--profile-n 8] [--seeds 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import truths  # noqa: E402

from pipeline import allocate as alloc  # noqa: E402
from pipeline import peers, tokens  # noqa: E402

SPEC = "dapo:mode=resample,T=4"


def instance(N: int, seed: int = 0, n_obs: int = 16) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    p = rng.beta(0.4, 0.4, N)
    return np.full(N, n_obs), rng.binomial(n_obs, p)


def timed(n, c, cfg) -> tuple[alloc.Allocation, float]:
    t0 = time.perf_counter()
    res = alloc.allocate(n, c, cfg)
    return res, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,10000,250000")
    ap.add_argument("--exact-sizes", default="20,50,100")
    ap.add_argument("--per-prompt", type=int, default=16)
    ap.add_argument("--n-max", type=int, default=512)
    ap.add_argument(
        "--sections", default="timing,exact,peers,tokens", help="which of timing, exact, peers, tokens to run"
    )
    ap.add_argument("--peer-prompts", type=int, default=2000)
    ap.add_argument("--profile-n", type=int, default=8)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--truths", default=None, help="comma-separated subset of " + ", ".join([*truths.TRUTHS, "real"]))
    args = ap.parse_args()
    sections = set(args.sections.split(","))
    if "timing" in sections or "exact" in sections:
        timed(*instance(10), alloc.AllocationConfig(budget=160, n_max=64, posterior=True))  # imports, caches
    if "timing" in sections:
        timing(args)
    if "exact" in sections:
        exact(args)
    if "peers" in sections:
        report_peers(run_peers(args))
    if "tokens" in sections:
        report_tokens(run_tokens(args))


def _truths(args):
    """``(name, truth)`` of every truth asked for (``--truths``, else all and ``real``), skipping
    ``real`` without its stored profile."""
    names = [*truths.TRUTHS, "real"] if args.truths is None else args.truths.split(",")
    for name in names:
        truth = truths.get(name)
        if truth is not None:
            yield name, truth


def run_peers(args) -> dict:
    """Per truth, per rule: GRPO's expected signal per prompt at the true pass rates, one value per seed."""
    out: dict = {}
    for name, truth in _truths(args):
        rows: dict[str, list[float]] = {}
        for seed in range(args.seeds):
            rng = np.random.default_rng(seed)
            p = truth.draw(args.peer_prompts, rng)
            n = np.full(len(p), args.profile_n)
            c = rng.binomial(args.profile_n, p)
            config = alloc.default_config(len(p))
            own = alloc.allocate(n, c, config)
            rules = {"default": own.n, "uniform": own.uniform_n}
            rules.update({peer: peers.peer_allocation(peer, n, c, config) for peer in peers.PEERS})
            for rule, alloc_n in rules.items():
                assert alloc_n.sum() <= config.budget
                rows.setdefault(rule, []).append(peers.value(n, c, alloc_n, config, p_true=p) / len(p))
        out[f"{name} ({truth.text})"] = rows
    return out


def report_peers(out: dict) -> list[tuple[str, str]]:
    """Print each truth's table and verdict; return the (truth, peer) pairs where a peer's mean is
    above the default's."""
    print(
        "\npeers at equal budget: GRPO expected signal per prompt at the true pass rates "
        "(default policy's budget, 16/prompt; mean +- sd over seeds, and the ratio to the default per seed)"
    )
    below = []
    for truth, rows in out.items():
        d = np.array(rows["default"])
        print(f"\n== {truth} ==")
        for rule, vals in rows.items():
            v = np.array(vals)
            r = v / d  # per seed: the same prompts and profile for every rule
            print(f"  {rule:14s} {v.mean():.5f} +- {v.std():.5f}   x default {r.mean():.4f} +- {r.std():.4f}")
        beaten = [r for r, vals in rows.items() if r != "default" and np.mean(vals) > d.mean() * (1 + 1e-12)]
        below += [(truth, r) for r in beaten]
        print(f"  default: {'on or above every rule' if not beaten else 'below ' + ', '.join(beaten)}")
    print(f"\ndefault on or above every peer on every truth: {'yes' if not below else 'NO'}")
    return below


def _profile_lengths(p: np.ndarray, profile_n: int, rng: np.random.Generator):
    """A profile of ``profile_n`` answers per prompt with their lengths: ``(c, price, true_length)``,
    the price each prompt's expected tokens per rollout from its own answers under the run's prior."""
    right_means = truths.LENGTHS.right_means(p, rng)
    correct = rng.random((len(p), profile_n)) < p[:, None]
    lengths = truths.LENGTHS.draw(right_means, correct, rng)
    k = np.full(len(p), profile_n)
    price = tokens.expected_tokens(k, lengths.mean(axis=1), lengths.std(axis=1, ddof=1))
    return correct.sum(axis=1), price, truths.LENGTHS.expected(p, right_means)


def _tokens_needed(n, c, config, price, p_true, target: float, steps: int = 10) -> float:
    """The smallest token budget (a fraction of ``config.budget``, to 0.1%) at which the allocation
    priced in tokens reaches ``target`` signal at the true rates (bisection; 1 if only the whole does)."""
    lo, hi = float(config.n_min * price.sum()) / config.budget, 1.0
    for _ in range(steps):
        mid = (lo + hi) / 2
        cfg = dataclasses.replace(config, budget=int(mid * config.budget))
        got = peers.value(n, c, alloc.allocate(n, c, cfg, price=price).n, config, p_true=p_true)
        lo, hi = (lo, mid) if got >= target else (mid, hi)
    return hi


def run_tokens(args) -> dict:
    """Per truth, per rule and seed: (signal per prompt, true tokens / budget, signal per 1M true
    tokens); and per seed the token-priced default's share of the budget that reaches the
    rollout-priced default's and the uniform's signal."""
    out: dict = {}
    for name, truth in _truths(args):
        rows: dict[str, list[tuple[float, float, float]]] = {}
        need: dict[str, list[float]] = {"default (rollouts)": [], "uniform": []}
        for seed in range(args.seeds):
            rng = np.random.default_rng(seed)
            p = truth.draw(args.peer_prompts, rng)
            N = len(p)
            n = np.full(N, args.profile_n)
            c, price, true_length = _profile_lengths(p, args.profile_n, rng)
            rollouts = alloc.default_config(N)
            budget = alloc.token_budget(price)
            priced = dataclasses.replace(rollouts, budget=budget, price_unit="tokens")
            own = alloc.allocate(n, c, priced, price=price)

            def by_rollouts(b: int, rollouts=rollouts, n=n, c=c) -> np.ndarray:
                return alloc.allocate(n, c, dataclasses.replace(rollouts, budget=b)).n

            rules = {
                "uniform": own.uniform_n,
                "default (rollouts)": peers.at_tokens(
                    by_rollouts, price, budget, rollouts.n_min * N, rollouts.n_max * N
                ),
                "default (tokens)": own.n,
            }
            rules.update({peer: peers.peer_allocation(peer, n, c, priced, price=price) for peer in peers.PEERS})
            for rule, alloc_n in rules.items():
                assert alloc_n @ price <= budget * (1 + 1e-12), rule
                signal = peers.value(n, c, alloc_n, rollouts, p_true=p)
                spent = float(alloc_n @ true_length)
                rows.setdefault(rule, []).append((signal / N, spent / budget, 1e6 * signal / spent))
            for target in need:
                want = peers.value(n, c, rules[target], rollouts, p_true=p)
                need[target].append(_tokens_needed(n, c, priced, price, p, want))
        out[f"{name} ({truth.text})"] = (rows, need)
    return out


def report_tokens(out: dict) -> list[tuple[str, str]]:
    """Print each truth's table; return the (truth, rule) pairs whose signal is above the
    token-priced default's (every rule spends at most the same expected tokens; the signal per
    token alone would favour a rule that leaves budget unspent, where the last tokens buy least)."""
    print(
        "\npriced in tokens, at equal expected tokens (what 8 rollouts per prompt cost): GRPO expected "
        "signal per prompt at the true rates, true tokens spent / budget, and signal per 1M true tokens "
        "over the rollout-priced default's (mean +- sd over seeds)"
    )
    below = []
    for truth, (rows, need) in out.items():
        base = np.array([r[2] for r in rows["default (rollouts)"]])
        print(f"\n== {truth} ==")
        print(f"  {'rule':20s} {'signal/prompt':>18s} {'tokens/budget':>16s} {'per token x default (rollouts)':>32s}")
        for rule, vals in rows.items():
            v = np.array(vals)
            r = v[:, 2] / base
            print(
                f"  {rule:20s} {v[:, 0].mean():9.5f} +- {v[:, 0].std():.5f} {v[:, 1].mean():8.4f} +- "
                f"{v[:, 1].std():.4f} {r.mean():20.4f} +- {r.std():.4f}"
            )
        for target, shares in need.items():
            s = 1 - np.array(shares)
            print(
                f"  tokens saved at the {target} signal by the default priced in tokens: "
                f"{s.mean():.1%} +- {s.std():.1%}"
            )
        own = np.array([r[0] for r in rows["default (tokens)"]])
        beaten = [
            r for r, vals in rows.items() if r != "default (tokens)" and np.mean([v[0] for v in vals]) > own.mean()
        ]
        below += [(truth, r) for r in beaten]
        print(f"  default (tokens): {'on or above every rule' if not beaten else 'below ' + ', '.join(beaten)}")
    print(f"\ndefault priced in tokens on or above every rule on every truth: {'yes' if not below else 'NO'}")
    return below


def timing(args) -> None:
    print(f"large instances: {SPEC}, budget {args.per_prompt}/prompt, n in [2, {args.n_max}]")
    head = ("prompts", "prior", "method", "time s", "x grpo", "gap", "rel. gap", "spent/B")
    print("{:>8} {:>9} {:>10} {:>8} {:>7} {:>10} {:>9} {:>8}".format(*head))
    for N in (int(x) for x in args.sizes.split(",")):
        n, c = instance(N)
        for posterior in (False, True):
            cfg = alloc.AllocationConfig(
                budget=args.per_prompt * N, estimator=SPEC, n_max=args.n_max, posterior=posterior
            )
            _, base = timed(n, c, dataclasses.replace(cfg, estimator="grpo"))
            res, took = timed(n, c, cfg)
            spent = res.expected_rollouts / cfg.budget
            print(
                f"{N:>8} {'posterior' if posterior else 'point':>9} {res.method:>10} {took:>8.2f} "
                f"{took / base:>7.1f} {res.gap:>10.3g} {res.relative_gap:>9.2e} {spent:>8.6f}"
            )


def exact(args) -> None:
    print(f"\nwhere the exact programme fits: {SPEC}, budget {args.per_prompt}/prompt, n in [2, 64]")
    print(f"{'prompts':>8} {'prior':>9} {'exact s':>8} {'relax s':>8} {'relax/exact':>12} {'rel. gap':>9}")
    for N in (int(x) for x in args.exact_sizes.split(",")):
        n, c = instance(N, seed=1)
        for posterior in (False, True):
            cfg = alloc.AllocationConfig(
                budget=args.per_prompt * N, estimator=SPEC, n_max=64, posterior=posterior, method="dp"
            )
            exact, t_exact = timed(n, c, cfg)
            relax, t_relax = timed(n, c, dataclasses.replace(cfg, method="lagrangian"))
            assert relax.total <= exact.total * (1 + 1e-12) <= (relax.total + relax.gap) * (1 + 1e-9)
            print(
                f"{N:>8} {'posterior' if posterior else 'point':>9} {t_exact:>8.2f} {t_relax:>8.2f} "
                f"{relax.total / exact.total:>12.8f} {relax.relative_gap:>9.2e}"
            )


if __name__ == "__main__":
    main()
