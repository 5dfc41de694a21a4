"""The verdict (``pipeline.verdict``): what a run means for training, printed by the commands and
shown first in the report; and the honest tables beside it (estimates labelled, shares summing to 1)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from typer.testing import CliRunner

from pipeline import analyze, finish, schema, stats, verdict
from pipeline.cli import app
from pipeline.errors import ConfigError
from pipeline.prior import choose_prior
from pipeline.store import RunRecord, Store

runner = CliRunner()


def _wrong_and_cut(tmp_path, n: int = 4, prompts: int = 10):
    """A simulate profile where every answer is wrong (pass rate 0) and cut at the token limit (a wrong
    answer is four words; three are allowed): the run id and the command's output."""
    data_dir = tmp_path / "data"
    out = runner.invoke(app, ["load", "arithmetic", "--limit", str(prompts), "--data-dir", str(data_dir)])
    assert out.exit_code == 0, out.output
    ids = Store(data_dir).read_table("problems", {"dataset": "arithmetic"}).column("prompt_id").to_pylist()
    rates = tmp_path / "rates.csv"
    rates.write_text("prompt_id,pass_rate\n" + "".join(f"{p},0\n" for p in ids))
    args = ["profile", "--backend", "simulate", "--pass-rates", str(rates), "--no-prefect", "--limit", str(prompts)]
    args += ["--n", str(n), "--max-tokens", "3", "--grade-workers", "1", "--no-report", "--data-dir", str(data_dir)]
    out = runner.invoke(app, args)
    assert out.exit_code == 0, out.output
    return data_dir, Store(data_dir).list_runs().column("run_id")[0].as_py(), out.output


def test_profile_of_a_model_that_is_always_wrong_and_cut_off_says_so(tmp_path):
    data_dir, run_id, output = _wrong_and_cut(tmp_path)
    text = " ".join(output.split())
    truncated = Store(data_dir).query("select count(*) filter (where finish_reason = 'length') t from samples")
    assert truncated.to_pylist() == [{"t": 40}]
    # the warnings: the token budget decides (the silent prompts all cut off, what doubling the limit
    # costs: every answer ran to the 3-token limit, so up to 2x), a model that never answers right,
    # G > n estimated
    assert "10 of 10 silent prompts had most of their wrong answers cut by the token limit (3 tokens)" in text
    assert "100% of all answers were cut: the token budget, not the problems, decides their silence" in text
    assert "doubling it costs at most 2.0x the tokens this run sampled" in text
    assert "--max-tokens 6" in text  # twice the limit the run used
    assert "the model never answered right" in text
    assert "values at G > n" in text and "posterior estimates" in text
    # the zero-signal table labels G > n values as estimates, and hides the Jensen gap there
    table = [line.split() for line in output.splitlines() if line.strip()[:3].strip().isdigit()]
    estimated = {int(row[0]): row[4] for row in table if len(row) >= 5 and row[4] in ("True", "False")}
    assert estimated == {4: "False", 8: "True", 16: "True", 32: "True", 64: "True"}
    # the verdict names the next command, and no halving G is claimed from the prior alone
    assert f"difficulty export --run {run_id} --keep informative" in text
    # every prompt is cut off, none hard: the export keeps them, flagged, unless asked to drop them
    assert "keeps 10 of 10 prompts (100%): 0 with a right and a wrong answer" in text
    assert "and 10 whose wrong answers were mostly cut by the token limit (band truncated" in text
    assert "halves the silence" not in text
    assert "no estimator has any update mass" in text
    # the run's tables say the same: all wrong, nothing right
    analysis, _ = finish.analysis_of_run(Store(data_dir), run_id, weights=False)
    assert analysis.prompt_stats.column("truncated_share").to_pylist() == [1.0] * 10
    assert analysis.prompt_stats.column("truncated").to_pylist() == [True] * 10
    v = verdict.verdict(
        run_id, analysis.prompt_stats, analysis.summary, G=8, sample_info={"samples": 40, "truncated": 40}
    )
    assert v.silence.estimated and v.silence.all_right < 0.001 and v.silence.all_wrong > 0.5
    assert len(v.warnings) == 3 and all(line.command.startswith("difficulty ") for line in v.lines if line.command)
    assert "the token budget, not the problems, decides" in v.warnings[0].text
    assert v.warnings[0].command is None  # no max_tokens known here: no command with a placeholder


