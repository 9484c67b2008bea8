"""`production`: the resource is tagged or labelled as production."""

from __future__ import annotations

from typing import Any

from engine.core.check_args import FlagArgs
from engine.core.conditions import Check, EvalContext, register_check
from engine.core.labels import is_production
from engine.core.model import Resource
from engine.core.tristate import Tri


class Production(Check):
    key = "production"
    description = (
        "Tag/label env or environment is prod or production (key case-insensitive); "
        "on Kubernetes the workload's labels, else its namespace's."
    )
    Args = FlagArgs
    shorthand = "expected"
    evidence_only_when_unknown = True

    def test(self, resource: Resource, ctx: EvalContext) -> Tri:
        production = is_production(resource)
        return None if production is None else production == self.args.expected

    def evidence(self, resource: Resource, ctx: EvalContext) -> dict[str, Any]:
        return {"unknown": ["tags"]} if is_production(resource) is None else {}


register_check(Production)
