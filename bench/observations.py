"""Benchmark: reading verl rollout dumps with ``observe.sources`` against a bare Arrow JSON read.

Writes ``--steps`` step files of ``--prompts`` prompts x ``--rollouts`` rollouts with verl 0.9.1's
own writer (``tests/fixtures/make_verl_dump.py``: decoded chat prompts of the real DeepScaleR
rows, cycled; completions of a few hundred characters), then times, best of ``--rounds``
alternating rounds:

- ``reader``: ``Matcher.from_problems``, then ``sources.read_verl_step`` on every step (a fresh
  ``Matcher`` per round, its build timed with the reader, so the first steps pay the chat-prompt
  search and later ones hit the cache, as an import does), matching every rollout, counting per prompt;
- ``baseline``: ``pyarrow.json.read_json`` of the same files, nothing else.

Target: reader / baseline <= 3x.

    python bench/observations.py [--steps 50] [--prompts 256] [--rollouts 8] [--rounds 3]
"""

from __future__ import annotations

import argparse
import importlib.util
import tempfile
import time
from pathlib import Path

import pyarrow.json as pajson

from pipeline import datasets
from pipeline.observe import match, sources

ROOT = Path(__file__).resolve().parents[1]


def _fixture_maker():
    spec = importlib.util.spec_from_file_location("make_verl_dump", ROOT / "tests" / "fixtures" / "make_verl_dump.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--prompts", type=int, default=256)
    parser.add_argument("--rollouts", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    maker = _fixture_maker()
    problems = datasets.load(data_file=maker.DEEPSCALER).problems
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "rollouts"
        t0 = time.perf_counter()
        maker.make_dump(
            folder,
            maker.deepscaler_rows(),
            steps=args.steps,
            prompts=args.prompts,
            rollouts=args.rollouts,
            write=lambda *a: _quiet(maker, *a),
        )
        size = sum(p.stat().st_size for p in folder.iterdir())
        shape = f"{args.steps} steps x {args.prompts} prompts x {args.rollouts} rollouts"
        print(f"wrote {shape}: {size / 1e6:.1f} MB in {time.perf_counter() - t0:.1f}s")
        files = sources.verl_steps(folder)
        best = {"reader": float("inf"), "baseline": float("inf")}
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            matcher = match.Matcher.from_problems(problems)
            t_match = time.perf_counter() - t0
            obs_rows = unmatched = 0
            for step, path in files:
                obs, miss = sources.read_verl_step(path, step, matcher, source="verl:bench", model=None)
                obs_rows += sum(obs["n"].to_pylist())  # rollouts counted
                unmatched += miss.num_rows
            best["reader"] = min(best["reader"], time.perf_counter() - t0)
            t0 = time.perf_counter()
            for _, path in files:
                pajson.read_json(path)
            best["baseline"] = min(best["baseline"], time.perf_counter() - t0)
        assert unmatched == 0 and obs_rows == args.steps * args.prompts * args.rollouts, (obs_rows, unmatched)
    total = args.steps * args.prompts * args.rollouts
    print(f"matcher build ({len(problems)} prompts): {t_match:.3f}s (in the reader's time)")
    for name, secs in best.items():
        print(f"{name:9s} best of {args.rounds}: {secs:.3f}s  ({total / secs:,.0f} rollouts/s)")
    print(f"ratio reader / baseline: {best['reader'] / best['baseline']:.2f}x (target <= 3x)")


def _quiet(maker, *args) -> None:
    """verl's writer prints one line per step; keep the bench's output to its numbers."""
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):
        maker.write_generations(*args)


if __name__ == "__main__":
    main()
