"""A tiny stored run for report tests, and a headless-Chromium check of a rendered report.

``build_run`` writes, through a ``Store``, everything a finished profile leaves: the problems of
the bundled arithmetic dataset, a runs row, synthetic sample shards (seeded correctness that falls
with the problem's difficulty tier, extracted answers with a few recurring wrong ones), and the
analysis tables (prompt_stats, weights, summary) computed by ``pipeline.analyze`` with allocations
from ``pipeline.allocate.allocate_prompts``, each stored under its ``allocation_key``. No flow and
no CLI is involved: the tables are built directly.

``check_in_browser`` opens an HTML file from disk in Debian's ``chromium`` through Playwright
with every non-file request blocked, and reports JavaScript errors and how many charts drew.

Run as a script to write the README screenshot::

    python tests/report_fixtures.py --screenshot docs/report-screenshot.png [--section weights]
    python tests/report_fixtures.py --screenshot docs/report-first-screen.png --first-screen
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa

from pipeline import allocate, analyze, datasets, finish, schema
from pipeline.store import RunRecord, Store

CHROMIUM = os.environ.get("DIFFICULTY_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def build_run(
    store: Store,
    run_id: str = "tiny-run",
    *,
    n_prompts: int = 36,
    n_samples: int = 16,
    seed: int = 0,
    model: str = "fake-model-a",
    skill: float = 0.0,
    answers: bool = True,
    priors: bool = True,
    analysis: bool = True,
    group_sizes: tuple[int, ...] = (2, 4, 8, 16, 32),
    created_at: datetime | None = None,
    shards: int = 2,
    status: str = "done",
) -> str:
    """Write a small complete run into ``store`` and return its run_id.

    Args:
        store: the data directory's store.
        run_id: id of the run.
        n_prompts: arithmetic problems (tiers interleaved, so all difficulties appear).
        n_samples: samples per prompt.
        seed: seed of the synthetic correctness and answers.
        model: model name recorded in the runs row.
        skill: shifts every prompt's logit of success (a "better checkpoint" when > 0).
        answers: record extracted answers (else all null: no answer-concentration data).
        priors: give the problems synthetic prior counts (like Big-Math's llama8b rates).
        analysis: also write prompt_stats, weights, summary and allocation.
        group_sizes: G values of the stored analysis.
        created_at: the run's creation time (newest run = report default).
        shards: sample shards to split the prompts into.
        status: the run's status in the registry.
    """
    rng = np.random.default_rng(seed)
    problems = datasets.load("arithmetic", limit=n_prompts).problems
    difficulty = np.asarray(problems.column("difficulty").to_pylist(), float)
    # true pass rate falls with the tier: tier 1 about 0.97, tier 9 about 0.02
    logit = 4.0 - 0.95 * (difficulty - 1) + skill + rng.normal(0, 0.6, len(difficulty))
    p_true = 1 / (1 + np.exp(-logit))
    if priors:
        prior_p = 1 / (1 + np.exp(-(logit - 1.0 + rng.normal(0, 0.5, len(logit)))))
        prior_c = rng.binomial(64, prior_p)
        problems = problems.set_column(
            problems.schema.get_field_index("prior_n"),
            "prior_n",
            pa.array([64] * len(logit), pa.int32()),
        ).set_column(problems.schema.get_field_index("prior_c"), "prior_c", pa.array(prior_c, pa.int32()))
    store.write_table("problems", problems, {"dataset": "arithmetic"})

    created = created_at or datetime.now(UTC)
    store.register_run(
        RunRecord(
            run_id,
            dataset="arithmetic",
            model=model,
            backend="synthetic",
            params={
                "n": n_samples,
                "temperature": 0.8,
                "top_p": 0.95,
                "max_tokens": 256,
                "limit": n_prompts,
            },
            seed=seed,
            prompt_template="arithmetic",
            grader="math-verify",
            versions={"pipeline": "test"},
            n_prompts=n_prompts,
            created_at=created,
            status=status,
        )
    )

    ids = problems.column("prompt_id").to_pylist()
    gold = problems.column("answer").to_pylist()
    rows = []
    for i, (pid, g) in enumerate(zip(ids, gold, strict=True)):
        wrong_pool = [str(int(g) + d) for d in (1, -1, 10, 2)]
        for j in range(n_samples):
            ok = bool(rng.random() < p_true[i])
            roll = rng.random()
            if ok:
                status, answer = "correct", g
            elif roll < 0.08:
                status, answer = "unparsed", None
            elif roll < 0.10:
                status, answer = "timeout", None
            else:  # wrong answers concentrate on a modal mistake
                status = "incorrect"
                answer = wrong_pool[min(int(rng.geometric(0.55)) - 1, len(wrong_pool) - 1)]
            rows.append(
                {
                    "run_id": run_id,
                    "prompt_id": pid,
                    "sample_idx": j,
                    "completion": f"The answer is {answer}." if answer is not None else "I am not sure.",
                    "finish_reason": "length" if status == "unparsed" else "stop",
                    "n_tokens": int(rng.integers(5, 60)),
                    "extracted_answer": answer if answers else None,
                    "grade_status": status,
                    "grade_reason": None,
                    "correct": ok,
                    "grader": "math-verify",
                }
            )
    samples = pa.Table.from_pylist(rows, schema=schema.SAMPLES)
    bounds = np.linspace(0, len(ids), shards + 1).astype(int) * n_samples
    for shard in range(shards):
        part = samples.slice(bounds[shard], bounds[shard + 1] - bounds[shard])
        store.write_shard(run_id, shard, part, answer_counts=analyze.answer_counts(run_id, shard, part))

    if analysis:
        write_analysis(store, run_id, group_sizes=group_sizes)
    return run_id


def write_analysis(store: Store, run_id: str, *, group_sizes=(2, 4, 8, 16, 32), G: int = 8) -> None:
    """Compute and store prompt_stats, weights, summary and three allocations of a run (signal,
    knapsack and variance objectives, ``G`` rollouts per prompt, point estimates)."""
    counts = finish.run_counts(store, run_id)  # with the answers cut by the token limit, as a run's finish
    result = analyze.analyze(counts, run_id, analyze.AnalyzeConfig(group_sizes=group_sizes))
    finish.write_analysis(store, run_id, result)
    for objective in ("signal", "knapsack", "variance"):
        config = allocate.AllocationConfig(budget=G * counts.num_rows, objective=objective, n_min=2, n_max=64)
        write_allocation(store, run_id, config, counts)


def write_allocation(
    store: Store, run_id: str, config: allocate.AllocationConfig, counts: pa.Table, price=None
) -> pa.Table:
    """Allocate over ``counts`` (prompt_id, n, c) and store it under the allocation's own key
    (``price``: tokens per rollout of each prompt, for an allocation priced in tokens)."""
    n, c = counts.column("n").to_numpy(), counts.column("c").to_numpy()
    table, _ = allocate.allocate_prompts(run_id, counts.column("prompt_id"), n, c, config, price=price)
    store.write_table("allocation", table, {"run_id": run_id}, part=allocate.allocation_key(config))
    return table


# --- the browser check --------------------------------------------------------------------------


@dataclass
class BrowserResult:
    """What Chromium saw when it opened a report."""

    errors: list[str] = field(default_factory=list)  # console errors and uncaught exceptions
    blocked: list[str] = field(default_factory=list)  # requests that were not file://
    charts: list[dict] = field(default_factory=list)  # one entry per plotly div
    captions: int = 0
    sections: int = 0
    load_s: float = 0.0

    @property
    def drawn(self) -> int:
        return sum(1 for c in self.charts if c["drawn"])


# Per chart div: a laid-out main-svg with a non-zero box, at least one trace group drawn in the
# plot area, and the title and axis labels plotly actually rendered.
_CHART_PROBE = """
() => Array.from(document.querySelectorAll('div.plotly-graph-div')).map(gd => {
  const svg = gd.querySelector('svg.main-svg');
  const box = svg ? svg.getBoundingClientRect() : {width: 0, height: 0};
  const traces = gd.querySelectorAll('.cartesianlayer .trace');
  // marks actually painted: trace paths (markers, bars, lines, error bars) with a non-empty box
  let marks = 0;
  gd.querySelectorAll('.cartesianlayer .trace path').forEach(p => {
    const b = p.getBBox();
    if (b.width > 0 || b.height > 0) marks += 1;
  });
  const text = sel => { const e = gd.querySelector(sel); return e ? e.textContent.trim() : ''; };
  const fig = gd.closest('figure');
  const caption = fig && fig.querySelector('figcaption');
  return {
    id: gd.id,
    width: box.width, height: box.height,
    traces: traces.length, marks: marks,
    title: text('.gtitle'), xtitle: text('.xtitle'), ytitle: text('.ytitle'),
    caption: caption ? caption.textContent.trim() : '',
    drawn: !!svg && box.width > 0 && box.height > 0 && traces.length > 0 && marks > 0,
  };
})
"""


def chromium_missing_message() -> str | None:
    """None when Chromium is installed, else what to install (Playwright is a test dependency)."""
    if not Path(CHROMIUM).exists() and not shutil.which(CHROMIUM):
        return (
            f"Chromium not found at {CHROMIUM}: install Debian's package "
            "(`apt-get install -y chromium`) or set DIFFICULTY_CHROMIUM to its path"
        )
    return None


@contextmanager
def open_browser():
    """Headless Chromium (Debian's package) driven by Playwright; closed on exit."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def check_page(
    browser,
    html_path: str | os.PathLike,
    screenshot: str | os.PathLike | None = None,
    *,
    section: str | None = None,
    width: int = 1280,
    timeout_ms: int = 30_000,
    full_page: bool = True,
) -> BrowserResult:
    """Open ``html_path`` from disk with every non-file request blocked; probe its charts.

    Args:
        browser: from ``open_browser``.
        html_path: the report file.
        screenshot: where to write a PNG (the full page, or one section).
        section: id of the section to screenshot (e.g. ``weights``) instead of the full page.
        width: viewport width in pixels.
        timeout_ms: page-load timeout.
        full_page: the whole page, or (False) only what the first screen (``width`` x 900) shows.
    """
    result = BrowserResult()
    page = browser.new_page(viewport={"width": width, "height": 900})
    try:
        page.on("console", lambda m: m.type == "error" and result.errors.append(f"console: {m.text}"))
        page.on("pageerror", lambda e: result.errors.append(f"pageerror: {e}"))

        def route(r):
            if r.request.url.startswith("file://"):
                r.continue_()
            else:
                result.blocked.append(r.request.url)
                r.abort()

        page.route("**/*", route)
        start = time.perf_counter()
        page.goto(Path(html_path).resolve().as_uri(), wait_until="load", timeout=timeout_ms)
        # plotly draws inside newPlot; wait until every chart div has its layout and svg
        page.wait_for_function(
            "() => Array.from(document.querySelectorAll('div.plotly-graph-div'))"
            ".every(gd => gd._fullLayout && gd.querySelector('svg.main-svg'))",
            timeout=timeout_ms,
        )
        result.load_s = time.perf_counter() - start
        result.charts = page.evaluate(_CHART_PROBE)
        result.captions = page.locator("figure.chart figcaption").count()
        result.sections = page.locator("main section").count()
        if screenshot is not None:
            Path(screenshot).parent.mkdir(parents=True, exist_ok=True)
            if section:
                # the sticky navigation bar would cover the top of an element screenshot
                page.add_style_tag(content="nav { position: static !important; }")
                page.locator(f"section#{section}").screenshot(path=str(screenshot))
            else:
                page.screenshot(path=str(screenshot), full_page=full_page)
    finally:
        page.close()
    return result


def check_in_browser(html_path, screenshot=None, *, section=None, **kwargs) -> BrowserResult:
    """``check_page`` in a browser of its own."""
    with open_browser() as browser:
        return check_page(browser, html_path, screenshot, section=section, **kwargs)


def main(argv: list[str] | None = None) -> int:
    """Render a report (of a stored run, or of a tiny synthetic one) and screenshot it."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--screenshot", default="docs/report-screenshot.png")
    parser.add_argument("--section", default="weights", help="section id to capture ('' for the whole page)")
    parser.add_argument("--data-dir", help="use this data directory's run instead of a synthetic one")
    parser.add_argument("--run", help="run to report (default: newest)")
    parser.add_argument("--G", type=int, default=8)
    parser.add_argument("--first-screen", action="store_true", help="only the first screen, 1400 x 900")
    args = parser.parse_args(argv)
    from pipeline.reports import render_report

    missing = chromium_missing_message()
    if missing:
        print(missing, file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        if args.data_dir:
            store = Store.open(args.data_dir, create=False)
            run_id = args.run or store.list_runs().column("run_id")[0].as_py()
        else:
            store = Store(Path(tmp) / "data")
            run_id = build_run(
                store,
                "example-run",
                n_prompts=90,
                n_samples=32,
                model="SmolLM2-135M-Instruct (synthetic)",
            )
        html = render_report(store, run_id, Path(tmp) / "report.html", G=args.G)
        if args.first_screen:
            res = check_in_browser(html, args.screenshot, width=1400, full_page=False)
        else:
            res = check_in_browser(html, args.screenshot, section=args.section or None)
    print(
        json.dumps(
            {
                "screenshot": args.screenshot,
                "charts": len(res.charts),
                "drawn": res.drawn,
                "errors": res.errors,
            },
            indent=1,
        )
    )
    return 0 if not res.errors and res.drawn == len(res.charts) else 1


if __name__ == "__main__":
    sys.exit(main())
