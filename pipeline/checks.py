"""The one way a setting is checked: ``ConfigError`` naming the setting, its value and what is allowed.

Every config (grading, sampling and its backends, the report, adaptive sampling, the curriculum,
schedules, a run's settings) checks its values with these functions, so each rule ("an integer,
not a bool, in range") is written once and every message has one shape:

* a bounded range: ``n=0 is out of range: allowed [1, 100000]``;
* a half-line: ``n_min=0 must be an integer >= 1``, ``budget=0.0 must be a number > 0``;
* the wrong type: ``n=2.0 must be an integer in [1, 100000]``;
* a choice: ``plotly_js='cdn' is unknown: allowed inline, shared``.

``name`` is the setting as its user spells it: a field (``top_p``), a flag (``--grade-timeout``)
or a field with its context (``adaptive delta``). Numbers are Python's or NumPy's (``numbers``);
a bool is never a number here, although Python counts it as one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from numbers import Integral, Real
from typing import Any, TypeVar

from pipeline.errors import ConfigError

__all__ = ["check_bool", "check_choice", "check_int", "check_number", "shown_range"]

T = TypeVar("T")


def shown_range(lo: float | None, hi: float | None, lo_open: bool = False, hi_open: bool = False) -> str:
    """How a range reads in a message: ``[1, 64]``, ``(0, 1]``, ``>= 1``, ``> 0``, ``<= 5`` (or ``""``)."""
    if lo is not None and hi is not None:
        return f"{'(' if lo_open else '['}{_plain(lo)}, {_plain(hi)}{')' if hi_open else ']'}"
    if lo is not None:
        return f"{'>' if lo_open else '>='} {_plain(lo)}"
    if hi is not None:
        return f"{'<' if hi_open else '<='} {_plain(hi)}"
    return ""


def _plain(bound: float) -> str:
    return str(bound) if isinstance(bound, int) else f"{bound:g}"


def _inside(value: float, lo, hi, lo_open: bool, hi_open: bool) -> bool:
    if lo is not None and (value <= lo if lo_open else value < lo):
        return False
    return hi is None or (value < hi if hi_open else value <= hi)


def _fail(name: str, value: Any, kind: str, shown: str, bounded: bool, typed: bool, unit: str) -> ConfigError:
    if typed and type(value) not in (int, float) and hasattr(value, "item"):
        value = value.item()  # a NumPy scalar shows as the number it is
    if typed and bounded:  # a value of the right kind outside a bounded range
        return ConfigError(f"{name}={value!r} is out of range: allowed {shown}{' ' + unit if unit else ''}")
    where = f" in {shown}" if bounded else (f" {shown}" if shown else "")
    return ConfigError(f"{name}={value!r} must be {kind}{' of ' + unit if unit else ''}{where}")


def check_int(name: str, value: Any, lo: int | None = None, hi: int | None = None) -> int:
    """``value`` as an ``int`` when it is an integer (not a bool, not a float) in ``[lo, hi]``
    (either bound may be None); else ``ConfigError`` naming ``name``, the value and the range."""
    shown = shown_range(lo, hi)
    typed = isinstance(value, Integral) and not isinstance(value, bool)
    if not typed or not _inside(value, lo, hi, False, False):
        raise _fail(name, value, "an integer", shown, lo is not None and hi is not None, typed, "")
    return int(value)


def check_number(
    name: str,
    value: Any,
    lo: float | None = None,
    hi: float | None = None,
    *,
    lo_open: bool = False,
    hi_open: bool = False,
    unit: str = "",
) -> float:
    """``value`` as a ``float`` when it is a finite number (not a bool) in the range from ``lo`` to
    ``hi`` (each end closed unless ``lo_open``/``hi_open``; either may be None); else ``ConfigError``
    naming ``name``, the value, the range and ``unit`` (``seconds``)."""
    shown = shown_range(lo, hi, lo_open, hi_open)
    typed = isinstance(value, Real) and not isinstance(value, bool)
    if not typed or not (math.isfinite(value) and _inside(value, lo, hi, lo_open, hi_open)):
        kind = "a finite number" if typed and not math.isfinite(value) else "a number"
        raise _fail(name, value, kind, shown, lo is not None and hi is not None, typed, unit)
    return float(value)


def check_choice(name: str, value: T, choices: Iterable[T]) -> T:
    """``value`` when it is one of ``choices``; else ``ConfigError`` listing them."""
    allowed = tuple(choices)
    if value not in allowed:
        raise ConfigError(f"{name}={value!r} is unknown: allowed {', '.join(map(str, allowed))}")
    return value


def check_bool(name: str, value: Any) -> bool:
    """``value`` when it is a bool (not 0 or 1, not a string); else ``ConfigError``."""
    if not isinstance(value, bool):
        raise ConfigError(f"{name}={value!r} must be true or false")
    return value
