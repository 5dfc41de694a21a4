"""The one ``name[:key=value,...]`` grammar (pipeline.specs) and its one message style, as the
estimator registry, the adaptive targets and the round rules use it."""

from __future__ import annotations

import re

import pytest

from pipeline import adaptive, specs
from pipeline import estimators as est
from pipeline.errors import ConfigError


def test_names_and_typed_parameters():
    assert specs.parse_spec("grpo", "estimator") == ("grpo", {})
    assert specs.parse_spec(" band : lo = 0.2 , hi=0.8 ", "adaptive target") == ("band", {"lo": "0.2", "hi": "0.8"})
    assert specs.parse_spec("band:", "adaptive target") == ("band", {})  # empty items are skipped
    assert specs.parse_spec("band:lo=0.1,,hi=0.9", "t", {"lo": float, "hi": float}) == ("band", {"lo": 0.1, "hi": 0.9})
    assert specs.parse_spec("step:k=1,k=3", "round rule", {"k": int}) == ("step", {"k": 3})  # the last one counts
    name, params = specs.parse_spec(
        "x:a=4.0,b=1e3,c=TRUE,d=no,e=resample,f=0.5",
        "x",
        {"a": int, "b": "int", "c": bool, "d": "bool", "e": str, "f": "float | None"},
    )
    assert params == {"a": 4, "b": 1000, "c": True, "d": False, "e": "resample", "f": 0.5}
    assert isinstance(params["a"], int) and isinstance(params["b"], int)
    assert specs.spec_name(" dapo : mode=resample") == "dapo"


@pytest.mark.parametrize(
    ("text", "params", "message"),
    [
        (
            "band:h=0.1",
            {"lo": float, "hi": float},
            "t 'band:h=0.1': bad parameter 'h=0.1'; band takes lo, hi (as band:key=value,...)",
        ),
        ("band:lo", {"lo": float}, "t 'band:lo': bad parameter 'lo'; band takes lo (as band:key=value,...)"),
        ("band:=1", None, "t 'band:=1': bad parameter '=1'; band takes any key=value (as band:key=value,...)"),
        ("grpo:tau=1", {}, "t 'grpo:tau=1': bad parameter 'tau=1'; grpo takes no parameters (as grpo:key=value,...)"),
        ("band:lo=x", {"lo": float}, "t 'band:lo=x': lo='x' is not a number"),
        ("step:k=2.5", {"k": int}, "t 'step:k=2.5': k='2.5' must be an integer"),
        ("step:k=x", {"k": int}, "t 'step:k=x': k='x' must be an integer"),
        ("step:k=inf", {"k": int}, "t 'step:k=inf': k='inf' must be an integer"),
        ("s:on=maybe", {"on": bool}, "t 's:on=maybe': on='maybe' must be true or false (also 1/0, yes/no)"),
    ],
)
def test_one_message_style_names_the_spec_the_part_and_what_is_allowed(text, params, message):
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        specs.parse_spec(text, "t", params)


@pytest.mark.parametrize(
    ("parse", "text", "message"),
    [
        (
            est.get,
            "grpo:tau=1",
            "estimator 'grpo:tau=1': bad parameter 'tau=1'; grpo takes no parameters (as grpo:key=value,...)",
        ),
        (est.get, "dapo:T=2.5", "estimator 'dapo:T=2.5': T='2.5' must be an integer"),
        (est.get, "softmax_grpo:tau=x", "estimator 'softmax_grpo:tau=x': tau='x' is not a number"),
        (
            adaptive.Target.parse,
            "band:h=0.1",
            "adaptive target 'band:h=0.1': bad parameter 'h=0.1'; band takes lo, hi, delta",
        ),
        (adaptive.Target.parse, "band:lo=x", "adaptive target 'band:lo=x': lo='x' is not a number"),
        (
            adaptive.RoundRule.parse,
            "step:budget=3",
            "round rule 'step:budget=3': bad parameter 'budget=3'; step takes k",
        ),
        (adaptive.RoundRule.parse, "greedy:k=1.5", "round rule 'greedy:k=1.5': k='1.5' must be an integer"),
    ],
)
def test_every_user_of_the_grammar_speaks_the_same_way(parse, text, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse(text)


def test_users_parse_as_before():
    assert est.get("dapo:mode=resample,T=4") == est.DAPO(mode="resample", T=4)
    assert adaptive.Target.parse("band:lo=0.2,hi=0.8").spec == "band:lo=0.2,hi=0.8,delta=0.05,cost=0.001"
    # cost=0 (stop as soon as decided) keeps the spec runs had before the price existed
    assert adaptive.Target.parse("band:lo=0.2,hi=0.8,cost=0").spec == "band:lo=0.2,hi=0.8,delta=0.05"
    assert adaptive.RoundRule.parse("step").spec == "step:k=4"
    assert adaptive.RoundRule.parse("greedy:k=2,budget=4").spec == "greedy:k=2,budget=4"
    assert adaptive.RoundRule.parse("greedy:k=2,budget=4,jumps=1").spec == "greedy:k=2,budget=4,jumps=1"


def test_split_specs_keeps_parameters_with_their_spec():
    assert specs.split_specs("grpo,dapo:mode=resample,T=4,softmax_grpo:tau=0.3") == [
        "grpo",
        "dapo:mode=resample,T=4",
        "softmax_grpo:tau=0.3",
    ]
    assert specs.split_specs(" grpo , ,rloo,") == ["grpo", "rloo"]
    assert specs.split_specs("") == []
