"""The one grammar of option specs: ``name[:key=value,...]``.

Used by the estimator registry (``dapo:mode=resample,T=4``), the adaptive targets
(``band:lo=0.1,hi=0.9``) and round rules (``greedy:k=1,budget=8``). :func:`parse_spec` splits a
spec and, given the parameters its name takes, checks and types the values; every error is a
``ConfigError`` in one style, naming what the spec is for, the spec, the bad part and what is
allowed: ``round rule 'step:k=x': k='x' must be an integer``.

Empty items are skipped (``band:`` and ``band:lo=0.1,,hi=0.9`` parse) and a key given twice
keeps its last value, as both parsers this one replaces did.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pipeline.errors import ConfigError

__all__ = ["Kind", "parse_spec", "spec_name", "spec_value", "split_specs"]

#: The type of a parameter: ``int``, ``float``, ``bool`` or ``str``, or its name as a dataclass
#: field annotation spells it under ``from __future__ import annotations`` (``"float | None"``).
Kind = type | str


def spec_name(text: str) -> str:
    """The name of a spec, the part before the first ``:`` (stripped)."""
    return text.strip().partition(":")[0].strip()


def _kind_name(kind: Kind) -> str:
    name = kind if isinstance(kind, str) else kind.__name__
    return name.replace(" ", "").removesuffix("|None")


def spec_value(what: str, spec: str, key: str, value: str, kind: Kind) -> Any:
    """``value`` (text) as ``kind``; a ``ConfigError`` names the spec, the key, the value and the type.

    ``int`` accepts any number that is whole (``4``, ``4.0``, ``1e3``); ``bool`` accepts
    ``true/false``, ``1/0``, ``yes/no`` in any case; ``str`` is the text as it is.
    """
    name = _kind_name(kind)
    where = f"{what} {spec!r}: {key}={value!r}"
    if name == "bool":
        low = value.lower()
        if low in ("true", "1", "yes"):
            return True
        if low in ("false", "0", "no"):
            return False
        raise ConfigError(f"{where} must be true or false (also 1/0, yes/no)")
    if name == "float":
        try:
            return float(value)
        except ValueError:
            raise ConfigError(f"{where} is not a number") from None
    if name == "int":
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not number.is_integer():
            raise ConfigError(f"{where} must be an integer")
        return int(number)
    return value


def parse_spec(text: str, what: str, params: Mapping[str, Kind] | None = None) -> tuple[str, dict[str, Any]]:
    """Split ``name[:key=value,...]`` into the name and its parameters.

    Args:
        text: the spec as given.
        what: what the spec is for, the start of every message (``"estimator"``, ``"round rule"``).
        params: the parameters the spec's name takes and their kinds. Given, a key outside it is
            an error and values are typed (:func:`spec_value`); None, values stay text and any
            ``key=value`` is taken.

    Returns:
        ``(name, {key: value})``; the name is not checked here (each registry says which exist).

    Raises:
        ConfigError: an item that is not ``key=value``, a key ``params`` does not list, or a value
            of the wrong type; the message names the spec, the item and what is allowed.
    """
    name, _, rest = text.strip().partition(":")
    name = name.strip()
    out: dict[str, Any] = {}
    for item in filter(None, (s.strip() for s in rest.split(","))):
        key, eq, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not key or (params is not None and key not in params):
            takes = "any key=value" if params is None else ", ".join(params) or "no parameters"
            raise ConfigError(
                f"{what} {text!r}: bad parameter {item!r}; {name} takes {takes} (as {name}:key=value,...)"
            )
        out[key] = value if params is None else spec_value(what, text, key, value, params[key])
    return name, out


def split_specs(text: str) -> list[str]:
    """Split a comma-separated list of specs whose parameters hold commas themselves.

    ``"grpo,dapo:mode=resample,T=4,softmax_grpo:tau=0.3"`` gives three specs: a token with ``=``
    and no ``:`` is one more parameter of the spec before it. Empty tokens are skipped.
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
