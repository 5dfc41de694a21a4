"""A source's rows to the dataset's ``prompt_id``: built once per dataset, asked once per row.

Every lookup returns ``(prompt_id, None)`` or ``(None, reason)``: a row that matches nothing is
kept by the caller (in ``unmatched``, with the reason), never dropped. Ways to match, by what the
source row carries:

- ``by_id``: the project's own ``prompt_id`` (exact).
- ``by_index``: the dataset's own row index, verl's ``extra_info.index`` (read from each problem's
  original row, ``problems.original``); a row without one has no index. The index of a row ``load``
  collapsed into an earlier one (the same problem) names that problem too, when the problems were
  loaded from the file just now (``datasets.collapsed_rows``; the store keeps only the kept rows).
- ``by_problem``: the problem text, whitespace-normalised (``datasets.normalize_problem``), exact.
- ``by_chat``: a verl rollout dump's ``input``, the chat prompt decoded with special tokens skipped
  (``"system\\n...\\nuser\\n<problem + instruction>\\nassistant\\n"``). The prompt whose normalised
  problem text is contained in the normalised input matches (for a verl dataset the problem is its
  last user message, instruction included); when several are, the longest wins, since a short
  problem can sit inside a longer one. Each problem is indexed by the first ``PREFIX`` characters
  of its normalised text and every window of the input is looked up, so a lookup costs one dict
  probe per input character, whatever the dataset's size. Prompts repeat across steps (every
  epoch, every rollout of a group), so inputs are cached: each distinct input is searched once.

``check_answer`` compares a row's gold answer (``gts`` in verl dumps) with the dataset's: a dump of
another dataset with the same problem text but another answer is a mismatch, not an observation.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from pipeline import datasets
from pipeline.errors import DatasetError

PREFIX = 24  # characters of a normalised problem that index it for chat matching
TEXT_CUT = 500  # characters of a row's text kept in ``unmatched``

Match = tuple[str | None, str | None]  # (prompt_id, None) or (None, reason)


def cut(text: Any) -> str | None:
    """A row's text as kept in ``unmatched.text`` (at most ``TEXT_CUT`` characters)."""
    if text is None:
        return None
    text = text if isinstance(text, str) else str(text)
    return text if len(text) <= TEXT_CUT else text[:TEXT_CUT]


def answer_text(value: Any) -> str | None:
    """A gold answer as comparable text: whitespace-normalised; a number as written (``4`` is
    ``"4"``, ``4.0`` is ``"4.0"``); a one-element list as its element (some verl datasets wrap the
    ground truth in a list)."""
    if isinstance(value, list | tuple) and len(value) == 1:
        value = value[0]
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return datasets.normalize_problem(value if isinstance(value, str) else str(value))


def index_of(original: str | None) -> int | None:
    """verl's ``extra_info.index`` of a problem's source row (an ``index`` column is accepted too)."""
    row = datasets.original_row(original)
    if not row:
        return None
    extra = row.get("extra_info")
    if isinstance(extra, str):
        extra = datasets.original_row(extra) if extra.strip().startswith("{") else None
    value = extra.get("index") if isinstance(extra, dict) else None
    if value is None:
        value = row.get("index")
    if isinstance(value, bool) or value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


