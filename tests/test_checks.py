"""The one check of a setting (``pipeline/checks.py``): what it accepts, and a message that names
the setting, the value and what is allowed; and that no config raises a plain ValueError or TypeError."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pytest
from layout import source_modules
from pipeline.reports import ReportConfig

from pipeline import grade
from pipeline.checks import check_bool, check_choice, check_int, check_number, shown_range
from pipeline.errors import ConfigError
from pipeline.sample import SamplingParams

PACKAGE = Path(__file__).resolve().parents[1] / "pipeline"


@pytest.mark.parametrize(
    ("args", "shown"),
    [
        ((1, 64), "[1, 64]"),
        ((0, 1, True, False), "(0, 1]"),
        ((0, 1, True, True), "(0, 1)"),
        ((0.5, 2.5), "[0.5, 2.5]"),
        ((1, None), ">= 1"),
        ((0, None, True), "> 0"),
        ((None, 5), "<= 5"),
        ((None, None), ""),
        ((0, 2**63 - 1), "[0, 9223372036854775807]"),  # an int bound in full, not 9.2e+18
    ],
)
def test_ranges_read_as_intervals(args, shown):
    assert shown_range(*args) == shown


def test_an_integer_in_range_passes_and_comes_back_as_int():
    assert check_int("n", 1, 1, 4) == 1 and check_int("n", 4, 1, 4) == 4
    assert check_int("seed", -7) == -7  # no bounds: any integer
    value = check_int("n", np.int64(3), 1)
    assert value == 3 and type(value) is int


@pytest.mark.parametrize(
    ("value", "lo", "hi", "message"),
    [
        (0, 1, 4, "n=0 is out of range: allowed [1, 4]"),
        (5, 1, 4, "n=5 is out of range: allowed [1, 4]"),
        (0, 1, None, "n=0 must be an integer >= 1"),
        (2.0, 1, 4, "n=2.0 must be an integer in [1, 4]"),
        (True, 1, 4, "n=True must be an integer in [1, 4]"),  # a bool is not a count
        (True, 0, None, "n=True must be an integer >= 0"),
        ("3", None, None, "n='3' must be an integer"),
        (None, 1, None, "n=None must be an integer >= 1"),
        (np.int64(-1), 0, None, "n=-1 must be an integer >= 0"),  # a NumPy scalar reads as its number
    ],
)
def test_a_bad_integer_names_the_setting_the_value_and_the_range(value, lo, hi, message):
    with pytest.raises(ConfigError) as err:
        check_int("n", value, lo, hi)
    assert str(err.value) == message


def test_a_number_in_range_passes_as_float():
    assert check_number("p", 1, 0, 1) == 1.0 and type(check_number("p", 1, 0, 1)) is float
    assert check_number("p", np.float32(0.5), 0, 1) == 0.5
    assert check_number("t", 3600, 0, 3600, lo_open=True) == 3600.0
    assert check_number("x", -1e300) == -1e300  # no bounds: any finite number


@pytest.mark.parametrize(
    ("value", "kwargs", "message"),
    [
        (0, {"lo": 0, "hi": 1, "lo_open": True}, "p=0 is out of range: allowed (0, 1]"),
        (1.0, {"lo": 0, "hi": 1, "hi_open": True}, "p=1.0 is out of range: allowed [0, 1)"),
        (float("nan"), {"lo": 0, "hi": 1}, "p=nan is out of range: allowed [0, 1]"),
        (0.0, {"lo": 0, "lo_open": True}, "p=0.0 must be a number > 0"),
        (float("inf"), {"lo": 0, "lo_open": True}, "p=inf must be a finite number > 0"),
        (float("inf"), {}, "p=inf must be a finite number"),
        (False, {"lo": 0, "hi": 1}, "p=False must be a number in [0, 1]"),
        ("0.5", {"lo": 0, "hi": 1}, "p='0.5' must be a number in [0, 1]"),
        (0, {"lo": 0, "hi": 60, "lo_open": True, "unit": "seconds"}, "p=0 is out of range: allowed (0, 60] seconds"),
        ("x", {"lo": 0, "hi": 60, "unit": "seconds"}, "p='x' must be a number of seconds in [0, 60]"),
        (-1, {"lo": 0, "unit": "seconds"}, "p=-1 must be a number of seconds >= 0"),
        (np.float64(2.0), {"hi": 1}, "p=2.0 must be a number <= 1"),
    ],
)
def test_a_bad_number_names_the_setting_the_value_and_the_range(value, kwargs, message):
    with pytest.raises(ConfigError) as err:
        check_number("p", value, **kwargs)
    assert str(err.value) == message


def test_choices_and_bools():
    assert check_choice("mode", "fill", ("fill", "resample")) == "fill"
    assert check_choice("trainer", "trl", {"trl": 1e-4, "verl": 1e-6}) == "trl"  # a mapping's keys
    with pytest.raises(ConfigError) as err:
        check_choice("mode", "pad", ("fill", "resample"))
    assert str(err.value) == "mode='pad' is unknown: allowed fill, resample"
    assert check_bool("norm", False) is False
    for bad in (1, "yes", None):
        with pytest.raises(ConfigError, match=re.escape(f"norm={bad!r} must be true or false")):
            check_bool("norm", bad)


def test_configs_check_with_it():
    """The configs of grading, sampling and the report raise ConfigError naming the setting (no
    plain TypeError for a value of the wrong type)."""
    with pytest.raises(ConfigError, match=re.escape("workers=1.5 must be an integer in [1, 256]")):
        grade.GradeConfig(workers=1.5)
    with pytest.raises(ConfigError, match=re.escape("grade_workers=0 is out of range: allowed [1, 256]")):
        grade.check_workers(0, "grade_workers")
    with pytest.raises(ConfigError, match=re.escape("temperature='hot' must be a number in [0, 10]")):
        SamplingParams(temperature="hot")
    with pytest.raises(ConfigError, match=re.escape("top=0.5 must be an integer >= 1")):
        ReportConfig(top=0.5)


# Plain ValueError/TypeError raised on purpose in pipeline/: each an internal contract, not a user's value.
PLAIN_RAISES = {
    "pipeline/datasets.py": 1,  # json.dumps's ``default`` hook must raise TypeError
    "reports/load.py": 1,  # load_run called with something that is not a Store (a caller's bug)
    "reports/charts.py": 1,  # a chart built without its captions (a section's bug)
}


def test_no_plain_value_or_type_error_for_user_input():
    found: dict[str, int] = {}
    for path in source_modules().values():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            exc = node.exc if isinstance(node, ast.Raise) else None
            exc = exc.func if isinstance(exc, ast.Call) else exc
            if isinstance(exc, ast.Name) and exc.id in ("ValueError", "TypeError"):
                key = str(path.relative_to(PACKAGE.parent))  # the repository root
                found[key] = found.get(key, 0) + 1
    assert found == PLAIN_RAISES, "raise ConfigError (pipeline.checks) for a user's value"
