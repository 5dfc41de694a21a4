"""``difficulty calibrate``: a dataset's own difficulty labels against measured pass rates.

The rank correlation is checked exactly (against SciPy's Spearman with average ranks, and the
O(N) weighted ranks of a bootstrap resample against the ranks of the resample written out), its
bootstrap interval by Monte Carlo (coverage of the known population correlation of a bivariate
normal, ``(6 / pi) asin(r / 2)``), and end to end: 60 MATH-500 problems profiled with the
simulate backend at true pass rates set per level, whose rank correlation with the level is put
in and must come back inside its interval.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy import stats as sps
from typer.testing import CliRunner

from pipeline import calibrate as cal
from pipeline import datasets, reports
from pipeline.cli import app
from pipeline.errors import ConfigError, DatasetError
from pipeline.store import Store

runner = CliRunner()


# --- the statistic ------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
def test_spearman_equals_scipy_with_ties(seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(1, 6, 80).astype(float)  # a level: many ties
    y = rng.integers(0, 9, 80) / 8  # c / n at n = 8: many ties
    assert cal.spearman(x, y) == pytest.approx(sps.spearmanr(x, y).statistic, abs=1e-12)
    z = rng.normal(size=80)
    assert cal.spearman(z, -2 * z + 1) == pytest.approx(-1.0)
    assert math.isnan(cal.spearman(np.ones(5), np.arange(5)))


def test_weighted_ranks_are_the_ranks_of_the_resample_written_out():
    rng = np.random.default_rng(3)
    x = rng.integers(0, 7, 50).astype(float)
    w = np.bincount(rng.integers(0, 50, 50), minlength=50).astype(float)
    inv, k = cal._groups(x)
    ranks = cal._ranks(inv, k, w)
    expanded = np.repeat(x, w.astype(int))
    want = dict(zip(expanded, sps.rankdata(expanded), strict=True))  # average ranks of the resample
    for i in np.flatnonzero(w):
        assert ranks[i] == pytest.approx(want[x[i]])
    y = rng.normal(size=50)
    rho = cal._pearson(ranks, cal._ranks(*cal._groups(y), w), w)
    assert rho == pytest.approx(sps.spearmanr(expanded, np.repeat(y, w.astype(int))).statistic)


def test_bootstrap_interval_covers_the_population_correlation():
    """200 samples of 80 pairs from a bivariate normal with r = 0.6: the 90% interval should cover
    rho_s = (6/pi) asin(0.3) about 90% of the time; a binomial sd of 2.1% over 200 trials, and the
    percentile bootstrap runs a little short at this N, so 0.80 to 0.97 is allowed."""
    r = 0.6
    rho_s = 6 / math.pi * math.asin(r / 2)
    rng = np.random.default_rng(11)
    hits = 0
    for trial in range(200):
        x = rng.normal(size=80)
        y = r * x + math.sqrt(1 - r * r) * rng.normal(size=80)
        lo, hi = cal.spearman_interval(x, y, bootstrap=200, level=0.9, seed=trial)
        hits += lo <= rho_s <= hi
    assert 0.80 <= hits / 200 <= 0.97


def test_bootstrap_over_distinct_pairs_matches_resampling_the_pairs():
    """The interval resamples counts of distinct (label, pass rate) pairs; resampling the N pairs
    themselves (the definition, written out here) gives the same distribution of rho: its mean,
    spread and quantiles agree within Monte Carlo error over 2,000 resamples each."""
    rng = np.random.default_rng(5)
    N = 400
    level = rng.integers(1, 6, N).astype(float)
    rate = rng.binomial(16, 1 - level / 6) / 16  # c / n at n = 16: harder levels, lower rates
    direct = []
    for _ in range(2000):
        i = rng.integers(0, N, N)
        direct.append(sps.spearmanr(level[i], rate[i]).statistic)
    direct = np.array(direct)
    lo, hi = cal.spearman_interval(level, rate, bootstrap=2000, level=0.9, seed=1)
    want_lo, want_hi = np.quantile(direct, [0.05, 0.95])
    se = direct.std() * 0.06  # about the standard error of a 5% quantile over 2,000 resamples
    assert abs(lo - want_lo) < 3 * se and abs(hi - want_hi) < 3 * se
    assert want_lo < cal.spearman(level, rate) < want_hi


def test_config_errors_name_the_value():
    with pytest.raises(ConfigError, match="bootstrap=10"):
        cal.CalibrationConfig(bootstrap=10)
    with pytest.raises(ConfigError, match="level=1.5"):
        cal.CalibrationConfig(level=1.5)


# --- labels -------------------------------------------------------------------------------------


def test_labels_come_from_the_problems_or_the_original_rows(shared):
    math500 = datasets.load(data_file=shared / "math500/test.jsonl", limit=30).problems
    label, source, values = cal.label_values(math500, None)
    assert (label, source) == ("difficulty", "problems column") and None not in values
    assert cal.label_values(math500, "level")[2] == [int(v) for v in values]  # MATH-500 writes it as 1..5
    verl = datasets.load(data_file=shared / "math500/verl_test.parquet", limit=30).problems
    assert cal.label_values(verl, "level")[2] == [str(int(v)) for v in values]  # verl's extra_info says "2"
    assert cal.label_values(verl, "extra_info.level")[2] == cal.label_values(verl, "level")[2]
    with pytest.raises(DatasetError, match=r"no problem of the run has a label 'nope'.*\['level'\]"):
        cal.label_values(math500, "nope")
    deepscaler = datasets.load(data_file=shared / "deepscaler/verl_train_sub.parquet", limit=30).problems
    with pytest.raises(DatasetError, match="no difficulty label"):
        cal.label_values(deepscaler, None)
    subjects = cal.label_values(math500, "subject")[2]
    with pytest.raises(DatasetError, match=r"label 'subject' is not numeric: prompt \w+ has 'Precalculus'"):
        cal.calibrate("r", "subject", "original field", subjects, [0.5] * 30, prompt_ids=["a" * 16] * 30)


def test_a_few_text_labels_are_left_out_and_counted():
    values = ["Level 1", "Level 2", "Level ?", "Level 3", None, "Level 5"]
    rates = [0.9, 0.7, 0.5, 0.4, 0.3, None]
    result = cal.calibrate("r", "level", "original field", values, rates, cal.CalibrationConfig(bootstrap=100))
    assert (result.n_prompts, result.n_unlabelled, result.n_unmeasured) == (3, 2, 1)
    assert result.rho == pytest.approx(-1.0)
    assert "1 label values are not numbers (e.g. 'Level ?')" in result.notes[0]
    assert [g["group"] for g in result.groups] == ["level=1", "level=2", "level=3"]


# --- end to end: MATH-500 with pass rates set per level -----------------------------------------

BASE = {1: 0.8, 2: 0.65, 3: 0.5, 4: 0.35, 5: 0.2}  # true mean pass rate per MATH level


@pytest.fixture(scope="module")
def math_run(shared, tmp_path_factory):
    """60 MATH-500 problems, 32 samples each, true pass rates = the level's base rate plus a
    seeded spread of +-0.3 within the level (so the rank correlation put in is not -1)."""
    folder = tmp_path_factory.mktemp("calibrate")
    store = Store.open(folder / "data")
    problems = datasets.load(data_file=shared / "math500/test.jsonl", limit=60).problems
    levels = np.array(problems.column("difficulty").to_pylist())
    spread = np.random.default_rng(7).uniform(-0.3, 0.3, len(levels))
    p = np.clip(np.array([BASE[int(v)] for v in levels]) + spread, 0.02, 0.98)
    rates = folder / "rates.parquet"
    pq.write_table(pa.table({"prompt_id": problems.column("prompt_id"), "pass_rate": p}), rates)
    args = ["profile", "--backend", "simulate", "--no-prefect", "--data-file", str(shared / "math500/test.jsonl")]
    args += ["--limit", "60", "--n", "32", "--pass-rates", str(rates), "--grade-workers", "1", "--no-report"]
    out = runner.invoke(app, [*args, "--data-dir", str(store.root)])
    assert out.exit_code == 0, out.output
    run_id = store.list_runs().column("run_id")[0].as_py()
    return store, run_id, cal.spearman(levels, p)


def test_calibrate_returns_the_rank_correlation_put_in(math_run, tmp_path):
    store, run_id, rho_in = math_run
    assert rho_in == pytest.approx(-0.8, abs=0.1)
    out = runner.invoke(app, ["calibrate", "--run", run_id, "--label", "level", "--data-dir", str(store.root)])
    assert out.exit_code == 0, out.output
    assert f"run {run_id}, label level (original field): Spearman rho = " in out.stdout
    assert "over 60 prompts" in out.stdout and "level=5" in out.stdout
    result = cal.calibrate_run(store, run_id, cal.CalibrationConfig(label="level"))
    assert result.lo <= rho_in <= result.hi
    assert result.rho == pytest.approx(rho_in, abs=0.1)  # binomial noise at n = 32 pulls it a little to 0
    means = [g["mean_pass_rate"] for g in result.groups]
    assert means == sorted(means, reverse=True)  # the levels' pass rates fall as put in
    # stored in the summary table, replacing an earlier calibration of the same label only
    runner.invoke(app, ["calibrate", "--run", run_id, "--data-dir", str(store.root)])  # label difficulty
    runner.invoke(app, ["calibrate", "--run", run_id, "--label", "level", "--data-dir", str(store.root)])
    rows = store.named_query("calibration_summary", {"run_id": run_id}).to_pylist()
    spearman = {r["band"]: r["value"] for r in rows if r["metric"] == "spearman"}
    assert spearman == pytest.approx({"level": result.rho, "difficulty": result.rho})
    assert sum(r["metric"] == "mean_pass_rate" for r in rows) == 10  # 5 levels x 2 labels, none twice
    assert store.read_table("summary", {"run_id": run_id}).num_rows > len(rows)  # the analysis is still there

    html = reports.render_report(store, run_id, tmp_path / "r.html").read_text()
    section = html.split('<section id="calibration">')[1].split("</section>")[0]
    assert section.count("plotly-graph-div") == 2 and "Mean pass rate by level" in section
    assert "Spearman rho = -0." in section and "over 60 prompts" in section