@dataclass
class Matcher:
    """Lookups of one dataset's prompts (``from_problems``); the chat cache lives as long as it."""

    dataset: str
    ids: frozenset[str]
    answers: dict[str, str | None]
    by_text: dict[str, str]  # normalised problem -> prompt_id
    by_row_index: dict[int, str]
    duplicate_index: dict[int, int] = field(default_factory=dict)  # index -> rows sharing it
    _prefix: dict[str, list[tuple[str, str]]] = field(default_factory=dict, repr=False)
    _short: dict[int, dict[str, str]] = field(default_factory=dict, repr=False)
    _chat_cache: dict[str, Match] = field(default_factory=dict, repr=False)

    @classmethod
    def from_problems(cls, problems: pa.Table) -> Matcher:
        """Index a problems table (``schema.PROBLEMS``) of one dataset."""
        names = sorted(set(problems.column("dataset").to_pylist()))
        if len(names) > 1:
            raise DatasetError(f"a matcher takes the problems of one dataset, got {names}")
        dataset = names[0] if names else ""
        pids = problems.column("prompt_id").to_pylist()
        texts = problems.column("problem").to_pylist()
        golds = problems.column("answer").to_pylist()
        originals = problems.column("original").to_pylist() if "original" in problems.column_names else []
        by_text: dict[str, str] = {}
        for pid, text in zip(pids, texts, strict=True):
            norm = datasets.normalize_problem(text or "")
            if norm:
                by_text.setdefault(norm, pid)
        by_index: dict[int, str] = {}
        duplicates: dict[int, int] = defaultdict(int)
        # A row ``load`` collapsed into an earlier one (same problem) keeps its index: it names that problem.
        collapsed = [(pid, text) for _, pid, text in datasets.collapsed_rows(problems)]
        for pid, original in [*zip(pids, originals, strict=False), *collapsed]:
            index = index_of(original)
            if index is None:
                continue
            if index in by_index and by_index[index] != pid:
                duplicates[index] += 1
            by_index.setdefault(index, pid)
        for index in duplicates:  # an index two problems share names neither: say so rather than guess
            by_index.pop(index, None)
        matcher = cls(
            dataset=dataset,
            ids=frozenset(pids),
            answers={pid: answer_text(a) for pid, a in zip(pids, golds, strict=True)},
            by_text=by_text,
            by_row_index=by_index,
            duplicate_index={k: v + 1 for k, v in duplicates.items()},
        )
        for norm, pid in by_text.items():
            if len(norm) >= PREFIX:
                matcher._prefix.setdefault(norm[:PREFIX], []).append((norm, pid))
            else:
                matcher._short.setdefault(len(norm), {})[norm] = pid
        return matcher

    def __len__(self) -> int:
        return len(self.ids)

    def by_id(self, prompt_id: Any) -> Match:
        key = None if prompt_id is None else str(prompt_id)
        if key in self.ids:
            return key, None
        return None, f"prompt_id {key!r} is not a prompt of {self.dataset}"

    def by_index(self, index: Any) -> Match:
        try:
            key = None if index is None or isinstance(index, bool) else int(index)
        except (TypeError, ValueError):
            key = None
        if key is None:
            return None, f"index {index!r} is not an integer"
        if key in self.by_row_index:
            return self.by_row_index[key], None
        if key in self.duplicate_index:
            return None, f"index {key} is held by {self.duplicate_index[key]} rows of {self.dataset}"
        if not self.by_row_index:
            return None, f"{self.dataset} has no row index (extra_info.index) to match by"
        return None, f"index {key} is not a row of {self.dataset}"

    def by_problem(self, text: Any) -> Match:
        norm = datasets.normalize_problem(text if isinstance(text, str) else ("" if text is None else str(text)))
        if not norm:
            return None, "empty problem text"
        pid = self.by_text.get(norm)
        if pid is not None:
            return pid, None
        return None, f"problem text is not a problem of {self.dataset}"

    def by_chat(self, text: Any) -> Match:
        """The prompt whose problem text the decoded chat prompt contains (the longest of several)."""
        if not isinstance(text, str):
            return None, "empty chat prompt" if text is None else f"chat prompt is a {type(text).__name__}, not text"
        hit = self._chat_cache.get(text)
        if hit is None:
            hit = self._chat_cache[text] = self._search(text)
        return hit

    def _search(self, text: str) -> Match:
        norm = datasets.normalize_problem(text)
        if not norm:
            return None, "empty chat prompt"
        exact = self.by_text.get(norm)
        if exact is not None:  # the input is the bare problem
            return exact, None
        best: tuple[int, str] | None = None
        prefix, size = self._prefix, PREFIX
        for i in range(len(norm) - size + 1):
            candidates = prefix.get(norm[i : i + size])
            if candidates:
                for problem, pid in candidates:
                    if (best is None or len(problem) > best[0]) and norm.startswith(problem, i):
                        best = (len(problem), pid)
        if best is None:  # a problem shorter than the prefix: windows of each short length
            for length, texts in self._short.items():
                for i in range(len(norm) - length + 1):
                    pid = texts.get(norm[i : i + length])
                    if pid is not None and (best is None or length > best[0]):
                        best = (length, pid)
        if best is None:
            return None, f"no problem of {self.dataset} is contained in the chat prompt"
        return best[1], None

    def check_answer(self, prompt_id: str, gold: Any) -> str | None:
        """None when the row's gold answer is the dataset's (or the row has none), else the reason."""
        if gold is None:
            return None
        theirs = answer_text(gold)
        ours = self.answers.get(prompt_id)
        if theirs == ours:
            return None
        return f"gold answer {cut(theirs)!r} differs from {self.dataset}'s {cut(ours)!r} for prompt {prompt_id}"
