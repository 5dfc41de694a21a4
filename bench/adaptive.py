"""Benchmark of adaptive profiling (docs/adaptive.md §10, what the benchmark measures).

For each of the spec's four truth distributions of per-prompt pass rates (U-shaped Beta(0.3, 0.4),
uniform, easy-skewed Beta(4, 1), and a mixture with point masses at 0 and 1), the prompts are
profiled through the real pipeline with ``--backend simulate`` (each sample is right with the
prompt's true rate, from its per-sample seed; grading, storage and analysis are real):

1. the adaptive run (``--adaptive band``: the priced stopping rule of docs/adaptive.md §4, the
   default round rule, n_min 4, n_max 64; ``--target band:cost=0`` for the stop-when-decided rule);
2. one fixed-n run with n = 64; a fixed-n run with n < 64 draws exactly the first n of those
   samples (every sample's seed is ``derive_seed(seed, prompt_id, sample_idx)``), so the fixed
   n in {4, 8, 16, 32} are read from it; a real n = 8 run checks that they are the same counts.

Printed per distribution: rollouts per prompt and band misclassification against the true band
of the adaptive rule and of each fixed n, the latter twice (the band of c/n, and the fair
baseline: the most probable band under the same fitted prior), the mean absolute error of the
reported z_8 = p^8 + q^8, and the saving: 1 - (adaptive rollouts) / n*, where n* is the fixed n
with the adaptive run's misclassification on the fair baseline, interpolated in log n between
the grid points around it. A ``--adaptive width`` run per distribution prints the coverage of its
intervals (should be near 1 - delta; ``--no-width`` skips it).

Then the bias table (``--bias-replicates``, ``--bias-prompts``): per distribution, replicates of
fresh true rates and samples, the adaptive rounds run in process by ``frontier.simulate`` (the
functions ``run.plan_next_round`` calls, without the store) and analysed as ``finish_run`` does,
beside a fixed-n run of the same cost (n = the adaptive rollouts per prompt, rounded: the first n
samples of every prompt, analysed as a fixed-n run is). For mean p, D(G) for G in 4..64, GRPO's
mean update mass and its share in every band of the summary, it prints the relative bias against
the truth of the same replicate, its mean and standard error over the replicates, and the
rollouts saved at equal misclassification (the fixed n deciding under the same prior).

    python bench/adaptive.py                     # 5,000 prompts per distribution + the bias table
    python bench/adaptive.py --quick             # 1,000 prompts, bias table 3 x 2,000: development
    python bench/adaptive.py --bias-only --bias-replicates 10     # the bias table alone
    python bench/adaptive.py --prior fit         # the Beta prior fitted to round 0 instead of the grid
    python bench/adaptive.py --round-rule step:k=4 --no-width --json out.json
    python bench/adaptive.py --target band:cost=0 --no-width   # stop as soon as decided

The fixed-n baseline decides with the adaptive run's fitted prior.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pyarrow as pa  # noqa: E402
from pipeline.flows import executors  # noqa: E402

from pipeline import adaptive, analyze, frontier, identify, run, schema, stats  # noqa: E402
from pipeline import estimators as est  # noqa: E402
from pipeline import prior as priors  # noqa: E402
from pipeline.store import Store  # noqa: E402

GRID = (4, 8, 16, 32, 64)
DISTRIBUTIONS = {
    "u-shaped": "Beta(0.3, 0.4)",
    "uniform": "Beta(1, 1)",
    "easy-skewed": "Beta(4, 1)",
    "mixture": "30% at 0, 25% at 1, 45% Beta(2, 2)",
    "spiky": "half at 0.05, half at 0.95",
}


def true_rates(name: str, N: int, rng: np.random.Generator) -> np.ndarray:
    if name == "u-shaped":
        return rng.beta(0.3, 0.4, N)
    if name == "uniform":
        return rng.uniform(0.0, 1.0, N)
    if name == "easy-skewed":
        return rng.beta(4.0, 1.0, N)
    if name == "spiky":  # no family's shape; D(G) at G far above the samples rests on the tails
        return np.where(rng.uniform(size=N) < 0.5, 0.05, 0.95)
    u = rng.uniform(size=N)
    return np.where(u < 0.30, 0.0, np.where(u < 0.55, 1.0, rng.beta(2.0, 2.0, N)))


def band_of(p: np.ndarray, lo: float, hi: float) -> np.ndarray:
    return np.where(p <= lo, 0, np.where(p >= hi, 2, 1))


def write_inputs(folder: Path, name: str, p: np.ndarray) -> tuple[Path, Path]:
    """The problems (JSON Lines) and their true pass rates, keyed by problem text."""
    folder.mkdir(parents=True, exist_ok=True)
    problems, rates = folder / f"bench-{name}.jsonl", folder / f"rates-{name}.jsonl"
    with problems.open("w") as fp, rates.open("w") as fr:
        for i, rate in enumerate(p):
            text = f"Bench {name} problem {i}: what is {i} + 17?"
            fp.write(json.dumps({"problem": text, "answer": str(i + 17)}) + "\n")
            fr.write(json.dumps({"problem": text, "pass_rate": float(rate)}) + "\n")
    return problems, rates


def profile(store: Store, base: dict, prefect: bool, **over) -> str:
    cfg = run.ProfileConfig.build(**base, **over)
    if prefect:
        from pipeline.flows.prefect_flows import profile_flow

        return profile_flow(cfg, store).run_id
    return executors.profile_direct(cfg, store).run_id


def truth_by_prompt(store: Store, dataset: str, rates: dict[str, float]) -> dict[str, float]:
    problems = store.read_table("problems", {"dataset": dataset})
    return {
        pid: rates[text]
        for pid, text in zip(
            problems.column("prompt_id").to_pylist(), problems.column("problem").to_pylist(), strict=True
        )
    }


def prefix_counts(store: Store, run_id: str, ids: list[str]) -> dict[int, np.ndarray]:
    """Correct counts among the first n samples of each prompt, for every n of the grid."""
    s = store.read_table("samples", {"run_id": run_id}).select(["prompt_id", "sample_idx", "correct"])
    at = {pid: i for i, pid in enumerate(ids)}
    rows = np.array([at[p] for p in s.column("prompt_id").to_pylist()])
    idx = s.column("sample_idx").to_numpy()
    ok = s.column("correct").fill_null(False).to_numpy(zero_copy_only=False).astype(np.int64)
    return {n: np.bincount(rows[idx < n], weights=ok[idx < n], minlength=len(ids)).astype(np.int64) for n in GRID}


def one_distribution(name: str, args, work: Path) -> dict:
    rng = np.random.default_rng(args.seed + sum(map(ord, name)))
    p_true = true_rates(name, args.prompts, rng)
    data_file, rates_file = write_inputs(work / "inputs", name, p_true)
    rates = {json.loads(line)["problem"]: json.loads(line)["pass_rate"] for line in rates_file.open()}
    store = Store.open(work / f"data-{name}")
    base = {
        "dataset": "local",
        "data_file": str(data_file),
        "backend": "simulate",
        "backend_options": {"pass_rates": str(rates_file)},
        "limit": None,
        "shard_size": args.shard_size,
        "grade_workers": 1,
        "report": args.report,
        "seed": args.seed,
    }
    acfg = adaptive.AdaptiveConfig.from_specs(args.target, args.n_min, args.n_max, args.round_rule, prior=args.prior)
    t0 = time.perf_counter()
    rid_a = profile(
        store,
        base,
        args.prefect,
        adaptive=args.target,
        n_min=args.n_min,
        n_max=args.n_max,
        round_rule=args.round_rule,
        adaptive_prior=args.prior,
    )
    t_adaptive = time.perf_counter() - t0
    t0 = time.perf_counter()
    rid_f = profile(store, base, args.prefect, n=max(GRID))
    t_fixed = time.perf_counter() - t0
    rid_8 = profile(store, base, args.prefect, n=8)

    ps = store.read_table("prompt_stats", {"run_id": rid_a})
    ids = ps.column("prompt_id").to_pylist()
    run_record = store.get_run(rid_a)
    dataset = run_record.dataset
    truth = truth_by_prompt(store, dataset, rates)
    p = np.array([truth[pid] for pid in ids])
    tgt = acfg.target
    true_band = band_of(p, tgt.lo, tgt.hi)
    prior = run_record.prior
    n_a = ps.column("n").to_numpy()
    band_a = np.array([schema.BANDS.index(b) for b in ps.column("decided_band").to_pylist()])
    G = 8
    z_true = p**G + (1 - p) ** G
    j = list(ps.column("group_sizes")[0].as_py()).index(G)
    z_a = np.array([z[j] for z in ps.column("zero_signal").to_pylist()])
    rounds = run_record.rounds or ()
    out = {
        "distribution": name,
        "truth": DISTRIBUTIONS[name],
        "prompts": len(ids),
        "prior": prior.label,
        "adaptive": {
            "rule": acfg.rule.spec,
            "rounds": len(rounds),
            "rollouts_per_prompt": float(n_a.mean()),
            "misclassification": float((band_a != true_band).mean()),
            "undecided": float(ps.column("undecided").to_numpy(zero_copy_only=False).mean()),
            "at_n_max": float((n_a == acfg.n_max).mean()),
            "z8_mae": float(np.abs(z_a - z_true).mean()),
            "seconds": t_adaptive,
        },
        "fixed": [],
        "fixed_64_seconds": t_fixed,
    }
    counts = prefix_counts(store, rid_f, ids)
    # The prefix of the n = 64 run is what a fixed n = 8 run samples: check it on a real n = 8 run.
    c8 = store.read_table("prompt_stats", {"run_id": rid_8})
    c8 = dict(zip(c8.column("prompt_id").to_pylist(), c8.column("c").to_pylist(), strict=True))
    if [c8[pid] for pid in ids] != counts[8].tolist():
        raise SystemExit(f"{name}: the fixed n = 8 run's counts differ from the first 8 samples of the n = 64 run")
    for n in GRID:
        c = counts[n]
        nn = np.full(len(ids), n)
        fair = adaptive.decide(nn, c, prior, tgt).band
        plain = band_of(c / n, tgt.lo, tgt.hi)
        z = stats.zero_signal(nn, c, G)  # what a fixed-n run reports (unbiased for n >= G)
        out["fixed"].append(
            {
                "n": n,
                "misclassification_plain": float((plain != true_band).mean()),
                "misclassification_fair": float((fair != true_band).mean()),
                "z8_mae": float(np.abs(z - z_true).mean()),
            }
        )
    mis_a = out["adaptive"]["misclassification"]
    fair_curve = [f["misclassification_fair"] for f in out["fixed"]]
    n_star, where = frontier.log_n_crossing(GRID, fair_curve, mis_a)
    cost = out["adaptive"]["rollouts_per_prompt"]
    out["n_equivalent"] = n_star
    out["n_equivalent_where"] = where
    out["saving"] = _saving(cost, n_star)
    at_least = [f["n"] for f in out["fixed"] if f["misclassification_fair"] <= mis_a]
    out["grid_n_as_good"] = at_least[0] if at_least else None
    if args.width:
        rid_w = profile(
            store,
            base,
            args.prefect,
            adaptive="width",
            n_min=args.n_min,
            n_max=args.n_max,
            round_rule=args.round_rule,
            adaptive_prior=args.prior,
        )
        pw = store.read_table("prompt_stats", {"run_id": rid_w})
        pw_true = np.array([truth[pid] for pid in pw.column("prompt_id").to_pylist()])
        lo, hi = pw.column("post_lo").to_numpy(), pw.column("post_hi").to_numpy()
        und = pw.column("undecided").to_numpy(zero_copy_only=False)
        inner = (pw_true > 0) & (pw_true < 1)  # p = 0 or 1 lies outside every equal-tailed Beta interval
        out["width"] = {
            "rollouts_per_prompt": float(pw.column("n").to_numpy().mean()),
            "coverage": float(((pw_true >= lo) & (pw_true <= hi)).mean()),
            "coverage_0_lt_p_lt_1": float(((pw_true >= lo) & (pw_true <= hi))[inner].mean()) if inner.any() else None,
            "share_p_0_or_1": float((~inner).mean()),
            "coverage_decided": float(((pw_true >= lo) & (pw_true <= hi))[~und].mean()) if (~und).any() else None,
            "undecided": float(und.mean()),
            "nominal": 1 - adaptive.Target.parse("width").delta,
        }
    return out


# --- the bias table: adaptive summaries against the truth, in process ----------------------------

BIAS_G = (4, 8, 16, 32, 64)
# A summary value off by more than FAR must come with a range that holds the truth in at least
# COVERAGE of the replicates (docs/adaptive.md §7).
FAR, COVERAGE = 0.03, 0.9


def _summary_values(n: np.ndarray, c: np.ndarray, settings: analyze.AnalyzeConfig) -> dict[str, float]:
    """The summary metrics of the bias table from one analysis of counts ``(n, c)``."""
    ids = pa.array([str(i) for i in range(len(n))])
    table = analyze.summary(pa.table({"prompt_id": ids, "n": n, "c": c}), "bench", settings)
    out: dict[str, float] = {}
    for r in table.to_pylist():
        if r["section"] == "dataset" and r["metric"] == "mean_pass_rate":
            out["mean p"] = r["value"]
        elif r["section"] == "zero_signal" and r["metric"] in ("observed", "observed_lo", "observed_hi"):
            out[f"D({r['G']})" + r["metric"][len("observed") :]] = r["value"]
        elif r["section"] == "gradient_share" and r["estimator"] == "grpo" and r["band"] == "all":
            out[f"GRPO mass G={r['G']}" + r["metric"][len("mean_mass") :]] = r["value"]
        elif r["section"] == "gradient_share" and r["estimator"] == "grpo":
            out[f"GRPO {r['band']} share G={r['G']}"] = r["value"]
    return out


def _true_values(p: np.ndarray) -> dict[str, float]:
    """The same metrics computed from the true pass rates."""
    out = {"mean p": float(p.mean())}
    grpo = est.get("grpo")
    for G in BIAS_G:
        out[f"D({G})"] = float(np.mean(p**G + (1 - p) ** G))
    for G in BIAS_G:
        m = grpo.weight(p, G) * p * (1 - p)
        out[f"GRPO mass G={G}"] = float(m.mean())
        for band in analyze.DEFAULT_BANDS:
            out[f"GRPO {band.name} share G={G}"] = float(m[band.contains(p)].sum() / m.sum())
    return out


def bias_replicate(name: str, N: int, seed: int, acfg: adaptive.AdaptiveConfig) -> dict:
    """One replicate: true rates, their samples, the adaptive rounds (``frontier.simulate``, the same
    functions ``run.plan_next_round`` calls) and the fixed-n run of the same cost (the first n
    samples of every prompt, analysed as a fixed-n run is); each summary metric against the truth."""
    rng = np.random.default_rng(seed)
    p = true_rates(name, N, rng)
    outcomes = rng.random((N, acfg.n_max)) < p[:, None]
    n, c, prior = frontier.simulate(outcomes, acfg)
    cost = float(n.mean())
    n_fixed = max(1, int(round(cost)))
    c_fixed = outcomes[:, :n_fixed].sum(axis=1)
    plain = analyze.AnalyzeConfig(group_sizes=BIAS_G, pass_at_k=False)
    adapt = _summary_values(n, c, analyze.estimation_config(plain, prior, n, c))
    fixed = _summary_values(np.full(N, n_fixed), c_fixed, plain)
    truth = _true_values(p)
    t = acfg.target
    true_band = band_of(p, t.lo, t.hi)
    mis_a = float((adaptive.decide(n, c, prior, t).band != true_band).mean())
    csum = np.cumsum(outcomes, axis=1)
    mis_fixed = [
        float((adaptive.decide(np.full(N, k), csum[:, k - 1], prior, t).band != true_band).mean()) for k in GRID
    ]
    n_star, _ = frontier.log_n_crossing(GRID, mis_fixed, mis_a)
    return {
        "adaptive": {k: adapt[k] / v - 1 for k, v in truth.items() if v},
        "fixed": {k: fixed[k] / v - 1 for k, v in truth.items() if v},
        # where the summary gives a range (identify.likelihood_bounds): whether it holds the truth
        "covered": {k: adapt[k + "_lo"] <= v <= adapt[k + "_hi"] for k, v in truth.items() if k + "_lo" in adapt},
        "cost": cost,
        "n_fixed": n_fixed,
        "saving": _saving(cost, n_star),
        "saving_is_a_bound": n_star is None,
        "misclassification": mis_a,
    }


def _saving(cost: float, n_star: float | None) -> float:
    """1 - cost / n*; where no fixed n of the grid is as good (n* beyond it), the saving against the
    largest, a lower bound (the caller says so)."""
    return 1.0 - cost / (n_star if n_star is not None else max(GRID))


def _se(v: np.ndarray) -> float:
    return float(v.std(ddof=1) / math.sqrt(len(v))) if len(v) > 1 else math.nan


def _cell(x: tuple[float, float] | None) -> str:
    return f"{100 * x[0]:+7.2f} +-{100 * x[1]:5.2f}" if x else "n/a"


def bias_table(names: list[str], N: int, replicates: int, seed: int, acfg: adaptive.AdaptiveConfig) -> dict:
    """Per distribution: the mean relative bias and its standard error over ``replicates``."""
    out = {}
    for name in names:
        reps = [bias_replicate(name, N, seed + 1000 * r + sum(map(ord, name)), acfg) for r in range(replicates)]
        fixed_n = sorted({r["n_fixed"] for r in reps})
        row: dict = {
            "cost": float(np.mean([r["cost"] for r in reps])),
            "n_fixed": str(fixed_n[0]) if len(fixed_n) == 1 else f"{fixed_n[0]}..{fixed_n[-1]}",
        }
        row["saving"] = float(np.mean([r["saving"] for r in reps]))
        row["saving_bounds"] = sum(r["saving_is_a_bound"] for r in reps)
        row["misclassification"] = float(np.mean([r["misclassification"] for r in reps]))
        for side in ("adaptive", "fixed"):
            # a band some replicate's truth leaves empty (a relative bias of nothing) is left out
            keys = [k for k in reps[0][side] if all(k in r[side] for r in reps)]
            vals = {k: np.array([r[side][k] for r in reps]) for k in keys}
            row[side] = {k: (float(v.mean()), _se(v)) for k, v in vals.items()}
        row["covered"] = {k: sum(r["covered"].get(k, False) for r in reps) for k in reps[0]["covered"]}
        out[name] = row
    return out


def show_bias(table: dict, N: int, replicates: int, acfg: adaptive.AdaptiveConfig) -> None:
    names = list(table)
    print(
        f"\n== bias of the summary against the truth: {replicates} replicates x {N:,} prompts, adaptive "
        f"{acfg.target.spec}, {acfg.rule.spec}, prior {acfg.prior} (relative bias, % +- standard error) =="
    )
    print(f"{'metric':26s}" + "".join(f"{n + ' adaptive':>24s}{'fixed':>17s}" for n in names))
    print(
        f"{'rollouts per prompt':26s}"
        + "".join(f"{table[n]['cost']:24.2f}{'n = ' + str(table[n]['n_fixed']):>17s}" for n in names)
    )
    worst = widest = 0.0
    far: list[str] = []  # cells off by more than FAR with no range that covers the truth often enough
    for key in table[names[0]]["adaptive"]:
        cells = ""
        for n in names:
            a = table[n]["adaptive"].get(key)
            f = table[n]["fixed"].get(key)
            covered = table[n]["covered"].get(key)
            shown = _cell(a) + (f" [{covered}/{replicates}]" if covered is not None else "")
            cells += f"{shown:>24s}{_cell(f):>17s}"
            if a:
                worst = max(worst, abs(a[0]))
                widest = max(widest, a[1])
                if abs(a[0]) > FAR and (covered is None or covered < COVERAGE * replicates):
                    far.append(f"{n} {key}")
        print(f"{key:26s}{cells}")
    print(
        f"[k/R]: the summary's {identify.LEVEL:.0%} range of what the counts allow (identify.likelihood_bounds) "
        f"holds the truth in k of R replicates; cells off by more than {FAR:.0%} without a range that covers at "
        f"least {COVERAGE:.0%}: " + (", ".join(far) if far else "none")
    )
    print(
        "band misclassification of the adaptive run: "
        + ", ".join(f"{n} {table[n]['misclassification']:.2%}" for n in names)
    )
    print(
        "rollouts saved at equal misclassification: "
        + ", ".join(
            f"{n} {table[n]['saving']:.1%}"
            + (
                f" (at least: {table[n]['saving_bounds']} replicates beat every fixed n)"
                if table[n]["saving_bounds"]
                else ""
            )
            for n in names
        )
    )
    print(f"largest adaptive bias: {100 * worst:.2f}%; largest standard error: {100 * widest:.2f}%")


def show(r: dict) -> None:
    a = r["adaptive"]
    print(f"\n== {r['distribution']}: p ~ {r['truth']}, {r['prompts']:,} prompts ==")
    print(
        f"fitted prior {r['prior']}; adaptive {a['rule']}: {a['rounds']} rounds, "
        f"{a['undecided']:.1%} stopped undecided, {a['at_n_max']:.1%} at n_max ({a['seconds']:.1f} s; fixed n = 64: "
        f"{r['fixed_64_seconds']:.1f} s)"
    )
    print(f"{'':12s} {'rollouts/prompt':>16s} {'misclass (c/n)':>15s} {'misclass (fair)':>16s} {'z8 MAE':>8s}")
    print(
        f"{'adaptive':12s} {a['rollouts_per_prompt']:16.2f} {'':>15s} {a['misclassification']:16.4f} {a['z8_mae']:8.4f}"
    )
    for f in r["fixed"]:
        print(
            f"{'fixed n=' + str(f['n']):12s} {f['n']:16d} {f['misclassification_plain']:15.4f} "
            f"{f['misclassification_fair']:16.4f} {f['z8_mae']:8.4f}"
        )
    if r["n_equivalent_where"] == "inside":
        print(
            f"fixed n with the adaptive misclassification (fair, log-n interpolation): {r['n_equivalent']:.1f}; "
            f"saving {r['saving']:.1%}"
        )
    elif r["n_equivalent_where"] == "above":
        print(f"no fixed n up to {max(GRID)} is as good: saving > {1 - a['rollouts_per_prompt'] / max(GRID):.1%}")
    else:
        print(f"fixed n = {GRID[0]} is already as good: saving <= {1 - a['rollouts_per_prompt'] / GRID[0]:.1%}")
    if r["grid_n_as_good"]:
        g = r["grid_n_as_good"]
        print(f"cheapest grid n at least as good (fair): {g}; saving against it {1 - a['rollouts_per_prompt'] / g:.1%}")
    if "width" in r:
        w = r["width"]
        print(
            f"width target (h = 0.1): {w['rollouts_per_prompt']:.2f} rollouts/prompt, coverage {w['coverage']:.3f} "
            f"(nominal {w['nominal']:.2f}; decided prompts {w['coverage_decided']:.3f}), "
            f"{w['undecided']:.1%} undecided at n_max"
        )
        if w["share_p_0_or_1"] > 0:
            print(
                f"  {w['share_p_0_or_1']:.0%} of the true rates are exactly 0 or 1, outside every equal-tailed Beta "
                f"interval; coverage of the others {w['coverage_0_lt_p_lt_1']:.3f}"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=5000, help="prompts per distribution (default 5000)")
    ap.add_argument(
        "--distributions", default=",".join(list(DISTRIBUTIONS)[:4]), help="comma-separated subset (or spiky)"
    )
    ap.add_argument("--target", default="band", help="the band target's spec (default: band, priced stopping)")
    ap.add_argument("--round-rule", default=adaptive.DEFAULT_ROUND_RULE)
    ap.add_argument("--n-min", type=int, default=adaptive.AdaptiveConfig().n_min)
    ap.add_argument("--n-max", type=int, default=adaptive.AdaptiveConfig().n_max)
    ap.add_argument("--shard-size", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--width",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run the width target and print its coverage (default: on)",
    )
    ap.add_argument("--prefect", action="store_true", help="run the profiles as Prefect flows (slower start)")
    ap.add_argument("--report", action="store_true", help="also render the HTML reports")
    ap.add_argument("--json", type=Path, help="write the results as JSON here")
    ap.add_argument("--prior", default=priors.DEFAULT_PRIOR, choices=priors.PRIORS, help="the adaptive prior")
    ap.add_argument("--bias-prompts", type=int, default=5000, help="prompts per replicate of the bias table")
    ap.add_argument("--bias-replicates", type=int, default=20, help="replicates of the bias table (0: skip it)")
    ap.add_argument("--bias-only", action="store_true", help="only the bias table (no pipeline runs)")
    ap.add_argument("--quick", action="store_true", help="small sizes for development (1,000 prompts, 3 x 2,000)")
    ap.add_argument("--keep", type=Path, help="keep the data directories under this folder")
    args = ap.parse_args()
    if args.quick:
        args.prompts, args.bias_prompts, args.bias_replicates, args.width = 1000, 2000, 3, False
    names = [d.strip() for d in args.distributions.split(",") if d.strip()]
    unknown = sorted(set(names) - set(DISTRIBUTIONS))
    if unknown:
        raise SystemExit(f"unknown distributions {unknown}; known: {', '.join(DISTRIBUTIONS)}")
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-adaptive-"))
    start = time.perf_counter()
    results = []
    try:
        for name in names if not args.bias_only else []:
            results.append(one_distribution(name, args, work))
            show(results[-1])
    finally:
        run.close_engines()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    if results:
        print("\nsavings (target >= 40% on u-shaped, uniform, mixture): ", end="")
        print(
            ", ".join(
                f"{r['distribution']} {r['saving']:.1%}" + (" (at least)" if r["n_equivalent"] is None else "")
                for r in results
            )
        )
    bias = None
    if args.bias_replicates > 0:
        acfg = adaptive.AdaptiveConfig.from_specs(
            args.target, args.n_min, args.n_max, args.round_rule, prior=args.prior
        )
        bias = bias_table(names, args.bias_prompts, args.bias_replicates, args.seed, acfg)
        show_bias(bias, args.bias_prompts, args.bias_replicates, acfg)
    print(f"total {time.perf_counter() - start:.0f} s")
    if args.json:
        args.json.write_text(
            json.dumps(
                {"runs": results, "bias": bias},
                indent=2,
                default=lambda x: None if isinstance(x, float) and math.isnan(x) else x,
            )
        )


if __name__ == "__main__":
    main()
