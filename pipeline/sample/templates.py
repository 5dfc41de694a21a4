"""Prompt templates: one per dataset, each asking for the final answer in `\\boxed{}`.

A template is plain text with one `{problem}` placeholder. It is substituted literally (not with
`str.format`), so braces elsewhere in the template or in the problem need no escaping.
Bundled templates live in `pipeline/templates/<name>.txt`; a file given by path overrides them.
The bundled arithmetic template asks for the bare number instead: the 135M CPU model rarely
writes `\\boxed{}`, and asking for it halved its pass rate on one-digit sums (0.56 -> 0.22);
the grader's last-number fallback reads its answers.
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path

from pipeline.datasets import sends_own_messages
from pipeline.errors import ConfigError, MissingFileError

PLACEHOLDER = "{problem}"
# The run template of a dataset whose rows are sent as their own chat messages (verl's `prompt`,
# its instruction included) instead of a rendered template; `base.prepare_prompts` reads it.
CHAT_MESSAGES = "{messages}"

# Datasets with their own bundled template; every other dataset gets `default`.
_BUNDLED = {"default": "default.txt", "gsm8k": "gsm8k.txt", "arithmetic": "arithmetic.txt"}


def _bundled(name: str) -> str:
    return (importlib.resources.files("pipeline") / "templates" / _BUNDLED[name]).read_text(encoding="utf-8")


def check_template(template: str, source: str = "template") -> str:
    """Return the template if it has exactly one `{problem}` placeholder, else raise ``ConfigError``."""
    count = template.count(PLACEHOLDER)
    if count != 1:
        raise ConfigError(f"{source} must contain the placeholder {PLACEHOLDER} exactly once (found {count})")
    return template


def render_prompt(template: str, problem: str) -> str:
    """Substitute the problem text into the template.

    Args:
        template: text with one `{problem}` placeholder.
        problem: the problem statement, inserted verbatim.

    Returns:
        The user message sent to the model (trailing whitespace of the template removed).
    """
    return check_template(template).replace(PLACEHOLDER, problem.strip()).rstrip()


def template_for(dataset: str | None, path: str | Path | None = None) -> str:
    """The prompt template for a dataset, or the one in `path` when given.

    Args:
        dataset: dataset name (`gsm8k`, `arithmetic`, ...); unknown names or None get the default;
            a verl file's dataset (`verl-<stem>`) gets `CHAT_MESSAGES`: its rows' own messages.
        path: a UTF-8 text file with one `{problem}` placeholder; overrides the bundled template
            (and a verl dataset's own messages: the problem is then its last user message).

    Raises:
        FileNotFoundError: `path` does not exist.
        ValueError: the template lacks the placeholder or has it more than once.
    """
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise MissingFileError(f"prompt template file {str(p)!r} does not exist")
        return check_template(p.read_text(encoding="utf-8"), f"prompt template {str(p)!r}")
    if sends_own_messages(dataset):
        return CHAT_MESSAGES
    key = (dataset or "default").lower()
    return _bundled(key if key in _BUNDLED else "default")


DEFAULT_TEMPLATE = _bundled("default")
