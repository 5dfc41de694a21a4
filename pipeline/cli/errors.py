"""The one place where the command line turns an error into ``error: <message>`` and exit status 1.

Every command is wrapped in ``exit_on_error`` when it is registered (``pipeline/cli/__init__.py``):
it catches ``PipelineError``, the base of every error a user can act on, and nothing else; any
other exception is a bug and keeps its traceback. A command that fails, whatever the way, first
undoes what it asked to be undone on failure (``on_failure``): the data directory it made, still empty.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import typer

from pipeline.cli import output
from pipeline.errors import PipelineError

P = ParamSpec("P")
R = TypeVar("R")

# What to undo when the running command fails: a data directory it made (``options.open_store``).
_undo: list[Callable[[], None]] = []


def on_failure(undo: Callable[[], None]) -> None:
    """Run ``undo`` if the running command fails (an error, Ctrl-C, a nonzero exit), not if it succeeds."""
    _undo.append(undo)


def _undo_all() -> None:
    while _undo:
        _undo.pop()()


def print_error(message: str) -> None:
    """``error: <message>`` on standard error, never wrapped (paths and ids stay whole)."""
    from rich.markup import escape  # here: a command that does not fail never imports rich

    output.err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False)


def exit_on_error(command: Callable[P, R]) -> Callable[P, R]:
    """Run a command; a ``PipelineError`` prints ``error: <message>`` and exits with status 1."""

    @functools.wraps(command)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        _undo.clear()
        try:
            result = command(*args, **kwargs)
        except PipelineError as exc:
            print_error(str(exc))
            _undo_all()
            raise typer.Exit(1) from exc
        except (typer.Exit, SystemExit) as exc:
            if getattr(exc, "exit_code", getattr(exc, "code", 0)):
                _undo_all()
            raise
        except BaseException:
            _undo_all()
            raise
        _undo.clear()
        return result

    return run
