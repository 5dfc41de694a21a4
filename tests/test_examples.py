"""``examples/*.py`` run exactly as ``docs/guide/examples.md`` shows them: the page's ``bash`` blocks are
parsed and every command is run in order (``make`` lines are the install, checked to be targets of the
Makefile that compile nothing), and the page's ``python`` blocks are the files themselves, whole.

The commands run with the environments ``make test`` builds: ``.venv/bin/...`` is this interpreter (the
test environment holds the ``trl`` extra) and ``.venv-verl/bin/python`` the verl environment. They run
in a fresh folder holding a link to ``examples/``, with this checkout first on the path.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "guide" / "examples.md"
VERL_PYTHON = ROOT / ".venv-verl" / "bin" / "python"
# The interpreters a command of the page names, as this test runs them.
RUNNERS = {
    ".venv/bin/python": [sys.executable],
    ".venv/bin/difficulty": [sys.executable, "-m", "pipeline"],
    ".venv-verl/bin/python": [str(VERL_PYTHON)],
}


def blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", PAGE.read_text(encoding="utf-8"), flags=re.S | re.M)


def commands() -> list[list[str]]:
    """Every command line of the page's bash blocks, comments removed, as argument lists."""
    out = []
    for block in blocks("bash"):
        out += [shlex.split(line, comments=True) for line in block.splitlines() if line.strip()]
    return out


def test_the_page_shows_each_example_whole():
    files = sorted((ROOT / "examples").glob("*.py"))
    assert [f.name for f in files] == ["notebook.py", "trl_grpo.py", "verl_curriculum.py"]
    assert blocks("python") == [f.read_text(encoding="utf-8") for f in files]


def test_the_install_is_make_targets_that_compile_nothing():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    installs = [c for c in commands() if c[0] == "make"]
    assert [c[1:] for c in installs] == [["venv-trl"], ["venv-verl"]]
    for _, target in installs:
        assert re.search(rf"^{target}: ", makefile, flags=re.M), target
    trl = makefile.split("$(VENV)/.trl:", 1)[1].split("\n\n", 1)[0]
    assert "llamacpp" not in trl and "CMAKE" not in trl  # llama-cpp-python is the one compiled package


def test_the_parser_reads_the_commands():
    got = commands()
    assert all(c[0] in RUNNERS or c[0] == "make" for c in got), got
    assert [c[1] for c in got if c[0].endswith("python")] == [
        "examples/notebook.py",
        "examples/trl_grpo.py",
        "examples/verl_curriculum.py",
    ]


@pytest.mark.slow
def test_every_command_of_the_page_runs_as_written(tmp_path):
    if not VERL_PYTHON.is_file():
        pytest.fail(f"{VERL_PYTHON} is missing: run `make venv-verl` (make test builds it)")
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    env = {k: v for k, v in os.environ.items() if k != "DIFFICULTY_DATA"}  # the page names its --data-dir
    env.update({"PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"})
    outputs = {}
    for command in commands():
        if command[0] == "make":
            continue
        proc = subprocess.run(
            RUNNERS[command[0]] + command[1:], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200
        )
        assert proc.returncode == 0, f"{shlex.join(command)}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        outputs[command[1]] = proc.stdout

    import pipeline
    from pipeline.observe.current import FORGETTING

    data = pipeline.open(tmp_path / "demo-data")
    run = data.runs().pl().row(0, named=True)
    ids = set(data.sql("select prompt_id from prompt_stats where run_id = $r", {"r": run["run_id"]}).pl()["prompt_id"])
    assert len(ids) == 12
    assert f"run {run['run_id']}: arithmetic" in outputs["examples/notebook.py"]
    # two GRPO steps of 2 prompts x 2 completions, recorded under the script's source
    steps = data.sql("select step, prompt_id, n from observations where source = 'trl:example'").fetchall()
    assert {pid for _, pid, _ in steps} <= ids
    assert {s: sum(n for t, _, n in steps if t == s) for s, _, _ in steps} == {0: 4, 1: 4}
    model = run["model"]  # the recorder's model is the profile's: one policy, pooled without a warning
    assert f"pooled 1 source (forgetting {FORGETTING:g}), 1 model: {model}" in outputs["current"]
    assert f"trl:example (training, {model}; steps 0-1): " in outputs["current"]
    assert "left out: profile:" in outputs["current"] and "warning" not in outputs["current"]
    batches = [line for line in outputs["examples/verl_curriculum.py"].splitlines() if line.startswith("batch ")]
    assert len(batches) == 3
    for line in batches:  # 4 distinct prompts of the run, by the top-level prompt_id verl carried through
        drawn = re.findall(r"'([0-9a-f]{16})'", line.split("profiled")[0])
        assert len(set(drawn)) == 4 and set(drawn) <= ids


def test_the_notebook_reads_the_newest_finished_run(tmp_path):
    """A run still sampling (newer, no analysis yet) is passed over, not crashed on."""
    from typer.testing import CliRunner

    from pipeline.cli import app
    from pipeline.store import RunRecord, Store

    data = tmp_path / "data"
    args = ["profile", "--backend", "simulate", "--no-prefect", "--no-report", "--limit", "6", "--data-dir", str(data)]
    assert CliRunner().invoke(app, args).exit_code == 0
    Store(data).register_run(RunRecord("still-sampling", dataset="arithmetic", model="m", status="sampling"))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "notebook.py"), str(data)], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert "still-sampling" not in proc.stdout and ": arithmetic, model" in proc.stdout