def _tables(n, c, G=(4, 8, 16)):
    counts = pa.table({"prompt_id": [f"p{i}" for i in range(len(n))], "n": n, "c": c})
    return analyze.analyze(counts, "r", analyze.AnalyzeConfig(group_sizes=G))


def test_silence_split_kept_and_halving_on_a_measured_run():
    rng = np.random.default_rng(0)
    p = rng.beta(0.4, 0.4, 400)
    n = np.full(400, 32)
    c = rng.binomial(32, p)
    a = _tables(n, c)
    v = verdict.verdict("r", a.prompt_stats, a.summary, G=8)
    s = v.silence
    assert not s.estimated and s.silent == pytest.approx(s.all_wrong + s.all_right)
    # informative at G = 8: a right and a wrong answer, and a group of 8 more likely than not mixed under
    # the flat prior's posterior (E[q^8] = prod_j (1 + n - c + j) / (2 + n + j)): 1 right of 32 is not
    j = np.arange(8)
    right = np.prod((1 + c[:, None] + j) / (2 + n[:, None] + j), axis=1)
    wrong = np.prod((1 + n[:, None] - c[:, None] + j) / (2 + n[:, None] + j), axis=1)
    mixed = (c > 0) & (c < n) & (right < 0.5) & (wrong < 0.5)
    assert v.kept == int(mixed.sum()) < int(((c > 0) & (c < n)).sum()) and v.prompts == 400
    assert ((c == 1) & ~mixed).any()  # 1 of 32 right: a group of 8 is all wrong 64% of the time
    # past the answers drawn, the rates are read under a prior fitted to the counts (no per-prompt Jeffreys)
    fitted = choose_prior(n, c)
    half = verdict.halving_group_size(a.prompt_stats, 8, s.silent, fitted)
    assert half is not None and half > 8
    # the halving G is the first one at or under half: one less is still above it
    for g, below in ((half, True), (half - 1, False)):
        assert (float(verdict.silent_under(fitted, n, c, g, False).mean()) <= s.silent / 2) is below
    assert any(f"G = {half} halves the silence" in line.text for line in v.lines)
    assert not v.warnings  # 32 answers each, nothing truncated, both outcomes seen


def test_reallocation_says_when_it_does_not_pay():
    def alloc(values, uniform):
        k = len(values)
        return pa.table(
            {
                "objective": ["signal"] * k,
                "budget": [8 * k] * k,  # the default policy's at G = 8
                "expected_value": values,
                "uniform_value": uniform,
            }
        )

    assert verdict.reallocation_gain(alloc([1.0, 1.0], [1.0, 1.0])) == pytest.approx(1.0)
    assert verdict.reallocation_gain(alloc([3.0, 1.0], [1.0, 1.0])) == pytest.approx(2.0)
    assert verdict.reallocation_gain(None) is None
    a = _tables(np.full(50, 16), np.arange(50) % 17)
    flat = verdict.verdict("r", a.prompt_stats, a.summary, allocation=alloc([1.0] * 50, [1.0] * 50))
    assert any("does not pay" in line.text for line in flat.lines)
    pays = verdict.verdict("r", a.prompt_stats, a.summary, allocation=alloc([4.0] + [1.0] * 49, [1.0] * 50))
    assert any("pays: x1.06 the uniform allocation's signal at 8 rollouts per prompt" in x.text for x in pays.lines)
    # a stored allocation at another budget is not the advice at G: the policy is computed at G
    other = verdict.verdict("r", a.prompt_stats, a.summary, allocation=alloc([3.0, 1.0], [1.0, 1.0]))
    computed = verdict.gain_at_G("r", a.prompt_stats, None, 8)
    assert any(f"x{computed:.4g} the uniform" in line.text for line in other.lines)


def test_always_right_warns_and_truncation_under_the_threshold_does_not():
    a = _tables(np.full(20, 8), np.full(20, 8))
    v = verdict.verdict("r", a.prompt_stats, a.summary, sample_info={"samples": 160, "truncated": 10})
    texts = [line.text for line in v.warnings]
    assert len(texts) == 1 and "every one of 160 answers right" in texts[0]
    assert v.silence.all_right == pytest.approx(1.0) and not v.silence.estimated


