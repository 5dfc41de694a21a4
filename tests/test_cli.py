"""The ``difficulty`` command line through the real app (typer's CliRunner), and ``python -m pipeline``."""

from __future__ import annotations

import contextlib
import csv
import inspect
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from pipeline.api import Tables
from pipeline.cli import app, output
from pipeline.cli.profile_options import profile_defaults
from pipeline.errors import StoreError
from pipeline.store import Store

runner = CliRunner()

PANELS = {
    "Pipeline": ["datasets", "load", "profile", "grade", "runs", "sql", "report"],
    "Analysis": ["analyze", "allocate"],
    "Orchestration": ["schedule", "checkpoints", "drift"],
    "Calculators": ["weights", "groupsize", "tries"],
}


def simulate_run(data_dir: Path, *extra: str) -> str:
    """Profile the bundled arithmetic set with the model-free simulate backend; the run id."""
    args = ["profile", "--backend", "simulate", "--no-prefect", "--limit", "30", "--n", "8"]
    args += ["--grade-workers", "1", "--data-dir", str(data_dir), *extra]
    out = runner.invoke(app, args)
    assert out.exit_code == 0, out.output
    return Store(data_dir).list_runs().column("run_id")[0].as_py()


@pytest.fixture(scope="module")
def sim_dir(tmp_path_factory) -> Path:
    """A data directory holding one finished simulate run (read-only for the tests using it)."""
    path = tmp_path_factory.mktemp("sim") / "data"
    simulate_run(path, "--no-report")
    return path


# --- load, sql, datasets, runs -----------------------------------------------------------------


def test_load_then_sql_count(data_dir):
    out = runner.invoke(app, ["load", "arithmetic", "--limit", "20"])
    assert out.exit_code == 0, out.output
    assert "loaded 20 problems" in out.output
    out = runner.invoke(app, ["sql", "select count(*) as n from problems", "--format", "csv"])
    assert out.exit_code == 0, out.output
    assert out.output.splitlines() == ["n", "20"]


def test_sql_formats_and_output_file(data_dir, tmp_path):
    runner.invoke(app, ["load", "arithmetic", "--limit", "9"])
    out = runner.invoke(
        app, ["sql", "select difficulty, count(*) n from problems group by 1 order by 1", "--format", "json"]
    )
    rows = json.loads(out.output)
    assert [r["difficulty"] for r in rows] == list(range(1, 10)) and all(r["n"] == 1 for r in rows)
    target = tmp_path / "out.parquet"
    out = runner.invoke(app, ["sql", "select * from problems", "--format", "parquet", "--output", str(target)])
    assert out.exit_code == 0 and pq.read_table(target).num_rows == 9
    out = runner.invoke(app, ["sql", "select prompt_id from problems limit 3"])
    assert out.exit_code == 0 and "prompt_id" in out.output
    out = runner.invoke(app, ["sql", "select 1", "--format", "parquet"])
    assert out.exit_code == 1 and "--output" in out.output


def test_sql_reads_only_the_tables_its_query_names(data_dir):
    """A query lists and checks only the files of the views it names: a damaged samples file is
    left alone by a query on runs, and moved aside by one on samples; a query on the catalogue
    sees every view."""
    runner.invoke(app, ["load", "arithmetic", "--limit", "3"])
    bad = data_dir / "samples" / "run_id=r" / "shard-00000.parquet"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"not parquet")
    out = runner.invoke(app, ["sql", "select count(*) as n from problems", "--format", "csv"])
    assert out.exit_code == 0 and out.stdout.splitlines() == ["n", "3"] and bad.exists()
    out = runner.invoke(app, ["sql", "select count(*) as n from duckdb_views() where not internal", "--format", "csv"])
    assert out.exit_code == 0 and int(out.stdout.splitlines()[1]) == len(Tables.views)
    assert not bad.exists()  # the catalogue query made every view, samples' included
    bad.write_bytes(b"not parquet")
    out = runner.invoke(app, ["sql", "select count(*) as n from samples", "--format", "csv"])
    assert out.exit_code == 0 and out.stdout.splitlines() == ["n", "0"] and not bad.exists()


