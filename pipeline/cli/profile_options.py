"""The options whose defaults live in the run's own modules, each declared once as an
``Annotated`` type alias: grading and the profile set.

The profile options (``profile``, ``schedule``, ``checkpoints``) are one set by construction: the
``profile_options`` decorator adds them all to a command, with the defaults of the config's own
dataclasses (``run.config``), and hands the command the built ``ProfileConfig``. Importing this
module imports those modules (NumPy, the OpenAI sampler's httpx), so only the commands that
sample or grade import it; the cheap shared options are in ``options``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from pipeline.errors import ConfigError
from pipeline.grade import MAX_TIMEOUT_S, GradeConfig, check_timeout, check_workers
from pipeline.prior import PRIORS as ADAPTIVE_PRIORS
from pipeline.sample import BACKENDS, GGUF_BACKENDS
from pipeline.sample.openai import DEFAULT_BASE_URL, OpenAIOptions
from pipeline.sample.xllamacpp import XLlamaCppOptions

if TYPE_CHECKING:
    from pipeline.run import ProfileConfig

# --- the profile options (profile, schedule, checkpoints) -------------------------------------

_DATA = "Dataset"
_SAMPLING = "Sampling"
_ADAPTIVE = "Adaptive sampling"
_BACKEND = "Backend"
_EXECUTION = "Execution"

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
    str, typer.Option("--backend", help=f"{', '.join(BACKENDS[:-1])} or {BACKENDS[-1]}.", rich_help_panel=_BACKEND)
]
Threads = Annotated[
    int | None, typer.Option("--threads", help="llama.cpp threads (xllamacpp).", rich_help_panel=_BACKEND)
]
Slots = Annotated[
    int | None,
    typer.Option(
        "--slots",
        help=f"llama.cpp server slots decoding together (xllamacpp only; default {XLlamaCppOptions.parallel}).",
        rich_help_panel=_BACKEND,
    ),
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
            "Sample in rounds: band[:lo=0.1,hi=0.9,delta=0.05,cost=0.001] (which side of lo < p < hi; decided "
            "at posterior probability >= 1 - delta; a prompt gets more samples while they are expected to "
            "remove more misclassification than cost per rollout, the Bayes-optimal stop; cost=0: stop once "
            "decided) or width[:h=0.1,delta=0.05] (stop once the central 1 - delta interval is at most 2h "
            "wide). --n is then not used."
        ),
        show_default=False,
        rich_help_panel=_ADAPTIVE,
    ),
]
NMin = Annotated[int, typer.Option("--n-min", help="Adaptive: round-0 samples per prompt.", rich_help_panel=_ADAPTIVE)]
NMax = Annotated[
    int,
    typer.Option("--n-max", help="Adaptive: most samples per prompt; there it stops.", rich_help_panel=_ADAPTIVE),
]
RoundRuleOption = Annotated[
    str,
    typer.Option(
        "--round-rule",
        help=(
            "Adaptive: auto (the default: plan for the priced band target, double for cost=0 and width), "
            "plan[:cost=0,rounds=8,hedge=1.92] (each open prompt gets the jump of least expected loss, "
            "misclassification plus rollouts plus cost rollouts a round, planned over the rounds left: at most "
            "rounds rounds; a prompt also goes on where the plan under a prior the counts allow, the inflated "
            "Beta's a + b at hedge nats below its best, sends it on; hedge=0: off), "
            "double[:k=1] (each open prompt gets the jump, in multiples of k, that most "
            "raises its chance to stop per rollout among those at least doubling its samples; at most "
            "log2(n_max/n_min) rounds per prompt), step[:k=4] (every open prompt gets k more per round) or "
            "greedy[:k=1,budget=8,jumps=0] (a round spends up to budget x open prompts rollouts where they "
            "most raise the expected number of prompts stopped, at most jumps jumps per prompt, 0: no limit)."
        ),
        rich_help_panel=_ADAPTIVE,
    ),
]
PriceUnit = Annotated[
    str,
    typer.Option(
        "--price-unit",
        help="Adaptive band target: what its cost is a price of, rollouts (the default: every rollout alike) or "
        "tokens (a prompt's rollout costs cost x its expected answer length over the population's mean, learned "
        "from its own answers each round: a long prompt stops sooner). The same as the target's price_unit=.",
        rich_help_panel=_ADAPTIVE,
    ),
]
AdaptivePrior = Annotated[
    str,
    typer.Option(
        "--adaptive-prior",
        help=f"Adaptive: {', '.join(ADAPTIVE_PRIORS)} (grid: the maximum-likelihood distribution of pass rates on a "
        "grid with masses at 0 and 1, refitted every round; fit: a Beta prior fitted to round 0; jeffreys: "
        "Beta(1/2, 1/2); inflated: masses at 0 and 1 and a Beta between them, refitted every round; auto, "
        "the default: a Beta, the inflated Beta or the grid, fitted to the same counts every round, "
        "chosen by likelihood with a margin for their parameters; labels: the auto prior conditioned on the "
        "label the dataset carries, another model's pass rate prior_c/prior_n or else difficulty, one prior per "
        "label bin; a dataset without labels gets auto, with a warning).",
        rich_help_panel=_ADAPTIVE,
    ),
]
ShardSize = Annotated[
    int | None,
    typer.Option(
        "--shard-size",
        help="Prompts per shard (unit of retry and resume; default: as many as fit the backend's tokens per "
        "shard at --n x --max-tokens, e.g. 4 MATH prompts on xllamacpp, at most 256).",
        rich_help_panel=_EXECUTION,
    ),
]
GradeWorkers = Annotated[
    int, typer.Option("--grade-workers", help="math-verify worker processes.", rich_help_panel=_EXECUTION)
]
GradeTimeout = Annotated[
    float,
    typer.Option(
        "--grade-timeout",
        metavar="SECONDS",
        help=f"Seconds math-verify may spend on one answer before it is graded 'timeout' (> 0, <= {MAX_TIMEOUT_S}).",
        rich_help_panel=_EXECUTION,
    ),
]
Executor = Annotated[
    str,
    typer.Option("--executor", help="local, or ray: sampling shards on Ray actors.", rich_help_panel=_EXECUTION),
]
RayAddress = Annotated[
    str | None,
    typer.Option(
        "--address",
        help="Ray cluster address (default: $RAY_ADDRESS, else a new local one).",
        rich_help_panel=_EXECUTION,
    ),
]
Replicas = Annotated[
    int,
    typer.Option("--replicas", help="Ray actors (one engine each; one GPU each for vLLM).", rich_help_panel=_EXECUTION),
]
Report = Annotated[
    bool, typer.Option("--report/--no-report", help="Write the HTML report of each run.", rich_help_panel=_EXECUTION)
]
TrainG = Annotated[
    int,
    typer.Option(
        "--G",
        help="The group size G you train with: the summary, the verdict and the report are read at it, and "
        "the default allocation spends G rollouts per prompt (not part of the run's id).",
        rich_help_panel=_EXECUTION,
    ),
]


def check_grade_options(workers: int, timeout_s: float) -> None:
    """``ConfigError`` naming the flag when ``--grade-workers`` or ``--grade-timeout`` is out of
    range (grading's own checks, before any work starts)."""
    check_workers(workers, "--grade-workers")
    check_timeout(timeout_s, "--grade-timeout")


# The grading defaults of the commands that grade without profiling (grade, regrade): a profile's.
GRADE_DEFAULTS = GradeConfig(workers=2)

# The profile settings (``run.config.flat_fields()``: name, part and default) and their options.
# The defaults are read from the config's own dataclasses; this table only says which flag.
_PROFILE_OPTIONS: dict[str, Any] = {
    "model": Model,
    "dataset": Dataset,
    "data_file": DataFile,
    "split": Split,
    "limit": Limit,
    "template_file": TemplateFile,
    "backend": Backend,
    "n": N,
    "temperature": Temperature,
    "top_p": TopP,
    "max_tokens": MaxTokens,
    "seed": Seed,
    "adaptive": Adaptive,
    "n_min": NMin,
    "n_max": NMax,
    "round_rule": RoundRuleOption,
    "adaptive_prior": AdaptivePrior,
    "price_unit": PriceUnit,
    "shard_size": ShardSize,
    "grade_workers": GradeWorkers,
    "grade_timeout_s": GradeTimeout,
    "executor": Executor,
    "ray_address": RayAddress,
    "replicas": Replicas,
    "report": Report,
    "G": TrainG,
}
# Backend options: option -> (its type, the backends it belongs to, its key in backend_options).
_BACKEND_OPTIONS: dict[str, tuple[Any, tuple[str, ...], str]] = {
    "threads": (Threads, GGUF_BACKENDS, "n_threads"),
    "slots": (Slots, ("xllamacpp",), "parallel"),
    "base_url": (BaseUrl, ("openai",), "base_url"),
    "request_timeout": (RequestTimeout, ("openai",), "timeout"),
    "max_retries": (MaxRetries, ("openai",), "max_retries"),
    "tensor_parallel": (TensorParallel, ("vllm",), "tensor_parallel_size"),
    "pass_rates": (PassRates, ("simulate",), "pass_rates"),
}


def _flag(alias: Any) -> str:
    info = next(m for m in alias.__metadata__ if isinstance(m, typer.models.OptionInfo))
    return info.param_decls[0] if info.param_decls else info.default  # Annotated: the flag comes first


def profile_defaults() -> dict[str, Any]:
    """Every profile option's default, read from the config's dataclasses (backend options: None)."""
    from pipeline.run.config import flat_fields

    settings = flat_fields()
    # --model, not a setting of its own in the flat table order; the engine's field.
    defaults = {name: settings[name][2] for name in _PROFILE_OPTIONS}
    return defaults | dict.fromkeys(_BACKEND_OPTIONS)


def backend_options(backend: str, given: dict[str, Any]) -> dict[str, Any]:
    """``EngineConfig.backend_options`` of the backend options given (None: not given);
    ``ConfigError`` for an option of another backend or a bad value."""
    out: dict[str, Any] = {}
    flags = {}
    for name, (alias, owners, key) in _BACKEND_OPTIONS.items():
        value = given.get(name)
        if value is None:
            continue
        if backend.lower() not in owners:
            allowed = " or ".join(owners)
            raise ConfigError(f"{_flag(alias)} applies to --backend {allowed} only, not --backend {backend}")
        out[key] = str(value) if isinstance(value, Path) else value
        flags[key] = _flag(alias)
    if backend.lower() == "openai" and out:
        # Checked now, not when the first shard builds the sampler: a bad --request-timeout
        # fails before any work starts. Constructing the options reads no network.
        try:
            OpenAIOptions(**out)
        except ConfigError as exc:
            given_text = ", ".join(f"{flags[k]} {v!r}" for k, v in out.items())
            raise ConfigError(f"{exc} (from {given_text})") from exc
    return out


def profile_config(**values: Any) -> ProfileConfig:
    """The ``ProfileConfig`` of a command line's profile options (any not given at its default;
    ``ConfigError`` names a bad value)."""
    from pipeline.run.config import ProfileConfig

    values = profile_defaults() | values
    check_grade_options(values["grade_workers"], values["grade_timeout_s"])
    given = {name: values.pop(name) for name in _BACKEND_OPTIONS}
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in values.items()}
    settings["backend_options"] = backend_options(values["backend"], given)
    return ProfileConfig.build(**settings)


def profile_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Give a command every profile option (``difficulty profile``'s set, the same on every command
    that profiles); the command receives them built, as ``profile: ProfileConfig``."""
    # Typer reads resolved annotations (the command's own are strings under postponed evaluation).
    own = [
        p.replace(annotation=eval(p.annotation, command.__globals__))  # noqa: S307 - our own source
        if isinstance(p.annotation, str)
        else p
        for p in inspect.signature(command).parameters.values()
        if p.name != "profile"
    ]
    defaults = profile_defaults()
    aliases = _PROFILE_OPTIONS | {name: alias for name, (alias, _, _) in _BACKEND_OPTIONS.items()}
    added = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=alias, default=defaults[name])
        for name, alias in aliases.items()
    ]
    own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own]
    params = [p for p in own if p.name != "data_dir"] + added + [p for p in own if p.name == "data_dir"]

    @functools.wraps(command)
    def with_profile(**kwargs: Any) -> Any:
        values = {name: kwargs.pop(name) for name in aliases}
        return command(profile=profile_config(**values), **kwargs)

    with_profile.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    with_profile.__annotations__ = {p.name: p.annotation for p in params}
    return with_profile