def test_silence_at_an_unanalysed_G_comes_from_the_counts():
    a = _tables(np.full(30, 16), np.arange(30) % 17, G=(4,))
    s = verdict.silence_at(a.prompt_stats, a.summary, 8)
    direct = _tables(np.full(30, 16), np.arange(30) % 17, G=(8,))
    t = verdict.silence_at(direct.prompt_stats, direct.summary, 8)
    assert s.silent == pytest.approx(t.silent) and s.all_wrong == pytest.approx(t.all_wrong)
    with pytest.raises(ConfigError, match="G"):
        verdict.silence_at(a.prompt_stats, a.summary, 0)


def test_one_band_vocabulary_and_old_names():
    assert schema.BANDS == ("hard", "informative", "easy")
    assert [schema.band_name(x) for x in ("silent_hard", "Medium", "silent_easy", "easy")] == [
        "hard",
        "informative",
        "easy",
        "easy",
    ]
    with pytest.raises(ConfigError, match="'extreme'"):
        schema.band_name("extreme")
    for band in analyze.DEFAULT_BANDS:
        assert band.name.split("_")[0] in schema.BANDS


def test_analyze_prints_the_verdict_and_the_five_band_shares(tmp_path):
    data_dir, run_id, _ = _wrong_and_cut(tmp_path, n=8, prompts=6)
    out = runner.invoke(app, ["analyze", "--run", run_id, "--data-dir", str(data_dir)])
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())
    assert f"verdict for training at G = 8 (run {run_id})" in text
    assert "informative_mid" in text and "extreme" not in text
    assert "cut by the token limit" in text and "the token budget, not the problems, decides" in text
    # the verdict is read at the G the analysis was asked for (8 when it is among them)
    out = runner.invoke(app, ["analyze", "--run", run_id, "--G", "4,16", "--data-dir", str(data_dir)])
    assert out.exit_code == 0, out.output
    assert f"verdict for training at G = 4 (run {run_id})" in " ".join(out.output.split())


# --- the report's first screen --------------------------------------------------------------------

_FIRST_SCREEN = """() => {
  const nav = document.querySelector('nav');
  const rows = new Set(Array.from(nav.querySelectorAll('a')).map(a => Math.round(a.getBoundingClientRect().top)));
  const links = Array.from(nav.querySelectorAll('a')).map(a => a.getBoundingClientRect());
  const block = document.querySelector('#verdict');
  const box = block ? block.getBoundingClientRect() : null;
  return {
    rows: rows.size,
    clipped: links.filter(r => r.right > window.innerWidth || r.left < 0).length,
    overflow: nav.scrollWidth > nav.clientWidth,
    verdict_top: box ? box.top : null,
    verdict_bottom: box ? box.bottom : null,
    verdict_text: block ? block.innerText : '',
    first_section_top: document.querySelector('main section').getBoundingClientRect().top,
  };
}"""


def test_report_first_screen_shows_the_verdict_and_a_wrapping_nav(tmp_path):
    from pipeline.reports import render_report
    from report_fixtures import build_run, chromium_missing_message, open_browser

    missing = chromium_missing_message()
    if missing:  # a missing browser is a broken set-up, not a skip
        pytest.fail(missing, pytrace=False)
    store = Store(tmp_path / "data")
    run_id = build_run(store, "example-run", n_prompts=90, n_samples=32)
    html = render_report(store, run_id, tmp_path / "report.html", G=8)
    with open_browser() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(html.resolve().as_uri(), wait_until="load")
        got = page.evaluate(_FIRST_SCREEN)
        page.set_viewport_size({"width": 800, "height": 900})
        narrow = page.evaluate(_FIRST_SCREEN)
        page.close()
    # the section bar wraps (twelve links do not fit one line at 1,400 px) and clips none of them
    assert got["rows"] >= 2 and got["clipped"] == 0 and not got["overflow"]
    assert narrow["rows"] > got["rows"] and narrow["clipped"] == 0
    # the verdict is the first thing under the bar, whole on the first screen, before section 1
    assert got["verdict_top"] is not None and got["verdict_bottom"] <= 900
    assert got["verdict_bottom"] <= got["first_section_top"]
    text = got["verdict_text"]
    assert "What this run means for training (G = 8)" in text
    assert f"difficulty export --run {run_id} --keep informative" in text
    assert "silent" in text and "halves the silence" in text


