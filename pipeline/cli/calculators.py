"""Planning calculators that need no data: ``weights``, ``groupsize`` and ``tries``."""

from __future__ import annotations

from typing import Annotated

import typer

from pipeline.checks import check_int, check_number
from pipeline.cli.analysis_options import DEFAULT_ESTIMATORS, Estimators
from pipeline.cli.options import Format, floats
from pipeline.cli.output import check_format, emit
from pipeline.specs import split_specs

DEFAULT_P = "0.01,0.05,0.1,0.2,0.3,0.5,0.7,0.8,0.9,0.95,0.99"

PassRateList = Annotated[str, typer.Option("--p", help="Pass rates, comma-separated.")]


def _in_range(values: list[float], flag: str, closed: bool) -> list[float]:
    """The values, or a ``ConfigError`` naming the flag and the first value outside [0, 1] (closed)
    or (0, 1)."""
    return [check_number(flag, v, 0, 1, lo_open=not closed, hi_open=not closed) for v in values]


def weights_cmd(
    G: Annotated[int, typer.Option("--G", help="Group size.")] = 8,
    p: PassRateList = DEFAULT_P,
    estimators: Estimators = DEFAULT_ESTIMATORS,
    fmt: Format = "table",
) -> None:
    """Implied weight w(p, G) and update mass w p q for each estimator (CSV: estimator,G,p,weight,mass)."""
    import numpy as np
    import pyarrow as pa

    from pipeline import estimators as est

    fmt = check_format(fmt)
    ps = np.asarray(_in_range(floats(p, "--p"), "--p", closed=True))
    check_int("--G", G, 1)
    rows = []
    for spec in split_specs(estimators):
        e = est.get(spec)
        rows += [
            {"estimator": e.spec, "G": G, "p": float(pi), "weight": float(wi), "mass": float(mi)}
            for pi, wi, mi in zip(ps, e.weight(ps, G), e.mass(ps, G), strict=True)
        ]
    emit(pa.Table.from_pylist(rows), fmt, title=f"implied weights at G={G}")


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
    ps = _in_range(floats(p, "--p"), "--p", closed=False)
    targets = _in_range(floats(fidelity, "--fidelity"), "--fidelity", closed=False)
    rows = [{"p": pi, "fidelity": f, "G": group_size_for_fidelity(pi, f)} for pi in ps for f in targets]
    emit(pa.Table.from_pylist(rows), fmt, title="group size for GRPO fidelity")


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
    ps = _in_range(floats(p, "--p"), "--p", closed=False)  # at p = 0 or 1 every group is silent
    _in_range([delta], "--delta", closed=False)
    rows = [{"p": pi, "delta": delta, "n": int(ni)} for pi, ni in zip(ps, min_tries(ps, delta), strict=True)]
    emit(pa.Table.from_pylist(rows), fmt, title=f"minimum tries for P(silent) <= {delta}")
