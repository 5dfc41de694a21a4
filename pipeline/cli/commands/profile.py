"""``profile``: sample, grade, store and analyze a dataset, with the run's progress line while it runs."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any

import typer

from pipeline import estimators as est
from pipeline.cli import profile_options as opt
from pipeline.cli.options import DataDir, open_store
from pipeline.cli.output import err_console, say
from pipeline.cli.run_summary import print_adaptive_summary, print_run_summary, print_tokens_summary, print_verdict

if TYPE_CHECKING:
    from pipeline.run import ProfileConfig


@contextmanager
def progress_bars() -> Iterator[None]:
    """The run's progress line on standard error while the block runs (plain lines when it is piped)."""
    from pipeline.run import progress

    with progress.display(err_console.file):
        yield


def _plural(count: int, word: str) -> str:
    return f"{count:,} {word}{'' if count == 1 else 's'}"


def load_line(load: Mapping[str, Any] | None) -> str | None:
    """What the load behind the run did (``run.Profiled.details``), e.g. ``read 1,209 rows: 2 duplicates
    collapsed, 1 skipped (empty_answer: 1); profiled 1,206 prompts``."""
    if load is None:
        return None
    changes = []
    if load["duplicates"]:
        changes.append(f"{_plural(load['duplicates'], 'duplicate')} collapsed")
    if load["skipped"]:
        reasons = ", ".join(f"{status}: {count:,}" for status, count in sorted(load["skipped"].items()))
        changes.append(f"{sum(load['skipped'].values()):,} skipped ({reasons})")
    if load["past_limit"]:
        changes.append(f"{load['past_limit']:,} past --limit")
    read = f"read {_plural(load['rows_read'], 'stored problem' if load['stored'] else 'row')}"
    return f"{read}{': ' + ', '.join(changes) if changes else ''}; profiled {_plural(load['prompts'], 'prompt')}"


def reuse_line(run_id: str, reuse: Mapping[str, Any] | None) -> str | None:
    """What an earlier start of the run had stored already, when anything (``run.Profiled.details``)."""
    if reuse is None or not reuse["shards_reused"]:
        return None
    shards, reused = reuse["shards"], reuse["shards_reused"]
    if reused < shards:
        earlier = f"{reused} of {_plural(shards, 'shard')} stored by an earlier start"
        return f"run {run_id} resumed: {earlier}, {shards - reused:,} sampled now"
    if reuse["status_before"] == "done":
        return (
            f"run {run_id} already done: nothing sampled, its {_plural(shards, 'stored shard')} reused "
            "(the analysis and verdict computed again from them)"
        )
    earlier = f"all {_plural(shards, 'shard')} stored by an earlier start"
    return f"run {run_id}: {earlier}; nothing sampled, the run finished from them"


@opt.profile_options
def profile_cmd(
    profile: ProfileConfig,
    prefect: opt.Prefect = True,
    estimator: Annotated[
        str, typer.Option("--estimator", help="The estimator you train with: the summary's gradient shares.")
    ] = "grpo",
    all_estimators: Annotated[
        bool, typer.Option("--all-estimators", help="Print every estimator's gradient shares (the report has them).")
    ] = False,
    data_dir: DataDir = None,
) -> None:
    """Sample, grade, store and analyze a dataset (default: bundled arithmetic, bundled model).

    With --adaptive, sample in rounds and stop each prompt once its band (or pass rate to +-h) is decided.
    """
    shown = None if all_estimators else est.get(estimator).spec  # an unknown name fails before any work
    store = open_store(data_dir)
    with progress_bars():
        if prefect:
            from pipeline.flows import api_server

            api_server.start()  # first: the server starts while this process imports Prefect
            from pipeline.flows import executors  # noqa: F401 - the run's modules, as --no-prefect imports them

            with api_server.gc_paused():  # Prefect's own import only
                from pipeline.flows.prefect_flows import profile_flow

            result = profile_flow(profile, store)
        else:
            from pipeline.flows.executors import profile_direct

            result = profile_direct(profile, store)
    # the first screen: what happened, where the tables and report are, the verdict; then the numbers
    for line in (load_line(result.details.get("load")), reuse_line(result.run_id, result.details.get("reuse"))):
        if line:
            say(line)
    print_adaptive_summary(result.finished)
    print_tokens_summary(result.finished)
    say(f"run {result.run_id} done; tables under {store.root}")
    if result.report:
        say(f"report: {result.report}")
    print_verdict(result.verdict)
    print_run_summary(store, result.run_id, result.finished, result.verdict.G, shown)