def test_report_of_an_always_wrong_run_warns_at_the_top(tmp_path):
    from pipeline.reports import render_report

    data_dir, run_id, _ = _wrong_and_cut(tmp_path)
    html = render_report(Store(data_dir), run_id, tmp_path / "r.html").read_text()
    block = html[html.index('id="verdict"') : html.index("</div>", html.index('id="verdict"'))]
    assert block.count('class="warning"') == 4  # a simulate run's: its rates are made up, said first
    assert block.index("these pass rates are simulated") < block.index("the token budget, not the problems, decides")
    assert "never answered right" in block and "posterior estimates" in block
    assert html.index('id="verdict"') < html.index("<section ")


def test_a_saving_in_tokens_needs_every_prompts_lengths():
    base = dict(where="inside", misclassification=0.05, decided=1.0, n_top=256, curve=[])
    sv = verdict.Savings(per_prompt=10.0, fixed_n=20.0, tokens_spent=1_500.0, tokens_per_rollout=100.0, **base)
    assert sv.saved == 0.5 and sv.fixed_tokens == 2_000.0 and sv.tokens_saved == 0.25  # long prompts got more
    assert "and 25% of the tokens (1.5k spent where the fixed n would spend 2.0k" in verdict._tokens_text(sv)
    above = verdict.Savings(**{**sv.__dict__, "where": "above"})
    assert above.fixed_tokens == 25_600.0 and "more than" in verdict._tokens_text(above)
    assert verdict.Savings(**{**sv.__dict__, "where": "below"}).tokens_saved is None
    assert verdict.Savings(per_prompt=10.0, fixed_n=20.0, **base).tokens_saved is None  # no lengths: rollouts only
    assert verdict._tokens_text(verdict.Savings(per_prompt=10.0, fixed_n=20.0, **base)) == ""


def test_current_save_ends_with_the_verdict(tmp_path, data_dir):
    assert runner.invoke(app, ["load", "arithmetic", "--limit", "3"]).exit_code == 0
    ids = Store(data_dir).read_table("problems").column("prompt_id").to_pylist()
    table = tmp_path / "rewards.csv"
    rows = ["step,prompt_id,reward"] + [f"1,{ids[0]},{r}" for r in (1, 1, 0, 0)]
    rows += [f"1,{ids[1]},{r}" for r in (0, 0, 0, 0)]
    table.write_text("\n".join(rows) + "\n")
    out = runner.invoke(app, ["track", str(table), "--dataset", "arithmetic"])
    assert out.exit_code == 0, out.output
    out = runner.invoke(app, ["current", "--dataset", "arithmetic", "--save"])
    assert out.exit_code == 0, out.output
    run_id = next(w for w in out.stdout.split() if w.startswith("current-")).rstrip(":")
    text = " ".join(out.stdout.split())
    assert f"verdict for training at G = 8 (run {run_id})" in text
    assert "keeps 1 of 2 prompts (50%)" in text  # 2 of 4 right: informative; 0 of 4: hard
    assert "values at G > n" in text  # 4 answers each, read at G = 8


