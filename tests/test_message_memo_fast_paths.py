"""The message memo's fast paths held to the general ones: each attribute reader to jinja2's
own sandbox, and remembered texts (keys, names put into collapsed pieces) to plain renders."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jinja2.runtime import Undefined
from jinja2.sandbox import ImmutableSandboxedEnvironment

from engine.core.model import Capacity, Category, GpuSpec, Resource
from engine.core.templates import ENVIRONMENT, MAX_OUTPUT, MessageTemplate, compile_message

FAST = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

ATTRIBUTES = ["name", "gpu", "count", "model", "value", "capacity", "schedule", "items", "get",
              "model_copy", "has_gpu", "mro", "upper", "missing", "unknown", "tags"]
texts = st.text(alphabet=st.sampled_from("ab \t\n\x00ü{}%"), max_size=8)
floats = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([0.0, -0.0, 1.0])
scalars = st.none() | st.booleans() | st.integers(-3, 3) | floats | texts
plain = scalars | st.lists(scalars, max_size=3) | st.lists(texts, max_size=3).map(tuple) \
    | st.frozensets(texts, max_size=3) | st.sampled_from(list(Capacity))
# a field may hold anything when a model is built without validation: a method the sandbox
# refuses (one that mutates), a callable, a dict
oddities = st.sampled_from([[].append, {}.pop, len, str.upper, {"nested": 1}, object()])


@st.composite
def gpus(draw: st.DrawFn) -> GpuSpec | None:
    if draw(st.booleans()):
        return None
    return GpuSpec.model_construct(model=draw(st.none() | texts | oddities),
                                   count=draw(plain), mig_count=0)


@st.composite
def resources(draw: st.DrawFn) -> Resource:
    name = draw(texts | st.sampled_from(["trainer", "x" * (MAX_OUTPUT - 40), "n" * 2_000]))
    return Resource.model_construct(
        provider="aws", kind="aws_instance", category=draw(st.sampled_from(list(Category))),
        id="i-1", name=name, gpu=draw(gpus()), count=draw(plain | oddities),
        capacity=draw(st.sampled_from(list(Capacity))), unknown=draw(st.frozensets(texts)),
        tags={}, namespace=None)


details = st.dictionaries(st.sampled_from(["schedule", "missing_tags", "items", "x", "get"]),
                          plain | oddities, max_size=3)
objects = resources() | gpus() | details | plain | oddities


@FAST
@given(st.lists(st.tuples(objects, st.sampled_from(ATTRIBUTES)), min_size=1, max_size=12))
def test_each_attribute_reader_reads_as_jinja2s_sandbox(reads: list[tuple[Any, str]]) -> None:
    """Readers remember what a name means per type: reads of many types through one reader
    (and through `ENVIRONMENT.getattr`) give what a fresh sandbox gives, or raise as it does
    (a property of a model built from odd values)."""
    reference = ImmutableSandboxedEnvironment()
    for obj, attribute in reads:
        expected = _outcome(reference.getattr, obj, attribute)
        assert _same(_outcome(ENVIRONMENT.attribute_reader(attribute), obj), expected)
        assert _same(_outcome(ENVIRONMENT.getattr, obj, attribute), expected)


def _outcome(read: Any, *args: Any) -> tuple[str, Any]:
    try:
        return "value", read(*args)
    except Exception as exc:  # what the sandbox raises, the reader must raise
        return "raised", type(exc)


def _same(got: tuple[str, Any], expected: tuple[str, Any]) -> bool:
    (how, value), (expected_how, reference) = got, expected
    if how != expected_how or how == "raised":
        return how == expected_how and value is reference
    if isinstance(reference, Undefined):
        return isinstance(value, Undefined)
    if callable(reference) and not isinstance(reference, type):
        return type(value) is type(reference)
    if isinstance(reference, float) and math.isnan(reference):
        return isinstance(value, float) and math.isnan(value)
    return value is reference or (type(value) is type(reference) and bool(value == reference))


TEMPLATES = [
    "{{ r.name }} {{ cost }} {{ r.gpu.count }} {{ r.gpu.model }} {{ details.missing_tags }}",
    "{{ r.name }} on {{ r.capacity.value }}{% if r.gpu %} with {{ r.gpu.count }}{% endif %}",
    "{{ r.name }}/{{ resource.name }} {{ r.name }} {{ details['schedule'] }} {{ verdict }}",
    "{{ cost }} {{ details.x }} {{ r.unknown }} {{ r.count }}",  # no name printed
    "  {{ r.name }}\n\n {{ details.schedule or 'none' }}{{ r.name }}  ",
    "{{ r.name }} {{ r.category.value }} {{ 'tagged' if details.missing_tags else '' }}",
    "{{ r.name }} {{ 10 / cost }}",  # fails for some values: never remembered
]


@st.composite
def values(draw: st.DrawFn) -> dict[str, Any]:
    resource = draw(resources())
    other = resource if draw(st.booleans()) else draw(resources())
    return {"r": resource, "resource": other, "details": draw(details),
            "cost": draw(floats | st.integers(-2, 2)),
            "verdict": draw(st.sampled_from(["fail", "pass"]))}


@FAST
@given(st.sampled_from(TEMPLATES), st.lists(values(), min_size=1, max_size=25))
def test_remembered_messages_are_the_rendered_ones(source: str,
                                                   renders: list[dict[str, Any]]) -> None:
    """One template across many findings (so later ones hit what earlier ones remembered)
    gives, finding by finding, the text a plain render gives."""
    template = compile_message(source)
    assert template.memo is not None
    plain = MessageTemplate(source, template.template, budgeted=template.budgeted)
    for found in renders:
        assert template.render(found, fallback="T") == plain.render(found, fallback="T")


def test_zeros_of_either_sign_and_nans_are_keyed_apart() -> None:
    template = compile_message("{{ r.name }} saves {{ cost }}")
    resource = Resource(provider="aws", kind="k", category="instance", id="i", name="n")
    for cost, shown in [(0.0, "0.0"), (-0.0, "-0.0"), (0, "0"), (False, "False"),
                        (float("nan"), "nan"), (1.0, "1.0"), (1, "1"), (True, "True")]:
        assert template.render({"r": resource, "cost": cost}, fallback="T") == f"n saves {shown}"
