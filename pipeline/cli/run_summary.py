"""What the commands that make a run (``profile``, ``grade``, ``regrade``) print after it:
the pass-rate spread, zero-signal rates, gradient shares, and an adaptive run's rounds."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.cli.output import print_table, say

if TYPE_CHECKING:
    from pipeline.store import Store


def print_run_summary(store: Store, run_id: str) -> None:
    """The end-of-run summary: pass-rate spread, zero-signal rates, gradient shares at G = 8."""
    spread = store.named_query("pass_rate_spread", {"run_id": run_id})
    print_table(spread, title=f"pass-rate spread, run {run_id}")
    silent = store.named_query("zero_signal_summary", {"run_id": run_id})
    print_table(silent, title="zero-signal (silent group) rate by group size G")
    shares = store.named_query("gradient_shares", {"run_id": run_id, "G": 8})
    print_table(shares, title="gradient share by difficulty band at G = 8")


def _prior_label(run: dict) -> str:
    """A run's stored prior in words (its registry row's ``prior`` JSON)."""
    import json

    from pipeline.prior import Prior

    stored = json.loads(run.get("prior") or "{}") or {}
    if stored:
        return Prior.from_dict(stored).label
    return f"Beta({run['prior_a']:.3g}, {run['prior_b']:.3g})"


def print_adaptive_summary(store: Store, run_id: str) -> None:
    """An adaptive run's rounds, rollouts and prior in one line (nothing for a fixed-n run)."""
    import json

    import pyarrow.compute as pc

    run = store.get_run(run_id)
    if not run.get("adaptive"):
        return
    settings = json.loads(run["adaptive"])
    rounds = json.loads(run.get("rounds") or "[]")
    stats = store.read_table("prompt_stats", {"run_id": run_id})
    total = int(pc.sum(stats.column("n")).as_py() or 0)
    undecided = int(pc.sum(stats.column("undecided").cast("int64")).as_py() or 0)
    prior = _prior_label(run)
    say(
        f"adaptive {settings['target']} (n {settings['n_min']}..{settings['n_max']}, {settings['rule']}): "
        f"{len(rounds)} rounds, {total:,} rollouts ({total / max(stats.num_rows, 1):.2f} per prompt), "
        f"{undecided} prompts stopped undecided; prior {prior}"
        + ("" if settings["prior"] in prior else f" ({settings['prior']})")
        + "; the analysis uses posterior expectations under it"
    )