def test_an_adaptive_profile_says_what_adaptive_saved(tmp_path):
    data_dir = tmp_path / "data"
    args = ["profile", "--backend", "simulate", "--no-prefect", "--limit", "120", "--adaptive", "band"]
    args += ["--grade-workers", "1", "--no-report", "--data-dir", str(data_dir)]
    out = runner.invoke(app, args)
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())
    line = next(x for x in out.output.splitlines() if "adaptive sampling used" in x)
    run_id = Store(data_dir).list_runs().column("run_id")[0].as_py()
    # the same numbers as the report's rounds section: verdict.adaptive_savings is the one computation
    store = Store(data_dir)
    analysis, _ = finish.analysis_of_run(store, run_id, weights=False)
    run = store.get_run(run_id)
    ps = analysis.prompt_stats
    sv = verdict.adaptive_savings(
        ps.column("n").to_numpy(),
        ps.column("band_prob").to_numpy(zero_copy_only=False),
        ps.column("undecided").to_numpy(zero_copy_only=False),
        run.adaptive,
        run.prior,
    )
    assert f"{sv.per_prompt:.1f} answers per prompt" in line
    if sv.where == "inside":
        assert f"a fixed n of {sv.fixed_n:.1f}" in line and sv.saved > 0
    assert f"difficulty report --run {run_id}" in text
    # the same saving in tokens: the run's answers against the fixed n at each prompt's expected length
    tokens = verdict.run_savings(ps, run)
    spent = sum(ps.column("tokens_spent").to_pylist())
    assert tokens.tokens_spent == spent
    assert tokens.fixed_tokens == pytest.approx(sv.fixed_n * sum(ps.column("tokens_expected").to_pylist()))
    assert tokens.tokens_saved == pytest.approx(1 - spent / tokens.fixed_tokens)
    assert f"and {verdict._pct(tokens.tokens_saved)} of the tokens ({verdict._count(spent)} spent" in line
    # and how far its settings are from the best stopping rule for its own fitted prior (issue 32.6)
    assert sv.rule_cost is not None and sv.frontier_mis is not None and sv.fixed_mis is not None
    assert sv.frontier_mis <= sv.fixed_mis + 1e-12  # nothing beats the frontier, at the same rollouts
    assert 0 < sv.realised <= 1.15  # an expectation against an expectation: at most 1 up to Monte Carlo error
    assert sv.frontier_cost <= sv.rule_cost + 1e-9
    assert f"a fixed n {sv.rule_fixed_n:.1f} and the best stopping rule {sv.frontier_cost:.1f}" in line
    assert "of the best rule's saving" in line
    # with the simulation's error: the share at the misclassification's ends brackets it
    lo, hi = sv.realised_range
    assert lo <= sv.realised <= hi
    assert ("over the simulation's error" in line) == (verdict._pct(lo) != verdict._pct(hi))
    # the undecided prompts are counted on the first screen, as many as the table holds
    undecided = int(sum(bool(u) for u in ps.column("undecided").to_pylist() if u is not None))
    assert (f"{undecided:,} of {ps.num_rows:,} prompts" in text) == (undecided > 0)
    # where some prompt has fewer than G answers, the summary holds what the counts allow (issue 32.4),
    # the printed table shows it, and the verdict line says the value is an extrapolation
    rows = analysis.summary.filter(pa.compute.equal(analysis.summary.column("section"), "zero_signal")).to_pylist()
    by = {(r["G"], r["metric"]): r["value"] for r in rows}
    for G in sorted({r["G"] for r in rows}):
        ranged = (G, "observed_lo") in by
        assert ranged == (by[(G, "share_posterior")] > 0)
        if ranged:
            assert 0 <= by[(G, "observed_lo")] <= by[(G, "observed_hi")] <= 1
    assert "counts_allow_lo" in text
    silent_line = next(x for x in out.output.splitlines() if "of groups are silent" in x)
    assert ("the counts allow" in silent_line) == (by[(8, "share_posterior")] > 0)


def test_one_profile_computes_its_verdict_once(tmp_path, monkeypatch):
    """Over one `difficulty profile` (its finish, its observations, its report, the printed summary) the
    verdict is computed once, and so is an adaptive run's simulation against the frontier: the report's
    top, its rounds section and the command line show that one computation."""
    import html
    from collections import Counter

    from pipeline import frontier

    calls = Counter()

    def count(module, name):
        real = getattr(module, name)

        def counted(*args, **kwargs):
            calls[name] += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, counted)

    count(verdict, "verdict")
    count(frontier, "rule_under_prior")
    read = Store.read_table
    monkeypatch.setattr(
        Store, "read_table", lambda self, name, *a, **k: calls.update([name]) or read(self, name, *a, **k)
    )
    data_dir = tmp_path / "data"
    args = ["profile", "--backend", "simulate", "--no-prefect", "--limit", "60", "--adaptive", "band"]
    out = runner.invoke(app, [*args, "--grade-workers", "1", "--data-dir", str(data_dir)])
    assert out.exit_code == 0, out.output
    assert (calls["verdict"], calls["rule_under_prior"]) == (1, 1)
    assert calls["allocation"] == 1  # the report's allocation section; the verdict has the finish's
    report = next(line.split("report: ", 1)[1] for line in out.output.splitlines() if line.startswith("report: "))
    page = html.unescape(open(report).read())
    saved = next(line.strip()[2:] for line in out.output.splitlines() if "adaptive sampling used" in line)
    assert saved in " ".join(page.split())  # the line the command printed, on the report's first screen
    assert 'id="adaptive"' in page and "Against the best any stopping rule can do" in page  # the rounds section
    # a later report of the run computes its verdict again, once, in its own process
    calls.clear()
    run_id = Store(data_dir).list_runs().column("run_id")[0].as_py()
    out = runner.invoke(app, ["report", "--run", run_id, "--data-dir", str(data_dir)])
    assert out.exit_code == 0, out.output
    assert (calls["verdict"], calls["rule_under_prior"], calls["allocation"]) == (1, 1, 1)


