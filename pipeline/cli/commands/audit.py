"""``audit``: a trainer's logged silent-group counters against the outcomes of its own rollouts."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pipeline.cli.options import Format
from pipeline.cli.output import check_format, emit, say


def audit_cmd(
    rollouts: Annotated[
        Path, typer.Argument(help="The trainer's rollout folder (verl, prime-rl or NeMo-RL; see `difficulty track`).")
    ],
    metrics: Annotated[
        Path,
        typer.Option(
            "--metrics",
            help="Its logged metrics: JSON Lines or CSV rows with a step (W&B export, prime-rl's metrics.jsonl), "
            "or TRL's trainer_state.json.",
        ),
    ],
    kind: Annotated[
        str | None,
        typer.Option("--input-format", help="verl, prime-rl or nemo-rl (default: read from the folder's files)."),
    ] = None,
    correct_field: Annotated[
        str | None, typer.Option("--correct-field", help="The binary correctness field or reward (as for track).")
    ] = None,
    score_threshold: Annotated[
        float | None, typer.Option("--score-threshold", help="Count a shaped reward >= this as correct.")
    ] = None,
    tolerance: Annotated[
        float, typer.Option("--tolerance", help="Largest difference of shares that still agrees.")
    ] = 1e-6,
    fmt: Format = "table",
) -> None:
    """Check a trainer's silent-group counters against its rollouts' 0/1 outcomes, step by step.

    Reads TRL's frac_reward_zero_std, OpenRLHF's dynamic_filtering_pass_rate and NeMo-RL's
    baseline_reward/pct_0, pct_1, pct_mixed; where a logged value disagrees, names the likely cause
    (a leave-one-out baseline, shaped rewards, a mean instead of a spread).
    """
    import pyarrow as pa

    from pipeline.observe import audit

    fmt = check_format(fmt)
    rows = audit.audit_folder(
        rollouts, metrics, fmt=kind, correct_field=correct_field, score_threshold=score_threshold, tolerance=tolerance
    )
    emit(pa.Table.from_pylist(rows), fmt, title="logged counters against the rollouts' outcomes")
    wrong = [r for r in rows if not r["agree"]]
    causes = sorted({r["cause"] for r in wrong})
    say(
        f"{len(wrong)} of {len(rows)} logged values disagree with the outcomes"
        + (f" (likely: {'; '.join(causes)})" if causes else ""),
        fmt,
    )
