"""The difficulty pipeline: per-prompt pass rates and GRPO-family signal analysis.

``pipeline.open(data_dir)`` opens a data directory read-only for notebooks (``pipeline.api``).
The names below are loaded on first use: ``import pipeline`` stays cheap, since every worker
process and the command line import the package before anything else.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

# One BLAS thread unless the user says otherwise. The pipeline's linear algebra is many tiny problems
# (the prior fits' L-BFGS steps, a round's grids), which OpenBLAS's threads slow down: they spin
# waiting for cores the sampler, the graders or a second worker hold. Two test workers on two cores
# ran the adaptive tests 3.4x slower with them (187 s against 55 s). Read when numpy first loads, so
# it is set here, before any import of numpy.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

__version__ = "0.1.0"
__all__ = ["Analysis", "Tables", "open"]

if TYPE_CHECKING:
    from pipeline.api import Analysis, Tables, open


class _TopLevelFolders:
    """Finds ``pipeline.flows``, ``pipeline.reports`` and ``pipeline.sql`` in the checkout's top-level
    ``flows/``, ``reports/`` and ``sql/`` (the layout the design names). An installed wheel holds them
    inside ``pipeline/`` and needs no finder; a checkout reads the same mapping from its
    ``pyproject.toml`` (``[tool.setuptools.package-dir]``), so a second checkout on ``PYTHONPATH``
    imports its own folders, never an editable install's."""

    def __init__(self, folders: dict[str, str]) -> None:
        self.folders = folders

    def find_spec(self, fullname: str, path=None, target=None):
        folder = self.folders.get(fullname)
        if folder is None:
            return None
        from importlib.util import spec_from_file_location

        init = os.path.join(folder, "__init__.py")
        return spec_from_file_location(fullname, init, submodule_search_locations=[folder])


def _map_top_level_folders() -> None:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    pyproject = os.path.join(root, "pyproject.toml")
    if not os.path.isfile(pyproject):  # an installed wheel: the folders are inside pipeline/
        return
    import tomllib

    with open(pyproject, "rb") as f:
        mapped = tomllib.load(f).get("tool", {}).get("setuptools", {}).get("package-dir", {})
    folders = {name: os.path.join(root, folder) for name, folder in mapped.items() if name.startswith("pipeline.")}
    if folders and not any(isinstance(f, _TopLevelFolders) for f in sys.meta_path):
        sys.meta_path.insert(0, _TopLevelFolders(folders))


_map_top_level_folders()


def __getattr__(name: str):
    if name in __all__:
        from pipeline import api

        return getattr(api, name)
    raise AttributeError(f"module 'pipeline' has no attribute {name!r}")
