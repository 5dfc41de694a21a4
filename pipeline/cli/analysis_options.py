"""The estimator option of ``analyze`` and ``weights``, declared once; its default is the
estimator registry's (``estimators.DEFAULT_ESTIMATORS``), so only the commands that compute
weights import it (the registry and NumPy), not the quick commands.
"""

from __future__ import annotations

from typing import Annotated

import typer

from pipeline.estimators import DEFAULT_ESTIMATORS as DEFAULT_ESTIMATOR_SPECS

Estimators = Annotated[str, typer.Option("--estimators", help="Estimator specs, comma-separated.")]
DEFAULT_ESTIMATORS = ",".join(DEFAULT_ESTIMATOR_SPECS)
