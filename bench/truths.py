"""Truths for the adaptive benches: distributions of per-prompt pass rates (docs/adaptive.md §10).

Each truth can be drawn (``draw``: rates for a simulated dataset) and held as a prior (``as_prior``:
the truth itself, for the exact frontier of ``bench/stopping_frontier.py``; a Beta truth as its Beta,
every other on the grid of ``prior.grid_points``, atoms at 0 and 1 included). The first four are the
benches' old truths; the others have what real datasets have and the old four do not: mass near the
band edges 0.1 and 0.9, where every rule must spend most.

- ``edge-hard``: 13% at 0, 35% uniform on [0.01, 0.2], 7% at 1, 45% Beta(1.5, 1.5): a third of the
  prompts near the hard edge, mean about 0.33 (the shape of a 1.5B model on DeepScaleR);
- ``edge-both``: 10% at 0, 20% uniform on [0.01, 0.2], 20% uniform on [0.8, 0.99], 10% at 1, 40% uniform;
- ``hard``: 90% at 0, 10% Beta(2, 5) (a weak model on a hard benchmark);
- ``big-math``: 30% at 0, 15% at 1, 55% Beta(0.5, 0.8): the U with atoms of large RL math sets;
- ``real``: the per-prompt pass rates of a stored profile (``bench/profiles/``, how it was made is in
  its ``made`` field), each prompt's c / n taken as its true rate; drawn by resampling the prompts.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline import adaptive  # noqa: E402
from pipeline import prior as priors  # noqa: E402

PROFILES = ROOT / "bench" / "profiles"
REAL_PROFILE = PROFILES / "gsm8k-smollm2.json"


@dataclass(frozen=True)
class Part:
    """One component of a truth: ``share`` of the prompts, ``kind`` ``atom`` (at ``x``), ``beta``
    (``Beta(x, y)``) or ``uniform`` (on ``[x, y]``)."""

    share: float
    kind: str
    x: float
    y: float = 0.0

    def draw(self, N: int, rng: np.random.Generator) -> np.ndarray:
        if self.kind == "atom":
            return np.full(N, self.x)
        if self.kind == "beta":
            return rng.beta(self.x, self.y, N)
        return rng.uniform(self.x, self.y, N)

    def cdf(self, e: np.ndarray) -> np.ndarray:
        from scipy.special import betainc

        if self.kind == "beta":
            return betainc(self.x, self.y, e)
        return np.clip((e - self.x) / (self.y - self.x), 0.0, 1.0)


@dataclass(frozen=True)
class Labels:
    """Pass-rate labels from another model, as a dataset carries them (Big-Math's solve rate): the other
    model's rate is ``sigmoid(shift + slope x logit(p) + sd x z)`` (``p`` clipped to ``[clip, 1 - clip]``,
    ``z`` standard normal per prompt), and the label its ``right`` of ``k`` answers over ``k``. With the
    defaults the other model is a little stronger, and its label's rank correlation with the truth
    is 0.79 on ``edge-hard`` (Spearman, 4,000 prompts, 0.791 +- 0.006 over 5 seeds)."""

    shift: float = 0.5
    slope: float = 1.0
    sd: float = 1.5
    k: int = 8
    clip: float = 0.002

    def draw(self, rates: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        from scipy.special import expit, logit

        p = np.clip(np.asarray(rates, float), self.clip, 1 - self.clip)
        other = expit(self.shift + self.slope * logit(p) + self.sd * rng.standard_normal(p.shape))
        return rng.binomial(self.k, other) / self.k


@dataclass(frozen=True)
class Truth:
    name: str
    text: str
    parts: tuple[Part, ...] = ()
    rates: tuple[float, ...] = field(default=(), repr=False)  # an empirical truth (``real``)
    labels: Labels | None = None  # another model's pass-rate labels the dataset carries

    def draw(self, N: int, rng: np.random.Generator) -> np.ndarray:
        if self.rates:
            return rng.choice(np.asarray(self.rates), N, replace=True)
        # Each part gets its share of the prompts exactly (largest remainders), in a random order: the
        # count of prompts near an edge is the truth's, not a binomial draw of it (which moves a small
        # dataset's misclassification by more than the differences measured).
        shares = np.array([p.share for p in self.parts])
        counts = np.floor(shares * N).astype(int)
        counts[np.argsort(-(shares * N - counts))[: N - counts.sum()]] += 1
        which = rng.permutation(np.repeat(np.arange(len(self.parts)), counts))
        out = np.empty(N)
        for k, part in enumerate(self.parts):
            sel = which == k
            out[sel] = part.draw(int(sel.sum()), rng)
        return out

    def as_prior(self) -> adaptive.Prior:
        """The truth as a prior: a Beta truth as itself, every other held on the grid (each
        interior point the mass of its cell, ``prior.grid_cells``; the atoms at the end points)."""
        if len(self.parts) == 1 and self.parts[0].kind == "beta":
            return adaptive.Prior(self.parts[0].x, self.parts[0].y, method="truth")
        pts = priors.grid_points()
        w = np.zeros(len(pts))
        if self.rates:
            r = np.asarray(self.rates)
            w[0], w[-1] = float((r == 0).mean()), float((r == 1).mean())
            inner = r[(r > 0) & (r < 1)]
            cell = np.searchsorted(priors.grid_cells(pts), inner, side="right")  # 1..K-2
            np.add.at(w, np.clip(cell, 1, len(pts) - 2), 1.0 / len(r))
        else:
            edges = priors.grid_cells(pts)
            for part in self.parts:
                if part.kind == "atom":
                    w[0 if part.x == 0 else -1 if part.x == 1 else int(np.argmin(abs(pts - part.x)))] += part.share
                else:
                    w[1:-1] += part.share * np.diff(part.cdf(edges))
        w /= w.sum()
        return adaptive.Prior(0.5, 0.5, method="truth", points=tuple(pts.tolist()), weights=tuple(w.tolist()))


def _mix(*parts: tuple) -> tuple[Part, ...]:
    return tuple(Part(*p) for p in parts)


TRUTHS: dict[str, Truth] = {
    t.name: t
    for t in (
        Truth("u-shaped", "Beta(0.3, 0.4)", _mix((1.0, "beta", 0.3, 0.4))),
        Truth("uniform", "Beta(1, 1)", _mix((1.0, "beta", 1.0, 1.0))),
        Truth("easy-skewed", "Beta(4, 1)", _mix((1.0, "beta", 4.0, 1.0))),
        Truth(
            "mixture",
            "30% at 0, 25% at 1, 45% Beta(2, 2)",
            _mix((0.30, "atom", 0.0), (0.25, "atom", 1.0), (0.45, "beta", 2.0, 2.0)),
        ),
        Truth(
            "edge-hard",
            "13% at 0, 35% U[0.01, 0.2], 7% at 1, 45% Beta(1.5, 1.5)",
            _mix((0.13, "atom", 0.0), (0.35, "uniform", 0.01, 0.2), (0.07, "atom", 1.0), (0.45, "beta", 1.5, 1.5)),
        ),
        Truth(
            "edge-both",
            "10% at 0, 20% U[0.01, 0.2], 20% U[0.8, 0.99], 10% at 1, 40% U[0, 1]",
            _mix(
                (0.10, "atom", 0.0),
                (0.20, "uniform", 0.01, 0.2),
                (0.20, "uniform", 0.8, 0.99),
                (0.10, "atom", 1.0),
                (0.40, "uniform", 0.0, 1.0),
            ),
        ),
        Truth("hard", "90% at 0, 10% Beta(2, 5)", _mix((0.90, "atom", 0.0), (0.10, "beta", 2.0, 5.0))),
        Truth(
            "big-math",
            "30% at 0, 15% at 1, 55% Beta(0.5, 0.8)",
            _mix((0.30, "atom", 0.0), (0.15, "atom", 1.0), (0.55, "beta", 0.5, 0.8)),
        ),
    )
}


@dataclass(frozen=True)
class Lengths:
    """Answer lengths in tokens shaped like real ones (Qwen2.5-Math on MATH, 100 problems x 8: wrong
    answers 1.32x the length of right ones; prompts with 1 to 7 of 8 right 1.3x to 2.7x the length
    of always-solved ones). A prompt of true rate ``p`` has a right answer's mean length
    ``base x (1 + hard x (1 - p)) x exp(eta)`` (``eta ~ N(0, prompt_sd^2)``: some prompts run long
    whatever their rate), a wrong answer's ``wrong`` times that; one answer's length is Gamma with
    shape ``shape`` around its mean (coefficient of variation ``1 / sqrt(shape)``). With these
    defaults a prompt at 1/8 runs 2.6x and one at 7/8 1.2x an always-solved one."""

    base: float = 300.0
    hard: float = 1.2
    wrong: float = 1.32
    prompt_sd: float = 0.3
    shape: float = 4.0

    def right_means(self, rates: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Per prompt, the mean length of a right answer (the prompt's own draw of ``eta``)."""
        rates = np.asarray(rates, float)
        return self.base * (1.0 + self.hard * (1.0 - rates)) * np.exp(rng.normal(0.0, self.prompt_sd, rates.shape))

    def expected(self, rates: np.ndarray, right_means: np.ndarray) -> np.ndarray:
        """Per prompt, the expected length of one answer: ``p`` right ones and ``1 - p`` wrong ones."""
        rates = np.asarray(rates, float)
        return right_means * (rates + (1.0 - rates) * self.wrong)

    def draw(self, right_means: np.ndarray, correct: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Lengths of answers: ``correct`` (any shape whose first axis is the prompts) right or wrong."""
        correct = np.asarray(correct, bool)
        means = np.asarray(right_means, float).reshape((-1,) + (1,) * (correct.ndim - 1))
        means = np.where(correct, means, means * self.wrong)
        return rng.gamma(self.shape, means / self.shape)

    def draw_counts(
        self, right_means: np.ndarray, n: np.ndarray, c: np.ndarray, rng: np.random.Generator
    ) -> np.ndarray:
        """The total tokens of each prompt's ``n`` answers of which ``c`` are right (a sum of Gammas
        of one mean is a Gamma: exact, without drawing each answer)."""
        n, c = np.asarray(n, float), np.asarray(c, float)
        right = rng.gamma(np.maximum(self.shape * c, 1e-300), right_means / self.shape) * (c > 0)
        wrong = rng.gamma(np.maximum(self.shape * (n - c), 1e-300), right_means * self.wrong / self.shape) * (n > c)
        return right + wrong


LENGTHS = Lengths()


#: Truths whose datasets carry labels from another model (``frontier_gap``'s label prior): not in
#: ``TRUTHS``, which every bench walks.
LABELLED: dict[str, Truth] = {
    "edge-hard-labelled": replace(
        TRUTHS["edge-hard"],
        name="edge-hard-labelled",
        text=TRUTHS["edge-hard"].text + ", labelled by another model (8 answers, logit + 0.5, sd 1.5)",
        labels=Labels(),
    )
}


def real_truth(path: Path = REAL_PROFILE) -> Truth | None:
    """The ``real`` truth from a stored profile (JSON: ``made``, ``n``, ``c`` per prompt), or None
    when the file is absent."""
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    n, c = np.asarray(data["n"], float), np.asarray(data["c"], float)
    rates = tuple((c / n).tolist())
    return Truth("real", f"{data['name']}: {len(rates)} prompts, c/n of {int(n.max())} samples each", rates=rates)


def get(name: str) -> Truth | None:
    """A truth by name (None: ``real`` without its stored profile)."""
    if name == "real":
        return real_truth()
    if name in LABELLED:
        return LABELLED[name]
    if name not in TRUTHS:
        raise SystemExit(f"unknown truth {name!r}; known: {', '.join([*TRUTHS, *LABELLED, 'real'])}")
    return TRUTHS[name]


def store_profile(data_dir: Path, run_id: str, name: str, made: str) -> Path:
    """Write the per-prompt counts of a stored fixed-n run as a profile ``real_truth`` reads."""
    from pipeline.store import Store

    ps = Store.open(data_dir).read_table("prompt_stats", {"run_id": run_id})
    out = PROFILES / f"{name}.json"
    PROFILES.mkdir(exist_ok=True)
    n, c = ps.column("n").to_pylist(), ps.column("c").to_pylist()
    out.write_text(json.dumps({"name": name, "made": made, "run_id": run_id, "n": n, "c": c}) + "\n")
    return out


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description="Store a fixed-n profile as the bench's real truth.")
    ap.add_argument("--data-dir", type=Path, required=True, help="the store the profile ran in")
    ap.add_argument("--run", required=True, help="the run id of a fixed-n profile")
    ap.add_argument("--name", default=REAL_PROFILE.stem)
    ap.add_argument("--made", required=True, help="how the profile was made (the command), kept in the file")
    args = ap.parse_args()
    print(store_profile(args.data_dir, args.run, args.name, args.made))


if __name__ == "__main__":
    main()
