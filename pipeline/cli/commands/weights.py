"""``weights``: each estimator's implied weight w(p, G) at the given pass rates (no data needed)."""

from __future__ import annotations

from typing import Annotated

import typer

from pipeline.checks import check_int
from pipeline.cli.analysis_options import DEFAULT_ESTIMATORS, Estimators
from pipeline.cli.calculator_options import DEFAULT_P, PassRateList, in_range
from pipeline.cli.options import Format, floats
from pipeline.cli.output import check_format, emit
from pipeline.schema import DEFAULT_G
from pipeline.specs import split_specs


def weights_cmd(
    G: Annotated[int, typer.Option("--G", help="Group size.")] = DEFAULT_G,
    p: PassRateList = DEFAULT_P,
    estimators: Estimators = DEFAULT_ESTIMATORS,
    fmt: Format = "table",
) -> None:
    """Implied weight w(p, G) and update mass w p q for each estimator (CSV: estimator,G,p,weight,mass)."""
    import numpy as np
    import pyarrow as pa

    from pipeline import estimators as est

    fmt = check_format(fmt)
    ps = np.asarray(in_range(floats(p, "--p"), "--p", closed=True))
    check_int("--G", G, 1)
    rows = []
    for spec in split_specs(estimators):
        e = est.get(spec)
        rows += [
            {"estimator": e.spec, "G": G, "p": float(pi), "weight": float(wi), "mass": float(mi)}
            for pi, wi, mi in zip(ps, e.weight(ps, G), e.mass(ps, G), strict=True)
        ]
    emit(pa.Table.from_pylist(rows), fmt, title=f"implied weights at G={G}")