def test_a_width_run_names_no_frontier():
    """The frontier is a band target's (misclassification against rollouts): a width run gets none."""
    from pipeline import adaptive

    acfg = adaptive.AdaptiveConfig.from_specs("width", 4, 64)
    sv = verdict.adaptive_savings(np.full(50, 12), None, np.zeros(50, bool), acfg, adaptive.Prior(1.0, 1.0))
    assert sv.rule_cost is None and sv.realised is None and verdict._frontier_text(sv) == ""


def test_report_command_takes_the_estimator(tmp_path):
    data_dir, run_id, _ = _wrong_and_cut(tmp_path, prompts=4)
    html = tmp_path / "r.html"
    where = ["--data-dir", str(data_dir), "--output", str(html)]
    out = runner.invoke(app, ["report", "--run", run_id, "--estimator", "rloo", *where])
    assert out.exit_code == 0, out.output
    assert '"name":"rloo (yours)"' in html.read_text()
    out = runner.invoke(app, ["report", "--run", run_id, "--estimator", "nope", *where])
    assert out.exit_code == 1 and "nope" in out.output


def test_the_report_says_when_hard_and_easy_shares_are_zero_by_construction(tmp_path):
    from pipeline.reports.sections import build_sections
    from report_fixtures import build_run

    from pipeline import reports

    store = Store(tmp_path / "data")
    for run_id, n in (("few", 8), ("many", 32)):
        build_run(store, run_id, n_prompts=40, n_samples=n)
        data = reports.load_run(store, run_id)
        share = next(s for s in build_sections(data, reports.ReportConfig()) if s.id == "gradient-share")
        said = any("0 by construction" in note for note in share.notes)
        assert said is (n == 8), run_id
        if n == 8:  # and so it is: no prompt of the hard band carries mass at n = 8
            assert all(row[1] == "0.0%" for row in share.tables[0].rows)


def test_cut_off_prompts_carry_no_extrapolation_and_the_token_budget_is_named():
    """300 measured prompts and 200 whose every answer was wrong and cut at the token limit: the halving
    G is the 300's alone (what the counts of the cut ones say is the budget's, not a rate), the export
    keeps the cut ones, and since most silent prompts are cut off the verdict says the budget decides
    and what doubling it costs at most (each cut answer may run max_tokens more)."""
    rng = np.random.default_rng(1)
    n, c = np.full(300, 16), rng.binomial(16, rng.beta(0.4, 0.4, 300))
    cut = np.r_[np.zeros(300, int), np.full(200, 16)]
    counts = pa.table(
        {
            "prompt_id": [f"p{i:03d}" for i in range(500)],
            "n": np.r_[n, np.full(200, 16)],
            "c": np.r_[c, np.zeros(200, int)],
            "n_truncated": cut,
            "n_truncated_wrong": cut,
        }
    )
    a = analyze.analyze(counts, "r", analyze.AnalyzeConfig(group_sizes=(4, 8, 16)))
    assert a.prompt_stats.column("truncated").to_pylist() == [False] * 300 + [True] * 200
    run = RunRecord("r", dataset="d", backend="simulate", params={"max_tokens": 512})
    info = {"samples": 8000, "truncated": 3200, "mean_tokens": 300.0}
    v = verdict.verdict("r", a.prompt_stats, a.summary, G=8, sample_info=info, run=run)
    plain = _tables(n, c)
    half = verdict.halving_group_size(
        plain.prompt_stats, 8, verdict.silence_at(plain.prompt_stats, plain.summary, 8).silent, choose_prior(n, c)
    )
    assert half is not None
    assert any(
        f"G = {half} halves the silence (of the 300 prompts the token limit did not cut off)" in x.text for x in v.lines
    )
    kept = verdict.informative_kept(plain.prompt_stats)[0]
    assert v.kept == kept + 200
    assert any(
        f"keeps {kept + 200:,} of 500 prompts" in x.text and "and 200 whose wrong answers" in x.text for x in v.lines
    )
    silent = 200 + int(((c == 0) | (c == 16)).sum())
    assert 2 * 200 > silent
    line = next(x for x in v.warnings if "decides their silence" in x.text)
    assert (
        f"200 of {silent:,} silent prompts had most of their wrong answers cut by the token limit (512 tokens)"
        in line.text
    )
    assert "40% of all answers were cut" in line.text
    assert f"costs at most {1 + 3200 * 512 / (300.0 * 8000):.1f}x the tokens" in line.text
    assert line.command == "difficulty profile --dataset d --backend simulate --max-tokens 1024"
    # the same run without the flags: no budget line, and the halving over all 500 prompts
    bare = analyze.analyze(
        counts.drop_columns(["n_truncated", "n_truncated_wrong"]), "r", analyze.AnalyzeConfig(group_sizes=(4, 8, 16))
    )
    w = verdict.verdict("r", bare.prompt_stats, bare.summary, G=8, sample_info=info, run=run)
    assert not any("decides their silence" in x.text for x in w.lines)
    assert any("hit the token limit" in x.text for x in w.warnings)


