"""Adaptive profiling priced in tokens against priced in rollouts and a fixed n (docs/tokens.md).

For each truth of ``bench/truths.py`` and each seed: a dataset's pass rates drawn from the truth, each
prompt's answer lengths from the length model ``truths.LENGTHS`` (hard prompts and wrong answers run
long), ``n_max`` outcomes and lengths per prompt, and on them, in process (``frontier.simulate``, the
round rule and prior fits of ``run.plan_next_round``):

- **fixed n** at n = 4 ... 64 (each prompt's band the most probable under the truth: the baseline at
  its best);
- **adaptive, rollouts**: the default band target at each cost of ``--costs`` (every rollout alike);
- **adaptive, tokens**: the same target with ``price_unit=tokens`` at ``--cost`` (a prompt's rollout
  at cost x its relative price, learned from its answers so far).

Per rule: misclassification (the expected one given each prompt's final counts under the truth),
rollouts and tokens per prompt. The comparison, per seed, then mean and spread (min to max) over the
seeds:

- *tokens saved at equal misclassification*: ``1 - T_tok / T_rol(mis_tok)``, ``T_rol(mis)`` the
  rollout-priced rule's tokens at that misclassification (log-linear between its costs), and the same
  against the fixed n (``T_fix(mis)``);
- *misclassification at equal tokens*: the rollout-priced rule's at the token-priced rule's tokens;
- the *loss* the token-priced rule minimises, ``mis + cost x tokens / m`` (``m`` the dataset's mean
  answer length), of both rules at the same cost.

    python bench/adaptive_tokens.py                             # every truth, 3 seeds x 800 prompts
    python bench/adaptive_tokens.py --truths edge-hard,hard --seeds 5 --prompts 2000
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
import truths as T  # noqa: E402

from pipeline import adaptive, frontier  # noqa: E402

FIXED_NS = (4, 6, 8, 12, 16, 24, 32, 48, 64)


def _interp_log(x: float, xs: np.ndarray, ys: np.ndarray) -> float:
    """``y`` at ``x`` on the curve ``(xs, ys)``, linear in ``log y`` against ``x`` (NaN outside it)."""
    order = np.argsort(xs)
    xs, ys = np.asarray(xs)[order], np.asarray(ys)[order]
    if not xs[0] <= x <= xs[-1]:
        return math.nan
    return float(np.exp(np.interp(x, xs, np.log(ys))))


def one_seed(truth: T.Truth, N: int, seed: int, costs: tuple[float, ...], cost: float, n_max: int) -> dict:
    rng = np.random.default_rng(seed)
    rates = truth.draw(N, rng)
    right = T.LENGTHS.right_means(rates, rng)
    outcomes = rng.random((N, n_max)) < rates[:, None]
    lengths = T.LENGTHS.draw(right, outcomes, rng)
    held = truth.as_prior()
    m = float(T.LENGTHS.expected(rates, right).mean())  # the dataset's mean answer length
    out: dict = {"m": m}

    def score(n: np.ndarray, c: np.ndarray, reported: np.ndarray) -> tuple[float, float, float]:
        spent = float((lengths * (np.arange(n_max)[None, :] < n[:, None])).sum())
        mis = frontier.expected_misclassification(n, c, reported, held, adaptive.Target())
        return mis, float(n.mean()), spent / N

    csum = np.cumsum(outcomes, axis=1)
    fixed = []
    for k in FIXED_NS:
        n, c = np.full(N, k), csum[:, k - 1]
        fixed.append(score(n, c, adaptive.decide(n, c, held, adaptive.Target()).band))
    out["fixed"] = np.array(fixed)
    for unit, unit_costs in (("rollouts", costs), ("tokens", (cost,))):
        rows = []
        for price in unit_costs:
            acfg = adaptive.AdaptiveConfig.from_specs(f"band:cost={price:g}", price_unit=unit, n_max=n_max)
            n, c, fitted = frontier.simulate(outcomes, acfg, lengths=lengths)
            rows.append(score(n, c, adaptive.decide(n, c, fitted, acfg.target).band))
        out[unit] = np.array(rows)  # (mis, rollouts, tokens) per cost
    tok_mis, tok_roll, tok_tok = out["tokens"][0]
    rol = out["rollouts"]
    at = costs.index(cost)
    out["saved_vs_rollouts"] = 1.0 - tok_tok / _interp_log(tok_mis, rol[:, 0], rol[:, 2])
    out["saved_vs_fixed"] = 1.0 - tok_tok / _interp_log(tok_mis, out["fixed"][:, 0], out["fixed"][:, 2])
    # misclassification of the rollout-priced rule at the token-priced rule's tokens (linear in log tokens)
    order = np.argsort(rol[:, 2])
    lt = np.log(rol[order, 2])
    x = math.log(tok_tok)
    out["rol_mis_at_tokens"] = float(np.interp(x, lt, rol[order, 0])) if lt[0] <= x <= lt[-1] else math.nan
    out["tok"] = (tok_mis, tok_roll, tok_tok)
    out["rol_same_cost"] = tuple(rol[at])
    out["loss_tok"] = tok_mis + cost * tok_tok / m
    out["loss_rol"] = rol[at, 0] + cost * rol[at, 2] / m
    return out


def _spread(values: list[float], pct: bool = False, digits: int = 1) -> str:
    v = np.array(values, float)
    if pct:
        return f"{100 * np.nanmean(v):+.1f}% ({100 * np.nanmin(v):+.1f} to {100 * np.nanmax(v):+.1f})"
    return f"{np.nanmean(v):.{digits}f} ({np.nanmin(v):.{digits}f} to {np.nanmax(v):.{digits}f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--truths", default=",".join([*T.TRUTHS, "real"]))
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=800)
    ap.add_argument("--n-max", type=int, default=64)
    ap.add_argument("--cost", type=float, default=adaptive.DEFAULT_COST, help="the token-priced rule's cost")
    ap.add_argument("--costs", default="0.002,0.001,0.0005", help="the rollout-priced rule's costs (with --cost)")
    args = ap.parse_args()
    costs = tuple(float(x) for x in args.costs.split(","))
    if args.cost not in costs:
        raise SystemExit(f"--cost {args.cost:g} must be one of --costs {args.costs}: the same-cost comparison needs it")
    start = time.time()
    print(
        f"# {args.prompts} prompts x {args.seeds} seeds per truth, n_max {args.n_max}; "
        f"token-priced cost {args.cost:g}, "
        f"rollout-priced costs {args.costs}; mean (min to max) over seeds"
    )
    header = (
        "| truth | fixed n=16: mis, tokens | rollouts-priced: mis, rollouts, tokens | tokens-priced: mis, rollouts, "
        "tokens | tokens saved vs rollouts-priced at equal mis | vs fixed n at equal mis | rollouts-priced mis at "
        "equal tokens | loss ratio tokens/rollouts at equal cost |"
    )
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    for name in args.truths.split(","):
        truth = T.get(name)
        if truth is None:
            print(f"| {name} | (no stored profile) |")
            continue
        rs = [one_seed(truth, args.prompts, s, costs, args.cost, args.n_max) for s in range(args.seeds)]
        f16 = FIXED_NS.index(16)
        print(
            f"| {name} "
            f"| {_spread([100 * r['fixed'][f16, 0] for r in rs], digits=2)}%, "
            f"{_spread([r['fixed'][f16, 2] for r in rs], digits=0)} "
            f"| {_spread([100 * r['rol_same_cost'][0] for r in rs], digits=2)}%, "
            f"{_spread([r['rol_same_cost'][1] for r in rs])}, {_spread([r['rol_same_cost'][2] for r in rs], digits=0)} "
            f"| {_spread([100 * r['tok'][0] for r in rs], digits=2)}%, {_spread([r['tok'][1] for r in rs])}, "
            f"{_spread([r['tok'][2] for r in rs], digits=0)} "
            f"| {_spread([r['saved_vs_rollouts'] for r in rs], pct=True)} "
            f"| {_spread([r['saved_vs_fixed'] for r in rs], pct=True)} "
            f"| {_spread([100 * r['rol_mis_at_tokens'] for r in rs], digits=2)}% "
            f"| {_spread([r['loss_tok'] / r['loss_rol'] for r in rs], digits=3)} |",
            flush=True,
        )
    print(f"# {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
