"""``groupsize``: the group size G that reaches a fidelity at each pass rate."""

from __future__ import annotations

from typing import Annotated

import typer

from pipeline.cli.calculator_options import DEFAULT_P, PassRateList, in_range
from pipeline.cli.options import Format, floats
from pipeline.cli.output import check_format, emit


def groupsize_cmd(
    p: PassRateList = DEFAULT_P,
    fidelity: Annotated[str, typer.Option("--fidelity", help="Target GRPO fidelities.")] = "0.9,0.95,0.99",
    fmt: Format = "table",
) -> None:
    r"""Smallest group size G with GRPO fidelity E\[sigma_k]/sqrt(pq) >= target (CSV: p,fidelity,G).

    p must be in (0, 1).
    """
    import pyarrow as pa

    from pipeline.allocate import group_size_for_fidelity

    fmt = check_format(fmt)
    ps = in_range(floats(p, "--p"), "--p", closed=False)
    targets = in_range(floats(fidelity, "--fidelity"), "--fidelity", closed=False)
    rows = [{"p": pi, "fidelity": f, "G": group_size_for_fidelity(pi, f)} for pi in ps for f in targets]
    emit(pa.Table.from_pylist(rows), fmt, title="group size for GRPO fidelity")
