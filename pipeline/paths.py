"""Where the pipeline keeps files of its own outside a data directory: the user's cache."""

from __future__ import annotations

import os
from pathlib import Path


def user_cache(name: str, env: str) -> Path:
    """A folder of the user's cache (not created): ``$<env>`` when set, else
    ``$XDG_CACHE_HOME/difficulty-pipeline/<name>``, else ``~/.cache/difficulty-pipeline/<name>``."""
    chosen = os.environ.get(env)
    if chosen:
        return Path(chosen).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "difficulty-pipeline" / name