def test_an_adaptive_runs_bands_are_at_its_own_posterior_in_the_report_too():
    """A posterior analysis (an adaptive run's): the chance a group of G is silent, behind the export's
    zero_signal and bands, is the run's posterior Beta(a + c, b + n - c), read the same from the table
    and from the report's frame (per-G lists replaced by their values at its G)."""
    from pipeline import export
    from pipeline.prior import Prior

    n, c = np.array([4, 12, 30, 7, 0]), np.array([0, 3, 1, 7, 0])
    counts = pa.table({"prompt_id": [f"p{i}" for i in range(5)], "n": n, "c": c})
    config = analyze.posterior_config(analyze.AnalyzeConfig(group_sizes=(4, 8)), Prior(0.7, 1.3))
    table = analyze.analyze(counts, "r", config).prompt_stats
    right, wrong = export.silence_at(table, 8)
    want = stats.silent_chance(0.7 + c, 1.3 + n - c, 8)
    np.testing.assert_allclose(right[:4], want[0][:4])
    np.testing.assert_allclose(wrong[:4], want[1][:4])
    assert np.isnan(right[4]) and np.isnan(wrong[4])  # no answers: no chance to give
    j = 1  # G = 8 in the lists
    frame = table.drop_columns(["group_sizes", "zero_signal", "silent_all_correct", "silent_all_wrong"])
    for name in ("silent_all_correct", "silent_all_wrong"):
        values = [None if v is None else v[j] for v in table.column(name).to_pylist()]
        frame = frame.append_column(f"{name}_G", pa.array(values, pa.float64()))
    np.testing.assert_allclose(np.stack(export.silence_at(frame, 8))[:, :4], np.stack((right, wrong))[:, :4])
    bands = export.bands(table, export.ExportConfig())
    assert bands == export.bands(frame, export.ExportConfig())
    assert bands == ["hard", "informative", "hard", "easy", "unmeasured"]  # 1 of 30: groups of 8 mostly all wrong


def _mixture_counts(seed: int, atoms: bool, prompts: int = 2000, n: int = 8):
    """Counts of a dataset with 30% of prompts at p = 0, 25% at 1 and 45% Beta(2, 2) (``atoms``), or all
    Beta(2, 2); ``n`` answers each."""
    rng = np.random.default_rng(seed)
    p = rng.beta(2, 2, prompts)
    if atoms:
        kind = rng.random(prompts)
        p = np.where(kind < 0.30, 0.0, np.where(kind < 0.55, 1.0, p))
    return np.full(prompts, n), rng.binomial(n, p)


@pytest.mark.parametrize("seed", [0, 1])
def test_no_g_halves_the_silence_of_a_mixture_with_atoms(seed):
    """55% of prompts at exactly 0 or 1: their groups are silent at every G, so no G halves the
    silence, under a prior fitted to the counts (fixed n) or the run's own (posterior); a population
    without atoms does get a G, the same way."""
    from pipeline.prior import choose_prior

    n, c = _mixture_counts(seed, atoms=True)
    a = _tables(n, c, G=(8,))
    v = verdict.verdict("r", a.prompt_stats, a.summary, G=8)
    text = " ".join(line.text for line in v.lines)
    assert "no G halves the silence" in text and "G = " not in text.split("halves")[0][-12:]
    assert "a prior fitted to the counts" in text
    fitted = choose_prior(n, c)
    assert verdict.halving_group_size(a.prompt_stats, 8, v.silence.silent, fitted, posterior=True) is None
    # the same counts read under Jeffreys' prior per prompt (what the verdict used to do) "halve" it
    assert verdict.halving_group_size(a.prompt_stats, 8, v.silence.silent, (0.5, 0.5), posterior=True) is not None
    n, c = _mixture_counts(seed, atoms=False)
    b = _tables(n, c, G=(8,))
    plain = verdict.verdict("r", b.prompt_stats, b.summary, G=8)
    assert any(line.text.startswith("G = ") and "halves the silence" in line.text for line in plain.lines)


