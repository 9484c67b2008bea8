"""`tags-missing`: a required tag is missing or empty.

With `billing: true` (the cost-allocation policy), a cloud resource's tags are those billing
sees (`Resource.billing_tags`): the Kubernetes node labels a node group gives its nodes do not
allocate its cost. Kubernetes workloads keep their labels."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.core.check_args import TagsArgs
from engine.core.conditions import Check, EvalContext, param_value, register_check
from engine.core.labels import RequiredTags, missing_tags
from engine.core.model import Resource
from engine.core.tristate import Tri


class TagsMissing(Check):
    key = "tags-missing"
    description = "Any required tag is missing or empty (case-insensitive keys, '-' and '_' equal)."
    Args = TagsArgs
    shorthand = "tags"

    def __init__(self, args: TagsArgs, params: Mapping[str, Any]):
        super().__init__(args, params)
        required = args.tags if args.tags is not None else param_value(params, args.param, None)
        if not isinstance(required, list) or not all(isinstance(t, str) for t in required):
            raise ValueError("required tags must be a list of strings")
        self.required: list[str] = list(required)
        self._required = RequiredTags(self.required)
        self.billing = args.billing
        # Tags (a copy, matched by content) and the required keys they miss: those the last
        # failing test saw, as its finding's evidence asks of the same tags next.
        self._last_missing: tuple[dict[str, str], list[str]] = ({}, self._required.missing({}))

    def _tags(self, resource: Resource) -> dict[str, str]:
        if self.billing and resource.billing_tags is not None:
            return resource.billing_tags
        return resource.tags

    def test(self, resource: Resource, ctx: EvalContext) -> Tri:
        if "tags" in resource.unknown:
            return None
        tags = self._tags(resource)
        missing = self._required.missing(tags)
        if missing:
            self._last_missing = (dict(tags), missing)
        return bool(missing)

    def _missing(self, tags: dict[str, str]) -> list[str]:
        """`missing_tags`, as the last failing test found it when it tested these tags."""
        last_tags, missing = self._last_missing
        return list(missing) if tags == last_tags else self._required.missing(tags)

    def evidence(self, resource: Resource, ctx: EvalContext) -> dict[str, Any]:
        if "tags" in resource.unknown:
            return {"unknown": ["tags"]}
        tags = self._tags(resource)
        missing = self._missing(tags)
        evidence: dict[str, Any] = {"missing_tags": missing}
        if tags is resource.tags:  # each missing key is missing from the tags themselves
            return evidence
        labels_only = [key for key in missing if key not in missing_tags(resource.tags, [key])]
        if labels_only:
            evidence["labels_billing_never_sees"] = labels_only
        return evidence


register_check(TagsMissing)
