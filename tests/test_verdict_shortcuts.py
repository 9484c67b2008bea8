"""Shortcuts of the checks that scopes and violations test on every resource: keys known not
to matter, answers laid out per enum member, remembered figures. Whatever was asked before, a
shortcut must answer what the long way does, and nothing about one resource may outlive a
change to it."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import Enum
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.core import labels
from engine.core.catalog import builtin_catalog
from engine.core.conditions import EvalContext, ValueCondition, compile_condition
from engine.core.labels import RequiredTags, environment, is_production, missing_tags
from engine.core.model import Capacity, Category, Resource, State

_KEYS = st.sampled_from(["env", "Environment", "STAGE", "tier", "team", "k8s:stage", "Name",
                         "app.kubernetes.io/env", " env ", "env_", "owner", "cost-center"])
_VALUES = st.sampled_from(["prod", "Production", "dev", "non-prod", "prd-eu", "staging", "",
                           "qa"]) | st.text(max_size=8)
_LABELS = st.dictionaries(_KEYS, _VALUES, max_size=5)


def _resource(tags: dict[str, str], namespace_labels: dict[str, str],
              unknown: frozenset[str] = frozenset()) -> Resource:
    return Resource(provider="kubernetes", category=Category.WORKLOAD, kind="Pod", id="p",
                    name="p", tags=tags, namespace_labels=namespace_labels, unknown=unknown)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_LABELS, _LABELS), min_size=1, max_size=8))
def test_production_is_the_reasoned_answer_whatever_keys_were_met(
        asked: list[tuple[dict[str, str], dict[str, str]]]) -> None:
    """Keys met that are no environment key are skipped afterwards: an environment key is
    never among them, however it is spelled."""
    for tags, namespace_labels in asked:
        resource = _resource(tags, namespace_labels)
        assert is_production(resource) is environment(tags, namespace_labels).production
    assert not any(labels.is_environment_key(key) for key in labels._NOT_ENVIRONMENT_KEYS)


def test_a_changed_resource_gets_a_fresh_production_answer() -> None:
    """Nothing of a resource is remembered: its tags changed in place, or marked unknown,
    change the answer at once."""
    resource = _resource({"env": "dev"}, {"environment": "production"})
    assert is_production(resource) is False
    resource.tags["env"] = "prod"
    assert is_production(resource) is True
    del resource.tags["env"]
    assert is_production(resource) is True  # its namespace's labels now decide
    resource.namespace_labels["environment"] = "dev"
    assert is_production(resource) is False
    resource.unknown = frozenset({"tags"})
    assert is_production(resource) is None


def test_keys_known_not_to_be_environment_keys_are_bounded() -> None:
    for number in range(labels._MAX_KNOWN_KEYS + 10):
        assert is_production(_resource({f"key-{number}": "prod"}, {})) is False
    assert len(labels._NOT_ENVIRONMENT_KEYS) <= labels._MAX_KNOWN_KEYS
    long_key = "k" * (labels._MAX_KEY_CHARS + 1)
    assert is_production(_resource({long_key: "prod"}, {})) is False
    assert long_key not in labels._NOT_ENVIRONMENT_KEYS
    assert is_production(_resource({"key-1": "dev", "Env": "prod"}, {})) is True


_TAG_KEYS = st.sampled_from(["team", "Team", " TEAM ", "cost_center", "cost-center",
                             "Cost-Center", "project", "Project\u200b", "\uff54\uff45\uff41\uff4d",
                             "Name", "owner", "env"])
_TAG_VALUES = st.sampled_from(["", " ", "\t", "ml", "x"])


@settings(max_examples=200, deadline=None)
@given(st.lists(_TAG_KEYS, max_size=4),
       st.lists(st.dictionaries(_TAG_KEYS, _TAG_VALUES, max_size=6), min_size=1, max_size=8))
def test_required_tags_miss_what_missing_tags_finds(required: list[str],
                                                     asked: list[dict[str, str]]) -> None:
    """Keys met that match no required key are skipped afterwards: whatever tags came
    before, the required tags miss what `missing_tags` finds."""
    matcher = RequiredTags(required)
    for tags in asked:
        assert matcher.missing(tags) == missing_tags(tags, required)


def test_keys_unrelated_to_the_required_tags_are_bounded() -> None:
    matcher = RequiredTags(["team"])
    for number in range(labels._MAX_KNOWN_KEYS + 10):
        assert matcher.missing({f"key-{number}": "v"}) == ["team"]
    assert len(matcher._unrelated) <= labels._MAX_KNOWN_KEYS
    assert matcher.missing({"key-1": "v", "TEAM": "ml"}) == []


_ENUM_FIELDS = {"state": State, "capacity": Capacity, "category": Category}
_CATALOG = builtin_catalog()
_CTX = EvalContext(now=datetime(2026, 11, 30, tzinfo=UTC), catalog=_CATALOG)


def _expected_values(enum: type[Enum]) -> st.SearchStrategy[Any]:
    words = st.sampled_from([*(member.value for member in enum), "Running", "", "other"])
    return words | st.lists(words, max_size=3)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(_ENUM_FIELDS)), st.sampled_from(["eq", "ne", "in", "not-in"]),
       st.data(), st.booleans())
def test_an_enum_field_answers_as_the_general_filter(field: str, op: str, data: st.DataObject,
                                                      marked_unknown: bool) -> None:
    """A filter on an enum field answers from a table per member: as the general path does,
    for every member, a value assigned without validation, and a field marked unknown."""
    enum = _ENUM_FIELDS[field]
    expected = data.draw(_expected_values(enum))
    if op in ("in", "not-in") and not isinstance(expected, list):
        expected = [expected]
    if op in ("eq", "ne") and isinstance(expected, list):
        expected = expected[0] if expected else "running"
    condition = compile_condition({"field": field, "op": op, "value": expected}, {})
    assert isinstance(condition, ValueCondition)
    unknown = frozenset({field}) if marked_unknown else frozenset()
    for value in [*enum, "unknown", "running"]:
        resource = _resource({}, {}, unknown)
        setattr(resource, field, value)  # a plain string: assigned without validation
        assert condition.test(resource, _CTX) is ValueCondition.test(condition, resource, _CTX)

