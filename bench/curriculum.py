"""Benchmark: curriculum policies replayed on synthetic training logs shaped like real runs (docs/curriculum.md §6).

``--prompts`` prompts x ``--steps`` steps, groups of ``--G``, every prompt observed at every step (a log
where the trainer drew every prompt, so any policy can be replayed on it). Truths (``TRUTHS``): the
drifting U-shape; atoms at 0 and 1 that persist; a third of the prompts near the hard edge
(0.01-0.15); a minority learning slowly out of the hard edge; forgetting (easy prompts getting harder);
a hard-skewed set (90% never solved, as with a weak model on a hard set or late in training).
Each starts from a mixture of point masses and Beta shapes and moves on the logit scale (a per-prompt
rate plus a small random walk); a prompt at exactly 0 or 1 stays there.

Each policy family has one knob that trades signal for coverage (``FAMILIES``); its yield at
coverage 0.75 is read off its curve (the best yield among its settings with coverage >= 0.75, the
curve interpolated linearly where it crosses 0.75). uniform and DAPO (oversample-and-filter at equal
rollouts) have no knob: their picks do not depend on outcomes, so their yield is the same at any
coverage. Prints, per truth, each family's yield at coverage 0.75 (mean and spread over ``--seeds``),
the default's own yield and coverage, and whether the default is on or above every baseline
everywhere and at least 1.4x uniform on the U-shape. The peers (other projects' rules, knob around
their published setting) get their own verdict at coverage 0.75, and their yield and coverage at
their published settings beside the default family's without a coverage target (docs/curriculum.md §5).

    PYTHONPATH=$PWD python bench/curriculum.py [--prompts 2000] [--steps 50] [--batch-size 256] [--seeds 3]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pyarrow as pa

from pipeline import curriculum

TARGET_COVERAGE = 0.75
#: A policy's generator is seeded ``POLICY_SEED + seed``, apart from the truth's (``seed``): seeded alike,
#: a policy breaks its first step's ties (every score equal) with the very draws that placed the truth's
#: prompts, and on ``mostly-hard`` (seed 0) the default's first batch held all 199 solvable prompts of 2,000.
POLICY_SEED = 1_000


def _log(p0: np.ndarray, rate: np.ndarray, steps: int, G: int, rng, noise: float) -> pa.Table:
    """Every prompt at every step: ``c ~ Binomial(G, p_t)``; logits move by ``rate`` plus noise, atoms stay.
    Column ``p`` keeps the truth's ``p_t`` (``replay`` reads only the log's columns; ``bench/multiplicity.py``
    draws its own groups from it)."""
    prompts = len(p0)
    fixed = (p0 <= 0) | (p0 >= 1)
    logit = np.log(np.clip(p0, 1e-6, 1 - 1e-6) / (1 - np.clip(p0, 1e-6, 1 - 1e-6)))
    ids = np.array([f"p{i:05d}" for i in range(prompts)])
    cols: dict[str, list] = {"step": [], "prompt_id": [], "n": [], "c": [], "p": []}
    for t in range(steps):
        p = np.where(fixed, p0, 1 / (1 + np.exp(-logit)))
        cols["step"].append(np.full(prompts, t))
        cols["prompt_id"].append(ids)
        cols["n"].append(np.full(prompts, G))
        cols["c"].append(rng.binomial(G, p))
        cols["p"].append(p)
        logit = logit + rate + rng.normal(0, noise, prompts)
    return pa.table({k: np.concatenate(v) for k, v in cols.items()})


def _mixture(rng, prompts: int, parts: list[tuple[float, object]]) -> np.ndarray:
    """Initial pass rates from ``(share, sampler)`` parts; a sampler is a number (an atom) or ``f(rng, size)``."""
    shares = np.array([s for s, _ in parts])
    which = rng.choice(len(parts), size=prompts, p=shares / shares.sum())
    p = np.empty(prompts)
    for j, (_, draw) in enumerate(parts):
        at = which == j
        p[at] = draw if isinstance(draw, int | float) else draw(rng, int(at.sum()))
    return p


def drifting_log(prompts: int, steps: int, G: int, *, improving: float = 0.7, seed: int = 0) -> pa.Table:
    """The drifting U-shape: ``Beta(0.35, 0.35)`` at the start, ``improving`` of the prompts gaining a
    random logit rate per step (0.02 to 0.2), noise 0.1."""
    rng = np.random.default_rng(seed)
    p0 = np.clip(rng.beta(0.35, 0.35, prompts), 1e-4, 1 - 1e-4)
    rate = np.where(rng.random(prompts) < improving, rng.uniform(0.02, 0.2, prompts), 0.0)
    return _log(p0, rate, steps, G, rng, 0.1)


def atoms_log(prompts: int, steps: int, G: int, *, seed: int = 0) -> pa.Table:
    """30% never solved and 20% always solved for the whole run; the rest Beta(2, 2), slowly wandering."""
    rng = np.random.default_rng(seed)
    p0 = _mixture(rng, prompts, [(0.3, 0.0), (0.2, 1.0), (0.5, lambda r, k: r.beta(2, 2, k))])
    return _log(p0, np.zeros(prompts), steps, G, rng, 0.05)


def hard_edge_log(prompts: int, steps: int, G: int, *, seed: int = 0) -> pa.Table:
    """A third of the prompts between 0.01 and 0.15; 15% at 0, 10% at 1, 10% in 0.85-0.99, the rest
    Beta(2, 2); slow wandering."""
    rng = np.random.default_rng(seed)
    p0 = _mixture(
        rng,
        prompts,
        [
            (1 / 3, lambda r, k: r.uniform(0.01, 0.15, k)),
            (0.15, 0.0),
            (0.10, 1.0),
            (0.10, lambda r, k: r.uniform(0.85, 0.99, k)),
            (0.32, lambda r, k: r.beta(2, 2, k)),
        ],
    )
    return _log(p0, np.zeros(prompts), steps, G, rng, 0.05)


def slow_learning_log(prompts: int, steps: int, G: int, *, seed: int = 0) -> pa.Table:
    """20% of the prompts start hard (0.005-0.05) and learn slowly (logit +0.04 to +0.1 a step); 25% at
    0, 15% at 1, the rest Beta(2, 2) and flat."""
    rng = np.random.default_rng(seed)
    learner = rng.random(prompts) < 0.2
    rest = _mixture(rng, prompts, [(0.25, 0.0), (0.15, 1.0), (0.4, lambda r, k: r.beta(2, 2, k))])
    p0 = np.where(learner, rng.uniform(0.005, 0.05, prompts), rest)
    rate = np.where(learner, rng.uniform(0.04, 0.1, prompts), 0.0)
    return _log(p0, rate, steps, G, rng, 0.05)


def forgetting_log(prompts: int, steps: int, G: int, *, seed: int = 0) -> pa.Table:
    """40% of the prompts start easy (0.85-0.99) and half of them get harder (logit -0.05 to -0.15 a
    step); 20% at 0, the rest Beta(2, 2)."""
    rng = np.random.default_rng(seed)
    easy = rng.random(prompts) < 0.4
    rest = _mixture(rng, prompts, [(0.2, 0.0), (0.4, lambda r, k: r.beta(2, 2, k))])
    p0 = np.where(easy, rng.uniform(0.85, 0.99, prompts), rest)
    rate = np.where(easy & (rng.random(prompts) < 0.5), -rng.uniform(0.05, 0.15, prompts), 0.0)
    return _log(p0, rate, steps, G, rng, 0.05)


def mostly_hard_log(prompts: int, steps: int, G: int, *, seed: int = 0) -> pa.Table:
    """A hard-skewed dataset: 90% of the prompts never solved for the whole run (a weak model on a hard
    set, or late training, where most groups are silent), 10% Beta(2, 5), slowly wandering."""
    rng = np.random.default_rng(seed)
    p0 = _mixture(rng, prompts, [(0.9, 0.0), (0.1, lambda r, k: r.beta(2, 5, k))])
    return _log(p0, np.zeros(prompts), steps, G, rng, 0.05)


TRUTHS = {
    "u-drift": drifting_log,
    "atoms": atoms_log,
    "hard-edge": hard_edge_log,
    "slow-learning": slow_learning_log,
    "forgetting": forgetting_log,
    "mostly-hard": mostly_hard_log,
}

# Family -> (spec template with {x} the knob, knob values in order of rising coverage, kind): a
# baseline (True), a policy of ours (False) or another project's rule ("peer", its knob around its default).
FAMILIES: dict[str, tuple[str, tuple, bool | str]] = {
    "uniform": ("uniform", (None,), True),
    "dapo": ("dapo", (None,), True),
    "greso": ("greso:explore={x}", (0.02, 0.05, 0.1, 0.25, 0.5, 1.0), True),
    "greedy": ("greedy:floor={x}", (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7), True),
    "bonus": ("bonus:beta={x}", (0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0), True),
    "thompson-jeffreys (old default)": (
        "signal:explore=thompson,prior=jeffreys,cover=lru,coverage=0,floor={x}",
        (0.0, 0.1, 0.2, 0.3, 0.4),
        False,
    ),
    "signal (default family)": ("signal:coverage={x}", (0.6, 0.7, 0.75, 0.8, 0.9), False),
    "signal, Jeffreys prior": ("signal:prior=jeffreys,coverage={x}", (0.6, 0.7, 0.75, 0.8, 0.9), False),
    "signal, Thompson": ("signal:explore=thompson,coverage={x}", (0.6, 0.7, 0.75, 0.8, 0.9), False),
    "signal, optimism": ("signal:explore=optimism,coverage={x}", (0.6, 0.7, 0.75, 0.8, 0.9), False),
    "prime-rl (peer; knob hard=easy)": ("prime-rl:hard={x},easy={x}", (0.02, 0.05, 0.1, 0.2, 0.5, 1.0), "peer"),
    "trinity (peer; knob lamb)": ("trinity:lamb={x}", (0.05, 0.1, 0.15, 0.2, 0.3, 0.5), "peer"),
    "mopps (peer; knob ratio)": ("mopps:ratio={x}", (0.2, 0.3, 0.4, 0.6, 0.8, 1.0), "peer"),
    "cures (peer; knob scale)": ("cures:scale={x}", (1000.0, 100.0, 10.0, 1.0, 0.01), "peer"),
}
#: The peers at their published settings (``curriculum.PEERS``), and the default family with no coverage
#: target (its most signal): a peer that trades coverage for yield is compared with it there.
AT_DEFAULTS = (*curriculum.PEERS, "signal:coverage=0")


def at_coverage(points: list[tuple[float, float]], target: float = TARGET_COVERAGE) -> float:
    """The best yield among ``(coverage, yield)`` points (in knob order) with coverage >= target, the
    segment between two consecutive points interpolated where it crosses the target; NaN if none."""
    best = [y for cov, y in points if cov >= target]
    for (c0, y0), (c1, y1) in zip(points, points[1:], strict=False):
        if min(c0, c1) < target <= max(c0, c1):
            best.append(y0 + (y1 - y0) * (target - c0) / (c1 - c0))
    return max(best) if best else float("nan")


def run(args) -> dict:
    families = {k: v for k, v in FAMILIES.items() if args.families is None or k in args.families.split(",")}
    out: dict = {}
    for truth, make in TRUTHS.items():
        if args.truths and truth not in args.truths.split(","):
            continue
        out[truth] = {f: [] for f in families}
        out[truth]["default"] = []
        for seed in range(args.seeds):
            log = make(args.prompts, args.steps, args.G, seed=seed)
            for fam, (template, knobs, _) in families.items():
                points = []
                for x in knobs:
                    r = curriculum.replay(log, template.format(x=x), args.batch_size, seed=POLICY_SEED + seed, G=args.G)
                    points.append((r["coverage"], r["signal_yield"]))
                y = points[0][1] if knobs == (None,) else at_coverage(points)
                out[truth][fam].append(y)
            r = curriculum.replay(log, curriculum.DEFAULT_POLICY, args.batch_size, seed=POLICY_SEED + seed, G=args.G)
            out[truth]["default"].append((r["signal_yield"], r["coverage"]))
            if any(FAMILIES[f][2] == "peer" for f in families):
                for spec in AT_DEFAULTS:
                    r = curriculum.replay(log, spec, args.batch_size, seed=POLICY_SEED + seed, G=args.G)
                    out[truth].setdefault("at defaults", {}).setdefault(spec, []).append(
                        (r["signal_yield"], r["coverage"])
                    )
    return out


def report(out: dict) -> bool:
    ok = True
    peers_below: list[str] = []
    for truth, rows in out.items():
        print(f"\n== {truth} == yield at coverage {TARGET_COVERAGE} (mean +- sd over seeds)")
        means = {}
        for fam, ys in rows.items():
            if fam in ("default", "at defaults"):
                continue
            ys = np.array(ys, dtype=float)
            hit = np.isfinite(ys)
            means[fam] = float(ys[hit].mean()) if hit.any() else float("nan")
            tag = FAMILIES[fam][2]
            kind = tag if isinstance(tag, str) else "baseline" if tag else "policy"
            spread = f"{ys[hit].std():.3f}" if hit.any() else "-"
            note = "" if hit.all() else f"  (coverage {TARGET_COVERAGE} reached in {hit.sum()} of {len(ys)} seeds)"
            print(f"  {fam:32s} {kind:8s} {means[fam]:.3f} +- {spread}{note}")
        d = np.array(rows["default"])
        dy, dc = float(d[:, 0].mean()), float(d[:, 1].mean())
        print(f"  {'default (' + curriculum.DEFAULT_POLICY + ')':32s} {'':8s} {dy:.3f} +- {d[:, 0].std():.3f}"
              f"  at coverage {dc:.3f}")  # fmt: skip
        base = {f: m for f, m in means.items() if FAMILIES[f][2] is True and np.isfinite(m)}
        beaten = [f for f, m in base.items() if m > dy + 1e-9]
        below = dc < TARGET_COVERAGE
        verdict = "on or above every baseline" if not beaten else f"below {', '.join(beaten)}"
        ratio = dy / means["uniform"] if "uniform" in means else float("nan")
        print(f"  default: {verdict}; coverage {'below' if below else 'at least'} {TARGET_COVERAGE}; "
              f"{ratio:.3f}x uniform")  # fmt: skip
        ok &= not beaten and not below and (truth != "u-drift" or ratio >= 1.4)
        peers_below += _report_peers(truth, rows, means, dy)
    print(f"\ndefault meets the bench's bar on every truth: {'yes' if ok else 'NO'}")
    if any(FAMILIES[f][2] == "peer" for f in next(iter(out.values()), {}) if f in FAMILIES):
        verdict = "yes" if not peers_below else "NO: below " + "; ".join(peers_below)
        print(f"default on or above every peer at coverage {TARGET_COVERAGE} on every truth: {verdict}")
    return ok


def _report_peers(truth: str, rows: dict, means: dict, dy: float) -> list[str]:
    """Print the peers' verdict at the target coverage and each peer at its published setting (yield
    and coverage) beside the default family without a coverage target; return where a peer is above."""
    peer_means = {f: m for f, m in means.items() if FAMILIES[f][2] == "peer" and np.isfinite(m)}
    if not peer_means:
        return []
    beaten = [f.split(" ")[0] for f, m in peer_means.items() if m > dy + 1e-9]
    print(f"  default vs peers at coverage {TARGET_COVERAGE}: "
          f"{'on or above every peer' if not beaten else 'below ' + ', '.join(beaten)}")  # fmt: skip
    for spec, pairs in rows.get("at defaults", {}).items():
        a = np.array(pairs)
        label = "ours, no coverage target" if spec.startswith("signal") else "as published"
        print(f"    {spec:18s} {label:25s} yield {a[:, 0].mean():.3f} +- {a[:, 0].std():.3f}"
              f" at coverage {a[:, 1].mean():.3f} +- {a[:, 1].std():.3f}")  # fmt: skip
    return [f"{p} on {truth}" for p in beaten]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--G", type=int, default=8)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--truths", default=None, help="comma-separated subset of " + ", ".join(TRUTHS))
    parser.add_argument("--families", default=None, help="comma-separated subset of " + ", ".join(FAMILIES))
    args = parser.parse_args()
    start = time.perf_counter()
    report(run(args))
    print(f"{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
