"""Shortcuts of the checks that scopes and violations test on every resource: keys known not
to matter, answers laid out per enum member, remembered figures. Whatever was asked before, a
shortcut must answer what the long way does, and nothing about one resource may outlive a
change to it."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import Enum
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.core import catalog as catalog_module
from engine.core import labels
from engine.core.catalog import Catalog, builtin_catalog
from engine.core.checks.has_gpu import without_gpu_test
from engine.core.checks.mig_fits import MigFit
from engine.core.checks.right_size import RightSize
from engine.core.conditions import AllCondition, EvalContext, ValueCondition, compile_condition
from engine.core.labels import RequiredTags, environment, is_production, missing_tags
from engine.core.model import Capacity, Category, GpuSpec, Resource, State

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
    for every member, a value assigned without validation, and a field marked unknown; its
    evidence (from its answer) is the general path's too."""
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
        assert condition.evidence(resource, _CTX) == \
            ValueCondition.evidence(condition, resource, _CTX)


_GPU_MODELS = st.sampled_from([None, "NVIDIA A100 80GB SXM", "NVIDIA-A100-SXM4-40GB", "NVIDIA-H100",
                               "NVIDIA-H200", "NVIDIA T4", "a100", ""])
_MEMORIES = st.sampled_from([None, 0.0, -0.0, 5.0, 9.5, 40, 80.0, 141.0, float("nan")])
_NO_MIG_CATALOG = Catalog(mig_profiles={})


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_GPU_MODELS, _MEMORIES, _MEMORIES, st.booleans(),
                          st.sampled_from([0.0, 0.2, 1.0]), st.sampled_from([0.25, 0.5, 1.0])),
                min_size=1, max_size=10))
def test_mig_checks_answer_what_the_catalog_says(
        asked: list[tuple[str | None, float | None, float | None, bool, float, float]]) -> None:
    """`mig-capable` and `mig-fits` ask the catalog, which remembers its answers by GPU
    model, memory and need (and the check's headroom and fraction): whatever was asked before,
    of whichever catalog, they answer what the catalog says."""
    for model, memory, need, other_catalog, headroom, fraction in asked:
        catalog = _NO_MIG_CATALOG if other_catalog else _CATALOG
        ctx = EvalContext(now=_CTX.now, catalog=catalog)
        resource = Resource(provider="kubernetes", kind="Pod", category=Category.WORKLOAD,
                            id="p", name="p", gpu=GpuSpec(model=model, count=1, memory_gib=memory,
                                                          declared_memory_gib=need))
        family = catalog.mig_family(model, memory)
        capable = compile_condition({"mig-capable": True}, {})
        assert capable.test(resource, ctx) is (family is not None)
        fits = compile_condition({"mig-fits": {}}, {"headroom": headroom, "max_fraction": fraction})
        assert isinstance(fits, MigFit)
        fit = None if family is None or need is None \
            else catalog.smallest_mig_fit(family, need, headroom, fraction)
        assert fits.profile(resource, ctx) == fit
        assert fits.test(resource, ctx) is (None if need is None else fit is not None)


def test_catalog_lookups_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(catalog_module, "MAX_REMEMBERED", 8)
    catalog = Catalog(mig_profiles={})
    for key in range(20):
        assert catalog.remembered(("test", key), lambda: key * 2) == key * 2  # noqa: B023
        assert len(catalog._by_model) <= 8
    assert catalog.remembered(("test", 19), lambda: -1) == 38  # remembered: not computed


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([None, "", "p4de.24xlarge", "p4d.24xlarge",
                                           "p5.48xlarge", "g5.xlarge", "no-such-type"]),
                          st.booleans()), min_size=1, max_size=10))
def test_right_size_finds_the_sibling_the_catalog_finds(
        asked: list[tuple[str | None, bool]]) -> None:
    """`right-size` asks the catalog for each type's smaller sibling, which it remembers:
    whatever was asked before, of whichever catalog, it is the one the catalog finds."""
    check = compile_condition({"right-size": {}}, {"window": "7d", "memory_threshold_pct": 50,
                                                   "legacy_busy_pct": 40})
    assert isinstance(check, RightSize)
    for instance_type, other_catalog in asked:
        catalog = Catalog() if other_catalog else _CATALOG
        resource = Resource(provider="aws", kind="aws_instance", category=Category.INSTANCE,
                            id="i", name="i", instance_type=instance_type,
                            gpu=GpuSpec(model="NVIDIA A100", count=8, memory_gib=80.0))
        _, sibling = check.sibling_fits(resource, EvalContext(now=_CTX.now, catalog=catalog))
        assert sibling == catalog.smaller_sibling(instance_type)


_VALUES_OF_FIELDS = st.sampled_from([None, "x", "", True, False, 0, 1, 2.5, Capacity.UNKNOWN,
                                     State.RUNNING])


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["kind", "region", "encrypted", "count", "owner", "state"]),
       st.sampled_from(["eq", "ne", "in", "not-in"]), _VALUES_OF_FIELDS,
       st.lists(_VALUES_OF_FIELDS, max_size=3), st.booleans())
def test_a_field_filter_answers_as_the_general_filter(field: str, op: str, value: Any,
                                                      expected: list[Any],
                                                      marked_unknown: bool) -> None:
    """A filter on a field of the resource itself answers, and shows evidence, as the general
    path does, whatever the field holds (also a value assigned without validation)."""
    wanted: Any = expected if op in ("in", "not-in") else (expected[0] if expected else "x")
    condition = compile_condition({"field": field, "op": op, "value": wanted}, {})
    assert isinstance(condition, ValueCondition)
    resource = _resource({}, {}, frozenset({field}) if marked_unknown else frozenset())
    setattr(resource, field, value)
    assert condition.test(resource, _CTX) is ValueCondition.test(condition, resource, _CTX)
    assert condition.evidence(resource, _CTX) == ValueCondition.evidence(condition, resource, _CTX)


def test_a_scope_less_its_gpu_test_is_what_is_left_of_it() -> None:
    """With GPUs, `has-gpu: true` holds and is left out; one item left is tested alone (an
    `all:` of one answers what its item answers)."""
    alone = compile_condition({"all": [{"has-gpu": True}, {"production": False}]}, {})
    assert isinstance(alone, AllCondition)
    assert without_gpu_test(alone) is alone.items[1]
    two = compile_condition({"all": [{"has-gpu": True}, {"production": False},
                                     {"field": "state", "op": "eq", "value": "running"}]}, {})
    assert isinstance(two, AllCondition)
    left = without_gpu_test(two)
    assert isinstance(left, AllCondition) and left.items == two.items[1:]
    assert without_gpu_test(compile_condition({"all": [{"has-gpu": True}]}, {})) is None
