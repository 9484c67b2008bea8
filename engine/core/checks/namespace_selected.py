"""`namespace-selected`: the resource's Kubernetes namespace is labelled or listed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.core.check_args import NamespaceArgs
from engine.core.conditions import Check, EvalContext, param_value, register_check
from engine.core.model import Resource
from engine.core.tristate import Tri


class NamespaceSelected(Check):
    key = "namespace-selected"
    description = (
        "The resource's Kubernetes namespace carries the label `label` with value `value`, or is "
        "listed in the `namespaces_param` parameter."
    )
    Args = NamespaceArgs

    def __init__(self, args: NamespaceArgs, params: Mapping[str, Any]):
        super().__init__(args, params)
        listed = [] if args.namespaces_param is None else param_value(params, args.namespaces_param)
        if not isinstance(listed, list) or not all(isinstance(n, str) for n in listed):
            raise ValueError(f"parameter {args.namespaces_param!r} must be a list of names")
        self.namespaces = frozenset(listed)

    def test(self, resource: Resource, ctx: EvalContext) -> Tri:
        if resource.namespace is None:
            return False
        labelled = resource.namespace_labels.get(self.args.label) == self.args.value
        return labelled or resource.namespace in self.namespaces


register_check(NamespaceSelected)
