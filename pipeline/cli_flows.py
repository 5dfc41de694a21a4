"""CLI commands of the orchestration layer: ``schedule``, ``checkpoints`` and ``drift``.

``register(app)`` adds them to the ``difficulty`` app. ``schedule`` and ``checkpoints`` take the
same profile options as ``difficulty profile`` (declared once here, in ``PROFILE_OPTIONS``).
"""

from __future__ import annotations

import inspect
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from pipeline import store
from pipeline.cli_common import console, data_dir_or_fail, err_console, fail, print_run_summary, print_table

log = logging.getLogger(__name__)

_KW = inspect.Parameter.KEYWORD_ONLY


def _opt(
    name: str, annotation: Any, default: Any, *decls: str, help: str | None = None, envvar: str | None = None
) -> inspect.Parameter:
    option = typer.Option(default, *decls, help=help, envvar=envvar)
    return inspect.Parameter(name, _KW, default=option, annotation=annotation)


# The profile options, as in `difficulty profile` (minus --model, given per command, and --prefect).
PROFILE_OPTIONS = [
    _opt("dataset", str, "arithmetic", "--dataset", help="Adapter name (default: the bundled arithmetic set)."),
    _opt("data_file", Path | None, None, "--data-file", help="Local file or hub-layout folder."),
    _opt("split", str | None, None, "--split"),
    _opt("backend", str, "llamacpp", "--backend", help="llamacpp, vllm or openai."),
    _opt("n", int, 8, "--n", help="Samples per problem."),
    _opt("temperature", float | None, None, "--temperature", help="Default 0.7 on the bundled set, 1.0 otherwise."),
    _opt("top_p", float, 1.0, "--top-p"),
    _opt("max_tokens", int | None, None, "--max-tokens", help="Default 24 on the bundled set, 1024 otherwise."),
    _opt("limit", int | None, None, "--limit", help="Number of problems (bundled default: 45; others: all)."),
    _opt("seed", int, 0, "--seed"),
    _opt("shard_size", int, 256, "--shard-size", help="Prompts per shard (unit of retry and resume)."),
    _opt("template_file", Path | None, None, "--template-file", help="Prompt template with {problem}."),
    _opt("threads", int | None, None, "--threads", help="llama.cpp threads."),
    _opt("base_url", str | None, None, "--base-url", help="OpenAI-compatible server URL."),
    _opt("tensor_parallel", int | None, None, "--tensor-parallel-size", help="vLLM tensor parallelism."),
    _opt("grade_workers", int, 2, "--grade-workers"),
    _opt("executor", str, "local", "--executor", help="local, or ray: sampling shards on Ray actors."),
    _opt("ray_address", str | None, None, "--address", help="Ray cluster address (default: a local one)."),
    _opt("replicas", int, 1, "--replicas", help="Ray actors (one engine each; one GPU each for vLLM)."),
    _opt("report", bool, True, "--report/--no-report", help="Write the HTML report of each run."),
    _opt(
        "data_dir",
        str | None,
        None,
        "--data-dir",
        envvar=store.DATA_DIR_ENV,
        help="Data directory (default ./difficulty-data).",
    ),
]
_PROFILE_NAMES = {p.name for p in PROFILE_OPTIONS}


