"""Three-valued (Kleene) logic: True, False, or None for "not known yet".

`all`/`any` over conditions are evaluated inline in `engine.core.conditions` (a hot path).
"""

from __future__ import annotations

Tri = bool | None


def negate(value: Tri) -> Tri:
    return None if value is None else not value
