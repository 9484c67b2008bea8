"""Gatekeeper templates that read `data.inventory`, evaluated by the embedded engine and by OPA's
own evaluator (the oracle of tests/test_rego_differential.py) on the library's suite cases,
with the inventory built as the webhook builds it; and an evaluator whose data the webhook
replaced (`replace_data`) answering as OPA does with the new data."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.rego.common import RegoModule
from engine.rego.gatekeeper import read_template
from engine.rego.inputs import request_for_manifest
from engine.webhook.caches import StaticLister
from engine.webhook.inventory import Gvk, read_inventory
from tests.test_rego_differential import canonical, embedded_answers, opa_answer

pytest.importorskip("regorus")
from engine.rego.embedded import EmbeddedEvaluator

LIBRARY = Path(__file__).parent / "data" / "gatekeeper"
INVENTORY_TEMPLATES = ["uniqueingresshost", "uniqueserviceselector"]


def _cases() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for name in INVENTORY_TEMPLATES:
        suite = yaml.safe_load((LIBRARY / name / "suite.yaml").read_text())
        found.extend((name, case) for test in suite["tests"] for case in test["cases"])
    return found


def _inventory(kinds: list[Gvk], objects: list[dict[str, Any]]) -> dict[str, Any]:
    listed: dict[Gvk, tuple[bool, list[dict[str, Any]]]] = {}
    for obj in objects:
        group, _, version = obj["apiVersion"].rpartition("/")
        listed.setdefault(Gvk(group, version, obj["kind"]), (True, []))[1].append(obj)
    return read_inventory(StaticLister(objects=listed), kinds, dra_claims=False).document(kinds)


def _setup(name: str, case: dict[str, Any]) -> tuple[list[tuple[str, str]], dict[str, Any],
                                                       dict[str, Any], str]:
    base = LIBRARY / name
    template = read_template(base / "template.yaml")
    kinds = [Gvk(k["group"], k["version"], k["kind"]) for k in template.sync]
    objects = [yaml.safe_load((base / p).read_text()) for p in case.get("inventory", [])]
    obj = yaml.safe_load((base / case["object"]).read_text())
    input_doc = {"review": request_for_manifest(obj), "parameters": {}}
    return ([(f"{template.name}.rego", template.rego)], {"inventory": _inventory(kinds, objects)},
            input_doc, f"data.{template.package}.violation")


@pytest.mark.parametrize(("name", "case"), _cases(),
                         ids=[f"{n}-{c['name']}" for n, c in _cases()])
def test_inventory_templates_answer_as_opa(name: str, case: dict[str, Any]) -> None:
    modules, data, input_doc, path = _setup(name, case)
    embedded = embedded_answers(modules, data, [path], input_doc)[path]
    opa = opa_answer(modules, data, path, input_doc)
    assert canonical(embedded) == canonical(opa), (embedded, opa)
    assert embedded[0] == "value"
    wants_violation = case["assertions"][0]["violations"] in ("yes", True)
    assert bool(embedded[1]) is wants_violation


def test_replaced_data_answers_as_opa_with_the_new_data() -> None:
    """One evaluator, its data.inventory replaced between evaluations, as the webhook does after
    a cache refresh: each answer is OPA's for the data of the moment."""
    cases = [case for name, case in _cases() if name == "uniqueingresshost"]
    modules, _, _, path = _setup("uniqueingresshost", cases[0])
    evaluator = EmbeddedEvaluator([RegoModule(n, t) for n, t in modules], {},
                                  entry_points=[path])
    answers = []
    for case in cases + cases[::-1]:
        _, data, input_doc, _ = _setup("uniqueingresshost", case)
        evaluator.replace_data(data)
        values = evaluator.evaluate([path], input_doc, "admission")
        opa = opa_answer(modules, data, path, input_doc)
        assert canonical(("value", values[path]) if path in values else ("undefined", None)) \
            == canonical(opa), case["name"]
        answers.append(bool(values.get(path)))
    assert answers == [False, True, True, True, True, False]
