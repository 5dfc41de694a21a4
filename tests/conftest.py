"""Shared fixtures: every test gets its own data directory and Prefect home, and no network."""

from __future__ import annotations

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
