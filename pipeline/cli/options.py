"""Every option shared by several commands, declared once as an ``Annotated`` type alias.

A command names an alias and gives the Python default, e.g. ``data_dir: DataDir = None``. The
profile options (shared by ``profile``, ``schedule`` and ``checkpoints``) also have their defaults
here, in ``ProfileOptions``, and one method turns them into a ``ProfileConfig``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from pipeline.adaptive import PRIORS as ADAPTIVE_PRIORS
from pipeline.adaptive import AdaptiveConfig
from pipeline.cli.errors import config_errors
from pipeline.errors import ConfigError
from pipeline.estimators import DEFAULT_ESTIMATORS as DEFAULT_ESTIMATOR_SPECS
from pipeline.grade import GradeConfig
from pipeline.sample.openai import DEFAULT_BASE_URL, OpenAIOptions
from pipeline.store import DATA_DIR_ENV, Store

if TYPE_CHECKING:
    from pipeline.run import ProfileConfig

# --- data directory and output ----------------------------------------------------------------

DataDir = Annotated[
    str | None,
    typer.Option(
        "--data-dir",
        envvar=DATA_DIR_ENV,
        help="Data directory (default ./difficulty-data).",
        show_default=False,
    ),
]
Format = Annotated[str, typer.Option("--format", help="table, csv or json.")]

# --- analysis options (analyze, allocate, weights) ------------------------------------------

RunId = Annotated[str | None, typer.Option("--run", help="Run id whose sampled counts to use.")]
DatasetName = Annotated[
    str | None, typer.Option("--dataset", help="Dataset whose stored prior counts (prior_n, prior_c) to use.")
]
Estimators = Annotated[str, typer.Option("--estimators", help="Estimator specs, comma-separated.")]
DEFAULT_ESTIMATORS = ",".join(DEFAULT_ESTIMATOR_SPECS)


def open_store(data_dir: str | None) -> Store:
    """The ``Store`` of ``--data-dir`` (created and checked writable; ``StoreError`` says why not)."""
    return Store.open(data_dir)


def floats(text: str, flag: str) -> list[float]:
    """A comma-separated list of numbers (``ConfigError`` names the flag)."""
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"{flag} must be a comma-separated list of numbers, got {text!r}") from None


def ints(text: str, flag: str) -> list[int]:
    """A comma-separated list of whole numbers (``ConfigError`` names the flag)."""
    values = floats(text, flag)
    if any(v != int(v) for v in values):
        raise ConfigError(f"{flag} must be whole numbers, got {text!r}")
    return [int(v) for v in values]


def split_estimators(text: str) -> list[str]:
    """Split a comma-separated estimator list whose specs may hold commas themselves.

    ``"grpo,dapo:mode=resample,T=4,softmax_grpo:tau=0.3"`` gives three specs: a token with ``=``
    and no ``:`` is one more parameter of the spec before it.
    """
    specs: list[str] = []
    for token in (t.strip() for t in text.split(",")):
        if not token:
            continue
        if "=" in token and ":" not in token and specs:
            specs[-1] += "," + token
        else:
            specs.append(token)
    return specs


# --- the profile options (profile, schedule, checkpoints) -------------------------------------

_DATA = "Dataset"
_SAMPLING = "Sampling"
_ADAPTIVE = "Adaptive sampling"
_BACKEND = "Backend"
_EXECUTION = "Execution"
_ADAPTIVE_DEFAULTS = AdaptiveConfig()  # the adaptive defaults live there

Model = Annotated[str | None, typer.Option("--model", help="GGUF path, vLLM model or served model id.")]
Prefect = Annotated[bool, typer.Option("--prefect/--no-prefect", help="Run as a Prefect flow (default) or in-process.")]

Dataset = Annotated[
    str, typer.Option("--dataset", help="Adapter name (default: the bundled arithmetic set).", rich_help_panel=_DATA)
]
DataFile = Annotated[
    Path | None, typer.Option("--data-file", help="Local file or hub-layout folder.", rich_help_panel=_DATA)
]
Split = Annotated[str | None, typer.Option("--split", help="Split to read.", rich_help_panel=_DATA)]
Limit = Annotated[
    int | None,
    typer.Option("--limit", help="Number of problems (bundled default: 45; others: all).", rich_help_panel=_DATA),
]
TemplateFile = Annotated[
    Path | None,
    typer.Option("--template-file", help="Prompt template with {problem}.", rich_help_panel=_DATA),
]
Backend = Annotated[
    str, typer.Option("--backend", help="llamacpp, vllm, openai or simulate.", rich_help_panel=_BACKEND)
]
Threads = Annotated[
    int | None, typer.Option("--threads", help="llama.cpp threads (llamacpp only).", rich_help_panel=_BACKEND)
]
BaseUrl = Annotated[
    str | None,
    typer.Option("--base-url", help="OpenAI-compatible server URL (openai only).", rich_help_panel=_BACKEND),
]
TensorParallel = Annotated[
    int | None,
    typer.Option("--tensor-parallel-size", help="vLLM tensor parallelism (vllm only).", rich_help_panel=_BACKEND),
]
# The backend's own defaults (given base_url and api_key, so no environment variable is read here).
_OPENAI_DEFAULTS = OpenAIOptions(base_url=DEFAULT_BASE_URL, api_key="")
RequestTimeout = Annotated[
    float | None,
    typer.Option(
        "--request-timeout",
        metavar="SECONDS",
        help=(
            f"Seconds one request attempt may take in all (openai only; default {_OPENAI_DEFAULTS.timeout:g}). "
            "A server that never answers fails after (max retries + 1) x this plus backoff: "
            f"{_OPENAI_DEFAULTS.worst_case_s():.1f} s with the defaults."
        ),
        show_default=False,
        rich_help_panel=_BACKEND,
    ),
]
MaxRetries = Annotated[
    int | None,
    typer.Option(
        "--max-retries",
        metavar="N",
        help=(
            f"Retries of a failed request (timeout, refused connection, 429, 5xx) after the first try "
            f"(openai only; 0 to 100, default {_OPENAI_DEFAULTS.max_retries})."
        ),
        show_default=False,
        rich_help_panel=_BACKEND,
    ),
]
PassRates = Annotated[
    Path | None,
    typer.Option(
        "--pass-rates",
        help="File of per-prompt true pass rates (simulate only).",
        rich_help_panel=_BACKEND,
    ),
]
N = Annotated[int, typer.Option("--n", help="Samples per problem.", rich_help_panel=_SAMPLING)]
Temperature = Annotated[
    float | None,
    typer.Option("--temperature", help="Default 0.7 on the bundled set, 1.0 otherwise.", rich_help_panel=_SAMPLING),
]
TopP = Annotated[float, typer.Option("--top-p", rich_help_panel=_SAMPLING)]
MaxTokens = Annotated[
    int | None,
    typer.Option("--max-tokens", help="Default 24 on the bundled set, 1024 otherwise.", rich_help_panel=_SAMPLING),
]
Seed = Annotated[int, typer.Option("--seed", rich_help_panel=_SAMPLING)]
Adaptive = Annotated[
    str | None,
    typer.Option(
        "--adaptive",
        metavar="TARGET",
        help=(
            "Sample in rounds and stop each prompt once decided: band[:lo=0.1,hi=0.9,delta=0.05] (which side "
            "of lo < p < hi, at posterior probability >= 1 - delta) or width[:h=0.1,delta=0.05] (central "
            "1 - delta interval at most 2h wide). --n is then not used."
        ),
        show_default=False,
        rich_help_panel=_ADAPTIVE,
    ),
]
NMin = Annotated[int, typer.Option("--n-min", help="Adaptive: round-0 samples per prompt.", rich_help_panel=_ADAPTIVE)]
NMax = Annotated[
    int,
    typer.Option(
        "--n-max", help="Adaptive: most samples per prompt; there it stops undecided.", rich_help_panel=_ADAPTIVE
    ),
]
RoundRuleOption = Annotated[
    str,
    typer.Option(
        "--round-rule",
        help=(
            "Adaptive: step[:k=4] (every open prompt gets k more per round) or greedy[:k=1,budget=8] "
            "(a round spends budget x open prompts rollouts, in batches of k, where they most raise the "
            "expected number of prompts decided)."
        ),
        rich_help_panel=_ADAPTIVE,
    ),
]
AdaptivePrior = Annotated[
    str,
    typer.Option(
        "--adaptive-prior",
        help=f"Adaptive: {' or '.join(ADAPTIVE_PRIORS)} (Beta prior fitted to round 0, or Jeffreys' (1/2, 1/2)).",
        rich_help_panel=_ADAPTIVE,
    ),
]
ShardSize = Annotated[
    int,
    typer.Option("--shard-size", help="Prompts per shard (unit of retry and resume).", rich_help_panel=_EXECUTION),
]
GradeWorkers = Annotated[
    int, typer.Option("--grade-workers", help="math-verify worker processes.", rich_help_panel=_EXECUTION)
]
GradeTimeout = Annotated[
    float,
    typer.Option(
        "--grade-timeout",
        metavar="SECONDS",
        help="Seconds math-verify may spend on one answer before it is graded 'timeout' (> 0, at most 3600).",
        rich_help_panel=_EXECUTION,
    ),
]
Executor = Annotated[
    str,
    typer.Option("--executor", help="local, or ray: sampling shards on Ray actors.", rich_help_panel=_EXECUTION),
]
RayAddress = Annotated[
    str | None,
    typer.Option("--address", help="Ray cluster address (default: a local one).", rich_help_panel=_EXECUTION),
]
Replicas = Annotated[
    int,
    typer.Option("--replicas", help="Ray actors (one engine each; one GPU each for vLLM).", rich_help_panel=_EXECUTION),
]
Report = Annotated[
    bool, typer.Option("--report/--no-report", help="Write the HTML report of each run.", rich_help_panel=_EXECUTION)
]


def check_grade_workers(workers: int, timeout_s: float = GradeConfig.timeout_s) -> None:
    """``ConfigError`` when ``--grade-workers`` or ``--grade-timeout`` is out of range (checked
    before any work starts)."""
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or not 0 < timeout_s <= 3600:
        raise ConfigError(f"--grade-timeout {timeout_s!r} is out of range: allowed > 0 and <= 3600 seconds")
    with config_errors():  # GradeConfig checks its values with a plain ValueError
        GradeConfig(workers=workers, timeout_s=timeout_s)


# Backend options: field -> (flag, the backend it belongs to, its key in ProfileConfig.backend_options).
_BACKEND_OPTIONS = {
    "threads": ("--threads", "llamacpp", "n_threads"),
    "base_url": ("--base-url", "openai", "base_url"),
    "request_timeout": ("--request-timeout", "openai", "timeout"),
    "max_retries": ("--max-retries", "openai", "max_retries"),
    "tensor_parallel": ("--tensor-parallel-size", "vllm", "tensor_parallel_size"),
    "pass_rates": ("--pass-rates", "simulate", "pass_rates"),
}


@dataclass(frozen=True)
class ProfileOptions:
    """The profile options of one command line, with their defaults (``PROFILE``).

    Each field is a parameter, of the same name, of ``profile``, ``schedule`` and ``checkpoints``
    (typed with the alias above); ``from_params(locals())`` collects them in a command.
    """

    dataset: str = "arithmetic"
    data_file: Path | None = None
    split: str | None = None
    limit: int | None = None
    template_file: Path | None = None
    backend: str = "llamacpp"
    threads: int | None = None
    base_url: str | None = None
    request_timeout: float | None = None  # None: the backend's default (OpenAIOptions)
    max_retries: int | None = None
    tensor_parallel: int | None = None
    pass_rates: Path | None = None
    n: int = 8
    temperature: float | None = None
    top_p: float = 1.0
    max_tokens: int | None = None
    seed: int = 0
    shard_size: int = 256
    grade_workers: int = 2
    grade_timeout: float = GradeConfig.timeout_s
    executor: str = "local"
    ray_address: str | None = None
    replicas: int = 1
    report: bool = True

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> ProfileOptions:
        """The profile options among a command's parameters: pass it ``locals()`` on the command's
        first line, before a local import could shadow one (``report``)."""
        return cls(**{f.name: params[f.name] for f in fields(cls)})

    def backend_options(self) -> dict[str, Any]:
        """``ProfileConfig.backend_options``; ``ConfigError`` for an option of another backend."""
        out: dict[str, Any] = {}
        for name, (flag, backend, key) in _BACKEND_OPTIONS.items():
            value = getattr(self, name)
            if value is None:
                continue
            if self.backend.lower() != backend:
                raise ConfigError(f"{flag} applies to --backend {backend} only, not --backend {self.backend}")
            out[key] = str(value) if isinstance(value, Path) else value
        if self.backend.lower() == "openai" and out:
            # Checked now, not when the first shard builds the sampler: a bad --request-timeout
            # fails before any work starts. Constructing the options reads no network.
            flags = {key: flag for flag, _, key in _BACKEND_OPTIONS.values()}
            try:
                OpenAIOptions(**out)
            except ConfigError as exc:
                given = ", ".join(f"{flags[k]} {v!r}" for k, v in out.items())
                raise ConfigError(f"{exc} (from {given})") from exc
        return out

    def config(self, model: str | None = None) -> ProfileConfig:
        """The ``ProfileConfig`` of these options (``ConfigError`` names a bad value)."""
        from pipeline.run import ProfileConfig

        check_grade_workers(self.grade_workers, self.grade_timeout)
        return ProfileConfig(
            dataset=self.dataset,
            data_file=str(self.data_file) if self.data_file else None,
            split=self.split,
            limit=self.limit,
            backend=self.backend,
            model=model,
            n=self.n,
            temperature=self.temperature,
            top_p=self.top_p,
            max_tokens=self.max_tokens,
            seed=self.seed,
            template_file=str(self.template_file) if self.template_file else None,
            shard_size=self.shard_size,
            grade_workers=self.grade_workers,
            grade_timeout_s=self.grade_timeout,
            backend_options=self.backend_options(),
            executor=self.executor,
            ray_address=self.ray_address,
            replicas=self.replicas,
            report=self.report,
        )


PROFILE = ProfileOptions()


# The flags of AdaptiveOptions' fields, for messages.
_ADAPTIVE_FLAGS = {
    "n_min": "--n-min",
    "n_max": "--n-max",
    "round_rule": "--round-rule",
    "adaptive_prior": "--adaptive-prior",
}


@dataclass(frozen=True)
class AdaptiveOptions:
    """The adaptive-sampling options of ``profile`` (``shared/spec/adaptive.md``), with their
    defaults (``ADAPTIVE``, read from ``adaptive.AdaptiveConfig``); ``apply`` puts them on a
    ``ProfileConfig``. Apart from ``ProfileOptions`` because only ``profile`` takes them."""

    adaptive: str | None = None
    n_min: int = _ADAPTIVE_DEFAULTS.n_min
    n_max: int = _ADAPTIVE_DEFAULTS.n_max
    round_rule: str = _ADAPTIVE_DEFAULTS.rule.spec
    adaptive_prior: str = _ADAPTIVE_DEFAULTS.prior

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> AdaptiveOptions:
        return cls(**{f.name: params[f.name] for f in fields(cls)})

    def apply(self, config: ProfileConfig) -> ProfileConfig:
        """``config`` with these options (``ConfigError`` names a bad value, or an adaptive option
        given without ``--adaptive``)."""
        if self.adaptive is None:
            given = [flag for name, flag in _ADAPTIVE_FLAGS.items() if getattr(self, name) != getattr(ADAPTIVE, name)]
            if given:
                raise ConfigError(f"{', '.join(given)}: only with --adaptive (e.g. --adaptive band)")
            return config
        return replace(
            config,
            adaptive=self.adaptive,
            n_min=self.n_min,
            n_max=self.n_max,
            round_rule=self.round_rule,
            adaptive_prior=self.adaptive_prior,
        )


ADAPTIVE = AdaptiveOptions()
