"""The install's own script: pip's package sources handed to uv as flags (scripts/uv_sources.py)."""

from __future__ import annotations

import importlib.util
import os
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

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


# --- the layout and the wheel ---------------------------------------------------------------------


def test_the_top_level_folders_are_the_packages_the_wheel_lists():
    """Every folder with an ``__init__.py`` under ``pipeline/``, ``flows/``, ``reports/`` and ``sql/`` is
    a package ``pyproject.toml`` names, and no ``.sql`` file is left under ``pipeline/``."""
    import tomllib

    from layout import package_folders

    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = set()
    for package, folder in package_folders().items():
        for init in folder.rglob("__init__.py"):
            found.add(".".join([package, *init.parent.relative_to(folder).parts]))
    assert found == set(setuptools["packages"])
    assert set(setuptools["package-dir"].values()) == {"flows", "reports", "sql"}
    assert list((ROOT / "pipeline").rglob("*.sql")) == []
    assert [p.name for p in (ROOT / "sql").glob("*.sql")]


@pytest.mark.slow
def test_a_profile_runs_from_the_built_wheel_outside_the_checkout(tmp_path):
    """The wheel carries flows/, reports/ and sql/ inside ``pipeline``: unpacked alone (a pure-Python
    wheel is a zip) and put first on the path, outside the checkout, it profiles and writes a report."""
    import shutil

    # built from a copy: setuptools writes build/ and *.egg-info beside the sources
    source = tmp_path / "source"
    skip = shutil.ignore_patterns(".git", ".venv*", "build", "*.egg-info", "__pycache__", "difficulty-data", "site")
    shutil.copytree(ROOT, source, ignore=skip)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation", "-q", "-w", tmp_path],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("difficulty_pipeline-*.whl")
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
        names = archive.namelist()
    assert "pipeline/flows/prefect_flows.py" in names and "pipeline/sql/prompt_counts.sql" in names
    assert "pipeline/reports/templates/report.html.j2" in names and "pipeline/cli/commands/profile.py" in names
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site), "DIFFICULTY_DATA": str(outside / "data")}
    where = subprocess.run(
        [sys.executable, "-c", "import pipeline.flows, pipeline.reports, pipeline.sql; print(pipeline.flows.__file__)"],
        cwd=outside,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert where.stdout.strip().startswith(str(site))
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline",
            "profile",
            "--backend",
            "simulate",
            "--limit",
            "6",
            "--n",
            "4",
            "--no-prefect",
        ],
        cwd=outside,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    reports = list((outside / "data" / "reports").glob("*.html"))
    assert len(reports) == 1 and "<html" in reports[0].read_text()[:2000].lower()