def test_sql_error_exit_1_nothing_written(data_dir, tmp_path):
    target = tmp_path / "never.csv"
    out = runner.invoke(app, ["sql", "select nope from problems", "--format", "csv", "--output", str(target)])
    assert out.exit_code == 1
    assert "error:" in out.output and "nope" in out.output
    assert not target.exists()


def test_load_offline_hub_name_fails_with_hint(data_dir):
    out = runner.invoke(app, ["load", "gsm8k"])
    assert out.exit_code == 1 and "--data-file" in out.output
    out = runner.invoke(app, ["load"])
    assert out.exit_code == 1 and "--data-file" in out.output


def test_datasets_lists_adapters(data_dir):
    out = runner.invoke(app, ["datasets"])
    assert out.exit_code == 0
    for name in ("gsm8k", "bigmath", "deepmath", "arithmetic"):
        assert name in out.output


def test_datasets_csv_and_json():
    out = runner.invoke(app, ["datasets", "--format", "csv"])
    assert out.exit_code == 0, out.output
    rows = list(csv.DictReader(io.StringIO(out.stdout)))
    assert {r["name"] for r in rows} >= {"gsm8k", "bigmath", "deepmath", "arithmetic", "local"}
    assert set(rows[0]) == {"name", "source", "revision", "split", "description"}
    out = runner.invoke(app, ["datasets", "--format", "json"])
    assert out.exit_code == 0, out.output
    by_name = {r["name"]: r for r in json.loads(out.stdout)}
    assert by_name["gsm8k"]["source"] == "openai/gsm8k"
    out = runner.invoke(app, ["datasets", "--format", "xml"])
    assert out.exit_code == 1 and "--format" in out.output


def test_runs_empty_and_bad_data_dir(data_dir, tmp_path):
    assert runner.invoke(app, ["runs"]).exit_code == 0
    blocker = tmp_path / "f"
    blocker.write_text("")
    out = runner.invoke(app, ["runs", "--data-dir", str(blocker / "d")])
    assert out.exit_code == 1 and "not writable" in out.output


def _line_with(text: str, needle: str) -> str:
    lines = [line for line in text.splitlines() if needle in line]
    assert lines, f"{needle!r} is not whole on any line of:\n{text}"
    return lines[0]


def test_runs_never_breaks_a_run_id(sim_dir):
    run = Store(sim_dir).list_runs().to_pylist()[0]
    assert len(run["run_id"]) == 12
    out = runner.invoke(app, ["runs", "--data-dir", str(sim_dir)], env={"COLUMNS": "80"})
    assert out.exit_code == 0, out.output
    line = _line_with(out.stdout, run["run_id"])
    stamp = run["created_at"].isoformat(sep=" ", timespec="seconds")
    assert run["model"] in line and stamp in line and "simulate" in line
    assert len(line) > 80  # wider than the terminal, and still one line


def test_tables_fall_back_to_plain_text_on_a_narrow_terminal():
    run_id = "0123456789ab"
    table = pa.table(
        {
            "run_id": [run_id],
            "model": ["/models/some-org/a-rather-long-checkpoint-name/step-000123.gguf"],
            "created_at": ["2025-01-02 03:04:05+00:00"],
            "n_prompts": [1234567],
        }
    )
    narrow = Console(file=io.StringIO(), force_terminal=True, width=80, color_system=None)
    output.print_table(table, title="runs", out=narrow)
    text = narrow.file.getvalue()
    line = _line_with(text, run_id)
    assert "step-000123.gguf" in line and "1234567" in line and "│" not in text
    wide = Console(file=io.StringIO(), force_terminal=True, width=200, color_system=None)
    output.print_table(table, title="runs", out=wide)
    text = wide.file.getvalue()
    assert "│" in text  # a rich table where it fits
    assert "step-000123.gguf" in _line_with(text, run_id)


