"""Print pip's package sources as uv flags: uv reads no pip configuration (pip.conf, PIP_* variables).

A machine can give pip an index, extra indexes, a folder of wheels (torch's CPU build, say) and a
constraints file; `make` passes the same to `uv pip install` through this script's output, with
pip's way of choosing among them (the best version across every source: ``unsafe-best-match``;
uv's default takes a package from the first index that has it). A ``file://`` index or a folder
that does not exist is left out, as pip skips it with a warning and uv would stop. A configured
certificate bundle becomes ``--system-certs`` (the system's store, where such bundles are installed).

    python scripts/uv_sources.py [PYTHON]     # PYTHON: the interpreter whose pip is read (default: this one)
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

FLAGS = {"index-url": "--index-url", "extra-index-url": "--extra-index-url", "find-links": "--find-links"}


def present(location: str) -> bool:
    """Whether pip would use ``location``: a URL other than ``file://``, or a path that exists."""
    parsed = urlparse(location)
    if parsed.scheme in ("http", "https"):
        return True
    return Path(unquote(parsed.path) if parsed.scheme == "file" else location).exists()


def uv_flags(config: str) -> list[str]:
    """uv flags for the lines of ``pip config list`` (``scope.key='value'``)."""
    flags = ["--index-strategy", "unsafe-best-match"]
    for line in config.splitlines():
        name, sep, value = line.partition("=")
        if not sep:
            continue
        key = name.rsplit(".", 1)[-1]
        value = value.strip().strip("'\"")
        if key in FLAGS:
            for location in value.split():
                if present(location) and location not in flags:
                    flags += [FLAGS[key], location]
        elif key == "constraint" and present(value) and value not in flags:
            flags += ["--constraint", value]
        elif key == "no-index" and value.lower() in ("1", "true", "yes", "on") and "--no-index" not in flags:
            flags.append("--no-index")
        elif key == "cert" and "--system-certs" not in flags:
            flags.append("--system-certs")
    return flags


def main() -> None:
    python = sys.argv[1] if len(sys.argv) > 1 else sys.executable
    out = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True)
    print(shlex.join(uv_flags(out.stdout if out.returncode == 0 else "")))


if __name__ == "__main__":
    main()
