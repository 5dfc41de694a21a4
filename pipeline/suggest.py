"""Every command the tool prints for the user to run, built in one place: the verdict's lines, the
``next:`` lines of ``current --save``, the report's first screen.

A printed command must run as printed (``tests/test_printed_commands.py`` runs each one, for every
kind of source), so the rules live here: a value is quoted as a shell needs it; a dataset is named
by the name the data directory stores it under (``profile --dataset NAME`` profiles a stored local
file again, even where the file has moved); a run made of several models' observations has no
model to profile again (no command joins a list into one argument); the format of an export is
left to ``export``'s own default (verl for a verl dataset), never guessed here.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

from pipeline.sample.gguf import BUNDLED_NAME

if TYPE_CHECKING:
    from pipeline.store import RunRecord

__all__ = ["allocate", "command", "export", "profile_again", "report", "sql"]

# Runs whose samples came from no sampler: a saved current difficulty (``observe.snapshot``) and
# imported rollouts. Profiling them "again" has no backend to name.
_NOT_SAMPLED = ("observations", "import")


def command(name: str, *args: Any, **options: Any) -> str:
    """``difficulty NAME ARGS --option value ...``: options in the order given, ``True`` a bare flag,
    ``None`` or ``False`` left out, each value quoted where a shell would split it."""
    parts = ["difficulty", name, *(shlex.quote(str(a)) for a in args)]
    for key, value in options.items():
        if value is None or value is False:
            continue
        flag = "--" + key.replace("_", "-") if key != "G" else "--G"
        parts.append(flag if value is True else f"{flag} {shlex.quote(str(value))}")
    return " ".join(parts)


def report(run_id: str, G: int | None = None) -> str:
    """Open (write) a run's report, read at ``G`` when given."""
    return command("report", run=run_id, G=G)


def export(run_id: str, *, keep: str | None = None, G: int | None = None, output: str = "train.parquet") -> str:
    """Write a run's dataset back (export's own default format: verl for a verl dataset)."""
    return command("export", run=run_id, keep=keep, G=G, output=output)


def allocate(run_id: str, *, budget: int | None = None, G: int | None = None) -> str:
    return command("allocate", run=run_id, budget=budget, G=G)


def sql(query: str) -> str:
    return command("sql", query)


def profile_again(run: RunRecord | None, **options: Any) -> str | None:
    """Profile the run's dataset again with its model, backend and sampling (its prompts, n, token
    limit, adaptive target), changed by ``options`` (``n=32``), or None where the run has no model to
    sample with (several models' observations, imported rollouts)."""
    if run is None:
        return command("profile", **options)
    if run.backend in _NOT_SAMPLED or (run.model and ", " in run.model):
        return None
    named: dict[str, Any] = {"dataset": run.dataset}
    params = run.params or {}
    kept = {"limit": params.get("limit"), "max_tokens": params.get("max_tokens")}
    if run.adaptive is not None:
        kept |= {"adaptive": run.adaptive.target.spec, "n_max": run.adaptive.n_max}
    else:
        kept["n"] = params.get("n")
    if run.backend == "simulate":  # its model is a label, not something to load
        named["backend"] = "simulate"
    else:
        if run.backend and run.backend != "xllamacpp":
            named["backend"] = run.backend
        if run.model and run.model != BUNDLED_NAME:  # the bundled model is the default --model
            named["model"] = run.model
    return command("profile", **named, **(kept | options))
