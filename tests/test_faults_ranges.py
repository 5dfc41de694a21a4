"""Numbers without bounds, each reproduced: a value past its range is a named error before any work
(a policy spec's group counts, the bundled arithmetic set's size), and no command makes a data
directory it then refuses."""

from __future__ import annotations

import time

import pytest
from typer.testing import CliRunner

from pipeline import curriculum, datasets
from pipeline.cli import app
from pipeline.errors import ConfigError, StoreError

pytestmark = pytest.mark.faults

runner = CliRunner()
IDS = [f"p{i}" for i in range(50)]


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ("signal:objective=mass,max_groups=1000000000", rf"max_groups=1000000000 .*\[1, {curriculum.MAX_GROUPS}\]"),
        ("signal:objective=mass,G=100000000", rf"G=100000000 .*\[1, {curriculum.MAX_POLICY_G}\]"),
        ("bonus:G=1000000000", rf"G=1000000000 .*\[1, {curriculum.MAX_POLICY_G}\]"),
    ],
)
def test_a_policy_spec_past_its_range_is_named_when_parsed(spec, named):
    """Before, ``max_groups=1000000000`` asked for 298 GiB when a batch was chosen (a raw MemoryError)."""
    with pytest.raises(ConfigError, match=named):
        curriculum.make_policy(spec, IDS)


def test_the_largest_group_counts_still_choose_a_batch():
    """At the bounds a step is chosen, its groups within them: the bound is not a step's memory."""
    spec = f"signal:objective=mass,G={curriculum.MAX_POLICY_G},max_groups={curriculum.MAX_GROUPS}"
    picked = curriculum.make_policy(spec, IDS).choose_groups(200)
    assert len(picked) == 200 and set(picked) <= set(IDS)


def test_record_rewards_never_makes_the_data_directory_it_refuses(tmp_path):
    from pipeline.integrations import trl

    typo = tmp_path / "difficuly-data"
    with pytest.raises(StoreError, match=r"record_rewards\(data_dir=.*difficuly-data.*no data directory"):
        trl.record_rewards(lambda **kw: [1.0], data_dir=typo, source="trl:x", dataset="arithmetic")
    assert not typo.exists()


@pytest.mark.parametrize("command", [["load", "arithmetic"], ["profile", "--backend", "simulate", "--no-prefect"]])
def test_a_limit_past_the_arithmetic_sets_problems_fails_before_any_work(data_dir, command):
    """Before, ``--limit 100000`` drew problems for 57 s and then said it could make only 87135."""
    started = time.monotonic()
    out = runner.invoke(app, [*command, "--limit", "100000"])
    assert out.exit_code == 1, out.output
    assert time.monotonic() - started < 5
    assert f"--limit 100000 is more than the {datasets.ARITHMETIC_MAX} distinct problems" in out.output
    assert out.output.startswith("error: ") and len(out.output.strip().splitlines()) == 1
    assert not data_dir.exists() or not any((data_dir / "problems").glob("**/*.parquet"))
    with pytest.raises(datasets.DatasetError, match=str(datasets.ARITHMETIC_MAX)):
        datasets.arithmetic_problems(datasets.ARITHMETIC_MAX + 1)
