"""What the planning calculators (``weights``, ``groupsize``, ``tries``) share: the pass-rate
list and its range check."""

from __future__ import annotations

from typing import Annotated

import typer

from pipeline.checks import check_number

DEFAULT_P = "0.01,0.05,0.1,0.2,0.3,0.5,0.7,0.8,0.9,0.95,0.99"


PassRateList = Annotated[str, typer.Option("--p", help="Pass rates, comma-separated.")]


def in_range(values: list[float], flag: str, closed: bool) -> list[float]:
    """The values, or a ``ConfigError`` naming the flag and the first value outside [0, 1] (closed)
    or (0, 1)."""
    return [check_number(flag, v, 0, 1, lo_open=not closed, hi_open=not closed) for v in values]
