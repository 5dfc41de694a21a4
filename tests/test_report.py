"""The HTML report: rendered from a tiny stored run, drawn by a real headless Chromium offline."""

from __future__ import annotations

import ast
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import typer
from pipeline.reports.charts import estimator_colors
from pipeline.reports.sections import build_sections
from pipeline.reports.sections.allocation import allocation_parts
from plotly.offline import get_plotlyjs
from report_fixtures import build_run, check_page, chromium_missing_message, open_browser, write_allocation
from typer.testing import CliRunner

from pipeline import allocate, finish, reports, schema
from pipeline.errors import ConfigError, StoreError
from pipeline.store import Store

REPORT_PACKAGE = Path(reports.__file__).parent
N_SECTIONS = 12  # thirteen for an adaptive run (its rounds); docs/guide/report.md lists them


def _plotly_banner() -> str:
    """The first line of plotly.min.js (its version banner), to count how often it is inlined."""
    return get_plotlyjs().lstrip()[:40]


def _chart_divs(html: str) -> int:
    return len(re.findall(r'class="plotly-graph-div"', html))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two stored runs of the same prompts: run-a fully analysed (priors, answers), run-b with
    samples only (the report analyses it in memory) and no extracted answers."""
    store = Store(tmp_path_factory.mktemp("report") / "data")
    now = datetime.now(UTC)
    build_run(store, "run-a", model="model-a", created_at=now - timedelta(hours=1))
    build_run(
        store,
        "run-b",
        model="model-b",
        skill=1.0,
        seed=1,
        answers=False,
        analysis=False,
        created_at=now,
    )
    return store


@pytest.fixture(scope="module")
def browser():
    missing = chromium_missing_message()
    if missing:  # CI installs Chromium; a missing browser is a broken set-up, not a skip
        pytest.fail(missing, pytrace=False)
    with open_browser() as b:
        yield b


def _assert_drawn(result, html: str, sections: int) -> None:
    assert result.errors == [], f"JavaScript errors: {result.errors}"
    assert result.blocked == [], f"the report asked the network for {result.blocked}"
    assert result.sections == sections
    divs = _chart_divs(html)
    assert divs > 0
    assert len(result.charts) == divs
    undrawn = [c for c in result.charts if not c["drawn"]]
    assert not undrawn, f"charts not drawn: {undrawn}"
    assert result.drawn == divs
    for chart in result.charts:
        assert chart["title"] and chart["xtitle"] and chart["ytitle"], chart
        assert chart["caption"], chart
        assert chart["width"] > 100 and chart["height"] > 100, chart


@pytest.mark.slow
def test_reports_draw_offline_in_chromium(runs, browser, tmp_path):
    out = tmp_path / "reports"
    a = reports.render_report(runs, "run-a", out / "run-a.html")
    b = reports.render_report(runs, "run-b", out / "run-b.html", plotly_js="shared")
    cmp = reports.render_comparison(runs, ["run-a", "run-b"], out / "compare.html")

    result = check_page(browser, a, tmp_path / "run-a.png")
    _assert_drawn(result, a.read_text(), N_SECTIONS)
    # every section with data draws its charts: run-a has them all (answers, priors, labels)
    assert len(result.charts) >= 12
    shot = (tmp_path / "run-a.png").read_bytes()
    assert shot[:8] == b"\x89PNG\r\n\x1a\n" and len(shot) > 50_000

    result = check_page(browser, b, tmp_path / "run-b.png", section="weights")
    _assert_drawn(result, b.read_text(), N_SECTIONS)
    assert (tmp_path / "run-b.png").stat().st_size > 10_000

    result = check_page(browser, cmp, tmp_path / "compare.png")
    _assert_drawn(result, cmp.read_text(), 6)
    assert (tmp_path / "compare.png").stat().st_size > 10_000


@pytest.mark.slow
def test_browser_check_catches_errors_and_blank_charts(browser, tmp_path):
    """The probe itself: a chart with no data, a thrown error and a network request are caught."""
    reports.write_plotly_js(tmp_path)
    page = tmp_path / "broken.html"
    page.write_text(
        f'<html><head><script src="{reports.PLOTLY_JS_NAME}"></script></head><body>'
        '<figure><div id="good" class="plotly-graph-div"></div><figcaption>c</figcaption></figure>'
        '<figure><div id="blank" class="plotly-graph-div"></div></figure>'
        "<img src='http://example.invalid/x.png'>"
        "<script>Plotly.newPlot('good', [{x: [1, 2], y: [3, 1], type: 'bar'}],"
        " {title: {text: 't'}, xaxis: {title: {text: 'x'}}, yaxis: {title: {text: 'y'}}});"
        "Plotly.newPlot('blank', [], {});"
        "throw new Error('boom');</script></body></html>"
    )
    result = check_page(browser, page)
    assert any("boom" in e for e in result.errors)
    assert result.blocked == ["http://example.invalid/x.png"]
    drawn = {c["id"]: c["drawn"] for c in result.charts}
    assert drawn == {"good": True, "blank": False}


def test_inline_report_is_self_contained(runs, tmp_path):
    html = reports.render_report(runs, "run-a", tmp_path / "a.html").read_text()
    assert html.count(_plotly_banner()) == 1  # plotly.js once per file, not once per chart
    assert _chart_divs(html) >= 12
    # nothing is loaded from elsewhere (plotly.min.js itself mentions its CDN, so look at tags)
    assert not re.search(r"<script[^>]*\bsrc=", html)
    assert not re.search(r"<link[^>]*\bhref=", html)
    assert not (tmp_path / reports.PLOTLY_JS_NAME).exists()
    assert html.count("<section id=") == N_SECTIONS
    assert html.count("<figcaption>") == _chart_divs(html)


def test_shared_plotly_js_is_written_once_beside_the_reports(runs, tmp_path):
    a = reports.render_report(runs, "run-a", tmp_path / "a.html", plotly_js="shared")
    js = tmp_path / reports.PLOTLY_JS_NAME
    first = js.stat().st_mtime_ns
    b = reports.render_report(runs, "run-b", tmp_path / "b.html", plotly_js="shared")
    assert js.read_text() == get_plotlyjs()
    assert js.stat().st_mtime_ns == first  # an up-to-date shared file is not rewritten
    for path in (a, b):
        html = path.read_text()
        assert f'src="{reports.PLOTLY_JS_NAME}"' in html
        assert _plotly_banner() not in html
        assert len(html) < len(get_plotlyjs()) / 5


def test_missing_data_gets_notes_not_empty_charts(tmp_path):
    store = Store(tmp_path / "data")
    build_run(store, "bare", answers=False, priors=False, analysis=False, n_prompts=18)
    # strip the dataset's labels and put markup in a problem text
    problems = store.read_table("problems", {"dataset": "arithmetic"})
    for name in ("source", "difficulty"):
        i = problems.schema.get_field_index(name)
        problems = problems.set_column(i, name, pa.nulls(problems.num_rows, problems.schema.field(name).type))
    text = problems.column("problem").to_pylist()
    text[0] = "<script>alert('x')</script> What is 1 + 1?"
    problems = problems.set_column(problems.schema.get_field_index("problem"), "problem", pa.array(text))
    store.write_table("problems", problems, {"dataset": "arithmetic"})

    html = reports.render_report(store, "bare", tmp_path / "bare.html").read_text()
    assert "no prior pass rates" in html
    assert "no extracted answers" in html
    assert "no source, domain, topic or difficulty labels" in html
    assert "computed for this report" in html
    assert "<script>alert(" not in html and "&lt;script&gt;alert(" in html

    def section(name: str) -> str:
        return html.split(f'<section id="{name}">')[1].split("</section>")[0]

    assert "plotly-graph-div" not in section("answers")
    assert "plotly-graph-div" not in section("breakdown")
    assert "plotly-graph-div" in section("weights")
    # the report reads the store and never writes analysis tables into it
    for table in ("prompt_stats", "weights", "summary", "allocation"):
        assert store.read_table(table, {"run_id": "bare"}).num_rows == 0


def test_in_memory_analysis_matches_stored_tables(runs, tmp_path):
    stored = reports.load_run(runs, "run-a")
    assert stored.computed == []
    # the same samples without stored analysis: computed in memory, same numbers
    copy = Store(tmp_path / "data")
    build_run(copy, "run-a", model="model-a", analysis=False)
    fresh = reports.load_run(copy, "run-a")
    assert {"prompt_stats", "summary", "weights", "allocation"} <= set(fresh.computed)
    cols = ["prompt_id", "n", "c", "pass_rate", "zero_signal_G"]
    assert stored.stats.select(cols).sort("prompt_id").equals(fresh.stats.select(cols).sort("prompt_id"))
    key = ["section", "metric", "estimator", "G", "band", "k"]
    a = stored.summary.filter(stored.summary["G"].is_in([8])).sort(key)
    b = fresh.summary.filter(fresh.summary["G"].is_in([8])).sort(key)
    assert a.height > 0 and a.select([*key, "value"]).equals(b.select([*key, "value"]))
    assert stored.top_mass is not None and fresh.top_mass is not None
    assert stored.top_mass["prompt_id"].to_list() == fresh.top_mass["prompt_id"].to_list()


def test_the_report_leaves_a_stored_runs_weights_on_disk(runs, tmp_path):
    full = finish.read_analysis(runs, "run-a")
    lean = finish.read_analysis(runs, "run-a", weights=False)
    assert full is not None and lean is not None and full.weights.num_rows > 0
    assert lean.weights.num_rows == 0 and lean.prompt_stats.equals(full.prompt_stats)
    bare = Store(tmp_path / "data")
    build_run(bare, "run-a", model="model-a", analysis=False)
    assert finish.read_analysis(bare, "run-a", weights=False) is None  # nothing stored: computed instead


def test_allocation_table_spends_the_budget(runs):
    from pipeline.allocate import AllocationConfig, allocate_prompts

    stats = runs.read_table("prompt_stats", {"run_id": "run-a"})
    n = stats.column("n").to_numpy()
    c = stats.column("c").to_numpy()
    table, _ = allocate_prompts(
        "run-a",
        stats.column("prompt_id"),
        n,
        c,
        AllocationConfig(budget=8 * len(n), objective="knapsack"),
    )
    assert table.schema == schema.ALLOCATION
    assert pc.sum(table.column("n_rollouts")).as_py() == 8 * len(n)
    assert pc.sum(table.column("uniform_n")).as_py() == 8 * len(n)
    assert pc.sum(table.column("expected_value")).as_py() >= pc.sum(table.column("uniform_value")).as_py()


def _table_rows(html: str, title: str) -> list[list[str]]:
    """The body rows (cell texts) of the first report table titled ``title``."""
    after = html.split(f'<div class="table-title">{title}</div>', 1)[1]
    body = after.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    return [re.findall(r"<td>(.*?)</td>", row) for row in re.findall(r"<tr>(.*?)</tr>", body, re.S)]


def _card_item(html: str, key: str) -> str:
    return re.search(rf"<dt>{key}</dt><dd>(.*?)</dd>", html).group(1)


def test_allocations_of_one_run_with_different_budgets_stay_apart(tmp_path):
    """Two stored allocations with the same objective, estimator and prior but different budgets
    (a profile's default and a user's `difficulty allocate --budget 500`) are two series, two bars
    and two table rows, each with its own budget, never one row with the budgets summed."""
    store = Store(tmp_path / "data")
    run = build_run(store, "two-budgets", n_prompts=36)
    store.delete_partition("allocation", {"run_id": run})  # only the two allocations below
    counts = store.read_table("prompt_stats", {"run_id": run}).select(["prompt_id", "n", "c"])
    for budget in (720, 500):
        write_allocation(store, run, allocate.AllocationConfig(budget=budget, n_max=64, posterior=True), counts)
    assert len(store.files("allocation", {"run_id": run})) == 2

    data = reports.load_run(store, run)
    assert "allocation" not in data.computed
    parts = dict(allocation_parts(data.allocation))
    assert set(parts) == {"signal grpo · 720 rollouts · posterior", "signal grpo · 500 rollouts · posterior"}
    assert {label: part.height for label, part in parts.items()} == dict.fromkeys(parts, 36)

    html = reports.render_report(store, run, tmp_path / "r.html").read_text()
    rows = {r[0]: r for r in _table_rows(html, "Allocations")}
    assert set(rows) == set(parts)
    assert rows["signal grpo · 720 rollouts · posterior"][2] == "720"
    assert rows["signal grpo · 500 rollouts · posterior"][2] == "500"
    assert [r[3] for r in rows.values()] == ["36", "36"]


def test_an_allocation_priced_in_tokens_is_labelled_in_tokens(tmp_path):
    """`allocate --price-unit tokens` stores a budget in tokens: the report names it so, apart from a
    rollout allocation whose budget is the same number."""
    store = Store(tmp_path / "data")
    run = build_run(store, "token-budget", n_prompts=36)
    store.delete_partition("allocation", {"run_id": run})
    counts = store.read_table("prompt_stats", {"run_id": run}).select(["prompt_id", "n", "c"])
    price = np.linspace(100.0, 400.0, counts.num_rows)
    write_allocation(store, run, allocate.AllocationConfig(budget=720, n_max=64, posterior=True), counts)
    tokens = allocate.AllocationConfig(budget=720 * 250, n_max=64, posterior=True, price_unit="tokens")
    write_allocation(store, run, tokens, counts, price=price)
    parts = dict(allocation_parts(reports.load_run(store, run).allocation))
    assert set(parts) == {"signal grpo · 720 rollouts · posterior", "signal grpo · 180,000 tokens · posterior"}


def test_the_allocation_table_shows_the_certified_gap(tmp_path):
    """An exact allocation reads "exact"; the Lagrangian relaxation's its certified gap, also
    relative to its value (docs/estimators.md §5)."""
    store = Store(tmp_path / "data")
    run = build_run(store, "gaps", n_prompts=36)
    store.delete_partition("allocation", {"run_id": run})
    counts = store.read_table("prompt_stats", {"run_id": run}).select(["prompt_id", "n", "c"])
    spec = "dapo:mode=resample,T=4"
    relaxed = allocate.AllocationConfig(budget=700, estimator=spec, n_max=64, posterior=True, method="lagrangian")
    table = write_allocation(store, run, relaxed, counts)
    write_allocation(store, run, allocate.AllocationConfig(budget=500, n_max=64, posterior=True), counts)
    html = reports.render_report(store, run, tmp_path / "r.html").read_text()
    rows = {r[0]: r for r in _table_rows(html, "Allocations")}
    assert rows["signal grpo · 500 rollouts · posterior"][-1] == "exact"
    cell = rows[f"signal {spec} · 700 rollouts · posterior"][-1]
    gap = table.column("gap")[0].as_py()
    assert cell.startswith(f"{gap:.3g} (") and "of the value" in cell


def test_without_a_stored_allocation_the_report_uses_the_default_policy(runs):
    data = reports.load_run(runs, "run-b")  # no analysis and no allocation stored
    assert data.computed == [*finish.ANALYSIS_TABLES, "allocation"]
    counts = finish.counts_from_samples(runs, "run-b", answers=False)
    expected, config = allocate.default_allocation("run-b", counts)
    assert config.posterior and config.budget == allocate.DEFAULT_BUDGET_PER_PROMPT * counts.num_rows
    cols = ["prompt_id", "n_rollouts", "budget", "posterior", "objective", "estimator"]
    assert data.allocation.select(cols).sort("prompt_id").equals(pl.from_arrow(expected).select(cols).sort("prompt_id"))
    assert any("Computed for this report with the default policy" in n for n in data.notes)


def test_run_card_shows_the_registry_status_at_render_time(tmp_path):
    store = Store(tmp_path / "data")
    build_run(store, "live", n_prompts=12, status="sampling")
    html = reports.render_report(store, "live", tmp_path / "a.html").read_text()
    assert _card_item(html, "Status") == "sampling"
    store.set_run_status("live", "done")
    html = reports.render_report(store, "live", tmp_path / "b.html").read_text()
    assert _card_item(html, "Status") == "done"


def test_public_functions_take_a_store(runs, tmp_path):
    with pytest.raises(TypeError, match="Store"):
        reports.load_run(runs.root, "run-a")
    with pytest.raises(TypeError, match="Store"):
        reports.render_report(runs.root, "run-a", tmp_path / "a.html")


def test_unanalysed_G_falls_back_to_nearest(runs, tmp_path):
    html = reports.render_report(runs, "run-a", tmp_path / "a.html", G=10).read_text()
    assert "G = 10 was not analysed" in html and "uses G = 8" in html


def test_config_errors_name_the_bad_value():
    with pytest.raises(ConfigError, match="plotly_js='cdn' is unknown: allowed inline, shared"):
        reports.ReportConfig(plotly_js="cdn")
    with pytest.raises(ConfigError, match="G=0 must be an integer >= 1"):
        reports.ReportConfig(G=0)
    with pytest.raises(ValueError, match="unknown estimator"):
        reports.ReportConfig(estimator="nope")


def test_comparison_bands_split_at_the_given_edges():
    """The comparison's transition bands are cut at its edges (default ``schema.MID_EDGES``) and named
    by them."""
    from pipeline.reports import compare

    default = ("all wrong", "(0, 0.4)", "[0.4, 0.6]", "(0.6, 1)", "all correct")
    assert compare.transition_bands(schema.MID_EDGES) == default
    p = pl.DataFrame({"p": [0.0, 0.2, 0.25, 0.5, 0.75, 0.9, 1.0]})
    got = p.select(compare._band_of(pl.col("p"), (0.25, 0.75)).alias("b"))["b"].to_list()
    assert got == ["all wrong", "(0, 0.25)", "[0.25, 0.75]", "[0.25, 0.75]", "[0.25, 0.75]", "(0.75, 1)", "all correct"]


def test_comparison_needs_two_distinct_runs(runs, tmp_path):
    with pytest.raises(reports.ReportError, match="at least two"):
        reports.render_comparison(runs, ["run-a"], tmp_path / "c.html")
    with pytest.raises(reports.ReportError, match="duplicates"):
        reports.render_comparison(runs, ["run-a", "run-a"], tmp_path / "c.html")
    with pytest.raises(StoreError, match="unknown run"):
        reports.render_report(runs, "nope", tmp_path / "x.html")


def _pipeline_imports(path: Path) -> set[str]:
    """The pipeline modules a file imports (``from pipeline.x import y`` counts as ``pipeline.x``)."""
    imported = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("pipeline"):
            imported.add(node.module)
            if node.module == "pipeline":  # `from pipeline import analyze` imports pipeline.analyze
                imported |= {f"pipeline.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            imported |= {a.name for a in node.names if a.name.startswith("pipeline")}
    return imported


def test_report_stage_imports_only_stages_to_its_left():
    allowed = {
        "pipeline",
        "pipeline.errors",
        "pipeline.checks",
        "pipeline.schema",
        "pipeline.store",
        "pipeline.stats",
        "pipeline.estimators",
        "pipeline.identify",
        "pipeline.analyze",
        "pipeline.allocate",
        "pipeline.finish",
        "pipeline.adaptive",
        "pipeline.calibrate",
        "pipeline.observe",
        "pipeline.observe.current",
        "pipeline.curriculum",
        "pipeline.verdict",
    }
    # the order of the report's own modules is ROOMS["report"] and ROOMS["report.sections"] in tests/layout.py
    files = sorted(REPORT_PACKAGE.rglob("*.py"))
    assert {f.stem for f in files} >= {"__init__", "load", "charts", "compare", "render", "run_card", "rounds"}
    for path in files:
        imported = _pipeline_imports(path)
        outside = {m for m in imported if not m.startswith("pipeline.reports")}
        bad = outside - allowed
        assert not bad, f"report/{path.relative_to(REPORT_PACKAGE)} imports stages to its right or the CLI: {bad}"


def test_report_has_no_sql_text_and_its_queries_are_named_files():
    for path in REPORT_PACKAGE.rglob("*.py"):
        text = path.read_text()
        assert not re.search(r"\b(SELECT|GROUP BY|ORDER BY)\b", text), f"SQL text in report/{path.name}"
    named = set(re.findall(r'named_query\(\s*"([a-z_]+)"', (REPORT_PACKAGE / "load.py").read_text()))
    assert named == {"grade_statuses", "sample_info", "top_mass", "dataset_observations"}
    for name in named:
        assert (REPORT_PACKAGE.parent / "sql" / f"{name}.sql").is_file()  # the top-level sql/ beside reports/


def test_templates_ship_inside_the_report_package():
    names = {p.name for p in (REPORT_PACKAGE / "templates").glob("*.j2")}
    assert names == {"base.html.j2", "compare.html.j2", "report.html.j2", "section.html.j2"}
    assert REPORT_PACKAGE.name == "reports" and not (REPORT_PACKAGE.parent / "pipeline" / "report").exists()


# --- CLI ----------------------------------------------------------------------------------------


def _app() -> typer.Typer:
    from pipeline.cli import app  # the CLI is imported only by the CLI tests

    return app


def test_cli_reports_newest_run_by_default(runs, tmp_path):
    out = tmp_path / "one.html"
    result = CliRunner().invoke(_app(), ["report", "--data-dir", str(runs.root), "--output", str(out)])
    assert result.exit_code == 0, result.output
    assert "report of run-b" in result.output  # run-b is the newer one
    assert result.output.strip().endswith(str(out))
    assert out.exists() and "Difficulty report: run-b" in out.read_text()


def test_cli_several_runs_write_each_and_a_comparison(runs, tmp_path):
    out = tmp_path / "reports"
    args = [
        "report",
        "--data-dir",
        str(runs.root),
        "--run",
        "run-a",
        "--run",
        "run-b",
        "--output",
        str(out),
        "--plotly-js",
        "shared",
        "--G",
        "4",
    ]
    result = CliRunner().invoke(_app(), args)
    assert result.exit_code == 0, result.output
    written = sorted(p.name for p in out.iterdir())
    assert written == ["compare-run-a-vs-run-b.html", "plotly.min.js", "run-a.html", "run-b.html"]
    compare = (out / "compare-run-a-vs-run-b.html").read_text()
    assert 'href="run-a.html"' in compare and 'href="run-b.html"' in compare
    assert "G = 4" in (out / "run-a.html").read_text()
    assert result.output.strip().splitlines()[-1].endswith("compare-run-a-vs-run-b.html")


def test_cli_errors_are_one_clear_line(runs, tmp_path):
    runner = CliRunner()
    result = runner.invoke(_app(), ["report", "--data-dir", str(runs.root), "--run", "nope"])
    assert result.exit_code == 1 and "unknown run 'nope'" in result.output
    result = runner.invoke(_app(), ["report", "--data-dir", str(runs.root), "--plotly-js", "cdn"])
    assert result.exit_code == 1 and "'cdn'" in result.output and "inline, shared" in result.output
    result = runner.invoke(_app(), ["report", "--data-dir", str(tmp_path / "empty")])
    assert result.exit_code == 1 and "no runs" in result.output


# --- what a team reads first (issue 34) ----------------------------------------------------------


def _section(sections, sid):
    return next(s for s in sections if s.id == sid)


def test_the_chosen_estimator_is_drawn_and_the_others_are_one_click_away(runs):
    data = reports.load_run(runs, "run-a")
    sections = build_sections(data, reports.ReportConfig(estimator="rloo"))
    html = str(_section(sections, "weights").charts[0].html)
    assert html.count('"visible":"legendonly"') == len(data.estimators) - 1
    assert '"name":"rloo (yours)"' in html
    colors = set(re.findall(r'"line":\{"color":"(#[0-9a-f]{6})"', html))
    want = estimator_colors(data.estimators)
    assert len(set(want.values())) == len(data.estimators) and set(want.values()) <= colors  # none shared
    share = _section(sections, "gradient-share")
    assert share.tables[0].rows[0][0] == "rloo (yours)"
    # the five bands cover every pass rate: each estimator's shares add up to 100%
    for row in share.tables[0].rows:
        assert sum(float(cell.rstrip("%")) for cell in row[1:6]) == pytest.approx(100, abs=0.3)


def test_the_prompt_tables_never_list_a_prompt_twice(runs):
    data = reports.load_run(runs, "run-a")
    tables = _section(build_sections(data, reports.ReportConfig()), "prompts").tables
    assert len(tables) == 3
    ids = [[row[0] for row in t.rows] for t in tables]
    assert all(ids) and len({i for t in ids for i in t}) == sum(len(t) for t in ids)
    silent = tables[0].rows
    assert [r[3].split("/")[0] == "0" for r in silent] == sorted(
        (r[3].split("/")[0] == "0" for r in silent), reverse=True
    )
    # each prompt's share of answers cut by the token limit, from its samples, and its flag
    cut = runs.query(
        "select prompt_id, avg((finish_reason = 'length')::int) share, "
        "count(*) filter (where finish_reason = 'length' and not correct) cut_wrong, "
        "count(*) filter (where not correct) wrong from samples where run_id = 'run-a' group by prompt_id"
    ).to_pylist()
    by_id = {r["prompt_id"]: r for r in cut}
    column = tables[0].columns.index("cut by the token limit")
    assert all(t.columns[column] == "cut by the token limit" for t in tables)
    assert any(float(by_id[row[0]]["share"]) > 0 for t in tables for row in t.rows)
    for row in (row for t in tables for row in t.rows):
        want = by_id[row[0]]
        flagged = 2 * want["cut_wrong"] > want["wrong"] > 0
        assert row[column] == f"{100 * want['share']:.1f}%" + (" (truncated)" if flagged else "")


def test_latex_reads_as_plain_text():
    from pipeline.reports.charts import plain_math, short

    assert plain_math(r"What is $\frac{3}{4} + \dfrac{1}{2}$?") == "What is 3/4 + 1/2?"
    assert plain_math(r"$\sqrt{x^{2}+1} \le 2\pi$") == "√(x^2+1) ≤ 2π"
    assert plain_math(r"$\boxed{\text{yes}}$, 100\%") == "yes, 100%"
    assert plain_math("no math here: 3 < 4") == "no math here: 3 < 4"
    assert "\\" not in short(r"Find $\frac{\sqrt{3}}{2} \cdot \left(1 + \tfrac{1}{n}\right)$")


def test_pass_at_k_ticks_and_an_undefined_spearman_read_plainly(tmp_path):
    store = Store(tmp_path / "data")
    build_run(store, "flat", n_prompts=12, n_samples=6, skill=-40.0)  # every answer wrong
    data = reports.load_run(store, "flat")
    sections = build_sections(data, reports.ReportConfig())
    html = str(_section(sections, "pass-at-k").charts[0].html)
    assert '"tickvals":[1,2,4,6]' in html
    calibration = _section(sections, "calibration")
    text = " ".join(c.caption for c in calibration.charts)
    assert "undefined, undefined" not in text and "Spearman rho is undefined" in text
