"""The shape of a `terraform show -json` plan document, checked before anything reads it.

A state file, a document without changes, an unsupported `format_version` or a change missing
what every reader relies on is an `InputError` naming the file (and the change).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from engine.core.errors import InputError, printable
from engine.inputfiles import identifier

SUPPORTED_FORMAT_MAJORS = frozenset({0, 1})

SHOW_JSON_HINT = "run `terraform show -json PLAN > plan.json` and pass plan.json"

# The top-level keys of a plan that the normalizers read (`PlanIndex`, `NormalizedPlan`); the
# rest (planned_values, prior_state, ...) only `input: plan` policies see.
NORMALIZED_KEYS = frozenset({"format_version", "resource_changes", "configuration"})

# The actions whose planned object policies evaluate: creates, updates and replaces.
EVALUATED_ACTIONS = (
    ("create",),
    ("update",),
    ("delete", "create"),
    ("create", "delete"),
)


def check_plan_document(document: Any, source: str) -> None:
    """Raise `InputError` unless `document` looks like `terraform show -json` output of a plan."""
    if not isinstance(document, dict):
        raise InputError(
            f"expected a JSON object, found {json_type(document)}; {SHOW_JSON_HINT}",
            file=source,
        )
    if "resource_changes" not in document and "planned_values" not in document:
        if _looks_like_state(document):
            raise InputError(
                "this is a Terraform state file, not a plan; create a plan with "
                "`terraform plan -out=PLAN` and " + SHOW_JSON_HINT,
                file=source,
            )
        raise InputError(
            "not a Terraform plan: no resource_changes or planned_values; " + SHOW_JSON_HINT,
            file=source,
        )
    _check_format_version(document.get("format_version"), source)
    changes = document.get("resource_changes")
    if changes is not None and not isinstance(changes, list):
        raise InputError(
            f"resource_changes must be a list, found {json_type(changes)}", file=source
        )


def check_change(change: Any, position: int, source: str) -> None:
    """Raise `InputError` unless `change` has the structure every reader relies on. Its address
    becomes an `identifier` (one line, bounded) in place, for joins, ids and messages alike."""
    where = f"resource_changes[{position}]"
    if not isinstance(change, dict):
        raise InputError(f"{where} must be an object, found {json_type(change)}", file=source)
    address = change.get("address")
    if not isinstance(address, str) or not address:
        raise InputError(f"{where} has no address", file=source)
    address = change["address"] = identifier(address)
    if not isinstance(change.get("type", ""), str):
        raise InputError(f"{printable(address)}: type must be a string, found "
                         f"{json_type(change['type'])}", file=source)
    body = change.get("change")
    if not isinstance(body, dict):
        raise InputError(f"{printable(address)}: 'change' must be an object", file=source)
    actions = body.get("actions")
    if not isinstance(actions, list) or not all(isinstance(a, str) for a in actions):
        raise InputError(f"{printable(address)}: change.actions must be a list of strings",
                         file=source)
    after = body.get("after")
    if tuple(actions) in EVALUATED_ACTIONS and not isinstance(after, dict):
        raise InputError(f"{printable(address)}: change.after must be an object", file=source)


def _looks_like_state(document: Mapping[str, Any]) -> bool:
    return "values" in document or ("resources" in document and "lineage" in document)


def _check_format_version(version: Any, source: str) -> None:
    if version is None:
        return  # hand-written plans often omit it; everything else is checked on its own
    found = re.match(r"(\d+)\.\d+", version) if isinstance(version, str) else None
    if found is None or int(found.group(1)) not in SUPPORTED_FORMAT_MAJORS:
        raise InputError(
            f"unsupported plan format_version {printable(repr(version), 40)} (supported: 0.x "
            "and 1.x)", file=source
        )


def json_type(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    if isinstance(value, int | float) and not isinstance(value, bool):
        return "a number"
    return names.get(type(value), type(value).__name__)
