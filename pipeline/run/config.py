"""What defines a profile run, declared once: a nested, typed ``ProfileConfig``.

Each part is a frozen dataclass checked once, when it is built: where the problems come from
(``DataConfig``), which engine samples them (``EngineConfig``), how (``SamplingConfig``), how the
answers are graded (``grade.GradeConfig``), whether sampling is adaptive (``adaptive.AdaptiveConfig``
or None) and how the work is carried out (``ExecutionConfig``).

Every other place that takes profile settings (the CLI's option set, the Prefect flows, the Ray
actors, the checkpoint history) reads the fields and defaults from here: ``flat_fields()`` names
each setting once with its part and default, ``ProfileConfig.build(**settings)`` builds the nested
config from those names, and ``to_dict``/``from_dict`` carry it through JSON (a served deployment).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

from pipeline import adaptive, datasets, grade, schema
from pipeline.adaptive import AdaptiveConfig
from pipeline.checks import check_bool, check_choice, check_int
from pipeline.errors import ConfigError
from pipeline.sample import DEFAULT_BACKEND, SamplingParams, check_backend

# Sized for the bundled 135M model on 2 CPU cores: short numeric answers, a temperature that
# keeps easy tiers near 1 and hard tiers near 0, and few enough problems to finish in minutes.
BUNDLED_DEFAULTS: dict[str, Any] = {"temperature": 0.7, "max_tokens": 24, "limit": 45}
# Real datasets: the usual RL rollout temperature and room for a worked solution.
GENERIC_DEFAULTS: dict[str, Any] = {"temperature": 1.0, "max_tokens": 1024, "limit": None}

# The most tokens a shard may ask its backend for (prompts x samples x max_tokens), by backend: a
# shard is the unit of resume, so a killed run keeps the shards written, and a shard is sized to a
# few minutes of its backend's work. The bundled model on 2 CPU cores writes about 130 tokens a second
# (10 MATH-500 prompts x 8 answers of up to 1,024 tokens took over 10 minutes): 32,768 tokens is 4
# such prompts, some 4 minutes; a GPU engine or a server writes thousands a second. simulate has no
# work per token: its shards stay at the most.
SHARD_TOKENS: dict[str, int | None] = {"xllamacpp": 2**15, "vllm": 2**20, "openai": 2**20, "simulate": None}
MAX_SHARD_SIZE = 256


def default_shard_size(backend: str, samples: int, max_tokens: int) -> int:
    """Prompts per shard when ``--shard-size`` is not given: as many as fit the backend's
    ``SHARD_TOKENS`` at ``samples`` answers of up to ``max_tokens`` each, 1 to ``MAX_SHARD_SIZE``."""
    budget = SHARD_TOKENS.get(backend)
    if budget is None:
        return MAX_SHARD_SIZE
    return max(1, min(MAX_SHARD_SIZE, budget // (samples * max_tokens)))


ExecutorName = Literal["local", "ray"]
EXECUTORS: tuple[ExecutorName, ...] = ("local", "ray")


@dataclass(frozen=True)
class DataConfig:
    """Where the problems come from.

    Attributes:
        dataset: adapter name (default ``arithmetic``, the bundled set).
        data_file: local file or hub-layout folder instead of the hub.
        split: dataset split.
        limit: number of problems (None: 45 for the bundled set, all otherwise; see ``ProfileConfig``).
        template_file: prompt template overriding the dataset's bundled one.
    """

    dataset: str | None = "arithmetic"
    data_file: str | None = None
    split: str | None = None
    limit: int | None = None
    template_file: str | None = None

    def __post_init__(self) -> None:
        for name in ("data_file", "template_file"):
            if isinstance(getattr(self, name), Path):
                object.__setattr__(self, name, str(getattr(self, name)))
        if self.limit is not None:
            check_int("limit", self.limit, 1)

    def display_name(self) -> str:
        """The dataset's name before its problems are loaded: ``--dataset``, or a data file's
        ``local-<stem>`` (the ``--dataset`` default names the bundled set only when no file is given)."""
        if self.data_file is not None and (self.dataset or "arithmetic") == "arithmetic":
            return datasets.local_name(self.data_file)
        return self.dataset or "arithmetic"

    def is_bundled(self) -> bool:
        """True for the bundled arithmetic set (no data file)."""
        return self.data_file is None and (self.dataset or "arithmetic") == "arithmetic"


@dataclass(frozen=True)
class EngineConfig:
    """Which engine samples.

    Attributes:
        backend: ``xllamacpp`` (the default), ``vllm``, ``openai`` or ``simulate`` (a retired one is
            refused here, before anything runs: ``sample.RETIRED_BACKENDS``).
        model: model path or name (default: the backend's default, the bundled model on CPU).
        backend_options: extra options of the backend (threads, base_url, ...).
    """

    backend: str = DEFAULT_BACKEND
    model: str | None = None
    backend_options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_backend(self.backend)


@dataclass(frozen=True)
class SamplingConfig:
    """How each prompt is sampled; temperature and max_tokens default by dataset (``ProfileConfig``).

    Attributes:
        n: samples per problem (a fixed-n run; an adaptive run samples by its own settings).
        temperature, top_p, max_tokens, seed: the sampling parameters.
    """

    n: int = 8
    temperature: float | None = None
    top_p: float = 1.0
    max_tokens: int | None = None
    seed: int = 0

    def params(self) -> SamplingParams:
        """The backends' ``SamplingParams`` (checks every value)."""
        return SamplingParams(
            n=self.n, temperature=self.temperature, top_p=self.top_p, max_tokens=self.max_tokens, seed=self.seed
        )


@dataclass(frozen=True)
class ExecutionConfig:
    """How the work is carried out and what is written at the end.

    Attributes:
        shard_size: prompts per shard (the unit of work, retry and resume; None: by the expected work,
            ``default_shard_size``, resolved by ``ProfileConfig``).
        executor: ``local`` (shards in this process) or ``ray`` (shards on Ray actors).
        ray_address: the Ray cluster to join (default: this process's Ray, else ``RAY_ADDRESS``,
            else a new local one).
        replicas: Ray actors, one engine each.
        report: write the HTML report at the end (the caller renders it after the run is done).
        allocation_budget_factor: the default allocation spends this many rollouts per prompt
            (None: ``G``, the trainer's group size).
        G: the group size the user trains with: the summary, the verdict and the report are read at
            it, and the default allocation spends G rollouts per prompt (not in the run's id).
    """

    shard_size: int | None = None
    executor: ExecutorName = "local"
    ray_address: str | None = None
    replicas: int = 1
    report: bool = True
    allocation_budget_factor: int | None = None
    G: int = schema.DEFAULT_G

    def __post_init__(self) -> None:
        if self.shard_size is not None:
            check_int("shard_size", self.shard_size, 1)
        check_int("G", self.G, 2, schema.MAX_G)
        if self.allocation_budget_factor is not None:
            check_int("allocation_budget_factor", self.allocation_budget_factor, 2)
        check_choice("executor", self.executor, EXECUTORS)
        check_int("replicas", self.replicas, 1)
        check_bool("report", self.report)


def _profile_grading() -> grade.GradeConfig:
    # Two math-verify workers: the sampler holds the other cores of a small machine.
    return grade.GradeConfig(workers=2)


@dataclass(frozen=True)
class ProfileConfig:
    """Everything that defines a profile run, in parts (see the module docstring)."""

    data: DataConfig = field(default_factory=DataConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    grading: grade.GradeConfig = field(default_factory=_profile_grading)
    adaptive: AdaptiveConfig | None = None
    execution: ExecutionConfig = field(default_factory=ExecutionConfig)

    def __post_init__(self) -> None:
        # The defaults that depend on the dataset are resolved once, here.
        defaults = BUNDLED_DEFAULTS if self.data.is_bundled() else GENERIC_DEFAULTS
        if self.data.limit is None and defaults["limit"] is not None:
            object.__setattr__(self, "data", replace(self.data, limit=defaults["limit"]))
        missing = {k: defaults[k] for k in ("temperature", "max_tokens") if getattr(self.sampling, k) is None}
        if missing:
            object.__setattr__(self, "sampling", replace(self.sampling, **missing))
        self.sampling.params()  # checks n, temperature, top_p, max_tokens, seed
        if self.execution.shard_size is None:  # an adaptive run's shards start at n_min answers a prompt
            samples = self.adaptive.n_min if self.adaptive is not None else self.sampling.n
            size = default_shard_size(self.engine.backend.lower(), samples, self.sampling.max_tokens)
            object.__setattr__(self, "execution", replace(self.execution, shard_size=size))

    def display_name(self) -> str:
        """The dataset's name before its problems are loaded: ``--dataset``, or a data file's
        ``local-<stem>`` (the ``--dataset`` default names the bundled set only when no file is given)."""
        if self.data_file is not None and (self.dataset or "arithmetic") == "arithmetic":
            return datasets.local_name(self.data_file)
        return self.dataset or "arithmetic"

    def is_bundled(self) -> bool:
        return self.data.is_bundled()

    # --- one name per setting: the CLI, the flows and the tests build configs from these ----------

    @classmethod
    def build(cls, **settings: Any) -> ProfileConfig:
        """The config of flat settings named as ``flat_fields()`` names them, every other one at
        its default (``ConfigError`` names an unknown or bad setting)."""
        known = flat_fields()
        unknown = sorted(set(settings) - set(known))
        if unknown:
            raise ConfigError(f"unknown profile setting(s) {unknown}: allowed {sorted(known)}")
        parts: dict[str, dict[str, Any]] = {}
        for name, value in settings.items():
            part, attr, _ = known[name]
            parts.setdefault(part, {})[attr] = value
        adaptive_given = parts.pop("adaptive", {})
        spec = adaptive_given.pop("target", None)
        if spec is None:
            changed = [
                ADAPTIVE_SETTINGS.get(a, a)
                for a in (*ADAPTIVE_SETTINGS, PRICE_UNIT)
                if a in adaptive_given and adaptive_given[a] != known[ADAPTIVE_SETTINGS.get(a, a)][2]
            ]
            if changed:
                flags = ", ".join("--" + name.replace("_", "-") for name in changed)
                raise ConfigError(f"{flags}: only with --adaptive (e.g. --adaptive band)")
        built = {
            "data": DataConfig(**parts.get("data", {})),
            "engine": EngineConfig(**parts.get("engine", {})),
            "sampling": SamplingConfig(**parts.get("sampling", {})),
            "grading": replace(_profile_grading(), **parts.get("grading", {})),
            "execution": ExecutionConfig(**parts.get("execution", {})),
        }
        acfg = None
        if spec is not None:
            given = {a: adaptive_given.get(a, known[ADAPTIVE_SETTINGS[a]][2]) for a in ADAPTIVE_SETTINGS}
            # --price-unit at its default leaves the spec's own unit (band:...,price_unit=tokens) alone
            unit = adaptive_given.get(PRICE_UNIT)
            given[PRICE_UNIT] = None if unit in (None, known[PRICE_UNIT][2]) else unit
            acfg = adaptive.AdaptiveConfig.from_specs(spec, **given)
        return cls(adaptive=acfg, **built)

    def flat(self) -> dict[str, Any]:
        """The settings by their flat names (``build(**config.flat()) == config``)."""
        out: dict[str, Any] = {}
        for name, (part, attr, default) in flat_fields().items():
            if name == PRICE_UNIT:  # part of the target's spec, not a setting of its own in to_dict
                out[name] = self.adaptive.target.price_unit if self.adaptive is not None else default
            elif part == "adaptive":
                acfg = self.adaptive.to_dict() if self.adaptive is not None else None
                out[name] = None if acfg is None else acfg[attr]
            else:
                out[name] = getattr(getattr(self, part), attr)
        if self.adaptive is None:  # the adaptive settings of a fixed-n run are their defaults
            out.update({ADAPTIVE_SETTINGS[a]: flat_fields()[ADAPTIVE_SETTINGS[a]][2] for a in ADAPTIVE_SETTINGS})
        return out

    def with_settings(self, **settings: Any) -> ProfileConfig:
        """A copy with some flat settings changed."""
        return ProfileConfig.build(**{**self.flat(), **settings})

    def to_dict(self) -> dict[str, Any]:
        """Plain, JSON-able values by part (Prefect parameters, a served deployment)."""
        out = {f.name: dataclasses.asdict(getattr(self, f.name)) for f in fields(self) if f.name != "adaptive"}
        out["adaptive"] = self.adaptive.to_dict() if self.adaptive is not None else None
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any] | ProfileConfig) -> ProfileConfig:
        """The config of ``to_dict``'s values (a config passes through)."""
        if isinstance(data, ProfileConfig):
            return data
        if "data" not in data:  # flat settings
            return cls.build(**data)
        acfg = data.get("adaptive")
        return cls(
            data=DataConfig(**data.get("data", {})),
            engine=EngineConfig(**data.get("engine", {})),
            sampling=SamplingConfig(**data.get("sampling", {})),
            grading=grade.GradeConfig(**data.get("grading", {})),
            adaptive=adaptive.AdaptiveConfig.from_dict(acfg) if acfg else None,
            execution=ExecutionConfig(**data.get("execution", {})),
        )


