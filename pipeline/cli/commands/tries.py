"""``tries``: the tries needed to see a pass rate's first success."""

from __future__ import annotations

from typing import Annotated

import typer

from pipeline.cli.calculator_options import DEFAULT_P, PassRateList, in_range
from pipeline.cli.options import Format, floats
from pipeline.cli.output import check_format, emit


def tries_cmd(
    p: PassRateList = DEFAULT_P,
    delta: Annotated[float, typer.Option("--delta", help="Target probability of a silent group.")] = 0.05,
    fmt: Format = "table",
) -> None:
    """Fewest tries n >= 2 with P(silent group) = p^n + q^n <= delta (CSV: p,delta,n).

    p must be in (0, 1).
    """
    import pyarrow as pa

    from pipeline.allocate import min_tries

    fmt = check_format(fmt)
    ps = in_range(floats(p, "--p"), "--p", closed=False)  # at p = 0 or 1 every group is silent
    in_range([delta], "--delta", closed=False)
    rows = [{"p": pi, "delta": delta, "n": int(ni)} for pi, ni in zip(ps, min_tries(ps, delta), strict=True)]
    emit(pa.Table.from_pylist(rows), fmt, title=f"minimum tries for P(silent) <= {delta}")
