"""What every sampling backend shares: parameters, seeds, input rows and the output table.

A backend turns problems into samples: one row per (prompt_id, sample_idx) with the completion,
the finish reason and the number of generated tokens. Seeds are derived from the run seed, the
prompt id and the sample index alone, so a sample does not depend on how the prompts were split
into shards, on their order or on which other prompts were sampled with it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import pyarrow as pa

from pipeline.checks import check_int, check_number
from pipeline.datasets import chat_messages_of
from pipeline.errors import ConfigError
from pipeline.sample.templates import CHAT_MESSAGES, DEFAULT_TEMPLATE, render_prompt

# One row per sample; the `samples` table adds run_id and the grading columns.
SAMPLE_ROWS = pa.schema(
    [
        pa.field("prompt_id", pa.string(), nullable=False),
        pa.field("sample_idx", pa.int32(), nullable=False),
        pa.field("completion", pa.string()),
        pa.field("finish_reason", pa.string()),
        pa.field("n_tokens", pa.int32()),
    ]
)

#: Called with the number of samples finished since the previous call (e.g. a rich bar's advance).
Progress = Callable[[int], None]

_SEED_MAX = 2**31 - 1  # fits every backend: llama.cpp (uint32), vLLM and OpenAI servers (int)
_SAMPLE_IDX_MAX = 2**31 - 1  # sample_idx is an int32 column


@dataclass(frozen=True)
class SamplingParams:
    """Sampling parameters shared by all backends.

    Attributes:
        n: samples per prompt, 1 to 100000.
        temperature: softmax temperature, 0 (greedy) to 10.
        top_p: nucleus mass, in (0, 1].
        max_tokens: generated tokens per sample, 1 to 1048576; always sent explicitly (vLLM's
            default is 16).
        seed: run seed, 0 to 2**63 - 1; per-sample seeds are derived from it with `derive_seed`.
        first_idx: the first sample index: a call samples indices ``first_idx .. first_idx + n - 1``
            (a later round of an adaptive profile continues where the earlier rounds stopped). Not
            part of `to_dict`, which a run id hashes: where a batch starts is the plan's business,
            not the run's, so a fixed-n run keeps its id.
    """

    n: int = 8
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 256
    seed: int = 0
    first_idx: int = 0

    def __post_init__(self) -> None:
        check_int("n", self.n, 1, 100_000)
        check_int("max_tokens", self.max_tokens, 1, 1 << 20)
        check_int("seed", self.seed, 0, 2**63 - 1)
        check_int("first_idx", self.first_idx, 0, _SAMPLE_IDX_MAX - self.n)
        check_number("temperature", self.temperature, 0, 10)
        check_number("top_p", self.top_p, 0, 1, lo_open=True)

    @property
    def sample_indices(self) -> range:
        """The sample indices this call samples: ``first_idx .. first_idx + n - 1``."""
        return range(self.first_idx, self.first_idx + self.n)

    def to_dict(self) -> dict[str, Any]:
        """The parameters as a plain dict (for the run registry and the run id; without
        ``first_idx``)."""
        return {
            "n": self.n,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
            "seed": self.seed,
        }


def derive_seed(seed: int, prompt_id: str, sample_idx: int) -> int:
    """A stable per-sample seed in [0, 2**31 - 1).

    BLAKE2b of the triple, so it is the same in every process and Python version (unlike
    `hash()`, which is salted per process).
    """
    digest = hashlib.blake2b(f"{seed}\x1f{prompt_id}\x1f{sample_idx}".encode(), digest_size=8)
    return int.from_bytes(digest.digest(), "little") % _SEED_MAX


@dataclass(frozen=True)
class PromptItem:
    """One problem to sample: its id and its rendered prompt (the user message)."""

    prompt_id: str
    prompt: str


class ChatPrompt(str):
    """A prompt that is a dataset's own chat messages (verl's ``prompt``, template ``{messages}``).

    The text is the last user message; ``chat_messages`` sends ``messages`` instead of wrapping
    the text, so every backend sends a verl row as the trainer would, with no backend change.
    """

    messages: tuple[dict, ...]

    def __new__(cls, text: str, messages: list[dict]) -> ChatPrompt:
        obj = super().__new__(cls, text)
        obj.messages = tuple(dict(m) for m in messages)
        return obj

    def __reduce__(self):  # pickled to vLLM's worker processes and Ray actors with its messages
        return (ChatPrompt, (str(self), list(self.messages)))


def _own_messages(problems: Any) -> list[list[dict] | None]:
    """Each problem's chat messages from its ``original`` row (None where it has none)."""
    if isinstance(problems, pa.Table | pa.RecordBatch):
        names = problems.schema.names
        originals = problems.column("original").to_pylist() if "original" in names else [None] * problems.num_rows
    else:
        originals = [_field(r, "original") for r in problems]
    return [chat_messages_of(o) for o in originals]


