"""``datasets``: the dataset adapters and their sources."""

from __future__ import annotations

from pipeline.cli.options import Format
from pipeline.cli.output import check_format, emit


def datasets_cmd(fmt: Format = "table") -> None:
    """List the dataset adapters and their sources."""
    import pyarrow as pa

    from pipeline import datasets

    fmt = check_format(fmt)
    rows = [
        {
            "name": a.name,
            "source": a.hub or ("bundled generator" if a.name == "arithmetic" else "--data-file PATH"),
            "revision": a.revision or "",
            "split": a.split,
            "description": a.description,
        }
        for a in datasets.ADAPTERS.values()
    ]
    emit(pa.Table.from_pylist(rows), fmt, title="dataset adapters")
