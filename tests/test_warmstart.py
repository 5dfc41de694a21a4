"""``export --format mopps``: a run's counts as MoPPS's ``index_score.json``, read back by MoPPS's own
loading code (mirrored below) on a DeepScaleR verl file profiled with the simulate backend."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from pipeline import datasets
from pipeline.cli import app
from pipeline.store import Store

runner = CliRunner()


class PosteriorSampler:
    """``PosteriorSampler.initialize_from_json`` of thu-rllab/MoPPS (``recipe/ours/mopps.py``, commit a883f51),
    the part that reads the file: per key, ``alpha = successes * 3 + prior_alpha`` and likewise ``beta``."""

    def __init__(self, prior_alpha: float = 1.0, prior_beta: float = 1.0) -> None:
        self.alpha, self.beta = {}, {}
        self.prior_alpha, self.prior_beta = prior_alpha, prior_beta

    def initialize_from_json(self, json_path):
        with open(json_path) as f:
            data = json.load(f)
        for key, results in data.items():
            idx = key
            successes = sum(results)
            failures = len(results) - successes
            self.alpha[idx] = successes * 3 + self.prior_alpha
            self.beta[idx] = failures * 3 + self.prior_beta


def test_mopps_reads_the_runs_counts_by_row_index(shared, data_dir, tmp_path):
    data = shared / "deepscaler" / "verl_train_sub.parquet"
    args = ["profile", "--backend", "simulate", "--no-prefect", "--data-file", str(data), "--limit", "12", "--n", "8"]
    out = runner.invoke(app, [*args, "--grade-workers", "1", "--no-report"])
    assert out.exit_code == 0, out.output
    store = Store(data_dir)
    run_id = store.list_runs().to_pylist()[0]["run_id"]
    path = tmp_path / "prior" / "index_score.json"
    out = runner.invoke(app, ["export", "--run", run_id, "--output", str(path), "--format", "mopps"])
    assert out.exit_code == 0, out.output
    sampler = PosteriorSampler()
    sampler.initialize_from_json(path)
    stats = {r["prompt_id"]: (r["n"], r["c"]) for r in store.read_table("prompt_stats", {"run_id": run_id}).to_pylist()}
    problems = store.read_table("problems", {"dataset": store.get_run(run_id).dataset}).to_pylist()
    want = {}
    for p in problems:  # the row's own extra_info.index, read from the verl file's row
        if p["prompt_id"] in stats:
            n, c = stats[p["prompt_id"]]
            want[str(datasets.original_row(p["original"])["extra_info"]["index"])] = (3 * c + 1, 3 * (n - c) + 1)
    assert len(want) == 12 and {k: (sampler.alpha[k], sampler.beta[k]) for k in sampler.alpha} == want
    assert "wrote 12 rows (96 outcomes)" in out.output
    bad = runner.invoke(app, ["export", "--run", run_id, "--output", str(path), "--format", "mopps", "--keep", "hard"])
    assert bad.exit_code == 1 and "--keep" in bad.output
    assert not list(path.parent.glob(".*.tmp"))  # written whole: no temp file left