def test_silent_under_a_grid_prior_is_the_posterior_expectation():
    """Exact values: on a grid prior the silent chance is the posterior-weighted p^G + q^G, checked
    against a direct sum; atoms at 0 and 1 keep a 0-of-n prompt silent at any G."""
    from pipeline.prior import Prior

    points = np.array([0.0, 0.3, 0.7, 1.0])
    weights = np.array([0.4, 0.1, 0.1, 0.4])
    prior = Prior(1.0, 1.0, "grid", points=tuple(points), weights=tuple(weights))
    n, c = np.array([4, 4, 4]), np.array([0, 2, 4])
    got = verdict.silent_under(prior, n, c, 16, posterior=True)
    for k in range(3):
        like = weights * points ** c[k] * (1 - points) ** (n[k] - c[k])
        w = like / like.sum()
        assert got[k] == pytest.approx(float((w * (points**16 + (1 - points) ** 16)).sum()), rel=1e-12)
    atom = 0.4 / (0.4 + 0.1 * 0.7**8 + 0.1 * 0.3**8)  # the posterior share of the atom at 0
    assert verdict.silent_under(prior, np.array([8]), np.array([0]), 4096, posterior=True)[0] == pytest.approx(atom)


@pytest.mark.parametrize("G", [8, 12])
def test_the_verdicts_allocation_ratio_is_allocates_at_prompts_times_G(tmp_path, G):
    """``profile --G G``: the verdict is read at G, and its reallocation ratio is the one ``allocate
    --G G`` prints (the default policy at G rollouts per prompt), whatever budget the stored default
    allocation has."""
    import re

    data_dir = tmp_path / "data"
    args = ["profile", "--backend", "simulate", "--no-prefect", "--no-report", "--limit", "80", "--G", str(G)]
    out = runner.invoke(app, [*args, "--grade-workers", "1", "--data-dir", str(data_dir)])
    assert out.exit_code == 0, out.output
    assert f"verdict for training at G = {G} " in out.stdout
    said = re.search(rf"x(\S+) the uniform allocation's signal at {G} rollouts per prompt", out.stdout)
    assert said, out.stdout
    run_id = re.search(r"^run (\S+) done", out.stdout, re.M).group(1)
    alloc = runner.invoke(app, ["allocate", "--run", run_id, "--G", str(G), "--data-dir", str(data_dir)])
    assert alloc.exit_code == 0, alloc.output
    assert re.search(r"; x(\S+)\)", alloc.stdout).group(1) == said.group(1)
    # the stored analysis holds G, so the summary's gradient shares are at G too
    assert f"gradient share by difficulty band at G = {G}" in out.stdout


def test_no_saving_is_claimed_where_both_sides_misclassify_nothing():
    """An adaptive run expected to misclassify nothing (and a fixed n likewise) gets no "saved" line,
    and no share prints as -0.0%."""
    sv = verdict.Savings(
        per_prompt=4.0, fixed_n=122.0, where="inside", misclassification=0.0, decided=1.0, n_top=256, curve=[]
    )
    line = verdict._adaptive_line("r1", sv)
    assert "saved" not in line.text and "no saving to compare" in line.text
    assert verdict._pct(-0.00001) == "0%" and verdict._pct(-0.0) == "0%"


@pytest.mark.parametrize("posterior", [False, True])
def test_silent_curves_are_silent_under_at_every_group_size(posterior):
    """The halving search reads every G at once (``silent_curves``, running products): the same numbers
    as ``silent_under`` one G at a time, under a Beta, Jeffreys and a fitted grid prior with atoms."""
    rng = np.random.default_rng(4)
    n = rng.integers(1, 40, 60)
    c = np.array([rng.integers(0, k + 1) for k in n])
    for prior in ((0.5, 0.5), verdict.Prior(2.0, 3.0), choose_prior(n, c)):
        curves = verdict.silent_curves(prior, n, c, 300, posterior)
        for g in (1, 2, 7, 8, 9, 39, 40, 41, 300):
            assert np.allclose(curves[:, g - 1], verdict.silent_under(prior, n, c, g, posterior), rtol=0, atol=1e-12)