def with_profile_options(func: Callable) -> Callable:
    """Append the profile options to a command's signature; they arrive in ``**profile``."""
    sig = inspect.signature(func)
    own = [p for p in sig.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    func.__signature__ = sig.replace(parameters=own + PROFILE_OPTIONS)
    return func


def profile_config(model: str | None = None, **opts: Any):
    """A ``ProfileConfig`` from the profile options (``ValueError`` names a bad value)."""
    from pipeline.flows.profile import ProfileConfig

    backend_options: dict[str, Any] = {}
    if opts.get("threads") is not None:
        backend_options["n_threads"] = opts["threads"]
    if opts.get("base_url") is not None:
        backend_options["base_url"] = opts["base_url"]
    if opts.get("tensor_parallel") is not None:
        backend_options["tensor_parallel_size"] = opts["tensor_parallel"]
    return ProfileConfig(
        dataset=opts["dataset"],
        data_file=str(opts["data_file"]) if opts.get("data_file") else None,
        split=opts.get("split"),
        limit=opts.get("limit"),
        backend=opts["backend"],
        model=model,
        n=opts["n"],
        temperature=opts["temperature"],
        top_p=opts["top_p"],
        max_tokens=opts["max_tokens"],
        seed=opts["seed"],
        template_file=str(opts["template_file"]) if opts.get("template_file") else None,
        shard_size=opts["shard_size"],
        grade_workers=opts["grade_workers"],
        backend_options=backend_options,
        executor=opts["executor"],
        ray_address=opts.get("ray_address"),
        replicas=opts["replicas"],
        report=opts.get("report", True),
    )


def _checkpoint_config(folder: Path | None, checkpoint: list[str], min_age: float, opts: dict):
    from pipeline.flows.checkpoints import CheckpointConfig

    return CheckpointConfig(
        folder=str(folder) if folder else None,
        paths=tuple(checkpoint or ()),
        min_age_s=min_age,
        profile=profile_config(None, **opts),
    )


_CKPT_DIR_OPT = typer.Option(None, "--checkpoints", help="Profile each new checkpoint of this folder on every run.")
_CKPT_OPT = typer.Option(None, "--checkpoint", help="A checkpoint to profile (repeatable).")
_FOLDER_ARG = typer.Argument(None, help="Folder of checkpoints (GGUF files, or model folders for vLLM).")


@with_profile_options
def schedule_cmd(
    cron: str | None = typer.Option(None, "--cron", help='Cron schedule, e.g. "0 3 * * *" (03:00 daily).'),
    interval: float | None = typer.Option(None, "--interval", help="Run every SECONDS instead of --cron."),
    timezone_: str | None = typer.Option(None, "--timezone", help="Time zone of --cron (default UTC)."),
    name: str | None = typer.Option(None, "--name", help="Deployment name (default: from the dataset)."),
    model: str | None = typer.Option(None, "--model", help="GGUF path, vLLM model or served model id."),
    checkpoints: Path | None = _CKPT_DIR_OPT,
    checkpoint: list[str] | None = _CKPT_OPT,
    min_age: float = typer.Option(60.0, "--min-age", help="Skip checkpoints modified less than SECONDS ago."),
    **profile: Any,
) -> None:
    """Serve the profile flow on a schedule (needs a Prefect server: see the README).

    With --checkpoints DIR (or --checkpoint PATH), each scheduled run profiles the checkpoints
    not yet profiled and appends them to the history table instead.
    """
    if (cron is None) == (interval is None):
        fail("give exactly one of --cron EXPR or --interval SECONDS")
    if interval is not None and interval <= 0:
        fail(f"--interval {interval} must be > 0")
    if not os.environ.get("PREFECT_API_URL"):
        fail(
            "schedules need a running Prefect server: start one with `prefect server start` and "
            "export PREFECT_API_URL=http://127.0.0.1:4200/api"
        )
    try:
        data_dir = store.resolve_data_dir(profile.pop("data_dir"))
        if checkpoints is not None or checkpoint:
            cfg = _checkpoint_config(checkpoints, checkpoint or [], min_age, profile)
            params = {"config": cfg.to_dict(), "data_dir": str(data_dir)}
            flow_name = "checkpoints"
        else:
            from dataclasses import asdict

            cfg = profile_config(model, **profile)
            params = {"config": asdict(cfg), "data_dir": str(data_dir)}
            flow_name = "profile"
    except (ValueError, TypeError, store.StoreError) as exc:
        fail(str(exc))
        return
    from pipeline.flows import schedule

    deployment = name or schedule.default_name(flow_name, profile["dataset"])
    typer.echo(
        f"serving deployment {deployment!r} ({'cron ' + cron if cron else f'every {interval:g} s'}); "
        "Ctrl-C stops it and pauses the schedule"
    )
    schedule.serve_flow(flow_name, deployment, params, cron=cron, interval=interval, timezone=timezone_)


@with_profile_options
def profile_cmd(
    model: str | None = typer.Option(None, "--model", help="GGUF path, vLLM model or served model id."),
    prefect: bool = typer.Option(True, "--prefect/--no-prefect", help="Run as a Prefect flow (default) or in-process."),
    **profile: Any,
) -> None:
    """Sample, grade, store and analyze a dataset (default: bundled arithmetic, bundled model)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from pipeline import datasets
    from pipeline.flows import profile as flow

    path = data_dir_or_fail(profile.pop("data_dir"))
    try:
        config = profile_config(model, **profile)
    except (ValueError, TypeError) as exc:
        fail(str(exc))
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=err_console) as bars:
        tasks: dict[str, int] = {}

        def sink(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bars.add_task("sampling" if stage == "sample" else "grading", total=total)
            bars.update(tasks[stage], completed=done, total=total)

        flow.set_progress_sink(sink)
        try:
            run = (flow.profile_flow if prefect else flow.profile_direct)(config, path)
        except (datasets.DatasetError, FileNotFoundError, ValueError, ImportError, RuntimeError) as exc:
            fail(f"{type(exc).__name__}: {exc}")
        finally:
            flow.set_progress_sink(None)
            flow.close_samplers()
    print_run_summary(path, run["run_id"])
    console.print(f"run [bold]{run['run_id']}[/] done; tables under {path}")
    if run.get("report"):
        console.print(f"report: {run['report']}")


@with_profile_options
def checkpoints_cmd(
    folder: Path | None = _FOLDER_ARG,
    checkpoint: list[str] | None = _CKPT_OPT,
    min_age: float = typer.Option(60.0, "--min-age", help="Skip checkpoints modified less than SECONDS ago."),
    prefect: bool = typer.Option(True, "--prefect/--no-prefect", help="Run as a Prefect flow (default) or in-process."),
    **profile: Any,
) -> None:
    """Profile every checkpoint not yet profiled and append it to the history table (one pass)."""
    import pyarrow as pa

    from pipeline.flows import checkpoints as ckpt
    from pipeline.flows.profile import close_samplers

    try:
        data_dir = store.resolve_data_dir(profile.pop("data_dir"))
        cfg = _checkpoint_config(folder, checkpoint or [], min_age, profile)
        run = ckpt.profile_checkpoints_flow if prefect else ckpt.profile_checkpoints_direct
        done = run(cfg, data_dir)
    except (ValueError, TypeError, FileNotFoundError, ImportError, RuntimeError, store.StoreError) as exc:
        fail(f"{type(exc).__name__}: {exc}")
        return
    finally:
        close_samplers()
    if not done:
        typer.echo("no new checkpoints")
        return
    print_table(pa.Table.from_pylist(done), title="checkpoints profiled")
    print_table(store.query(data_dir, store.load_sql("history_checkpoints")), title="history by checkpoint")


def drift_cmd(
    data_dir: str | None = typer.Option(
        None, "--data-dir", envvar=store.DATA_DIR_ENV, help="Data directory (default ./difficulty-data)."
    ),
    limit: int = typer.Option(20, "--limit", help="Rows of each list."),
) -> None:
    """Checkpoint drift: per checkpoint summary, prompts that became silent, largest changes."""
    try:
        path = store.resolve_data_dir(data_dir)
        print_table(store.query(path, store.load_sql("history_checkpoints")), title="history by checkpoint")
        silent = store.query(path, f"SELECT * FROM ({store.load_sql('history_silent')}) LIMIT $limit", {"limit": limit})
        print_table(silent, title="prompts that became silent")
        moved = store.query(
            path,
            "SELECT dataset, prompt_id, prev_checkpoint, checkpoint, prev_pass_rate, pass_rate, "
            "pass_rate_change FROM history_drift WHERE pass_rate_change IS NOT NULL "
            "ORDER BY abs(pass_rate_change) DESC, prompt_id LIMIT $limit",
            {"limit": limit},
        )
        print_table(moved, title="largest pass-rate changes")
    except store.StoreError as exc:
        fail(str(exc))


def register(app: typer.Typer) -> None:
    """Add ``schedule``, ``checkpoints`` and ``drift`` to the ``difficulty`` app."""
    app.command("profile")(profile_cmd)
    app.command("schedule")(schedule_cmd)
    app.command("checkpoints")(checkpoints_cmd)
    app.command("drift")(drift_cmd)