# Flat setting names whose attribute in their part has another name.
_RENAMED = {"grade_workers": ("grading", "workers"), "grade_timeout_s": ("grading", "timeout_s")}
# The adaptive settings: AdaptiveConfig.to_dict key -> flat name (the target is ``adaptive``).
ADAPTIVE_SETTINGS = {"n_min": "n_min", "n_max": "n_max", "rule": "round_rule", "prior": "adaptive_prior"}
# --price-unit: what the band target's price is paid in, a key of the target's spec (``price_unit=``),
# so runs priced in rollouts keep their ids.
PRICE_UNIT = "price_unit"
_PART_OF = {"data": DataConfig, "engine": EngineConfig, "sampling": SamplingConfig, "execution": ExecutionConfig}


def flat_fields() -> dict[str, tuple[str, str, Any]]:
    """Every setting of a profile: flat name -> (part, attribute, default), the defaults read
    from the parts themselves."""
    out: dict[str, tuple[str, str, Any]] = {}
    for part, cls in _PART_OF.items():
        for f in fields(cls):
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            out[f.name] = (part, f.name, default)
    grading = _profile_grading()
    for flat, (part, attr) in _RENAMED.items():
        out[flat] = (part, attr, getattr(grading, attr))
    acfg = adaptive.AdaptiveConfig.defaults()  # the round rule "auto": the target decides it
    out["adaptive"] = ("adaptive", "target", None)
    for attr, flat in ADAPTIVE_SETTINGS.items():
        out[flat] = ("adaptive", attr, acfg[attr])
    out[PRICE_UNIT] = ("adaptive", PRICE_UNIT, adaptive.PRICE_UNITS[0])
    return out
