"""Checks remember what they worked out (a schedule's answer at the evaluation instant, ...)
or take a shortcut (required tags spelled as required, no exemption among keys met before,
whether telemetry decides without the words why not): whatever was asked before, a check that
remembers must answer what a fresh one answers, and a shortcut what the long way does."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.core import offhours
from engine.core.catalog import builtin_catalog
from engine.core.checks import off_hours
from engine.core.checks.activity_below import ActivityBelow
from engine.core.checks.right_size import RightSize
from engine.core.conditions import Condition, EvalContext, compile_condition
from engine.core.labels import EXEMPT_KEYS, canonical, exempt_policies, missing_tags, normalize_key
from engine.core.model import Resource, Telemetry

_CATALOG = builtin_catalog()
_OFFHOURS_PARAMS = {"default_schedule": "off=(M-F,19);on=(M-F,7);tz=utc",
                    "schedule_tag": "gpuwarden-offhours"}
_SCHEDULES = [
    "", "off", "on", "off=(M-F,19);on=(M-F,7);tz=pt", "off=(M-F,19);on=(M-F,7);tz=PT",
    "off=[(M-F,21),(U,18)];on=(M-F,6)", "offu3du28M-Fu2c19u29", "off=(S,0);on=disabled",
    "off=(M-F,19);tz=Europe/Berlin", "not a schedule", "off=(X,19)", "tz=nowhere",
]
# Monday 2026-11-30, at every few hours of a week and across the spring DST change in Berlin
_INSTANTS = [datetime(2026, 11, 30, tzinfo=UTC) + timedelta(hours=hours)
             for hours in range(0, 7 * 24, 5)] + [datetime(2026, 3, 29, 1, 30, tzinfo=UTC)]


def _resource(schedule: str, on_annotation: bool) -> Resource:
    where = "annotations" if on_annotation else "tags"
    return Resource.model_validate({
        "provider": "kubernetes", "kind": "Deployment", "category": "workload", "id": "w",
        "name": "w", "state": "running", where: {"gpuwarden-offhours": schedule},
    })


def _offhours() -> Condition:
    return compile_condition({"offhours": {}}, _OFFHOURS_PARAMS)


def _answers(condition: Condition, resource: Resource, now: datetime
             ) -> tuple[Any, dict[str, Any]]:
    ctx = EvalContext(now=now, catalog=_CATALOG)
    return condition.test(resource, ctx), condition.evidence(resource, ctx)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(_SCHEDULES), st.booleans(),
                          st.sampled_from(_INSTANTS), st.booleans()), max_size=30))
def test_offhours_answers_what_a_fresh_check_answers(
        asked: list[tuple[str, bool, datetime, bool]]) -> None:
    """Asked in any order, at instants that change (as equal copies or not), the check that
    remembers says what a check asked once says."""
    remembering = _offhours()
    for schedule, on_annotation, instant, copied in asked:
        now = instant.replace() if copied else instant  # an equal instant, another object
        resource = _resource(schedule, on_annotation)
        assert _answers(remembering, resource, now) == _answers(_offhours(), resource, now)


@given(st.sampled_from(_SCHEDULES[3:9]), st.sampled_from(_INSTANTS))
def test_offhours_says_what_the_schedule_says(schedule: str, now: datetime) -> None:
    off, evidence = _answers(_offhours(), _resource(schedule, False), now)
    parsed = offhours.parse_schedule(schedule)
    assert off == parsed.is_off(now)
    assert evidence["schedule"] == schedule
    assert evidence["off_fraction"] == parsed.off_fraction()


def test_offhours_evidence_is_the_callers_to_change() -> None:
    check, resource = _offhours(), _resource("", False)
    _answers(check, resource, _INSTANTS[0])[1]["schedule"] = "changed"
    assert _answers(check, resource, _INSTANTS[0])[1]["schedule"] != "changed"


def test_offhours_remembers_a_bounded_number_of_short_schedules() -> None:
    check = _offhours()
    now = _INSTANTS[0]
    long_text = "off=(M-F,19);" + " " * off_hours._MAX_REMEMBERED_CHARS
    for index in range(off_hours._MAX_REMEMBERED + 10):
        padded = f"off=(M-F,{index % 24}){' ' * (index // 24)};on=(M-F,7)"  # all different
        _answers(check, _resource(padded, False), now)
    assert _answers(check, _resource(long_text, False), now)[0] is not None
    remembered = check._answers[1]  # type: ignore[attr-defined]
    assert 0 < len(remembered) <= off_hours._MAX_REMEMBERED
    assert all(len(text) <= off_hours._MAX_REMEMBERED_CHARS for text in remembered)


_TAG_KEYS = ["team", "Team", " TEAM", "project", "cost-center", "cost_center", "Cost_Center",
             "owner", "env"]


@given(st.dictionaries(st.sampled_from(_TAG_KEYS), st.sampled_from(["", "  ", "x", "ml"])),
       st.lists(st.sampled_from(_TAG_KEYS), max_size=4))
def test_missing_tags_are_those_no_normalized_key_with_a_value_matches(
        tags: dict[str, str], required: list[str]) -> None:
    present = {normalize_key(key) for key, value in tags.items() if value.strip()}
    assert missing_tags(tags, required) == [key for key in required
                                            if normalize_key(key) not in present]


@pytest.mark.parametrize("path", ["tags", "encrypted", "customer_key", "checkpoint_uri"])
@pytest.mark.parametrize("marked", [(), ("tags",), ("encrypted", "gpu"), ("customer_key",),
                                    ("checkpoint_uri",), ("tags.team",)])
def test_a_field_without_parents_is_unknown_exactly_when_marked(path: str,
                                                                marked: tuple[str, ...]) -> None:
    """The checks read these marks directly instead of through `Resource.is_unknown`."""
    resource = _resource("", False).model_copy(update={"unknown": frozenset(marked)})
    assert resource.is_unknown(path) == (path in resource.unknown)


_LABEL_KEYS = ["team", "env", "Name", "gpuwarden-exempt", "GPUWARDEN_EXEMPT", "gpuwarden.io/exempt",
               "example.com/exempt", "exempt"]
_LABELS = st.dictionaries(st.sampled_from(_LABEL_KEYS),
                          st.sampled_from(["", "all", "gpu-idle, gpu-spot-required", "x"]))


def _exempt_the_long_way(*sources: dict[str, str]) -> set[str]:
    wanted = {normalize_key(key) for key in EXEMPT_KEYS}
    return {part for source in sources for key, value in source.items()
            if normalize_key(key) in wanted and value
            for part in re.split(r"[\s,_]+", canonical(value)) if part}


@given(st.lists(st.tuples(_LABELS, _LABELS), max_size=20))
def test_exemptions_are_what_reading_every_key_finds(
        asked: list[tuple[dict[str, str], dict[str, str]]]) -> None:
    """Whatever keys were met before (remembered as no exemption keys)."""
    for tags, notes in asked:
        resource = _resource("", False).model_copy(update={"tags": tags, "annotations": notes})
        assert exempt_policies(resource) == _exempt_the_long_way(tags, notes)


def _tags_missing() -> Condition:
    return compile_condition({"tags-missing": {"billing": True}},
                             {"required_tags": ["team", "project", "cost-center"]})


def _tagged(tags: dict[str, str], billing_tags: dict[str, str] | None) -> Resource:
    return _resource("", False).model_copy(update={"tags": tags, "billing_tags": billing_tags})


_TAGS = st.dictionaries(st.sampled_from(_TAG_KEYS), st.sampled_from(["", "x", "ml"]), max_size=4)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(_TAGS, st.none() | _TAGS, st.booleans()), max_size=20))
def test_tags_missing_answers_what_a_fresh_check_answers(
        asked: list[tuple[dict[str, str], dict[str, str] | None, bool]]) -> None:
    """Tested or not before its evidence is asked, on tags the last test saw or others."""
    remembering = _tags_missing()
    ctx = EvalContext(now=_INSTANTS[0], catalog=_CATALOG)
    for tags, billing_tags, tested in asked:
        resource = _tagged(tags, billing_tags)
        if tested:
            assert remembering.test(resource, ctx) == _tags_missing().test(resource, ctx)
        evidence = remembering.evidence(resource, ctx)
        assert evidence == _tags_missing().evidence(resource, ctx)
        evidence.get("missing_tags", []).append("changed")  # the caller's to change


def test_tags_missing_remembers_tags_as_they_were_tested() -> None:
    check, ctx = _tags_missing(), EvalContext(now=_INSTANTS[0], catalog=_CATALOG)
    resource = _tagged({"team": "ml"}, None)
    assert check.test(resource, ctx) is True
    resource.tags["project"] = "p"  # changed in place after the test
    assert check.evidence(resource, ctx)["missing_tags"] == ["cost-center"]


_TELEMETRY = st.none() | st.builds(
    Telemetry, average_activity_pct=st.none() | st.sampled_from([0.0, 4.9, 5.0, 60.0]),
    samples=st.sampled_from([0, 1, 12]), window_seconds=st.sampled_from([0, 3599, 3600, 604800]),
    peak_memory_gib=st.none() | st.just(3.0), reason=st.none() | st.just("stale samples"))


@given(_TELEMETRY)
def test_activity_decides_exactly_when_no_reason_says_why_not(telemetry: Telemetry | None) -> None:
    check = compile_condition({"activity-below": {}}, {"threshold_pct": 5, "window": "1h"})
    assert isinstance(check, ActivityBelow)
    resource = _resource("", False).model_copy(update={"telemetry": telemetry})
    decided = check.test(resource, EvalContext(now=_INSTANTS[0], catalog=_CATALOG)) is not None
    assert decided == (check._undecided(telemetry) is None)


@given(_TELEMETRY)
def test_right_size_judges_telemetry_exactly_when_no_reason_says_why_not(
        telemetry: Telemetry | None) -> None:
    check = compile_condition({"right-size": {}}, {"window": "1h", "memory_threshold_pct": 50,
                                                   "legacy_busy_pct": 50})
    assert isinstance(check, RightSize)
    assert (check._judged(telemetry) is not None) == (check._why_undecided(telemetry) is None)
