"""The install's own script: pip's package sources handed to uv as flags (scripts/uv_sources.py)."""

from __future__ import annotations

import importlib.util
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("uv_sources", ROOT / "scripts" / "uv_sources.py")
uv_sources = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(uv_sources)


def test_pips_sources_become_uv_flags_and_missing_ones_are_left_out(tmp_path):
    wheels = tmp_path / "wheels"
    index = tmp_path / "simple"
    wheels.mkdir()
    index.mkdir()
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("torch<=2.14.1\n")
    config = "\n".join(
        [
            f":env:.find-links='{wheels}'",
            ":env:.default-timeout='180'",
            "global.cert='/etc/ssl/certs/ca-certificates.crt'",
            f"global.constraint='{constraints}'",
            f"global.extra-index-url='file://{index} file://{tmp_path}/absent https://mirror.example/simple'",
            f"global.find-links='{wheels}'",  # the same folder twice: once
            "user.index-url='https://pypi.example/simple'",
            "not a setting",
        ]
    )
    flags = uv_sources.uv_flags(config)
    assert flags[:2] == ["--index-strategy", "unsafe-best-match"]  # pip's rule: the best version anywhere
    assert "--system-certs" in flags  # pip's certificate bundle: the system's store
    flags.remove("--system-certs")
    pairs = list(zip(flags[2::2], flags[3::2], strict=True))
    assert pairs == [
        ("--find-links", str(wheels)),
        ("--constraint", str(constraints)),
        ("--extra-index-url", f"file://{index}"),
        ("--extra-index-url", "https://mirror.example/simple"),
        ("--index-url", "https://pypi.example/simple"),
    ]
    assert uv_sources.uv_flags("") == ["--index-strategy", "unsafe-best-match"]
    assert "--no-index" in uv_sources.uv_flags("global.no-index='true'")


def test_the_script_reads_this_interpreters_pip():
    """Run as make runs it: one line of flags that shlex splits, whatever this machine configures."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "uv_sources.py"), sys.executable],
        capture_output=True,
        text=True,
        check=True,
    )
    flags = [f for f in shlex.split(out.stdout) if f not in ("--system-certs", "--no-index")]
    assert flags[:2] == ["--index-strategy", "unsafe-best-match"]
    for flag, value in zip(flags[2::2], flags[3::2], strict=True):
        if flag in ("--find-links", "--constraint"):
            assert uv_sources.present(value), value
