"""The ``difficulty`` command line: one typer app. Command ``x`` lives in module ``x`` (its function
``x_cmd``), as in pip; ``COMMANDS`` lists them in the order of ``difficulty --help``. A command module
never imports another: what several commands share is in a shared module, named for what it holds.

======================  ========================================================================
``options``             the cheap shared options, once each, as ``Annotated`` aliases (data dir, format, runs)
``analysis_options``    the estimator option (its default is the estimator registry's)
``profile_options``     options whose defaults live in the run's modules: grading, the profile set
``schedule_options``    the checkpoint options and the schedule check (schedule, checkpoints, track)
``calculator_options``  the pass-rate list and its range check (weights, groupsize, tries)
``counts``              a run's or a dataset's counts (analyze, allocate)
``run_summary``         what a command that makes a run prints after it (profile, grade, regrade)
``output``              tables (rich or plain, never wrapped), CSV, JSON, Parquet; status lines
``errors``              ``PipelineError`` -> ``error: <message>`` and exit status 1, in one place
======================  ========================================================================

A command's module is imported only when that command runs (``LazyGroup``, the one lazy
mechanism of the command line): ``difficulty sql`` never imports the samplers, Prefect or SciPy,
and ``difficulty --help`` imports no command module at all, reading each command's summary from
its source. ``difficulty sql QUERY`` with no option calls the command's function directly, with its
own defaults, sparing typer's option parsing (which imports pydantic); any option goes through
typer. Within a command module imports stay at the top; Prefect, Plotly, SciPy and the run and
flow modules are still imported inside the commands that use them.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import logging
import os
from difflib import get_close_matches
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup
from typer.main import get_command_from_info
from typer.models import CommandInfo

__all__ = ["COMMANDS", "LazyGroup", "app"]

PIPELINE = "Pipeline"
ANALYSIS = "Analysis"
ORCHESTRATION = "Orchestration"
CALCULATORS = "Calculators"

# (name, "module:function" in pipeline.cli, help panel), in the order of `difficulty --help`.
COMMANDS = [
    ("datasets", "datasets:datasets_cmd", PIPELINE),
    ("load", "load:load_cmd", PIPELINE),
    ("profile", "profile:profile_cmd", PIPELINE),
    ("grade", "grade:grade_cmd", PIPELINE),
    ("runs", "runs:runs_cmd", PIPELINE),
    ("sql", "sql:sql_cmd", PIPELINE),
    ("report", "report:report_cmd", PIPELINE),
    ("regrade", "regrade:regrade_cmd", PIPELINE),
    ("doctor", "doctor:doctor_cmd", PIPELINE),
    ("models", "models:models_cmd", PIPELINE),
    ("export", "export:export_cmd", PIPELINE),
    ("analyze", "analyze:analyze_cmd", ANALYSIS),
    ("allocate", "allocate:allocate_cmd", ANALYSIS),
    ("calibrate", "calibrate:calibrate_cmd", ANALYSIS),
    ("replay", "replay:replay_cmd", ANALYSIS),
    ("schedule", "schedule:schedule_cmd", ORCHESTRATION),
    ("checkpoints", "checkpoints:checkpoints_cmd", ORCHESTRATION),
    ("drift", "drift:drift_cmd", ORCHESTRATION),
    ("track", "track:track_cmd", ORCHESTRATION),
    ("current", "current:current_cmd", ORCHESTRATION),
    ("audit", "audit:audit_cmd", ORCHESTRATION),
    ("weights", "weights:weights_cmd", CALCULATORS),
    ("groupsize", "groupsize:groupsize_cmd", CALCULATORS),
    ("tries", "tries:tries_cmd", CALCULATORS),
]
# Commands run past typer's parsing when given their one argument alone (``LazyGroup.invoke``).
QUICK = frozenset({"sql"})
_BY_NAME = {name: (target.split(":"), panel) for name, target, panel in COMMANDS}


def command_function(name: str) -> Any:
    """The function of command ``name`` (its module imported now)."""
    (module, function), _ = _BY_NAME[name]
    return getattr(importlib.import_module(f"pipeline.cli.commands.{module}"), function)


def command_docstring(name: str) -> str:
    """The docstring of command ``name``'s function, read from its source without importing the
    module (the module's imports are what a command's start-up pays for)."""
    (module, function), _ = _BY_NAME[name]
    spec = importlib.util.find_spec(f"pipeline.cli.commands.{module}")
    source = spec.loader.get_source(spec.name) if spec is not None and spec.loader is not None else None
    for node in ast.parse(source or "").body:
        if isinstance(node, ast.FunctionDef) and node.name == function:
            return ast.get_docstring(node) or ""
    raise LookupError(f"pipeline.cli.{module} has no function {function!r} (command {name!r} in COMMANDS)")


class LazyGroup(TyperGroup):
    """The app's commands, each built from ``COMMANDS`` when first asked for.

    Running a command builds only its own click command, importing its module. Listing them
    (``difficulty --help``) uses stand-ins that carry the name, the panel and the docstring read
    from the source, so the listing imports no command module.
    """

    _listing = False

    def list_commands(self, ctx: Any) -> list[str]:
        return [name for name, _, _ in COMMANDS]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name in self.commands or cmd_name not in _BY_NAME:
            return self.commands.get(cmd_name)
        panel = _BY_NAME[cmd_name][1]
        if self._listing:
            return TyperCommand(name=cmd_name, help=command_docstring(cmd_name), rich_help_panel=panel)
        # Imported here, not at the top: the listing does not need the error wrapper.
        from pipeline.cli.errors import exit_on_error

        info = CommandInfo(name=cmd_name, callback=exit_on_error(command_function(cmd_name)), rich_help_panel=panel)
        command = get_command_from_info(info, pretty_exceptions_short=True, rich_markup_mode=self.rich_markup_mode)
        self.commands[cmd_name] = command
        return command

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        try:
            return self._click_resolve_command(ctx, args)
        except typer.TyperException as exc:  # click's "No such command": suggest from every name, built or not
            matches = get_close_matches(args[0], self.list_commands(ctx)) if args else []
            if matches and isinstance(getattr(exc, "message", None), str):
                exc.message = f"{exc.message.rstrip('.')}. Did you mean {', '.join(map(repr, matches))}?"
            raise

    def invoke(self, ctx: Any) -> Any:
        """Run a command; ``difficulty sql QUERY`` (the query alone, no option) calls the command's
        function with its own defaults, past typer's parsing: building a command's options imports
        pydantic (0.2 s, as much as DuckDB's own start). Any option, ``--help`` included, takes typer's
        path, so the command's signature stays the one definition of its options."""
        args = [*ctx._protected_args, *ctx.args]
        if len(args) != 2 or args[0] not in QUICK or args[1].startswith("-"):
            return super().invoke(ctx)
        ctx._protected_args, ctx.args = [], []
        with ctx:
            ctx.invoked_subcommand = args[0]
            super(TyperGroup, self).invoke(ctx)  # the app's callback (logging), as on typer's path
            from pipeline.cli.errors import exit_on_error

            return exit_on_error(command_function(args[0]))(args[1])

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)
        if option is not None:  # unset, typer's --help is None, whose coercion imports pydantic; False is not coerced
            option.default = False
        return option

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


app = typer.Typer(
    cls=LazyGroup,
    help="Per-prompt pass rates, estimator weights, zero-signal rates and rollout allocation.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def main(verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log progress details.")] = False) -> None:
    level = logging.INFO if verbose else logging.WARNING
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    # Prefect's ephemeral server is a subprocess: settings go through the environment it inherits.
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "INFO" if verbose else "WARNING")
    os.environ.setdefault("PREFECT_SERVER_LOGGING_LEVEL", "WARNING")
