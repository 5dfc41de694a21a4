"""``profile``: sample, grade, store and analyze a dataset, with the run's progress line while it runs."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from pipeline.cli import profile_options as opt
from pipeline.cli.options import DataDir, open_store
from pipeline.cli.output import err_console, say
from pipeline.cli.run_summary import print_adaptive_summary, print_run_summary, print_verdict

if TYPE_CHECKING:
    from pipeline.run import ProfileConfig


@contextmanager
def progress_bars() -> Iterator[None]:
    """The run's progress line on standard error while the block runs (nothing when it is piped)."""
    from pipeline.run import progress

    with progress.display(err_console.file):
        yield


@opt.profile_options
def profile_cmd(profile: ProfileConfig, prefect: opt.Prefect = True, data_dir: DataDir = None) -> None:
    """Sample, grade, store and analyze a dataset (default: bundled arithmetic, bundled model).

    With --adaptive, sample in rounds and stop each prompt once its band (or pass rate to +-h) is decided.
    """
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
    print_run_summary(store, result.run_id, result.finished, result.verdict.G)
    print_adaptive_summary(result.finished)
    say(f"run {result.run_id} done; tables under {store.root}")
    if result.report:
        say(f"report: {result.report}")
    print_verdict(result.verdict)
