"""Remembered messages (`engine.core.template_memo`) read exactly as rendered ones."""

from __future__ import annotations

import random
from typing import Any

import pytest

from engine.core import template_memo
from engine.core.model import Capacity, GpuSpec, Resource
from engine.core.templates import MAX_OUTPUT, MessageTemplate, compile_message
from engine.loading.policies import load_policies

NAMES = ["trainer", "a  b", " lead\nnewline ", " padded ", "\tx", "{{ r.name }}", "", "ü",
         "x" * (MAX_OUTPUT + 50), "y" * (MAX_OUTPUT - 60)]
COUNTS: list[Any] = [1, 1.0, 2, 0.5, None, -0.0, 0.0, True]
MODELS = [None, "T4", "NVIDIA A100 80GB SXM", ""]
COSTS: list[Any] = [0.0, -0.0, 1.0, 1, 12.345, float("nan"), True]
DETAILS: list[dict[str, Any]] = [
    {}, {"missing_tags": ["team"], "schedule": "off=(M-F,19)"}, {"missing_tags": ("team",)},
    {"missing_tags": ["team", "project"], "labels_billing_never_sees": ["team"]},
    {"missing_tags": [], "labels_billing_never_sees": []}, {"schedule": None},
]


def _resource(rng: random.Random) -> Resource:
    count = rng.choice(COUNTS)
    gpu = None if rng.random() < 0.2 else GpuSpec.model_construct(
        model=rng.choice(MODELS), count=count, mig_count=0)
    return Resource(provider="aws", kind="aws_instance", category="instance",
                    id=f"i-{rng.randint(0, 9)}", name=rng.choice(NAMES), gpu=gpu,
                    count=rng.choice([1, 2]), capacity=rng.choice(list(Capacity)),
                    unknown=rng.choice([frozenset(), frozenset({"count"}),
                                        frozenset({"gpu.count", "count"})]))


def _values(rng: random.Random) -> dict[str, Any]:
    resource = _resource(rng)
    return {"resource": resource, "r": resource, "params": {"require_customer_key": True},
            "details": rng.choice(DETAILS), "cost": rng.choice(COSTS),
            "verdict": rng.choice(["fail", "pass", "unknown"])}


def _templates() -> list[str]:
    builtin = [p.spec.message for p in load_policies(["builtin"]) if p.spec.message]
    return [
        *builtin,
        "{{ r.name }} {{ cost }} {{ r.gpu.count }} {{ details.missing_tags }}",
        "{{ r.name }}{{ 1 / cost }}",  # fails for some values: never remembered
        "{{ r.name }} {{ r.gpu.count ~ '' ~ r.count }} {{ details['schedule'] }}",
        "{{ r.unknown }} {{ r.capacity }} {{ r.name }}{{ r.name }}",
        "{% if not r.gpu or r.gpu.count %}{{ r.name }} has{% endif %} {{ cost | round(1) }}",
    ]


@pytest.mark.parametrize("source", _templates())
def test_remembered_messages_are_the_rendered_ones(source: str) -> None:
    template = compile_message(source)
    plain = MessageTemplate(source, template.template, budgeted=template.budgeted)
    rng = random.Random(7)
    for _ in range(400):
        values = _values(rng)
        assert template.render(values, fallback="T") == plain.render(values, fallback="T")


def test_builtin_messages_are_remembered_and_hit() -> None:
    template = compile_message("{{ r.name }} runs {{ r.gpu.model }} for {{ cost | usd }}")
    assert template.memo is not None
    rng = random.Random(3)
    for _ in range(200):
        template.render(_values(rng), fallback="T")
    assert 0 < len(template.memo.texts) < 40  # names differ, texts are shared


@pytest.mark.parametrize("source", [
    "{% for t in details.missing_tags %}{{ t }}{% endfor %}",  # a loop
    "{{ details.get('x') }}",  # a call
    "{{ r.name }} {{ r.name[:3] }}",  # the name printed, and read another way
])
def test_what_the_memo_cannot_key_is_rendered_as_usual(source: str) -> None:
    assert compile_message(source).memo is None


def test_a_name_read_other_than_printed_is_part_of_the_key() -> None:
    memo = compile_message("{{ r.name | upper }} {{ cost }}").memo
    assert memo is not None and memo.named == ()
    assert any(read.chain == ("r", (("attr", "name"),)) for read in memo.reads)


def test_values_that_are_not_plain_are_rendered_as_usual() -> None:
    template = compile_message("{{ r.name }}: {{ r.gpu }} {{ details.x }}")
    rng = random.Random(1)
    values = _values(rng) | {"details": {"x": {"nested": 1}}}
    assert template.memo is not None
    assert template.memo.key(values) is None
    assert "nested" in template.render(values, fallback="T")
    assert not template.memo.texts


def test_a_set_shadowing_an_input_is_rendered_as_usual() -> None:
    template = compile_message("{% set cost = 5 %}{{ r.name }} {{ cost }}")
    rng = random.Random(2)
    assert template.memo is not None
    values = _values(rng)
    assert template.memo.key(values) is None
    assert template.render(values, fallback="T").endswith(" 5")


def test_the_memo_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(template_memo, "MAX_REMEMBERED", 5)
    template = compile_message("{{ r.name }} {{ cost }}")
    rng = random.Random(5)
    for number in range(50):
        template.render(_values(rng) | {"cost": float(number)}, fallback="T")
    assert template.memo is not None and len(template.memo.texts) <= 5


def test_long_texts_and_long_lists_are_not_remembered() -> None:
    template = compile_message("{{ r.name }} {{ details.missing_tags | join(',') }}")
    rng = random.Random(9)
    long_list = _values(rng) | {"details": {"missing_tags": [f"t{n}" for n in range(500)]}}
    assert template.memo is not None
    assert template.memo.key(long_list) is None
    short_name = _resource(rng).model_copy(update={"name": "n"})
    long_text = {"r": short_name, "details": {"missing_tags": ["x" * 2_000]}}
    assert template.render(long_text, fallback="T").endswith("x" * 2_000)
    assert not template.memo.texts