def test_runs_csv_and_json(sim_dir):
    run_id = Store(sim_dir).list_runs().column("run_id")[0].as_py()
    out = runner.invoke(app, ["runs", "--format", "csv", "--data-dir", str(sim_dir)])
    assert out.exit_code == 0, out.output
    rows = list(csv.DictReader(io.StringIO(out.stdout)))
    assert [r["run_id"] for r in rows] == [run_id]
    assert list(rows[0]) == ["run_id", "dataset", "model", "backend", "n_prompts", "status", "created_at"]
    assert rows[0]["backend"] == "simulate" and rows[0]["status"] == "done" and rows[0]["n_prompts"] == "30"
    out = runner.invoke(app, ["runs", "--format", "json", "--data-dir", str(sim_dir)])
    assert out.exit_code == 0, out.output
    [row] = json.loads(out.stdout)
    assert row["run_id"] == run_id and row["dataset"] == "arithmetic"


# --- profile ---------------------------------------------------------------------------------


def test_profile_missing_model_fails_before_any_work(data_dir, tmp_path):
    out = runner.invoke(app, ["profile", "--no-prefect", "--model", str(tmp_path / "missing.gguf"), "--limit", "2"])
    assert out.exit_code == 1
    assert "error:" in out.output and "missing.gguf" in out.output
    assert not (data_dir / "problems").exists() and not (data_dir / "runs").exists()


def test_profile_simulate_prints_summary_and_writes_report(tmp_path):
    data_dir = tmp_path / "data"
    out = runner.invoke(
        app,
        ["profile", "--backend", "simulate", "--no-prefect", "--limit", "12", "--n", "4", "--grade-workers", "1"]
        + ["--data-dir", str(data_dir)],
    )
    assert out.exit_code == 0, out.output
    run_id = Store(data_dir).list_runs().column("run_id")[0].as_py()
    assert f"run {run_id} done" in out.output and "pass-rate spread" in out.output
    assert (data_dir / "reports" / f"{run_id}.html").exists()


def test_profile_option_checks_exit_1(data_dir, tmp_path):
    rates = tmp_path / "rates.csv"
    rates.write_text("prompt_id,pass_rate\n")
    out = runner.invoke(app, ["profile", "--no-prefect", "--pass-rates", str(rates)])
    assert out.exit_code == 1 and "--pass-rates applies to --backend simulate only" in out.output
    out = runner.invoke(app, ["profile", "--no-prefect", "--backend", "simulate", "--grade-workers", "0"])
    assert out.exit_code == 1 and "error:" in out.output and "workers=0" in out.output
    out = runner.invoke(app, ["profile", "--no-prefect", "--backend", "simulate", "--executor", "spark"])
    assert out.exit_code == 1 and "executor='spark'" in out.output
    assert not (data_dir / "runs").exists()


def test_profile_pass_rates_option_reaches_the_backend(tmp_path):
    data_dir = tmp_path / "data"
    runner.invoke(app, ["load", "arithmetic", "--limit", "6", "--data-dir", str(data_dir)])
    problems = Store(data_dir).read_table("problems", {"dataset": "arithmetic"})
    rates = tmp_path / "rates.csv"
    rates.write_text("prompt_id,pass_rate\n" + "".join(f"{p},1.0\n" for p in problems.column("prompt_id").to_pylist()))
    out = runner.invoke(
        app,
        ["profile", "--backend", "simulate", "--pass-rates", str(rates), "--no-prefect", "--limit", "6", "--n", "3"]
        + ["--grade-workers", "1", "--no-report", "--data-dir", str(data_dir)],
    )
    assert out.exit_code == 0, out.output
    got = Store(data_dir).query("select count(*) n, sum(correct::int) c from samples").to_pylist()
    assert got == [{"n": 18, "c": 18}]  # every prompt at pass rate 1


def _params(command: str) -> dict[str, object]:
    group = typer.main.get_command(app)
    return {p.name: p for p in group.get_command(None, command).params}


def test_profile_options_are_the_same_on_profile_schedule_and_checkpoints():
    names = [*profile_defaults(), "data_dir"]
    profile, schedule, checkpoints = (_params(c) for c in ("profile", "schedule", "checkpoints"))
    for name in names:
        declared = {(tuple(c[name].opts), tuple(c[name].secondary_opts), c[name].default) for c in (profile, schedule)}
        declared.add(
            (tuple(checkpoints[name].opts), tuple(checkpoints[name].secondary_opts), checkpoints[name].default)
        )
        assert len(declared) == 1, (name, declared)
    assert profile["n"].default == 8 and profile["backend"].default == "xllamacpp"
    assert profile["pass_rates"].opts == ["--pass-rates"]
    from pipeline.sample import RETIRED_BACKENDS

    offered = profile["backend"].help
    assert "simulate" in offered and not any(f" {name}," in f" {offered}" for name in RETIRED_BACKENDS)


