"""One field-names set per model class, shared by the many models a large scan holds.

pydantic gives every model instance its own `__pydantic_fields_set__` (the fields given at
construction): 216 to 2,264 bytes each, the largest part of a normalized resource and about
half of a finding (a finding, its resource reference and its remediation: 1.2 KB). gpuwarden
never reads it (no `exclude_unset`, no `model_fields_set`: `tests/test_snapshot_scale.py`
keeps it so), so a scan's long-lived models can share one set per class naming every field.
It stays a mutable set because pydantic adds a name on assignment; every name is in it already.
"""

from __future__ import annotations

from pydantic import BaseModel

_SHARED: dict[type[BaseModel], set[str]] = {}


def share_fields_set(model: BaseModel) -> None:
    """Give `model` its class's shared set of field names in place of its own."""
    cls = type(model)
    shared = _SHARED.get(cls)
    if shared is None:
        shared = _SHARED[cls] = set(cls.model_fields)
    object.__setattr__(model, "__pydantic_fields_set__", shared)