def _field(row: Any, name: str) -> Any:
    if isinstance(row, Mapping):
        return row.get(name)
    return getattr(row, name, None)


def iter_problem_rows(problems: Any) -> Iterable[tuple[str, str]]:
    """Yield (prompt_id, problem) from a pa.Table, a list of dicts or objects with those fields."""
    if isinstance(problems, pa.Table | pa.RecordBatch):
        missing = {"prompt_id", "problem"} - set(problems.schema.names)
        if missing:
            raise ConfigError(f"problems table lacks column(s) {sorted(missing)}")
        ids = problems.column("prompt_id").to_pylist()
        texts = problems.column("problem").to_pylist()
        rows: Iterable[tuple[Any, Any]] = zip(ids, texts, strict=True)
    else:
        rows = ((_field(r, "prompt_id"), _field(r, "problem")) for r in problems)
    for i, (pid, text) in enumerate(rows):
        if not isinstance(pid, str) or not pid:
            raise ConfigError(f"problem row {i}: prompt_id={pid!r} must be a non-empty string")
        if not isinstance(text, str):
            raise ConfigError(f"problem {pid}: problem={text!r} must be a string")
        yield pid, text


def prepare_prompts(problems: Any, template: str | None) -> list[PromptItem]:
    """Render every problem through the template; duplicate prompt ids are an error.

    With ``CHAT_MESSAGES`` (a verl dataset without a template of the user's) each problem is its
    own chat messages, read from its ``original`` row, as a ``ChatPrompt``.
    """
    tpl = DEFAULT_TEMPLATE if template is None else template
    own = _own_messages(problems) if tpl == CHAT_MESSAGES else None
    items: list[PromptItem] = []
    seen: set[str] = set()
    for i, (pid, text) in enumerate(iter_problem_rows(problems)):
        if pid in seen:
            raise ConfigError(f"prompt_id {pid!r} appears twice in the problems")
        seen.add(pid)
        if own is None:
            items.append(PromptItem(pid, render_prompt(tpl, text)))
        elif not own[i]:
            raise ConfigError(
                f"problem {pid}: template {CHAT_MESSAGES} sends each problem's own chat messages, and this one has "
                "none (no original verl row with a 'prompt'); load it from its verl file or pass --template-file"
            )
        else:
            items.append(PromptItem(pid, ChatPrompt(text, own[i])))
    return items


def rows_to_table(rows: list[tuple[str, int, str | None, str | None, int | None]]) -> pa.Table:
    """Build the output table from (prompt_id, sample_idx, completion, finish_reason, n_tokens)."""
    cols = list(zip(*rows, strict=True)) if rows else [[] for _ in SAMPLE_ROWS]
    return pa.Table.from_arrays(
        [pa.array(list(c), type=f.type) for c, f in zip(cols, SAMPLE_ROWS, strict=True)],
        schema=SAMPLE_ROWS,
    )


def chat_messages(prompt: str, system: str | None) -> list[dict[str, str]]:
    """OpenAI-style messages for one prompt (with an optional system message).

    A ``ChatPrompt`` is its own messages; ``system`` goes in front only when they have none.
    """
    own = getattr(prompt, "messages", None)
    if own is not None:
        msgs = [dict(m) for m in own]
        if system and not any(m.get("role") == "system" for m in msgs):
            msgs.insert(0, {"role": "system", "content": system})
        return msgs
    msgs = [{"role": "system", "content": system}] if system else []
    msgs.append({"role": "user", "content": prompt})
    return msgs


@runtime_checkable
class Sampler(Protocol):
    """A sampling backend.

    Attributes:
        backend: the backend name (`xllamacpp`, `vllm`, `openai`, `simulate`).
        model_name: what the run registry records as the model (a path, a hub name, a served id).
    """

    backend: str
    model_name: str

    def sample(
        self,
        problems: Any,
        params: SamplingParams,
        progress: Progress | None = None,
        *,
        template: str | None = None,
    ) -> pa.Table:
        """Sample `params.n` completions for every problem.

        Args:
            problems: a pa.Table or an iterable of mappings/objects with `prompt_id` and `problem`.
            params: the sampling parameters.
            progress: called with the number of samples finished since its previous call.
            template: prompt template with a `{problem}` placeholder (default: the generic one).

        Returns:
            A table with schema `SAMPLE_ROWS`: n rows per problem, in input order, sample_idx
            ``params.first_idx .. params.first_idx + n - 1`` within each problem, each sampled
            with the seed ``derive_seed(params.seed, prompt_id, sample_idx)``.
        """
        ...

    def close(self) -> None:
        """Release the model, worker processes or connections."""
        ...