# --- errors, help, python -m ------------------------------------------------------------------


def test_pipeline_error_from_a_library_call_is_exit_1_with_its_message(data_dir, monkeypatch):
    def broken(self):
        raise StoreError("the registry is on fire")

    monkeypatch.setattr(Store, "list_runs", broken)
    out = runner.invoke(app, ["runs"])
    assert out.exit_code == 1
    assert out.stderr.strip() == "error: the registry is on fire"
    assert out.exception is None or isinstance(out.exception, SystemExit)


def test_other_exceptions_are_bugs_not_user_errors(data_dir, monkeypatch):
    def broken(self):
        raise KeyError("bug")

    monkeypatch.setattr(Store, "list_runs", broken)
    out = runner.invoke(app, ["runs"])
    assert isinstance(out.exception, KeyError) and "error:" not in out.output


def test_help_groups_commands_in_panels():
    out = runner.invoke(app, ["--help"], env={"COLUMNS": "120"})
    assert out.exit_code == 0
    lines = out.output.splitlines()
    panel_of: dict[str, str] = {}
    current = None
    for line in lines:
        title = next((p for p in PANELS if f"─ {p} ─" in line), None)
        if title:
            current = title
            continue
        words = line.strip("│ ").split()
        if current and words:
            panel_of.setdefault(words[0], current)
    for panel, commands in PANELS.items():
        for command in commands:
            assert panel_of.get(command) == panel, (command, out.output)


