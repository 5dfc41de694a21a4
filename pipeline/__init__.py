"""The difficulty pipeline: per-prompt pass rates and GRPO-family signal analysis.

``pipeline.open(data_dir)`` opens a data directory read-only for notebooks (``pipeline.api``).
The names below are loaded on first use: ``import pipeline`` stays cheap, since every worker
process and the command line import the package before anything else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__version__ = "0.1.0"
__all__ = ["Analysis", "Tables", "open"]

if TYPE_CHECKING:
    from pipeline.api import Analysis, Tables, open


def __getattr__(name: str):
    if name in __all__:
        from pipeline import api

        return getattr(api, name)
    raise AttributeError(f"module 'pipeline' has no attribute {name!r}")
