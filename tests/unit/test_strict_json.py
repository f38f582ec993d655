"""JSON every parser reads (rpc_harness.strict_json): NaN and infinities
as null however deep, and a file never left half written."""

from __future__ import annotations

import io
import json
import math

import pytest

from rpc_harness.strict_json import dump, finite


def test_every_non_finite_number_is_null_however_deep():
    value = {"a": math.nan, "b": [1.5, math.inf, (-math.inf, 2)], "c": {"d": math.nan}, "e": "nan"}
    assert finite(value) == {"a": None, "b": [1.5, None, [None, 2]], "c": {"d": None}, "e": "nan"}


def test_a_dump_is_the_finite_values_json_with_the_options_given():
    out = io.StringIO()
    dump({"loss": math.nan, "steps": [1, 2], "seen": {3}}, out, default=repr, sort_keys=True)
    assert out.getvalue() == '{"loss": null, "seen": "{3}", "steps": [1, 2]}'
    assert json.loads(out.getvalue(), parse_constant=lambda name: pytest.fail(name))["loss"] is None


def test_a_non_finite_number_made_by_default_is_refused_and_nothing_is_written():
    out = io.StringIO()
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        dump({"ok": 1, "odd": object()}, out, default=lambda value: math.nan)
    assert out.getvalue() == ""
