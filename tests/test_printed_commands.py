"""Every command the tool prints for the user to run, run as printed, for every kind of source: the
bundled set, a local JSON Lines file, a local Parquet file, a verl file, a simulate run, an adaptive
run and a ``current --save`` snapshot. A printed command is a line (or a report finding's ``<code>``)
that starts with ``difficulty ``; each is split as a shell would and run in the same data directory."""

from __future__ import annotations

import html
import re
import shlex
from pathlib import Path

import pyarrow.json as pj
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from pipeline import suggest
from pipeline.cli import COMMANDS, app
from pipeline.store import Store

runner = CliRunner()
NAMES = "|".join(name for name, _, _ in COMMANDS)
COMMAND = re.compile(rf"^(?:(?:next|or):\s+)?(difficulty (?:{NAMES})(?: .*)?)$")
FINDING = re.compile(r'<li class="finding">.*?<code>(difficulty [^<]*)</code>', re.S)


def printed_commands(output: str) -> list[str]:
    """The commands in a command's output: every line whose text (after a ``next:`` or ``or:``) is
    ``difficulty ...``."""
    found = []
    for line in output.splitlines():
        match = COMMAND.search(line.strip())
        if match:
            found.append(match.group(1).strip())
    return found


def report_commands(path: Path) -> list[str]:
    return [html.unescape(c) for c in FINDING.findall(path.read_text())]


def run_printed(command: str) -> None:
    args = shlex.split(command)
    assert args[0] == "difficulty", command
    out = runner.invoke(app, args[1:])
    assert out.exit_code == 0, f"printed command failed: {command}\n{out.output}"


def invoke(*args: str) -> str:
    out = runner.invoke(app, list(args))
    assert out.exit_code == 0, out.output
    return out.output


def _run_id(output: str) -> str:
    return re.search(r"^run (\S+) done", output, re.M).group(1)


def check_every_printed_command(output: str, data_dir: Path, *, in_report: bool = True) -> list[str]:
    commands = printed_commands(output)
    assert commands, output
    if in_report:
        run_id = _run_id(output)
        shown = report_commands(Store(data_dir).report_path(run_id))
        # no line of the report suggests writing the report the reader is reading
        assert not [c for c in shown if c in (suggest.report(run_id), suggest.report(run_id, 8))], shown
        commands += shown
    for command in dict.fromkeys(commands):
        run_printed(command)
    return commands


SIMULATE = ("--backend", "simulate", "--no-prefect", "--grade-workers", "1")


def test_the_output_parser_finds_printed_commands():
    text = "verdict:\n  - x\n      difficulty report --run r1 --G 8\n"
    text += "next: difficulty export --run r1\n  or: difficulty allocate --run r1\n"
    assert printed_commands(text) == [
        "difficulty report --run r1 --G 8",
        "difficulty export --run r1",
        "difficulty allocate --run r1",
    ]
    assert printed_commands("the difficulty of a prompt\nrun r1 done") == []


@pytest.mark.parametrize("adaptive", [False, True], ids=["bundled-simulate", "bundled-adaptive"])
def test_commands_printed_for_the_bundled_set_run(data_dir, tmp_path, monkeypatch, adaptive):
    monkeypatch.chdir(tmp_path)
    extra = ("--adaptive", "band") if adaptive else ()
    output = invoke("profile", *SIMULATE, "--limit", "40", *extra)
    check_every_printed_command(output, data_dir)


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_commands_printed_for_a_local_file_run(data_dir, tmp_path, monkeypatch, shared, kind):
    monkeypatch.chdir(tmp_path)
    source = shared / "math500" / "test.jsonl"
    if kind == "parquet":
        folder = tmp_path / "math500"
        folder.mkdir()
        pq.write_table(pj.read_json(source), folder / "test.parquet")
        source = folder / "test.parquet"
    output = invoke("profile", *SIMULATE, "--data-file", str(source), "--limit", "30")
    commands = check_every_printed_command(output, data_dir)
    assert not any("--dataset local-" in c and "--data-file" in c for c in commands)


def test_commands_printed_for_a_verl_file_run(data_dir, tmp_path, monkeypatch, shared):
    monkeypatch.chdir(tmp_path)
    output = invoke(
        "profile", *SIMULATE, "--data-file", str(shared / "deepscaler" / "verl_train_sub.parquet"), "--limit", "30"
    )
    commands = check_every_printed_command(output, data_dir)
    assert not any("--format trl" in c for c in commands)  # a verl dataset is exported as verl


def test_commands_printed_after_current_save(data_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    invoke("load", "arithmetic", "--limit", "3")
    ids = Store(data_dir).read_table("problems").column("prompt_id").to_pylist()
    table = tmp_path / "rewards.csv"
    rows = ["step,prompt_id,reward,model"]
    for model in ("qwen-1.5b", "smollm2-135m"):
        rows += [f"1,{ids[0]},{r},{model}" for r in (1, 1, 0, 0)] + [f"1,{ids[1]},{r},{model}" for r in (0, 1, 0, 0)]
    table.write_text("\n".join(rows) + "\n")
    invoke("track", str(table), "--dataset", "arithmetic")
    output = invoke("current", "--dataset", "arithmetic", "--save")
    commands = printed_commands(output)
    assert any(c.startswith("difficulty export") for c in commands), output
    assert not any("--format" in c for c in commands)  # export's own default: the dataset's format
    assert not any(", " in c for c in commands)  # a list of models is never one argument
    for command in dict.fromkeys(commands):
        run_printed(command)


@pytest.mark.slow
def test_commands_printed_for_the_bundled_model_run(data_dir, tmp_path, monkeypatch):
    """The bundled model's run: the model name the run records is one ``--model`` takes (or left out)."""
    monkeypatch.chdir(tmp_path)
    output = invoke("profile", "--no-prefect", "--limit", "3", "--n", "2", "--max-tokens", "24", "--grade-workers", "1")
    commands = check_every_printed_command(output, data_dir)
    assert any(c.startswith("difficulty profile") for c in commands), output


def test_the_builder_quotes_values_and_joins_no_list():
    from pipeline.store import RunRecord

    assert suggest.command("sql", "select 'a' b") == """difficulty sql 'select '"'"'a'"'"' b'"""
    assert (
        suggest.export("r1", keep="informative", G=None)
        == "difficulty export --run r1 --keep informative --output train.parquet"
    )
    pooled = RunRecord("r", dataset="d", model="qwen-1.5b, smollm2-135m", backend="observations")
    assert suggest.profile_again(pooled, n=8) is None
    sim = RunRecord("r", dataset="local-x y", model="simulate", backend="simulate")
    assert suggest.profile_again(sim, n=32) == "difficulty profile --dataset 'local-x y' --backend simulate --n 32"