def test_python_m_pipeline_and_piped_listing(sim_dir):
    env = {**os.environ, "COLUMNS": "80"}
    done = subprocess.run([sys.executable, "-m", "pipeline", "--help"], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert "Usage: difficulty" in done.stdout and "Calculators" in done.stdout
    done = subprocess.run(
        [sys.executable, "-m", "pipeline", "runs", "--data-dir", str(sim_dir)], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    run_id = Store(sim_dir).list_runs().column("run_id")[0].as_py()
    assert "simulate" in _line_with(done.stdout, run_id)
    done = subprocess.run([sys.executable, "-m", "pipeline", "tries", "--p", "0"], capture_output=True, text=True)
    assert done.returncode == 1 and done.stderr.startswith("error:")


# --- report ----------------------------------------------------------------------------------


def test_report_writes_to_the_store_report_path(tmp_path):
    data_dir = tmp_path / "data"
    first = simulate_run(data_dir, "--no-report")
    second = simulate_run(data_dir, "--no-report", "--seed", "1")
    out = runner.invoke(app, ["report", "--plotly-js", "shared", "--data-dir", str(data_dir)])
    assert out.exit_code == 0, out.output
    assert (data_dir / "reports" / f"{second}.html").exists()  # the newest run by default
    out = runner.invoke(
        app, ["report", "--run", first, "--run", second, "--plotly-js", "shared", "--data-dir", str(data_dir)]
    )
    assert out.exit_code == 0, out.output
    assert (data_dir / "reports" / f"compare-{first}-vs-{second}.html").exists()
    assert (data_dir / "reports" / f"{first}.html").exists()


def test_report_errors_exit_1(tmp_path):
    empty = tmp_path / "empty"
    out = runner.invoke(app, ["report", "--data-dir", str(empty)])
    assert out.exit_code == 1 and "no runs" in out.output
    out = runner.invoke(app, ["report", "--data-dir", str(empty), "--plotly-js", "cdn"])
    assert out.exit_code == 1 and "plotly_js='cdn' is unknown: allowed inline, shared" in out.output
    out = runner.invoke(app, ["report", "--data-dir", str(empty), "--run", "nope"])
    assert out.exit_code == 1 and "nope" in out.output


# --- orchestration ---------------------------------------------------------------------------


def test_schedule_checks_before_any_server(monkeypatch, tmp_path):
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    both = runner.invoke(app, ["schedule", "--cron", "0 3 * * *", "--interval", "60"])
    assert both.exit_code == 1 and "exactly one of --cron" in both.output
    none = runner.invoke(app, ["schedule", "--cron", "0 3 * * *"])
    assert none.exit_code == 1 and "prefect server start" in none.output
    zone = runner.invoke(app, ["schedule", "--cron", "0 3 * * *", "--timezone", "Mars/Olympus"])
    assert zone.exit_code == 1 and "Mars/Olympus" in zone.output


def test_drift_and_checkpoints_listing_formats(data_dir, tmp_path):
    out = runner.invoke(app, ["drift", "--format", "json", "--limit", "3"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout) == {"checkpoints": [], "became_silent": [], "largest_changes": []}
    out = runner.invoke(app, ["drift"])
    assert out.exit_code == 0 and "history by checkpoint" in out.output and "largest pass-rate changes" in out.output
    out = runner.invoke(app, ["checkpoints", "--no-prefect", "--backend", "simulate"])
    assert out.exit_code == 1 and "checkpoint folder" in out.output
    folder = tmp_path / "ckpts"
    folder.mkdir()
    out = runner.invoke(app, ["checkpoints", str(folder), "--no-prefect", "--format", "json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout) == {"checkpoints": [], "history": []}
    assert "no new checkpoints" in out.stderr


# What a command may not import: the samplers' and flows' dependencies, and the pipeline's own
# computing modules. Checked by name in the process that ran the command, never by its time.
HEAVY = ("scipy", "httpx", "prefect", "plotly", "vllm", "torch", "polars", "jinja2", "ray", "xllamacpp", "math_verify")
COMPUTING = ("pipeline.sample", "pipeline.run", "pipeline.flows", "pipeline.reports", "pipeline.analyze")
RUN_AND_LIST = (
    "import json, runpy, sys\n"
    "out, sys.argv = sys.argv[1], ['difficulty', *sys.argv[2:]]\n"
    "try:\n    runpy.run_module('pipeline', run_name='__main__')\n"
    "except SystemExit as exc:\n    assert not exc.code, exc.code\n"
    "open(out, 'w').write(json.dumps(sorted(sys.modules)))\n"
)


def modules_after(tmp_path: Path, *args: str, env: dict | None = None) -> set[str]:
    """Every module loaded by the end of ``difficulty ARGS`` in a fresh interpreter."""
    listing = tmp_path / "modules.json"
    done = subprocess.run(
        [sys.executable, "-c", RUN_AND_LIST, str(listing), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(listing.read_text()))


def loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in names or m.startswith(names))


def test_importing_the_cli_loads_no_command_module():
    code = "import sys, pipeline.cli\nprint(sorted(m for m in sys.modules if m.startswith('pipeline.')))\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['pipeline.cli']"


@pytest.mark.parametrize(
    ("args", "allowed"),
    [
        (["--help"], ()),
        (["sql", "select count(*) from samples"], ()),
        (["sql", "--help"], ()),
        (["runs"], ()),
        (["groupsize", "--p", "0.5"], ()),
        (["tries", "--p", "0.5"], ()),
        (["weights", "--G", "4"], ("scipy",)),  # the estimators' own kernels need it
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else None,
)
def test_quick_commands_load_only_what_they_use(sim_dir, tmp_path, args, allowed):
    env = {"DIFFICULTY_DATA": str(sim_dir)}
    if args[0] == "sql" and args[1] != "--help":  # the files' checks decided (and saved) by an earlier process
        modules_after(tmp_path, *args, env=env)
    modules = modules_after(tmp_path, *args, env=env)
    assert loaded(modules, tuple(h for h in HEAVY if h not in allowed) + COMPUTING) == []
    if args[0] == "--help":  # the listing reads each command's summary without importing its module
        # finding a command's source imports the docstring-only package of the commands, no command
        assert (
            loaded(
                modules - {"pipeline.cli.commands"}, ("duckdb", "pyarrow", "numpy", "pipeline.store", "pipeline.cli.")
            )
            == []
        )
    if args[0] == "sql":
        unused = ("pandas", "pipeline.estimators", "pipeline.grade", "pipeline.cli.profile_options")
        assert loaded(modules, unused) == []
    if args[0] == "sql" and args[1] != "--help":  # the query alone: past typer's option parsing
        assert loaded(modules, ("pydantic", "fsspec", "pipeline.api")) == []
        # rows printed from DuckDB, files' verdicts read from the last process's: no Arrow at all;
        # and, its output piped, plain text without rich
        assert loaded(modules, ("pyarrow", "numpy", "rich")) == []


def test_sql_with_the_query_alone_answers_as_with_options(sim_dir):
    """``difficulty sql QUERY`` skips typer's parsing (``LazyGroup.invoke``): its answers, errors and
    refusals are those of the same command given its options."""
    env = {"DIFFICULTY_DATA": str(sim_dir), "COLUMNS": "200"}
    for query in ("select count(*) as n, min(run_id) as r from samples", "select * from nope", "copy runs to 'x.csv'"):
        quick = runner.invoke(app, ["sql", query], env=env)
        parsed = runner.invoke(app, ["sql", "--format", "table", "--data-dir", str(sim_dir), query], env=env)
        assert (quick.exit_code, quick.output) == (parsed.exit_code, parsed.output), query
    assert quick.exit_code == 1 and "error:" in quick.output  # the COPY: refused without --write
    assert runner.invoke(app, ["sql", "select 7 as seven"], env=env).output.count("7") == 1


def test_sql_table_shows_the_first_rows_and_counts_the_rest(data_dir):
    """A table shows ``MAX_ROWS`` rows of DuckDB's result and how many more there are; CSV has all."""
    table = runner.invoke(app, ["sql", "select range as i from range(100)"])
    assert table.exit_code == 0, table.output
    lines = [line.strip() for line in table.stdout.splitlines()]  # numbers are right-aligned
    assert lines[2:4] == ["0", "1"] and lines[-2:] == [
        str(output.MAX_ROWS - 1),
        f"... {100 - output.MAX_ROWS} more rows (use --format csv or --output)",
    ]
    assert len(lines) == 2 + output.MAX_ROWS + 1
    csv_out = runner.invoke(app, ["sql", "select range as i from range(100)", "--format", "csv"])
    assert csv_out.stdout.splitlines() == ["i", *map(str, range(100))]
    exact = runner.invoke(app, ["sql", f"select range as i from range({output.MAX_ROWS})"])
    assert "more rows" not in exact.stdout and exact.stdout.splitlines()[-1].strip() == str(output.MAX_ROWS - 1)
    arrow = io.StringIO()
    with contextlib.redirect_stdout(arrow):  # an Arrow table (other commands) prints the same way
        output.print_table(pa.table({"i": list(range(100))}))
    assert arrow.getvalue() == table.stdout


def test_quick_commands_take_their_options_only_from_the_command_line():
    """The quick path calls the command with its Python defaults: only the data directory may come
    from the environment, and ``Store.open`` reads that variable itself."""
    from pipeline.cli import QUICK, command_function
    from pipeline.store import DATA_DIR_ENV

    for name in QUICK:
        for param in inspect.signature(command_function(name), eval_str=True).parameters.values():
            for info in getattr(param.annotation, "__metadata__", ()):
                assert getattr(info, "envvar", None) in (None, DATA_DIR_ENV), (name, param.name)
                assert getattr(info, "callback", None) is None and getattr(info, "parser", None) is None


def test_every_command_lists_its_own_docstring():
    """``--help`` shows each command's docstring read from its source; it must be the one typer
    shows for the command itself."""
    from pipeline.cli import COMMANDS, command_docstring, command_function

    for name, _, _ in COMMANDS:
        assert command_docstring(name) == inspect.getdoc(command_function(name)), name
    out = runner.invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert out.exit_code == 0
    for name, _, _ in COMMANDS:
        summary = command_docstring(name).split("\n")[0]
        assert f" {name} " in out.output and summary[:25] in out.output, name  # before any rich markup


def test_a_mistyped_command_gets_a_suggestion_from_every_command():
    out = runner.invoke(app, ["groupsise"])
    assert out.exit_code == 2 and "No such command 'groupsise'. Did you mean 'groupsize'?" in out.output


# --- sql shell ---------------------------------------------------------------------------------


def sql_shell(data_dir: Path, script: str, *args: str) -> subprocess.CompletedProcess:
    """``difficulty sql`` with no query, reading ``script`` on a pipe (as a user's ``< file.sql``)."""
    return subprocess.run(
        [sys.executable, "-m", "pipeline", "sql", "--data-dir", str(data_dir), *args],
        input=script,
        capture_output=True,
        text=True,
    )


def test_sql_shell_runs_multi_line_statements_on_one_connection(sim_dir):
    run_id = Store(sim_dir).list_runs().column("run_id")[0].as_py()
    script = (
        "select run_id,\n"
        "       count(*) as n\n"
        "  from samples group by run_id;\n"
        "\n"
        ".tables\n"
        "select count(*) as prompts from prompt_stats; select 'two on a line' as x;\n"
        "select 'no semicolon at the end' as last\n"
    )
    done = sql_shell(sim_dir, script, "--format", "csv")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:2] == ["run_id,n", f"{run_id},240"]
    assert "samples" in lines and "history_drift" in lines  # .tables
    assert "prompts" in lines and lines[lines.index("prompts") + 1] == "30"
    assert lines[-2:] == ["last", "no semicolon at the end"]
    assert done.stderr == ""


def test_sql_shell_keeps_the_confinement_and_reports_failures(sim_dir, tmp_path):
    outside = tmp_path / "outside.parquet"
    pq.write_table(pa.table({"secret": [1]}), outside)
    before = sorted(p.name for p in sim_dir.rglob("*"))
    script = (
        f"select * from read_parquet('{outside}');\n"
        "create table t as select 1;\n"
        "select 41 + 1 as answer;\n"
        ".quit\n"
        "select 'after quit' as never;\n"
    )
    done = sql_shell(sim_dir, script, "--format", "json")
    assert done.returncode == 1  # a piped script with a failed statement: status 1, after running all
    errors = done.stderr.splitlines()
    assert len(errors) == 2 and all(e.startswith("error: refused") for e in errors)
    assert "outside.parquet" in errors[0] and "CREATE" in errors[1]
    assert json.loads(done.stdout) == [{"answer": 42}]
    assert sorted(p.name for p in sim_dir.rglob("*")) == before
    refused = sql_shell(sim_dir, "select 1;\n", "--write")
    assert refused.returncode == 1 and "give a QUERY" in refused.stderr


def test_checkpoints_then_drift_with_simulated_checkpoints(tmp_path):
    """Two "checkpoints" of the simulate backend (its model is a pass-rate file): the second one
    makes every prompt silent, which `drift` lists in every format."""
    data_dir = tmp_path / "data"
    assert runner.invoke(app, ["load", "arithmetic", "--limit", "6", "--data-dir", str(data_dir)]).exit_code == 0
    ids = Store(data_dir).read_table("problems").column("prompt_id").to_pylist()
    step_100, step_200 = tmp_path / "step-100.csv", tmp_path / "step-200.csv"
    step_100.write_text("prompt_id,pass_rate\n" + "".join(f"{p},0.5\n" for p in ids))
    step_200.write_text("prompt_id,pass_rate\n" + "".join(f"{p},{i % 2}\n" for i, p in enumerate(ids)))
    args = ["checkpoints", "--checkpoint", str(step_100), "--checkpoint", str(step_200), "--min-age", "0"]
    args += ["--backend", "simulate", "--limit", "6", "--n", "8", "--grade-workers", "1", "--no-report"]
    args += ["--no-prefect", "--format", "json", "--data-dir", str(data_dir)]
    out = runner.invoke(app, args)
    assert out.exit_code == 0, out.output
    shown = json.loads(out.stdout)
    assert [c["checkpoint"] for c in shown["checkpoints"]] == ["step-100.csv", "step-200.csv"]
    assert [h["share_silent"] for h in shown["history"]] == [0, 1]
    out = runner.invoke(app, args)  # nothing new on the next pass
    assert out.exit_code == 0 and json.loads(out.stdout)["checkpoints"] == []

    out = runner.invoke(app, ["drift", "--limit", "2", "--format", "json", "--data-dir", str(data_dir)])
    assert out.exit_code == 0, out.output
    drift = json.loads(out.stdout)
    assert len(drift["became_silent"]) == 2 and len(drift["largest_changes"]) == 2
    assert {r["checkpoint"] for r in drift["became_silent"]} == {"step-200.csv"}
    out = runner.invoke(app, ["drift", "--limit", "1", "--format", "csv", "--data-dir", str(data_dir)])
    assert out.exit_code == 0, out.output
    blocks = out.stdout.split("\n\n")
    assert [b.splitlines()[0] for b in blocks] == ["# checkpoints", "# became_silent", "# largest_changes"]
    assert len(blocks[1].splitlines()) == 3  # key, header, one row
    out = runner.invoke(app, ["drift", "--data-dir", str(data_dir)], env={"COLUMNS": "80"})
    assert out.exit_code == 0 and "step-200.csv" in _line_with(out.stdout, ids[0][:16])


def test_schedule_serves_the_profile_or_checkpoints_flow(monkeypatch, tmp_path):
    from pipeline.flows import schedule

    from pipeline.run import ProfileConfig

    served = []
    monkeypatch.setattr(schedule, "serve_flow", lambda *args, **kwargs: served.append((args, kwargs)))
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")
    data_dir = tmp_path / "data"
    base = ["schedule", "--backend", "simulate", "--n", "4", "--data-dir", str(data_dir)]
    out = runner.invoke(app, [*base, "--cron", "0 3 * * *", "--timezone", "Europe/Paris"])
    assert out.exit_code == 0, out.output
    (flow, name, params), kwargs = served.pop()
    assert (flow, name) == ("profile", "profile-arithmetic")
    assert kwargs == {"cron": "0 3 * * *", "interval": None, "timezone": "Europe/Paris"}
    assert Store(**params["store"]) == Store(data_dir.resolve())
    assert ProfileConfig.from_dict(params["config"]).sampling.n == 4

    # The schedule takes every profile option, --adaptive included; its parameters are plain JSON.
    out = runner.invoke(app, [*base, "--interval", "60", "--adaptive", "band", "--n-max", "32"])
    assert out.exit_code == 0, out.output
    (flow, name, params), _ = served.pop()
    config = ProfileConfig.from_dict(json.loads(json.dumps(params["config"])))
    assert config.adaptive.target.spec == "band:lo=0.1,hi=0.9,delta=0.05,cost=0.001" and config.adaptive.n_max == 32

    out = runner.invoke(app, [*base, "--interval", "90", "--checkpoints", str(tmp_path), "--name", "ck"])
    assert out.exit_code == 0, out.output
    (flow, name, params), kwargs = served.pop()
    assert (flow, name, kwargs["interval"]) == ("checkpoints", "ck", 90)
    assert params["config"]["folder"] == str(tmp_path)
    assert params["config"]["profile"]["engine"]["backend"] == "simulate"

    out = runner.invoke(app, [*base, "--cron", "every day"])
    assert out.exit_code == 1 and "error:" in out.output and "every day" in out.output
    assert not served


def test_the_group_size_is_spelled_G_everywhere_and_the_old_name_still_works(data_dir):
    """One option name for the trainer's G: ``--G`` in every command that takes one (``profile`` too);
    ``--group-size`` stays a hidden alias where it was an option."""
    from pipeline.cli import COMMANDS

    taking = set()
    for name, _, _ in COMMANDS:
        for param in _params(name).values():
            if "--group-size" in param.opts:
                assert param.hidden, f"{name}: --group-size is shown"
            elif "--G" in param.opts:
                taking.add(name)
    assert {"profile", "current", "replay", "export", "report", "allocate", "weights", "analyze"} <= taking
    old = runner.invoke(app, ["weights", "--G", "4", "--p", "0.5", "--format", "csv"])
    assert old.exit_code == 0
    got = runner.invoke(app, ["current", "--group-size", "4"])
    assert "no such option" not in got.output.lower()
