"""The ``difficulty`` command line: one typer app; the commands live in modules by area.

=================  ==========================================================================
``options``        every shared option, once, as an ``Annotated`` alias; the profile options
``output``         tables (rich or plain, never wrapped), CSV, JSON, Parquet; status lines
``errors``         ``PipelineError`` -> ``error: <message>`` and exit status 1, in one place
``pipeline_cmds``  datasets, load, profile, grade, runs, sql
``report_cmd``     report
``regrade_cmd``    regrade
``doctor_cmd``     doctor
``models_cmd``     models (the converted-model cache of vLLM on the CPU)
``analysis_cmds``  analyze, allocate
``export_cmd``     export (a run's dataset in its own format, with its measurements)
``calibrate_cmd``  calibrate (difficulty labels against pass rates)
``orchestration``  schedule, checkpoints, drift
``calculators``    weights, groupsize, tries
=================  ==========================================================================

Importing this package stays cheap (``difficulty --help``): Prefect, Plotly, Polars, SciPy and
the run and flow modules are imported inside the commands that use them.
"""

from __future__ import annotations

import logging
import os
from typing import Annotated

import typer

from pipeline.cli import (
    analysis_cmds,
    calculators,
    calibrate_cmd,
    curriculum_cmd,
    doctor_cmd,
    export_cmd,
    models_cmd,
    observe_cmds,
    orchestration,
    pipeline_cmds,
    regrade_cmd,
    report_cmd,
)
from pipeline.cli.errors import exit_on_error

__all__ = ["app"]

app = typer.Typer(
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


PIPELINE = "Pipeline"
ANALYSIS = "Analysis"
ORCHESTRATION = "Orchestration"
CALCULATORS = "Calculators"

# (name, function, help panel), in the order of `difficulty --help`.
COMMANDS = [
    ("datasets", pipeline_cmds.datasets_cmd, PIPELINE),
    ("load", pipeline_cmds.load_cmd, PIPELINE),
    ("profile", pipeline_cmds.profile_cmd, PIPELINE),
    ("grade", pipeline_cmds.grade_cmd, PIPELINE),
    ("runs", pipeline_cmds.runs_cmd, PIPELINE),
    ("sql", pipeline_cmds.sql_cmd, PIPELINE),
    ("report", report_cmd.report_cmd, PIPELINE),
    ("regrade", regrade_cmd.regrade_cmd, PIPELINE),
    ("doctor", doctor_cmd.doctor_cmd, PIPELINE),
    ("models", models_cmd.models_cmd, PIPELINE),
    ("export", export_cmd.export_cmd, PIPELINE),
    ("analyze", analysis_cmds.analyze_cmd, ANALYSIS),
    ("allocate", analysis_cmds.allocate_cmd, ANALYSIS),
    ("calibrate", calibrate_cmd.calibrate_cmd, ANALYSIS),
    ("replay", curriculum_cmd.replay_cmd, ANALYSIS),
    ("schedule", orchestration.schedule_cmd, ORCHESTRATION),
    ("checkpoints", orchestration.checkpoints_cmd, ORCHESTRATION),
    ("drift", orchestration.drift_cmd, ORCHESTRATION),
    ("track", observe_cmds.track_cmd, ORCHESTRATION),
    ("current", observe_cmds.current_cmd, ORCHESTRATION),
    ("weights", calculators.weights_cmd, CALCULATORS),
    ("groupsize", calculators.groupsize_cmd, CALCULATORS),
    ("tries", calculators.tries_cmd, CALCULATORS),
]

for _name, _command, _panel in COMMANDS:
    app.command(_name, rich_help_panel=_panel)(exit_on_error(_command))
