"""Reading plans for the PR check: one normalization for policies and the cost diff, and the
plan read without the parts nothing but `input: plan` policies reads (`whole=False`).

What is checked: the lean read keeps exactly what the normalizers read and refuses what the
whole read refuses with the same line; `plan_inputs` equals `plan_resources` and
`plan_cost_changes` computed apart; `json_int` and `tidy_json` bound numbers, surrogates and
nesting as `tidy_document` does.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from engine.core.errors import InputError
from engine.inputfiles import MAX_DEPTH, json_int, tidy_document, tidy_json
from engine.sources.terraform import (
    plan_cost_changes,
    plan_inputs,
    plan_resources,
    read_plan,
    read_plan_inputs,
)
from engine.sources.terraform.document import NORMALIZED_KEYS
from tests.conftest import REFERENCE

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
from gen_plan import generate_plan, write_plan  # noqa: E402

SHIPPED_PLANS = [*sorted((REFERENCE / "terraform-plans").glob("*.json")),
                 REPO / "tests" / "data" / "terraform-capacity" / "plan.json"]


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("reading") / "plan-300.json"
    write_plan(path, generate_plan(changes=300, seed=7))
    return path


def _write(tmp_path: Path, text: str | bytes) -> str:
    path = tmp_path / "plan.json"
    if isinstance(text, str):
        text = text.encode("utf-8")
    path.write_bytes(text)
    return str(path)


def _outcome(path: str, *, whole: bool) -> dict[str, Any] | str:
    try:
        return read_plan(path, whole=whole)
    except InputError as exc:
        return f"error: {exc}"


# ---------------------------------------------------------------------------- the lean read


@pytest.mark.parametrize("path", SHIPPED_PLANS, ids=lambda p: p.stem)
def test_the_lean_read_keeps_what_the_normalizers_read(path: Path) -> None:
    whole = read_plan(str(path))
    lean = read_plan(str(path), whole=False)
    assert list(lean) == list(whole)  # every key, in order
    for key, value in lean.items():
        assert value == (whole[key] if key in NORMALIZED_KEYS else None), key


def test_the_lean_read_drops_planned_values_and_prior_state(generated: Path) -> None:
    lean = read_plan(str(generated), whole=False)
    assert lean["planned_values"] is None and lean["prior_state"] is None
    assert len(lean["resource_changes"]) == 300
    assert lean["configuration"] == read_plan(str(generated))["configuration"]


def _deep(levels: int) -> str:
    return "[" * levels + "]" * levels


HOSTILE = {
    "truncated": '{"resource_changes": [',
    "trailing garbage": '{"resource_changes": []} x',
    "two documents": '{"resource_changes": []}\n{"resource_changes": []}',
    "a list": "[]",
    "a string": '"plan"',
    "missing colon": '{"resource_changes" []}',
    "trailing comma": '{"resource_changes": [],}',
    "non-string key": '{1: []}',
    "single quotes": "{'resource_changes': []}",
    "deep in a dropped key": '{"resource_changes": [], "planned_values": ' + _deep(MAX_DEPTH + 5)
    + "}",
    "deep in a kept key": '{"resource_changes": ' + _deep(MAX_DEPTH + 5) + "}",
    "past the recursion limit in a dropped key": '{"resource_changes": [], "prior_state": '
    + _deep(100_000) + "}",
    "a 5000-digit number in a dropped key": '{"resource_changes": [], "planned_values": '
    + "9" * 5000 + "}",
    "a control character in a dropped key": '{"resource_changes": [], "planned_values": '
    '"a\x01b"}',
    "a state file": '{"values": {}, "lineage": "x", "serial": 3}',
    "no changes": '{"format_version": "1.2", "variables": {}}',
    "bad format_version": '{"format_version": "9.0", "resource_changes": []}',
}


@pytest.mark.parametrize("text", HOSTILE.values(), ids=HOSTILE.keys())
def test_the_lean_read_refuses_what_the_whole_read_refuses(tmp_path: Path, text: str) -> None:
    path = _write(tmp_path, text)
    whole, lean = _outcome(path, whole=True), _outcome(path, whole=False)
    assert isinstance(whole, str) and whole.startswith("error: "), whole
    assert lean == whole


ACCEPTED = {
    "whitespace everywhere": ' \n\t{ "resource_changes" :\r\n [ ] , "planned_values" : { } }\n',
    "empty object values": '{"resource_changes": [], "planned_values": {}}',
    "duplicate keys, last wins": '{"resource_changes": [1], "configuration": {"a": 1}, '
    '"resource_changes": [], "configuration": {"b": 2}}',
    "a lone surrogate": '{"resource_changes": [], "configuration": {"k\\ud800": "\\udfff"}}',
    "big integers": '{"resource_changes": [], "configuration": {"a": 18446744073709551616, '
    '"b": -9223372036854775809, "c": 18446744073709551615, "d": ' + "1" + "0" * 400 + "}}",
    "NaN and infinities": '{"resource_changes": [], "configuration": {"a": NaN, "b": -Infinity}}',
    "escaped key": '{"resource_\\u0063hanges": [], "configuration": null}',
}


@pytest.mark.parametrize("text", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_the_lean_read_reads_what_the_whole_read_reads(tmp_path: Path, text: str) -> None:
    path = _write(tmp_path, text)
    whole, lean = read_plan(path), read_plan(path, whole=False)
    assert list(lean) == list(whole)
    for key in NORMALIZED_KEYS & whole.keys():
        assert json.dumps(lean[key]) == json.dumps(whole[key])  # NaN == NaN here


def test_a_bom_and_utf16_read_the_same_lean_or_whole(tmp_path: Path) -> None:
    text = '{"resource_changes": [], "configuration": {"name": "caf\u00e9"}}'
    for data in (b"\xef\xbb\xbf" + text.encode(), text.encode("utf-16")):
        path = _write(tmp_path, data)
        assert read_plan(path, whole=False)["configuration"] == {"name": "caf\u00e9"}
        assert read_plan(path)["configuration"] == {"name": "caf\u00e9"}


def test_invalid_utf8_after_a_bom_names_the_byte_and_line(tmp_path: Path) -> None:
    path = _write(tmp_path, b'\xef\xbb\xbf{\n"resource_changes": [],\n"x": "\xff"}')
    with pytest.raises(InputError) as raised:
        read_plan(path)
    assert "byte 0xff" in str(raised.value) and raised.value.line == 3


# ---------------------------------------------------------------------------- numbers and tidying


@pytest.mark.parametrize("literal", ["0", "-0", "42", "18446744073709551615",
                                     "-9223372036854775808", "18446744073709551616",
                                     "-9223372036854775809", "1" + "0" * 400])
def test_json_int_reads_integers_as_tidy_document_leaves_them(literal: str) -> None:
    expected = tidy_document([int(literal)], "f", 10)[0]
    found = json_int(literal)
    assert found == expected and type(found) is type(expected)


def test_json_int_refuses_past_the_digit_limit() -> None:
    with pytest.raises(ValueError):
        json_int("9" * 5000)


def test_tidy_json_replaces_lone_surrogates_and_bounds_nesting() -> None:
    text = '{"k\\ud800": ["\\udfff"]}'
    assert tidy_json(json.loads(text), text, "f") == {"k\ufffd": ["\ufffd"]}
    deep = _deep(MAX_DEPTH + 1)
    with pytest.raises(InputError, match="nested more than"):
        tidy_json(json.loads(deep), deep, "f")


# ---------------------------------------------------------------------------- one normalization


@pytest.mark.parametrize("path", [*SHIPPED_PLANS, None], ids=lambda p: p.stem if p else "gen")
def test_plan_inputs_equal_the_two_normalizations_apart(path: Path | None,
                                                        generated: Path) -> None:
    source = str(path or generated)
    plan = read_plan(source)
    inputs = plan_inputs(plan, source)
    assert inputs.resources == plan_resources(read_plan(source), source)
    assert inputs.cost_changes == plan_cost_changes(read_plan(source), source)
    assert inputs.documents == []


def test_the_after_side_of_the_cost_diff_is_what_policies_evaluate(generated: Path) -> None:
    inputs = plan_inputs(read_plan(str(generated)), str(generated))
    evaluated = {id(resource) for resource in inputs.resources}
    after = [r for change in inputs.cost_changes if change.action != "no-op" for r in change.after]
    assert after and all(id(resource) in evaluated for resource in after)


def test_read_plan_inputs_keeps_documents_only_when_asked(generated: Path) -> None:
    from engine.core.catalog import builtin_catalog

    paths = [str(generated), str(SHIPPED_PLANS[0])]
    lean = read_plan_inputs(paths, builtin_catalog(), keep_documents=False)
    whole = read_plan_inputs(paths, builtin_catalog(), keep_documents=True)
    assert lean.documents == [] and whole.documents == [read_plan(p) for p in paths]
    assert lean.resources == whole.resources and lean.cost_changes == whole.cost_changes
    assert lean.resources == [r for p in paths for r in plan_resources(read_plan(p), p)]
